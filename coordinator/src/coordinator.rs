//! The shell around the [core](crate::core): it owns the core behind one mutex (held only for short,
//! synchronous sections), the store and group commit, and the background tasks (`tasks`: committer, lease
//! expiry, artifact merger, chunk estimator). Its async methods are what the gRPC handlers and the dashboard
//! call; each takes the lock, lets the core decide, and waits until the decision is durable before returning.
//! It decides nothing itself: a submit is checked and planned by the core (`core::submit`), an answer is
//! assembled from the store by [`crate::answers`]; what is left here is locking, waiting, and moving store
//! reads and CPU work off the async threads.

mod tasks;

pub use tasks::Tasks;

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sweep_space::ChunkOutput;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit};
use tracing::info;

use crate::answers::{self, SolutionPieces};
use crate::core::{
    check_priority, check_space_right, parse_submit, plan_submit, Ack, Actor, Beat, Checked, Core,
    CoreError, JobView, LeaseAnswer, LeaseProgress, Observation, OpenError, Registration,
    ResultsInput, ResultsView, SplitAnswer, SplitRequest, SubmitSpec, WorkerView,
};
use crate::group_commit::GroupCommit;
use crate::limits::{Limits, WatchSlots};
use crate::replica::MemberHandle;
use crate::scheduler::{IdentityUse, JobId, LeaseId, SchedulerConfig};
use crate::store::{digest_hex, is_digest, Store, StoreError};

/// How long a lease request that found nothing to do waits for work to appear before answering empty.
const LEASE_HOLD: Duration = Duration::from_millis(200);
/// Writes the outbox may hold before a batch of reports waits for a commit before it is applied. The outbox
/// and what a commit builds from it (its parts, sled's batches) were most of a loaded coordinator's memory,
/// growing with how far commits fell behind the reports coming in; a report that waits instead is answered
/// a little later, and workers already wait for their answers. About three ops per result: a few thousand
/// results per commit keep the fsync shared.
pub const MAX_OUTBOX_OPS: usize = 16_384;
/// The largest file `Ship` takes: programs and their data, not datasets (those belong in a job's input).
pub const MAX_SHIPPED_BYTES: u64 = 1 << 30;

#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub scheduler: SchedulerConfig,
    /// How often the coordinator looks for expired leases.
    pub expiry_interval: Duration,
    /// What one client may make the coordinator hold or store (see [`crate::limits`]).
    pub limits: Limits,
    /// The spaces this coordinator can plan, verify and merge: jobs are rebuilt from (space, parameters) with
    /// it. The command line passes the built-in spaces plus any of its user's; tests put spaces of their own.
    pub registry: sweep_space::Registry,
    /// The highest priority a submit without an admin token may ask for (`--max-user-priority`); `None`: any.
    pub max_user_priority: Option<i32>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            scheduler: SchedulerConfig::default(),
            expiry_interval: Duration::from_millis(250),
            limits: Limits::default(),
            registry: sweep_space::Registry::new(),
            max_user_priority: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the store is damaged: {0}; `sweep store check --data DIR` lists every problem and `sweep store repair --data DIR` rebuilds it from its chunk records (re-running what was lost)")]
    Damaged(String),
    /// The store holds a job this binary cannot rebuild.
    #[error(transparent)]
    Open(OpenError),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("cannot read the listener's address: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot build the reflection service: {0}")]
    Reflection(String),
}

/// Wall-clock milliseconds: the core takes time as an argument, and this is where it comes from.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A chunk report as it arrived: the output decoded at the edge, or why it could not be.
pub struct Report {
    pub lease: LeaseId,
    pub job: JobId,
    /// The slot reported for (a plan chunk or a piece).
    pub chunk: u64,
    /// The generation of the slot's part the result covers.
    pub generation: u32,
    pub output: Result<ChunkOutput, String>,
}

