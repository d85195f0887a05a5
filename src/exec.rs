//! The `exec` space: any program is a search space. Each chunk runs the user's command once, directly (no
//! shell), with `{chunk}`, `{chunks}` and `{job}` replaced in its arguments, and reads JSON lines from its
//! stdout:
//!
//! - `{"progress": NODES}`: nodes so far in this chunk (forwarded with heartbeats, so bars move);
//! - `{"checkpoint": "TEXT"}`: where the chunk is; kept by the coordinator, and handed to the next attempt of
//!   the chunk (on any worker) as `SWEEP_RESUME=TEXT`;
//! - exactly one final `{"nodes": N, "counters": {...}, "solutions": [...]}`.
//!
//! Exit 0 with one valid final line is a done chunk; anything else is a failed attempt whose error carries the
//! exit status and the tail of stderr. The program runs in its own process group, in a private working
//! directory, with a cleared environment (see [`ENVIRONMENT`]); cancellation sends SIGTERM to the group, then
//! SIGKILL after the job's grace period, and the direct child gets SIGKILL if its worker dies.
//!
//! This space does I/O (processes, files), so it lives in the binary, not in `puzzles`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sweep_space::{
    Answer, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, MAX_SHOWN_SOLUTIONS,
};

/// The documented environment of a chunk's program. Everything else of the worker's environment is cleared.
pub const ENVIRONMENT: &str = "\
SWEEP_CHUNK    this chunk's index, 0-based
SWEEP_CHUNKS   the job's number of chunks
SWEEP_JOB      the coordinator's job number (0 under `sweep solve`)
SWEEP_THREADS  threads this chunk may use (--threads-per-chunk, capped by the worker's threads)
SWEEP_RESUME   the last checkpoint an earlier attempt of this chunk wrote; unset on a first attempt
SWEEP_SHIP     the directory of the shipped files (--ship), if any; also first on PATH
PATH           the worker's PATH (with the shipped directory first)
HOME, TMPDIR   the chunk's private working directory (removed afterwards)
LANG           C.UTF-8";

/// A line longer than this on stdout is a malformed result: the program is stopped and the attempt fails.
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// How much of stderr is kept for the error report.
pub const STDERR_TAIL_BYTES: usize = 2048;
/// More chunks than this in one exec job is a typo, not a plan.
const MAX_CHUNKS: u64 = 50_000_000;

/// `sweep run exec [options] -- COMMAND [ARGS]`.
#[derive(clap::Args, Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// Threads one chunk's program uses (SWEEP_THREADS): a worker with T threads runs T / this many at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    #[serde(default = "one")]
    pub threads_per_chunk: u32,
    /// Stop a chunk's program after this many seconds; the attempt fails (and is retried elsewhere).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_timeout: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL when a chunk is cancelled, drained or timed out.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    #[serde(default = "ten")]
    pub grace_secs: u64,
    /// A file or directory to ship to the workers (stored once by the coordinator, cached by each worker).
    /// Replaced by its digest before the job is submitted.
    #[arg(long)]
    #[serde(skip)]
    pub ship: Option<PathBuf>,
    /// Run every chunk's program in this directory (absolute) instead of a private one; `sweep run` and
    /// `sweep solve` default to the directory they were started in, so `python3 count.py` finds its script.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// The blake3 digest of the shipped archive (set by `--ship`).
    #[arg(long, hide = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ship_digest: Option<String>,
    /// The command run for every chunk, after `--`: `{chunk}`, `{chunks}` and `{job}` are replaced.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn one() -> u32 {
    1
}

fn ten() -> u64 {
    10
}

pub struct Exec;

impl SearchSpace for Exec {
    const NAME: &'static str = "exec";
    const ABOUT: &'static str =
        "Any program as a search space: run once per chunk, JSON lines on stdout (see `sweep run exec --help`)";
    type Params = ExecParams;
    type Job = ExecJob;

