//! A chunk's program as a process: started in a box of its own (`sweep-contain`: a PID namespace or subreaper,
//! cgroups, limits, the sandbox if the worker has one); its stdout read as protocol lines and the tail of its
//! stderr kept; stopped with SIGTERM to everything in the box and SIGKILL after a grace period when the chunk is
//! cancelled, its worker stops, it times out or its output is malformed; and its exit status described for the
//! report of a failed attempt.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sweep_contain::{LimitHit, Spec, Stream};
use sweep_space::Control;

use crate::protocol::{Line, ProtocolError, Splitter};

/// How much of stderr is kept for the error report.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// Why the program was told to stop before it ended by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The chunk was cancelled (its job cancelled, or the lease lost): the attempt counts for nothing.
    Cancelled,
    /// The worker is shutting down or draining: the chunk goes back, to resume from its newest checkpoint.
    WorkerStopping,
    /// The chunk ran longer than `--chunk-timeout`: a failed attempt.
    TimedOut,
    /// The program wrote output that breaks the protocol: a failed attempt, so there is no use letting it run.
    MalformedOutput,
}

/// When to stop the program, and how long it gets between SIGTERM and SIGKILL.
#[derive(Clone, Copy, Debug)]
pub struct Stopping {
    pub timeout: Option<Duration>,
    pub grace: Duration,
}

/// How the program ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    /// Set when the program was told to stop; it may have ended with any status after that.
    pub stopped: Option<StopReason>,
    /// The limit of its box it went over, if it failed on one.
    pub limit: Option<LimitHit>,
    /// The first thing that went wrong while it ran: a malformed line, a line `on_line` refused, a failed wait.
    pub problem: Option<String>,
    /// The last bytes of its stderr (at most about twice [`STDERR_TAIL_BYTES`]; see [`stderr_tail`]).
    pub stderr: Vec<u8>,
}

/// Runs `spec` in a box of its own until it ends: each line of its stdout goes to `on_line` (an `Err` from it is
/// recorded as the problem, and the program runs on); a malformed line, a cancelled or stopping `ctl` or the
/// timeout sends SIGTERM to every process in the box, and SIGKILL after the grace. When the program ends, so does
/// everything it started. Fails only if the program cannot be started.
pub fn run(
    spec: &Spec,
    ctl: &Control,
    stopping_rules: Stopping,
    mut on_line: impl FnMut(Line) -> Result<(), String>,
) -> std::io::Result<Ended> {
    let mut boxed = sweep_contain::spawn(spec)?;
    let started = Instant::now();
    let mut problem: Option<String> = None;
    let mut stopping: Option<(Instant, StopReason)> = None;
    let mut killed = false;
    let mut splitter = Splitter::default();
    let mut stderr: Vec<u8> = Vec::new();
    // Lines are handled here, in the chunk's own thread, as they arrive: no reader thread per stream.
    let mut handle = |line: Result<Line, ProtocolError>,
                      problem: &mut Option<String>,
                      malformed: &mut bool| match line {
        Ok(line) => {
            if let Err(why) = on_line(line) {
                problem.get_or_insert(why);
            }
        }
        Err(bad) => {
            problem.get_or_insert(bad.to_string());
            *malformed = true;
        }
    };
    let outcome = loop {
        let mut malformed = false;
        let pumped = boxed.pump(Duration::from_millis(50), |stream, bytes| match stream {
            Stream::Stdout => splitter.push(bytes, |l| handle(l, &mut problem, &mut malformed)),
            Stream::Stderr => keep_tail(&mut stderr, bytes),
        });
        let done = match pumped {
            Ok(done) => done,
            Err(e) => {
                problem.get_or_insert(format!("cannot wait for the program: {e}"));
                None
            }
        };
        if let Some(outcome) = done {
            if let Some(last) = splitter.finish() {
                handle(last, &mut problem, &mut malformed);
            }
            break outcome;
        }
        let reason = if malformed {
            Some(StopReason::MalformedOutput)
        } else if ctl.is_cancelled() {
            Some(StopReason::Cancelled)
        } else if ctl.is_stop_requested() {
            Some(StopReason::WorkerStopping)
        } else if stopping_rules
            .timeout
            .is_some_and(|t| started.elapsed() > t)
        {
            Some(StopReason::TimedOut)
        } else {
            None
        };
        match (stopping, reason) {
            (None, Some(r)) => {
                boxed.terminate();
                stopping = Some((Instant::now(), r));
            }
            (Some((since, _)), _) if !killed && since.elapsed() >= stopping_rules.grace => {
                boxed.kill();
                killed = true;
            }
            _ => {}
        }
    };
    Ok(Ended {
        status: outcome.status,
        stopped: stopping.map(|(_, reason)| reason),
        limit: outcome.limit,
        problem,
        stderr,
    })
}

