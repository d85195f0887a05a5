//! A chunk's program as a process: started in a box of its own (`sweep-contain`: a PID namespace or subreaper,
//! cgroups, limits, the sandbox if the worker has one); its stdout read as protocol lines and the tail of its
//! stderr kept; stopped with SIGTERM to everything in the box and SIGKILL after a grace period when the chunk is
//! cancelled, its worker stops, it times out or its output is malformed; and its exit status described for the
//! report of a failed attempt.
//!
//! # Split requests
//!
//! A job run with `--splits` gets a pipe as its program's stdin (any other program gets /dev/null and is never
//! sent anything). When the engine asks the chunk to split ([`Control::split_requested`]), the loop writes the
//! line `split` there, and the program answers on stdout with `{"split": {"kept": "K", "given": "G"}}` (it now
//! does K only; a new run of the chunk with `SWEEP_RESUME=G` does the rest) or `{"split": null}` (not now). A
//! pipe rather than a signal: it reaches the program through every kind of box unchanged, needs no handler
//! that every process the program starts would have to share (the box passes a signal on to all of them, and
//! SIGUSR1 kills a process that does not handle it), and a program reads it whenever it suits it, between two
//! items, with the `select` or `poll` it already has.
//!
//! - At most one request is outstanding: the next is written only after the program answered the last, so an
//!   answer always belongs to the one request there is, and a buffered reader never has a second line waiting
//!   behind the first.
//! - A request is noticed within [`SPLIT_POLL`] even while the program writes nothing.
//! - A program that has not answered within [`SPLIT_ANSWER_WAIT`] is taken to decline (the engine may then ask
//!   another run); its answer, when it comes, still counts, since a program that split has already let go of
//!   the given part. Requests meanwhile are declined at once.
//! - After a decline the next request waits [`AFTER_DECLINE`], so a program near its end is not asked a
//!   thousand times a second.
//! - An answer nobody asked for, a malformed one, an empty or over-size state, or a kept part equal to the
//!   given one fails the attempt (and stops the program): a program that narrowed its work to a part sweep
//!   could not record would otherwise lose the rest of its chunk without a word.
//! - A program that closed its stdin declines every request from then on.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use sweep_contain::{LimitHit, Spec, Stream};
use sweep_space::Control;

use crate::protocol::{Line, ProtocolError, SplitAnswer, Splitter};

/// How often the loop looks at the chunk's control while the program is quiet.
const POLL: Duration = Duration::from_millis(50);

/// The same, for a job that splits: a thread waits for its piece this long at most before the program hears of
/// the request (a pipe write and a wake-up every 10 ms cost nothing next to a program's run).
pub const SPLIT_POLL: Duration = Duration::from_millis(10);

/// How long a program has to answer a split request before it is taken to decline.
pub const SPLIT_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// How long after a program declined before it is asked again.
pub const AFTER_DECLINE: Duration = Duration::from_millis(50);