    fn build(params: ExecParams) -> Result<ExecJob, SpaceError> {
        let Some(program) = params.command.first() else {
            return Err(SpaceError::InvalidParam {
                name: "command",
                reason: "name the program to run after `--`".into(),
            });
        };
        if program.is_empty() {
            return Err(SpaceError::InvalidParam {
                name: "command",
                reason: "the program's name is empty".into(),
            });
        }
        if params.ship.is_some() && params.ship_digest.is_some() {
            return Err(SpaceError::InvalidParam {
                name: "ship",
                reason: "give --ship PATH, not both it and a digest".into(),
            });
        }
        if let Some(w) = &params.workdir {
            if !w.is_absolute() {
                return Err(SpaceError::InvalidParam {
                    name: "workdir",
                    reason: format!("`{}` is not an absolute path", w.display()),
                });
            }
        }
        if let Some(d) = &params.ship_digest {
            if !sweep_coordinator::store::is_digest(d) {
                return Err(SpaceError::InvalidParam {
                    name: "ship_digest",
                    reason: format!("`{d}` is not a blake3 digest in lower-case hex"),
                });
            }
        }
        Ok(ExecJob {
            params,
            ship_dir: None,
        })
    }
}

#[derive(Clone, Debug)]
pub struct ExecJob {
    pub params: ExecParams,
    /// Where the shipped files were unpacked, once bound.
    ship_dir: Option<Arc<PathBuf>>,
}

/// One line of the program's stdout, parsed.
enum Event {
    Progress(u64),
    Checkpoint(String),
    Final(ChunkOutput),
    Bad(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalLine {
    nodes: u64,
    #[serde(default)]
    counters: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    solutions: Vec<String>,
}

fn parse_line(line: &str) -> Event {
    let value: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Event::Bad(format!("stdout line is not JSON ({e}): {}", clip(line))),
    };
    let Some(obj) = value.as_object() else {
        return Event::Bad(format!("stdout line is not a JSON object: {}", clip(line)));
    };
    if obj.len() == 1 {
        if let Some(p) = obj.get("progress") {
            return match p.as_u64() {
                Some(n) => Event::Progress(n),
                None => Event::Bad(format!("progress must be a node count: {}", clip(line))),
            };
        }
        if let Some(c) = obj.get("checkpoint") {
            return match c.as_str() {
                Some(t) => Event::Checkpoint(t.to_string()),
                None => Event::Bad(format!("checkpoint must be a string: {}", clip(line))),
            };
        }
    }
    let fin: FinalLine = match serde_json::from_value(value) {
        Ok(f) => f,
        Err(e) => return Event::Bad(format!("bad final line ({e}): {}", clip(line))),
    };
    let mut out = ChunkOutput {
        nodes: fin.nodes,
        solutions: fin.solutions,
        ..Default::default()
    };
    for (name, v) in fin.counters {
        let n = match &v {
            serde_json::Value::Number(n) => n.as_u64().map(u128::from),
            serde_json::Value::String(s) => s.parse::<u128>().ok(),
            _ => None,
        };
        match n {
            Some(n) => {
                out.counters.insert(name, n);
            }
            None => {
                return Event::Bad(format!(
                    "counter `{name}` must be a non-negative integer or its decimal string, not {v}"
                ))
            }
        }
    }
    Event::Final(out)
}

fn clip(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut cut = MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// Reads stdout line by line into events; a line over [`MAX_LINE_BYTES`] or invalid UTF-8 ends the stream
/// with a `Bad` event.
fn read_stdout(stdout: impl Read, tx: mpsc::Sender<Event>) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let limit = (MAX_LINE_BYTES + 1) as u64;
        match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(Event::Bad(format!("cannot read stdout: {e}")));
                return;
            }
        }
        if buf.len() > MAX_LINE_BYTES {
            let _ = tx.send(Event::Bad(format!(
                "a stdout line is longer than {MAX_LINE_BYTES} bytes"
            )));
            return;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            let _ = tx.send(Event::Bad("a stdout line is not UTF-8".into()));
            return;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if tx.send(parse_line(line)).is_err() {
            return;
        }
    }
}

