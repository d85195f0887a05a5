//! sweep's worker: registers with a coordinator, leases a few chunks ahead so cores never wait for the network,
//! runs them on N search threads of its own (each takes its next chunk itself; never on the async runtime),
//! heartbeats progress, and reports results until each is acknowledged.
//!
//! The worker carries every search space in its own binary: a lease brings only the space name, the job's
//! canonical parameters and a chunk index. It survives the coordinator going away (every RPC is retried with
//! backoff) and on shutdown stops leasing, hands back unstarted chunks, finishes or cancels running ones within
//! a grace period, and delivers every result it has before it exits.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sweep_client::{ClientSecurity, ConnectError, ReportClient, WorkClient};
use sweep_proto::v1;
use sweep_space::{Control, Job, Registry};
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://10.0.0.5:7878`.
    pub connect: String,
    /// A stable name for this worker (empty: the coordinator assigns one).
    pub name: String,
    pub threads: usize,
    /// Chunks leased beyond the running ones, so a finished chunk is replaced at once; more while chunks are
    /// short (see [`LEASE_AHEAD`]).
    pub prefetch: usize,
    /// How long shutdown waits for running chunks before cancelling and handing them back.
    pub grace: Duration,
    /// Where fetched input artifacts (tables) are cached by digest, so a restarted worker does not fetch them
    /// again. `None`: memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Token and TLS settings for talking to the coordinator.
    pub security: ClientSecurity,
    /// Tests only: falsify results this way, to prove the coordinator's checks catch it.
    pub lie: Option<Lie>,
    /// The spaces this worker runs, declared when it registers: the coordinator leases it chunks of these only.
    /// `exec` is in it only when the worker was started with `--allow-exec`.
    pub registry: Registry,
    /// A coordinator in this process to call instead of connecting to `connect` (`sweep run`; see
    /// `sweep_coordinator::in_process`).
    pub in_process: Option<sweep_proto::Transport>,
}

/// How often a running chunk's resume state is sent at most: the coordinator writes each one durably, so a
/// program that saves its state every millisecond still costs one write per chunk every few seconds.
pub const RESUME_STATE_INTERVAL: Duration = Duration::from_secs(3);

/// How a test worker falsifies its results (see [`WorkerConfig::lie`]). Each is a lie a real fault could
/// produce: a solution lost, a count off, garbage in a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    /// Drops the last solution of every chunk that has one (counters left as they were).
    DropSolution,
    /// Adds one to the chunk's node count: a count no verifier can check (each space's counters are tied to its
    /// listed solutions, so inflating those is caught as a failed verification), but a quorum can.
    InflateCount,
    /// Appends a solution that is not one.
    BogusSolution,
}

impl std::str::FromStr for Lie {
    type Err = String;
    fn from_str(s: &str) -> Result<Lie, String> {
        match s {
            "drop-solution" => Ok(Lie::DropSolution),
            "inflate-count" => Ok(Lie::InflateCount),
            "bogus-solution" => Ok(Lie::BogusSolution),
            _ => Err(format!(
                "unknown lie `{s}`: one of drop-solution, inflate-count, bogus-solution"
            )),
        }
    }
}

impl Lie {
    fn apply(self, out: &mut sweep_space::ChunkOutput) {
        match self {
            Lie::DropSolution => {
                out.solutions.pop();
            }
            Lie::InflateCount => out.nodes += 1,
            Lie::BogusSolution => out.solutions.push("not a solution".into()),
        }
    }
}

/// This machine's memory in bytes, as the coordinator shows it (0 where it cannot be read).
fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
}

impl WorkerConfig {
    pub fn new(connect: impl Into<String>, threads: usize, registry: Registry) -> WorkerConfig {
        WorkerConfig {
            registry,
            connect: connect.into(),
            name: String::new(),
            threads: threads.max(1),
            prefetch: threads.max(1),
            grace: Duration::from_secs(30),
            cache_dir: None,
            security: ClientSecurity::default(),
            lie: None,
            in_process: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A bad URL, token file or TLS file.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The coordinator refused this worker's token: retrying cannot help.
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The operating system would not start the search threads asked for.
    #[error("cannot start {0} search threads: {1}")]
    Threads(usize, std::io::Error),
}

/// What a worker did before it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub chunks_done: u64,
    pub chunks_failed: u64,
    pub nodes: u64,
}

/// A finished chunk's report, encoded by the search thread that ran it (see `EncodedCompleteRequest` in the
/// proto): its solutions are freed where they were allocated, and a batch kept for a retry is shared.
struct Outgoing {
    lease_id: u64,
    job_id: u64,
    chunk: u64,
    report: prost::bytes::Bytes,
}

impl Outgoing {
    /// What the report adds to a request: its bytes, their length and the field's tag.
    fn encoded_len(&self) -> usize {
        let len = self.report.len();
        1 + prost::length_delimiter_len(len) + len
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<v1::ChunkLease>,
    running: HashMap<u64, Arc<Control>>,
    /// When each running lease's resume state was last sent (see [`RESUME_STATE_INTERVAL`]).
    state_sent: HashMap<u64, Instant>,
    outbox: Vec<Outgoing>,
    failures: Vec<v1::FailRequest>,
    /// Jobs built (and bound to their inputs) so far, with the digests of those inputs and when each was last
    /// used: see [`State::cache_job`].
    jobs: HashMap<(u64, String), CachedJob>,
    /// Input artifacts by digest, shared by every cached job bound to them.
    artifacts: HashMap<String, Arc<Vec<u8>>>,
    /// Bumped on every use of a cached job: the least recently used bound job is the first to go.
    uses: u64,
    stats: WorkerStats,
    stopping: bool,
    /// Recent chunks' run time, smoothed (seconds; `None` before the first): see [`State::prefetch`].
    chunk_secs: Option<f64>,
}

/// Queued work the leaser keeps ahead of the executors, in time: while chunks are short (the last chunks of
/// star n = 12 take about a millisecond), one queued chunk per thread can run out before the next lease comes
/// back, and a lease per chunk costs the coordinator a call per chunk. With this and batched refills, star
/// n = 12 made 90 lease calls instead of 248; its run time did not change measurably on two cores.
pub const LEASE_AHEAD: Duration = Duration::from_millis(50);

/// Queued chunks per thread at most, however short the chunks: leases held here are chunks no other worker
/// can take at the end of a job.
const MAX_PREFETCH_PER_THREAD: usize = 16;

impl State {
    /// Whether the outbox goes now rather than at the end of the report interval: it holds
    /// [`REPORT_EAGER_BYTES`], or nothing runs that could add to the batch (a job's last results, which the
    /// job's end waits for).
    fn report_now(&self) -> bool {
        self.running.is_empty()
            || self.outbox.iter().map(Outgoing::encoded_len).sum::<usize>() >= REPORT_EAGER_BYTES
    }

