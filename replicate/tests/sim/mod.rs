//! A simulated group: members over real sled stores in temporary directories, a network that can drop, delay,
//! duplicate and cut messages, and a clock that moves in rounds. Everything random comes from one seeded
//! generator and every map is ordered, so a seed replays exactly; every loop is bounded.
//!
//! It also keeps the checks that hold at every moment: an index is applied with one content only, ever, on any
//! member (`history`), and each member applies in increasing index order (`Recorder`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use sweep_replicate::{Config, LogStore, Node, ReplicateError, StateMachine};

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// splitmix64: small, seedable, good enough to pick faults.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5eed_5eed_5eed_5eed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `permille`/1000.
    pub fn chance(&mut self, permille: u64) -> bool {
        self.below(1000) < permille
    }
}

/// The state machine of the tests: every entry it applied, by index, and its snapshot is all of them.
#[derive(Default, Debug)]
pub struct Recorder {
    pub entries: BTreeMap<u64, Vec<u8>>,
    applied: u64,
    pub restores: Vec<u64>,
    /// How many snapshot messages to refuse still, as a state machine whose snapshot file has not arrived.
    pub refuse_snapshots: std::cell::Cell<u64>,
    /// The `applied` of each snapshot that became the stored one (taken or installed).
    pub stored: Vec<u64>,
    /// Snapshots are taken by a job off the node's thread (which the node waits for before applying more).
    pub background: bool,
}

impl StateMachine for Recorder {
    fn apply(&mut self, index: u64, data: &[u8]) {
        assert!(
            index > self.applied,
            "applied {index} after {}: out of order",
            self.applied
        );
        self.entries.insert(index, data.to_vec());
        self.applied = index;
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = self.applied.to_be_bytes().to_vec();
        for (index, data) in &self.entries {
            v.extend_from_slice(&index.to_be_bytes());
            v.extend_from_slice(&(data.len() as u32).to_be_bytes());
            v.extend_from_slice(data);
        }
        v
    }