/// Keeps the last [`STDERR_TAIL_BYTES`] of stderr.
fn read_stderr_tail(mut stderr: impl Read) -> Vec<u8> {
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => return tail,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > STDERR_TAIL_BYTES * 2 {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended without a status".into(),
    }
}

/// Signals every process of the group led by `pid` (ignores a group that is already gone).
fn signal_group(pid: u32, signal: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// A private working directory per chunk, removed (with whatever the program left) when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(chunk: u64) -> std::io::Result<WorkDir> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let dir = base.join(format!(
                "sweep-chunk-{}-{chunk}-{nanos:x}{attempt}",
                std::process::id()
            ));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(WorkDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for a working directory",
        ))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ExecJob {
    fn argv(&self, n_chunks: u64, chunk: u64, job: u64) -> Vec<String> {
        self.params
            .command
            .iter()
            .map(|a| {
                a.replace("{chunk}", &chunk.to_string())
                    .replace("{chunks}", &n_chunks.to_string())
                    .replace("{job}", &job.to_string())
            })
            .collect()
    }

    fn failed(&self, what: String, stderr: &[u8]) -> SpaceError {
        let text = String::from_utf8_lossy(stderr);
        let text = text.trim();
        let tail = if text.len() > STDERR_TAIL_BYTES {
            let mut cut = text.len() - STDERR_TAIL_BYTES;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            &text[cut..]
        } else {
            text
        };
        if tail.is_empty() {
            SpaceError::ChunkFailed(format!("{what}; stderr was empty"))
        } else {
            SpaceError::ChunkFailed(format!("{what}; stderr tail:\n{tail}"))
        }
    }

    fn command(
        &self,
        argv: &[String],
        dir: &Path,
        n_chunks: u64,
        chunk: u64,
        ctl: &Control,
    ) -> Command {
        let mut path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(self.params.workdir.as_deref().unwrap_or(dir))
            .env_clear()
            .env("SWEEP_CHUNK", chunk.to_string())
            .env("SWEEP_CHUNKS", n_chunks.to_string())
            .env("SWEEP_JOB", ctl.job().to_string())
            .env("SWEEP_THREADS", ctl.threads().to_string())
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(ship) = &self.ship_dir {
            let mut p = std::ffi::OsString::from(ship.as_os_str());
            p.push(":");
            p.push(&path);
            path = p;
            cmd.env("SWEEP_SHIP", ship.as_os_str());
        }
        cmd.env("PATH", path);
        if let Some(resume) = ctl.resume_state() {
            cmd.env("SWEEP_RESUME", resume);
        }
        use std::os::unix::process::CommandExt;
        // Its own group, so that cancelling reaches whatever it starts.
        cmd.process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and calls only prctl(2), which is
        // async-signal-safe; it allocates nothing and touches no lock.
        unsafe {
            cmd.pre_exec(|| {
                // If the worker dies (SIGKILL included), the program goes with it instead of running on as an
                // orphan.
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        cmd
    }

    /// Links the shipped files into the chunk's directory, so `./program` works as well as `program`.
    fn link_shipped(&self, dir: &Path) -> std::io::Result<()> {
        let Some(ship) = &self.ship_dir else {
            return Ok(());
        };
        for entry in std::fs::read_dir(ship.as_path())? {
            let entry = entry?;
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
        }
        Ok(())
    }
}

impl Job for ExecJob {
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let Some(n) = requested else {
            return Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: "an exec job needs --chunks N: the program decides what a chunk is".into(),
            });
        };
        Ok(Plan {
            n_chunks: Plan::chunk_count(Some(n), MAX_CHUNKS, n)?,
            total_nodes: None,
        })
    }

    fn run_chunk(
        &self,
        n_chunks: u64,
        chunk: u64,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError> {
        if self.params.ship_digest.is_some() && self.ship_dir.is_none() {
            return Err(SpaceError::ChunkFailed(
                "the job ships files but they were not fetched".into(),
            ));
        }
        let argv = self.argv(n_chunks, chunk, ctl.job());
        let dir = WorkDir::new(chunk).map_err(|e| {
            SpaceError::ChunkFailed(format!("cannot make a working directory: {e}"))
        })?;
        self.link_shipped(&dir.0)
            .map_err(|e| SpaceError::ChunkFailed(format!("cannot link the shipped files: {e}")))?;
        let mut child = self
            .command(&argv, &dir.0, n_chunks, chunk, ctl)
            .spawn()
            .map_err(|e| SpaceError::ChunkFailed(format!("cannot start `{}`: {e}", argv[0])))?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_reader = std::thread::spawn(move || {
            if let Some(s) = stdout {
                read_stdout(s, tx);
            }
        });
        let err_reader =
            std::thread::spawn(move || stderr.map(read_stderr_tail).unwrap_or_default());

        let started = Instant::now();
        let timeout = self.params.chunk_timeout.map(Duration::from_secs);
        let grace = Duration::from_secs(self.params.grace_secs);
        let mut last_progress = 0u64;
        let mut result: Option<ChunkOutput> = None;
        let mut problem: Option<String> = None;
        let mut stopping: Option<(Instant, &'static str)> = None;
        let mut stdout_open = true;
        let mut exit_poll = Duration::from_micros(200);
        let status = loop {
            if stdout_open {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(Event::Progress(n)) => {
                        ctl.add_nodes(n.saturating_sub(last_progress));
                        last_progress = last_progress.max(n);
                    }
                    Ok(Event::Checkpoint(text)) => {
                        if let Err(e) = ctl.save_resume_state(text) {
                            problem.get_or_insert(e.to_string());
                        }
                    }
                    Ok(Event::Final(out)) => {
                        if result.is_some() {
                            problem.get_or_insert("more than one final line".into());
                        }
                        result = Some(out);
                    }
                    Ok(Event::Bad(why)) => {
                        problem.get_or_insert(why);
                        // A malformed stream is a failed attempt: stop the program now.
                        if stopping.is_none() {
                            signal_group(pid, nix::sys::signal::Signal::SIGTERM);
                            stopping = Some((Instant::now(), "malformed output"));
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => stdout_open = false,
                }
            } else {
                // stdout closes just before the program exits: look again soon, then back off, so that a
                // program of a few milliseconds is not charged a fixed wait.
                std::thread::sleep(exit_poll);
                exit_poll = (exit_poll * 2).min(Duration::from_millis(20));
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !stdout_open || stopping.is_some() {
                        break status;
                    }
                    // Exited: drain what stdout still holds before deciding.
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    problem.get_or_insert(format!("cannot wait for the program: {e}"));
                }
            }
            let reason = if ctl.is_cancelled() {
                Some("cancelled")
            } else if ctl.is_stop_requested() {
                Some("worker stopping")
            } else if timeout.is_some_and(|t| started.elapsed() > t) {
                Some("timed out")
            } else {
                None
            };
            match (stopping, reason) {
                (None, Some(r)) => {
                    signal_group(pid, nix::sys::signal::Signal::SIGTERM);
                    stopping = Some((Instant::now(), r));
                }
                (Some((since, _)), _) if since.elapsed() >= grace => {
                    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                }
                _ => {}
            }
        };
        // Whatever the program left running in its group goes with it.
        signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = out_reader.join();
        let stderr_tail = err_reader.join().unwrap_or_default();
        match stopping {
            Some((_, "cancelled" | "worker stopping")) => return Err(SpaceError::Cancelled),
            Some((_, "timed out")) => {
                let t = self.params.chunk_timeout.unwrap_or(0);
                return Err(self.failed(
                    format!("timed out after {t} s ({})", describe(status)),
                    &stderr_tail,
                ));
            }
            _ => {}
        }
        if let Some(p) = problem {
            return Err(self.failed(format!("{p} ({})", describe(status)), &stderr_tail));
        }
        if !status.success() {
            return Err(self.failed(describe(status), &stderr_tail));
        }
        result.ok_or_else(|| {
            self.failed(
                "exit status 0 but no final {\"nodes\": ...} line on stdout".into(),
                &stderr_tail,
            )
        })
    }

    /// Only the form can be checked: the coordinator cannot re-run a program it does not have.
    fn verify(&self, _n_chunks: u64, _chunk: u64, out: &ChunkOutput) -> Result<(), SpaceError> {
        if !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "exec chunks report no artifacts".into(),
            ));
        }
        Ok(())
    }

    fn verify_counts(
        &self,
        n_chunks: u64,
        chunk: u64,
        out: &ChunkOutput,
    ) -> Result<(), SpaceError> {
        out.check_unlisted("solutions")?;
        self.verify(n_chunks, chunk, out)
    }

    fn verifiable(&self) -> bool {
        false
    }

    fn threads_per_chunk(&self) -> u32 {
        self.params.threads_per_chunk
    }

    fn shipped(&self) -> Vec<String> {
        self.params.ship_digest.iter().cloned().collect()
    }

    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        let ([archive], Some(digest)) = (artifacts, &self.params.ship_digest) else {
            return Err(SpaceError::BadParams {
                space: "exec",
                reason: format!("expected one shipped archive, got {}", artifacts.len()),
            });
        };
        let dir = unpack_once(digest, archive).map_err(|e| {
            SpaceError::ChunkFailed(format!("cannot unpack the shipped files: {e}"))
        })?;
        Ok(Arc::new(ExecJob {
            params: self.params.clone(),
            ship_dir: Some(Arc::new(dir)),
        }))
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> = answer
            .tally
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), sweep_space::json_u128(*v)))
            .collect();
        serde_json::json!({
            "command": self.params.command,
            "chunks": answer.tally.chunks,
            "nodes": sweep_space::json_u128(answer.tally.nodes),
            "counters": counters,
            "solutions": answer.solutions,
            "solutions_truncated": answer.solutions_truncated,
            "solutions_listed": answer.solutions_listed,
        })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        let mut text = format!(
            "exec `{}`: {} chunks, {} nodes\n",
            self.params.command.join(" "),
            result["chunks"],
            result["nodes"]
                .as_str()
                .map_or_else(|| result["nodes"].to_string(), str::to_string)
        );
        if let Some(counters) = result["counters"].as_object() {
            for (k, v) in counters {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                text.push_str(&format!("  {k} = {v}\n"));
            }
        }
        if let Some(sols) = result["solutions"].as_array() {
            if !sols.is_empty() {
                let listed = result["solutions_listed"]
                    .as_u64()
                    .unwrap_or(sols.len() as u64);
                text.push_str(&format!("  {listed} solutions"));
                if result["solutions_truncated"] == serde_json::json!(true) {
                    text.push_str(&format!(" (the {MAX_SHOWN_SOLUTIONS} smallest shown)"));
                }
                text.push('\n');
                for s in sols.iter().take(20) {
                    text.push_str(&format!("  {}\n", s.as_str().unwrap_or_default()));
                }
                if sols.len() > 20 {
                    text.push_str("  ...\n");
                }
            }
        }
        text
    }
}

