//! A harness for end-to-end tests: real `sweep coordinator` and `sweep worker` processes on loopback port 0
//! (or, through `netns.rs`, each in a network namespace of its own), driven with the `sweep` client commands,
//! killed for real (SIGKILL) where a test wants a crash. One [`Cluster`] serves both, so command lines, waits
//! and restarts cannot drift apart between them.
//!
//! Every wait is bounded: a test that would hang fails with what it was waiting for instead.

#![allow(dead_code)] // not every helper is used by the tests of the day

pub mod group;
pub mod netns;
pub use sweep_testkit::pki;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
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

    /// SIGTERM, then its exit within 30 s (a graceful stop waits for running work only that long): how it
    /// exited.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{} did not exit within 30 s of SIGTERM", self.name))
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

/// A scratch directory (removed when dropped) and where a store goes in it, as a flag's value.
pub fn scratch_store() -> (tempfile::TempDir, String) {
    let dir = scratch();
    let data = dir.path().join("data");
    let data = data.to_str().expect("a UTF-8 path").to_string();
    (dir, data)
}

/// `sweep run SPACE_ARGS --threads 1 --json --data DATA` in the background, its output discarded: a run that
/// a test interrupts partway (SIGKILL as a crash does, SIGINT as Ctrl-C does).
pub fn spawn_run(space_args: &[&str], data: &str) -> Proc {
    spawn_run_threads(space_args, data, 1)
}

/// As [`spawn_run`] with `threads` threads: more than a job has chunks, and the idle ones split running chunks.
pub fn spawn_run_threads(space_args: &[&str], data: &str, threads: usize) -> Proc {
    let threads = threads.to_string();
    let child = Command::new(SWEEP)
        .arg("run")
        .args(space_args)
        .args(["--threads", &threads, "--json", "--data", data])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sweep run");
    Proc {
        child,
        name: "sweep run".into(),
    }
}

