//! A harness for end-to-end tests: real `sweep coordinator` and `sweep worker` processes on loopback port 0,
//! driven with the `sweep` client commands, killed for real (SIGKILL) where a test wants a crash.
//!
//! Every wait is bounded: a test that would hang fails with what it was waiting for instead.

#![allow(dead_code)] // not every helper is used by the tests of the day

pub mod netns;
#[path = "../../../coordinator/tests/common/pki.rs"]
pub mod pki;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const SWEEP: &str = env!("CARGO_BIN_EXE_sweep");

/// A scratch directory removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sweep-e2e-")
        .tempdir()
        .expect("create a scratch directory")
}

/// A child process killed when dropped, so a failing test leaves nothing running.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    /// SIGKILL: no shutdown handler runs, as in a crash or a lost machine.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM or SIGINT: the graceful path.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {}", self.name);
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `sweep ARGS` to completion (bounded by `timeout`) and returns its output.
pub fn sweep(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    sweep_bin(Path::new(SWEEP), args, env, timeout)
}

/// [`sweep`] with another build of the command (a user's crate that adds its spaces).
pub fn sweep_bin(bin: &Path, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_bounded(cmd, timeout)
}

/// Runs `cmd` to completion with its output captured, SIGKILLing it (and failing the test) after `timeout`.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.expect("wait for the process"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{what} did not finish within {timeout:?}");
        }
    }
}

/// Runs `cmd` to completion (SIGKILLed and failing the test after `timeout`) with its output captured, and
/// returns it with the process's peak resident memory in KiB, as the kernel counted it (`wait4`'s
/// `ru_maxrss`: exact for this one child, whatever else runs).
pub fn run_measuring_memory(mut cmd: Command, timeout: Duration) -> (Output, u64) {
    use std::os::unix::process::ExitStatusExt;
    let what = format!("{cmd:?}");
    let dir = scratch();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let file = |p: &Path| std::fs::File::create(p).expect("create an output file");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file(&out_path))
        .stderr(file(&err_path))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value of this plain C struct; wait4 only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own child, not waited for by anyone else (the Child handle is never waited).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4 {what}: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if started.elapsed() > timeout {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{what} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child);
    let out = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    };
    (out, usage.ru_maxrss as u64)
}

pub fn stdout_json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sweep failed ({}): stdout: {text} stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The in-process answer (`sweep solve SPACE_ARGS --json`): the independent path through the same kernels,
/// no coordinator and no store, that every distributed answer is compared with.
pub fn solve_result(space_args: &[&str], timeout: Duration) -> serde_json::Value {
    let mut args = vec!["solve"];
    args.extend_from_slice(space_args);
    args.push("--json");
    stdout_json(&sweep(&args, &[], timeout))["result"].clone()
}

/// A coordinator process and its workers.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub coordinator: Proc,
    pub url: String,
    pub workers: Vec<Proc>,
    /// The `sweep` command every process of the cluster runs.
    bin: PathBuf,
    lease_ttl_ms: u64,
    threads: usize,
}

impl Cluster {
    /// A coordinator on 127.0.0.1:0 with a fresh store, and `workers` workers of `threads` threads each.
    pub fn start(workers: usize, threads: usize) -> Cluster {
        Cluster::start_with_ttl(workers, threads, 2_000)
    }

    /// As [`Cluster::start`], with the lease time given (short leases make crash tests quick).
    pub fn start_with_ttl(workers: usize, threads: usize, lease_ttl_ms: u64) -> Cluster {
        Cluster::start_bin(Path::new(SWEEP), workers, threads, lease_ttl_ms)
    }

