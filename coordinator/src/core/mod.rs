//! The coordinator's domain core: the job table, the scheduler, tallies, input-DAG holds, replication votes,
//! workers and checkpoints, in one synchronous type with no I/O, no clock and no wire types.
//!
//! Like the scheduler inside it (and raft-rs's `RawNode`), the core decides and the shell acts: every method
//! takes the time it should use, changes memory, and leaves the writes its decision needs in an outbox
//! ([`Core::take_batch`]), written in the core's own record types (`records`: the job record, the ops of a
//! batch, the snapshot it starts from); the store sits above the core and adapts to them. The shell
//! ([`crate::coordinator`]) persists the outbox with group commit and answers a request only once the batch
//! holding its writes is durable. That split is what lets the core be tested with simulated time, and lets the
//! gRPC handlers and the dashboard be thin adapters over the same methods.

mod error;
mod estimate;
mod jobs;
mod records;
mod reports;
#[cfg(test)]
mod tests;
mod views;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sweep_space::{AnswerMerge, Job, Tally};
use tokio::sync::watch;
use tracing::{info, warn};

pub use error::{invalid, CoreError};
pub use estimate::{estimate_chunks, expected_total, MAX_ESTIMATED_CHUNKS};
pub use jobs::{JobOptions, Reuse, SubmitNode};
pub use records::{JobRecord, Listing, Op, Snapshot};
pub use reports::{Checked, ReportTarget};
pub use views::{
    Ack, AckKind, FailedAttempt, JobView, KeptAnswer, LeaseAnswer, LeaseView, Observation,
    PoisonedChunk, ResultsView, WorkerObservation, WorkerView,
};

use crate::limits::{Limits, Usage};
use crate::scheduler::{ChunkRecord, JobId, JobState, LeaseId, Millis, Scheduler, SchedulerConfig};

/// Upper bound on the chunks one lease request may ask for.
pub const MAX_LEASE_REQUEST: u32 = 4096;
/// Failed attempts a job keeps for `sweep status`: enough to see a pattern, bounded for a job whose every chunk
/// fails.
const MAX_FAILURES_SHOWN: usize = 20;
/// Finished jobs that keep the answer merged while they ran until someone asks for it (see
/// `Core::bound_finished_merges`).
const MAX_KEPT_MERGES: usize = 8;

/// How many finished jobs keep their answer's JSON text in memory (see `Core::keep_result`).
const MAX_KEPT_RESULTS: usize = 16;
/// What one failed attempt's message may hold (a program's stderr tail is cut before this).
pub const MAX_FAILURE_BYTES: usize = 4096;

/// Rebuilds a job from its space and canonical parameters (the registry), or says why it cannot.
pub type JobOf<'a> = &'a dyn Fn(&str, &serde_json::Value) -> Result<Arc<dyn Job>, String>;

/// What the results of a job are computed from, copied out under the lock.
pub struct ResultsInput {
    pub job: Arc<dyn Job>,
    pub n_chunks: u64,
    pub listing: Listing,
    pub view: JobView,
    /// The answer, if it was computed already (finished jobs keep theirs).
    pub cached: Option<KeptAnswer>,
    pub finished: bool,
}

/// A stored artifact's digest, and its bytes if they are in memory.
pub struct ArtifactRef {
    pub digest: String,
    pub bytes: Option<Arc<Vec<u8>>>,
}

/// Why the store cannot be opened as a coordinator's memory.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Damaged(String),
    #[error(
        "job {job} in the store names space `{space}` which this binary cannot rebuild: {why}"
    )]
    UnknownStoredJob {
        job: JobId,
        space: String,
        why: String,
    },
}