    /// Chunks to keep queued: the configured prefetch, or enough chunks of the recent length to cover
    /// [`LEASE_AHEAD`] on every thread when that is more.
    fn prefetch(&self, cfg: &WorkerConfig) -> usize {
        let Some(secs) = self.chunk_secs.filter(|s| *s > 0.0) else {
            return cfg.prefetch;
        };
        let threads = cfg.threads.max(1);
        let ahead = (threads as f64 * LEASE_AHEAD.as_secs_f64() / secs).ceil();
        let ahead = if ahead.is_finite() {
            (ahead as usize).min(threads * MAX_PREFETCH_PER_THREAD)
        } else {
            0
        };
        cfg.prefetch.max(ahead)
    }

    /// Folds a finished chunk's run time into the smoothed one.
    fn note_chunk_time(&mut self, secs: f64) {
        self.chunk_secs = Some(match self.chunk_secs {
            Some(avg) => 0.8 * avg + 0.2 * secs,
            None => secs,
        });
    }
}

struct CachedJob {
    job: Arc<dyn Job>,
    /// Digests of the artifacts it is bound to (empty: a job without inputs).
    inputs: Vec<String>,
    last_use: u64,
}

/// Jobs bound to input artifacts kept at most: a layered search is a DAG of dozens of jobs, each bound to the
/// previous layer, and a worker that kept every one (and every layer's bytes) would grow for the whole run.
const MAX_BOUND_JOBS: usize = 8;

impl State {
    fn cached_job(&mut self, key: &(u64, String)) -> Option<Arc<dyn Job>> {
        self.uses += 1;
        let uses = self.uses;
        self.jobs.get_mut(key).map(|c| {
            c.last_use = uses;
            c.job.clone()
        })
    }

    /// Keeps `job` for the next chunks of the same job. Past [`MAX_BOUND_JOBS`] bound jobs the least recently
    /// used one is dropped (chunks running on it hold their own reference), and so are the input artifacts no
    /// kept job is bound to: a job that needs one again gets it from the disk cache or the coordinator.
    fn cache_job(&mut self, key: (u64, String), job: Arc<dyn Job>, inputs: Vec<(u64, String)>) {
        self.uses += 1;
        let inputs: Vec<String> = inputs.into_iter().map(|(_, d)| d).collect();
        let bound = !inputs.is_empty();
        self.jobs.insert(
            key,
            CachedJob {
                job,
                inputs,
                last_use: self.uses,
            },
        );
        if !bound {
            return;
        }
        while self.jobs.values().filter(|c| !c.inputs.is_empty()).count() > MAX_BOUND_JOBS {
            let oldest = self
                .jobs
                .iter()
                .filter(|(_, c)| !c.inputs.is_empty())
                .min_by_key(|(_, c)| c.last_use)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.jobs.remove(&k);
                }
                None => break,
            }
        }
        let needed: std::collections::HashSet<&String> =
            self.jobs.values().flat_map(|c| c.inputs.iter()).collect();
        self.artifacts.retain(|digest, _| needed.contains(digest));
    }
}

/// The (input job, artifact digest) pairs a lease's job must be bound to, in order: the list, or the single
/// input a coordinator older than the list sends.
/// Shipped files follow as (0, digest).
fn lease_inputs(lease: &v1::ChunkLease) -> Vec<(u64, String)> {
    let mut inputs: Vec<(u64, String)> = if !lease.inputs.is_empty() {
        lease
            .inputs
            .iter()
            .map(|i| (i.job_id, i.digest.clone()))
            .collect()
    } else if lease.input_job != 0 {
        vec![(lease.input_job, lease.input_digest.clone())]
    } else {
        Vec::new()
    };
    inputs.extend(lease.shipped.iter().map(|d| (0, d.clone())));
    inputs
}