/// The shell: the core behind one lock, group commit, and what wakes the background tasks and the waiting lease
/// requests. One per process, shared as an `Arc` by the adapters and the tasks.
pub struct Coordinator {
    core: Mutex<Core>,
    commit: GroupCommit,
    /// Wakes the artifact merger when a job finishes.
    merge_kick: Notify,
    /// Wakes the estimator when a job was submitted (it may have created jobs of unknown size).
    estimate_kick: Notify,
    /// Wakes lease requests that found nothing to do (see [`LEASE_HOLD`]) when work may have appeared: a job
    /// submitted, an input merged.
    work_ready: Notify,
    /// Set when the server begins to shut down: long-lived streams (`Watch`, artifact pieces) end, so graceful
    /// shutdown does not wait forever for a client that never hangs up.
    stopping: watch::Sender<bool>,
    watch_slots: WatchSlots,
    /// The core's job-change counter ([`Core::job_changes`]) as `Watch` streams see it, published by
    /// [`CoreGuard`] whenever the lock is let go after the counter moved.
    job_changes: watch::Sender<u64>,
    /// Event counters for `/metrics` and the dashboard ([`crate::metrics`]).
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    cfg: CoordinatorConfig,
}

/// The core, locked. When it is let go after the core's job-change counter moved, the new value goes to the
/// `Watch` streams: the core counts, the shell wakes. Published while the lock is still held, so two guards
/// cannot publish out of order.
struct CoreGuard<'a> {
    core: MutexGuard<'a, Core>,
    changes: &'a watch::Sender<u64>,
}

impl Deref for CoreGuard<'_> {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.core
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let now = self.core.job_changes();
        // Streams wake only when the counter moved; the channel holds the value last published.
        self.changes.send_if_modified(|published| {
            let moved = *published != now;
            *published = now;
            moved
        });
    }
}

impl Coordinator {
    /// The spaces this coordinator knows.
    pub fn registry(&self) -> &sweep_space::Registry {
        &self.cfg.registry
    }

    /// Loads every job from the store and rebuilds the core.
    pub fn open(store: Store, cfg: CoordinatorConfig) -> Result<Arc<Coordinator>, ServeError> {
        Coordinator::open_with(Arc::new(store), cfg, None, Arc::default())
    }

