//! The gRPC services and the group-commit loop that makes their decisions durable.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sweep_proto::v1::{self, jobs_server, work_server};
use sweep_space::{Answer, ChunkOutput, Job, Tally};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::scheduler::{
    ChunkRecord, Completion, FailOutcome, JobId, JobState, LeaseId, SchedError, Scheduler,
    SchedulerConfig,
};
use crate::store::{JobRecord, Op, Store, StoreError};

/// Upper bounds that keep one bad client from exhausting the coordinator.
const MAX_LEASE_REQUEST: u32 = 4096;
const MAX_CHUNKS_PER_JOB: u64 = 50_000_000;
/// A group commit that takes longer than this is treated as failed (see `commit_once`).
const STORE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a lease request that found nothing to do waits for work to appear before answering empty.
const LEASE_HOLD: Duration = Duration::from_millis(200);
/// More replicas than this buys no extra trust and multiplies the work.
const MAX_REPLICATE: u32 = 16;

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
    #[error(
        "job {job} in the store names space `{space}` which this binary cannot rebuild: {why}"
    )]
    UnknownStoredJob {
        job: JobId,
        space: String,
        why: String,
    },
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("cannot read the listener's address: {0}")]
    Io(#[from] std::io::Error),
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct JobEntry {
    record: JobRecord,
    job: Arc<dyn Job>,
    params_json: String,
    tally: Tally,
    /// The final result JSON, computed once the job is finished.
    result: Option<Arc<String>>,
    /// The merged artifact, kept in memory once loaded: workers of dependent jobs fetch it, maybe many times.
    artifact: Option<Arc<Vec<u8>>>,
    /// The most recent failed attempts, newest last (memory only: a poisoned chunk's last error is stored with
    /// the chunk).
    failures: std::collections::VecDeque<v1::FailedAttempt>,
}

/// Failed attempts a job keeps for `sweep status`: enough to see a pattern, bounded for a job whose every chunk
/// fails.
const MAX_FAILURES_SHOWN: usize = 20;
/// What one failed attempt's message may hold (a program's stderr tail is cut before this).
const MAX_FAILURE_BYTES: usize = 4096;

struct WorkerInfo {
    last_seen_ms: u64,
    threads: u32,
    chunks_done: u64,
    memory_bytes: u64,
    version: String,
    /// The spaces it declared when it registered; `None` until it registers with this coordinator process
    /// (a worker that outlived a coordinator restart is asked to register again).
    spaces: Option<Vec<String>>,
}

struct Core {
    sched: Scheduler,
    jobs: BTreeMap<JobId, JobEntry>,
    workers: HashMap<String, WorkerInfo>,
    /// Nodes reported by heartbeats for leases still running (progress only).
    progress: HashMap<LeaseId, u64>,
    /// Why chunks failed, kept for the poisoned report.
    last_errors: HashMap<(JobId, u64), String>,
    /// Resume states of chunks not done yet, as stored (see `Op::Checkpoint`).
    checkpoints: HashMap<(JobId, u64), String>,
    next_job: JobId,
    persisted_next_lease: LeaseId,
    /// Writes waiting for the next group commit, and that commit's sequence number.
    pending: Vec<Op>,
    seq: u64,
    /// Set when the store failed: memory may be ahead of disk, so nothing more is accepted until a restart.
    failed: Option<String>,
    worker_seq: u64,
    /// Finished jobs whose chunk artifacts still have to be merged into one stored artifact.
    to_merge: Vec<JobId>,
    /// Bumped whenever a job changes state, so watch streams report it at once instead of at their next tick.
    job_changes: watch::Sender<u64>,
}

impl Core {
    /// Moves what the scheduler changed into the pending batch.
    fn stage_dirty(&mut self) {
        loop {
            let ended = self.stage_dirty_once();
            if !self.cancel_readers_of(&ended) {
                break;
            }
        }
    }

    /// A job whose input ended without a complete artifact (cancelled, or done with poisoned chunks) would wait
    /// for it for ever: it is cancelled, with a warning naming the input, and the next round of
    /// [`Core::stage_dirty`] does the same for its own readers. A submit of the same job later creates what
    /// has to run again (neither kind of input is reused). True if any job was cancelled.
    fn cancel_readers_of(&mut self, ended: &[JobId]) -> bool {
        let mut any = false;
        for &input in ended {
            let readers: Vec<JobId> = self
                .jobs
                .values()
                .filter(|e| e.record.input_jobs.contains(&input))
                .map(|e| e.record.id)
                .collect();
            for reader in readers {
                let unfinished = self
                    .sched
                    .job_state(reader)
                    .is_some_and(|s| !s.is_finished());
                if unfinished && self.sched.cancel(reader).is_ok() {
                    let why = self.sched.job_state(input).map_or("gone", JobState::as_str);
                    warn!(
                        job = reader,
                        input,
                        state = why,
                        "job cancelled: its input ended without a complete artifact"
                    );
                    any = true;
                }
            }
        }
        any
    }

    /// One round of [`Core::stage_dirty`]; returns the jobs that just ended without a complete artifact.
    fn stage_dirty_once(&mut self) -> Vec<JobId> {
        let mut ended = Vec::new();
        let dirty = self.sched.take_dirty();
        for (job, chunk) in dirty.chunks {
            if let Some(mut rec) = self.sched.chunk_record(job, chunk) {
                if let ChunkRecord::Poisoned { last_error, .. } = &mut rec {
                    *last_error = self
                        .last_errors
                        .get(&(job, chunk))
                        .cloned()
                        .unwrap_or_else(|| "lease expired".into());
                }
                self.pending.push(Op::Chunk(job, chunk, rec));
            }
        }
        for job in dirty.jobs {
            let Some(state) = self.sched.job_state(job) else {
                continue;
            };
            self.job_changes.send_modify(|n| *n += 1);
            if let Some(e) = self.jobs.get_mut(&job) {
                e.record.state = state;
                if state.is_finished() && e.record.finished_ms == 0 {
                    e.record.finished_ms = now_ms();
                    info!(job, state = state.as_str(), "job finished");
                    if state == JobState::Done {
                        self.to_merge.push(job);
                    } else {
                        ended.push(job);
                    }
                }
                self.pending.push(Op::Job(e.record.clone()));
            }
        }
        let next_lease = self.sched.next_lease_id();
        if next_lease != self.persisted_next_lease {
            self.persisted_next_lease = next_lease;
            self.pending.push(Op::Meta("next_lease", next_lease));
        }
        ended
    }

    fn check_writable(&self) -> Result<(), Status> {
        match &self.failed {
            Some(e) => Err(Status::unavailable(format!(
                "the coordinator's store failed ({e}); it accepts no changes until it is restarted"
            ))),
            None => Ok(()),
        }
    }

    fn touch_worker(&mut self, worker: &str) {
        let now = now_ms();
        self.workers
            .entry(worker.to_string())
            .and_modify(|w| w.last_seen_ms = now)
            .or_insert(WorkerInfo {
                last_seen_ms: now,
                threads: 0,
                chunks_done: 0,
                memory_bytes: 0,
                version: String::new(),
                spaces: None,
            });
    }

    /// Keeps a running chunk's newest resume state (and stages it for the store), if its lease is current.
    fn save_checkpoint(&mut self, lease: LeaseId, state: String) {
        let Some((job, chunk)) = self.sched.lease_job_chunk(lease) else {
            return;
        };
        if state.len() > sweep_space::MAX_RESUME_STATE_BYTES {
            warn!(
                job,
                chunk,
                bytes = state.len(),
                "resume state too large; ignored"
            );
            return;
        }
        if self.checkpoints.get(&(job, chunk)) == Some(&state) {
            return;
        }
        self.checkpoints.insert((job, chunk), state.clone());
        self.pending.push(Op::Checkpoint(job, chunk, Some(state)));
    }

    /// Remembers a failed attempt for `sweep status` and the dashboard.
    fn record_failure(&mut self, job: JobId, chunk: u64, worker: &str, error: &str) {
        let Some(e) = self.jobs.get_mut(&job) else {
            return;
        };
        let mut error = error.to_string();
        if error.len() > MAX_FAILURE_BYTES {
            let mut cut = MAX_FAILURE_BYTES;
            while !error.is_char_boundary(cut) {
                cut -= 1;
            }
            error.truncate(cut);
        }
        if e.failures.len() >= MAX_FAILURES_SHOWN {
            e.failures.pop_front();
        }
        e.failures.push_back(v1::FailedAttempt {
            chunk,
            worker: worker.to_string(),
            error,
            unix_ms: now_ms(),
        });
    }

    fn live_workers(&self) -> u32 {
        let horizon = now_ms().saturating_sub(self.sched.config().lease_ttl_ms);
        self.workers
            .values()
            .filter(|w| w.last_seen_ms >= horizon)
            .count() as u32
    }

    fn job_info(&self, id: JobId) -> Option<v1::JobInfo> {
        let e = self.jobs.get(&id)?;
        let counts = self.sched.counts(id)?;
        let running_nodes: u64 = self
            .progress
            .iter()
            .filter(|(lease, _)| self.sched.lease_job_chunk(**lease).map(|(j, _)| j) == Some(id))
            .map(|(_, n)| *n)
            .sum();
        let workers: std::collections::HashSet<String> = self
            .sched
            .leases_of(id)
            .into_iter()
            .map(|(_, _, w)| w)
            .collect();
        Some(v1::JobInfo {
            id,
            space: e.record.space.clone(),
            params_json: e.params_json.clone(),
            state: e.record.state.as_str().to_string(),
            priority: e.record.priority,
            chunks_total: counts.total,
            chunks_done: counts.done,
            chunks_leased: counts.leased,
            chunks_poisoned: counts.poisoned,
            reissued: counts.reissued,
            nodes: e.tally.nodes.to_string(),
            running_nodes,
            total_nodes: e
                .record
                .total_nodes
                .map(|n| n.to_string())
                .unwrap_or_default(),
            created_unix_ms: e.record.created_ms,
            finished_unix_ms: e.record.finished_ms,
            workers: workers.len() as u32,
            completions: e.tally.chunks,
            duplicates: e.record.duplicates,
            input_job: e.record.input_jobs.first().copied().unwrap_or(0),
            input_jobs: e.record.input_jobs.clone(),
            inputs_waiting: self.sched.waiting_for(id).len() as u32,
            artifact_digest: e.record.artifact_digest.clone().unwrap_or_default(),
            replicate: e.record.replicate,
            disagreements: counts.disagreements,
            unverified: !e.job.verifiable() && e.record.replicate < 2,
            failures: e.failures.iter().cloned().collect(),
            checkpoints: self.checkpoints.keys().filter(|(j, _)| *j == id).count() as u64,
        })
    }

    fn worker_status(&self, name: &str) -> Option<v1::WorkerStatus> {
        let w = self.workers.get(name)?;
        Some(v1::WorkerStatus {
            name: name.to_string(),
            threads: w.threads,
            memory_bytes: w.memory_bytes,
            last_seen_unix_ms: w.last_seen_ms,
            chunks_done: w.chunks_done,
            leases_held: self.sched.leases_held(name) as u32,
            bad_results: self.sched.bad_results(name),
            banned: self.sched.is_banned(name),
            draining: self.sched.is_draining(name),
            version: w.version.clone(),
        })
    }

    /// The unfinished (or done) job with the same space, parameters and chunking if `reuse` and there is one,
    /// else a new job reading `inputs`, staged for the next commit. Returns its id and whether it existed.
    ///
    /// An unfinished job is reused only if it reads the same input jobs: one waiting for an input that was
    /// cancelled since would never run. A job that ended with poisoned chunks is never reused as an `input`
    /// (it has no complete artifact, so its readers would wait for ever); it runs again as a new job.
    fn find_or_create(
        &mut self,
        job: Arc<dyn Job>,
        plan: &sweep_space::Plan,
        priority: i32,
        reuse: Reuse,
        inputs: Vec<JobId>,
        replicate: u32,
    ) -> (JobId, bool) {
        // Canonical parameters: equal jobs compare equal however the user spelled them.
        let params = job.params();
        let space = job.space();
        if reuse != Reuse::Never {
            let found = self.jobs.values().find(|e| {
                e.record.space == space
                    && e.record.params == params
                    && e.record.n_chunks == plan.n_chunks
                    && e.record.replicate == replicate
                    && e.record.state != JobState::Cancelled
                    && !(reuse == Reuse::AsInput
                        && e.record.state == JobState::DoneWithPoisonedChunks)
                    && (e.record.state.is_finished() || e.record.input_jobs == inputs)
            });
            if let Some(e) = found {
                return (e.record.id, true);
            }
        }
        let id = self.next_job;
        self.next_job += 1;
        let record = JobRecord {
            id,
            space: space.to_string(),
            params: params.clone(),
            n_chunks: plan.n_chunks,
            total_nodes: plan.total_nodes,
            priority,
            state: JobState::Running,
            created_ms: now_ms(),
            finished_ms: 0,
            duplicates: 0,
            digest_mismatches: 0,
            input_jobs: inputs.clone(),
            artifact_digest: None,
            replicate,
        };
        self.sched
            .add_job(id, priority, plan.n_chunks, JobState::Running);
        self.sched.set_replication(id, replicate);
        let merge = hold_for_inputs(&mut self.sched, &self.jobs, id, &inputs);
        for input in merge {
            if !self.to_merge.contains(&input) {
                self.to_merge.push(input);
            }
        }
        self.pending.push(Op::Job(record.clone()));
        self.pending.push(Op::Meta("next_job", id + 1));
        let params_json = params.to_string();
        self.jobs.insert(
            id,
            JobEntry {
                record,
                job,
                params_json,
                tally: Tally::default(),
                result: None,
                artifact: None,
                failures: Default::default(),
            },
        );
        info!(
            job = id,
            space,
            chunks = plan.n_chunks,
            ?inputs,
            "job submitted"
        );
        (id, false)
    }

    /// The digest stored for a done chunk: from the batch not yet written, else from the store.
    fn pending_digest(&self, job: JobId, chunk: u64) -> Option<String> {
        self.pending.iter().rev().find_map(|op| match op {
            Op::Chunk(j, c, ChunkRecord::Done { digest, .. }) if *j == job && *c == chunk => {
                Some(digest.clone())
            }
            _ => None,
        })
    }
}

/// A report after decoding and verification, ready to be applied under the lock.
enum Checked {
    Rejected(LeaseId, String),
    /// Over a configured limit: refused like a failed verification (the attempt counts, the chunk goes back).
    OverLimit {
        lease: LeaseId,
        job: JobId,
        chunk: u64,
        message: String,
    },
    Ready {
        lease: LeaseId,
        job: JobId,
        chunk: u64,
        digest: String,
        output: ChunkOutput,
        verified: Result<(), sweep_space::SpaceError>,
    },
}

struct Commit {
    seq: u64,
    error: Option<String>,
}

/// The coordinator's shared state: the scheduler and job table under one mutex (held only for short,
/// synchronous sections), the store, and the group-commit handshake.
pub struct Coordinator {
    core: Mutex<Core>,
    store: Arc<Store>,
    kick: Notify,
    /// Wakes the artifact merger when a job finishes.
    merge_kick: Notify,
    /// Wakes lease requests that found nothing to do (see [`LEASE_HOLD`]) when work may have appeared: a job
    /// submitted, an input merged.
    work_ready: Notify,
    committed: watch::Sender<Commit>,
    /// Set when the server begins to shut down: long-lived streams (`Watch`) end, so graceful shutdown does not
    /// wait forever for a client that never hangs up.
    stopping: watch::Sender<bool>,
    guards: crate::limits::Guards,
    /// Event counters for `/metrics` and the dashboard ([`crate::metrics`]).
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    cfg: CoordinatorConfig,
}

/// When [`Core::find_or_create`] may answer with an existing job instead of creating one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reuse {
    /// A submit without `reuse_existing`: always a new job.
    Never,
    /// A submit with `reuse_existing`: an equal job in any state but cancelled (one that ended with poisoned
    /// chunks answers with what it has, and says what is missing).
    Any,
    /// An input of another job: only one that has, or will have, a complete artifact.
    AsInput,
}

