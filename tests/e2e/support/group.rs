//! A replicated coordinator as real processes: [`Group`] starts members (`sweep coordinator --peers ...`), each
//! with its own data directory, on loopback ports chosen before they start (every member must know every
//! other's URL) or, on a [`Network`] of namespaces, each member on a host of its own; workers and client
//! commands get the list of all members' URLs and follow the leader. Members are SIGKILLed and restarted on
//! their directories by index (member `i` has id `i + 1` until [`Group::replace`] puts a new member, with a
//! new id, in its place: same address, empty directory, `--join`).

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::{
    append, job_id, poll_until, run_bounded, spawn_coordinator, status_entry, stdout_json,
    submit_args, Loopback, Network, Opts, Proc,
};

pub struct Group<N: Network = Loopback> {
    /// Member `i` (id `ids[i]`), `None` while it is down.
    pub members: Vec<Option<Proc>>,
    /// The id of the member at each index.
    pub ids: Vec<u64>,
    /// Whether the member at each index joined the running group (`--join`) rather than founded it.
    joined: Vec<bool>,
    pub workers: Vec<Proc>,
    pub net: N,
    /// Every member's URL, by index.
    pub urls: Vec<String>,
    /// The URLs joined by commas: what clients and workers are given.
    pub list: String,
    pub opts: Opts,
    hosts: Vec<N::Host>,
    listens: Vec<String>,
    /// Starts of each member so far.
    starts: Vec<u32>,
    /// Each member's dashboard address (`--http`), when the group serves them.
    pub http: Vec<Option<String>>,
    pub dir: tempfile::TempDir,
}

/// `n` distinct free loopback ports: bound together and released, so members can take them a moment later.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("its address").port())
        .collect()
}

impl Group {
    /// `members` members on loopback and `opts.workers` workers.
    pub fn start(members: usize, opts: Opts) -> Group {
        Group::start_on(Loopback, members, opts, super::scratch())
    }

    /// As [`Group::start`], each member also serving `--http` on a loopback port of its own.
    pub fn start_with_http(members: usize, opts: Opts) -> Group {
        Group::start_inner(Loopback, members, opts, super::scratch(), true)
    }
}

impl<N: Network> Group<N> {
    pub fn start_on(net: N, members: usize, opts: Opts, dir: tempfile::TempDir) -> Group<N> {
        Group::start_inner(net, members, opts, dir, false)
    }