/// `sweep run SPACE_ARGS --threads 2 --json --data DATA` to its end (bounded by `timeout`), as a resumed run:
/// its output.
pub fn resume_run(space_args: &[&str], data: &str, timeout: Duration) -> Output {
    let args = [
        &["run"][..],
        space_args,
        &["--threads", "2", "--json", "--data", data],
    ]
    .concat();
    sweep(&args, &[], timeout)
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

/// Where the processes of a [`Cluster`] run and how they reach each other. [`Loopback`]: all on this machine;
/// [`netns::Net`]: each in its own network namespace, so links between them can be cut.
pub trait Network {
    /// A place a process runs.
    type Host: Clone;
    /// A new host for the coordinator, and the address it is to listen on there.
    fn coordinator_host(&mut self) -> (Self::Host, String);
    /// A new host for the worker named `name`.
    fn worker_host(&mut self, name: &str) -> Self::Host;
    /// A command that runs `program` on `host`; its pid is the program's own, so signals reach it.
    fn command(&self, host: &Self::Host, program: &Path) -> Command;
    /// A command that runs `program` where client commands (`sweep submit`, `status`) run.
    fn client_command(&self, program: &Path) -> Command;
}

/// Every process on this machine's own network stack, the coordinator on a free loopback port.
pub struct Loopback;

impl Network for Loopback {
    type Host = ();

    fn coordinator_host(&mut self) -> ((), String) {
        ((), "127.0.0.1:0".into())
    }

    fn worker_host(&mut self, _name: &str) {}

    fn command(&self, _host: &(), program: &Path) -> Command {
        Command::new(program)
    }

    fn client_command(&self, program: &Path) -> Command {
        Command::new(program)
    }
}

/// How a [`Cluster`] is started.
#[derive(Clone, Debug)]
pub struct Opts {
    /// The `sweep` command every process of the cluster runs.
    pub bin: PathBuf,
    pub workers: usize,
    pub threads: usize,
    pub lease_ttl_ms: u64,
    /// The coordinator's `--max-attempts`; `None` keeps its default.
    pub max_attempts: Option<u32>,
    /// The workers' `--prefetch`; `None` keeps their default.
    pub prefetch: Option<u32>,
    /// The coordinator's `--data`; `None`: `store` in the cluster's scratch directory.
    pub store: Option<PathBuf>,
    /// How often waits ask `sweep status`: each ask is a process, which a 2-core machine feels.
    pub poll: Duration,
    /// More flags for the coordinator (its token files, for a cluster with tokens).
    pub coordinator_args: Vec<String>,
    /// The token the workers present; `None`: none.
    pub worker_token: Option<String>,
    /// The token `Cluster::sweep` presents (an admin's, so waits and cancels work on everyone's jobs).
    pub client_token: Option<String>,
    /// TLS everywhere, with certificates from [`pki::pki`]: every coordinator (each member of a group) serves
    /// TLS at an https:// URL and requires client certificates signed by the CA (members present their own
    /// to each other), and workers and `sweep` commands trust the CA and present the client certificate.
    /// `None`: plain gRPC at http:// URLs.
    pub tls: Option<pki::Pki>,
}

impl Opts {
    /// The defaults with `workers` workers of `threads` threads and leases of `lease_ttl_ms`.
    pub fn sized(workers: usize, threads: usize, lease_ttl_ms: u64) -> Opts {
        Opts {
            workers,
            threads,
            lease_ttl_ms,
            ..Opts::default()
        }
    }

    /// The scheme of the coordinators' URLs.
    pub fn scheme(&self) -> &'static str {
        match self.tls {
            Some(_) => "https",
            None => "http",
        }
    }

    /// The flags of a worker or a `sweep` command that connects to the coordinators over TLS (none without).
    pub fn client_tls_args(&self) -> Vec<&Path> {
        match &self.tls {
            Some(p) => vec![
                Path::new("--tls-ca"),
                &p.ca,
                Path::new("--tls-cert"),
                &p.client_cert,
                Path::new("--tls-key"),
                &p.client_key,
            ],
            None => Vec::new(),
        }
    }

    /// The same as the environment of `sweep` commands, which take it wherever their flags go.
    pub fn client_tls_env(&self) -> Vec<(&'static str, &Path)> {
        match &self.tls {
            Some(p) => vec![
                ("SWEEP_TLS_CA", &p.ca),
                ("SWEEP_TLS_CERT", &p.client_cert),
                ("SWEEP_TLS_KEY", &p.client_key),
            ],
            None => Vec::new(),
        }
    }
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            bin: PathBuf::from(SWEEP),
            workers: 2,
            threads: 1,
            lease_ttl_ms: 2_000,
            max_attempts: None,
            prefetch: None,
            store: None,
            poll: Duration::from_millis(100),
            coordinator_args: Vec::new(),
            worker_token: None,
            client_token: None,
            tls: None,
        }
    }
}