/// Holds job `id` back in the scheduler until each of its `inputs` has its merged artifact stored. Returns the
/// inputs that are done but have no stored artifact: jobs whose chunks produce none, which only get an (empty)
/// artifact once some job reads them, so the merger must look at them again.
fn hold_for_inputs(
    sched: &mut Scheduler,
    jobs: &BTreeMap<JobId, JobEntry>,
    id: JobId,
    inputs: &[JobId],
) -> Vec<JobId> {
    let mut merge = Vec::new();
    for &input in inputs {
        let entry = jobs.get(&input);
        if entry.is_some_and(|i| i.record.artifact_digest.is_some()) {
            continue;
        }
        sched.wait_for_input(id, input);
        if entry.is_some_and(|i| i.record.state == JobState::Done) {
            merge.push(input);
        }
    }
    merge
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sched_status(e: SchedError) -> Status {
    match e {
        SchedError::UnknownJob(_) => Status::not_found(e.to_string()),
        SchedError::BadTransition { .. } => Status::failed_precondition(e.to_string()),
    }
}

/// A refused request whose message may quote the input (a space name, a parameter value). Clipped: gRPC sends the
/// message in a header, and one past the peer's header limit arrives as an opaque HTTP/2 protocol error instead.
fn invalid_input(e: impl std::fmt::Display) -> Status {
    const MAX: usize = 2000;
    let msg = e.to_string();
    if msg.len() <= MAX {
        return Status::invalid_argument(msg);
    }
    let cut: String = msg.chars().take(MAX).collect();
    Status::invalid_argument(format!("{cut}... ({} bytes in all)", msg.len()))
}

fn store_status(e: StoreError) -> Status {
    Status::unavailable(format!("store: {e}"))
}

impl Coordinator {
    /// The spaces this coordinator knows.
    pub fn registry(&self) -> &sweep_space::Registry {
        &self.cfg.registry
    }

    /// Loads every job from the store and rebuilds the scheduler.
    pub fn open(store: Store, cfg: CoordinatorConfig) -> Result<Arc<Coordinator>, ServeError> {
        let snap = store.load().map_err(|e| match e {
            StoreError::Damaged { .. } => ServeError::Damaged(e.to_string()),
            e => ServeError::Store(e),
        })?;
        // A tally is written in the same batch as the outputs it sums, so it must count exactly the done chunks;
        // if it does not, the store was damaged and the answer would be wrong: refuse, never guess.
        let mut done: HashMap<JobId, u64> = HashMap::new();
        for (job, _) in &snap.done {
            *done.entry(*job).or_default() += 1;
        }
        for rec in &snap.jobs {
            let tallied = snap.tallies.get(&rec.id).map_or(0, |t| t.chunks);
            let counted = done.get(&rec.id).copied().unwrap_or(0);
            if tallied != counted {
                return Err(ServeError::Damaged(format!(
                    "job {} has {counted} done chunks but its tally counts {tallied}",
                    rec.id
                )));
            }
        }
        let mut sched = Scheduler::new(cfg.scheduler, snap.next_lease);
        let mut jobs = BTreeMap::new();
        for rec in snap.jobs {
            let job = cfg
                .registry
                .job_from_params(&rec.space, &rec.params)
                .map_err(|e| ServeError::UnknownStoredJob {
                    job: rec.id,
                    space: rec.space.clone(),
                    why: e.to_string(),
                })?;
            sched.add_job(rec.id, rec.priority, rec.n_chunks, rec.state);
            sched.set_replication(rec.id, rec.replicate);
            let tally = snap.tallies.get(&rec.id).cloned().unwrap_or_default();
            let params_json = rec.params.to_string();
            jobs.insert(
                rec.id,
                JobEntry {
                    record: rec,
                    job,
                    params_json,
                    tally,
                    result: None,
                    artifact: None,
                    failures: Default::default(),
                },
            );
        }
        let mut to_merge = Vec::new();
        for e in jobs.values() {
            // An input done before the crash whose artifact is not stored yet is merged below (every done job
            // without a digest is), so what `hold_for_inputs` returns is already covered.
            hold_for_inputs(&mut sched, &jobs, e.record.id, &e.record.input_jobs);
            // Killed between a job's end and the merge of its artifact: merge it now (a no-op for jobs
            // without artifacts).
            if e.record.state == JobState::Done && e.record.artifact_digest.is_none() {
                to_merge.push(e.record.id);
            }
        }
        let mut restored = 0u64;
        for (job, chunk, rec) in &snap.chunks {
            sched.restore_chunk(*job, *chunk, rec);
            restored += 1;
        }
        // The scheduler keeps no digest: a duplicate result's is read from the store when one arrives.
        let done = ChunkRecord::Done {
            digest: String::new(),
            worker: String::new(),
        };
        for (job, chunk) in &snap.done {
            sched.restore_chunk(*job, *chunk, &done);
            restored += 1;
        }
        sched.finish_restore();
        info!(jobs = jobs.len(), chunk_records = restored, "store loaded");
        let next_lease = sched.next_lease_id();
        let mut core = Core {
            sched,
            jobs,
            workers: HashMap::new(),
            progress: HashMap::new(),
            last_errors: HashMap::new(),
            checkpoints: snap
                .checkpoints
                .into_iter()
                .map(|(job, chunk, state)| ((job, chunk), state))
                .collect(),
            next_job: snap.next_job.max(1),
            persisted_next_lease: next_lease,
            pending: Vec::new(),
            seq: 1,
            failed: None,
            worker_seq: 0,
            to_merge,
            job_changes: watch::channel(0).0,
        };
        // Stores from before readers were cancelled with their inputs may hold a job waiting for an input that
        // ended without an artifact: settled now, written with the first commit.
        let ended: Vec<JobId> = core
            .jobs
            .values()
            .filter(|e| {
                matches!(
                    e.record.state,
                    JobState::Cancelled | JobState::DoneWithPoisonedChunks
                )
            })
            .map(|e| e.record.id)
            .collect();
        if core.cancel_readers_of(&ended) {
            core.stage_dirty();
        }
        let (committed, _) = watch::channel(Commit {
            seq: 0,
            error: None,
        });
        Ok(Arc::new(Coordinator {
            core: Mutex::new(core),
            store: Arc::new(store),
            kick: Notify::new(),
            merge_kick: Notify::new(),
            work_ready: Notify::new(),
            committed,
            stopping: watch::channel(false).0,
            guards: crate::limits::Guards::new(cfg.limits.clone()),
            metrics: Arc::default(),
            cfg,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock would be a bug; the state is still the best we have.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until everything staged so far is durable. Readers of the store (results, the artifact merger)
    /// call this first: a job is `done` in memory as soon as its last result is staged, before that result is
    /// written, and reading the store in between would miss it.
    async fn settle(&self) -> Result<(), Status> {
        let seq = self.lock().seq;
        self.durable(seq).await
    }

    /// `read` of the coordinator's memory, returned once everything it saw is durable. Read first, wait
    /// second: memory read *after* the wait could include results staged meanwhile that a crash would lose,
    /// and a status must not report what a restart takes back.
    async fn durable_read<T>(&self, read: impl FnOnce(&Core) -> T) -> Result<T, Status> {
        let (value, seq) = {
            let core = self.lock();
            (read(&core), core.seq)
        };
        self.durable(seq).await?;
        Ok(value)
    }

    /// Waits until the batch with sequence `seq` is durable.
    async fn durable(&self, seq: u64) -> Result<(), Status> {
        let mut rx = self.committed.subscribe();
        self.kick.notify_one();
        let state = rx
            .wait_for(|c| c.seq >= seq || c.error.is_some())
            .await
            .map_err(|_| Status::unavailable("the coordinator is shutting down"))?;
        match &state.error {
            Some(e) => Err(Status::unavailable(format!(
                "the coordinator's store failed: {e}"
            ))),
            None => Ok(()),
        }
    }

    /// One group commit: everything queued since the last one, as one atomic, flushed batch.
    async fn commit_once(&self) {
        let (ops, seq) = {
            let mut core = self.lock();
            let seq = core.seq;
            core.seq += 1;
            (std::mem::take(&mut core.pending), seq)
        };
        // Once a write has failed, memory is ahead of the store: nothing more is written, and every waiter
        // hears of the failure (an empty round must not report success and let `status` show unstored progress).
        let failed = self.lock().failed.clone();
        let already_failed = failed.is_some();
        let error = if let Some(e) = failed {
            Some(e)
        } else if ops.is_empty() {
            None
        } else {
            let store = self.store.clone();
            let write = tokio::task::spawn_blocking(move || {
                store.write_parts(crate::store::split_commit(ops))
            });
            // sled can hang in flush after the disk filled up: a write that takes this long counts as failed.
            match tokio::time::timeout(STORE_WRITE_TIMEOUT, write).await {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(e))) => Some(e.to_string()),
                Ok(Err(e)) => Some(format!("store writer crashed: {e}")),
                Err(_) => Some(format!(
                    "a store write did not finish within {} s",
                    STORE_WRITE_TIMEOUT.as_secs()
                )),
            }
        };
        if let (Some(e), false) = (&error, already_failed) {
            warn!(error = %e, "store write failed; refusing changes until restart");
            self.lock().failed = Some(e.clone());
        }
        self.committed.send_replace(Commit { seq, error });
        if !self.lock().to_merge.is_empty() {
            self.merge_kick.notify_one();
        }
    }

    async fn committer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.kick.notified() => self.commit_once().await,
                _ = stop.changed() => break,
            }
        }
        // Whatever was decided before the stop is still written.
        self.commit_once().await;
    }

    async fn expirer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.cfg.expiry_interval);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            let mut core = self.lock();
            let now = now_ms();
            let ttl = core.sched.config().lease_ttl_ms;
            let workers = core
                .workers
                .iter()
                .map(|(n, w)| (n.as_str(), w.last_seen_ms));
            self.metrics.note_liveness(now, ttl, workers);
            let expired = core.sched.expire(now);
            if expired.is_empty() {
                continue;
            }
            self.metrics.expired(&expired);
            for e in &expired {
                core.progress.remove(&e.lease);
                if e.poisoned {
                    warn!(
                        job = e.job,
                        chunk = e.chunk,
                        "chunk poisoned after its last lease expired"
                    );
                }
            }
            info!(
                count = expired.len(),
                "leases expired; chunks go back to pending"
            );
            core.stage_dirty();
            drop(core);
            self.kick.notify_one();
        }
    }

    /// Merges the chunk artifacts of finished jobs into one stored artifact (replacing the chunk artifacts in
    /// the same batch), records its digest, and lets the jobs waiting for it run.
    async fn merger(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let todo = std::mem::take(&mut self.lock().to_merge);
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

    async fn merge_one(&self, id: JobId) -> Result<(), String> {
        let Some((job, _)) = self.job_and_chunks(id) else {
            return Ok(());
        };
        // Queued twice (a reader submitted while it was being merged): the chunk artifacts are gone by now, and
        // merging "nothing" again must not replace the stored artifact with an empty one.
        if self.has_artifact(id) {
            return Ok(());
        }
        self.settle().await.map_err(|e| e.message().to_string())?;
        let store = self.store.clone();
        let merged = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, String> {
            // Most jobs have no artifacts: do not read a million outputs to find that out.
            if !store.has_chunk_artifacts(id).map_err(|e| e.to_string())? {
                return Ok(None);
            }
            let outputs = store.outputs(id).map_err(|e| e.to_string())?;
            if outputs.iter().all(|(_, o)| o.artifact.is_empty()) {
                return Ok(None);
            }
            merge_outputs(job.as_ref(), &outputs)
                .map(Some)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("merge task: {e}"))??;
        // A job whose chunks produce no artifact needs none, unless another job reads it: that one waits for a
        // stored artifact, so it gets an empty one (the reader binds it like any other).
        let bytes = match merged {
            Some(bytes) => bytes,
            None if self.is_read_by_others(id) && !self.has_artifact(id) => Vec::new(),
            None => return Ok(()),
        };
        let digest = blake3::hash(&bytes).to_hex().to_string();
        let size = bytes.len();
        let bytes = Arc::new(bytes);
        let seq = {
            let mut core = self.lock();
            let Some(e) = core.jobs.get_mut(&id) else {
                return Ok(());
            };
            e.record.artifact_digest = Some(digest.clone());
            e.artifact = Some(bytes.clone());
            let rec = e.record.clone();
            core.pending.push(Op::Artifact(id, bytes.clone()));
            core.pending.push(Op::Job(rec));
            core.seq
        };
        self.durable(seq)
            .await
            .map_err(|e| e.message().to_string())?;
        // Only now, with the artifact durable, may dependent jobs hand out chunks.
        {
            let mut core = self.lock();
            core.sched.input_ready(id);
        }
        self.work_ready.notify_waiters();
        info!(job = id, bytes = size, digest = %digest, "artifact merged and stored");
        Ok(())
    }

    /// One lease attempt: the chunks `req` may have now (none when there is nothing to do).
    fn lease_once(&self, req: &v1::LeaseRequest) -> Result<v1::LeaseResponse, Status> {
        if req.worker_id.is_empty() {
            return Err(Status::invalid_argument(
                "worker_id is empty: register first",
            ));
        }
        if req.max_chunks == 0 || req.max_chunks > MAX_LEASE_REQUEST {
            return Err(Status::invalid_argument(format!(
                "max_chunks must be in 1..={MAX_LEASE_REQUEST}, got {}",
                req.max_chunks
            )));
        }
        let leases = {
            let mut core = self.lock();
            core.check_writable()?;
            core.touch_worker(&req.worker_id);
            if core.sched.is_banned(&req.worker_id) {
                return Err(Status::permission_denied(format!(
                    "worker {} is refused work: {} of its results failed verification or lost a replication vote",
                    req.worker_id,
                    core.sched.bad_results(&req.worker_id)
                )));
            }
            if core.sched.is_draining(&req.worker_id) {
                return Ok(v1::LeaseResponse {
                    leases: Vec::new(),
                    retry_after_ms: 1000,
                    drain: true,
                    register_again: false,
                });
            }
            let Some(spaces) = core
                .workers
                .get(&req.worker_id)
                .and_then(|w| w.spaces.clone())
            else {
                return Ok(v1::LeaseResponse {
                    register_again: true,
                    ..Default::default()
                });
            };
            let core = &mut *core;
            let jobs = &core.jobs;
            let runnable = |id: JobId| {
                jobs.get(&id)
                    .is_some_and(|e| spaces.contains(&e.record.space))
            };
            let grants = core.sched.lease_where(
                now_ms(),
                &req.worker_id,
                req.max_chunks as usize,
                &runnable,
            );
            let leases: Vec<v1::ChunkLease> = grants
                .iter()
                .filter_map(|g| {
                    let e = core.jobs.get(&g.job)?;
                    // Leased only once every input's artifact is stored, so each has its digest.
                    let inputs: Vec<v1::InputArtifact> = e
                        .record
                        .input_jobs
                        .iter()
                        .map(|&i| v1::InputArtifact {
                            job_id: i,
                            digest: core
                                .jobs
                                .get(&i)
                                .and_then(|i| i.record.artifact_digest.clone())
                                .unwrap_or_default(),
                        })
                        .collect();
                    // Workers older than `inputs` understand a single input.
                    let (input_job, input_digest) = match inputs.as_slice() {
                        [one] => (one.job_id, one.digest.clone()),
                        _ => (0, String::new()),
                    };
                    Some(v1::ChunkLease {
                        input_job,
                        input_digest,
                        inputs,
                        lease_id: g.lease,
                        job_id: g.job,
                        space: e.record.space.clone(),
                        params_json: e.params_json.clone(),
                        n_chunks: e.record.n_chunks,
                        chunk: g.chunk,
                        deadline_unix_ms: g.deadline,
                        checkpoint: core
                            .checkpoints
                            .get(&(g.job, g.chunk))
                            .cloned()
                            .unwrap_or_default(),
                        shipped: e.job.shipped(),
                    })
                })
                .collect();
            core.stage_dirty();
            leases
        };
        // Lease records are written with the next group commit but not waited for: a lease the store never saw
        // is only a chunk that restarts as pending and may run twice, and a second result is never counted
        // (completion is keyed by chunk, not by lease). Waiting would put an fsync on every lease round trip.
        if !leases.is_empty() {
            self.kick.notify_one();
        }
        let retry_after_ms = if leases.is_empty() { 200 } else { 0 };
        Ok(v1::LeaseResponse {
            leases,
            retry_after_ms,
            drain: false,
            register_again: false,
        })
    }

    /// A finished job's merged artifact: from memory, else from the store (then kept in memory).
    /// A shipped file by its digest.
    async fn shipped(&self, digest: &str) -> Result<(Arc<Vec<u8>>, String), Status> {
        if !crate::store::is_digest(digest) {
            return Err(Status::invalid_argument(format!(
                "`{}` is not a blake3 digest in hex",
                digest.chars().take(80).collect::<String>()
            )));
        }
        let store = self.store.clone();
        let name = digest.to_string();
        let bytes = tokio::task::spawn_blocking(move || store.shipped(&name))
            .await
            .map_err(|e| Status::internal(format!("store task: {e}")))?
            .map_err(store_status)?
            .ok_or_else(|| Status::not_found(format!("no shipped file {digest}")))?;
        Ok((Arc::new(bytes), digest.to_string()))
    }

    async fn artifact(&self, id: JobId) -> Result<(Arc<Vec<u8>>, String), Status> {
        let digest = {
            let core = self.lock();
            let e = core
                .jobs
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("no job {id}")))?;
            let Some(digest) = e.record.artifact_digest.clone() else {
                return Err(Status::failed_precondition(format!(
                    "job {id} has no stored artifact (not done yet, or it produces none)"
                )));
            };
            if let Some(a) = &e.artifact {
                return Ok((a.clone(), digest));
            }
            digest
        };
        let store = self.store.clone();
        let bytes = tokio::task::spawn_blocking(move || store.artifact(id))
            .await
            .map_err(|e| Status::internal(format!("store task: {e}")))?
            .map_err(store_status)?
            .ok_or_else(|| {
                Status::data_loss(format!("job {id}'s artifact is missing from the store"))
            })?;
        let bytes = Arc::new(bytes);
        if let Some(e) = self.lock().jobs.get_mut(&id) {
            e.artifact = Some(bytes.clone());
        }
        Ok((bytes, digest))
    }

    fn has_artifact(&self, job: JobId) -> bool {
        self.lock()
            .jobs
            .get(&job)
            .is_some_and(|e| e.record.artifact_digest.is_some())
    }

    /// Whether some job names `job` among its inputs.
    fn is_read_by_others(&self, job: JobId) -> bool {
        self.lock()
            .jobs
            .values()
            .any(|e| e.record.input_jobs.contains(&job))
    }

    fn job_and_chunks(&self, job: JobId) -> Option<(Arc<dyn Job>, u64)> {
        self.lock()
            .jobs
            .get(&job)
            .map(|e| (e.job.clone(), e.record.n_chunks))
    }

    pub(crate) async fn results(&self, job_id: JobId) -> Result<v1::ResultsResponse, Status> {
        self.settle().await?;
        let (job, info, cached, finished) = {
            let core = self.lock();
            let e = core
                .jobs
                .get(&job_id)
                .ok_or_else(|| Status::not_found(format!("no job {job_id}")))?;
            let info = core.job_info(job_id);
            (
                e.job.clone(),
                info,
                e.result.clone(),
                e.record.state.is_finished(),
            )
        };
        let store = self.store.clone();
        let (result, poisoned) = tokio::task::spawn_blocking(
            move || -> Result<(Arc<String>, Vec<v1::PoisonedChunk>), Status> {
                let poisoned = store
                    .chunks(job_id)
                    .map_err(store_status)?
                    .into_iter()
                    .filter_map(|(chunk, rec)| match rec {
                        ChunkRecord::Poisoned {
                            attempts,
                            last_error,
                        } => Some(v1::PoisonedChunk {
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
                let outputs = store.outputs(job_id).map_err(store_status)?;
                let mut answer = Answer::from_outputs(outputs.iter().map(|(_, o)| o));
                answer.artifact = match store.artifact(job_id).map_err(store_status)? {
                    Some(merged) => merged,
                    None => merge_outputs(job.as_ref(), &outputs)
                        .map_err(|e| Status::internal(format!("merging artifacts: {e}")))?,
                };
                Ok((Arc::new(job.result(&answer).to_string()), poisoned))
            },
        )
        .await
        .map_err(|e| Status::internal(format!("results task: {e}")))??;
        if finished {
            if let Some(e) = self.lock().jobs.get_mut(&job_id) {
                e.result = Some(result.clone());
            }
        }
        Ok(v1::ResultsResponse {
            job: info,
            result_json: result.as_str().to_string(),
            poisoned,
        })
    }
}

#[derive(Clone)]
struct WorkApi(Arc<Coordinator>);

#[derive(Clone)]
struct JobsApi(Arc<Coordinator>);

/// Artifacts travel in pieces well under the message limit.
const ARTIFACT_PIECE_BYTES: usize = 1 << 20;

#[tonic::async_trait]
impl work_server::Work for WorkApi {
    type FetchArtifactStream = ReceiverStream<Result<v1::ArtifactPiece, Status>>;

    async fn fetch_artifact(
        &self,
        req: Request<v1::FetchArtifactRequest>,
    ) -> Result<Response<Self::FetchArtifactStream>, Status> {
        let req = req.into_inner();
        let (bytes, digest) = if req.job_id == 0 {
            self.0.shipped(&req.digest).await?
        } else {
            self.0.artifact(req.job_id).await?
        };
        info!(worker = %req.worker_id, job = req.job_id, bytes = bytes.len(), "serving artifact");
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stopping = self.0.stopping.subscribe();
        tokio::spawn(async move {
            let total = bytes.len() as u64;
            let mut offset = 0usize;
            // An empty artifact still gets one piece, so the reader learns the total and digest.
            loop {
                let end = (offset + ARTIFACT_PIECE_BYTES).min(bytes.len());
                let piece = v1::ArtifactPiece {
                    offset: offset as u64,
                    total,
                    digest: digest.clone(),
                    data: bytes[offset..end].to_vec(),
                };
                tokio::select! {
                    sent = tx.send(Ok(piece)) => if sent.is_err() { return },
                    _ = stopping.wait_for(|s| *s) => return,
                }
                offset = end;
                if offset >= bytes.len() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn register(
        &self,
        req: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        let req = req.into_inner();
        let ttl = self.0.cfg.scheduler.lease_ttl_ms;
        let mut core = self.0.lock();
        let worker_id = if req.name.trim().is_empty() {
            core.worker_seq += 1;
            format!("worker-{}", core.worker_seq)
        } else {
            req.name.trim().to_string()
        };
        core.touch_worker(&worker_id);
        if let Some(w) = core.workers.get_mut(&worker_id) {
            w.threads = req.threads;
            w.memory_bytes = req.memory_bytes;
            w.version = req.version.chars().take(64).collect();
            w.spaces = Some(
                req.spaces
                    .iter()
                    .take(1024)
                    .map(|s| s.chars().take(64).collect())
                    .collect(),
            );
        }
        info!(worker = %worker_id, threads = req.threads, version = %req.version, "worker registered");
        Ok(Response::new(v1::RegisterResponse {
            worker_id,
            heartbeat_interval_ms: (ttl / 4).max(50),
            lease_ttl_ms: ttl,
        }))
    }

    async fn lease(
        &self,
        req: Request<v1::LeaseRequest>,
    ) -> Result<Response<v1::LeaseResponse>, Status> {
        let req = req.into_inner();
        // Registered before the first try, so work that appears in between still wakes this request.
        let ready = self.0.work_ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        let first = self.0.lease_once(&req)?;
        if !first.leases.is_empty() || first.drain {
            return Ok(Response::new(first));
        }
        // Nothing to do now: hold the request a moment instead of letting the worker poll. A layered DAG (peg
        // count: 18 jobs) otherwise waits up to a poll interval at every step.
        if tokio::time::timeout(LEASE_HOLD, ready).await.is_err() {
            // Held the whole time: ask again at once, so a worker is almost always waiting here.
            return Ok(Response::new(v1::LeaseResponse {
                retry_after_ms: 0,
                ..first
            }));
        }
        Ok(Response::new(self.0.lease_once(&req)?))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let req = req.into_inner();
        let revoked = {
            let mut core = self.0.lock();
            core.check_writable()?;
            core.touch_worker(&req.worker_id);
            let ids: Vec<LeaseId> = req.progress.iter().map(|p| p.lease_id).collect();
            let revoked = core.sched.heartbeat(now_ms(), &req.worker_id, &ids);
            for p in req.progress {
                if !revoked.contains(&p.lease_id) {
                    core.progress.insert(p.lease_id, p.nodes);
                    if let Some(state) = p.checkpoint {
                        core.save_checkpoint(p.lease_id, state);
                    }
                }
            }
            core.stage_dirty();
            revoked
        };
        // Extended deadlines are persisted lazily, for the same reason as leases: a stale deadline after a restart
        // can only re-issue a chunk early, never count it twice.
        self.0.kick.notify_one();
        Ok(Response::new(v1::HeartbeatResponse { revoked }))
    }

    async fn complete(
        &self,
        req: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::CompleteResponse>, Status> {
        let req = req.into_inner();
        let worker = req.worker_id;
        let coord = self.0.clone();
        let reports = req.reports;
        let checked = tokio::task::spawn_blocking(move || {
            reports
                .into_iter()
                .map(|r| coord.check_report(r))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Status::internal(format!("verifier crashed: {e}")))?;
        let mut acks = Vec::with_capacity(checked.len());
        let mut seq = 0;
        for c in checked {
            let (nodes, failed_verification) = match &c {
                Checked::Ready {
                    output, verified, ..
                } => (output.nodes, verified.is_err()),
                _ => (0, false),
            };
            let (status, message, s) = self.0.apply_report(&worker, c)?;
            self.0
                .metrics
                .report(&worker, status.1, nodes, failed_verification);
            seq = seq.max(s);
            acks.push((status, message));
        }
        if seq > 0 {
            self.0.durable(seq).await?;
        }
        let acks = acks
            .into_iter()
            .map(|((lease_id, status), message)| v1::ReportAck {
                lease_id,
                status: status as i32,
                message,
            })
            .collect();
        Ok(Response::new(v1::CompleteResponse { acks }))
    }

    async fn fail(
        &self,
        req: Request<v1::FailRequest>,
    ) -> Result<Response<v1::FailResponse>, Status> {
        let req = req.into_inner();
        let (poisoned, seq) = {
            let mut core = self.0.lock();
            core.check_writable()?;
            core.touch_worker(&req.worker_id);
            let at = core.sched.lease_job_chunk(req.lease_id);
            if let Some(state) = req.checkpoint {
                core.save_checkpoint(req.lease_id, state);
            }
            if let (Some(key), false) = (at, req.release) {
                let msg: String = req.error.chars().take(MAX_FAILURE_BYTES).collect();
                warn!(worker = %req.worker_id, job = key.0, chunk = key.1, error = %msg, "chunk failed");
                core.record_failure(key.0, key.1, &req.worker_id, &msg);
                core.last_errors.insert(key, msg);
            }
            core.progress.remove(&req.lease_id);
            let outcome = core.sched.fail(req.lease_id, req.release);
            core.stage_dirty();
            (outcome == FailOutcome::Poisoned, core.seq)
        };
        self.0.durable(seq).await?;
        Ok(Response::new(v1::FailResponse { poisoned }))
    }
}

impl Coordinator {
    /// Decodes and verifies one report, without the lock: verification and digests can be costly, so a whole
    /// batch of reports goes through this on the blocking pool before any of them is applied.
    fn check_report(&self, report: v1::ChunkReport) -> Checked {
        let lease = report.lease_id;
        let Some(wire) = report.output else {
            return Checked::Rejected(lease, "report without output".into());
        };
        let output = match ChunkOutput::try_from(wire) {
            Ok(o) => o,
            Err(e) => return Checked::Rejected(lease, e.to_string()),
        };
        let Some((job, n_chunks)) = self.job_and_chunks(report.job_id) else {
            return Checked::Rejected(lease, format!("no job {}", report.job_id));
        };
        let (n_sols, bytes) = (output.solutions.len(), crate::limits::output_bytes(&output));
        let within = self.guards.check_report(n_sols);
        if let Err(message) =
            within.and_then(|()| self.guards.check_job(report.job_id, n_sols, bytes))
        {
            let (job, chunk) = (report.job_id, report.chunk);
            return Checked::OverLimit {
                lease,
                job,
                chunk,
                message,
            };
        }
        let verified = job.verify(n_chunks, report.chunk, &output);
        Checked::Ready {
            lease,
            job: report.job_id,
            chunk: report.chunk,
            digest: hex(&output.digest()),
            output,
            verified,
        }
    }

    /// Applies one checked report; returns its ack and the commit it waits for (0 = none).
    fn apply_report(
        &self,
        worker: &str,
        checked: Checked,
    ) -> Result<((u64, v1::AckStatus), String, u64), Status> {
        use v1::AckStatus::{Accepted, Duplicate, Rejected};
        let (lease, job_id, chunk, digest, output, verified) = match checked {
            Checked::Rejected(lease, msg) => return Ok(((lease, Rejected), msg, 0)),
            Checked::OverLimit {
                lease,
                job,
                chunk,
                message,
            } => return self.refuse_over_limit(worker, lease, (job, chunk), message),
            Checked::Ready {
                lease,
                job,
                chunk,
                digest,
                output,
                verified,
            } => (lease, job, chunk, digest, output, verified),
        };
        let reject = |msg: String| Ok(((lease, Rejected), msg, 0));
        let mut core = self.lock();
        core.check_writable()?;
        core.touch_worker(worker);
        if let Err(e) = verified {
            let banned = core.sched.reject_result(job_id, chunk, lease, worker);
            warn!(worker, job = job_id, chunk = chunk, error = %e, banned, "result failed verification");
            core.last_errors.insert((job_id, chunk), e.to_string());
            core.stage_dirty();
            let seq = core.seq;
            return Ok(((lease, Rejected), e.to_string(), seq));
        }
        let outcome = core
            .sched
            .complete_vote(job_id, chunk, lease, worker, &digest);
        core.progress.remove(&lease);
        let (status, message) = match outcome {
            Completion::Voted {
                agreeing,
                needed,
                disagreement,
                poisoned,
            } => {
                if disagreement {
                    warn!(
                        worker,
                        job = job_id,
                        chunk,
                        "replicated results disagree; the chunk runs again"
                    );
                }
                if poisoned {
                    core.last_errors.insert(
                        (job_id, chunk),
                        "replicated results kept disagreeing".into(),
                    );
                }
                (
                    v1::AckStatus::Voted,
                    format!("vote recorded: {agreeing} of {needed} agreeing results"),
                )
            }
            Completion::Accepted { outvoted, .. } => {
                for w in &outvoted {
                    warn!(worker = %w, job = job_id, chunk, banned = core.sched.is_banned(w), "worker outvoted: its result disagreed with the quorum");
                }
                let Some(entry) = core.jobs.get_mut(&job_id) else {
                    return reject(format!("no job {job_id}"));
                };
                entry.tally.add(&output);
                let tally = entry.tally.clone();
                let bytes = crate::limits::output_bytes(&output);
                self.guards.add_job(job_id, output.solutions.len(), bytes);
                core.pending.push(Op::Chunk(
                    job_id,
                    chunk,
                    ChunkRecord::Done {
                        digest,
                        worker: worker.to_string(),
                    },
                ));
                core.pending.push(Op::Output(job_id, chunk, output));
                if core.checkpoints.remove(&(job_id, chunk)).is_some() {
                    core.pending.push(Op::Checkpoint(job_id, chunk, None));
                }
                // The tally right after this result: a group commit may be split after it (see
                // `store::split_commit`), and every part must carry a tally that sums exactly its done chunks.
                core.pending.push(Op::Tally(job_id, tally));
                if let Some(w) = core.workers.get_mut(worker) {
                    w.chunks_done += 1;
                }
                (Accepted, String::new())
            }
            Completion::Duplicate => {
                let stored = match core.pending_digest(job_id, chunk) {
                    Some(d) => Some(d),
                    None => match self.store.chunk(job_id, chunk) {
                        Ok(Some(ChunkRecord::Done { digest, .. })) => Some(digest),
                        Ok(_) => None,
                        Err(e) => return Err(store_status(e)),
                    },
                };
                let matches = stored.as_deref() == Some(digest.as_str());
                if let Some(e) = core.jobs.get_mut(&job_id) {
                    e.record.duplicates += 1;
                    if !matches {
                        e.record.digest_mismatches += 1;
                    }
                    let rec = e.record.clone();
                    core.pending.push(Op::Job(rec));
                }
                if matches {
                    info!(
                        worker,
                        job = job_id,
                        chunk = chunk,
                        "duplicate result, digest matches; not counted"
                    );
                    (Duplicate, "chunk already done; digest matches".to_string())
                } else {
                    warn!(
                        worker,
                        job = job_id,
                        chunk = chunk,
                        "duplicate result with a DIFFERENT digest; not counted"
                    );
                    (
                        Duplicate,
                        "chunk already done; digest MISMATCH (logged)".to_string(),
                    )
                }
            }
            Completion::Rejected(msg) => (Rejected, msg),
        };
        core.stage_dirty();
        Ok(((lease, status), message, core.seq))
    }

    /// A report over a limit: the attempt counts and the chunk goes back, with the limit as its last error.
    fn refuse_over_limit(
        &self,
        worker: &str,
        lease: LeaseId,
        (job, chunk): (JobId, u64),
        message: String,
    ) -> Result<((u64, v1::AckStatus), String, u64), Status> {
        let mut core = self.lock();
        core.check_writable()?;
        warn!(worker, job, chunk, error = %message, "report refused: over a limit");
        if core.sched.lease_job_chunk(lease) == Some((job, chunk)) {
            core.last_errors.insert((job, chunk), message.clone());
            core.sched.fail(lease, false);
            core.stage_dirty();
        }
        Ok(((lease, v1::AckStatus::Rejected), message, core.seq))
    }

    fn stage_and_seq(
        &self,
        f: impl FnOnce(&mut Core) -> Result<(), Status>,
    ) -> Result<u64, Status> {
        let mut core = self.lock();
        core.check_writable()?;
        f(&mut core)?;
        core.stage_dirty();
        Ok(core.seq)
    }

    fn info(&self, job: JobId) -> Result<v1::JobInfo, Status> {
        self.lock()
            .job_info(job)
            .ok_or_else(|| Status::not_found(format!("no job {job}")))
    }

    /// Why the store failed, once it has: from then on the coordinator accepts no changes (see `check_writable`).
    pub fn store_failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// One consistent snapshot of jobs and workers for the dashboard and `/metrics` ([`crate::http`]), taken
    /// under one short lock. It reads memory only: what it shows may be ahead of the store by one commit.
    pub fn observe(&self) -> crate::http::Observation {
        let core = self.lock();
        let mut held: HashMap<String, (u32, u64)> = HashMap::new();
        for job in core.sched.jobs() {
            for (lease, _, worker) in core.sched.leases_of(job) {
                let h = held.entry(worker).or_default();
                h.0 += 1;
                h.1 += core.progress.get(&lease).copied().unwrap_or(0);
            }
        }
        let workers = core.workers.iter().map(|(name, w)| {
            let (leases, running_nodes) = held.get(name).copied().unwrap_or_default();
            crate::http::WorkerObservation {
                name: name.clone(),
                threads: w.threads,
                last_seen_ms: w.last_seen_ms,
                chunks_done: w.chunks_done,
                leases,
                running_nodes,
            }
        });
        crate::http::Observation {
            now_ms: now_ms(),
            lease_ttl_ms: core.sched.config().lease_ttl_ms,
            live_workers: core.live_workers(),
            jobs: core
                .sched
                .jobs()
                .filter_map(|id| core.job_info(id))
                .collect(),
            workers: workers.collect(),
        }
    }
}

/// The largest file `Ship` takes: programs and their data, not datasets (those belong in a job's input).
pub const MAX_SHIPPED_BYTES: u64 = 1 << 30;

#[tonic::async_trait]
impl jobs_server::Jobs for JobsApi {
    async fn ship(
        &self,
        req: Request<tonic::Streaming<v1::ArtifactPiece>>,
    ) -> Result<Response<v1::ShipResponse>, Status> {
        let mut stream = req.into_inner();
        let mut bytes: Vec<u8> = Vec::new();
        let mut want: Option<(String, u64)> = None;
        while let Some(piece) = stream.message().await? {
            let (digest, total) = want.get_or_insert_with(|| (piece.digest.clone(), piece.total));
            if piece.digest != *digest
                || piece.total != *total
                || piece.offset != bytes.len() as u64
            {
                return Err(Status::invalid_argument(
                    "shipped pieces out of order, or with another digest or size",
                ));
            }
            if *total > MAX_SHIPPED_BYTES {
                return Err(Status::invalid_argument(format!(
                    "a shipped file may have at most {MAX_SHIPPED_BYTES} bytes, this one has {total}"
                )));
            }
            if bytes.len() as u64 + piece.data.len() as u64 > *total {
                return Err(Status::invalid_argument("more bytes than the file's size"));
            }
            bytes.extend_from_slice(&piece.data);
        }
        let Some((digest, total)) = want else {
            return Err(Status::invalid_argument("no file was sent"));
        };
        if bytes.len() as u64 != total {
            return Err(Status::invalid_argument(format!(
                "the file has {} of its {total} bytes",
                bytes.len()
            )));
        }
        if !crate::store::is_digest(&digest) || crate::store::digest_hex(&bytes) != digest {
            return Err(Status::invalid_argument(
                "the file does not match its digest (blake3, lower-case hex)",
            ));
        }
        self.0.lock().check_writable()?;
        let store = self.0.store.clone();
        let (d, n) = (digest.clone(), bytes.len() as u64);
        let existing = tokio::task::spawn_blocking(move || -> Result<bool, StoreError> {
            if store.has_shipped(&d)? {
                return Ok(true);
            }
            store.put_shipped(&d, &bytes)?;
            Ok(false)
        })
        .await
        .map_err(|e| Status::internal(format!("store task: {e}")))?
        .map_err(store_status)?;
        info!(digest = %digest, bytes = n, existing, "file shipped");
        Ok(Response::new(v1::ShipResponse {
            digest,
            bytes: n,
            existing,
        }))
    }

    async fn submit(
        &self,
        req: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        let req = req.into_inner();
        self.0.guards.check_params(&req.params_json)?;
        let params: serde_json::Value = serde_json::from_str(&req.params_json)
            .map_err(|e| invalid_input(format!("params_json is not JSON: {e}")))?;
        let job = self
            .0
            .cfg
            .registry
            .job_from_params(&req.space, &params)
            .map_err(invalid_input)?;
        if req.replicate > MAX_REPLICATE {
            return Err(Status::invalid_argument(format!(
                "replicate must be in 1..={MAX_REPLICATE}, got {}",
                req.replicate
            )));
        }
        let replicate = req.replicate.max(1);
        for digest in job.shipped() {
            let store = self.0.store.clone();
            let d = digest.clone();
            let stored = tokio::task::spawn_blocking(move || store.has_shipped(&d))
                .await
                .map_err(|e| Status::internal(format!("store task: {e}")))?
                .map_err(store_status)?;
            if !stored {
                return Err(Status::failed_precondition(format!(
                    "the job ships file {digest}, which this coordinator does not have: send it first (`sweep submit` does)"
                )));
            }
        }
        let requested = (req.chunks > 0).then_some(req.chunks);
        let plan = job.plan(requested).map_err(invalid_input)?;
        if plan.n_chunks > MAX_CHUNKS_PER_JOB {
            return Err(Status::invalid_argument(format!(
                "{} chunks is more than a coordinator keeps for one job ({MAX_CHUNKS_PER_JOB})",
                plan.n_chunks
            )));
        }
        // Every job whose artifact this one needs (a table, the layers of a layered search), recursively: each
        // found or submitted before the jobs that read it, with its default plan, all in this one batch.
        let dag =
            crate::inputs::resolve(job.clone(), &|space: &str, params: &serde_json::Value| {
                self.0.cfg.registry.job_from_params(space, params)
            })
            .map_err(invalid_input)?;
        let mut plans = Vec::with_capacity(dag.len());
        let inputs_only = dag.split_last().map_or(&[][..], |(_, rest)| rest);
        for node in inputs_only {
            let plan = node.job.plan(None).map_err(|e| {
                invalid_input(format!(
                    "input job {}: {e}",
                    crate::inputs::label(node.job.as_ref())
                ))
            })?;
            if plan.n_chunks > MAX_CHUNKS_PER_JOB {
                return Err(invalid_input(format!(
                    "input job {}: {} chunks is more than a coordinator keeps for one job ({MAX_CHUNKS_PER_JOB})",
                    crate::inputs::label(node.job.as_ref()),
                    plan.n_chunks
                )));
            }
            plans.push(plan);
        }
        plans.push(plan);
        let (info, existing, seq) = {
            let mut core = self.0.lock();
            core.check_writable()?;
            let mut ids: Vec<JobId> = Vec::with_capacity(dag.len());
            let mut existing = false;
            for (i, (node, plan)) in dag.into_iter().zip(&plans).enumerate() {
                let inputs = node
                    .inputs
                    .iter()
                    .filter_map(|&k| ids.get(k).copied())
                    .collect();
                let (id, found) = if i + 1 == plans.len() {
                    let reuse = if req.reuse_existing {
                        Reuse::Any
                    } else {
                        Reuse::Never
                    };
                    core.find_or_create(node.job, plan, req.priority, reuse, inputs, replicate)
                } else {
                    core.find_or_create(node.job, plan, req.priority, Reuse::AsInput, inputs, 1)
                };
                ids.push(id);
                existing = found;
            }
            let id = ids.last().copied().unwrap_or_default();
            (core.job_info(id), existing, core.seq)
        };
        self.0.durable(seq).await?;
        self.0.work_ready.notify_waiters();
        Ok(Response::new(v1::SubmitResponse {
            job: info,
            existing,
        }))
    }

    async fn list_jobs(
        &self,
        _: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        // Status answers describe what is stored: what it reports survives a crash right after it is read.
        let (jobs, workers) = self
            .0
            .durable_read(|core| {
                let jobs = core
                    .sched
                    .jobs()
                    .filter_map(|id| core.job_info(id))
                    .collect();
                (jobs, core.live_workers())
            })
            .await?;
        Ok(Response::new(v1::ListJobsResponse { jobs, workers }))
    }

    async fn job_status(
        &self,
        req: Request<v1::JobRequest>,
    ) -> Result<Response<v1::JobInfo>, Status> {
        let job = req.into_inner().job_id;
        let info = self.0.durable_read(|core| core.job_info(job)).await?;
        Ok(Response::new(info.ok_or_else(|| {
            Status::not_found(format!("no job {job}"))
        })?))
    }

    type WatchStream = ReceiverStream<Result<v1::WatchEvent, Status>>;

    async fn watch(
        &self,
        req: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = req.into_inner();
        if req.job_id != 0 {
            self.0.info(req.job_id)?;
        }
        let interval = Duration::from_millis(
            req.interval_ms
                .clamp(50, 60_000)
                .max(if req.interval_ms == 0 { 500 } else { 50 }),
        );
        let slot = self.0.guards.watch_slot()?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let coord = self.0.clone();
        let mut stopping = self.0.stopping.subscribe();
        let mut changes = self.0.lock().job_changes.subscribe();
        tokio::spawn(async move {
            // Held while the stream lives: the slot frees when the client goes away.
            let _slot = slot;
            let mut tick = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = changes.changed() => {}
                    _ = stopping.wait_for(|s| *s) => break,
                }
                let event = {
                    let core = coord.lock();
                    let jobs = if req.job_id == 0 {
                        core.sched
                            .jobs()
                            .filter_map(|id| core.job_info(id))
                            .collect()
                    } else {
                        core.job_info(req.job_id).into_iter().collect()
                    };
                    v1::WatchEvent {
                        jobs,
                        workers: core.live_workers(),
                    }
                };
                if tx.send(Ok(event)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn results(
        &self,
        req: Request<v1::JobRequest>,
    ) -> Result<Response<v1::ResultsResponse>, Status> {
        Ok(Response::new(
            self.0.results(req.into_inner().job_id).await?,
        ))
    }

    async fn cancel(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let id = req.into_inner().job_id;
        let seq = self
            .0
            .stage_and_seq(|c| c.sched.cancel(id).map_err(sched_status))?;
        self.0.durable(seq).await?;
        Ok(Response::new(self.0.info(id)?))
    }

    async fn pause(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let id = req.into_inner().job_id;
        let seq = self
            .0
            .stage_and_seq(|c| c.sched.pause(id).map_err(sched_status))?;
        self.0.durable(seq).await?;
        Ok(Response::new(self.0.info(id)?))
    }

    async fn resume(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let id = req.into_inner().job_id;
        let seq = self
            .0
            .stage_and_seq(|c| c.sched.resume(id).map_err(sched_status))?;
        self.0.durable(seq).await?;
        Ok(Response::new(self.0.info(id)?))
    }

    async fn list_workers(
        &self,
        _: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersResponse>, Status> {
        let core = self.0.lock();
        let mut names: Vec<&String> = core.workers.keys().collect();
        names.sort();
        let workers = names
            .into_iter()
            .filter_map(|n| core.worker_status(n))
            .collect();
        Ok(Response::new(v1::ListWorkersResponse { workers }))
    }

    async fn drain(
        &self,
        req: Request<v1::DrainRequest>,
    ) -> Result<Response<v1::WorkerStatus>, Status> {
        let name = req.into_inner().worker;
        let mut core = self.0.lock();
        if !core.workers.contains_key(&name) {
            return Err(Status::not_found(format!(
                "no worker named `{name}` has registered with this coordinator"
            )));
        }
        core.sched.drain(&name);
        info!(worker = %name, "worker asked to drain");
        core.worker_status(&name)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no worker named `{name}`")))
    }
}

/// Serves both services on `listener` until `shutdown` resolves, then writes what is still queued and returns.
/// `security` adds TLS and token checks ([`crate::auth`]); its `Default` serves plain and open.
pub async fn serve(
    listener: TcpListener,
    coord: Arc<Coordinator>,
    security: crate::ServeSecurity,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr: SocketAddr = listener.local_addr()?;
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = security.tls {
        server = server.tls_config(tls)?;
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let reloader = (security.auth.clone()).map(|a| tokio::spawn(a.watch_files(stop_rx.clone())));
    let committer = tokio::spawn(coord.clone().committer(stop_rx.clone()));
    let expirer = tokio::spawn(coord.clone().expirer(stop_rx.clone()));
    // The merger stops first and finishes the merge it is in: a merge waits for a commit, so the committer must
    // outlive it (else `sweep run` could hang at exit waiting for a commit nobody makes).
    let (merge_stop_tx, merge_stop_rx) = watch::channel(false);
    let merger = tokio::spawn(coord.clone().merger(merge_stop_rx));
    info!(%addr, "coordinator listening");
    // Small RPCs (lease, complete) must not wait for delayed ACKs: Nagle's algorithm off on every connection,
    // which tonic only does itself for listeners it binds.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        conn.and_then(|c| {
            c.set_nodelay(true)?;
            Ok(c)
        })
    });
    let work = work_server::WorkServer::new(WorkApi(coord.clone()))
        .max_decoding_message_size(sweep_proto::MAX_REPORT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_REPORT_BYTES);
    let jobs = jobs_server::JobsServer::new(JobsApi(coord.clone()))
        .max_decoding_message_size(sweep_proto::MAX_REPORT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_RESULT_BYTES);
    let result = server
        .layer(crate::metrics::RpcLayer::new(coord.metrics.clone()))
        .layer(crate::auth::AuthLayer::new(security.auth))
        .add_service(work)
        .add_service(jobs)
        .serve_with_incoming_shutdown(incoming, async {
            shutdown.await;
            coord.stopping.send_replace(true);
        })
        .await;
    let _ = merge_stop_tx.send(true);
    let _ = merger.await;
    let _ = stop_tx.send(true);
    let _ = committer.await;
    let _ = expirer.await;
    if let Some(r) = reloader {
        let _ = r.await;
    }
    info!("coordinator stopped");
    result.map_err(Into::into)
}
