//! The shell around the [core](crate::core): it owns the core behind one mutex (held only for short,
//! synchronous sections), the store and group commit, and the background tasks (committer, lease expiry,
//! artifact merger). Its async methods are what the gRPC handlers and the dashboard call; each takes the lock,
//! lets the core decide, and waits until the decision is durable before returning.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sweep_space::{AnswerMerge, ChunkOutput, Job};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit};
use tracing::{info, warn};

use crate::core::{
    invalid, Ack, Beat, Checked, Core, CoreError, JobOptions, JobView, KeptAnswer, LeaseAnswer,
    LeaseProgress, Listing, Observation, OpenError, PoisonedChunk, Registration, ResultsView,
    SubmitNode, WorkerView,
};
use crate::group_commit::GroupCommit;
use crate::limits::WatchSlots;
use crate::scheduler::{ChunkRecord, JobId, LeaseId, SchedulerConfig};
use crate::store::{Store, StoreError};

/// Upper bound on the chunks of one job the coordinator keeps.
pub const MAX_CHUNKS_PER_JOB: u64 = 50_000_000;
/// How late the expirer's tick may come before the coordinator counts the time as a pause of its own (see
/// `Coordinator::expirer`): well above scheduling noise, well below a lease time.
const PAUSE_TOLERANCE_MS: u64 = 2_000;
/// How long a lease request that found nothing to do waits for work to appear before answering empty.
const LEASE_HOLD: Duration = Duration::from_millis(200);
/// More replicas than this buys no extra trust and multiplies the work.
pub const MAX_REPLICATE: u32 = 16;
/// The largest file `Ship` takes: programs and their data, not datasets (those belong in a job's input).
pub const MAX_SHIPPED_BYTES: u64 = 1 << 30;

#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub scheduler: SchedulerConfig,
    /// How often the coordinator looks for expired leases.
    pub expiry_interval: Duration,
    /// What one client may make the coordinator hold or store (see [`crate::limits`]).
    pub limits: crate::limits::Limits,
    /// The spaces this coordinator can plan, verify and merge: jobs are rebuilt from (space, parameters) with
    /// it. The command line passes the built-in spaces plus any of its user's; tests put spaces of their own.
    pub registry: sweep_space::Registry,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            scheduler: SchedulerConfig::default(),
            expiry_interval: Duration::from_millis(250),
            limits: crate::limits::Limits::default(),
            registry: sweep_space::Registry::new(),
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

/// What a submit asks for, decoded.
#[derive(Clone, Debug, Default)]
pub struct SubmitSpec {
    pub space: String,
    pub params_json: String,
    /// 0: the space's default plan.
    pub chunks: u64,
    pub priority: i32,
    pub reuse_existing: bool,
    /// Agreeing results each chunk needs (0 and 1: no replication).
    pub replicate: u32,
    /// Keep counts only, no list of solutions.
    pub count_only: bool,
}

/// A chunk report as it arrived: the output decoded at the edge, or why it could not be.
pub struct Report {
    pub lease: LeaseId,
    pub job: JobId,
    pub chunk: u64,
    pub output: Result<ChunkOutput, String>,
}

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
    /// Event counters for `/metrics` and the dashboard ([`crate::metrics`]).
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    cfg: CoordinatorConfig,
}

impl Coordinator {
    /// The spaces this coordinator knows.
    pub fn registry(&self) -> &sweep_space::Registry {
        &self.cfg.registry
    }

