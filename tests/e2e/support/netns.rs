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
//! [`Net`] is a [`Network`] for the one cluster harness (`support::Cluster`): it adds only what namespaces
//! need, a host per process (`ip netns exec NS`) and fixed addresses on the bridge.
//!
//! Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip` tool (iproute2); where they are missing,
//! [`Net::new`] fails the test and says why. `scripts/test` installs iproute2; CI runs as root.

#![allow(dead_code)] // each scenario uses a different part of the harness

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Cluster, Network, Opts};

/// The subnet inside every hub namespace; private to it, so every test may use the same one.
const SUBNET: &str = "10.77.0";
/// The hub's own address on the bridge: client commands (`sweep status`, `submit`) run there, so they keep
/// reaching the coordinator whichever worker is cut off.
const HUB_ADDR: &str = "10.77.0.254";
/// The coordinator's port inside its namespace: known before it starts, and free, because nothing else lives
/// in that namespace.
pub const COORDINATOR_PORT: u16 = 7878;
const NAME_PREFIX: &str = "swp";

/// Names are unique per process and per network, so scenarios run side by side as the harness schedules them:
/// each namespace has its own addresses, port and nftables rules. No lock holds one back for another: libtest
/// would keep a harness thread idle waiting on it.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`, returning its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    run_tool("ip", args)
}

fn run_tool(tool: &str, args: &[&str]) -> Result<(), String> {
    run_tool_fed(tool, args, "")
}

/// Runs `tool ARGS` with `input` on its stdin, returning its stderr on failure.
fn run_tool_fed(tool: &str, args: &[&str], input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{tool}`: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("cannot write to `{tool}`: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{tool}` did not finish: {e}"))?;
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
}

/// Why the harness cannot run here, as a failed test: a fault scenario that did not run has not passed.
fn unavailable(why: &str) -> ! {
    panic!(
        "network namespaces cannot be made here: {why}. The netns tests need root (CAP_SYS_ADMIN and \
         CAP_NET_ADMIN) and `ip` from iproute2: run them as root with scripts/test (it installs iproute2), or \
         apt-get install iproute2"
    )
}

impl Net {
    /// A fresh hub namespace with a bridge; fails the test where namespaces cannot be made.
    pub fn new() -> Net {
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
            ns: format!("{}-{role}{i}", self.prefix),
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

    /// Drops every IP packet to and from the node, silently: an nftables table in the node's namespace drops
    /// what arrives on and leaves by its link. Unlike [`Net::cut`], the link stays up and ARP still answers,
    /// so nothing tells a peer that the node is gone: connections stay open and calls wait, as behind a
    /// firewall that drops instead of refusing or a switch that loses packets. Undone by [`Net::pass`].
    pub fn drop_packets(&self, node: &Node) {
        let ruleset = "table inet sweep_drop {\n\
             chain input { type filter hook input priority -100; iifname \"eth0\" drop; }\n\
             chain output { type filter hook output priority -100; oifname \"eth0\" drop; }\n\
             }\n";
        nft(&node.ns, &["-f", "-"], ruleset).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Lets the node's packets through again after [`Net::drop_packets`].
    pub fn pass(&self, node: &Node) {
        nft(&node.ns, &["delete", "table", "inet", "sweep_drop"], "")
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
}

/// `nft ARGS` inside namespace `ns`, with `input` on its stdin; a failure names nftables, which `scripts/test`
/// installs.
fn nft(ns: &str, args: &[&str], input: &str) -> Result<(), String> {
    let mut full = vec!["netns", "exec", ns, "nft"];
    full.extend_from_slice(args);
    run_tool_fed("ip", &full, input).map_err(|e| {
        format!(
            "{e} (the packet-dropping faults need nftables: scripts/test installs it, or apt-get install \
             nftables)"
        )
    })
}

/// `ip netns exec NS PROGRAM`: ip execs the program, so the child's pid is the program's own.
fn exec_in(ns: &str, program: &Path) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(program);
    cmd
}

impl Network for Net {
    type Host = Node;

    fn coordinator_host(&mut self) -> (Node, String) {
        let node = self.add_node("coord");
        let listen = format!("{}:{COORDINATOR_PORT}", node.addr);
        (node, listen)
    }

    fn worker_host(&mut self, name: &str) -> Node {
        self.add_node(name)
    }

    fn command(&self, host: &Node, program: &Path) -> Command {
        exec_in(&host.ns, program)
    }

    /// The hub: client commands keep reaching the coordinator whichever worker is cut off.
    fn client_command(&self, program: &Path) -> Command {
        exec_in(&self.hub, program)
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

/// A cluster whose every process has a network namespace of its own.
pub type NetCluster = Cluster<Net>;

/// Fault scenarios' cluster options: the loopback defaults, except that fault tests expire many leases on
/// purpose (the default cap of 3 attempts would poison chunks that did nothing wrong, which is a different
/// test), and that they act on what a poll sees (a restart every few chunks), so they poll more often.
pub fn fault_opts() -> Opts {
    Opts {
        max_attempts: Some(1_000),
        poll: Duration::from_millis(50),
        ..Opts::default()
    }
}

/// [`fault_opts`] with `workers` workers and leases of `lease_ttl_ms`.
pub fn fault_opts_with(workers: usize, lease_ttl_ms: u64) -> Opts {
    Opts {
        workers,
        lease_ttl_ms,
        ..fault_opts()
    }
}