/// Packs a file or a directory for `--ship`: a tar archive with fixed times and owners, so the same files give
/// the same digest (and are stored once) however often they are shipped.
pub fn pack(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(true);
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        builder.append_dir_all(".", path)?;
    } else {
        let name = path.file_name().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
        })?;
        builder.append_path_with_name(path, name)?;
    }
    builder.into_inner()
}

/// For `sweep run` and `sweep solve`: the command runs where the person typed it (`--workdir` set to the
/// current directory), unless they chose a directory or ship the files. Other spaces' arguments pass through.
pub fn in_current_dir(space: &str, mut args: Vec<String>) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    if space != Exec::NAME {
        return Ok(args);
    }
    let options = &args[..args.iter().position(|a| a == "--").unwrap_or(args.len())];
    let chosen = |flag: &str| {
        options
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    if chosen("--workdir") || chosen("--ship") || chosen("--ship-digest") {
        return Ok(args);
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let at = options.len();
    args.splice(at..at, ["--workdir".to_string(), cwd.display().to_string()]);
    Ok(args)
}

/// Replaces `--ship PATH` in an `exec` job's arguments by the digest of the packed files, and returns the
/// packed files: the job then names only the digest, and the files are sent to the coordinator before the
/// job is submitted. Arguments of other spaces and the command after `--` are left alone.
pub fn take_ship(space: &str, args: Vec<String>) -> anyhow::Result<(Vec<String>, Option<Shipped>)> {
    use anyhow::Context;
    if space != Exec::NAME {
        return Ok((args, None));
    }
    let mut out = Vec::with_capacity(args.len());
    let mut path = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(it.by_ref());
            break;
        }
        let given = if arg == "--ship" {
            Some(it.next().context("--ship needs a file or a directory")?)
        } else {
            arg.strip_prefix("--ship=").map(str::to_string)
        };
        match given {
            Some(_) if path.is_some() => {
                anyhow::bail!("give --ship once (ship a directory to send several files)")
            }
            Some(p) => path = Some(PathBuf::from(p)),
            None => out.push(arg),
        }
    }
    let Some(path) = path else {
        return Ok((out, None));
    };
    let packed = pack(&path).with_context(|| format!("cannot pack --ship {}", path.display()))?;
    let digest = blake3::hash(&packed).to_hex().to_string();
    // Before `--`, so the digest stays an option of the space, not an argument of the command.
    let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
    out.splice(at..at, ["--ship-digest".to_string(), digest.clone()]);
    Ok((out, Some(Shipped { digest, packed })))
}

