//! Start-up: the core rebuilt from the store's [`Snapshot`], refusing a snapshot whose tallies disagree with its
//! done chunks (the answer would be wrong), and finishing what a crash interrupted (merges, cancels of readers
//! whose inputs ended).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sweep_space::SpaceJob;
use tracing::info;

use crate::limits::{Limits, Usage};
use crate::records::Snapshot;
use crate::scheduler::{JobId, JobState, Millis, Scheduler, SchedulerConfig};
use crate::state::{Core, JobEntry};
use crate::submit::{fair_spec, hold_for_inputs};

/// Rebuilds a job from its space and canonical parameters (the registry), or says why it cannot.
pub type JobOf<'a> = &'a dyn Fn(&str, &serde_json::Value) -> Result<SpaceJob, String>;

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
        for rec in &snap.jobs {
            let tallied = snap.tallies.get(&rec.id).map_or(0, |t| t.chunks);
            let counted = snap
                .done
                .get(&rec.id)
                .map_or(0, |d| d.count_below(rec.slots()));
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
        for rec in &snap.identities {
            if let Some(share) = rec.share {
                sched.set_identity_share(&rec.identity, share);
            }
            sched.restore_identity_use(&rec.identity, rec.decayed_thread_ms, rec.at_ms);
        }
        let mut jobs = BTreeMap::new();
        for rec in snap.jobs {
            let job =
                job_of(&rec.space, &rec.params).map_err(|why| OpenError::UnknownStoredJob {
                    job: rec.id,
                    space: rec.space.clone(),
                    why,
                })?;
            sched.add_job(rec.id, rec.priority, rec.n_chunks, rec.state);
            sched.restore_pieces(rec.id, rec.pieces);
            sched.set_fair(rec.id, rec.priority, fair_spec(&rec, &job));
            sched.set_replication(rec.id, rec.replicate);
            sched.set_max_attempts(rec.id, rec.max_attempts);
            sched.restore_job_use(rec.id, rec.use_per_share_ms);
            let tally = snap.tallies.get(&rec.id).cloned().unwrap_or_default();
            // Results accepted before the restart are only in the store: its answer is read from there.
            jobs.insert(rec.id, JobEntry::new(rec, job, tally, None));
        }
        for (job, slot, part) in snap.parts {
            if let Some(e) = jobs.get_mut(&job) {
                if slot < e.record.slots() {
                    e.parts.insert(slot, part);
                }
            }
        }
        let mut restored = 0u64;
        for (job, chunk, rec) in &snap.chunks {
            sched.restore_chunk(*job, *chunk, rec);
            restored += 1;
        }
        // The scheduler keeps no digest, a bit per done chunk: a duplicate result's digest is read from the
        // store when one arrives.
        for (job, done) in snap.done {
            restored += done.len();
            if let Some(e) = jobs.get_mut(&job) {
                let parted: Vec<u64> = e
                    .parts
                    .keys()
                    .copied()
                    .filter(|s| done.contains(*s))
                    .collect();
                for slot in parted {
                    e.slot_done(slot);
                }
            }
            sched.restore_done(job, done);
        }
        let mut to_merge = Vec::new();
        let mut to_estimate = Vec::new();
        for e in jobs.values() {
            if e.wants_estimates() {
                to_estimate.push(e.record.id);
            }
            // An input done before the crash whose artifact is not stored yet is merged below (every done job
            // without a digest is), so what `hold_for_inputs` returns is already covered.
            hold_for_inputs(&mut sched, &jobs, e.record.id, &e.record.input_jobs);
            // Killed between a job's end and the merge of its artifact: merge it now (a no-op for jobs
            // without artifacts).
            if e.record.state == JobState::Done && e.record.artifact_digest.is_none() {
                to_merge.push(e.record.id);
            }
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
            job_changes: 0,
            usage,
            usage_dirty: BTreeSet::new(),
            limits,
            identities_saved_ms: now,
            split_asks: HashMap::new(),
            splits_looked_ms: 0,
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
}