struct Shared {
    cfg: WorkerConfig,
    client: WorkClient,
    reports: ReportClient,
    worker_id: String,
    state: Mutex<State>,
    work_ready: Notify,
    room: Notify,
    outbox_ready: Notify,
    heartbeat: Duration,
    /// Held while a job is bound to its input artifacts (fetch, then parse): see [`Shared::job`].
    binding: tokio::sync::Mutex<()>,
    /// Signalled when the coordinator asks this worker to drain: it then stops as on a shutdown signal.
    drained: Notify,
    /// One permit per thread: a chunk takes as many as its job's threads per chunk before it starts.
    slots: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job a lease belongs to, built once per job and, if it needs input artifacts, bound to them.
    async fn job(&self, lease: &v1::ChunkLease) -> Result<Arc<dyn Job>, PrepError> {
        let key = (lease.job_id, lease.params_json.clone());
        if let Some(j) = self.lock().cached_job(&key) {
            return Ok(j);
        }
        let params: serde_json::Value = serde_json::from_str(&lease.params_json)
            .map_err(|e| PrepError::Fatal(format!("the lease's params are not JSON: {e}")))?;
        let mut job = self
            .cfg
            .registry
            .job_from_params(&lease.space, &params)
            .map_err(|e| PrepError::Fatal(format!("cannot build the job: {e}")))?;
        let inputs = lease_inputs(lease);
        if !inputs.is_empty() {
            // One binding at a time: executors that start on the same job together wait here and then find
            // it bound, instead of each parsing the same large tables.
            let _one_at_a_time = self.binding.lock().await;
            if let Some(j) = self.lock().cached_job(&key) {
                return Ok(j);
            }
            let mut artifacts = Vec::with_capacity(inputs.len());
            for (input, digest) in &inputs {
                artifacts.push(
                    self.input_artifact(*input, digest)
                        .await
                        .map_err(PrepError::Transient)?,
                );
            }
            let names = inputs
                .iter()
                .map(|(i, _)| i.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            // Binding parses and checks every artifact: CPU work, kept off the async runtime.
            job = tokio::task::spawn_blocking(move || {
                let views: Vec<&[u8]> = artifacts.iter().map(|a| a.as_slice()).collect();
                job.bind_inputs(&views)
            })
            .await
            .map_err(|e| {
                PrepError::Fatal(format!("binding the inputs of jobs {names} crashed: {e}"))
            })?
            .map_err(|e| {
                PrepError::Fatal(format!("cannot load the inputs of jobs {names}: {e}"))
            })?;
        }
        self.lock().cache_job(key, job.clone(), inputs);
        Ok(job)
    }

    /// The artifact of job `input` with blake3 `digest`: from memory, the disk cache, or the coordinator.
    /// Called only under the `binding` lock, so one artifact is never fetched twice at once.
    async fn input_artifact(&self, input: u64, digest: &str) -> Result<Arc<Vec<u8>>, String> {
        if let Some(a) = self.lock().artifacts.get(digest) {
            return Ok(a.clone());
        }
        let cached = self.cache_path(digest);
        let from_disk = match &cached {
            Some(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read(path))
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            None => None,
        };
        let bytes = match from_disk.filter(|b| blake3::hash(b).to_hex().as_str() == digest) {
            Some(b) => {
                info!(
                    job = input,
                    bytes = b.len(),
                    "input artifact from the disk cache"
                );
                b
            }
            None => {
                let b = self.fetch_artifact(input, digest).await?;
                if let Some(path) = cached {
                    let data = b.clone();
                    // A cache is an optimisation: failing to write it is logged, not fatal.
                    let written =
                        tokio::task::spawn_blocking(move || write_atomically(&path, &data)).await;
                    if let Ok(Err(e)) = written {
                        warn!(error = %e, "cannot cache the artifact on disk");
                    }
                }
                b
            }
        };
        let bytes = Arc::new(bytes);
        self.lock()
            .artifacts
            .insert(digest.to_string(), bytes.clone());
        Ok(bytes)
    }

    fn cache_path(&self, digest: &str) -> Option<std::path::PathBuf> {
        // The digest names the file: only hex digits reach the file system.
        if digest.is_empty() || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        Some(
            self.cfg
                .cache_dir
                .as_ref()?
                .join(format!("{digest}.artifact")),
        )
    }

    /// Streams the artifact in pieces, checks offsets, size and digest.
    async fn fetch_artifact(&self, input: u64, digest: &str) -> Result<Vec<u8>, String> {
        let mut client = self.client.clone();
        let req = v1::FetchArtifactRequest {
            worker_id: self.worker_id.clone(),
            job_id: input,
            // Job 0: a shipped file, named by its digest.
            digest: digest.to_string(),
        };
        let mut stream = client
            .fetch_artifact(req)
            .await
            .map_err(|e| format!("fetching job {input}'s artifact: {}", e.message()))?
            .into_inner();
        let mut bytes: Vec<u8> = Vec::new();
        let mut total = None;
        while let Some(piece) = stream
            .message()
            .await
            .map_err(|e| format!("fetching job {input}'s artifact: {}", e.message()))?
        {
            if piece.offset != bytes.len() as u64 || piece.digest != digest {
                return Err(format!(
                    "job {input}'s artifact arrived out of order or with another digest"
                ));
            }
            if total.is_none() {
                let t =
                    usize::try_from(piece.total).map_err(|_| "artifact too large".to_string())?;
                bytes.reserve_exact(t);
                total = Some(t);
            }
            bytes.extend_from_slice(&piece.data);
        }
        if Some(bytes.len()) != total || blake3::hash(&bytes).to_hex().as_str() != digest {
            return Err(format!(
                "job {input}'s artifact is incomplete or does not match its digest"
            ));
        }
        info!(job = input, bytes = bytes.len(), "input artifact fetched");
        Ok(bytes)
    }
}

fn write_atomically(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}

/// Why a lease's job could not be prepared.
enum PrepError {
    /// The job cannot run here (bad parameters, a bad input): the chunk fails, which counts as an attempt.
    Fatal(String),
    /// Fetching the input failed (the coordinator is restarting, say): the chunk is handed back unused.
    Transient(String),
}

/// Exponential backoff with a cap, for talking to a coordinator that may be restarting.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(Duration::from_millis(50))
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
    }
}