    fn restore(&mut self, data: &[u8]) {
        let u64_at = |at: usize| u64::from_be_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        self.applied = u64_at(0);
        self.entries.clear();
        let mut at = 8;
        while at < data.len() {
            let index = u64_at(at);
            let len =
                u32::from_be_bytes(data[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
            self.entries
                .insert(index, data[at + 12..at + 12 + len].to_vec());
            at += 12 + len;
        }
        self.restores.push(self.applied);
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    fn snapshot_job(&self) -> Option<sweep_replicate::SnapshotJob> {
        if !self.background {
            return None;
        }
        let data = self.snapshot();
        Some(Box::new(move || {
            // Long enough for entries to commit meanwhile and wait behind it.
            std::thread::sleep(std::time::Duration::from_millis(2));
            Some(data)
        }))
    }

    fn has_snapshot(&self, _data: &[u8]) -> bool {
        let refuse = self.refuse_snapshots.get();
        self.refuse_snapshots.set(refuse.saturating_sub(1));
        refuse == 0
    }

    fn snapshot_stored(&mut self, data: &[u8]) {
        let applied = data
            .get(..8)
            .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
        self.stored.push(applied);
    }
}

/// What the network does to each message.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub drop_permille: u64,
    pub duplicate_permille: u64,
    /// Each message is delivered 0..=max_delay rounds after it is sent.
    pub max_delay: u64,
}

struct Envelope {
    at: u64,
    seq: u64,
    from: u64,
    to: u64,
    bytes: Vec<u8>,
    snapshot: bool,
}

struct Member {
    node: Node<Recorder>,
    // Dropped after the node: the store's tree belongs to this database.
    _db: sled::Db,
}

/// A proposal made and not yet known committed or lost.
struct Pending {
    proposer: u64,
    index: u64,
    term: u64,
    data: Vec<u8>,
}

pub struct Sim {
    pub rng: Rng,
    pub now: u64,
    pub faults: Faults,
    members: BTreeMap<u64, Member>,
    root: tempfile::TempDir,
    /// Each member's store directory (a crash moves it to a copy; see `crash`).
    dirs: BTreeMap<u64, PathBuf>,
    crashes: u64,
    in_flight: Vec<Envelope>,
    seq: u64,
    blocked: BTreeSet<(u64, u64)>,
    pub snapshot_every: u64,
    /// Members take snapshots off their node's thread.
    background: bool,
    /// Every member's `Config::max_snapshot_bytes`.
    max_snapshot_bytes: usize,
    /// Every entry ever applied on any member: index → content.
    pub history: BTreeMap<u64, Vec<u8>>,
    /// Proposals whose proposer applied them in their own term: committed, acknowledged to a client.
    pub acked: BTreeMap<u64, Vec<u8>>,
    pending: Vec<Pending>,
}

impl Sim {
    /// `n` founding members, ids 1..=n.
    pub fn new(seed: u64, n: u64, snapshot_every: u64) -> Sim {
        Sim::with_snapshot_limit(seed, n, snapshot_every, usize::MAX)
    }

    /// [`Sim::new`], run until its first leader is elected (within 200 rounds): the group and the leader.
    pub fn with_leader(seed: u64, n: u64, snapshot_every: u64) -> (Sim, u64) {
        let mut sim = Sim::new(seed, n, snapshot_every);
        let leader = sim.wait_leader(200);
        (sim, leader)
    }

    /// As `new`, every member taking its snapshots off the node's thread (`StateMachine::snapshot_job`).
    pub fn with_background_snapshots(seed: u64, n: u64, snapshot_every: u64) -> Sim {
        Sim::build(seed, n, snapshot_every, usize::MAX, true)
    }

    /// As `new`, every member sending snapshots of at most `max_snapshot_bytes`.
    pub fn with_snapshot_limit(
        seed: u64,
        n: u64,
        snapshot_every: u64,
        max_snapshot_bytes: usize,
    ) -> Sim {
        Sim::build(seed, n, snapshot_every, max_snapshot_bytes, false)
    }

    fn build(
        seed: u64,
        n: u64,
        snapshot_every: u64,
        max_snapshot_bytes: usize,
        background: bool,
    ) -> Sim {
        let mut sim = Sim {
            rng: Rng::new(seed),
            now: 0,
            faults: Faults::default(),
            members: BTreeMap::new(),
            root: tempfile::tempdir().expect("temp dir"),
            dirs: BTreeMap::new(),
            crashes: 0,
            in_flight: Vec::new(),
            seq: 0,
            blocked: BTreeSet::new(),
            snapshot_every,
            max_snapshot_bytes,
            history: BTreeMap::new(),
            acked: BTreeMap::new(),
            pending: Vec::new(),
            background,
        };
        let voters: Vec<u64> = (1..=n).collect();
        for id in 1..=n {
            sim.open(id, Some(&voters));
        }
        sim
    }

    pub fn config(&self, id: u64) -> Config {
        Config {
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_every: self.snapshot_every,
            max_size_per_msg: 64 * 1024,
            max_snapshot_bytes: self.max_snapshot_bytes,
            ..Config::new(id)
        }
    }

    fn dir(&mut self, id: u64) -> PathBuf {
        let root = self.root.path().to_path_buf();
        self.dirs
            .entry(id)
            .or_insert_with(|| root.join(format!("member-{id}")))
            .clone()
    }

    /// Opens member `id` from its directory (creating it empty if there is none), bootstrapping a founder.
    fn open(&mut self, id: u64, founders: Option<&[u64]>) {
        // No background flusher: what reaches the files is what the node flushed (or a full buffer), so a
        // copy of the directory is what a crash would leave.
        let db = sled::Config::new()
            .path(self.dir(id))
            .flush_every_ms(None)
            .open()
            .expect("open sled");
        let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("log store");
        if let Some(voters) = founders {
            store
                .bootstrap(voters, Recorder::default().snapshot())
                .expect("bootstrap");
        }
        let recorder = Recorder {
            background: self.background,
            ..Recorder::default()
        };
        let node = Node::new(&self.config(id), store, recorder).expect("node");
        self.members.insert(id, Member { node, _db: db });
    }

    /// The member stops at once: its in-memory state (the recorder included) is gone, and its store keeps only
    /// what reached the files. Dropping sled would flush it, so the member is leaked instead and its directory
    /// copied as it is: the copy is the disk after the crash.
    pub fn crash(&mut self, id: u64) {
        let Some(member) = self.members.remove(&id) else {
            return;
        };
        self.crashes += 1;
        let from = self.dir(id);
        let to = self
            .root
            .path()
            .join(format!("member-{id}-after-crash-{}", self.crashes));
        copy_dir(&from, &to);
        std::mem::forget(member);
        self.dirs.insert(id, to);
    }

    /// Starts a crashed member again from its store.
    pub fn restart(&mut self, id: u64) {
        assert!(!self.members.contains_key(&id), "{id} is running");
        self.open(id, None);
    }

    /// The member's machine is lost with its disk.
    pub fn destroy(&mut self, id: u64) {
        self.crash(id);
        let dir = self.dir(id);
        std::fs::remove_dir_all(dir).expect("remove the member's store");
    }

    /// A new member with an empty store, not yet in the group: it waits for the leader to contact it.
    pub fn start_empty(&mut self, id: u64) {
        assert!(!self.dirs.contains_key(&id), "{id} had a store");
        self.open(id, None);
    }

    pub fn node(&self, id: u64) -> &Node<Recorder> {
        &self.members.get(&id).expect("a live member").node
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Node<Recorder> {
        &mut self.members.get_mut(&id).expect("a live member").node
    }

    pub fn live(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Cuts every link between different groups (both ways); members in no group are cut from everyone.
    pub fn partition(&mut self, groups: &[&[u64]]) {
        self.blocked.clear();
        let all: Vec<u64> = (1..=16).collect();
        let group_of = |id: u64| groups.iter().position(|g| g.contains(&id));
        for &a in &all {
            for &b in &all {
                if a != b && (group_of(a).is_none() || group_of(a) != group_of(b)) {
                    self.blocked.insert((a, b));
                }
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    fn send(&mut self, from: u64, to: u64, bytes: Vec<u8>, snapshot: bool) {
        if self.rng.chance(self.faults.drop_permille) {
            self.lost(from, to, snapshot);
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate_permille) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + self.rng.below(self.faults.max_delay + 1);
            self.seq += 1;
            self.in_flight.push(Envelope {
                at,
                seq: self.seq,
                from,
                to,
                bytes: bytes.clone(),
                snapshot,
            });
        }
    }

    /// A message did not arrive: a transport reports it for a snapshot (see `Outgoing::snapshot`).
    fn lost(&mut self, from: u64, to: u64, snapshot: bool) {
        if snapshot {
            if let Some(m) = self.members.get_mut(&from) {
                m.node.report_snapshot(to, false).expect("report");
            }
            self.process(from);
        }
    }

    fn deliver(&mut self, env: Envelope) {
        if self.blocked.contains(&(env.from, env.to)) || !self.members.contains_key(&env.to) {
            self.lost(env.from, env.to, env.snapshot);
            return;
        }
        match self.node_mut(env.to).step(&env.bytes) {
            Ok(()) => {}
            // A message from a member the receiver does not know (removed, or not yet added): raft's error,
            // which a transport logs and ignores.
            Err(ReplicateError::Raft(_)) => {}
            // A snapshot whose state has not arrived: dropped like a lost message, though the call that
            // carried it succeeded (the leader hears no answer and sends it again).
            Err(ReplicateError::SnapshotNotHere { .. }) => {}
            Err(e) => panic!("step on {}: {e}", env.to),
        }
        self.process(env.to);
        if env.snapshot {
            if let Some(m) = self.members.get_mut(&env.from) {
                m.node.report_snapshot(env.to, true).expect("report");
            }
            self.process(env.from);
        }
    }

    /// Takes `id`'s ready output: sends its messages, checks and records what it applied.
    pub fn process(&mut self, id: u64) {
        let Some(m) = self.members.get_mut(&id) else {
            return;
        };
        let out = m.node.ready().expect("ready");
        for applied in &out.applied {
            match self.history.get(&applied.index) {
                Some(d) => assert_eq!(
                    d, &applied.data,
                    "member {id} applied different data at {}",
                    applied.index
                ),
                None => {
                    self.history.insert(applied.index, applied.data.clone());
                }
            }
            let mut i = 0;
            while i < self.pending.len() {
                let p = &self.pending[i];
                if p.proposer == id && p.index == applied.index {
                    let p = self.pending.swap_remove(i);
                    if p.term == applied.term {
                        assert_eq!(p.data, applied.data, "same index and term, other data");
                        self.acked.insert(p.index, p.data);
                    }
                } else {
                    i += 1;
                }
            }
        }
        for msg in out.messages {
            self.send(id, msg.to, msg.bytes, msg.snapshot.is_some());
        }
    }

    /// One round: deliver what is due (including what that sends with no delay), then tick every member.
    pub fn round(&mut self) {
        if self.background {
            // Snapshot jobs run on real threads: a round lasts long enough (against their 2 ms) that a bounded
            // number of rounds sees them finish on a loaded machine too.
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        for _ in 0..100_000 {
            let due = self
                .in_flight
                .iter()
                .enumerate()
                .filter(|(_, e)| e.at <= self.now)
                .min_by_key(|(_, e)| (e.at, e.seq))
                .map(|(i, _)| i);
            let Some(i) = due else { break };
            let env = self.in_flight.swap_remove(i);
            self.deliver(env);
        }
        for id in self.live() {
            self.node_mut(id).tick().expect("tick");
            self.process(id);
        }
        self.now += 1;
    }

    pub fn run(&mut self, rounds: u64) {
        for _ in 0..rounds {
            self.round();
        }
    }

    /// The live leader of the highest term, if any.
    pub fn leader(&self) -> Option<u64> {
        self.members
            .iter()
            .filter(|(_, m)| m.node.is_leader())
            .max_by_key(|(_, m)| m.node.term())
            .map(|(id, _)| *id)
    }

    /// Runs until there is a leader; panics after `max_rounds`.
    pub fn wait_leader(&mut self, max_rounds: u64) -> u64 {
        for _ in 0..max_rounds {
            if let Some(l) = self.leader() {
                return l;
            }
            self.round();
        }
        panic!("no leader after {max_rounds} rounds");
    }

    /// Proposes `data` on the current leader; returns (leader, index) if there was one that took it.
    pub fn propose(&mut self, data: Vec<u8>) -> Option<(u64, u64)> {
        let leader = self.leader()?;
        let term = self.node(leader).term();
        let index = self.node_mut(leader).propose(data.clone()).ok()?;
        self.pending.push(Pending {
            proposer: leader,
            index,
            term,
            data,
        });
        self.process(leader);
        Some((leader, index))
    }

    /// Whether the group is at rest: a leader whose log is all committed, applied by every live voter.
    pub fn settled(&self) -> bool {
        let Some(l) = self.leader() else { return false };
        let leader = self.node(l);
        let commit = leader.commit_index();
        commit == leader.last_index()
            && leader.voters().iter().all(|v| {
                self.members
                    .get(v)
                    .is_none_or(|m| m.node.applied() == commit)
            })
    }

    /// Runs until `settled`; panics after `max_rounds`.
    pub fn settle(&mut self, max_rounds: u64) {
        for _ in 0..max_rounds {
            if self.settled() {
                return;
            }
            self.round();
        }
        let state: Vec<String> = self
            .members
            .iter()
            .map(|(id, m)| {
                format!(
                    "{id}: leader {} term {} applied {} commit {} last {} voters {:?}",
                    m.node.is_leader(),
                    m.node.term(),
                    m.node.applied(),
                    m.node.commit_index(),
                    m.node.last_index(),
                    m.node.voters()
                )
            })
            .collect();
        panic!(
            "not settled after {max_rounds} rounds:\n{}",
            state.join("\n")
        );
    }

    /// Every live member holds the same applied entries, and they are the ones in `history`; every
    /// acknowledged proposal is among them.
    pub fn assert_agreement(&self) {
        let mut first: Option<(u64, &BTreeMap<u64, Vec<u8>>)> = None;
        for (id, m) in &self.members {
            let entries = &m.node.state_machine().entries;
            for (index, data) in entries {
                assert_eq!(
                    self.history.get(index),
                    Some(data),
                    "member {id} at {index}"
                );
            }
            for (index, data) in &self.acked {
                assert_eq!(
                    entries.get(index),
                    Some(data),
                    "member {id} lacks acknowledged entry {index}"
                );
            }
            match first {
                None => first = Some((*id, entries)),
                Some((other, e)) => assert_eq!(e, entries, "members {other} and {id} differ"),
            }
        }
    }
}
