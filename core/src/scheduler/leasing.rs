//! Handing chunks out and taking them back: the fair-share lease, heartbeats, failures, extensions and
//! expiry. Apart from completion because a lease's end here returns the chunk to pending (or poisons it),
//! while completion settles it.

use std::collections::HashSet;

use super::{
    Expired, FailOutcome, Grant, JobId, JobSched, LeaseId, LeaseInfo, Millis, Scheduler, Slot,
    FAIR_RUN,
};

impl Scheduler {
    /// Up to `max` chunks for `worker`: running jobs by priority (highest first), then by fair share (see
    /// [`fair`]); retries before fresh chunks within a job.
    pub fn lease(&mut self, now: Millis, worker: &str, max: usize) -> Vec<Grant> {
        self.lease_where(now, worker, max, &|_| true)
    }

    /// [`Scheduler::lease`] from the jobs `runnable` accepts only: a worker gets chunks of the spaces it
    /// declared (a worker started without `--allow-exec` never gets an `exec` chunk).
    ///
    /// Each pick takes the first queued job in order that `runnable` accepts and that has a chunk this worker
    /// may take, and grants it a run of up to [`FAIR_RUN`] chunks, each charged, which moves the job in the
    /// order: O(log jobs) per chunk when the first job fits the worker, plus one step per job skipped.
    pub fn lease_where(
        &mut self,
        now: Millis,
        worker: &str,
        max: usize,
        runnable: &dyn Fn(JobId) -> bool,
    ) -> Vec<Grant> {
        self.advance(now);
        if self.is_banned(worker) || self.is_draining(worker) {
            return Vec::new();
        }
        let standing = self.standing(worker).to_string();
        let mut grants = Vec::new();
        // Jobs with no chunk for this worker in this call (every pending one excluded), or not runnable here.
        let mut skip: HashSet<JobId> = HashSet::new();
        while grants.len() < max {
            let Some(job) = self
                .fair
                .first_where(|id| !skip.contains(&id) && runnable(id))
            else {
                break;
            };
            // A run of the job's chunks, each charged, before the order is looked at again.
            let mut run = 0;
            while run < FAIR_RUN && grants.len() < max {
                let Some(j) = self.jobs.get_mut(&job) else {
                    break;
                };
                let Some((chunk, attempts)) = Self::take_chunk(j, worker, &standing) else {
                    break;
                };
                grants.push(self.grant(job, chunk, attempts, worker, now));
                run += 1;
            }
            if run == 0 {
                skip.insert(job);
            }
            self.sync_queue(job);
        }
        grants
    }

    /// Leases pending `chunk` (with `attempts` used) of `job` to `worker` until a lease time from `now`.
    pub(super) fn grant(
        &mut self,
        job: JobId,
        chunk: u64,
        attempts: u32,
        worker: &str,
        now: Millis,
    ) -> Grant {
        let deadline = now + self.cfg.lease_ttl_ms;
        let lease = self.next_lease;
        self.next_lease += 1;
        if let Some(j) = self.jobs.get_mut(&job) {
            if attempts > 0 {
                j.counts.reissued += 1;
            }
            j.chunks.set(chunk, Slot::Leased { lease, attempts });
            j.counts.leased += 1;
        }
        let charge = self.fair.lease_granted(job, now);
        self.leases.insert(
            lease,
            LeaseInfo {
                job,
                chunk,
                worker: worker.to_string(),
                deadline,
                charge,
            },
        );
        self.dirty.chunks.push((job, chunk));
        Grant {
            lease,
            job,
            chunk,
            deadline,
        }
    }

    /// The next pending chunk of `j` that `worker` may have (retries first, then fresh ones), with the attempts
    /// it has used; `None` when there is none for it. Chunks this worker must not get (it voted on them, or
    /// its result for them was refused) stay at the front of the retry queue, in order.
    fn take_chunk(j: &mut JobSched, worker: &str, standing: &str) -> Option<(u64, u32)> {
        let mut skipped = Vec::new();
        let found = loop {
            let chunk = if let Some(c) = j.retry.pop_front() {
                c
            } else if j.next_fresh < j.counts.total {
                j.next_fresh += 1;
                j.next_fresh - 1
            } else {
                break None;
            };
            if j.excludes(chunk, worker, standing) {
                skipped.push(chunk);
                continue;
            }
            if let Some(Slot::Pending { attempts }) = j.chunks.get(chunk) {
                break Some((chunk, attempts));
            }
        };
        for c in skipped.into_iter().rev() {
            j.retry.push_front(c);
        }
        found
    }

