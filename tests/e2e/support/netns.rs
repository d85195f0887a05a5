//! A harness for fault injection across real network hosts, simulated with Linux network namespaces.
//!
//! Loopback tests (`tests/e2e/support/mod.rs`) can kill processes, but every process shares one network stack, so a
//! partition cannot be made. Here each process runs in its own namespace (`ip netns exec NS sweep ...`), joined
//! by veth pairs to a bridge in a private "hub" namespace. Cutting a worker's link is `ip link set down` on the
//! hub side of its veth: the worker's own interface stays configured, its TCP connections stay open and simply
//! stop getting answers, as when a cable is pulled or a switch port dies. Nothing is created in the host's
//! namespace, so addresses (10.77.0.0/24) cannot collide with the machine's own network or with another test.
//!
//! Every name includes the test process's pid and a sequence number. [`Net`]'s `Drop` deletes every
//! namespace and unmounts every tmpfs it created, on success and on panic; a run that was SIGKILLed leaves
//! names whose pid is dead, and the next [`Net::new`] removes those.
//!
//! Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip` tool (iproute2); where they are missing,
//! [`Net::new`] fails the test and says why. `.ci/run` installs iproute2; CI runs as root.

#![allow(dead_code)] // each scenario uses a different part of the harness

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Proc, SWEEP};

/// The subnet inside every hub namespace; private to it, so every test may use the same one.
const SUBNET: &str = "10.77.0";
/// The hub's own address on the bridge: client commands (`sweep status`, `submit`) run there, so they keep
/// reaching the coordinator whichever worker is cut off.
const HUB_ADDR: &str = "10.77.0.254";
/// The coordinator's port inside its namespace: fixed, so a restarted coordinator listens where workers expect
/// it, and free, because nothing else lives in that namespace.
pub const COORDINATOR_PORT: u16 = 7878;
const NAME_PREFIX: &str = "swp";

