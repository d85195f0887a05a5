//! A worker's side of a chunk: lease requests, heartbeats (progress, resume states, revoked leases), failed or
//! released attempts, and the expiry of leases nobody renewed. Each decision is the scheduler's; the core adds
//! what the scheduler does not keep (spaces a worker runs, progress, resume states, failure messages) and stages
//! the writes.

use tracing::{info, warn};

use crate::error::CoreError;
use crate::placement::fits;
use crate::records::Op;
use crate::scheduler::{Expired, FailOutcome, JobId, LeaseId, Millis};
use crate::state::Core;
use crate::views::{FailedAttempt, LeaseAnswer, LeaseView};

/// Upper bound on the chunks one lease request may ask for.
pub const MAX_LEASE_REQUEST: u32 = 4096;
/// Failed attempts a job keeps for `sweep status`: enough to see a pattern, bounded for a job whose every chunk
/// fails.
const MAX_FAILURES_SHOWN: usize = 20;
/// What one failed attempt's message may hold (a program's stderr tail is cut before this).
pub const MAX_FAILURE_BYTES: usize = 4096;

/// Progress of one running lease, from a heartbeat.
#[derive(Clone, Debug, Default)]
pub struct LeaseProgress {
    pub lease: LeaseId,
    pub nodes: u64,
    pub checkpoint: Option<String>,
    /// The generation of the part the checkpoint was saved in (see [`crate::PartRecord`]).
    pub generation: u32,
}

/// A heartbeat's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    /// Leases the worker no longer holds: stop them.
    pub revoked: Vec<LeaseId>,
    /// This coordinator does not know the worker (it restarted): register again.
    pub register_again: bool,
    /// Leases whose chunks the coordinator asks to split: threads elsewhere are idle.
    pub split: Vec<LeaseId>,
}

impl Core {
    /// One lease attempt: the chunks `worker` may have now (none when there is nothing to do).
    pub fn lease(
        &mut self,
        worker: &str,
        max_chunks: u32,
        now: Millis,
    ) -> Result<LeaseAnswer, CoreError> {
        self.lease_request(worker, max_chunks, 0, now)
    }

    /// [`Core::lease`] under a request id (0: none). A worker that did not get the answer to a request (its
    /// deadline passed, the connection broke, its own process was stopped while the answer came) asks again
    /// under the same id and gets the chunks that request was granted and still holds, their leases renewed:
    /// otherwise they would stay leased to nobody until they expire, and each would be charged an attempt.
    pub fn lease_request(
        &mut self,
        worker: &str,
        max_chunks: u32,
        request: u64,
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
        if request != 0 {
            if let Some(again) = self.lease_again(worker, request, now) {
                return Ok(LeaseAnswer::Chunks(again));
            }
        }
        let memory_bytes = self.workers.get(worker).map_or(0, |w| w.memory_bytes);
        let jobs = &self.jobs;
        // Per job, not per chunk: the cost of a lease stays with the number of jobs.
        let runnable = |id: JobId| {
            jobs.get(&id).is_some_and(|e| {
                spaces.contains(&e.record.space) && fits(e.record.chunk_memory, memory_bytes)
            })
        };
        let grants = self
            .sched
            .lease_where(now, worker, max_chunks as usize, &runnable);
        self.ask_splits(worker, max_chunks as usize - grants.len(), now);
        let leases = grants
            .iter()
            .filter_map(|g| self.lease_view(g.lease, g.job, g.chunk, g.deadline))
            .collect();
        if request != 0 {
            if let Some(w) = self.workers.get_mut(worker) {
                w.last_lease = Some((request, grants.iter().map(|g| g.lease).collect()));
            }
        }
        self.stage_dirty(now);
        Ok(LeaseAnswer::Chunks(leases))
    }