    /// The coordinator on the leader of a replicated group: its memory rebuilt from this member's `store` (as a
    /// restart does), every batch it decides proposed through `member` (see [`GroupCommit`]). The caller opens
    /// it when `member` becomes the leader and drops it when it stops being one ([`crate::member`]); `metrics`
    /// are the process's, kept across terms.
    pub fn open_member(
        store: Arc<Store>,
        cfg: CoordinatorConfig,
        member: MemberHandle,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Coordinator>, ServeError> {
        Coordinator::open_with(store, cfg, Some(member), metrics)
    }

    fn open_with(
        store: Arc<Store>,
        cfg: CoordinatorConfig,
        member: Option<MemberHandle>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Coordinator>, ServeError> {
        let snap = store.load().map_err(|e| match e {
            StoreError::Damaged { .. } => ServeError::Damaged(e.to_string()),
            e => ServeError::Store(e),
        })?;
        let registry = cfg.registry.clone();
        let job_of = |space: &str, params: &serde_json::Value| {
            registry
                .job_from_params(space, params)
                .map_err(|e| e.to_string())
        };
        let core = Core::open(snap, cfg.scheduler, cfg.limits.clone(), &job_of, now_ms()).map_err(
            |e| match e {
                OpenError::Damaged(why) => ServeError::Damaged(why),
                e @ OpenError::UnknownStoredJob { .. } => ServeError::Open(e),
            },
        )?;
        Ok(Arc::new(Coordinator {
            core: Mutex::new(core),
            commit: GroupCommit::with_replica(store, member),
            merge_kick: Notify::new(),
            estimate_kick: Notify::new(),
            work_ready: Notify::new(),
            stopping: watch::channel(false).0,
            watch_slots: WatchSlots::new(cfg.limits.max_watch_streams),
            job_changes: watch::channel(0).0,
            metrics,
            cfg,
        }))
    }

    fn lock(&self) -> CoreGuard<'_> {
        // A panic while holding the lock would be a bug; the state is still the best we have.
        CoreGuard {
            core: self.core.lock().unwrap_or_else(|p| p.into_inner()),
            changes: &self.job_changes,
        }
    }

    fn store(&self) -> Arc<Store> {
        self.commit.store().clone()
    }

    /// Runs `f` on the core and returns its answer with the sequence number of the batch holding its writes.
    fn decide<T>(&self, f: impl FnOnce(&mut Core) -> T) -> (T, u64) {
        let mut core = self.lock();
        let value = f(&mut core);
        (value, core.seq())
    }

    /// Runs `f` on the core and waits until what it decided is durable.
    async fn decide_durably<T>(
        &self,
        f: impl FnOnce(&mut Core) -> Result<T, CoreError>,
    ) -> Result<T, CoreError> {
        let (value, seq) = self.decide(f);
        let value = value?;
        self.commit.durable(seq).await?;
        Ok(value)
    }

    /// Waits until everything staged so far is durable. Readers of the store (results, the artifact merger)
    /// call this first: a job is `done` in memory as soon as its last result is staged, before that result is
    /// written, and reading the store in between would miss it.
    async fn settle(&self) -> Result<(), CoreError> {
        let seq = self.lock().seq();
        self.commit.durable(seq).await
    }

    /// `read` of the core, returned once everything it saw is durable. Read first, wait second: memory read
    /// *after* the wait could include results staged meanwhile that a crash would lose, and a status must not
    /// report what a restart takes back.
    async fn durable_read<T>(&self, read: impl FnOnce(&Core) -> T) -> Result<T, CoreError> {
        let (value, seq) = {
            let core = self.lock();
            (read(&core), core.seq())
        };
        self.commit.durable(seq).await?;
        Ok(value)
    }

    /// Registers a worker (again, after a restart): it is described, and leased only its spaces.
    pub fn register(&self, reg: Registration) -> (String, u64) {
        let mut core = self.lock();
        let ttl = core.lease_ttl_ms();
        (core.register(reg, now_ms()), ttl)
    }

    /// Chunks for `worker`, and how long it should wait before asking again. A request that finds nothing
    /// waits a moment for work to appear instead of letting the worker poll: a layered DAG (peg count: 18
    /// jobs) otherwise waits up to a poll interval at every step.
    pub async fn lease(
        &self,
        worker: &str,
        max_chunks: u32,
        request: u64,
    ) -> Result<(LeaseAnswer, u32), CoreError> {
        // Registered before the first try, so work that appears in between still wakes this request.
        let ready = self.work_ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        let first = self.lease_once(worker, max_chunks, request)?;
        if !first.is_empty() {
            let retry = retry_after_ms(&first);
            return Ok((first, retry));
        }
        if tokio::time::timeout(LEASE_HOLD, ready).await.is_err() {
            // Held the whole time: ask again at once, so a worker is almost always waiting here.
            return Ok((first, 0));
        }
        let again = self.lease_once(worker, max_chunks, request)?;
        let retry = retry_after_ms(&again);
        Ok((again, retry))
    }

    fn lease_once(
        &self,
        worker: &str,
        max_chunks: u32,
        request: u64,
    ) -> Result<LeaseAnswer, CoreError> {
        let answer = self
            .lock()
            .lease_request(worker, max_chunks, request, now_ms())?;
        // Lease records are written with the next group commit but not waited for: a lease the store never saw
        // is only a chunk that restarts as pending and may run twice, and a second result is never counted
        // (completion is keyed by chunk, not by lease). Waiting would put an fsync on every lease round trip.
        if matches!(&answer, LeaseAnswer::Chunks(c) if !c.is_empty()) {
            self.commit.kick();
        }
        Ok(answer)
    }

    pub fn heartbeat(&self, worker: &str, progress: Vec<LeaseProgress>) -> Result<Beat, CoreError> {
        let beat = self.lock().heartbeat(worker, progress, now_ms())?;
        // Extended deadlines are persisted lazily, for the same reason as leases: a stale deadline after a
        // restart can only re-issue a chunk early, never count it twice.
        self.commit.kick();
        Ok(beat)
    }

    /// Applies a batch of reports: checked on the blocking pool (verification can be costly), applied under
    /// the lock, answered once durable.
    pub async fn complete(
        self: &Arc<Self>,
        worker: &str,
        reports: Vec<Report>,
    ) -> Result<Vec<Ack>, CoreError> {
        let coord = self.clone();
        let checked = tokio::task::spawn_blocking(move || {
            reports
                .into_iter()
                .map(|r| {
                    let target = coord.lock().report_target(r.job, r.chunk);
                    Checked::new(
                        &coord.cfg.limits,
                        r.lease,
                        r.job,
                        (r.chunk, r.generation),
                        r.output,
                        target.as_ref(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| CoreError::Internal(format!("verifier crashed: {e}")))?;
        let store = self.store();
        // Backpressure: applied only once the outbox is small again (see `MAX_OUTBOX_OPS`).
        loop {
            let (queued, filling) = {
                let core = self.lock();
                (core.outbox_len(), core.seq())
            };
            if queued < MAX_OUTBOX_OPS {
                break;
            }
            self.commit.durable(filling).await?;
        }
        let mut acks = Vec::with_capacity(checked.len());
        let mut seq = 0;
        for c in checked {
            let (nodes, failed_verification) = c.nodes_and_failed();
            let (ack, s) =
                self.decide(|core| core.apply_report(worker, c, store.as_ref(), now_ms()));
            let ack = ack?;
            self.metrics
                .report(worker, ack.kind, nodes, failed_verification);
            seq = seq.max(s);
            acks.push(ack);
        }
        if !acks.is_empty() {
            self.commit.durable(seq).await?;
        }
        Ok(acks)
    }

    /// A worker gave up a lease (see [`Core::fail`]); answered once durable.
    pub async fn fail(
        &self,
        worker: &str,
        lease: LeaseId,
        release: bool,
        error: &str,
        checkpoint: Option<(String, u32)>,
    ) -> Result<bool, CoreError> {
        self.decide_durably(|core| core.fail(worker, lease, release, error, checkpoint, now_ms()))
            .await
    }

    /// Hands back every lease of a coordinator no worker can have outlived (see [`Core::release_all_leases`]).
    pub fn release_all_leases(&self) {
        let (n, _) = self.decide(|core| core.release_all_leases(now_ms()));
        if n > 0 {
            self.commit.kick();
        }
    }

    /// A worker's split of a running chunk (see [`Core::split`]); answered once the split is durable. A piece
    /// nobody took wakes the lease requests waiting for work.
    pub async fn split(&self, worker: &str, req: SplitRequest) -> Result<SplitAnswer, CoreError> {
        let answer = self
            .decide_durably(|core| core.split(worker, req, now_ms()))
            .await?;
        if answer.lease.is_none() {
            self.work_ready.notify_waiters();
        }
        Ok(answer)
    }

    /// Checks and plans a submitted job and every input it needs (the core's [`parse_submit`] and
    /// [`plan_submit`], outside the lock), and creates (or finds) them in one batch.
    pub async fn submit(&self, spec: SubmitSpec) -> Result<(JobView, bool), CoreError> {
        check_space_right(&spec.space, spec.admin)?;
        check_priority(spec.priority, self.cfg.max_user_priority, spec.admin)?;
        let job = parse_submit(&spec, &self.cfg.registry, &self.cfg.limits)?;
        for digest in job.shipped() {
            let store = self.store();
            let d = digest.clone();
            let stored = tokio::task::spawn_blocking(move || store.has_shipped(&d))
                .await
                .map_err(|e| CoreError::Internal(format!("store task: {e}")))??;
            if !stored {
                return Err(CoreError::Precondition(format!(
                    "the job ships file {digest}, which this coordinator does not have: send it first (`sweep submit` does)"
                )));
            }
        }
        let (nodes, opts) = plan_submit(job, &spec, &self.cfg.registry)?;
        let answer = self
            .decide_durably(|core| {
                core.submit(nodes, spec.priority, spec.reuse_existing, opts, now_ms())
            })
            .await?;
        self.work_ready.notify_waiters();
        self.estimate_kick.notify_one();
        Ok(answer)
    }

    /// Every job, as stored: what it reports survives a crash right after it is read.
    pub async fn jobs(&self) -> Result<(Vec<JobView>, u32, Vec<IdentityUse>), CoreError> {
        self.durable_read(|core| {
            let now = now_ms();
            (
                core.job_views(now),
                core.live_workers(now),
                core.identity_views(now),
            )
        })
        .await
    }

    /// An admin sets an identity's share; durable before it is answered.
    pub async fn set_share(&self, identity: &str, share: f64) -> Result<IdentityUse, CoreError> {
        self.decide_durably(|core| core.set_identity_share(identity, share, now_ms()))
            .await
    }

    pub async fn job(&self, id: JobId) -> Result<JobView, CoreError> {
        self.durable_read(|core| core.job_view(id, now_ms()))
            .await?
            .ok_or(CoreError::UnknownJob(id))
    }

    /// The job now, from memory (may be ahead of the store by one commit).
    pub fn job_now(&self, id: JobId) -> Result<JobView, CoreError> {
        self.lock()
            .job_view(id, now_ms())
            .ok_or(CoreError::UnknownJob(id))
    }

    /// For a watch stream: one job (`id` != 0) or all of them, and the live workers, from memory.
    pub fn watch_event(&self, id: JobId) -> (Vec<JobView>, u32) {
        let core = self.lock();
        let now = now_ms();
        let jobs = if id == 0 {
            core.job_views(now)
        } else {
            core.job_view(id, now).into_iter().collect()
        };
        (jobs, core.live_workers(now))
    }

    /// A slot for one watch stream (bounded), and a receiver that changes whenever a job changes state.
    pub fn open_watch(&self) -> Result<(OwnedSemaphorePermit, watch::Receiver<u64>), CoreError> {
        let slot = self.watch_slots.acquire().map_err(CoreError::OverLimit)?;
        Ok((slot, self.job_changes.subscribe()))
    }

    /// Resolves when the server begins to shut down.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Resolves, with why, once a write of this coordinator's has failed: from then on it refuses every change
    /// until it is opened again.
    pub async fn store_failed(&self) -> String {
        self.commit.failed().await
    }

    /// Extends every lease by `gap_ms`, a time in which no coordinator served (a change of leader).
    pub fn extend_leases(&self, gap_ms: u64) {
        self.lock().extend_leases(gap_ms, now_ms());
    }

    pub(crate) fn begin_stopping(&self) {
        self.stopping.send_replace(true);
    }

    pub async fn cancel(&self, id: JobId, by: &Actor) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.cancel(id, by, now_ms()))
            .await
    }

    pub async fn pause(&self, id: JobId, by: &Actor) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.pause(id, by, now_ms()))
            .await
    }

    pub async fn resume(&self, id: JobId, by: &Actor) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.resume(id, by, now_ms()))
            .await
    }