/// Fault scenarios measure timing (lease expiry during a partition) and load the 2-core machine fully: one at
/// a time per test binary.
static SERIAL: Mutex<()> = Mutex::new(());
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`, returning its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    run_tool("ip", args)
}

fn run_tool(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{tool}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{tool} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name this harness made (`swp<pid>-...`), if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    rest.split('-').next()?.parse().ok()
}

/// Removes namespaces and tmpfs mounts left by harness runs that were killed before their `Drop` ran.
fn remove_stale() {
    if let Ok(mounts) = std::fs::read_to_string("/proc/mounts") {
        for line in mounts.lines() {
            let mut f = line.split_whitespace();
            let (Some(fs), Some(dir)) = (f.next(), f.next()) else {
                continue;
            };
            let stale = fs == "tmpfs"
                && Path::new(dir)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| owner_pid(n).is_some_and(|p| !pid_alive(p)));
            if stale {
                let _ = run_tool("umount", &["-l", dir]);
            }
        }
    }
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if owner_pid(name).is_some_and(|p| !pid_alive(p)) {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// One namespace joined to the hub's bridge.
#[derive(Clone, Debug)]
pub struct Node {
    pub ns: String,
    pub addr: String,
    /// The hub side of this node's veth pair: set down to cut the node off.
    hub_port: String,
}

/// A private network: a hub namespace with a bridge, and one namespace per node. Deleted when dropped.
pub struct Net {
    prefix: String,
    hub: String,
    nodes: Vec<Node>,
    mounts: Vec<PathBuf>,
    _serial: MutexGuard<'static, ()>,
}

/// Why the harness cannot run here, as a failed test: a fault scenario that did not run has not passed.
fn unavailable(why: &str) -> ! {
    panic!(
        "network namespaces cannot be made here: {why}. The netns tests need root (CAP_SYS_ADMIN and \
         CAP_NET_ADMIN) and `ip` from iproute2: run them as root after .ci/run (it installs iproute2), or \
         apt-get install iproute2"
    )
}

impl Net {
    /// A fresh hub namespace with a bridge; fails the test where namespaces cannot be made.
    pub fn new() -> Net {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        remove_stale();
        let prefix = format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let hub = format!("{prefix}-hub");
        if let Err(e) = ip(&["netns", "add", &hub]) {
            unavailable(&e);
        }
        // From here on `Drop` removes the hub, whatever fails next.
        let net = Net {
            prefix,
            hub,
            nodes: Vec::new(),
            mounts: Vec::new(),
            _serial: serial,
        };
        let hub = net.hub.as_str();
        let cidr = format!("{HUB_ADDR}/24");
        let setup = [
            vec!["-n", hub, "link", "set", "lo", "up"],
            vec!["-n", hub, "link", "add", "br0", "type", "bridge"],
            vec!["-n", hub, "addr", "add", &cidr, "dev", "br0"],
            vec!["-n", hub, "link", "set", "br0", "up"],
        ];
        for args in &setup {
            if let Err(e) = ip(args) {
                unavailable(&e);
            }
        }
        net
    }

    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// A new namespace with the next address (10.77.0.1, .2, ...) on the bridge.
    pub fn add_node(&mut self, role: &str) -> Node {
        let i = self.nodes.len() + 1;
        assert!(i < 254, "at most 253 nodes per network");
        let node = Node {
            ns: format!("{}-{role}", self.prefix),
            addr: format!("{SUBNET}.{i}"),
            hub_port: format!("p{i}"),
        };
        ip(&["netns", "add", &node.ns]).unwrap_or_else(|e| panic!("{e}"));
        // Recorded before it is configured, so a failure below still deletes it.
        self.nodes.push(node.clone());
        let (hub, ns, port) = (self.hub.as_str(), node.ns.as_str(), node.hub_port.as_str());
        let cidr = format!("{}/24", node.addr);
        let steps = [
            vec![
                "-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
            vec!["-n", hub, "link", "set", port, "master", "br0"],
            vec!["-n", hub, "link", "set", port, "up"],
            vec!["-n", ns, "addr", "add", &cidr, "dev", "eth0"],
            vec!["-n", ns, "link", "set", "eth0", "up"],
            vec!["-n", ns, "link", "set", "lo", "up"],
        ];
        for args in &steps {
            ip(args).unwrap_or_else(|e| panic!("{e}"));
        }
        node
    }

    /// Cuts the node off: the hub side of its link goes down; packets both ways are lost until [`Net::restore`].
    pub fn cut(&self, node: &Node) {
        ip(&["-n", &self.hub, "link", "set", &node.hub_port, "down"])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn restore(&self, node: &Node) {
        ip(&["-n", &self.hub, "link", "set", &node.hub_port, "up"])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Mounts a tmpfs of `bytes` bytes on `dir` (created), unmounted when the network is dropped.
    pub fn mount_tmpfs(&mut self, dir: &Path, bytes: u64) {
        std::fs::create_dir_all(dir).expect("create the mount point");
        let dir_s = dir.to_str().expect("utf-8 mount point");
        run_tool(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes}"),
                "tmpfs",
                dir_s,
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        self.mounts.push(dir.to_path_buf());
    }

    /// A mount point named so that [`remove_stale`] recognises it if this process dies: `swp<pid>-...`.
    pub fn mount_point(&self, parent: &Path, what: &str) -> PathBuf {
        parent.join(format!("{}-{what}", self.prefix))
    }

    /// `ip netns exec NS sweep ARGS`: `sweep` itself, in the namespace (ip execs it, so the pid is sweep's).
    pub fn command(&self, ns: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, SWEEP]).args(args);
        cmd
    }

    /// Runs `sweep ARGS` in the hub namespace to completion, bounded by `timeout`.
    pub fn sweep_in_hub(&self, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut cmd = self.command(&self.hub, &args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn ip netns exec sweep");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(timeout) {
            Ok(out) => out.expect("wait for sweep"),
            Err(_) => {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                panic!(
                    "`sweep {}` did not finish within {timeout:?}",
                    args.join(" ")
                );
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for dir in self.mounts.drain(..).rev() {
            let d = dir.to_string_lossy().to_string();
            if let Err(e) = run_tool("umount", &[&d]) {
                // Still busy (a process that has not exited yet): detach it now, the kernel frees it later.
                eprintln!("netns harness: {e}; unmounting lazily");
                let _ = run_tool("umount", &["-l", &d]);
            }
        }
        for node in self.nodes.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &node.ns]) {
                eprintln!("netns harness: cannot delete {}: {e}", node.ns);
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.hub]) {
            eprintln!("netns harness: cannot delete {}: {e}", self.hub);
        }
    }
}

/// A small deterministic generator (splitmix64): fault timings are drawn from a seed, printed by each test, so a
/// failing schedule can be replayed with `SWEEP_FAULT_SEED=<seed>`.
pub struct Rng(u64);

impl Rng {
    /// The seed from `SWEEP_FAULT_SEED` if set, else `default`; printed either way.
    pub fn from_env(test: &str, default: u64) -> Rng {
        let seed = std::env::var("SWEEP_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("{test}: fault schedule seed {seed} (replay with SWEEP_FAULT_SEED={seed})");
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// How a [`NetCluster`] is started.
#[derive(Clone, Debug)]
pub struct Opts {
    pub workers: usize,
    pub threads: usize,
    pub lease_ttl_ms: u64,
    /// Fault tests expire many leases on purpose; the default cap of 3 attempts would poison chunks that did
    /// nothing wrong, which is a different test.
    pub max_attempts: u32,
    pub prefetch: Option<u32>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            workers: 2,
            threads: 1,
            lease_ttl_ms: 2_000,
            max_attempts: 1_000,
            prefetch: None,
        }
    }
}

/// A worker process and the node it runs on.
pub struct WorkerSlot {
    pub node: Node,
    pub name: String,
    pub proc: Proc,
}

/// A coordinator in its own namespace and workers in theirs, driven from the hub. Field order is drop order:
/// processes die first, then the network goes (unmounting the tmpfs), then the scratch directory.
pub struct NetCluster {
    pub coordinator: Option<Proc>,
    pub workers: Vec<WorkerSlot>,
    pub net: Net,
    pub coordinator_node: Node,
    pub url: String,
    pub data: PathBuf,
    pub opts: Opts,
    /// Coordinator starts so far (1 + restarts).
    pub starts: u32,
    workers_started: u32,
    pub dir: tempfile::TempDir,
}

impl NetCluster {
    /// A coordinator on 10.77.0.1 with its store in `data` (default: a fresh directory in the scratch dir),
    /// and `opts.workers` workers, each in its own namespace.
    pub fn start(
        mut net: Net,
        opts: Opts,
        data: Option<PathBuf>,
        dir: tempfile::TempDir,
    ) -> NetCluster {
        let coordinator_node = net.add_node("coord");
        let url = format!("http://{}:{COORDINATOR_PORT}", coordinator_node.addr);
        let data = data.unwrap_or_else(|| dir.path().join("store"));
        let mut c = NetCluster {
            coordinator: None,
            workers: Vec::new(),
            net,
            coordinator_node,
            url,
            data,
            opts,
            starts: 0,
            workers_started: 0,
            dir,
        };
        c.start_coordinator();
        for i in 0..c.opts.workers {
            let node = c.net.add_node(&format!("w{i}"));
            c.start_worker(node);
        }
        c
    }

    pub fn log_path(&self, what: &str) -> PathBuf {
        self.dir.path().join(format!("{what}.log"))
    }

    fn log_file(&self, what: &str) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(what))
            .expect("open a log file")
    }

    /// Everything the coordinators of this cluster logged (info level), across restarts.
    pub fn coordinator_log(&self) -> String {
        std::fs::read_to_string(self.log_path("coordinator")).unwrap_or_default()
    }

    /// Starts a coordinator on the cluster's address and store; panics if it cannot within 20 s.
    pub fn start_coordinator(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.try_start_coordinator() {
                Ok(p) => {
                    self.coordinator = Some(p);
                    self.starts += 1;
                    return;
                }
                // The address of the coordinator just killed can be briefly unavailable.
                Err(e) if Instant::now() < deadline && e.contains("cannot listen") => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("coordinator start {} failed: {e}", self.starts + 1),
            }
        }
    }

    /// One attempt; the error says what the coordinator printed if it exited.
    pub fn try_start_coordinator(&mut self) -> Result<Proc, String> {
        let args: Vec<String> = vec![
            "coordinator".into(),
            "--listen".into(),
            format!("{}:{COORDINATOR_PORT}", self.coordinator_node.addr),
            "--data".into(),
            self.data.to_string_lossy().into(),
            "--lease-ttl-ms".into(),
            self.opts.lease_ttl_ms.to_string(),
            "--max-attempts".into(),
            self.opts.max_attempts.to_string(),
        ];
        let mut log = self.log_file("coordinator");
        let _ = writeln!(log, "=== coordinator start {} ===", self.starts + 1);
        let child = self
            .net
            .command(&self.coordinator_node.ns, &args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn coordinator: {e}"))?;
        let (mut proc, line) = super::coordinator_first_line(child)?;
        let line = line.unwrap_or_default();
        if line.starts_with("sweep coordinator listening on ") {
            return Ok(proc);
        }
        proc.kill9();
        let log = self.coordinator_log();
        let last = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        Err(format!(
            "the coordinator printed {line:?} instead of its address; last log lines: {last}"
        ))
    }

    /// SIGKILLs the coordinator (no shutdown handler runs).
    pub fn kill_coordinator(&mut self) {
        if let Some(mut p) = self.coordinator.take() {
            p.kill9();
        }
    }

    pub fn restart_coordinator(&mut self) {
        self.kill_coordinator();
        self.start_coordinator();
    }

    /// Starts a worker on `node` under a new name; returns its index in `workers`.
    pub fn start_worker(&mut self, node: Node) -> usize {
        let name = format!("w{}", self.workers_started);
        self.workers_started += 1;
        let mut args: Vec<String> = vec![
            "worker".into(),
            "--connect".into(),
            self.url.clone(),
            "--threads".into(),
            self.opts.threads.to_string(),
            "--name".into(),
            name.clone(),
            "--grace-secs".into(),
            "5".into(),
        ];
        if let Some(p) = self.opts.prefetch {
            args.push("--prefetch".into());
            args.push(p.to_string());
        }
        let child = self
            .net
            .command(&node.ns, &args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log_file(&name))
            .spawn()
            .expect("spawn worker");
        self.workers.push(WorkerSlot {
            node,
            name: name.clone(),
            proc: Proc { child, name },
        });
        self.workers.len() - 1
    }

    /// SIGKILLs worker `i` and starts a replacement on the same node; returns the replacement's index.
    pub fn replace_worker(&mut self, i: usize) -> usize {
        self.workers[i].proc.kill9();
        let node = self.workers[i].node.clone();
        self.start_worker(node)
    }

    pub fn sweep(&self, args: &[&str]) -> Output {
        self.net.sweep_in_hub(
            args,
            &[("SWEEP_COORDINATOR", &self.url)],
            Duration::from_secs(60),
        )
    }

    /// `sweep submit SPACE_ARGS --json`; returns the job id.
    pub fn submit(&self, space_args: &[&str]) -> u64 {
        let mut args = vec!["submit"];
        args.extend_from_slice(space_args);
        args.push("--json");
        let v = super::stdout_json(&self.sweep(&args));
        v["job"]
            .as_u64()
            .unwrap_or_else(|| panic!("no job id in {v}"))
    }

    /// `sweep status JOB --json`, or `None` while the coordinator does not answer.
    pub fn try_status(&self, job: u64) -> Option<Value> {
        let out = self.sweep(&["status", &job.to_string(), "--json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .map(|v| v["jobs"][0].clone())
    }

    pub fn status(&self, job: u64) -> Value {
        self.try_status(job)
            .unwrap_or_else(|| panic!("the coordinator did not answer `status {job}`"))
    }

    /// Polls until `pred` holds for the job's status (bounded by `timeout`); returns that status.
    pub fn wait_until(&self, job: u64, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(s) = self.try_status(job) {
                if pred(&s) {
                    return s;
                }
                last = s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("job {job}: condition not reached within {timeout:?}; last status {last}");
    }

    pub fn wait_done(&self, job: u64, timeout: Duration) -> Value {
        self.wait_until(job, timeout, |s| !is_running(s))
    }

    /// `sweep results JOB --json`.
    pub fn results(&self, job: u64) -> Value {
        super::stdout_json(&self.sweep(&["results", &job.to_string(), "--json"]))
    }
}

impl Drop for NetCluster {
    /// A failing scenario keeps its logs (the scratch directory goes with the cluster): they are copied to a
    /// directory named in the test's output.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let keep = std::env::temp_dir().join(format!("sweep-fault-logs-{}", self.net.prefix));
        if std::fs::create_dir_all(&keep).is_err() {
            return;
        }
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.flatten() {
                let path = e.path();
                if path.extension().is_some_and(|x| x == "log") {
                    let _ = std::fs::copy(&path, keep.join(e.file_name()));
                }
            }
        }
        eprintln!(
            "netns harness: logs of the failed scenario kept in {}",
            keep.display()
        );
    }
}

pub fn is_running(s: &Value) -> bool {
    matches!(s["state"].as_str(), Some("running") | Some("paused"))
}

pub fn chunks_done(s: &Value) -> u64 {
    s["chunks_done"].as_u64().unwrap_or(0)
}

pub fn field(s: &Value, name: &str) -> u64 {
    s[name].as_u64().unwrap_or(0)
}