/// A coordinator process and its workers, each process logging (info level) to `<name>.log` in the scratch
/// directory. Field order is drop order: the processes die first, then the network (and what it mounted),
/// then the scratch directory.
pub struct Cluster<N: Network = Loopback> {
    pub coordinator: Proc,
    pub workers: Vec<Proc>,
    pub net: N,
    pub url: String,
    pub opts: Opts,
    /// Coordinator starts so far (1 + restarts).
    pub starts: u32,
    store: PathBuf,
    coordinator_host: N::Host,
    worker_hosts: Vec<N::Host>,
    pub dir: tempfile::TempDir,
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
        let opts = Opts {
            bin: bin.to_path_buf(),
            ..Opts::sized(workers, threads, lease_ttl_ms)
        };
        Cluster::start_on(Loopback, opts, scratch())
    }

    /// As [`Cluster::start`], the coordinator requiring tokens: a worker token for the workers, an admin token
    /// for [`Cluster::sweep`], and `users` user tokens, returned, each its own identity for fair share (use
    /// them with [`Cluster::sweep_as`] and [`Cluster::submit_as`]).
    pub fn start_with_users(
        workers: usize,
        threads: usize,
        users: usize,
    ) -> (Cluster, Vec<String>) {
        let dir = scratch();
        let worker = "e2e-worker-token-0123456789".to_string();
        let admin = "e2e-admin-token-0123456789".to_string();
        let user_tokens: Vec<String> = (0..users)
            .map(|i| format!("e2e-user-token-{i}-0123456789"))
            .collect();
        let mut args = Vec::new();
        for (role, tokens) in [
            ("worker", vec![worker.clone()]),
            ("user", user_tokens.clone()),
            ("admin", vec![admin.clone()]),
        ] {
            if tokens.is_empty() {
                continue;
            }
            let file = dir.path().join(format!("{role}.tokens"));
            std::fs::write(&file, tokens.join("\n") + "\n").expect("write a token file");
            args.push(format!("--{role}-token-file"));
            args.push(file.to_string_lossy().into_owned());
        }
        let opts = Opts {
            workers,
            threads,
            coordinator_args: args,
            worker_token: Some(worker),
            client_token: Some(admin),
            ..Opts::default()
        };
        (Cluster::start_on(Loopback, opts, dir), user_tokens)
    }
}

impl<N: Network> Cluster<N> {
    /// A coordinator and `opts.workers` workers on `net`, logging into `dir`.
    pub fn start_on(mut net: N, opts: Opts, dir: tempfile::TempDir) -> Cluster<N> {
        let (coordinator_host, listen) = net.coordinator_host();
        let store = opts
            .store
            .clone()
            .unwrap_or_else(|| dir.path().join("store"));
        let log = dir.path().join("coordinator.log");
        let (coordinator, url) =
            spawn_coordinator(&net, &coordinator_host, &opts, &listen, &store, &log, 1)
                .unwrap_or_else(|e| panic!("coordinator start 1 failed: {e}"));
        let mut c = Cluster {
            coordinator,
            workers: Vec::new(),
            net,
            url,
            opts,
            starts: 1,
            store,
            coordinator_host,
            worker_hosts: Vec::new(),
            dir,
        };
        for _ in 0..c.opts.workers {
            c.add_worker();
        }
        c
    }

    pub fn store(&self) -> PathBuf {
        self.store.clone()
    }

    pub fn log_path(&self, what: &str) -> PathBuf {
        self.dir.path().join(format!("{what}.log"))
    }

    /// Everything the coordinators of this cluster logged, across restarts.
    pub fn coordinator_log(&self) -> String {
        std::fs::read_to_string(self.log_path("coordinator")).unwrap_or_default()
    }

    /// Where worker `i` runs.
    pub fn worker_host(&self, i: usize) -> &N::Host {
        &self.worker_hosts[i]
    }

    /// Starts one more worker, named `w<index>`, on a host of its own; returns its index in `workers`.
    pub fn add_worker(&mut self) -> usize {
        self.add_worker_with(&[])
    }

    /// As [`Cluster::add_worker`], with `extra` flags after the usual ones.
    pub fn add_worker_with(&mut self, extra: &[&str]) -> usize {
        self.add_worker_env(extra, &[])
    }

    /// As [`Cluster::add_worker_with`], with `env` set for the worker alone.
    pub fn add_worker_env(&mut self, extra: &[&str], env: &[(&str, &str)]) -> usize {
        let name = format!("w{}", self.workers.len());
        let host = self.net.worker_host(&name);
        self.spawn_worker(host, &[], extra, env)
    }

    /// As [`Cluster::add_worker_with`], the worker started through `wrapper`, a command that runs the rest of
    /// its arguments (`setpriv --reuid=65534 ...`: a worker of another user).
    pub fn add_worker_through(&mut self, wrapper: &[&str], extra: &[&str]) -> usize {
        let name = format!("w{}", self.workers.len());
        let host = self.net.worker_host(&name);
        self.spawn_worker(host, wrapper, extra, &[])
    }