    pub fn workers(&self) -> Vec<WorkerView> {
        self.lock().worker_views()
    }

    pub fn drain(&self, name: &str) -> Result<WorkerView, CoreError> {
        self.lock().drain(name)
    }

    /// Why the store failed, once it has: from then on the coordinator accepts no changes.
    pub fn store_failure(&self) -> Option<String> {
        self.lock().store_failure().map(str::to_string)
    }

    /// One consistent snapshot of jobs and workers for the dashboard and `/metrics`, under one short lock.
    pub fn observe(&self) -> Observation {
        self.lock().observe(now_ms())
    }

    /// A job's answer over its accepted chunks, and which chunks are poisoned (see [`answers::answer`]).
    pub async fn results(&self, id: JobId) -> Result<ResultsView, CoreError> {
        self.settle().await?;
        let (input, merged) = {
            let mut core = self.lock();
            let input = core.results_input(id, now_ms())?;
            let merged = if input.cached.is_none() {
                core.take_merged(id)
            } else {
                None
            };
            (input, merged)
        };
        let ResultsInput {
            job,
            n_chunks,
            order,
            view,
            cached,
            finished,
        } = input;
        let store = self.store();
        let (result, poisoned) = tokio::task::spawn_blocking(move || {
            answers::answer(&store, id, &job, (n_chunks, &order), cached, merged)
        })
        .await
        .map_err(|e| CoreError::Internal(format!("results task: {e}")))??;
        if finished {
            self.lock().keep_result(id, result.clone());
        }
        Ok(ResultsView {
            job: view,
            result,
            poisoned,
        })
    }

