//! Three replicated members on loopback, each with its own sled store and gRPC server on port 0: they elect a
//! leader, commit proposals in one order on every member, refuse proposals on followers with the leader's id,
//! elect a new leader when the leader stops, and a stopped member reopened from its store catches up; with the
//! coordinator's store as the state machine, group commits proposed on the leader land in every member's store.

use sweep_testkit as common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sweep_coordinator::grpc::replication::{carrier, ReplicationApi};
use sweep_coordinator::replica::{self, Change, MemberConfig, MemberHandle, ProposeError};
use sweep_coordinator::store::SnapshotFiles;
use sweep_replicate::{Config, LogStore, Members, StateMachine};
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;

/// The applied entries, in order, shared with the test.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Vec<u8>>>>);

impl Log {
    fn entries(&self) -> Vec<Vec<u8>> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl StateMachine for Log {
    fn apply(&mut self, _index: u64, data: &[u8]) {
        if let Ok(mut l) = self.0.lock() {
            l.push(data.to_vec());
        }
    }
    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&self.entries()).unwrap_or_default()
    }
    fn restore(&mut self, data: &[u8]) {
        let entries: Vec<Vec<u8>> = if data.is_empty() {
            Vec::new()
        } else {
            serde_json::from_slice(data).expect("a snapshot this test wrote")
        };
        if let Ok(mut l) = self.0.lock() {
            *l = entries;
        }
    }
    fn applied(&self) -> u64 {
        // Kept in memory: rebuilt from the stored snapshot and log after a restart.
        0
    }
}

struct Member {
    handle: MemberHandle,
    log: Log,
    stop_server: Option<oneshot::Sender<()>>,
}

impl Member {
    /// Stops the member and then its server, as a machine that goes away does.
    async fn stop(&mut self) {
        self.handle.stop().await;
        if let Some(s) = self.stop_server.take() {
            let _ = s.send(());
        }
    }
}

/// Members 1 to 3 of a new group, each with its log in `dirs[id - 1]`: the members and their URLs.
async fn start_three(dirs: &[tempfile::TempDir]) -> (BTreeMap<u64, Member>, BTreeMap<u64, String>) {
    let (listeners, urls) = bind_three().await;
    let mut members = BTreeMap::new();
    for (id, l) in listeners {
        let m = start_member(id, dirs[id as usize - 1].path(), l, &urls).await;
        members.insert(id, m);
    }
    (members, urls)
}

/// One of `members` that is not `leader`.
fn follower_of(members: &BTreeMap<u64, Member>, leader: u64) -> u64 {
    *members
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower")
}

/// Proposes `n` entries, `label 0` to `label n-1`, one after another through `handle`, each committed by the
/// majority before the next is sent, and appends them to `order`, the log every member must apply.
async fn propose_in_turn(handle: &MemberHandle, label: &str, n: u32, order: &mut Vec<Vec<u8>>) {
    for i in 0..n {
        let d = format!("{label} {i}").into_bytes();
        handle
            .propose(d.clone())
            .await
            .expect("committed by the majority");
        order.push(d);
    }
}

const TICK: Duration = Duration::from_millis(50);

async fn start_member(
    id: u64,
    dir: &Path,
    listener: tokio::net::TcpListener,
    urls: &BTreeMap<u64, String>,
) -> Member {
    let log = Log::default();
    let (handle, stop_tx) =
        start_node(id, dir, listener, urls, true, log.clone(), Config::new(id)).await;
    Member {
        handle,
        log,
        stop_server: Some(stop_tx),
    }
}

/// Member `id`'s settings in the group of `urls`: every other member is a peer, at this file's tick.
fn member_config(id: u64, urls: &BTreeMap<u64, String>, raft: Config) -> MemberConfig {
    MemberConfig {
        raft,
        peers: urls
            .iter()
            .filter(|(&p, _)| p != id)
            .map(|(&p, u)| (p, u.clone()))
            .collect(),
        tick: TICK,
    }
}

/// A channel to `url`, over TLS with `tls` if given, where connecting and each call are bounded by 5 s: a
/// refusal must come as an error, not as a hang.
async fn connect_within(
    url: String,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(url).expect("URL");
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).expect("TLS");
    }
    endpoint
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// Where the member whose log is in `dir` keeps its snapshot files.
fn files_for(dir: &Path) -> SnapshotFiles {
    SnapshotFiles::open(dir.with_extension("snapshots")).expect("snapshot directory")
}

/// One member applying to `machine`, its log in a sled store in `dir`, served on `listener`: its handle and
/// what stops its server. A founder of the group of `urls` starts from the bootstrap snapshot; otherwise the
/// member starts empty, to be added, and knows `urls` as its first peers. `raft`: its consensus settings.
async fn start_node<S: StateMachine + Send + 'static>(
    id: u64,
    dir: &Path,
    listener: tokio::net::TcpListener,
    urls: &BTreeMap<u64, String>,
    founder: bool,
    machine: S,
    raft: Config,
) -> (MemberHandle, oneshot::Sender<()>) {
    // The store of a stopped member is released when its task ends: retry the lock for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    let db = loop {
        match sled::open(dir) {
            Ok(db) => break db,
            Err(e) => {
                assert!(Instant::now() < deadline, "reopening member {id}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("log store");
    if founder {
        store
            .bootstrap_members(&Members::new(urls.clone()), Vec::new())
            .expect("bootstrap");
    }
    let config = member_config(id, urls, raft);
    let (handle, inbox) =
        replica::start(config, store, machine, carrier(None, None, files_for(dir)))
            .expect("start member");
    let (stop_tx, stop_rx) = oneshot::channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ReplicationApi::new(inbox, files_for(dir)).into_server())
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stop_rx.await;
            }),
    );
    (handle, stop_tx)
}