    /// SIGKILLs worker `i` and starts a replacement (usual flags and environment, a new name) on the same
    /// host; returns the replacement's index.
    pub fn replace_worker(&mut self, i: usize) -> usize {
        self.workers[i].kill9();
        let host = self.worker_hosts[i].clone();
        self.spawn_worker(host, &[], &[], &[])
    }

    fn spawn_worker(
        &mut self,
        host: N::Host,
        wrapper: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> usize {
        let name = format!("w{}", self.workers.len());
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut cmd = self.net.command(&host, Path::new(first));
                cmd.args(rest).arg(&self.opts.bin);
                cmd
            }
            None => self.net.command(&host, &self.opts.bin),
        };
        cmd.args(["worker", "--connect", &self.url, "--threads"])
            .arg(self.opts.threads.to_string())
            .args(["--name", &name, "--grace-secs", "5"])
            .args(self.opts.client_tls_args());
        if let Some(p) = self.opts.prefetch {
            cmd.args(["--prefetch", &p.to_string()]);
        }
        if let Some(t) = &self.opts.worker_token {
            cmd.env("SWEEP_TOKEN", t);
        }
        let child = cmd
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(append(&self.log_path(&name)))
            .spawn()
            .expect("spawn worker");
        self.workers.push(Proc { child, name });
        self.worker_hosts.push(host);
        self.workers.len() - 1
    }

    /// SIGKILLs the coordinator: no shutdown handler runs.
    pub fn kill_coordinator(&mut self) {
        self.coordinator.kill9();
    }

    /// SIGKILLs the coordinator and starts a new one on the same store and address, so workers that survived
    /// reconnect to it.
    pub fn restart_coordinator(&mut self) {
        self.kill_coordinator();
        self.start_coordinator();
    }

    /// Starts a coordinator on the cluster's store and address (after [`Cluster::kill_coordinator`]); panics if
    /// it cannot within 20 s.
    pub fn start_coordinator(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.try_start_coordinator() {
                Ok(()) => return,
                // The address of the coordinator just killed can be briefly unavailable (and on loopback,
                // in theory, taken by another process's connection for a moment).
                Err(e) if Instant::now() < deadline && e.contains("cannot listen") => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("coordinator start {} failed: {e}", self.starts + 1),
            }
        }
    }

    /// One attempt at [`Cluster::start_coordinator`]; the error says what the coordinator logged if it exited.
    pub fn try_start_coordinator(&mut self) -> Result<(), String> {
        let listen = self
            .url
            .trim_start_matches(&format!("{}://", self.opts.scheme()))
            .to_string();
        let log = self.log_path("coordinator");
        let (p, _) = spawn_coordinator(
            &self.net,
            &self.coordinator_host,
            &self.opts,
            &listen,
            &self.store,
            &log,
            self.starts + 1,
        )?;
        self.coordinator = p;
        self.starts += 1;
        Ok(())
    }

    pub fn sweep(&self, args: &[&str]) -> Output {
        self.sweep_with(self.opts.client_token.as_deref(), args)
    }

    /// `sweep ARGS`, which must succeed: the test fails with what it printed otherwise.
    pub fn sweep_ok(&self, args: &[&str]) -> Output {
        let out = self.sweep(args);
        sweep_testkit::process::assert_success(&out, &format!("sweep {args:?}"));
        out
    }

    /// `sweep ARGS` presenting `token` (one of [`Cluster::start_with_users`]'s) instead of the cluster's own.
    pub fn sweep_as(&self, token: &str, args: &[&str]) -> Output {
        self.sweep_with(Some(token), args)
    }

    fn sweep_with(&self, token: Option<&str>, args: &[&str]) -> Output {
        let mut cmd = self.net.client_command(&self.opts.bin);
        cmd.args(args)
            .env("SWEEP_COORDINATOR", &self.url)
            .envs(self.opts.client_tls_env());
        if let Some(t) = token {
            cmd.env("SWEEP_TOKEN", t);
        }
        run_bounded(cmd, Duration::from_secs(60))
    }

    /// `sweep submit SPACE_ARGS --json`; returns the job id.
    pub fn submit(&self, space_args: &[&str]) -> u64 {
        self.submit_with(self.opts.client_token.as_deref(), space_args)
    }

    /// [`Cluster::submit`] presenting `token`: the job belongs to that token's identity.
    pub fn submit_as(&self, token: &str, space_args: &[&str]) -> u64 {
        self.submit_with(Some(token), space_args)
    }

    fn submit_with(&self, token: Option<&str>, space_args: &[&str]) -> u64 {
        job_id(&self.sweep_with(token, &submit_args(space_args)))
    }

    /// `sweep status JOB --json`: the job's entry.
    pub fn status(&self, job: u64) -> serde_json::Value {
        let v = stdout_json(&self.sweep(&["status", &job.to_string(), "--json"]));
        v["jobs"][0].clone()
    }

    /// `sweep status JOB --json`, or `None` while the coordinator does not answer (restarting).
    pub fn try_status(&self, job: u64) -> Option<serde_json::Value> {
        status_entry(&self.sweep(&["status", &job.to_string(), "--json"]))
    }

    /// `sweep results JOB --json`.
    pub fn results(&self, job: u64) -> serde_json::Value {
        stdout_json(&self.sweep(&["results", &job.to_string(), "--json"]))
    }

    /// Polls until the job has finished (any end state); returns that status.
    pub fn wait_done(&self, job: u64, timeout: Duration) -> serde_json::Value {
        self.wait_until(job, timeout, |s| !is_running(s))
    }

    /// Polls until the job has finished (any end state), then returns `sweep results JOB --json`.
    pub fn wait_results(&self, job: u64, timeout: Duration) -> serde_json::Value {
        self.wait_done(job, timeout);
        self.results(job)
    }

    /// Polls `sweep status` until `pred` holds for the job (bounded by `timeout`); returns that status.
    /// A coordinator that is restarting answers nothing for a moment: those polls are retried.
    pub fn wait_until(
        &self,
        job: u64,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        poll_until(job, timeout, self.opts.poll, || self.try_status(job), pred)
    }

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
                None if Instant::now() < deadline => std::thread::sleep(self.opts.poll),
                None => panic!("the coordinator did not answer `sweep status` within 60 s"),
            }
        };
        dag_of(&all, top)
    }
}