    /// Every solution job `id` stored, in chunk order, streamed as the store is read (see
    /// [`answers::send_solutions`]). A job that keeps counts only has no list to stream and says why.
    pub async fn solutions(&self, id: JobId) -> Result<SolutionPieces, CoreError> {
        self.settle().await?;
        let n_chunks = self.lock().listed_chunks(id)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let store = self.store();
        let stopping = self.stopping();
        tokio::task::spawn_blocking(move || {
            answers::send_solutions(&store, id, n_chunks, &tx, &stopping)
        });
        Ok(rx)
    }

    /// A finished job's merged artifact and its digest: from memory, else from the store (then kept).
    pub async fn artifact(&self, id: JobId) -> Result<(Arc<Vec<u8>>, String), CoreError> {
        let crate::core::ArtifactRef { digest, bytes } = self.lock().artifact_of(id)?;
        if let Some(bytes) = bytes {
            return Ok((bytes, digest));
        }
        let store = self.store();
        let bytes = tokio::task::spawn_blocking(move || store.artifact(id))
            .await
            .map_err(|e| CoreError::Internal(format!("store task: {e}")))??
            .ok_or_else(|| {
                CoreError::DataLoss(format!("job {id}'s artifact is missing from the store"))
            })?;
        let bytes = Arc::new(bytes);
        self.lock().keep_artifact(id, bytes.clone());
        Ok((bytes, digest))
    }