/// What this worker tells the coordinator about itself, under `name` (empty: the coordinator picks one).
fn register_request(cfg: &WorkerConfig, name: &str) -> v1::RegisterRequest {
    v1::RegisterRequest {
        name: name.to_string(),
        threads: cfg.threads as u32,
        version: env!("CARGO_PKG_VERSION").to_string(),
        spaces: cfg
            .registry
            .names()
            .into_iter()
            .map(str::to_string)
            .collect(),
        memory_bytes: memory_bytes(),
    }
}

/// Runs a worker until `shutdown` resolves (then drains as described in the crate docs).
pub async fn run(
    cfg: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, WorkerError> {
    let (mut client, reports) = match &cfg.in_process {
        Some(transport) => sweep_client::work_client_in_process(transport.clone()),
        None => sweep_client::work_client(&cfg.connect, &cfg.security)?,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);

    // Register, retrying until the coordinator answers or we are told to stop.
    let mut backoff = Backoff::new();
    let reg = loop {
        let req = register_request(&cfg, &cfg.name);
        tokio::select! {
            r = client.register(req) => match r {
                Ok(r) => break r.into_inner(),
                Err(e) if sweep_client::is_refusal(&e) => {
                    return Err(WorkerError::Refused(e.message().to_string()))
                }
                Err(e) => {
                    debug!(error = %e, "register failed; retrying");
                    backoff.wait().await;
                }
            },
            _ = &mut shutdown => return Ok(WorkerStats::default()),
        }
    };
    info!(worker = %reg.worker_id, threads = cfg.threads, "registered");
    let threads = cfg.threads;
    let shared = Arc::new(Shared {
        heartbeat: Duration::from_millis(reg.heartbeat_interval_ms.clamp(50, 60_000)),
        worker_id: reg.worker_id,
        client,
        reports,
        cfg,
        state: Mutex::new(State::default()),
        work_ready: Notify::new(),
        room: Notify::new(),
        outbox_ready: Notify::new(),
        binding: tokio::sync::Mutex::new(()),
        drained: Notify::new(),
        slots: Arc::new(tokio::sync::Semaphore::new(threads)),
    });

    let leaser = tokio::spawn(leaser(shared.clone(), stop_rx.clone()));
    // Threads of their own, not the runtime's blocking pool: they live as long as the worker, and a worker with
    // as many threads as the pool's limit (512) would leave none for the work they wait on (binding inputs).
    let mut executors = Vec::with_capacity(threads);
    for i in 0..threads {
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let (sh, stop, rt) = (
            shared.clone(),
            stop_rx.clone(),
            tokio::runtime::Handle::current(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("sweep-search-{i}"))
            .spawn(move || {
                executor(sh, stop, rt);
                // Dropped unsent if the executor panicked: the receiver sees that as finished too.
                let _ = done.send(());
            });
        if let Err(e) = spawned {
            let _ = stop_tx.send(true);
            shared.lock().stopping = true;
            shared.work_ready.notify_waiters();
            leaser.abort();
            return Err(WorkerError::Threads(threads, e));
        }
        executors.push(finished);
    }
    let heartbeat = tokio::spawn(heartbeater(shared.clone(), stop_rx.clone()));
    let reporter = tokio::spawn(reporter(shared.clone(), stop_rx.clone()));

    tokio::select! {
        _ = &mut shutdown => {}
        _ = shared.drained.notified() => info!("drained by the coordinator"),
    }
    info!("stopping: no new leases; finishing running chunks");
    {
        let mut st = shared.lock();
        st.stopping = true;
        // Chunks that can resume (programs that save resume states) stop now and are handed back with their
        // state; the others finish within the grace period.
        for ctl in st.running.values() {
            ctl.request_stop();
        }
    }
    let _ = stop_tx.send(true);
    let _ = leaser.await;
    // Unstarted chunks go back without using an attempt.
    let queued: Vec<v1::ChunkLease> = shared.lock().queue.drain(..).collect();
    for l in queued {
        shared.lock().failures.push(v1::FailRequest {
            worker_id: shared.worker_id.clone(),
            lease_id: l.lease_id,
            error: "worker shutting down".into(),
            release: true,
            checkpoint: None,
        });
    }
    shared.work_ready.notify_waiters();
    let deadline = Instant::now() + shared.cfg.grace;
    for ex in executors {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, ex).await.is_err() {
            // Past the grace period: cancel what still runs; its chunk is handed back by the executor.
            for ctl in shared.lock().running.values() {
                ctl.cancel();
            }
        }
    }
    shared.outbox_ready.notify_one();
    // Results still unsent after the grace period (the coordinator is gone) are dropped: their chunks are
    // leased again elsewhere, so a worker told to stop always stops.
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
    if tokio::time::timeout(left, reporter).await.is_err() {
        warn!("the coordinator did not take the last results; stopping without them");
    }
    heartbeat.abort();
    let _ = heartbeat.await;
    let stats = shared.lock().stats.clone();
    info!(chunks = stats.chunks_done, "worker stopped");
    Ok(stats)
}

/// How long a stopping worker waits for the answer to a lease request already sent.
const IN_FLIGHT_LEASE_GRACE: Duration = Duration::from_secs(2);

async fn leaser(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut client = sh.client.clone();
    let mut backoff = Backoff::new();
    loop {
        if *stop.borrow() {
            return;
        }
        let want = {
            let st = sh.lock();
            let prefetch = st.prefetch(&sh.cfg);
            let want =
                (sh.cfg.threads + prefetch).saturating_sub(st.queue.len() + st.running.len());
            // Refilled in batches of half the prefetch while work is queued: a lease per finished chunk woke
            // the coordinator (and preempted a search thread) once per chunk.
            if st.queue.is_empty() || want >= (prefetch / 2).max(1) {
                want
            } else {
                0
            }
        };
        if want == 0 {
            tokio::select! {
                _ = sh.room.notified() => continue,
                _ = stop.changed() => return,
            }
        }
        let req = v1::LeaseRequest {
            worker_id: sh.worker_id.clone(),
            max_chunks: want as u32,
        };
        let answer = {
            let call = client.lease(req);
            tokio::pin!(call);
            tokio::select! {
                r = &mut call => r,
                _ = stop.changed() => {
                    // Over a network, dropping the call now could leave chunks the coordinator already granted
                    // leased to a stopped worker until they expire: the answer may be on its way. It is awaited
                    // briefly (a request that found no work is held up to 200 ms), and its chunks join the
                    // queue, which is handed back on the way out. In process the coordinator's handler runs
                    // inside this call's future and answers in the same poll that grants, so nothing granted
                    // can be dropped unanswered, and `sweep run` does not wait out the hold at its end.
                    if sh.cfg.in_process.is_none() {
                        if let Ok(Ok(resp)) = tokio::time::timeout(IN_FLIGHT_LEASE_GRACE, call).await {
                            sh.lock().queue.extend(resp.into_inner().leases);
                        }
                    }
                    return;
                }
            }
        };
        let pause = match answer {
            Ok(resp) => {
                backoff = Backoff::new();
                let resp = resp.into_inner();
                if resp.register_again {
                    // The coordinator restarted and lost who we are: tell it again, under our name.
                    let req = register_request(&sh.cfg, &sh.worker_id);
                    if let Err(e) = client.register(req).await {
                        debug!(error = %e, "register again failed");
                    } else {
                        info!("registered again with a restarted coordinator");
                    }
                    continue;
                }
                if resp.drain {
                    sh.drained.notify_one();
                    return;
                }
                if resp.leases.is_empty() {
                    Some(Duration::from_millis(resp.retry_after_ms.clamp(20, 5000)))
                } else {
                    let n = resp.leases.len();
                    sh.lock().queue.extend(resp.leases);
                    for _ in 0..n {
                        sh.work_ready.notify_one();
                    }
                    None
                }
            }
            Err(e) => {
                // Refused mid-run (a token rotated away): keep trying, the token file may be updated.
                if sweep_client::is_refusal(&e) {
                    warn!(error = %e.message(), "the coordinator refused the lease request");
                }
                debug!(error = %e, "lease failed; backing off");
                Some(backoff.0)
            }
        };
        if let Some(p) = pause {
            if p == backoff.0 {
                backoff.wait().await;
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(p) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// One search thread: an OS thread of its own for the worker's life, which takes the next queued chunk
/// itself when one ends. Handing each chunk from an async task to the blocking pool and back cost two thread
/// wake-ups per chunk, and on short chunks a search thread waited for a runtime thread to be scheduled (behind
/// the other search thread) while its own core stood idle. The runtime is entered only to wait: for work, for a
/// job to be built, for free threads.
fn executor(sh: Arc<Shared>, mut stop: watch::Receiver<bool>, rt: tokio::runtime::Handle) {
    loop {
        // Taken from the queue and marked running under one lock: in between, the leaser would count the chunk
        // nowhere and lease one too many, and the reporter could think the worker idle and stop.
        let next = {
            let mut st = sh.lock();
            if st.stopping {
                return;
            }
            st.queue.pop_front().map(|lease| {
                let resume = (!lease.checkpoint.is_empty()).then(|| lease.checkpoint.clone());
                // Running from here on, so heartbeats keep the lease while its inputs are fetched.
                let ctl = Arc::new(Control::resuming(resume));
                st.running.insert(lease.lease_id, ctl.clone());
                (lease, ctl)
            })
        };
        let Some((lease, ctl)) = next else {
            let gone = rt.block_on(async {
                tokio::select! {
                    _ = sh.work_ready.notified() => false,
                    // The worker's task was dropped without stopping us: nothing will ever wake this thread.
                    r = stop.changed() => r.is_err(),
                }
            });
            if gone {
                return;
            }
            continue;
        };
        let started = Instant::now();
        let mut transient = false;
        let prepared = rt.block_on(sh.job(&lease));
        // A chunk that needs k threads waits for k free ones (never more than the worker has).
        let want = prepared
            .as_ref()
            .map_or(1, |j| j.threads_per_chunk().clamp(1, sh.cfg.threads as u32));
        let Ok(_permits) = rt.block_on(sh.slots.clone().acquire_many_owned(want)) else {
            return;
        };
        ctl.set_threads(want);
        ctl.set_job(lease.job_id);
        ctl.set_count_only(lease.count_only);
        if sh.lock().stopping {
            ctl.request_stop();
        }
        let outcome = match prepared {
            Ok(job) => {
                let (n, c) = (lease.n_chunks, lease.chunk);
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job.run_chunk(n, c, &ctl)
                }));
                match ran {
                    Ok(r) => r.map_err(|e| {
                        (
                            matches!(e, sweep_space::SpaceError::Cancelled),
                            e.to_string(),
                        )
                    }),
                    Err(panic) => Err((
                        false,
                        format!("the search kernel panicked: {}", panic_message(&*panic)),
                    )),
                }
            }
            Err(PrepError::Fatal(e)) => Err((false, e)),
            Err(PrepError::Transient(e)) => {
                transient = true;
                // Do not spin through the queue while the coordinator is away.
                std::thread::sleep(Duration::from_millis(500));
                Err((false, e))
            }
        };
        let secs = started.elapsed().as_secs_f64();
        // Encoded here, on this thread and before the lock. A listed chunk's thousands of strings are then freed
        // by the thread that allocated them: freed by the reporter, they made it hold this thread's malloc arena
        // lock, and perf showed search threads asleep on that lock for 5-20 ms at a time. And the other search
        // threads never wait for the encoding under the lock.
        let outcome = outcome.map(|mut out| {
            // The engine's promise for a job that keeps counts only, whether or not its kernel (or program)
            // listed anything: no list crosses the network or reaches the store.
            if lease.count_only {
                out.solutions = Vec::new();
            }
            if let Some(lie) = sh.cfg.lie {
                lie.apply(&mut out);
            }
            let nodes = out.nodes;
            let report = v1::ChunkReport {
                lease_id: lease.lease_id,
                job_id: lease.job_id,
                chunk: lease.chunk,
                output: Some(out.into()),
                elapsed_s: secs,
            };
            let report = Outgoing {
                lease_id: lease.lease_id,
                job_id: lease.job_id,
                chunk: lease.chunk,
                report: report.encode_shared(),
            };
            (nodes, report)
        });
        let mut st = sh.lock();
        st.running.remove(&lease.lease_id);
        st.state_sent.remove(&lease.lease_id);
        match outcome {
            Ok((nodes, report)) => {
                st.stats.chunks_done += 1;
                st.stats.nodes += nodes;
                st.note_chunk_time(secs);
                st.outbox.push(report);
            }
            Err((stopped, e)) => {
                // Stopped on request (shutdown, revoked lease): not a failure of the chunk.
                let cancelled =
                    ctl.is_cancelled() || transient || (stopped && ctl.is_stop_requested());
                if !cancelled {
                    st.stats.chunks_failed += 1;
                    warn!(job = lease.job_id, chunk = lease.chunk, error = %e, "chunk failed");
                }
                st.failures.push(v1::FailRequest {
                    worker_id: sh.worker_id.clone(),
                    lease_id: lease.lease_id,
                    error: e,
                    // A chunk we cancelled (revoked, or shutdown) did not fail: hand it back.
                    release: cancelled,
                    // Its newest state, so the next attempt (here or elsewhere) continues from it.
                    checkpoint: ctl.take_resume_state(),
                });
            }
        }
        drop(st);
        sh.outbox_ready.notify_one();
        sh.room.notify_one();
    }
}

/// What a panicking kernel said, for the failure report (panics carry a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

async fn heartbeater(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut client = sh.client.clone();
    let mut tick = tokio::time::interval(sh.heartbeat);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => {}
        }
        let (progress, done) = {
            let mut st = sh.lock();
            let st = &mut *st;
            let now = Instant::now();
            let mut p: Vec<v1::LeaseProgress> = Vec::with_capacity(st.running.len());
            for (id, c) in &st.running {
                let due = st
                    .state_sent
                    .get(id)
                    .is_none_or(|t| now.duration_since(*t) >= RESUME_STATE_INTERVAL);
                let checkpoint = if due { c.take_resume_state() } else { None };
                if checkpoint.is_some() {
                    st.state_sent.insert(*id, now);
                }
                p.push(v1::LeaseProgress {
                    lease_id: *id,
                    nodes: c.nodes(),
                    checkpoint,
                });
            }
            p.extend(st.queue.iter().map(|l| v1::LeaseProgress {
                lease_id: l.lease_id,
                nodes: 0,
                checkpoint: None,
            }));
            (
                p,
                st.stopping && st.running.is_empty() && st.outbox.is_empty(),
            )
        };
        if done {
            return;
        }
        if progress.is_empty() {
            continue;
        }
        let req = v1::HeartbeatRequest {
            worker_id: sh.worker_id.clone(),
            progress,
        };
        match client.heartbeat(req).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                if resp.register_again {
                    // The coordinator restarted while every thread was busy (so no lease asked): describe this
                    // worker again, or `sweep workers` shows it with no threads until its next lease.
                    let req = register_request(&sh.cfg, &sh.worker_id);
                    match client.register(req).await {
                        Ok(_) => info!("registered again with a restarted coordinator"),
                        Err(e) => debug!(error = %e, "register again failed"),
                    }
                }
                let revoked = resp.revoked;
                if !revoked.is_empty() {
                    let mut st = sh.lock();
                    st.queue.retain(|l| !revoked.contains(&l.lease_id));
                    for id in &revoked {
                        if let Some(c) = st.running.get(id) {
                            info!(lease = id, "lease revoked by the coordinator; cancelling");
                            c.cancel();
                        }
                    }
                    drop(st);
                    sh.room.notify_one();
                }
            }
            Err(e) => debug!(error = %e, "heartbeat failed"),
        }
    }
}