    /// As [`Cluster::start_with_ttl`], every process running `bin` instead of this repository's `sweep`.
    pub fn start_bin(bin: &Path, workers: usize, threads: usize, lease_ttl_ms: u64) -> Cluster {
        let dir = scratch();
        let (coordinator, url) =
            start_coordinator(bin, &dir.path().join("store"), "127.0.0.1:0", lease_ttl_ms);
        let mut c = Cluster {
            dir,
            coordinator,
            url,
            workers: Vec::new(),
            bin: bin.to_path_buf(),
            lease_ttl_ms,
            threads,
        };
        for _ in 0..workers {
            c.add_worker();
        }
        c
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn add_worker(&mut self) {
        self.add_worker_with(&[]);
    }

    /// Starts one more worker, named `w<index>`, with `extra` flags after the usual ones.
    pub fn add_worker_with(&mut self, extra: &[&str]) {
        self.add_worker_env(extra, &[]);
    }

    /// [`Cluster::add_worker_with`], with `env` set for the worker alone.
    pub fn add_worker_env(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let name = format!("w{}", self.workers.len());
        let child = Command::new(&self.bin)
            .args(["worker", "--connect", &self.url, "--threads"])
            .arg(self.threads.to_string())
            .args(["--name", &name, "--grace-secs", "5"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        self.workers.push(Proc { child, name });
    }

    /// SIGKILLs the coordinator and starts a new one on the same store and the same address, so workers that
    /// survived reconnect to it.
    pub fn restart_coordinator(&mut self) {
        self.coordinator.kill9();
        let addr = self.url.trim_start_matches("http://").to_string();
        let store = self.store();
        // The port was just freed; another process could take it in theory, so retry briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match try_start_coordinator(&self.bin, &store, &addr, self.lease_ttl_ms) {
                Ok((p, _)) => {
                    self.coordinator = p;
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("coordinator did not restart on {addr}: {e}"),
            }
        }
    }

    pub fn sweep(&self, args: &[&str]) -> Output {
        sweep_bin(
            &self.bin,
            args,
            &[("SWEEP_COORDINATOR", &self.url)],
            Duration::from_secs(60),
        )
    }

    /// `sweep submit SPACE_ARGS --json`; returns the job id.
    pub fn submit(&self, space_args: &[&str]) -> u64 {
        let mut args = vec!["submit"];
        args.extend_from_slice(space_args);
        // Before `--`: what follows it is an `exec` job's command, flags and all.
        let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        args.insert(at, "--json");
        let v = stdout_json(&self.sweep(&args));
        v["job"]
            .as_u64()
            .unwrap_or_else(|| panic!("no job id in {v}"))
    }

    /// `sweep status JOB --json`: the job's entry.
    pub fn status(&self, job: u64) -> serde_json::Value {
        let v = stdout_json(&self.sweep(&["status", &job.to_string(), "--json"]));
        v["jobs"][0].clone()
    }

    /// Polls until the job has finished (any end state), then returns `sweep results JOB --json`.
    pub fn wait_results(&self, job: u64, timeout: Duration) -> serde_json::Value {
        self.wait_until(job, timeout, |s| {
            !matches!(s["state"].as_str(), Some("running") | Some("paused"))
        });
        stdout_json(&self.sweep(&["results", &job.to_string(), "--json"]))
    }

    /// Polls `sweep status` until `pred` holds for the job (bounded by `timeout`); returns that status.
    /// A coordinator that is restarting answers nothing for a moment: those polls are retried.
    pub fn wait_until(
        &self,
        job: u64,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let mut last = serde_json::Value::Null;
        while Instant::now() < deadline {
            let out = self.sweep(&["status", &job.to_string(), "--json"]);
            if out.status.success() {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                    last = v["jobs"][0].clone();
                    if pred(&last) {
                        return last;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("job {job}: condition not reached within {timeout:?}; last status {last}");
    }
}

impl Cluster {
    /// `sweep status --json`: every job's entry, or `None` while the coordinator does not answer (restarting).
    pub fn try_all_jobs(&self) -> Option<Vec<serde_json::Value>> {
        let out = self.sweep(&["status", "--json"]);
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["jobs"].as_array().cloned()
    }

    /// Job `top` and every job it reads, directly or not (`input_jobs`), each once, from one status snapshot;
    /// polls while the coordinator is restarting.
    pub fn dag_jobs(&self, top: u64) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let all = loop {
            match self.try_all_jobs() {
                Some(all) => break all,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                None => panic!("the coordinator did not answer `sweep status` within 60 s"),
            }
        };
        dag_of(&all, top)
    }
}

/// Job `top` and every job it reads, directly or not, among `all` (entries of `sweep status --json`), in id order.
pub fn dag_of(all: &[serde_json::Value], top: u64) -> Vec<serde_json::Value> {
    let by_id: std::collections::BTreeMap<u64, &serde_json::Value> = all
        .iter()
        .filter_map(|j| Some((j["job"].as_u64()?, j)))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![top];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(j) = by_id.get(&id) {
            let inputs = j["input_jobs"].as_array().cloned().unwrap_or_default();
            todo.extend(inputs.iter().filter_map(|i| i.as_u64()));
        }
    }
    seen.iter()
        .filter_map(|id| by_id.get(id).map(|j| (*j).clone()))
        .collect()
}

fn start_coordinator(bin: &Path, store: &Path, listen: &str, ttl: u64) -> (Proc, String) {
    try_start_coordinator(bin, store, listen, ttl).unwrap_or_else(|e| panic!("{e}"))
}

fn try_start_coordinator(
    bin: &Path,
    store: &Path,
    listen: &str,
    ttl: u64,
) -> Result<(Proc, String), String> {
    let child = Command::new(bin)
        .args(["coordinator", "--listen", listen, "--data"])
        .arg(store)
        .args(["--lease-ttl-ms", &ttl.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn coordinator: {e}"))?;
    let (mut proc, line) = coordinator_first_line(child)?;
    let line = line.ok_or("the coordinator printed no address within 20 s")?;
    let Some(addr) = line.trim().strip_prefix("sweep coordinator listening on ") else {
        proc.kill9();
        return Err(format!(
            "unexpected first line from the coordinator: {line:?}"
        ));
    };
    Ok((proc, format!("http://{addr}")))
}

/// A coordinator just spawned with its stdout piped, and the first line it printed (its address) if it printed
/// one within 20 s. The line is read on a thread of its own, so a coordinator that hangs cannot hang the test.
pub fn coordinator_first_line(
    mut child: std::process::Child,
) -> Result<(Proc, Option<String>), String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let proc = Proc {
        child,
        name: "coordinator".into(),
    };
    Ok((proc, rx.recv_timeout(Duration::from_secs(20)).ok()))
}