    /// Loads every job from the store and rebuilds the core.
    pub fn open(store: Store, cfg: CoordinatorConfig) -> Result<Arc<Coordinator>, ServeError> {
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
            commit: GroupCommit::new(Arc::new(store)),
            merge_kick: Notify::new(),
            estimate_kick: Notify::new(),
            work_ready: Notify::new(),
            stopping: watch::channel(false).0,
            watch_slots: WatchSlots::new(cfg.limits.max_watch_streams),
            metrics: Arc::default(),
            cfg,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock would be a bug; the state is still the best we have.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
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

    /// One group commit: everything the core staged since the last one.
    async fn commit_once(&self) {
        let (ops, seq, failed) = {
            let mut core = self.lock();
            let (ops, seq) = core.take_batch();
            (ops, seq, core.store_failure().map(str::to_string))
        };
        let error = self.commit.write(ops, failed).await;
        if let Some(e) = &error {
            self.lock().note_store_failure(e.clone());
        }
        self.commit.publish(seq, error);
        if self.lock().has_work_to_merge() {
            self.merge_kick.notify_one();
        }
    }

    pub(crate) async fn committer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.commit.kicked() => self.commit_once().await,
                _ = stop.changed() => break,
            }
        }
        // Whatever was decided before the stop is still written.
        self.commit_once().await;
    }

    pub(crate) async fn expirer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.cfg.expiry_interval);
        let every = self.cfg.expiry_interval.as_millis() as u64;
        let mut last = now_ms();
        let mut quiet_until = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            let now = now_ms();
            // A tick this late means the coordinator did not run (SIGSTOP, a suspended machine or VM) or the
            // clock jumped: workers could not renew their leases meanwhile, so the time is added to every
            // lease instead of expiring them all and starting their chunks again.
            let late = now.saturating_sub(last).saturating_sub(every);
            last = now;
            let expired = {
                let mut core = self.lock();
                if late > PAUSE_TOLERANCE_MS {
                    core.extend_leases(late, now);
                    // Every worker looks silent for the whole gap: each gets a lease time to be heard again,
                    // as its leases do, before it is counted lost.
                    quiet_until = now + core.lease_ttl_ms();
                }
                if now >= quiet_until {
                    self.metrics
                        .note_liveness(now, core.lease_ttl_ms(), core.last_seen());
                }
                core.expire(now)
            };
            if !expired.is_empty() {
                self.metrics.expired(&expired);
                self.commit.kick();
            }
        }
    }

    /// Merges the chunk artifacts of finished jobs into one stored artifact (replacing the chunk artifacts in
    /// the same batch), records its digest, and lets the jobs waiting for it run.
    pub(crate) async fn merger(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let todo = self.lock().take_to_merge();
            for id in todo {
                if let Err(e) = self.merge_one(id).await {
                    warn!(job = id, error = %e, "cannot merge the job's artifacts");
                }
            }
            tokio::select! {
                _ = self.merge_kick.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Computes the chunk estimates of jobs of unknown size (queued by the core when a job is created or loaded)
    /// on the blocking pool and hands them to the core, so that their views carry an expected size. Estimates
    /// are a pure function of the job: nothing is stored, and a restart computes them again.
    pub(crate) async fn estimator(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let todo = self.lock().take_to_estimate();
            for (id, job, n_chunks) in todo {
                let estimate = tokio::task::spawn_blocking(move || {
                    crate::core::estimate_chunks(job.as_ref(), n_chunks)
                });
                // A shutdown does not wait for a big job's estimates: they are only ever a progress figure.
                let per_chunk = tokio::select! {
                    r = estimate => r,
                    _ = stop.changed() => return,
                };
                match per_chunk {
                    Ok(Some(per_chunk)) => self.lock().set_estimates(id, per_chunk),
                    Ok(None) => {}
                    Err(e) => warn!(job = id, error = %e, "estimating the job's chunks failed"),
                }
            }
            tokio::select! {
                _ = self.estimate_kick.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn merge_one(&self, id: JobId) -> Result<(), CoreError> {
        let Some((job, _)) = self.lock().job_and_chunks(id) else {
            return Ok(());
        };
        // Queued twice (a reader submitted while it was being merged): the chunk artifacts are gone by now, and
        // merging "nothing" again must not replace the stored artifact with an empty one.
        if self.lock().has_artifact(id) {
            return Ok(());
        }
        self.settle().await?;
        let store = self.store();
        let merged = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, CoreError> {
            // Most jobs have no artifacts: do not read a million outputs to find that out.
            if !store.has_chunk_artifacts(id)? {
                return Ok(None);
            }
            let outputs = store.outputs(id)?;
            if outputs.iter().all(|(_, o)| o.artifact.is_empty()) {
                return Ok(None);
            }
            merge_outputs(job.as_ref(), &outputs)
                .map(Some)
                .map_err(|e| CoreError::Internal(format!("merging artifacts: {e}")))
        })
        .await
        .map_err(|e| CoreError::Internal(format!("merge task: {e}")))??;
        // A job whose chunks produce no artifact needs none, unless another job reads it: that one waits for a
        // stored artifact, so it gets an empty one (the reader binds it like any other).
        let bytes = {
            let core = self.lock();
            match merged {
                Some(bytes) => bytes,
                None if core.is_read_by_others(id) && !core.has_artifact(id) => Vec::new(),
                None => return Ok(()),
            }
        };
        let digest = blake3::hash(&bytes).to_hex().to_string();
        let size = bytes.len();
        let bytes = Arc::new(bytes);
        let (merged, seq) = self.decide(|core| core.artifact_merged(id, digest.clone(), bytes));
        if !merged {
            return Ok(());
        }
        self.commit.durable(seq).await?;
        // Only now, with the artifact durable, may dependent jobs hand out chunks.
        self.lock().input_ready(id);
        self.work_ready.notify_waiters();
        info!(job = id, bytes = size, digest = %digest, "artifact merged and stored");
        Ok(())
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
    ) -> Result<(LeaseAnswer, u32), CoreError> {
        // Registered before the first try, so work that appears in between still wakes this request.
        let ready = self.work_ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        let first = self.lease_once(worker, max_chunks)?;
        if !first.is_empty() {
            let retry = retry_after_ms(&first);
            return Ok((first, retry));
        }
        if tokio::time::timeout(LEASE_HOLD, ready).await.is_err() {
            // Held the whole time: ask again at once, so a worker is almost always waiting here.
            return Ok((first, 0));
        }
        let again = self.lease_once(worker, max_chunks)?;
        let retry = retry_after_ms(&again);
        Ok((again, retry))
    }

    fn lease_once(&self, worker: &str, max_chunks: u32) -> Result<LeaseAnswer, CoreError> {
        let answer = self.lock().lease(worker, max_chunks, now_ms())?;
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
                    let target = coord.lock().report_target(r.job);
                    Checked::new(
                        &coord.cfg.limits,
                        r.lease,
                        r.job,
                        r.chunk,
                        r.output,
                        target.as_ref(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| CoreError::Internal(format!("verifier crashed: {e}")))?;
        let store = self.store();
        let stored_digest = |job: JobId, chunk: u64| -> Result<Option<String>, CoreError> {
            match store.chunk(job, chunk)? {
                Some(ChunkRecord::Done { digest, .. }) => Ok(Some(digest)),
                _ => Ok(None),
            }
        };
        let mut acks = Vec::with_capacity(checked.len());
        let mut seq = 0;
        for c in checked {
            let (nodes, failed_verification) = c.nodes_and_failed();
            let (ack, s) =
                self.decide(|core| core.apply_report(worker, c, &stored_digest, now_ms()));
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
        checkpoint: Option<String>,
    ) -> Result<bool, CoreError> {
        self.decide_durably(|core| core.fail(worker, lease, release, error, checkpoint, now_ms()))
            .await
    }

    /// Plans a submitted job and every input it needs, and creates (or finds) them in one batch.
    pub async fn submit(&self, spec: SubmitSpec) -> Result<(JobView, bool), CoreError> {
        self.cfg
            .limits
            .check_params(&spec.params_json)
            .map_err(CoreError::OverLimit)?;
        let params: serde_json::Value = serde_json::from_str(&spec.params_json)
            .map_err(|e| invalid(format!("params_json is not JSON: {e}")))?;
        let job = self
            .cfg
            .registry
            .job_from_params(&spec.space, &params)
            .map_err(invalid)?;
        if spec.replicate > MAX_REPLICATE {
            return Err(CoreError::Invalid(format!(
                "replicate must be in 1..={MAX_REPLICATE}, got {}",
                spec.replicate
            )));
        }
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
        let requested = (spec.chunks > 0).then_some(spec.chunks);
        let plan = job.plan(requested).map_err(invalid)?;
        check_chunks(plan.n_chunks, "")?;
        // Every job whose artifact this one needs (a table, the layers of a layered search), recursively: each
        // found or submitted before the jobs that read it, with its default plan, all in this one batch.
        let dag = crate::inputs::resolve(job, &|space: &str, params: &serde_json::Value| {
            self.cfg.registry.job_from_params(space, params)
        })
        .map_err(invalid)?;
        let last = dag.len().saturating_sub(1);
        let mut nodes = Vec::with_capacity(dag.len());
        let mut plan = Some(plan);
        for (i, node) in dag.into_iter().enumerate() {
            let plan = match plan.take().filter(|_| i == last) {
                Some(p) => p,
                None => {
                    let label = crate::inputs::label(node.job.as_ref());
                    let p = node
                        .job
                        .plan(None)
                        .map_err(|e| invalid(format!("input job {label}: {e}")))?;
                    check_chunks(p.n_chunks, &format!("input job {label}: "))?;
                    p
                }
            };
            nodes.push(SubmitNode {
                job: node.job,
                plan,
                inputs: node.inputs,
            });
        }
        let opts = JobOptions {
            replicate: spec.replicate.max(1),
            listing: if spec.count_only {
                Listing::CountOnly
            } else {
                Listing::All
            },
        };
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
    pub async fn jobs(&self) -> Result<(Vec<JobView>, u32), CoreError> {
        self.durable_read(|core| {
            let now = now_ms();
            (core.job_views(), core.live_workers(now))
        })
        .await
    }

    pub async fn job(&self, id: JobId) -> Result<JobView, CoreError> {
        self.durable_read(|core| core.job_view(id))
            .await?
            .ok_or(CoreError::UnknownJob(id))
    }

    /// The job now, from memory (may be ahead of the store by one commit).
    pub fn job_now(&self, id: JobId) -> Result<JobView, CoreError> {
        self.lock().job_view(id).ok_or(CoreError::UnknownJob(id))
    }

    /// For a watch stream: one job (`id` != 0) or all of them, and the live workers, from memory.
    pub fn watch_event(&self, id: JobId) -> (Vec<JobView>, u32) {
        let core = self.lock();
        let now = now_ms();
        let jobs = if id == 0 {
            core.job_views()
        } else {
            core.job_view(id).into_iter().collect()
        };
        (jobs, core.live_workers(now))
    }

    /// A slot for one watch stream (bounded), and a receiver that changes whenever a job changes state.
    pub fn open_watch(&self) -> Result<(OwnedSemaphorePermit, watch::Receiver<u64>), CoreError> {
        let slot = self.watch_slots.acquire().map_err(CoreError::OverLimit)?;
        Ok((slot, self.lock().subscribe_changes()))
    }

    /// Resolves when the server begins to shut down.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    pub(crate) fn begin_stopping(&self) {
        self.stopping.send_replace(true);
    }

    pub async fn cancel(&self, id: JobId) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.cancel(id, now_ms())).await
    }

    pub async fn pause(&self, id: JobId) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.pause(id, now_ms())).await
    }

    pub async fn resume(&self, id: JobId) -> Result<JobView, CoreError> {
        self.decide_durably(|core| core.resume(id, now_ms())).await
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

    /// A job's answer over its accepted chunks, and which chunks are poisoned.
    pub async fn results(&self, id: JobId) -> Result<ResultsView, CoreError> {
        self.settle().await?;
        let crate::core::ResultsInput {
            job,
            n_chunks,
            view,
            cached,
            finished,
            ..
        } = self.lock().results_input(id)?;
        let merged = if cached.is_none() {
            self.lock().take_merged(id)
        } else {
            None
        };
        let store = self.store();
        let (result, poisoned) = tokio::task::spawn_blocking(
            move || -> Result<(KeptAnswer, Vec<PoisonedChunk>), CoreError> {
                let poisoned = store
                    .chunks(id)?
                    .into_iter()
                    .filter_map(|(chunk, rec)| match rec {
                        ChunkRecord::Poisoned {
                            attempts,
                            last_error,
                        } => Some(PoisonedChunk {
                            chunk,
                            attempts,
                            last_error,
                        }),
                        _ => None,
                    })
                    .collect();
                if let Some(r) = cached {
                    return Ok((r, poisoned));
                }
                let merge = match merged {
                    // Merged as the results were accepted: no pass over the stored lists at the end of a job.
                    Some(m) => m,
                    None => {
                        // One output at a time: the answer keeps the tally and the smallest solutions, so its
                        // memory does not grow with the number of solutions stored.
                        let mut merge = AnswerMerge::default();
                        store.for_each_output(id, n_chunks, &mut |_, out| {
                            merge.add(&out);
                            Ok::<(), CoreError>(())
                        })?;
                        merge
                    }
                };
                let mut answer = merge.finish();
                answer.artifact = match store.artifact(id)? {
                    Some(merged) => merged,
                    None if store.has_chunk_artifacts(id)? => {
                        merge_outputs(job.as_ref(), &store.outputs(id)?)
                            .map_err(|e| CoreError::Internal(format!("merging artifacts: {e}")))?
                    }
                    None => Vec::new(),
                };
                // The texts are what every caller sends or keeps; a space may write them without a tree.
                let (json, text) = job.result_texts(&answer);
                drop(answer);
                release_freed_memory();
                let result = KeptAnswer {
                    json: Arc::from(json),
                    text: Arc::from(text),
                };
                Ok((result, poisoned))
            },
        )
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

    /// Every solution job `id` stored, in chunk order, as pieces of at most [`SOLUTIONS_PIECE`] solutions (or
    /// about a MB) sent through a small channel as the store is read: the reader's pace bounds the memory,
    /// never the job's size. A job that keeps counts only has no list to stream and says why.
    pub async fn solutions(
        &self,
        id: JobId,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<(u64, Vec<String>), CoreError>>, CoreError> {
        self.settle().await?;
        let crate::core::ResultsInput {
            n_chunks, listing, ..
        } = self.lock().results_input(id)?;
        match listing {
            Listing::All => {}
            Listing::CountOnly => {
                return Err(CoreError::Precondition(format!(
                    "job {id} was submitted --count-only: it has counts, no list of solutions"
                )))
            }
            Listing::Stopped => {
                return Err(CoreError::Precondition(format!(
                    "job {id}'s list of solutions outgrew the coordinator's --max-job-solutions or \
                     --max-job-output-mb and was stopped (its counts are exact): raise the limit and run \
                     the job again, or submit it --count-only"
                )))
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let store = self.store();
        let stopping = self.stopping();
        tokio::task::spawn_blocking(move || {
            let walked = store.for_each_output(id, n_chunks, &mut |chunk, out| {
                let mut piece = Vec::new();
                let mut bytes = 0;
                for s in out.solutions {
                    bytes += s.len();
                    piece.push(s);
                    if piece.len() >= SOLUTIONS_PIECE || bytes >= 1 << 20 {
                        bytes = 0;
                        send_piece(&tx, &stopping, chunk, std::mem::take(&mut piece))?;
                    }
                }
                if !piece.is_empty() {
                    send_piece(&tx, &stopping, chunk, piece)?;
                }
                Ok(())
            });
            // The reader went away or the coordinator is stopping: nobody to tell.
            if let Err(StreamStop(Some(e))) = walked {
                let _ = tx.blocking_send(Err(e));
            }
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
        if !crate::store::is_digest(digest) {
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
        if !crate::store::is_digest(digest) || crate::store::digest_hex(&bytes) != digest {
            return Err(CoreError::Invalid(
                "the file does not match its digest (blake3, lower-case hex)".into(),
            ));
        }
        self.lock().check_writable()?;
        let store = self.store();
        let (d, n) = (digest.to_string(), bytes.len() as u64);
        let existing = tokio::task::spawn_blocking(move || -> Result<bool, StoreError> {
            if store.has_shipped(&d)? {
                return Ok(true);
            }
            store.put_shipped(&d, &bytes)?;
            Ok(false)
        })
        .await
        .map_err(|e| CoreError::Internal(format!("store task: {e}")))??;
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

fn check_chunks(n_chunks: u64, what: &str) -> Result<(), CoreError> {
    if n_chunks > MAX_CHUNKS_PER_JOB {
        return Err(invalid(format!(
            "{what}{n_chunks} chunks is more than a coordinator keeps for one job ({MAX_CHUNKS_PER_JOB})"
        )));
    }
    Ok(())
}

/// The most solutions one piece of the solutions stream carries.
pub const SOLUTIONS_PIECE: usize = 16_384;

/// Why a solutions stream ended early: the store failed (`Some`), or nobody reads it any more (`None`).
struct StreamStop(Option<CoreError>);

impl From<StoreError> for StreamStop {
    fn from(e: StoreError) -> Self {
        StreamStop(Some(e.into()))
    }
}

fn send_piece(
    tx: &tokio::sync::mpsc::Sender<Result<(u64, Vec<String>), CoreError>>,
    stopping: &watch::Receiver<bool>,
    chunk: u64,
    piece: Vec<String>,
) -> Result<(), StreamStop> {
    if *stopping.borrow() {
        return Err(StreamStop(None));
    }
    tx.blocking_send(Ok((chunk, piece)))
        .map_err(|_| StreamStop(None))
}

/// The job's merged artifact from its chunk outputs, in chunk order.
fn merge_outputs(
    job: &dyn Job,
    outputs: &[(u64, ChunkOutput)],
) -> Result<Vec<u8>, sweep_space::SpaceError> {
    if outputs.iter().all(|(_, o)| o.artifact.is_empty()) {
        return Ok(Vec::new());
    }
    let mut it = outputs.iter().map(|(_, o)| o.artifact.as_slice());
    job.merge_artifacts(&mut it)
}

/// Hands the pages of memory just freed back to the system. A large answer (its shown solutions, and the result
/// tree of a space that writes its texts from one: 15 MB for 10,000 stars, before the star space wrote them
/// directly) is freed in this blocking thread's malloc arena, where glibc keeps it: the next
/// large allocations (the answer's texts sent, and in `sweep run` received, by other threads of the same
/// process) take fresh pages from other arenas, and the process's peak grows by the whole tree. Freeing the
/// tree only after the texts were sent raised a listing `sweep run star --points 12` from 46 to 57 MB.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the system; it touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