/// Files packed for `--ship`, with their digest (computed once: the archive may be large).
pub struct Shipped {
    pub digest: String,
    pub packed: Vec<u8>,
}

/// Unpacks a shipped archive once per process and machine: into a directory named by its digest, renamed into
/// place only when complete, so concurrent chunks and later runs reuse it.
fn unpack_once(digest: &str, archive: &[u8]) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    // The user's id in the name, and the owner checked: on a shared machine another user could otherwise
    // plant a directory under the expected name and have their files run as ours.
    let uid = nix::unistd::getuid().as_raw();
    let dir = base.join(format!("sweep-ship-{uid}-{digest}"));
    if let Ok(meta) = std::fs::symlink_metadata(&dir) {
        use std::os::unix::fs::MetadataExt;
        if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0 {
            return Ok(dir);
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} exists but is not a private directory of this user",
                dir.display()
            ),
        ));
    }
    let tmp = base.join(format!(
        "sweep-ship-{uid}-{digest}.{}.tmp",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    }
    let mut ar = tar::Archive::new(archive);
    ar.set_preserve_permissions(true);
    if let Err(e) = ar.unpack(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process unpacked the same archive first: use its copy.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cmd: &[&str]) -> ExecJob {
        Exec::build(ExecParams {
            threads_per_chunk: 1,
            chunk_timeout: None,
            grace_secs: 1,
            ship: None,
            workdir: None,
            ship_digest: None,
            command: cmd.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn lines_parse_into_events_and_bad_ones_are_named() {
        assert!(matches!(
            parse_line(r#"{"progress": 5}"#),
            Event::Progress(5)
        ));
        assert!(matches!(parse_line(r#"{"checkpoint": "a"}"#), Event::Checkpoint(t) if t == "a"));
        match parse_line(
            r#"{"nodes": 3, "counters": {"a": 1, "b": "340282366920938463463374607431768211455"}, "solutions": ["x"]}"#,
        ) {
            Event::Final(out) => {
                assert_eq!(out.nodes, 3);
                assert_eq!(out.counters["b"], u128::MAX);
                assert_eq!(out.solutions, ["x"]);
            }
            _ => panic!("not a final line"),
        }
        for (bad, why) in [
            ("nope", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"progress": -1}"#, "progress"),
            (r#"{"checkpoint": 3}"#, "checkpoint"),
            (r#"{"nodes": 1, "counters": {"a": -2}}"#, "counter `a`"),
            (r#"{"nodes": 1, "extra": 2}"#, "bad final line"),
        ] {
            match parse_line(bad) {
                Event::Bad(m) => assert!(m.contains(why), "{bad}: {m}"),
                _ => panic!("{bad} accepted"),
            }
        }
    }

    #[test]
    fn a_chunk_runs_with_placeholders_and_its_environment() {
        let j = job(&[
            "sh",
            "-c",
            r#"echo '{"progress": 2}'; echo "{\"nodes\": $SWEEP_CHUNK, \"counters\": {\"c{chunk}of{chunks}\": $SWEEP_CHUNKS}, \"solutions\": [\"$SWEEP_THREADS $HOME\"]}""#,
        ]);
        let ctl = Control::new();
        let out = j.run_chunk(7, 3, &ctl).unwrap();
        assert_eq!(out.nodes, 3);
        assert_eq!(out.counters["c3of7"], 7);
        assert!(out.solutions[0].starts_with("1 /"), "{:?}", out.solutions);
        assert_eq!(ctl.nodes(), 2);
    }

    #[test]
    fn failures_carry_the_status_and_stderr_tail() {
        let err = job(&["sh", "-c", "echo boom >&2; exit 3"])
            .run_chunk(1, 0, &Control::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exit status 3") && err.contains("boom"),
            "{err}"
        );
        let err = job(&["sh", "-c", "echo ok"])
            .run_chunk(1, 0, &Control::new())
            .unwrap_err();
        assert!(err.to_string().contains("not JSON"), "{err}");
        let err = job(&["true"]).run_chunk(1, 0, &Control::new()).unwrap_err();
        assert!(err.to_string().contains("no final"), "{err}");
        let err = job(&["sh", "-c", r#"echo '{"nodes":1}'; echo '{"nodes":1}'"#])
            .run_chunk(1, 0, &Control::new())
            .unwrap_err();
        assert!(err.to_string().contains("more than one"), "{err}");
        let err = job(&["/no/such/program"])
            .run_chunk(1, 0, &Control::new())
            .unwrap_err();
        assert!(err.to_string().contains("cannot start"), "{err}");
    }

    #[test]
    fn cancelling_stops_the_whole_group() {
        let j = job(&["sh", "-c", "sleep 30 & sleep 30; wait"]);
        let ctl = Arc::new(Control::new());
        let c2 = ctl.clone();
        let t = std::thread::spawn(move || j.run_chunk(1, 0, &c2));
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        ctl.cancel();
        assert_eq!(t.join().unwrap(), Err(SpaceError::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn checkpoints_are_saved_and_resume_is_passed_on() {
        let j = job(&[
            "sh",
            "-c",
            r#"echo "{\"checkpoint\": \"after ${SWEEP_RESUME:-start}\"}"; echo '{"nodes": 1}'"#,
        ]);
        let ctl = Control::resuming(Some("x".into()));
        j.run_chunk(1, 0, &ctl).unwrap();
        assert_eq!(ctl.take_resume_state().as_deref(), Some("after x"));
    }

    #[test]
    fn a_timeout_fails_the_attempt() {
        let mut j = job(&["sleep", "30"]);
        j.params.chunk_timeout = Some(1);
        j.params.grace_secs = 0;
        let err = j.run_chunk(1, 0, &Control::new()).unwrap_err();
        assert!(err.to_string().contains("timed out after 1 s"), "{err}");
    }

    #[test]
    fn packing_is_deterministic_and_unpacks_runnable_files() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog.sh");
        std::fs::write(&prog, "#!/bin/sh\necho '{\"nodes\": 42}'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let a = pack(&prog).unwrap();
        assert_eq!(a, pack(&prog).unwrap());
        let digest = blake3::hash(&a).to_hex().to_string();
        let mut j = job(&["prog.sh"]);
        j.params.ship_digest = Some(digest);
        let bound = j.bind_inputs(&[&a]).unwrap();
        assert_eq!(bound.run_chunk(1, 0, &Control::new()).unwrap().nodes, 42);
        let mut dot = job(&["./prog.sh"]);
        dot.params.ship_digest = j.params.ship_digest.clone();
        let bound = dot.bind_inputs(&[&a]).unwrap();
        assert_eq!(bound.run_chunk(1, 0, &Control::new()).unwrap().nodes, 42);
    }
}