    fn start_inner(
        mut net: N,
        members: usize,
        opts: Opts,
        dir: tempfile::TempDir,
        http: bool,
    ) -> Group<N> {
        let mut hosts = Vec::new();
        let mut listens = Vec::new();
        // Every port this group needs, picked at once so that none is picked twice.
        let mut ports = free_ports(2 * members).into_iter();
        let mut port = || ports.next().expect("enough ports");
        for _ in 0..members {
            let (host, listen) = net.coordinator_host();
            // On loopback the harness offers port 0, which no other member could be told in advance.
            let listen = match listen.strip_suffix(":0") {
                Some(ip) => format!("{ip}:{}", port()),
                None => listen,
            };
            hosts.push(host);
            listens.push(listen);
        }
        let http: Vec<Option<String>> = (0..members)
            .map(|_| http.then(|| format!("127.0.0.1:{}", port())))
            .collect();
        let urls: Vec<String> = listens
            .iter()
            .map(|l| format!("{}://{l}", opts.scheme()))
            .collect();
        let mut g = Group {
            members: (0..members).map(|_| None).collect(),
            ids: (1..=members as u64).collect(),
            joined: vec![false; members],
            workers: Vec::new(),
            net,
            list: urls.join(","),
            urls,
            opts,
            hosts,
            listens,
            starts: vec![0; members],
            http,
            dir,
        };
        for i in 0..members {
            g.start_member(i);
        }
        for _ in 0..g.opts.workers {
            g.add_worker();
        }
        g
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("member{}", i + 1))
    }

    pub fn log_path(&self, what: &str) -> PathBuf {
        self.dir.path().join(format!("{what}.log"))
    }

    /// Starts member `i` on its data directory and address (retrying while the address of a member just
    /// killed is still held, at most 20 s).
    pub fn start_member(&mut self, i: usize) {
        let mut opts = self.opts.clone();
        if self.joined[i] {
            opts.coordinator_args.extend([
                "--join".into(),
                self.list.clone(),
                "--advertise".into(),
                self.urls[i].clone(),
            ]);
        } else {
            opts.coordinator_args.extend([
                "--peers".into(),
                self.list.clone(),
                "--id".into(),
                (i + 1).to_string(),
            ]);
        }
        if let Some(addr) = &self.http[i] {
            opts.coordinator_args
                .extend(["--http".into(), addr.clone()]);
        }
        let log = self.log_path(&format!("member{}", i + 1));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.starts[i] += 1;
            match spawn_coordinator(
                &self.net,
                &self.hosts[i],
                &opts,
                &self.listens[i],
                &self.data_dir(i),
                &log,
                self.starts[i],
            ) {
                Ok((p, _)) => {
                    self.members[i] = Some(p);
                    return;
                }
                Err(e) if Instant::now() < deadline && e.contains("cannot listen") => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("member {} start {} failed: {e}", i + 1, self.starts[i]),
            }
        }
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].take() {
            p.kill9();
        }
    }

    /// The machine of member `i` is lost with its disk, and a new member takes its place: SIGKILL, its
    /// directory deleted, `sweep coordinator remove-member` (retried while the group elects a leader), then a
    /// new process on the same address with an empty directory and `--join`. Waits until the group lists the
    /// new member (a new id); returns that id.
    pub fn replace(&mut self, i: usize) -> u64 {
        self.kill(i);
        let dir = self.data_dir(i);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("remove the member's directory");
        }
        let old = self.ids[i].to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.sweep(&["coordinator", "remove-member", &old, "--json"]);
            if out.status.success() {
                break;
            }
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            // Asked again after an answer that was lost, the member is gone already.
            if err.contains(&format!("there is no member {old}")) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "remove-member {old} kept failing: {err}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        self.joined[i] = true;
        self.start_member(i);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // The new member answers under its new id once it runs, and follows once it hears the leader.
            let id = self
                .members_view()
                .iter()
                .find(|m| m["url"] == self.urls[i].as_str() && m["state"] == "follower")
                .and_then(|m| m["id"].as_u64());
            if let Some(id) = id.filter(|&id| id != self.ids[i]) {
                self.ids[i] = id;
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "the group never listed a new member at {}: {:?}; its log: {}",
                self.urls[i],
                self.members_view(),
                self.member_log(i)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the member with id `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }

    /// Starts one more worker, connected to every member.
    pub fn add_worker(&mut self) -> usize {
        let name = format!("w{}", self.workers.len());
        let host = self.net.worker_host(&name);
        let mut cmd = self.net.command(&host, &self.opts.bin);
        cmd.args(["worker", "--connect", &self.list, "--threads"])
            .arg(self.opts.threads.to_string())
            .args(["--name", &name, "--grace-secs", "5"])
            .args(self.opts.client_tls_args());
        if let Some(p) = self.opts.prefetch {
            cmd.args(["--prefetch", &p.to_string()]);
        }
        let child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(append(&self.log_path(&name)))
            .spawn()
            .expect("spawn worker");
        self.workers.push(Proc { child, name });
        self.workers.len() - 1
    }

    /// `sweep ARGS` against the group (every member's URL; the command follows the leader).
    pub fn sweep(&self, args: &[&str]) -> Output {
        let mut cmd = self.net.client_command(&self.opts.bin);
        cmd.args(args)
            .env("SWEEP_COORDINATOR", &self.list)
            .envs(self.opts.client_tls_env());
        run_bounded(cmd, Duration::from_secs(60))
    }

    /// `sweep status JOB --json` asking only the members in `list` (URLs joined by commas), or `None` while
    /// none answers: a silenced member is then never called, so each poll costs no deadline. Always this
    /// build's `sweep`, whatever the group runs: it measures the group, and another build's client may wait on
    /// a silent member forever.
    pub fn status_from(&self, list: &str, job: u64) -> Option<serde_json::Value> {
        let mut cmd = self.net.client_command(std::path::Path::new(super::SWEEP));
        cmd.args(["status", &job.to_string(), "--json", "--coordinator", list])
            .envs(self.opts.client_tls_env());
        status_entry(&run_bounded(cmd, Duration::from_secs(60)))
    }

    /// Every member's URL but member `i`'s, joined by commas.
    pub fn others(&self, i: usize) -> String {
        let others: Vec<&str> = (0..self.urls.len())
            .filter(|&j| j != i)
            .map(|j| self.urls[j].as_str())
            .collect();
        others.join(",")
    }

    pub fn submit(&self, space_args: &[&str]) -> u64 {
        job_id(&self.sweep(&submit_args(space_args)))
    }

    pub fn try_status(&self, job: u64) -> Option<serde_json::Value> {
        status_entry(&self.sweep(&["status", &job.to_string(), "--json"]))
    }

    pub fn wait_until(
        &self,
        job: u64,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        poll_until(job, timeout, self.opts.poll, || self.try_status(job), pred)
    }

    pub fn results(&self, job: u64) -> serde_json::Value {
        stdout_json(&self.sweep(&["results", &job.to_string(), "--json"]))
    }

    /// `sweep coordinator members --json`: one entry per member, reachable or not.
    pub fn members_view(&self) -> Vec<serde_json::Value> {
        self.view_of(&self.list)
    }

    /// The entries of the members in `list` (URLs joined by commas) alone.
    fn view_of(&self, list: &str) -> Vec<serde_json::Value> {
        let out = self.sweep(&[
            "coordinator",
            "members",
            "--json",
            "--listed-only",
            "--coordinator",
            list,
        ]);
        if !out.status.success() {
            return Vec::new();
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// Exactly one member says it leads.
    pub fn assert_one_leader(&self) {
        let view = self.members_view();
        let leaders = view.iter().filter(|m| m["state"] == "leader").count();
        assert_eq!(leaders, 1, "{view:?}");
    }

    /// The index of the member serving as the leader now, if one does.
    pub fn leader(&self) -> Option<usize> {
        self.members_view()
            .iter()
            .find(|m| m["state"] == "leader")
            .and_then(|m| m["id"].as_u64())
            .and_then(|id| self.index_of(id))
    }

    /// Waits (at most `timeout`) until a member other than `not` serves as the leader; returns it. Only the
    /// others are asked: `not` may be cut off, and asking it would cost a connect timeout each time.
    pub fn wait_leader(&self, not: Option<usize>, timeout: Duration) -> usize {
        let others = match not {
            Some(i) => self.others(i),
            None => self.list.clone(),
        };
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self
                .view_of(&others)
                .iter()
                .find(|m| m["state"] == "leader")
                .and_then(|m| m["id"].as_u64())
                .and_then(|id| self.index_of(id));
            if let Some(l) = leader {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no leader (other than {not:?}) within {timeout:?}: {:?}",
                self.members_view()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where member `i` runs.
    pub fn host(&self, i: usize) -> &N::Host {
        &self.hosts[i]
    }

    /// `sweep coordinator members --json` run where member `i` runs, asking only it: its own view even while
    /// it is cut off from everyone else.
    pub fn own_view(&self, i: usize) -> Option<serde_json::Value> {
        let mut cmd = self.net.command(&self.hosts[i], &self.opts.bin);
        cmd.envs(self.opts.client_tls_env()).args([
            "coordinator",
            "members",
            "--json",
            "--coordinator",
            &self.urls[i],
        ]);
        let out = run_bounded(cmd, Duration::from_secs(30));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let own = v
            .as_array()?
            .iter()
            .find(|m| m["url"] == self.urls[i].as_str())?;
        Some(own.clone())
    }

    /// `GET path` from member `i`'s dashboard: the status code and the body.
    pub fn http_get(&self, i: usize, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let addr = self.http[i].as_ref().expect("the group serves --http");
        let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| {
            panic!(
                "member {}: connect to the dashboard at {addr}: {e}; its log: {}",
                i + 1,
                self.member_log(i)
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        });
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("response");
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        (code, body)
    }

    /// Everything member `i` logged, across its restarts.
    pub fn member_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(&format!("member{}", i + 1))).unwrap_or_default()
    }
}

impl<N: Network> Drop for Group<N> {
    /// A failing test keeps the group's logs, as a failing [`super::Cluster`] does.
    fn drop(&mut self) {
        if std::thread::panicking() {
            super::keep_logs(self.dir.path());
        }
    }
}