/// Keeps the last [`STDERR_TAIL_BYTES`] of stderr (and up to as many more, so the buffer is cut only now and
/// then).
fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    if tail.len() > STDERR_TAIL_BYTES * 2 {
        tail.drain(..tail.len() - STDERR_TAIL_BYTES);
    }
}

/// The last [`STDERR_TAIL_BYTES`] of `stderr` as text, trimmed, cut at a character boundary.
pub fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.len() <= STDERR_TAIL_BYTES {
        return text.to_string();
    }
    let mut cut = text.len() - STDERR_TAIL_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

/// `exit status 3`, `killed by signal 9`.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended without a status".into(),
    }
}

/// A private working directory per chunk: empty when the chunk starts, emptied when it ends.
///
/// Each search thread keeps one directory and hands it to its chunks one after another: making and removing a
/// directory cost two journal updates per chunk, about a twentieth of a trivial chunk's time. A kept directory is
/// checked before reuse (still a directory of this user's, mode 0700, empty) and replaced if a program changed
/// it; directories left by a process that died are removed by the next process that makes one.
pub struct WorkDir(Option<PathBuf>);

thread_local! {
    /// This thread's directory between chunks; removed when the thread ends.
    static KEPT: std::cell::RefCell<Kept> = const { std::cell::RefCell::new(Kept(None)) };
}

struct Kept(Option<PathBuf>);

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

const PREFIX: &str = "sweep-chunk-";