impl<N: Network> Drop for Cluster<N> {
    /// A failing test keeps its cluster's logs (the scratch directory goes with the cluster): they are copied
    /// to a directory named in the test's output.
    fn drop(&mut self) {
        if std::thread::panicking() {
            keep_logs(self.dir.path());
        }
    }
}

/// Copies the `.log` files of `dir` to a directory beside it that outlives the test, and names it.
fn keep_logs(dir: &Path) {
    let name = dir.file_name().unwrap_or_default();
    let keep = std::env::temp_dir().join(format!("{}-logs", name.to_string_lossy()));
    if std::fs::create_dir_all(&keep).is_err() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "log") {
                let _ = std::fs::copy(&path, keep.join(e.file_name()));
            }
        }
    }
    eprintln!("logs of the failed test kept in {}", keep.display());
}

/// The job's entry in the output of `sweep status JOB --json`; `None` if the command failed (a coordinator
/// restarting, a replicated one electing its leader).
pub fn status_entry(out: &Output) -> Option<serde_json::Value> {
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .map(|v| v["jobs"][0].clone())
}

/// Polls `try_status` every `poll` until `pred` holds for the job (bounded by `timeout`); returns that status.
/// Polls that get no answer are retried.
pub fn poll_until(
    job: u64,
    timeout: Duration,
    poll: Duration,
    try_status: impl Fn() -> Option<serde_json::Value>,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + timeout;
    let mut last = serde_json::Value::Null;
    while Instant::now() < deadline {
        if let Some(s) = try_status() {
            if pred(&s) {
                return s;
            }
            last = s;
        }
        std::thread::sleep(poll);
    }
    panic!("job {job}: condition not reached within {timeout:?}; last status {last}");
}