/// Reports go out in batches of at most this many encoded bytes: a batch of big results (table pieces) that
/// grew while the coordinator was slow must still fit the coordinator's message limit.
const REPORT_BATCH_BYTES: usize = sweep_proto::MAX_REPORT_BYTES / 4;

/// Takes the next batch of reports from the outbox. A single report too large for any message can never be
/// delivered: it becomes a failure of its chunk (which the coordinator counts and, repeated, poisons) rather
/// than blocking every report behind it forever.
fn take_batch(st: &mut State, worker_id: &str) -> Vec<Outgoing> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(next) = st.outbox.first() {
        let len = next.encoded_len();
        if len > sweep_proto::MAX_REPORT_BYTES - 1024 {
            let r = st.outbox.remove(0);
            warn!(
                job = r.job_id,
                chunk = r.chunk,
                bytes = len,
                "result too large to report"
            );
            st.failures.push(v1::FailRequest {
                worker_id: worker_id.to_string(),
                lease_id: r.lease_id,
                error: format!(
                    "the chunk's result is {len} bytes, more than a report may carry ({})",
                    sweep_proto::MAX_REPORT_BYTES
                ),
                release: false,
                checkpoint: None,
            });
            continue;
        }
        if !batch.is_empty() && bytes + len > REPORT_BATCH_BYTES {
            break;
        }
        bytes += len;
        batch.push(st.outbox.remove(0));
    }
    batch
}

