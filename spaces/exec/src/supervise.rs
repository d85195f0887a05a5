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

/// A private working directory per chunk, removed (with whatever the program left) when dropped.
pub struct WorkDir(PathBuf);

impl WorkDir {
    pub fn new(chunk: u64) -> std::io::Result<WorkDir> {
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
            // Private to the worker's user: other chunks, and other users' programs, have no business in it.
            let made = {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(0o700).create(&dir)
            };
            match made {
                Ok(()) => return Ok(WorkDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for a working directory",
        ))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
    fn a_work_dir_is_removed_with_its_contents() {
        let dir = WorkDir::new(7).unwrap();
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("left"), "x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