impl WorkDir {
    pub fn new() -> std::io::Result<WorkDir> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(remove_orphaned_dirs);
        let kept = KEPT.with(|k| k.borrow_mut().0.take());
        if let Some(dir) = kept {
            if still_private(&dir) {
                return Ok(WorkDir(Some(dir)));
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let dir = base.join(format!("{PREFIX}{}-{nanos:x}{attempt}", std::process::id()));
            // Private to the worker's user: other chunks, and other users' programs, have no business in it.
            let made = {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(0o700).create(&dir)
            };
            match made {
                Ok(()) => return Ok(WorkDir(Some(dir))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for a working directory",
        ))
    }

    pub fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("/nonexistent"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else { return };
        if empty_out(&dir).is_ok() {
            KEPT.with(|k| {
                // A thread that already keeps one (a chunk that ran a second program) keeps the first.
                let mut k = k.borrow_mut();
                if k.0.is_none() {
                    k.0 = Some(dir.clone());
                }
            });
            if KEPT.with(|k| k.borrow().0.as_deref() == Some(dir.as_path())) {
                return;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Removes everything in `dir` (nothing to do, and one directory read, when the program left nothing).
fn empty_out(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Whether a kept directory is still what [`WorkDir::new`] made: a directory (not a link a program left in its
/// place) of this user's, mode 0700, and empty.
fn still_private(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o7777 == 0o700)
        && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// Removes the chunk directories of processes that are gone (a worker that was killed keeps its directories).
fn remove_orphaned_dirs() {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        let gone = pid > 0 && !Path::new("/proc").join(pid.to_string()).exists();
        if ours && gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use sweep_space::ChunkControl;

    const LIMITS: Stopping = Stopping {
        timeout: None,
        grace: Duration::from_secs(1),
    };

    fn sh(script: &str) -> Spec {
        Spec {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/".into(),
            limits: Default::default(),
            private_dir: None,
            sandbox: None,
        }
    }

    /// Runs a shell script, collecting its lines.
    fn run_sh(script: &str, ctl: &Control, limits: Stopping) -> (Ended, Vec<Line>) {
        let mut lines = Vec::new();
        let ended = run(&sh(script), ctl, limits, |l| {
            lines.push(l);
            Ok(())
        })
        .unwrap();
        (ended, lines)
    }

    #[test]
    fn lines_reach_the_caller_and_the_status_and_stderr_come_back() {
        let (ended, lines) = run_sh(
            r#"echo '{"progress": 2}'; echo boom >&2; echo '{"nodes": 1}'; exit 3"#,
            &Control::new(),
            LIMITS,
        );
        assert_eq!(lines.len(), 2, "{ended:?}");
        assert_eq!(lines[0], Line::Progress(2));
        assert_eq!(describe(ended.status), "exit status 3");
        assert_eq!(stderr_tail(&ended.stderr), "boom");
        assert_eq!(ended.stopped, None);
        assert_eq!(ended.problem, None);
    }

    #[test]
    fn a_refused_line_is_the_problem_and_the_program_runs_on() {
        let mut seen = 0;
        let ended = run(
            &sh(r#"echo '{"progress": 1}'; echo '{"progress": 2}'"#),
            &Control::new(),
            LIMITS,
            |_| {
                seen += 1;
                Err(format!("refused {seen}"))
            },
        )
        .unwrap();
        assert_eq!(seen, 2);
        assert_eq!(ended.problem.as_deref(), Some("refused 1"));
        assert!(ended.status.success());
    }

    #[test]
    fn malformed_output_stops_the_program() {
        let started = Instant::now();
        let (ended, _) = run_sh("echo nope; sleep 30", &Control::new(), LIMITS);
        assert_eq!(ended.stopped, Some(StopReason::MalformedOutput));
        assert!(ended.problem.is_some_and(|p| p.contains("not JSON")));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn cancel_and_stop_requests_stop_the_whole_group() {
        for (stop, reason) in [
            (
                ChunkControl::cancel as fn(&ChunkControl),
                StopReason::Cancelled,
            ),
            (ChunkControl::request_stop, StopReason::WorkerStopping),
        ] {
            let ctl = Arc::new(ChunkControl::default());
            let c2 = ctl.clone();
            let t = std::thread::spawn(move || {
                run_sh("sleep 30 & sleep 30; wait", c2.control(), LIMITS)
            });
            std::thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            stop(&ctl);
            let (ended, _) = t.join().unwrap();
            assert_eq!(ended.stopped, Some(reason));
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }

    #[test]
    fn a_program_that_ignores_sigterm_is_killed_after_the_grace() {
        let limits = Stopping {
            timeout: Some(Duration::from_millis(200)),
            grace: Duration::from_millis(300),
        };
        let started = Instant::now();
        let (ended, _) = run_sh("trap '' TERM; sleep 30", &Control::new(), limits);
        assert_eq!(ended.stopped, Some(StopReason::TimedOut));
        assert_eq!(describe(ended.status), "killed by signal 9");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error() {
        let mut spec = sh("");
        spec.program = "/no/such/program".into();
        let err = run(&spec, &Control::new(), LIMITS, |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn the_stderr_tail_is_the_end_of_stderr_at_a_character_boundary() {
        assert_eq!(stderr_tail(b"  \n"), "");
        let long = format!("start{}", "é".repeat(STDERR_TAIL_BYTES));
        let tail = stderr_tail(long.as_bytes());
        assert!(tail.len() <= STDERR_TAIL_BYTES && tail.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_work_dir_is_emptied_and_kept_for_the_thread_s_next_chunk_and_removed_with_the_thread() {
        let path = std::thread::spawn(|| {
            let dir = WorkDir::new().unwrap();
            let path = dir.path().to_path_buf();
            std::fs::write(path.join("left"), "x").unwrap();
            std::fs::create_dir_all(path.join("sub/deeper")).unwrap();
            std::fs::write(path.join("sub/deeper/file"), "y").unwrap();
            drop(dir);
            let again = WorkDir::new().unwrap();
            assert_eq!(again.path(), path);
            assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
            path
        })
        .join()
        .unwrap();
        assert!(!path.exists(), "removed when its thread ended");
    }

    #[test]
    fn a_kept_dir_a_program_changed_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        std::thread::spawn(|| {
            let dir = WorkDir::new().unwrap();
            let first = dir.path().to_path_buf();
            std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o777)).unwrap();
            drop(dir);
            let dir = WorkDir::new().unwrap();
            let second = dir.path().to_path_buf();
            assert_ne!(second, first);
            assert!(!first.exists(), "the changed one is removed");
            drop(dir);
            // Replaced by a link to somewhere else: not followed, not reused.
            let elsewhere = tempfile::tempdir().unwrap();
            std::fs::write(elsewhere.path().join("keep"), "z").unwrap();
            std::fs::remove_dir(&second).unwrap();
            std::os::unix::fs::symlink(elsewhere.path(), &second).unwrap();
            let third = WorkDir::new().unwrap();
            assert_ne!(third.path(), second);
            assert!(elsewhere.path().join("keep").exists());
            let _ = std::fs::remove_file(&second);
        })
        .join()
        .unwrap();
    }
}