/// Results are reported at most this often (a result waiting alone goes out at once, and see
/// [`State::report_now`]): every report is a durable commit at the coordinator, and short chunks finishing one
/// by one made one commit each. Batching them delays a result by at most this much and never costs a core any
/// time: executors do not wait for the reporter. 100 ms instead of 20 ms took a counting star n = 12 `run` from
/// 3.29 to 3.19 s of CPU and from 3,450 to 2,460 context switches (medians of 10 alternated runs).
const REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// Encoded bytes waiting that send the outbox without waiting for [`REPORT_INTERVAL`]: a listing job's reports
/// are large, one commit of this many is no longer a commit per small result, and holding 100 ms of them took a
/// listing star n = 12 `run` from 32-37 MB to 46-52 MB.
const REPORT_EAGER_BYTES: usize = 256 << 10;

async fn reporter(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut client = sh.client.clone();
    let mut reporter = sh.reports.clone();
    let mut backoff = Backoff::new();
    let mut last_sent: Option<Instant> = None;
    loop {
        let wait = last_sent.map_or(Duration::ZERO, |t| {
            REPORT_INTERVAL.saturating_sub(t.elapsed())
        });
        if !wait.is_zero() && !*stop.borrow() {
            let until = tokio::time::sleep(wait);
            tokio::pin!(until);
            // Every finished chunk wakes this: a full outbox, or the last results of a job, go at once.
            while !sh.lock().report_now() {
                tokio::select! {
                    _ = &mut until => break,
                    _ = stop.changed() => break,
                    _ = sh.outbox_ready.notified() => {}
                }
            }
        }
        let (reports, failures, finished) = {
            let mut st = sh.lock();
            let finished = st.stopping && st.running.is_empty() && st.queue.is_empty();
            let reports = take_batch(&mut st, &sh.worker_id);
            (reports, std::mem::take(&mut st.failures), finished)
        };
        if reports.is_empty() && failures.is_empty() {
            if finished && *stop.borrow() {
                return;
            }
            tokio::select! {
                _ = sh.outbox_ready.notified() => {}
                _ = stop.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            continue;
        }
        let mut ok = true;
        if !reports.is_empty() {
            last_sent = Some(Instant::now());
            let req = v1::EncodedCompleteRequest {
                worker_id: sh.worker_id.clone(),
                reports: reports.iter().map(|r| r.report.clone()).collect(),
            };
            match reporter.complete(req).await {
                Ok(resp) => {
                    for ack in resp.into_inner().acks {
                        if ack.status == v1::AckStatus::Rejected as i32 {
                            warn!(lease = ack.lease_id, reason = %ack.message, "result rejected");
                        } else if ack.status == v1::AckStatus::Duplicate as i32 {
                            debug!(lease = ack.lease_id, reason = %ack.message, "result was a duplicate");
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e, "complete failed; will retry");
                    sh.lock().outbox.extend(reports);
                    ok = false;
                }
            }
        }
        let mut unsent = Vec::new();
        for (i, f) in failures.iter().enumerate() {
            if !ok {
                unsent.extend(failures[i..].iter().cloned());
                break;
            }
            if let Err(e) = client.fail(f.clone()).await {
                debug!(error = %e, "fail report failed; will retry");
                unsent.extend(failures[i..].iter().cloned());
                ok = false;
                break;
            }
        }
        sh.lock().failures.extend(unsent);
        if ok {
            backoff = Backoff::new();
        } else {
            backoff.wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(lease_id: u64, bytes: usize) -> Outgoing {
        Outgoing {
            lease_id,
            job_id: 1,
            chunk: lease_id,
            report: vec![7; bytes].into(),
        }
    }

    /// Results wait for the report interval only while chunks run that could join them and what waits is small.
    #[test]
    fn reports_wait_only_while_more_can_join_a_small_batch() {
        let mut st = State::default();
        assert!(st.report_now(), "nothing runs");
        st.running.insert(9, Arc::new(Control::new()));
        assert!(!st.report_now(), "an empty outbox with a chunk running");
        st.outbox.push(outgoing(1, 100));
        assert!(!st.report_now(), "a small result with a chunk running");
        st.outbox.push(outgoing(2, REPORT_EAGER_BYTES));
        assert!(st.report_now(), "a large batch waiting");
        st.outbox.clear();
        st.outbox.push(outgoing(3, 100));
        st.running.clear();
        assert!(st.report_now(), "the last result of a job");
    }

    /// Batches stay under the batch limit (one report over it still goes, alone), keep the outbox's order, and a
    /// report no message can carry becomes a failure of its chunk instead of blocking the ones behind it.
    #[test]
    fn report_batches_are_bounded_and_an_undeliverable_report_fails_its_chunk() {
        let mut st = State::default();
        let quarter = REPORT_BATCH_BYTES / 4;
        st.outbox = vec![
            outgoing(1, quarter),
            outgoing(2, quarter),
            outgoing(3, sweep_proto::MAX_REPORT_BYTES),
            outgoing(4, quarter),
            outgoing(5, REPORT_BATCH_BYTES + 10),
            outgoing(6, 10),
        ];
        let ids = |b: Vec<Outgoing>| b.iter().map(|o| o.lease_id).collect::<Vec<_>>();
        assert_eq!(ids(take_batch(&mut st, "w")), [1, 2, 4]);
        assert_eq!(st.failures.len(), 1);
        assert_eq!(st.failures[0].lease_id, 3);
        assert!(
            !st.failures[0].release,
            "an undeliverable result was handed back"
        );
        assert!(st.failures[0]
            .error
            .contains("more than a report may carry"));
        assert_eq!(ids(take_batch(&mut st, "w")), [5]);
        assert_eq!(ids(take_batch(&mut st, "w")), [6]);
        assert!(take_batch(&mut st, "w").is_empty());
    }

    fn lease(input_job: u64, inputs: &[(u64, &str)]) -> v1::ChunkLease {
        v1::ChunkLease {
            input_job,
            input_digest: if input_job != 0 {
                "old".into()
            } else {
                String::new()
            },
            inputs: inputs
                .iter()
                .map(|(j, d)| v1::InputArtifact {
                    job_id: *j,
                    digest: d.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_names_its_inputs_in_order_or_the_single_one_of_older_coordinators() {
        assert!(lease_inputs(&lease(0, &[])).is_empty());
        assert_eq!(lease_inputs(&lease(4, &[])), [(4, "old".to_string())]);
        assert_eq!(
            lease_inputs(&lease(0, &[(7, "b"), (3, "a"), (7, "b")])),
            [
                (7, "b".to_string()),
                (3, "a".to_string()),
                (7, "b".to_string())
            ]
        );
        // The list wins when both are there.
        assert_eq!(lease_inputs(&lease(4, &[(5, "x")])), [(5, "x".to_string())]);
    }

    #[test]
    fn short_chunks_are_leased_further_ahead_within_a_bound() {
        let cfg = WorkerConfig::new("http://127.0.0.1:1", 2, Registry::new());
        let mut st = State::default();
        assert_eq!(
            st.prefetch(&cfg),
            2,
            "nothing measured yet: the configured prefetch"
        );
        st.note_chunk_time(1.0);
        assert_eq!(st.prefetch(&cfg), 2, "long chunks: the configured prefetch");
        let mut st = State::default();
        st.note_chunk_time(0.010);
        assert_eq!(st.prefetch(&cfg), 10, "50 ms ahead on each of 2 threads");
        for _ in 0..50 {
            st.note_chunk_time(0.0005);
        }
        assert_eq!(st.prefetch(&cfg), 2 * MAX_PREFETCH_PER_THREAD, "bounded");
        st.note_chunk_time(0.0);
        assert!(st.prefetch(&cfg) <= 2 * MAX_PREFETCH_PER_THREAD);
        let mut st = State::default();
        st.note_chunk_time(0.0);
        assert_eq!(st.prefetch(&cfg), 2, "a zero time says nothing");
    }

    #[test]
    fn bound_jobs_are_kept_least_recently_used_first_out_with_their_artifacts() {
        let job = sweep_space::Registry::new()
            .with::<sweep_star::Star>()
            .job_from_params("star", &serde_json::json!({"points": 6, "method": "brute"}))
            .unwrap();
        let mut st = State::default();
        let key = |j: u64| (j, String::new());
        // A job without inputs stays whatever happens.
        st.cache_job(key(100), job.clone(), Vec::new());
        for j in 0..MAX_BOUND_JOBS as u64 {
            let digest = format!("d{j}");
            st.artifacts.insert(digest.clone(), Arc::new(vec![j as u8]));
            st.cache_job(key(j), job.clone(), vec![(j + 1000, digest)]);
        }
        // Job 0 is used again, so job 1 is now the least recently used.
        assert!(st.cached_job(&key(0)).is_some());
        st.artifacts.insert("new".into(), Arc::new(vec![9]));
        st.cache_job(
            key(50),
            job.clone(),
            vec![(2000, "new".into()), (1000, "d0".into())],
        );
        assert!(
            st.cached_job(&key(1)).is_none(),
            "the least recently used went"
        );
        assert!(!st.artifacts.contains_key("d1"), "and so did its artifact");
        for j in [0, 2, 50, 100] {
            assert!(st.cached_job(&key(j)).is_some(), "job {j}");
        }
        assert!(st.artifacts.contains_key("d0") && st.artifacts.contains_key("new"));
        assert_eq!(
            st.jobs.values().filter(|c| !c.inputs.is_empty()).count(),
            MAX_BOUND_JOBS
        );
    }
}