    /// The chunks `worker`'s last request, `request`, was granted and still holds, renewed; `None` when that
    /// was another request or it holds none of them now (its leases expired or were revoked).
    fn lease_again(&mut self, worker: &str, request: u64, now: Millis) -> Option<Vec<LeaseView>> {
        let (asked, granted) = self.workers.get(worker)?.last_lease.clone()?;
        if asked != request {
            return None;
        }
        let gone = self.sched.heartbeat(now, worker, &granted);
        let deadline = now + self.lease_ttl_ms();
        let leases: Vec<LeaseView> = granted
            .iter()
            .filter(|l| !gone.contains(l))
            .filter_map(|&l| {
                let (job, chunk) = self.sched.lease_job_chunk(l)?;
                self.lease_view(l, job, chunk, deadline)
            })
            .collect();
        if leases.is_empty() {
            return None;
        }
        info!(
            worker,
            request,
            chunks = leases.len(),
            "a lease request came again (its answer was lost): its chunks are handed back"
        );
        self.stage_dirty(now);
        Some(leases)
    }

    /// What a worker is told of lease `lease` of `chunk` of `job`, due at `deadline`.
    pub(crate) fn lease_view(
        &self,
        lease: LeaseId,
        job: JobId,
        chunk: u64,
        deadline: Millis,
    ) -> Option<LeaseView> {
        let e = self.jobs.get(&job)?;
        let part = e.slot_part(chunk);
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
            lease,
            job,
            space: e.record.space.clone(),
            params_json: e.params_json.clone(),
            n_chunks: e.record.n_chunks,
            chunk: part.chunk,
            slot: chunk,
            generation: part.generation,
            deadline_ms: deadline,
            inputs,
            // A checkpoint is a point inside the part; the part itself is where a run of it starts.
            checkpoint: self.checkpoints.get(&(job, chunk)).cloned().or(part.part),
            shipped: e.job.shipped(),
            count_only: e.record.listing.counts_only(),
        })
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
                    self.save_checkpoint(p.lease, state, p.generation);
                }
            }
        }
        self.stage_dirty(now);
        let register_again = self.workers.get(worker).is_some_and(|w| w.spaces.is_none());
        Ok(Beat {
            revoked,
            register_again,
            split: self.splits_for(worker),
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
        checkpoint: Option<(String, u32)>,
        now: Millis,
    ) -> Result<bool, CoreError> {
        self.check_writable()?;
        self.touch_worker(worker, now);
        self.sched.advance(now);
        let at = self.sched.lease_job_chunk(lease);
        if let Some((state, generation)) = checkpoint {
            self.save_checkpoint(lease, state, generation);
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
        Ok(outcome == FailOutcome::Poisoned)
    }

    /// Hands every outstanding lease back unstarted (no attempt used), for a coordinator that knows no worker
    /// can hold one: one in a process of its own (`sweep run`) that was interrupted and starts again. Its
    /// chunks resume from their recorded parts and states at once instead of waiting a lease time each.
    /// Returns how many leases there were.
    pub fn release_all_leases(&mut self, now: Millis) -> usize {
        self.sched.advance(now);
        let leases = self.sched.all_leases();
        for &lease in &leases {
            self.sched.fail(lease, true);
        }
        if !leases.is_empty() {
            info!(
                leases = leases.len(),
                "leases of workers that cannot have outlived the last run handed back"
            );
            self.stage_dirty(now);
        }
        leases.len()
    }

    /// Extends every lease by `gap`, a time the coordinator was not running (see
    /// [`Scheduler::extend_leases`](crate::scheduler::Scheduler::extend_leases)); the expirer calls it when its own tick comes that late.
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
    pub fn expire(&mut self, now: Millis) -> Vec<Expired> {
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

    /// Keeps a running chunk's newest resume state (and stages it for the store), if its lease is current and
    /// the state was saved in the generation of the slot's part: one saved before a split names a point of
    /// the part before it, and a restart from it would search the given part twice.
    fn save_checkpoint(&mut self, lease: LeaseId, state: String, generation: u32) {
        let Some((job, chunk)) = self.sched.lease_job_chunk(lease) else {
            return;
        };
        let current = self.jobs.get(&job).map(|e| e.slot_part(chunk).generation);
        if current != Some(generation) {
            return;
        }
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
}