/// A snapshot push that is for another member, names no snapshot, or whose bytes do not match what it names
/// is refused, saying which, and leaves no file behind; a whole one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_snapshot_pushes_are_refused_and_leave_nothing() {
    use sweep_coordinator::store::Descriptor;
    use sweep_proto::v1::replication_client::ReplicationClient;
    use sweep_proto::v1::SnapshotPiece;
    use tonic::Code;

    let dir = tempfile::tempdir().expect("dir");
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let urls = BTreeMap::from([(1, url.clone())]);
    let (handle, stop) = start_node(
        1,
        dir.path(),
        l,
        &urls,
        true,
        Log::default(),
        Config::new(1),
    )
    .await;
    let client = ReplicationClient::connect(url).await.expect("connect");
    let file = b"the bytes of a snapshot file".to_vec();
    let d = Descriptor {
        len: file.len() as u64,
        digest: *blake3::hash(&file).as_bytes(),
    };
    let piece = |to: u64, descriptor: Vec<u8>, data: &[u8]| SnapshotPiece {
        from: 2,
        to,
        descriptor,
        data: data.to_vec(),
    };
    let push = |pieces: Vec<SnapshotPiece>| {
        let mut c = client.clone();
        async move { c.push_snapshot(tokio_stream::iter(pieces)).await }
    };
    let refused = [
        (
            vec![piece(9, d.encode(), &file)],
            Code::InvalidArgument,
            "member 9",
        ),
        (
            vec![piece(1, Vec::new(), &file)],
            Code::InvalidArgument,
            "names no snapshot",
        ),
        (
            vec![piece(1, b"garbage".to_vec(), &file)],
            Code::InvalidArgument,
            "names no snapshot",
        ),
        (Vec::new(), Code::InvalidArgument, "no piece"),
        (
            vec![piece(1, d.encode(), &file[..5])],
            Code::DataLoss,
            "do not match",
        ),
        (
            vec![piece(1, d.encode(), &file), piece(0, Vec::new(), b"x")],
            Code::DataLoss,
            "more bytes",
        ),
    ];
    for (pieces, code, says) in refused {
        let e = push(pieces).await.expect_err("refused");
        assert_eq!(e.code(), code, "{e:?}");
        assert!(e.message().contains(says), "{e:?}");
    }
    let files = files_for(dir.path());
    assert_eq!(std::fs::read_dir(files.dir()).expect("dir").count(), 0);
    assert!(files.find(&d).is_none());
    push(vec![
        piece(1, d.encode(), &file[..4]),
        piece(0, Vec::new(), &file[4..]),
    ])
    .await
    .expect("a whole file is kept");
    assert!(files.find(&d).is_some());
    handle.stop().await;
    let _ = stop.send(());
}

/// A `Log` whose snapshots take `delay_ms` to write: on a thread of their own (`background`), or in place.
#[derive(Clone)]
struct Slow {
    log: Log,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    background: bool,
}

impl StateMachine for Slow {
    fn apply(&mut self, index: u64, data: &[u8]) {
        self.log.apply(index, data)
    }
    fn snapshot(&self) -> Vec<u8> {
        let delay = self.delay_ms.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(delay));
        self.log.snapshot()
    }
    fn snapshot_job(&self) -> Option<sweep_replicate::SnapshotJob> {
        if !self.background {
            return None;
        }
        let slow = self.clone();
        Some(Box::new(move || Some(slow.snapshot())))
    }
    fn restore(&mut self, data: &[u8]) {
        self.log.restore(data)
    }
    fn applied(&self) -> u64 {
        self.log.applied()
    }
}

/// A leader whose snapshot takes far longer than an election timeout to write (a large store): written on a
/// thread of its own, the leader keeps its place (the term does not move) and the entries proposed
/// meanwhile commit once it is done; taken in place, its heartbeats stop and the others elect another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_snapshot_written_on_its_own_thread_keeps_the_leader() {
    for background in [true, false] {
        let dirs: Vec<tempfile::TempDir> =
            (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
        let (listeners, urls) = bind_three().await;
        let mut members = BTreeMap::new();
        let mut delays = BTreeMap::new();
        for (id, l) in listeners {
            let delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let machine = Slow {
                log: Log::default(),
                delay_ms: delay.clone(),
                background,
            };
            let raft = Config {
                snapshot_every: 10,
                ..Config::new(id)
            };
            let dir = dirs[id as usize - 1].path();
            let (handle, stop) = start_node(id, dir, l, &urls, true, machine.clone(), raft).await;
            delays.insert(id, delay);
            members.insert(
                id,
                Member {
                    handle,
                    log: machine.log,
                    stop_server: Some(stop),
                },
            );
        }
        let leader = leader_of(&members, Duration::from_secs(10)).await;
        // Twice the longest election timeout (20 ticks of 50 ms).
        delays[&leader].store(2_000, std::sync::atomic::Ordering::Relaxed);
        let h = members[&leader].handle.clone();
        let term = h.status().term;
        let started = Instant::now();
        let mut committed = 0;
        for i in 0..15u8 {
            let proposed = tokio::time::timeout(Duration::from_secs(10), h.propose(vec![i])).await;
            if matches!(proposed, Ok(Ok(_))) {
                committed += 1;
            }
        }
        let terms: Vec<u64> = members.values().map(|m| m.handle.status().term).collect();
        if background {
            assert_eq!(committed, 15, "every proposal committed");
            assert!(
                started.elapsed() >= Duration::from_secs(2),
                "entries waited for the snapshot"
            );
            assert!(h.status().is_leader, "the leader kept its place");
            assert!(
                terms.iter().all(|&t| t == term),
                "no election: {terms:?} against {term}"
            );
        } else {
            assert!(
                terms.iter().any(|&t| t > term),
                "a leader silent for 2 s is replaced: {terms:?} against {term}"
            );
        }
        for (_, mut m) in members {
            m.stop().await;
        }
    }
}