/// `submit SPACE_ARGS --json`, the flag placed before `--` (what follows it is an `exec` job's command).
pub fn submit_args<'a>(space_args: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["submit"];
    args.extend_from_slice(space_args);
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    args.insert(at, "--json");
    args
}

/// The job id `sweep submit --json` printed.
pub fn job_id(out: &Output) -> u64 {
    let v = stdout_json(out);
    v["job"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"))
}

/// Whether a job's status (an entry of `sweep status --json`) says it has not finished.
pub fn is_running(s: &serde_json::Value) -> bool {
    matches!(s["state"].as_str(), Some("running") | Some("paused"))
}

pub fn chunks_done(s: &serde_json::Value) -> u64 {
    s["chunks_done"].as_u64().unwrap_or(0)
}

/// A counter of a job's status; 0 when absent.
pub fn field(s: &serde_json::Value, name: &str) -> u64 {
    s[name].as_u64().unwrap_or(0)
}

fn append(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
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

/// Starts `sweep coordinator` (the cluster's `start`th) on `host` with `opts`, its log appended to `log`;
/// returns it and the URL it printed. The error says what it printed instead, and the last lines it logged.
fn spawn_coordinator<N: Network>(
    net: &N,
    host: &N::Host,
    opts: &Opts,
    listen: &str,
    store: &Path,
    log: &Path,
    start: u32,
) -> Result<(Proc, String), String> {
    let mut cmd = net.command(host, &opts.bin);
    cmd.args(["coordinator", "--listen", listen, "--data"])
        .arg(store)
        .args(["--lease-ttl-ms", &opts.lease_ttl_ms.to_string()])
        .args(&opts.coordinator_args);
    if let Some(p) = &opts.tls {
        cmd.arg("--tls-cert")
            .arg(&p.server_cert)
            .arg("--tls-key")
            .arg(&p.server_key)
            .arg("--tls-client-ca")
            .arg(&p.ca);
    }
    if let Some(n) = opts.max_attempts {
        cmd.args(["--max-attempts", &n.to_string()]);
    }
    let mut err = append(log);
    let _ = writeln!(err, "=== coordinator start {start} ===");
    let child = cmd
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawn coordinator: {e}"))?;
    let (mut proc, line) = coordinator_first_line(child)?;
    let line = line.unwrap_or_default();
    if let Some(addr) = line.trim().strip_prefix("sweep coordinator listening on ") {
        return Ok((proc, format!("{}://{addr}", opts.scheme())));
    }
    proc.kill9();
    let logged = std::fs::read_to_string(log).unwrap_or_default();
    let last = logged.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
    Err(format!(
        "the coordinator printed {line:?} instead of its address; last log lines: {last}"
    ))
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

/// Processes that have `token` as one of their arguments (a marker no other process has), from /proc.
pub fn processes_with(token: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            if cmd.split(|b| *b == 0).any(|a| a == token.as_bytes()) {
                found.push(pid);
            }
        }
    }
    found
}

/// Waits until `pred` holds, checking every 50 ms; fails naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !pred() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_for`] at least `n` processes whose command line holds `token` ([`processes_with`]).
pub fn wait_for_processes(what: &str, timeout: Duration, token: &str, n: usize) {
    wait_for(what, timeout, || processes_with(token).len() >= n)
}

/// [`wait_for`] no process whose command line holds `token` ([`processes_with`]) to be left.
pub fn wait_for_no_process(what: &str, timeout: Duration, token: &str) {
    wait_for(what, timeout, || processes_with(token).is_empty())
}