/// The line a split request is, on the program's stdin.
pub const SPLIT_REQUEST: &[u8] = b"split\n";

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
/// everything it started. With `splits`, the program's stdin carries split requests and its answers are handed
/// to `ctl` (see the module's documentation); split lines never reach `on_line`. Fails only if the program cannot
/// be started.
pub fn run(
    spec: &Spec,
    ctl: &Control,
    stopping_rules: Stopping,
    splits: bool,
    mut on_line: impl FnMut(Line) -> Result<(), String>,
) -> std::io::Result<Ended> {
    let mut boxed = if splits {
        sweep_contain::spawn_with_stdin(spec)?
    } else {
        sweep_contain::spawn(spec)?
    };
    let mut link = SplitLink::new(boxed.take_stdin());
    let poll = if splits { SPLIT_POLL } else { POLL };
    let started = Instant::now();
    let mut problem: Option<String> = None;
    let mut stopping: Option<(Instant, StopReason)> = None;
    let mut killed = false;
    let mut splitter = Splitter::default();
    let mut stderr: Vec<u8> = Vec::new();
    // Lines are handled here, in the chunk's own thread, as they arrive: no reader thread per stream.
    let mut handle = |line: Result<Line, ProtocolError>,
                      link: &mut SplitLink,
                      problem: &mut Option<String>,
                      malformed: &mut bool| match line {
        Ok(Line::Split(answer)) => {
            if let Err(why) = link.answer(ctl, answer) {
                problem.get_or_insert(why);
                *malformed = true;
            }
        }
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
        let pumped = boxed.pump(poll, |stream, bytes| match stream {
            Stream::Stdout => splitter.push(bytes, |l| {
                handle(l, &mut link, &mut problem, &mut malformed)
            }),
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
                handle(last, &mut link, &mut problem, &mut malformed);
            }
            break outcome;
        }
        if stopping.is_none() && !malformed {
            link.pass_on(ctl);
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

/// The split requests of one run: the write end of the program's stdin, and where the one request there may be
/// stands. Without a stdin (a job without `--splits`) it does nothing, and a split line is an answer nobody
/// asked for.
struct SplitLink {
    /// The program's stdin; `None` when the job does not split or the program closed it.
    stdin: Option<File>,
    /// The job splits: a request it cannot pass on is declined rather than left pending.
    enabled: bool,
    /// When the outstanding request was written.
    asked: Option<Instant>,
    /// The outstanding request was declined on the program's behalf ([`SPLIT_ANSWER_WAIT`]).
    declined_for_it: bool,
    /// No request is written before this (after a decline).
    quiet_until: Option<Instant>,
}

impl SplitLink {
    fn new(stdin: Option<File>) -> SplitLink {
        SplitLink {
            enabled: stdin.is_some(),
            stdin,
            asked: None,
            declined_for_it: false,
            quiet_until: None,
        }
    }

    /// Passes the engine's request on to the program, if there is one and the program may be asked now.
    fn pass_on(&mut self, ctl: &Control) {
        if !self.enabled || !ctl.split_requested() {
            return;
        }
        if let Some(at) = self.asked {
            if self.declined_for_it {
                // A second request could not be told apart from the answer to the first.
                ctl.decline_split();
            } else if at.elapsed() >= SPLIT_ANSWER_WAIT {
                ctl.decline_split();
                self.declined_for_it = true;
            }
            return;
        }
        if self.quiet_until.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let Some(stdin) = &mut self.stdin else {
            ctl.decline_split();
            return;
        };
        // A write of a few bytes to a pipe is all or nothing; the pipe does not block.
        match stdin.write(SPLIT_REQUEST) {
            Ok(n) if n == SPLIT_REQUEST.len() => self.asked = Some(Instant::now()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ctl.decline_split();
                self.quiet_until = Some(Instant::now() + AFTER_DECLINE);
            }
            // The program closed its stdin (EPIPE): it takes no more requests.
            _ => {
                self.stdin = None;
                ctl.decline_split();
            }
        }
    }

    /// Takes the program's answer to the outstanding request; an `Err` says why the answer cannot be taken,
    /// which fails the attempt.
    fn answer(&mut self, ctl: &Control, answer: Option<SplitAnswer>) -> Result<(), String> {
        if self.asked.take().is_none() {
            return Err(if self.enabled {
                "a split answer with no split request outstanding: answer each `split` line on stdin once"
                    .to_string()
            } else {
                "a split answer, but the job was not run with --splits, so nothing asked for one"
                    .to_string()
            });
        }
        let declined_already = std::mem::take(&mut self.declined_for_it);
        let Some(SplitAnswer { kept, given }) = answer else {
            if !declined_already {
                ctl.decline_split();
            }
            self.quiet_until = Some(Instant::now() + AFTER_DECLINE);
            return Ok(());
        };
        if kept.is_empty() || given.is_empty() {
            // An empty SWEEP_RESUME is no resume at all: a run from it would do the whole chunk again.
            return Err("a split with an empty state: both kept and given must name a part".into());
        }
        if kept == given {
            return Err(format!(
                "a split whose kept and given parts are the same state `{}`: the part would be done twice",
                clip_state(&kept)
            ));
        }
        ctl.hand_off(kept, given)
            .map_err(|e| format!("a split that cannot be recorded: {e}"))
    }
}

/// The start of a state, for an error message.
fn clip_state(state: &str) -> String {
    const SHOWN: usize = 100;
    if state.len() <= SHOWN {
        return state.to_string();
    }
    let mut cut = SHOWN;
    while !state.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &state[..cut])
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
        let ended = run(&sh(script), ctl, limits, false, |l| {
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
            false,
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
        let err = run(&spec, &Control::new(), LIMITS, false, |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    /// Runs a shell script as a job with `--splits`, the engine having asked for a split first when `asked`.
    fn run_splitting(script: &str, asked: bool) -> (Ended, ChunkControl) {
        let handle = ChunkControl::default();
        if asked {
            handle.request_split();
        }
        let ended = run(&sh(script), handle.control(), LIMITS, true, |_| Ok(())).unwrap();
        (ended, handle)
    }

    #[test]
    fn a_split_answer_is_handed_to_the_engine() {
        let (ended, handle) = run_splitting(
            r#"read -r req; [ "$req" = split ] || exit 9
               echo '{"split": {"kept": "0 5", "given": "5 9"}}'; echo '{"nodes": 1}'"#,
            true,
        );
        assert!(ended.status.success(), "{ended:?}");
        assert_eq!(ended.problem, None);
        let handoffs = handle.take_handoffs();
        assert_eq!(handoffs.len(), 1);
        assert_eq!((&*handoffs[0].kept, &*handoffs[0].given), ("0 5", "5 9"));
        assert!(!handle.split_pending());
    }

    #[test]
    fn a_decline_answers_the_request_and_gives_nothing_away() {
        let (ended, handle) = run_splitting(
            r#"read -r req; echo '{"split": null}'; echo '{"nodes": 1}'"#,
            true,
        );
        assert!(
            ended.status.success() && ended.problem.is_none(),
            "{ended:?}"
        );
        assert!(handle.take_handoffs().is_empty());
        assert!(!handle.split_pending());
    }

    /// The program is quiet (blocked reading its stdin) when the request comes: the loop must notice it
    /// without any output to wake it.
    #[test]
    fn a_request_reaches_a_quiet_program() {
        let handle = Arc::new(ChunkControl::default());
        let h2 = handle.clone();
        let t = std::thread::spawn(move || {
            run(
                &sh(r#"read -r req; echo '{"split": {"kept": "k", "given": "g"}}'"#),
                h2.control(),
                LIMITS,
                true,
                |_| Ok(()),
            )
            .unwrap()
        });
        std::thread::sleep(Duration::from_millis(300));
        let asked = Instant::now();
        handle.request_split();
        let ended = t.join().unwrap();
        assert!(ended.problem.is_none(), "{ended:?}");
        assert_eq!(handle.take_handoffs().len(), 1);
        assert!(asked.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_program_that_does_not_opt_in_is_never_sent_anything() {
        let handle = ChunkControl::default();
        handle.request_split();
        let mut lines = Vec::new();
        let ended = run(
            &sh(r#"if read -r req; then echo "{"checkpoint": "read $req"}"; fi; echo '{"nodes": 1}'"#),
            handle.control(),
            LIMITS,
            false,
            |l| {
                lines.push(l);
                Ok(())
            },
        )
        .unwrap();
        assert!(
            ended.status.success() && ended.problem.is_none(),
            "{ended:?}"
        );
        assert_eq!(lines.len(), 1, "stdin was empty: {lines:?}");
        assert!(
            handle.split_pending(),
            "a run that cannot split leaves the request alone"
        );
    }

    #[test]
    fn bad_split_answers_fail_the_attempt_and_stop_the_program() {
        let big = "x".repeat(sweep_space::MAX_RESUME_STATE_BYTES + 1);
        let over_size = format!(
            r#"read -r req; echo '{{"split": {{"kept": "k", "given": "{big}"}}}}'; sleep 30"#
        );
        for (script, asked, why) in [
            (
                r#"echo '{"split": null}'; sleep 30"#.to_string(),
                false,
                "no split request outstanding",
            ),
            (
                r#"read -r req; echo '{"split": null}'; echo '{"split": null}'; sleep 30"#.into(),
                true,
                "no split request outstanding",
            ),
            (
                r#"read -r req; echo '{"split": {"kept": "k"}}'; sleep 30"#.into(),
                true,
                "split must be null or",
            ),
            (
                r#"read -r req; echo '{"split": {"kept": "", "given": "g"}}'; sleep 30"#.into(),
                true,
                "an empty state",
            ),
            (
                r#"read -r req; echo '{"split": {"kept": "s", "given": "s"}}'; sleep 30"#.into(),
                true,
                "are the same state `s`",
            ),
            (over_size, true, "more than the 65536"),
        ] {
            let started = Instant::now();
            let (ended, handle) = run_splitting(&script, asked);
            let problem = ended.problem.unwrap_or_default();
            assert!(problem.contains(why), "{script:.80}: {problem}");
            assert_eq!(
                ended.stopped,
                Some(StopReason::MalformedOutput),
                "{script:.80}"
            );
            assert!(started.elapsed() < Duration::from_secs(10), "{script:.80}");
            assert!(handle.take_handoffs().is_empty(), "{script:.80}");
        }
        // A job without --splits never asked either.
        let (ended, _) = run_sh(
            r#"echo '{"split": null}'; sleep 30"#,
            &Control::new(),
            LIMITS,
        );
        let problem = ended.problem.unwrap_or_default();
        assert!(problem.contains("not run with --splits"), "{problem}");
        assert_eq!(ended.stopped, Some(StopReason::MalformedOutput));
    }

    /// A program that takes the request and says nothing for a long while is taken to decline, so the engine
    /// can ask another run; the split it makes afterwards still counts.
    #[test]
    fn a_program_that_does_not_answer_is_taken_to_decline_and_its_late_answer_counts() {
        let handle = Arc::new(ChunkControl::default());
        handle.request_split();
        let h2 = handle.clone();
        let t = std::thread::spawn(move || {
            run(
                &sh(r#"read -r req; sleep 2; echo '{"split": {"kept": "k", "given": "g"}}'"#),
                h2.control(),
                LIMITS,
                true,
                |_| Ok(()),
            )
            .unwrap()
        });
        std::thread::sleep(SPLIT_ANSWER_WAIT + Duration::from_millis(500));
        assert!(!handle.split_pending(), "declined on the program's behalf");
        let ended = t.join().unwrap();
        assert!(
            ended.status.success() && ended.problem.is_none(),
            "{ended:?}"
        );
        assert_eq!(handle.take_handoffs().len(), 1, "the late split is kept");
    }

    #[test]
    fn a_program_that_closed_its_stdin_declines() {
        let (ended, handle) = run_splitting(r#"exec 0<&-; sleep 0.5; echo '{"nodes": 1}'"#, false);
        assert!(
            ended.status.success() && ended.problem.is_none(),
            "{ended:?}"
        );
        assert!(handle.take_handoffs().is_empty());
        // Asked after the pipe closed: declined at once, the run is unharmed.
        let handle = Arc::new(ChunkControl::default());
        let h2 = handle.clone();
        let t = std::thread::spawn(move || {
            run(
                &sh(r#"exec 0<&-; sleep 1; echo '{"nodes": 1}'"#),
                h2.control(),
                LIMITS,
                true,
                |_| Ok(()),
            )
            .unwrap()
        });
        std::thread::sleep(Duration::from_millis(300));
        handle.request_split();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!handle.split_pending(), "declined");
        let ended = t.join().unwrap();
        assert!(
            ended.status.success() && ended.problem.is_none(),
            "{ended:?}"
        );
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