    /// A shipped file by its digest.
    pub async fn shipped(&self, digest: &str) -> Result<(Arc<Vec<u8>>, String), CoreError> {
        if !is_digest(digest) {
            return Err(CoreError::Invalid(format!(
                "`{}` is not a blake3 digest in hex",
                digest.chars().take(80).collect::<String>()
            )));
        }
        let store = self.store();
        let name = digest.to_string();
        let bytes = tokio::task::spawn_blocking(move || store.shipped(&name))
            .await
            .map_err(|e| CoreError::Internal(format!("store task: {e}")))??
            .ok_or_else(|| CoreError::NotFound(format!("no shipped file {digest}")))?;
        Ok((Arc::new(bytes), digest.to_string()))
    }

    /// Stores a shipped file under its digest (checked); true if it was stored already.
    pub async fn ship(&self, digest: &str, bytes: Vec<u8>) -> Result<bool, CoreError> {
        if bytes.len() as u64 > MAX_SHIPPED_BYTES {
            return Err(CoreError::Invalid(format!(
                "a shipped file may have at most {MAX_SHIPPED_BYTES} bytes, this one has {}",
                bytes.len()
            )));
        }
        if !is_digest(digest) || digest_hex(&bytes) != digest {
            return Err(CoreError::Invalid(
                "the file does not match its digest (blake3, lower-case hex)".into(),
            ));
        }
        self.lock().check_writable()?;
        let store = self.store();
        let d = digest.to_string();
        let existing = tokio::task::spawn_blocking(move || store.has_shipped(&d))
            .await
            .map_err(|e| CoreError::Internal(format!("store task: {e}")))??;
        let n = bytes.len() as u64;
        if !existing {
            // Through group commit: on a replicated coordinator the file reaches a majority of members before
            // the submit that names it can.
            let op = crate::core::Op::Shipped(digest.to_string(), Arc::new(bytes));
            if let Some(e) = self.commit.write(vec![op], None).await {
                return Err(CoreError::StoreFailed(e));
            }
        }
        info!(digest = %digest, bytes = n, existing, "file shipped");
        Ok(existing)
    }
}

/// How long a worker should wait before asking again after `answer`: at once when it got work, a second when it
/// drains, a poll interval when there was nothing to do even after the hold.
fn retry_after_ms(answer: &LeaseAnswer) -> u32 {
    match answer {
        LeaseAnswer::Chunks(c) if c.is_empty() => 200,
        LeaseAnswer::Drain => 1000,
        _ => 0,
    }
}