    /// Extends the leases `worker` still holds; returns the ones it should drop (unknown, someone else's, or of
    /// a job that was cancelled).
    pub fn heartbeat(&mut self, now: Millis, worker: &str, leases: &[LeaseId]) -> Vec<LeaseId> {
        self.advance(now);
        let deadline = now + self.cfg.lease_ttl_ms;
        let mut revoked = Vec::new();
        for &id in leases {
            match self.leases.get_mut(&id) {
                Some(info) if info.worker == worker => {
                    info.deadline = deadline;
                    self.dirty.chunks.push((info.job, info.chunk));
                }
                _ => revoked.push(id),
            }
        }
        revoked
    }

    /// A worker gave up on a lease: `release` hands it back unstarted (no attempt used), otherwise it failed.
    pub fn fail(&mut self, lease: LeaseId, release: bool) -> FailOutcome {
        let Some(info) = self.leases.remove(&lease) else {
            return FailOutcome::Stale;
        };
        self.back_to_pending(&info, !release)
    }

    /// Moves every lease's deadline `by` later, for a time in which the coordinator itself was not running (its
    /// process stopped, the machine suspended) or its clock jumped: no worker could renew a lease then, and
    /// expiring them all would start every running chunk again. Returns how many leases were extended.
    pub fn extend_leases(&mut self, by: Millis) -> usize {
        for l in self.leases.values_mut() {
            l.deadline = l.deadline.saturating_add(by);
            self.dirty.chunks.push((l.job, l.chunk));
        }
        self.leases.len()
    }

    /// Returns every lease whose deadline has passed to pending (or poisons it: an expiry is a failed attempt,
    /// so a chunk that keeps killing its workers cannot hold a job up forever).
    pub fn expire(&mut self, now: Millis) -> Vec<Expired> {
        self.advance(now);
        let mut gone: Vec<(LeaseId, LeaseInfo)> = self
            .leases
            .iter()
            .filter(|(_, l)| l.deadline < now)
            .map(|(id, l)| (*id, l.clone()))
            .collect();
        gone.sort_by_key(|(id, _)| *id);
        let mut out = Vec::new();
        for (id, info) in gone {
            self.leases.remove(&id);
            let poisoned = self.back_to_pending(&info, true) == FailOutcome::Poisoned;
            out.push(Expired {
                lease: id,
                job: info.job,
                chunk: info.chunk,
                poisoned,
            });
        }
        out
    }

    fn back_to_pending(&mut self, info: &LeaseInfo, counts_as_attempt: bool) -> FailOutcome {
        // A failed or expired attempt used its time; a lease handed back unstarted did not.
        self.fair
            .lease_ended(info.job, info.charge, self.clock, counts_as_attempt, false);
        let outcome = self.back_to_pending_slot(info, counts_as_attempt);
        self.sync_queue(info.job);
        outcome
    }

    fn back_to_pending_slot(&mut self, info: &LeaseInfo, counts_as_attempt: bool) -> FailOutcome {
        let Some(j) = self.jobs.get_mut(&info.job) else {
            return FailOutcome::Stale;
        };
        let max_attempts = j.max_attempts(self.cfg.max_attempts);
        let Some(Slot::Leased { attempts, .. }) = j.chunks.get(info.chunk) else {
            return FailOutcome::Stale;
        };
        j.counts.leased -= 1;
        let attempts = attempts + u32::from(counts_as_attempt);
        self.dirty.chunks.push((info.job, info.chunk));
        if attempts >= max_attempts {
            j.chunks.set(info.chunk, Slot::Poisoned { attempts });
            j.counts.poisoned += 1;
            Self::maybe_finish(info.job, j, &mut self.dirty);
            FailOutcome::Poisoned
        } else {
            j.chunks.set(info.chunk, Slot::Pending { attempts });
            j.retry.push_back(info.chunk);
            FailOutcome::Retry
        }
    }
}