/// Listeners on loopback port 0 for members 1 to 3, and the URL of each.
async fn bind_three() -> (
    BTreeMap<u64, tokio::net::TcpListener>,
    BTreeMap<u64, String>,
) {
    let mut listeners = BTreeMap::new();
    let mut urls = BTreeMap::new();
    for id in 1..=3u64 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        urls.insert(id, format!("http://{}", l.local_addr().expect("addr")));
        listeners.insert(id, l);
    }
    (listeners, urls)
}

/// The id of the member all the given ones agree leads, once they do.
async fn leader_of(members: &BTreeMap<u64, Member>, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<u64> = members
            .iter()
            .filter(|(_, m)| m.handle.status().is_leader)
            .map(|(&id, _)| id)
            .collect();
        if let [one] = leaders[..] {
            if members
                .values()
                .all(|m| m.handle.status().leader == Some(one))
            {
                return one;
            }
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn all_applied(members: &BTreeMap<u64, Member>, want: &[Vec<u8>], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if members.values().all(|m| m.log.entries() == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "members did not apply the same {} entries: {:?}",
            want.len(),
            members
                .iter()
                .map(|(id, m)| (id, m.log.entries().len()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_commit_in_one_order_and_survive_the_loss_of_the_leader() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let (mut members, urls) = start_three(&dirs).await;

    let t = Instant::now();
    let leader = leader_of(&members, Duration::from_secs(10)).await;
    eprintln!("first leader: member {leader} after {:?}", t.elapsed());

    let follower = follower_of(&members, leader);
    match members[&follower].handle.propose(b"x".to_vec()).await {
        Err(ProposeError::NotLeader { leader: l }) => assert_eq!(l, Some(leader)),
        other => panic!("a follower took a proposal: {other:?}"),
    }

    let want: Vec<Vec<u8>> = (0..100u32)
        .map(|i| format!("entry {i}").into_bytes())
        .collect();
    let h = members[&leader].handle.clone();
    let t = Instant::now();
    let proposals: Vec<_> = want
        .iter()
        .map(|d| {
            let h = h.clone();
            let d = d.clone();
            tokio::spawn(async move { h.propose(d).await })
        })
        .collect();
    let mut indices = Vec::new();
    for p in proposals {
        indices.push(p.await.expect("join").expect("committed"));
    }
    eprintln!("100 concurrent proposals committed in {:?}", t.elapsed());
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 100, "each proposal its own index");
    // Proposed concurrently, applied in index order: what the leader applied is the order for everyone.
    let order = members[&leader].log.entries();
    let mut as_sent = order.clone();
    as_sent.sort();
    let mut expected = want.clone();
    expected.sort();
    assert_eq!(as_sent, expected);
    all_applied(&members, &order, Duration::from_secs(10)).await;

    // The leader stops: the other two elect one of themselves and go on.
    let mut old = members.remove(&leader).expect("leader");
    old.stop().await;
    let t = Instant::now();
    let second = leader_of(&members, Duration::from_secs(15)).await;
    let election = t.elapsed();
    eprintln!("new leader: member {second} after {election:?} (tick {TICK:?})");
    assert_ne!(second, leader);
    let mut order = order;
    propose_in_turn(&members[&second].handle, "after", 20, &mut order).await;
    all_applied(&members, &order, Duration::from_secs(10)).await;

    // The old leader comes back from its store, as a follower, and catches up.
    drop(old);
    let l = tokio::net::TcpListener::bind(
        urls[&leader]
            .trim_start_matches("http://")
            .parse::<std::net::SocketAddr>()
            .expect("addr"),
    )
    .await
    .expect("the old address again");
    let back = start_member(leader, dirs[leader as usize - 1].path(), l, &urls).await;
    members.insert(leader, back);
    all_applied(&members, &order, Duration::from_secs(15)).await;
    assert_eq!(leader_of(&members, Duration::from_secs(10)).await, second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_with_its_disk_is_replaced_by_a_new_one_that_catches_up() {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().expect("dir")).collect();
    let (mut members, _) = start_three(&dirs).await;
    let leader = leader_of(&members, Duration::from_secs(10)).await;
    let mut order = Vec::new();
    propose_in_turn(&members[&leader].handle, "before", 50, &mut order).await;
    all_applied(&members, &order, Duration::from_secs(10)).await;

    // A follower's machine is lost with its disk.
    let lost = follower_of(&members, leader);
    let mut gone = members.remove(&lost).expect("lost");
    gone.stop().await;
    let h = members[&leader].handle.clone();
    // Only the leader changes the membership.
    let other = *members
        .keys()
        .find(|&&id| id != leader)
        .expect("the other one");
    assert!(matches!(
        members[&other].handle.change(Change::Remove(lost)).await,
        Err(ProposeError::NotLeader { .. })
    ));
    assert_eq!(h.change(Change::Remove(lost)).await.expect("removed"), lost);
    assert!(matches!(
        h.change(Change::Remove(leader)).await,
        Err(ProposeError::BadMembership(_))
    ));

    // A new member, on a new address, with an empty directory.
    let l4 = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url4 = format!("http://{}", l4.local_addr().expect("addr"));
    let id4 = h.change(Change::Add(url4.clone())).await.expect("added");
    assert_eq!(id4, 4, "a new id: the lost member's is never given again");
    // Asked again (the answer was lost on its way to the new member), the same id.
    assert_eq!(h.change(Change::Add(url4.clone())).await.expect("again"), 4);
    let peers = h.status().members;
    assert_eq!(peers.len(), 3);
    assert_eq!(peers.get(&4), Some(&url4));
    let log4 = Log::default();
    let (handle4, stop4) = start_node(
        4,
        dirs[3].path(),
        l4,
        &peers,
        false,
        log4.clone(),
        // Snapshots at the default pace: the member catches up from the snapshot taken as it is added.
        Config::new(4),
    )
    .await;
    members.insert(
        4,
        Member {
            handle: handle4,
            log: log4,
            stop_server: Some(stop4),
        },
    );
    propose_in_turn(&h, "after", 30, &mut order).await;
    all_applied(&members, &order, Duration::from_secs(15)).await;
    for m in members.values() {
        assert_eq!(
            m.handle.status().members,
            peers,
            "every member knows the new one"
        );
    }
    assert!(
        members[&4].handle.status().applied > 20,
        "the new member caught up"
    );

    // The new member counts in the majority: with the other old member stopped, the leader and the new one
    // still commit.
    let mut stopped = members.remove(&other).expect("other");
    stopped.stop().await;
    let d = b"with the new member".to_vec();
    tokio::time::timeout(Duration::from_secs(10), h.propose(d.clone()))
        .await
        .expect("committed in time")
        .expect("committed by the leader and the new member");
    order.push(d);
    all_applied(&members, &order, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_for_another_member_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let db = sled::open(dir.path()).expect("sled");
    let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("store");
    store.bootstrap(&[1], Vec::new()).expect("bootstrap");
    let (handle, inbox) = replica::start(
        MemberConfig {
            raft: Config::new(1),
            peers: BTreeMap::new(),
            tick: TICK,
        },
        store,
        Log::default(),
        carrier(None, None, files_for(dir.path())),
    )
    .expect("start");
    let service = ReplicationApi::new(inbox, files_for(dir.path()));
    use sweep_proto::v1::replication_server::Replication;
    let wrong = service
        .step(tonic::Request::new(sweep_proto::v1::StepRequest {
            from: 2,
            to: 9,
            messages: vec![b"garbage".to_vec()],
        }))
        .await
        .expect_err("not for this member");
    assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
    // Garbled bytes addressed to it are dropped by the node, which goes on: alone, it leads and commits.
    service
        .step(tonic::Request::new(sweep_proto::v1::StepRequest {
            from: 2,
            to: 1,
            messages: vec![b"garbage".to_vec(), vec![0xff; 40]],
        }))
        .await
        .expect("delivered");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handle.status().is_leader {
        assert!(Instant::now() < deadline, "a lone member never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(handle.propose(b"one".to_vec()).await.is_ok());
}

/// What the core stages for a result of chunk `chunk` of job 1 counting `nodes` nodes: its `Done` record, its
/// output and the job's tally after it (`tally`, which it adds to).
fn result_ops(
    chunk: u64,
    nodes: u64,
    tally: &mut sweep_space::Tally,
) -> [sweep_coordinator::core::Op; 3] {
    use sweep_coordinator::core::Op;
    use sweep_coordinator::scheduler::ChunkRecord;
    let out = sweep_space::ChunkOutput {
        nodes,
        ..Default::default()
    };
    tally.add(&out);
    let done = ChunkRecord::Done {
        digest: format!("{chunk:016x}"),
        worker: "w".into(),
    };
    [
        Op::Chunk(1, chunk, done),
        Op::Output(1, chunk, out),
        Op::Tally(1, tally.clone()),
    ]
}

/// Three members started through the front door (`sweep_coordinator::start`, as `sweep coordinator --peers`
/// starts one), each with its store on disk in a directory of its own, on loopback, with the id of the leader
/// they elected.
struct StoreGroup {
    members: BTreeMap<u64, sweep_coordinator::Running>,
    urls: BTreeMap<u64, String>,
    leader: u64,
    dirs: Vec<tempfile::TempDir>,
}

/// A loopback listener on port 0 and its `http://` URL.
fn bind_loopback() -> (std::net::TcpListener, String) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    (l, url)
}

/// Starts a member in `data` through the front door, its consensus ticking every [`TICK`].
async fn start_store_member(
    data: &Path,
    listener: std::net::TcpListener,
    membership: sweep_coordinator::start::Membership,
) -> sweep_coordinator::Running {
    use sweep_coordinator::start::{GroupOptions, Listen, Options};
    sweep_coordinator::start(Options {
        data: data.to_path_buf(),
        config: common::config(30_000, 3),
        security: Default::default(),
        listen: Some(Listen::Bound(listener)),
        http: None,
        group: Some(GroupOptions {
            membership,
            peer_tls_ca: None,
            // Ten ticks: a tick of `TICK`.
            election_ms: Some(TICK.as_millis() as u64 * 10),
        }),
    })
    .await
    .expect("start the member")
}

impl StoreGroup {
    async fn start() -> StoreGroup {
        use sweep_coordinator::start::Membership;
        let dirs: Vec<tempfile::TempDir> =
            (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
        let listeners: Vec<(std::net::TcpListener, String)> =
            (0..3).map(|_| bind_loopback()).collect();
        let peers: Vec<String> = listeners.iter().map(|(_, u)| u.clone()).collect();
        let urls: BTreeMap<u64, String> = (1..).zip(peers.iter().cloned()).collect();
        let mut members = BTreeMap::new();
        for ((id, (listener, _)), dir) in (1u64..).zip(listeners).zip(&dirs) {
            let membership = Membership::Found {
                peers: peers.clone(),
                id: Some(id),
            };
            let running = start_store_member(dir.path(), listener, membership).await;
            assert_eq!(running.member().map(|(id, _)| id), Some(id));
            members.insert(id, running);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let leader = loop {
            if let Some((&id, _)) = members.iter().find(|(_, m)| handle(m).status().is_leader) {
                break id;
            }
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        StoreGroup {
            members,
            urls,
            leader,
            dirs,
        }
    }

    fn handle(&self, id: u64) -> MemberHandle {
        handle(&self.members[&id]).clone()
    }

    fn store(&self, id: u64) -> Arc<sweep_coordinator::store::Store> {
        self.members[&id]
            .member_store()
            .expect("a member's store")
            .clone()
    }

    /// Waits (at most `within`) until every member still running applied entry `index`.
    async fn all_applied(&self, index: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while !self
            .members
            .values()
            .all(|m| handle(m).status().applied >= index)
        {
            assert!(
                Instant::now() < deadline,
                "members did not apply entry {index}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        for (id, m) in self.members {
            tokio::time::timeout(Duration::from_secs(40), m.shutdown())
                .await
                .unwrap_or_else(|_| panic!("member {id} did not stop"))
                .expect("stopped");
        }
    }
}

/// The consensus handle of a member started through the front door.
fn handle(m: &sweep_coordinator::Running) -> &MemberHandle {
    m.member_handle().expect("a member")
}

/// The entries of a job of 40 chunks: the job, then its results in commits of ten, each with the tally after
/// it, as the core stages them.
fn job_entries() -> Vec<Vec<u8>> {
    use sweep_coordinator::core::{JobRecord, Op};
    use sweep_coordinator::store::encode_entry;
    use sweep_space::Tally;

    let job = JobRecord::new(1, "primes", serde_json::json!({"below": 1000}), 40, 1);
    let mut entries =
        vec![encode_entry(&[vec![Op::job(job), Op::Meta("next_job", 2)]]).expect("entry")];
    let mut tally = Tally::default();
    for commit in 0..4u64 {
        let ops: Vec<Op> = (commit * 10..commit * 10 + 10)
            .flat_map(|chunk| result_ops(chunk, chunk + 1, &mut tally))
            .collect();
        entries.push(encode_entry(&[ops]).expect("entry"));
    }
    entries
}

/// The coordinator's store as the state machine: group commits proposed on the leader as entries end in the
/// same store on every member, which opens as a coordinator's with the same jobs and done chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commits_proposed_on_the_leader_land_in_every_members_store() {
    let group = StoreGroup::start().await;
    let leader = group.leader;
    let h = group.handle(leader);
    let entries = job_entries();
    let mut last = 0;
    for e in entries {
        last = h.propose(e).await.expect("committed");
    }
    assert!(h.status().applied >= last);
    group.all_applied(last, Duration::from_secs(10)).await;
    for &id in group.members.keys() {
        let store = group.store(id);
        let snap = store.load().expect("load");
        assert_eq!(snap.jobs.len(), 1, "member {id}");
        assert_eq!(snap.next_job, 2, "member {id}");
        assert_eq!(snap.done_list().len(), 40, "member {id}");
        assert_eq!(snap.tallies[&1].chunks, 40, "member {id}");
        assert_eq!(
            snap.tallies[&1].nodes,
            (1..=40).sum::<u128>(),
            "member {id}"
        );
        assert_eq!(
            store.outputs(1).expect("outputs"),
            group.store(leader).outputs(1).expect("outputs")
        );
    }
    group.stop().await;
}

/// A member lost with its disk is replaced by a new empty one, which catches up from the leader's snapshot
/// file (a store on disk, with a blob of several pieces), pushed before the message that names it; the new
/// member's store ends as the leader's, and it applies what comes after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_installs_the_snapshot_file_the_leader_pushes() {
    use sweep_coordinator::core::Op;
    use sweep_coordinator::start::Membership;
    use sweep_coordinator::store::encode_entry;

    let mut group = StoreGroup::start().await;
    let leader = group.leader;
    let h = group.handle(leader);
    let mut entries = job_entries();
    let artifact: Vec<u8> = (0..(3 << 20) + 5).map(|i| (i % 251) as u8).collect();
    entries.push(encode_entry(&[vec![Op::Artifact(1, Arc::new(artifact))]]).expect("entry"));
    let mut last = 0;
    for e in entries {
        last = h.propose(e).await.expect("committed");
    }
    group.all_applied(last, Duration::from_secs(10)).await;

    let lost = *group
        .members
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    group
        .members
        .remove(&lost)
        .expect("lost")
        .shutdown()
        .await
        .expect("stopped");
    assert_eq!(h.change(Change::Remove(lost)).await.expect("removed"), lost);
    // A new member in an empty directory joins as `sweep coordinator --join` does: it asks the group to add it
    // at the address it listens on, and catches up from the snapshot file the leader pushes.
    let (l4, url4) = bind_loopback();
    let dir4 = tempfile::tempdir().expect("dir");
    let others: Vec<String> = group
        .urls
        .iter()
        .filter(|(&id, _)| id != lost)
        .map(|(_, u)| u.clone())
        .collect();
    let joining = Membership::Join {
        urls: others.join(","),
        advertise: None,
    };
    let m4 = start_store_member(dir4.path(), l4, joining).await;
    let (id4, urls4) = m4
        .member()
        .map(|(id, u)| (id, u.clone()))
        .expect("a member");
    assert_eq!(id4, 4, "a new id: the lost member's is never given again");
    assert_eq!(
        urls4.get(&4),
        Some(&url4),
        "added at the address it listens on"
    );
    let h4 = handle(&m4).clone();
    let store4 = m4.member_store().expect("its store").clone();
    let after = h
        .propose(encode_entry(&[vec![Op::Meta("next_job", 3)]]).expect("entry"))
        .await
        .expect("committed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while h4.status().applied < after {
        assert!(Instant::now() < deadline, "the new member did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (theirs, ours) = (
        group.store(leader).load().expect("load"),
        store4.load().expect("load"),
    );
    assert_eq!(ours.done_list(), theirs.done_list());
    assert_eq!(ours.done_list().len(), 40);
    assert_eq!(ours.next_job, 3);
    assert_eq!(
        store4.outputs(1).expect("outputs"),
        group.store(leader).outputs(1).expect("outputs")
    );
    let listing = |dir: &Path| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| {
                let e = e.expect("entry");
                let len = e.metadata().expect("metadata").len();
                (e.file_name().to_string_lossy().into_owned(), len)
            })
            .collect();
        v.sort();
        v
    };
    let artifacts = |root: &Path| listing(&root.join("artifacts"));
    let leader_dir = group.dirs[leader as usize - 1].path();
    assert_eq!(artifacts(dir4.path()), artifacts(leader_dir));
    assert!(
        artifacts(dir4.path()).iter().any(|(_, len)| *len > 3 << 20),
        "the blob of several pieces arrived"
    );
    let snapshots = listing(
        &dir4
            .path()
            .join(sweep_coordinator::member::LOG_DIR)
            .join("snapshots"),
    );
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    assert!(snapshots[0].0.ends_with(".snap"), "{snapshots:?}");
    drop(store4);
    m4.shutdown().await.expect("stopped");
    group.stop().await;
}

/// A coordinator on the leader of three members: a job run by a worker over gRPC lands in every member's
/// store (each result acknowledged only once the group committed it), and once the leader's member stops, the
/// coordinator on it acknowledges nothing more and nothing more reaches the other members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_on_the_leader_acknowledges_only_what_the_group_committed() {
    use sweep_proto::v1::{jobs_client::JobsClient, work_client::WorkClient};

    let group = StoreGroup::start().await;
    let leader = group.leader;
    let channel = tonic::transport::Endpoint::from_shared(group.urls[&leader].clone())
        .expect("URL")
        .connect()
        .await
        .expect("connect to the leader");
    let mut jobs = JobsClient::new(channel.clone());
    // The leader serves once an entry of its own term is committed and its coordinator is open.
    let deadline = Instant::now() + Duration::from_secs(10);
    let job = loop {
        match jobs
            .submit(common::submit_req(
                "star",
                r#"{"points": 6, "method": "brute"}"#,
                12,
            ))
            .await
        {
            Ok(job) => break job.into_inner(),
            Err(s) if s.message().starts_with(sweep_proto::NOT_LEADER) => {
                assert!(Instant::now() < deadline, "the leader never served: {s}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(s) => panic!("submit: {s}"),
        }
    };
    let job_id = job.job.expect("the job").id;
    let token = sweep_client::token_interceptor(&Default::default()).expect("no token to read");
    let mut worker = common::FakeWorker::register(
        WorkClient::new(sweep_client::secure(channel, token)),
        "w",
        &common::spaces(),
    )
    .await
    .expect("register");
    let accepted = worker.run_chunks(100).await.expect("run chunks");
    assert_eq!(accepted, 12);
    let last = group.handle(leader).status().applied;
    group.all_applied(last, Duration::from_secs(10)).await;
    let want = group.store(leader).load().expect("load");
    assert_eq!(want.done_list().len(), 12);
    for &id in group.members.keys() {
        let snap = group.store(id).load().expect("load");
        assert_eq!(snap.done_list(), want.done_list(), "member {id}");
        assert_eq!(snap.tallies, want.tallies, "member {id}");
        assert_eq!(snap.jobs.len(), 1, "member {id}");
        assert_eq!(snap.jobs[0].id, job_id, "member {id}");
    }
    // The leader's consensus member stops: no proposal can commit, so a submit is refused (the coordinator
    // cannot commit it, or has already closed with its term), never acknowledged, and the other members never
    // see it.
    group.handle(leader).stop().await;
    let refused = jobs
        .submit(common::submit_req(
            "star",
            r#"{"points": 7, "method": "brute"}"#,
            4,
        ))
        .await
        .expect_err("a submit acknowledged without the group");
    assert!(
        refused.message().contains("replicated group")
            || refused.message().starts_with(sweep_proto::NOT_LEADER),
        "{}",
        refused.message()
    );
    for (&id, _) in group.members.iter().filter(|(&id, _)| id != leader) {
        assert_eq!(
            group.store(id).load().expect("load").jobs.len(),
            1,
            "member {id}"
        );
    }
    group.stop().await;
}

/// Durable results per second through three members on one machine against one store written directly: the
/// same group commits (1,000 results each, as the core stages them under load) proposed on the leader of
/// three members whose stores are sled on disk, and written with `Store::write_parts` to a fourth. Prints both
/// rates and their ratio; asserts only that every member holds every result.
/// `cargo test --release -p sweep-coordinator --test replication -- --ignored --nocapture throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by name"]
async fn throughput_of_three_members_against_one_store() {
    use sweep_coordinator::core::Op;
    use sweep_coordinator::store::{encode_entry, split_commit, Store};
    use sweep_space::Tally;

    const COMMITS: u64 = 100;
    const PER_COMMIT: u64 = 1_000;
    let commits: Vec<Vec<Op>> = {
        let mut tally = Tally::default();
        (0..COMMITS)
            .map(|c| {
                (c * PER_COMMIT..(c + 1) * PER_COMMIT)
                    .flat_map(|chunk| result_ops(chunk, 1, &mut tally))
                    .collect()
            })
            .collect()
    };
    let results = COMMITS * PER_COMMIT;

    let single_dir = tempfile::tempdir().expect("dir");
    let single = Arc::new(Store::open(single_dir.path()).expect("store"));
    let t = Instant::now();
    for ops in commits.clone() {
        let s = single.clone();
        tokio::task::spawn_blocking(move || s.write_parts(split_commit(ops)))
            .await
            .expect("join")
            .expect("write");
    }
    let single_rate = results as f64 / t.elapsed().as_secs_f64();

    let group = StoreGroup::start().await;
    let h = group.handle(group.leader);
    let t = Instant::now();
    let mut last = 0;
    for ops in commits {
        let entry = tokio::task::spawn_blocking(move || encode_entry(&split_commit(ops)))
            .await
            .expect("join")
            .expect("encode");
        last = h.propose(entry).await.expect("committed");
    }
    let replicated_rate = results as f64 / t.elapsed().as_secs_f64();
    group.all_applied(last, Duration::from_secs(60)).await;
    for &id in group.members.keys() {
        let snap = group.store(id).load().expect("load");
        assert_eq!(snap.done_list().len() as u64, results, "member {id}");
        assert_eq!(snap.tallies[&1].chunks, results, "member {id}");
    }
    eprintln!(
        "{results} results in commits of {PER_COMMIT}: one store {single_rate:.0}/s, three members {replicated_rate:.0}/s ({:.2} of one)",
        replicated_rate / single_rate
    );
    group.stop().await;
}

/// `VmRSS` or `VmHWM` of this process, in MiB (Linux).
fn memory_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a memory figure");
    kib / 1024.0
}

/// How much memory a member needs to take a snapshot of a large store and to install it, against the store's
/// size: a store on disk with 100 artifacts of 2 MiB and 200,000 results with their solutions is snapshotted to
/// a file and installed on a second store. Prints the file's size, the time and the peak memory growth of
/// each step (the peak is reset before each); asserts that the second store holds every result.
/// `SWEEP_SNAPSHOT_ENTRIES` (default 100) scales the store: with memory bounded, the growth stays flat.
/// `cargo test --release -p sweep-coordinator --test replication -- --ignored --nocapture snapshot_memory`.
#[test]
#[ignore = "a measurement: run by name"]
fn snapshot_memory_against_store_size() {
    use sweep_coordinator::core::Op;
    use sweep_coordinator::scheduler::ChunkRecord;
    use sweep_coordinator::store::{encode_entry, Store, StoreMachine};
    use sweep_replicate::StateMachine as _;

    let entries: u64 = std::env::var("SWEEP_SNAPSHOT_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    const PER_ENTRY: u64 = 2_000;
    let dir = tempfile::tempdir().expect("dir");
    let source = Arc::new(Store::open(&dir.path().join("source")).expect("store"));
    let mut m = StoreMachine::open(source.clone(), files_for(&dir.path().join("source-log")))
        .expect("machine");
    let mut tally = sweep_space::Tally::default();
    let reset_peak = || std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak");
    let before = memory_mib("VmRSS");
    reset_peak();
    for e in 0..entries {
        let mut ops = vec![Op::Artifact(
            e + 2,
            Arc::new(vec![(e % 251) as u8; 2 << 20]),
        )];
        for chunk in e * PER_ENTRY..(e + 1) * PER_ENTRY {
            let out = sweep_space::ChunkOutput {
                nodes: chunk + 1,
                solutions: (0..4).map(|s| format!("{chunk}:{s}:0123456789")).collect(),
                ..Default::default()
            };
            tally.add(&out);
            ops.push(Op::Chunk(
                1,
                chunk,
                ChunkRecord::Done {
                    digest: format!("{chunk:016x}"),
                    worker: "w".into(),
                },
            ));
            ops.push(Op::Output(1, chunk, out));
        }
        ops.push(Op::Tally(1, tally.clone()));
        // Entry `e + 1`: entries are numbered from 1.
        m.apply(e + 1, &encode_entry(&[ops]).expect("entry"));
    }
    assert!(m.failure().is_none(), "{:?}", m.failure());
    let apply_growth = memory_mib("VmHWM") - before;

    let before = memory_mib("VmRSS");
    reset_peak();
    let started = Instant::now();
    let snap = m.snapshot();
    let write_s = started.elapsed().as_secs_f64();
    let write_growth = memory_mib("VmHWM") - before;
    let d = sweep_coordinator::store::Descriptor::decode(&snap).expect("a snapshot file");
    let file_mib = d.len as f64 / (1 << 20) as f64;

    let target = Arc::new(Store::open(&dir.path().join("target")).expect("store"));
    let target_files = files_for(&dir.path().join("target-log"));
    let mut incoming = target_files.receive(d).expect("receive");
    let mut file = std::fs::File::open(m.files().find(&d).expect("file")).expect("open");
    let mut piece = vec![0u8; 1 << 20];
    loop {
        use std::io::Read;
        let n = file.read(&mut piece).expect("read");
        if n == 0 {
            break;
        }
        incoming.write(&piece[..n]).expect("write");
    }
    incoming.finish().expect("whole");
    let mut t = StoreMachine::open(target.clone(), target_files).expect("machine");
    let before = memory_mib("VmRSS");
    reset_peak();
    let started = Instant::now();
    t.restore(&snap);
    let install_s = started.elapsed().as_secs_f64();
    let install_growth = memory_mib("VmHWM") - before;
    assert!(t.failure().is_none(), "{:?}", t.failure());
    assert_eq!(t.applied(), entries);
    let done = target.load().expect("load").done_list().len() as u64;
    assert_eq!(done, entries * PER_ENTRY);
    println!(
        "snapshot file {file_mib:.0} MiB ({} results, {entries} artifacts of 2 MiB): written in {write_s:.1} s \
         with peak memory +{write_growth:.0} MiB ({:.2} of the file), installed in {install_s:.1} s with \
         +{install_growth:.0} MiB ({:.2}); applying the same results as entries: +{apply_growth:.0} MiB",
        entries * PER_ENTRY,
        write_growth / file_mib,
        install_growth / file_mib,
    );
}

/// Members over mutual TLS, as `sweep coordinator --tls-cert --tls-client-ca` runs them: each serves TLS only
/// and requires a client certificate signed by the CA, and its carrier trusts that CA and presents the
/// member's own certificate. They elect a leader and commit in one order; a caller of the `Replication`
/// service without a client certificate, or in plain HTTP/2, gets nothing through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_replicate_over_mutual_tls() {
    use sweep_coordinator::ServeSecurity;
    use sweep_proto::v1::replication_client::ReplicationClient;
    use tonic::transport::{Certificate, ClientTlsConfig};

    let pki_dir = tempfile::tempdir().expect("dir");
    let p = common::pki::pki(pki_dir.path());
    let server_tls = ServeSecurity::tls_from_files(&p.server_cert, &p.server_key, Some(&p.ca))
        .expect("server TLS");
    let peer_tls = sweep_client::tls_config(&p.ca, Some((&p.server_cert, &p.server_key)))
        .expect("the members' client TLS");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let (listeners, urls) = bind_three().await;
    let urls: BTreeMap<u64, String> = urls
        .into_iter()
        .map(|(id, u)| (id, u.replacen("http://", "https://", 1)))
        .collect();
    let mut members = BTreeMap::new();
    for (id, listener) in listeners {
        let db = sled::open(dirs[id as usize - 1].path()).expect("sled");
        let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("log store");
        store
            .bootstrap_members(&Members::new(urls.clone()), Vec::new())
            .expect("bootstrap");
        let config = member_config(id, &urls, Config::new(id));
        let log = Log::default();
        let (handle, inbox) = replica::start(
            config,
            store,
            log.clone(),
            carrier(
                None,
                Some(peer_tls.clone()),
                files_for(dirs[id as usize - 1].path()),
            ),
        )
        .expect("start member");
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .tls_config(server_tls.clone())
            .expect("TLS settings")
            .add_service(
                ReplicationApi::new(inbox, files_for(dirs[id as usize - 1].path())).into_server(),
            );
        tokio::spawn(server.serve_with_incoming_shutdown(
            TcpListenerStream::new(listener),
            async {
                let _ = stop_rx.await;
            },
        ));
        members.insert(
            id,
            Member {
                handle,
                log,
                stop_server: Some(stop_tx),
            },
        );
    }
    let leader = leader_of(&members, Duration::from_secs(10)).await;
    let mut order = Vec::new();
    for i in 0..3u8 {
        let d = vec![b'T', i];
        tokio::time::timeout(
            Duration::from_secs(10),
            members[&leader].handle.propose(d.clone()),
        )
        .await
        .expect("committed in time")
        .expect("committed");
        order.push(d);
    }
    all_applied(&members, &order, Duration::from_secs(10)).await;

    // Without a client certificate (trusting the CA), and in plain HTTP/2, a Step is refused.
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let url = urls[&follower].clone();
    let step = |channel| async move {
        ReplicationClient::new(channel)
            .step(sweep_proto::v1::StepRequest {
                from: leader,
                to: follower,
                messages: Vec::new(),
            })
            .await
    };
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&p.ca).expect("CA")));
    let channel = connect_within(url.clone(), Some(anonymous)).await;
    if let Ok(channel) = channel {
        assert!(
            step(channel).await.is_err(),
            "a caller without a client certificate was served"
        );
    }
    let plain = connect_within(url.replacen("https://", "http://", 1), None).await;
    if let Ok(channel) = plain {
        assert!(step(channel).await.is_err(), "a plain caller was served");
    }
    // With the member's own certificate, the same call goes through.
    let channel = connect_within(url, Some(peer_tls))
        .await
        .expect("connect with the member's certificate");
    step(channel).await.expect("a member's call is served");

    for (_, mut m) in members {
        m.stop().await;
    }
}
