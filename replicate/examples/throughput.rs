//! Committed proposals per second for a group of three members in this process, each with a durable sled
//! store in a temporary directory, messages passed in memory; beside it, the baseline of one store that
//! writes and flushes the same batches itself (a single coordinator's group commit).
//!
//! `cargo run --release -p sweep-replicate --example throughput -- [BYTES] [WINDOW] [SECONDS]`
//! BYTES: size of each proposal (default 1024); WINDOW: proposals the leader keeps in flight, which raft
//! turns into one append and one flush per member (default 64); SECONDS: per measurement (default 3).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use sweep_replicate::{Config, LogStore, Node, StateMachine};

/// Counts what it applied; the bench measures the log, not a state machine.
#[derive(Default)]
struct Counter {
    applied: u64,
}

impl StateMachine for Counter {
    fn apply(&mut self, index: u64, _data: &[u8]) {
        self.applied = index;
    }
    fn snapshot(&self) -> Vec<u8> {
        self.applied.to_be_bytes().to_vec()
    }
    fn restore(&mut self, data: &[u8]) {
        let mut b = [0u8; 8];
        let n = data.len().min(8);
        b[..n].copy_from_slice(&data[..n]);
        self.applied = u64::from_be_bytes(b);
    }
    fn applied(&self) -> u64 {
        self.applied
    }
}

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn replicated(bytes: usize, window: u64, seconds: u64) -> (u64, Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    let voters = [1, 2, 3];
    let mut dbs = Vec::new();
    let mut nodes: BTreeMap<u64, Node<Counter>> = BTreeMap::new();
    for id in voters {
        let db = sled::open(dir.path().join(id.to_string())).expect("sled");
        let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("store");
        store
            .bootstrap(&voters, Counter::default().snapshot())
            .expect("bootstrap");
        let config = Config {
            snapshot_every: 100_000,
            ..Config::new(id)
        };
        nodes.insert(
            id,
            Node::new(&config, store, Counter::default()).expect("node"),
        );
        dbs.push(db);
    }
    let mut queue: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let pump = |nodes: &mut BTreeMap<u64, Node<Counter>>,
                queue: &mut VecDeque<(u64, Vec<u8>)>,
                id: u64|
     -> u64 {
        let node = nodes.get_mut(&id).expect("member");
        let out = node.ready().expect("ready");
        queue.extend(out.messages.into_iter().map(|m| (m.to, m.bytes)));
        if out.is_leader {
            out.applied.len() as u64
        } else {
            0
        }
    };
    nodes
        .get_mut(&1)
        .expect("member 1")
        .campaign()
        .expect("campaign");
    let mut committed = 0;
    let mut proposed = 0;
    let payload = vec![7u8; bytes];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        let leader = nodes.get(&1).expect("member 1");
        if leader.is_leader() {
            while proposed < committed + window {
                nodes
                    .get_mut(&1)
                    .expect("member 1")
                    .propose(payload.clone())
                    .expect("propose");
                proposed += 1;
            }
        }
        committed += pump(&mut nodes, &mut queue, 1);
        // As a transport draining each member's inbox: every message that arrived, then one `ready`.
        for _ in 0..100 {
            if queue.is_empty() {
                break;
            }
            let mut woken = Vec::new();
            for (to, msg) in queue.drain(..) {
                nodes
                    .get_mut(&to)
                    .expect("member")
                    .step(&msg)
                    .expect("step");
                if !woken.contains(&to) {
                    woken.push(to);
                }
            }
            for id in woken {
                committed += pump(&mut nodes, &mut queue, id);
            }
        }
    }
    (committed, start.elapsed())
}

/// The same batches written by one store: a sled batch of `window` entries, flushed.
fn single_store(bytes: usize, window: u64, seconds: u64) -> (u64, Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = sled::open(dir.path()).expect("sled");
    let tree = db.open_tree("log").expect("tree");
    let payload = vec![7u8; bytes];
    let mut written = 0u64;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        let mut batch = sled::Batch::default();
        for _ in 0..window {
            written += 1;
            batch.insert(&written.to_be_bytes(), payload.clone());
        }
        tree.apply_batch(batch).expect("batch");
        tree.flush().expect("flush");
    }
    (written, start.elapsed())
}

fn main() {
    let bytes = arg(1, 1024) as usize;
    let window = arg(2, 64).max(1);
    let seconds = arg(3, 3).max(1);
    let (base, base_t) = single_store(bytes, window, seconds);
    let base_rate = base as f64 / base_t.as_secs_f64();
    let (n, t) = replicated(bytes, window, seconds);
    let rate = n as f64 / t.as_secs_f64();
    println!(
        "{bytes} B proposals, window {window}: 3 members {rate:.0} committed/s ({n} in {:.1} s); \
         one store {base_rate:.0} flushed/s; ratio {:.2}",
        t.as_secs_f64(),
        rate / base_rate
    );
}