pub(crate) struct JobEntry {
    pub(crate) record: JobRecord,
    pub(crate) job: Arc<dyn Job>,
    params_json: String,
    pub(crate) tally: Tally,
    /// The final result as JSON and as text for people, computed once the job is finished. Text, not a
    /// `Value`: a star answer's 10,000 shown stars are 2 MB of JSON (and 0.9 MB for people) and 15 MB as a
    /// `Value` tree.
    pub(crate) result: Option<KeptAnswer>,
    /// The merged artifact, kept in memory once loaded: workers of dependent jobs fetch it, maybe many times.
    pub(crate) artifact: Option<Arc<Vec<u8>>>,
    /// The most recent failed attempts, newest last (memory only: a poisoned chunk's last error is stored with
    /// the chunk).
    failures: VecDeque<FailedAttempt>,
    /// Up-front estimates of the chunks' sizes while the job runs, for a job of unknown size whose space gives
    /// them (memory only: they are a pure function of the job, recomputed after a restart).
    pub(crate) estimates: Option<estimate::ChunkEstimates>,
    /// The answer over every result accepted by this process, merged as each is accepted (bounded: the tally
    /// and the smallest solutions), so a finished job's answer needs no pass over its stored outputs. `None`
    /// when it would not cover exactly what is stored: loaded after a restart, once the list is stopped, or
    /// taken by the first answer.
    pub(crate) merged: Option<AnswerMerge>,
}

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

/// What a worker says about itself when it registers.
#[derive(Clone, Debug, Default)]
pub struct Registration {
    /// The name it asks for; empty: the coordinator picks one.
    pub name: String,
    /// The identity its token proves, when tokens are on: its standing is kept under this, not its name.
    pub identity: Option<String>,
    pub threads: u32,
    pub memory_bytes: u64,
    pub version: String,
    pub spaces: Vec<String>,
}

/// Progress of one running lease, from a heartbeat.
#[derive(Clone, Debug, Default)]
pub struct LeaseProgress {
    pub lease: LeaseId,
    pub nodes: u64,
    pub checkpoint: Option<String>,
}

/// A heartbeat's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    /// Leases the worker no longer holds: stop them.
    pub revoked: Vec<LeaseId>,
    /// This coordinator does not know the worker (it restarted): register again.
    pub register_again: bool,
}

pub struct Core {
    pub(crate) sched: Scheduler,
    pub(crate) jobs: BTreeMap<JobId, JobEntry>,
    workers: HashMap<String, WorkerInfo>,
    /// Nodes reported by heartbeats for leases still running (progress only).
    progress: HashMap<LeaseId, u64>,
    /// Why chunks failed, kept for the poisoned report.
    last_errors: HashMap<(JobId, u64), String>,
    /// Resume states of chunks not done yet, as stored (see `Op::Checkpoint`).
    checkpoints: HashMap<(JobId, u64), String>,
    next_job: JobId,
    persisted_next_lease: LeaseId,
    /// The outbox: writes waiting for the next group commit, and that commit's sequence number.
    pending: Vec<Op>,
    seq: u64,
    /// Set when the store failed: memory may be ahead of disk, so nothing more is accepted until a restart.
    failed: Option<String>,
    worker_seq: u64,
    /// Finished jobs whose chunk artifacts still have to be merged into one stored artifact.
    to_merge: Vec<JobId>,
    /// Running jobs of unknown size whose chunk estimates the shell should compute (see [`Core::set_estimates`]).
    to_estimate: Vec<JobId>,
    /// Bumped whenever a job changes state, so watch streams report it at once instead of at their next tick.
    job_changes: watch::Sender<u64>,
    /// Per job: what its accepted outputs stored so far (solutions, bytes), checked against `limits`.
    usage: HashMap<JobId, Usage>,
    /// Jobs whose usage changed since the last batch.
    usage_dirty: BTreeSet<JobId>,
    limits: Limits,
}

impl Core {
    /// Rebuilds the coordinator's memory from what the store holds; `job_of` rebuilds a job from its space and
    /// parameters (the registry).
    pub fn open(
        snap: Snapshot,
        cfg: SchedulerConfig,
        limits: Limits,
        job_of: JobOf<'_>,
        now: Millis,
    ) -> Result<Core, OpenError> {
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
                return Err(OpenError::Damaged(format!(
                    "job {} has {counted} done chunks but its tally counts {tallied}",
                    rec.id
                )));
            }
        }
        // What each job stored counts against its caps across restarts, not per coordinator run.
        let usage: HashMap<JobId, Usage> = snap.usage.into_iter().collect();
        let mut sched = Scheduler::new(cfg, snap.next_lease);
        let mut jobs = BTreeMap::new();
        for rec in snap.jobs {
            let job =
                job_of(&rec.space, &rec.params).map_err(|why| OpenError::UnknownStoredJob {
                    job: rec.id,
                    space: rec.space.clone(),
                    why,
                })?;
            sched.add_job(rec.id, rec.priority, rec.n_chunks, rec.state);
            sched.set_replication(rec.id, rec.replicate);
            let tally = snap.tallies.get(&rec.id).cloned().unwrap_or_default();
            // Results accepted before the restart are only in the store: its answer is read from there.
            jobs.insert(rec.id, JobEntry::new(rec, job, tally, None));
        }
        let mut to_merge = Vec::new();
        let mut to_estimate = Vec::new();
        for e in jobs.values() {
            if e.wants_estimates() {
                to_estimate.push(e.record.id);
            }
            // An input done before the crash whose artifact is not stored yet is merged below (every done job
            // without a digest is), so what `hold_for_inputs` returns is already covered.
            jobs::hold_for_inputs(&mut sched, &jobs, e.record.id, &e.record.input_jobs);
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
        for (job, chunk, votes) in snap.votes {
            sched.restore_votes(job, chunk, votes);
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
            to_estimate,
            job_changes: watch::channel(0).0,
            usage,
            usage_dirty: BTreeSet::new(),
            limits,
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
            core.stage_dirty(now);
        }
        Ok(core)
    }

    /// The sequence number of the batch now being filled: a request that staged writes waits for it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Takes the outbox for one group commit: the writes and the sequence number they complete.
    pub fn take_batch(&mut self) -> (Vec<Op>, u64) {
        // Usage bounds a job's output; a batch that a crash cuts short may leave it a few results behind,
        // which only lets the job store that much more. Once per batch keeps it off every result's path.
        for job in std::mem::take(&mut self.usage_dirty) {
            if let Some(u) = self.usage.get(&job) {
                self.pending.push(Op::Usage(job, *u));
            }
        }
        let seq = self.seq;
        self.seq += 1;
        (std::mem::take(&mut self.pending), seq)
    }

    /// Why the store failed, once it has.
    pub fn store_failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The store failed: from now on the core accepts no changes (memory may be ahead of disk).
    pub fn note_store_failure(&mut self, why: String) {
        if self.failed.is_none() {
            warn!(error = %why, "store write failed; refusing changes until restart");
            self.failed = Some(why);
        }
    }

    pub fn check_writable(&self) -> Result<(), CoreError> {
        match &self.failed {
            Some(e) => Err(CoreError::StoreFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// A receiver that changes whenever some job changes state.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.job_changes.subscribe()
    }

    /// Jobs finished since the last call whose artifacts the shell must merge.
    pub fn take_to_merge(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.to_merge)
    }

    pub fn has_work_to_merge(&self) -> bool {
        !self.to_merge.is_empty()
    }

    /// Jobs queued since the last call whose chunk estimates the shell should compute off the lock
    /// ([`estimate_chunks`]): each with its job and chunk count.
    pub fn take_to_estimate(&mut self) -> Vec<(JobId, Arc<dyn Job>, u64)> {
        std::mem::take(&mut self.to_estimate)
            .into_iter()
            .filter_map(|id| {
                let e = self.jobs.get(&id)?;
                e.wants_estimates()
                    .then(|| (id, e.job.clone(), e.record.n_chunks))
            })
            .collect()
    }

    /// The shell computed a job's chunk estimates: from now on its view carries an expected size. Ignored for
    /// a job that finished (or vanished) meanwhile, or for estimates of another plan.
    pub fn set_estimates(&mut self, id: JobId, per_chunk: Vec<f64>) {
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        if !e.wants_estimates() || per_chunk.len() as u64 != e.record.n_chunks {
            return;
        }
        // Chunks may have finished while the estimates were computed (or before a restart): their estimates
        // count as done, matching the tally's real nodes.
        e.estimates = Some(estimate::ChunkEstimates::new(
            per_chunk,
            self.sched.done_chunks(id),
        ));
        self.job_changes.send_modify(|n| *n += 1);
    }

    /// Moves what the scheduler changed into the outbox, and cancels the readers of inputs that ended without
    /// an artifact (and theirs, round after round).
    fn stage_dirty(&mut self, now: Millis) {
        loop {
            let ended = self.stage_dirty_once(now);
            if !self.cancel_readers_of(&ended) {
                break;
            }
        }
    }

    /// A job whose input ended without a complete artifact (cancelled, or done with poisoned chunks) would wait
    /// for it for ever: it is cancelled, with a warning naming the input. A submit of the same job later creates
    /// what has to run again (neither kind of input is reused). True if any job was cancelled.
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
    fn stage_dirty_once(&mut self, now: Millis) -> Vec<JobId> {
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
        for (job, chunk) in dirty.votes {
            let votes = self.sched.votes(job, chunk);
            self.pending.push(Op::Votes(job, chunk, votes));
        }
        let mut finished_now = false;
        for job in dirty.jobs {
            let Some(state) = self.sched.job_state(job) else {
                continue;
            };
            self.job_changes.send_modify(|n| *n += 1);
            if let Some(e) = self.jobs.get_mut(&job) {
                e.record.state = state;
                if state.is_finished() {
                    // The real size is known now; the estimates only held memory.
                    e.estimates = None;
                }
                if state.is_finished() && e.record.finished_ms == 0 {
                    e.record.finished_ms = now.max(1);
                    info!(job, state = state.as_str(), "job finished");
                    finished_now = true;
                    if state == JobState::Done {
                        self.to_merge.push(job);
                    } else {
                        ended.push(job);
                    }
                }
                self.pending.push(Op::Job(e.record.clone()));
            }
        }
        if finished_now {
            self.bound_finished_merges();
        }
        let next_lease = self.sched.next_lease_id();
        if next_lease != self.persisted_next_lease {
            self.persisted_next_lease = next_lease;
            self.pending.push(Op::Meta("next_lease", next_lease));
        }
        ended
    }

    fn touch_worker(&mut self, worker: &str, now: Millis) {
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
    fn record_failure(&mut self, job: JobId, chunk: u64, worker: &str, error: &str, now: Millis) {
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
        e.failures.push_back(FailedAttempt {
            chunk,
            worker: worker.to_string(),
            error,
            unix_ms: now,
        });
    }

    pub fn live_workers(&self, now: Millis) -> u32 {
        let horizon = now.saturating_sub(self.lease_ttl_ms());
        self.workers
            .values()
            .filter(|w| w.last_seen_ms >= horizon)
            .count() as u32
    }

    /// A worker (re)registers: it is described, and when tokens are on its standing is bound to its identity.
    /// Returns the name it is known by.
    pub fn register(&mut self, reg: Registration, now: Millis) -> String {
        let worker_id = if reg.name.trim().is_empty() {
            self.worker_seq += 1;
            format!("worker-{}", self.worker_seq)
        } else {
            reg.name.trim().to_string()
        };
        self.touch_worker(&worker_id, now);
        if let Some(w) = self.workers.get_mut(&worker_id) {
            w.threads = reg.threads;
            w.memory_bytes = reg.memory_bytes;
            w.version = reg.version.chars().take(64).collect();
            w.spaces = Some(
                reg.spaces
                    .iter()
                    .take(1024)
                    .map(|s| s.chars().take(64).collect())
                    .collect(),
            );
        }
        if let Some(identity) = reg.identity {
            self.sched.bind_identity(&worker_id, &identity);
        }
        info!(worker = %worker_id, threads = reg.threads, version = %reg.version, "worker registered");
        worker_id
    }

    /// One lease attempt: the chunks `worker` may have now (none when there is nothing to do).
    pub fn lease(
        &mut self,
        worker: &str,
        max_chunks: u32,
        now: Millis,
    ) -> Result<LeaseAnswer, CoreError> {
        if worker.is_empty() {
            return Err(CoreError::Invalid(
                "worker_id is empty: register first".into(),
            ));
        }
        if max_chunks == 0 || max_chunks > MAX_LEASE_REQUEST {
            return Err(CoreError::Invalid(format!(
                "max_chunks must be in 1..={MAX_LEASE_REQUEST}, got {max_chunks}"
            )));
        }
        self.check_writable()?;
        self.touch_worker(worker, now);
        if self.sched.is_banned(worker) {
            return Err(CoreError::WorkerRefused {
                worker: worker.to_string(),
                bad_results: self.sched.bad_results(worker),
            });
        }
        if self.sched.is_draining(worker) {
            return Ok(LeaseAnswer::Drain);
        }
        let Some(spaces) = self.workers.get(worker).and_then(|w| w.spaces.clone()) else {
            return Ok(LeaseAnswer::RegisterAgain);
        };
        let jobs = &self.jobs;
        let runnable = |id: JobId| {
            jobs.get(&id)
                .is_some_and(|e| spaces.contains(&e.record.space))
        };
        let grants = self
            .sched
            .lease_where(now, worker, max_chunks as usize, &runnable);
        let leases = grants
            .iter()
            .filter_map(|g| {
                let e = self.jobs.get(&g.job)?;
                // Leased only once every input's artifact is stored, so each has its digest.
                let inputs = e
                    .record
                    .input_jobs
                    .iter()
                    .map(|&i| {
                        let digest = self
                            .jobs
                            .get(&i)
                            .and_then(|i| i.record.artifact_digest.clone())
                            .unwrap_or_default();
                        (i, digest)
                    })
                    .collect();
                Some(LeaseView {
                    lease: g.lease,
                    job: g.job,
                    space: e.record.space.clone(),
                    params_json: e.params_json.clone(),
                    n_chunks: e.record.n_chunks,
                    chunk: g.chunk,
                    deadline_ms: g.deadline,
                    inputs,
                    checkpoint: self.checkpoints.get(&(g.job, g.chunk)).cloned(),
                    shipped: e.job.shipped(),
                    count_only: e.record.listing.counts_only(),
                })
            })
            .collect();
        self.stage_dirty(now);
        Ok(LeaseAnswer::Chunks(leases))
    }

    /// A worker's heartbeat: extends the leases it still holds, keeps their progress and resume states.
    pub fn heartbeat(
        &mut self,
        worker: &str,
        progress: Vec<LeaseProgress>,
        now: Millis,
    ) -> Result<Beat, CoreError> {
        self.check_writable()?;
        self.touch_worker(worker, now);
        let ids: Vec<LeaseId> = progress.iter().map(|p| p.lease).collect();
        let revoked = self.sched.heartbeat(now, worker, &ids);
        for p in progress {
            if !revoked.contains(&p.lease) {
                self.progress.insert(p.lease, p.nodes);
                if let Some(state) = p.checkpoint {
                    self.save_checkpoint(p.lease, state);
                }
            }
        }
        self.stage_dirty(now);
        let register_again = self.workers.get(worker).is_some_and(|w| w.spaces.is_none());
        Ok(Beat {
            revoked,
            register_again,
        })
    }

    /// A worker gave up a lease: `release` hands it back unstarted, otherwise it failed with `error`. Returns
    /// whether the chunk is now poisoned.
    pub fn fail(
        &mut self,
        worker: &str,
        lease: LeaseId,
        release: bool,
        error: &str,
        checkpoint: Option<String>,
        now: Millis,
    ) -> Result<bool, CoreError> {
        self.check_writable()?;
        self.touch_worker(worker, now);
        let at = self.sched.lease_job_chunk(lease);
        if let Some(state) = checkpoint {
            self.save_checkpoint(lease, state);
        }
        if let (Some(key), false) = (at, release) {
            let msg: String = error.chars().take(MAX_FAILURE_BYTES).collect();
            warn!(worker, job = key.0, chunk = key.1, error = %msg, "chunk failed");
            self.record_failure(key.0, key.1, worker, &msg, now);
            self.last_errors.insert(key, msg);
        }
        self.progress.remove(&lease);
        let outcome = self.sched.fail(lease, release);
        self.stage_dirty(now);
        Ok(outcome == crate::scheduler::FailOutcome::Poisoned)
    }

    /// Extends every lease by `gap`, a time the coordinator was not running (see
    /// [`Scheduler::extend_leases`]); the expirer calls it when its own tick comes that late.
    pub fn extend_leases(&mut self, gap: Millis, now: Millis) {
        let n = self.sched.extend_leases(gap);
        if n > 0 {
            warn!(
                gap_ms = gap,
                leases = n,
                "the coordinator was not running for a while (stopped, suspended, or its clock jumped): \
                 its leases are extended by that time instead of expiring"
            );
            self.stage_dirty(now);
        }
    }

    /// Returns expired leases to pending (or poisons their chunks); the shell calls this on a timer.
    pub fn expire(&mut self, now: Millis) -> Vec<crate::scheduler::Expired> {
        let expired = self.sched.expire(now);
        if expired.is_empty() {
            return expired;
        }
        for e in &expired {
            self.progress.remove(&e.lease);
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
        self.stage_dirty(now);
        expired
    }

    pub fn cancel(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.cancel(job)?;
        self.stage_dirty(now);
        self.job_view(job).ok_or(CoreError::UnknownJob(job))
    }

    pub fn pause(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.pause(job)?;
        self.stage_dirty(now);
        self.job_view(job).ok_or(CoreError::UnknownJob(job))
    }

    pub fn resume(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.resume(job)?;
        self.stage_dirty(now);
        self.job_view(job).ok_or(CoreError::UnknownJob(job))
    }

    /// Asks a worker to finish what it holds and take nothing new.
    pub fn drain(&mut self, name: &str) -> Result<WorkerView, CoreError> {
        if !self.workers.contains_key(name) {
            return Err(CoreError::UnknownWorker(name.to_string()));
        }
        self.sched.drain(name);
        info!(worker = %name, "worker asked to drain");
        self.worker_view(name)
            .ok_or_else(|| CoreError::UnknownWorker(name.to_string()))
    }

    /// The job and its chunk count, for verifying a report outside the lock.
    pub fn job_and_chunks(&self, job: JobId) -> Option<(Arc<dyn Job>, u64)> {
        self.jobs
            .get(&job)
            .map(|e| (e.job.clone(), e.record.n_chunks))
    }

    /// What a report for `job` is checked against (outside the lock).
    pub fn report_target(&self, job: JobId) -> Option<ReportTarget> {
        self.jobs.get(&job).map(|e| ReportTarget {
            job: e.job.clone(),
            n_chunks: e.record.n_chunks,
            counts_only: e.record.listing.counts_only(),
        })
    }

    pub fn has_artifact(&self, job: JobId) -> bool {
        self.jobs
            .get(&job)
            .is_some_and(|e| e.record.artifact_digest.is_some())
    }

    /// Whether some job names `job` among its inputs.
    pub fn is_read_by_others(&self, job: JobId) -> bool {
        self.jobs
            .values()
            .any(|e| e.record.input_jobs.contains(&job))
    }

    /// A finished job's merged artifact is stored (in this batch): keep it, and stage its record.
    pub fn artifact_merged(&mut self, id: JobId, digest: String, bytes: Arc<Vec<u8>>) -> bool {
        let Some(e) = self.jobs.get_mut(&id) else {
            return false;
        };
        e.record.artifact_digest = Some(digest);
        e.artifact = Some(bytes.clone());
        let rec = e.record.clone();
        self.pending.push(Op::Artifact(id, bytes));
        self.pending.push(Op::Job(rec));
        true
    }

    /// The merged artifact of `id` is durable: the jobs reading it may hand out chunks.
    pub fn input_ready(&mut self, id: JobId) {
        self.sched.input_ready(id);
    }

    /// The stored digest of a finished job's artifact, and the bytes if they are in memory.
    pub fn artifact_of(&self, id: JobId) -> Result<ArtifactRef, CoreError> {
        let e = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        let Some(digest) = e.record.artifact_digest.clone() else {
            return Err(CoreError::Precondition(format!(
                "job {id} has no stored artifact (not done yet, or it produces none)"
            )));
        };
        Ok(ArtifactRef {
            digest,
            bytes: e.artifact.clone(),
        })
    }

    /// Keeps an artifact read back from the store, for the next fetch.
    pub fn keep_artifact(&mut self, id: JobId, bytes: Arc<Vec<u8>>) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.artifact = Some(bytes);
        }
    }

    /// What results need: the job, its view, its cached answer and whether it is finished.
    pub fn results_input(&self, id: JobId) -> Result<ResultsInput, CoreError> {
        let e = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        let view = self.job_view(id).ok_or(CoreError::UnknownJob(id))?;
        Ok(ResultsInput {
            job: e.job.clone(),
            n_chunks: e.record.n_chunks,
            listing: e.record.listing,
            view,
            cached: e.result.clone(),
            finished: e.record.state.is_finished(),
        })
    }

    /// Drops the merged answers of all but the [`MAX_KEPT_MERGES`] most recently finished jobs whose answer
    /// nobody asked for yet (the layers of a DAG, say): each holds up to `MAX_SHOWN_SOLUTIONS` solutions, and
    /// the store can always rebuild them.
    fn bound_finished_merges(&mut self) {
        self.keep_latest_finished(MAX_KEPT_MERGES, |e| &mut e.merged);
    }

    /// Clears what `slot` holds in all but the `max` most recently finished jobs that hold something there:
    /// memory a finished job keeps only for speed, since the store can rebuild it.
    fn keep_latest_finished<T>(
        &mut self,
        max: usize,
        slot: impl Fn(&mut JobEntry) -> &mut Option<T>,
    ) {
        let mut kept: Vec<(Millis, JobId)> = self
            .jobs
            .values_mut()
            .filter_map(|e| {
                let holds = e.record.state.is_finished() && slot(e).is_some();
                holds.then_some((e.record.finished_ms, e.record.id))
            })
            .collect();
        if kept.len() <= max {
            return;
        }
        kept.sort_unstable();
        for (_, id) in &kept[..kept.len() - max] {
            if let Some(e) = self.jobs.get_mut(id) {
                *slot(e) = None;
            }
        }
    }

    /// The answer merged as job `id`'s results were accepted, if it covers every stored output; taken, since a
    /// finished job's answer is computed once and then kept (see [`Core::keep_result`]).
    pub fn take_merged(&mut self, id: JobId) -> Option<AnswerMerge> {
        let e = self.jobs.get_mut(&id)?;
        if !e.record.state.is_finished() {
            return None;
        }
        e.merged.take()
    }

    /// Keeps a finished job's answer, so it is computed once; only the [`MAX_KEPT_RESULTS`] most recently
    /// finished jobs keep theirs (the store can always rebuild one), so asking every job of a long-lived
    /// coordinator for its answer does not pile them all up in memory.
    pub fn keep_result(&mut self, id: JobId, result: KeptAnswer) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.result = Some(result);
        }
        self.keep_latest_finished(MAX_KEPT_RESULTS, |e| &mut e.result);
    }

    pub fn lease_ttl_ms(&self) -> u64 {
        self.sched.config().lease_ttl_ms
    }

    /// Workers by name with when they were last heard from (for the liveness gauges).
    pub fn last_seen(&self) -> impl Iterator<Item = (&str, u64)> {
        self.workers
            .iter()
            .map(|(n, w)| (n.as_str(), w.last_seen_ms))
    }
}

impl JobEntry {
    fn new(
        record: JobRecord,
        job: Arc<dyn Job>,
        tally: Tally,
        merged: Option<AnswerMerge>,
    ) -> JobEntry {
        let params_json = record.params.to_string();
        JobEntry {
            record,
            job,
            params_json,
            tally,
            result: None,
            artifact: None,
            failures: VecDeque::new(),
            estimates: None,
            merged,
        }
    }

    /// Whether the job could use chunk estimates: running or paused, of unknown size, not given them yet.
    fn wants_estimates(&self) -> bool {
        self.record.total_nodes.is_none()
            && !self.record.state.is_finished()
            && self.estimates.is_none()
            && self.record.n_chunks <= MAX_ESTIMATED_CHUNKS
    }
}
