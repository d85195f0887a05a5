//! Pieces: parts of a running chunk given away while it runs (work following the idle threads). A piece is
//! one more slot of its job, numbered after the plan's chunks and every earlier piece, and from then on it is a
//! chunk like any other here: leased, expired, retried, poisoned, completed exactly once. What part of which
//! plan chunk a slot searches is the core's business (it checks splits and results against it); the scheduler
//! only counts slots and knows which leases it would like split.

use super::{Grant, JobId, JobState, LeaseId, Millis, Scheduler, Slot};

/// How long a lease asked to split is left alone before it may be asked again: a kernel that declined (too
/// little left) or a worker that has not heartbeat yet is not asked on every lease request.
pub const SPLIT_ASK_INTERVAL_MS: Millis = 2_000;

impl Scheduler {
    /// Whether `lease` is outstanding and held by `worker`.
    pub fn holds(&self, worker: &str, lease: LeaseId) -> bool {
        self.leases.get(&lease).is_some_and(|l| l.worker == worker)
    }

    /// Adds a pending slot to running `job` for a part split off one of its running chunks, and returns its
    /// number; with `take`, leases it to `worker` at once (the worker has a thread for it). `None` when the
    /// job is unknown or not running.
    pub fn add_piece(
        &mut self,
        job: JobId,
        take: Option<&str>,
        now: Millis,
    ) -> Option<(u64, Option<Grant>)> {
        self.advance(now);
        let j = self.jobs.get_mut(&job)?;
        if j.state != JobState::Running {
            return None;
        }
        let slot = j.chunks.grow();
        j.counts.total += 1;
        j.counts.pieces += 1;
        self.dirty.jobs.push(job);
        let grant = match take {
            Some(worker) if !self.is_banned(worker) && !self.is_draining(worker) => {
                // Not left to the fresh scan: it passes over a slot that is no longer pending.
                Some(self.grant(job, slot, 0, worker, now))
            }
            _ => None,
        };
        self.sync_queue(job);
        Some((slot, grant))
    }

    /// Every outstanding lease, in id order.
    pub fn all_leases(&self) -> Vec<LeaseId> {
        let mut v: Vec<LeaseId> = self.leases.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Sets how many of `job`'s slots are pieces (start-up, before its slots are restored).
    pub fn restore_pieces(&mut self, job: JobId, pieces: u64) {
        if let Some(j) = self.jobs.get_mut(&job) {
            for _ in 0..pieces {
                j.chunks.grow();
            }
            j.counts.total += pieces;
            j.counts.pieces += pieces;
            self.sync_queue(job);
        }
    }

    /// Whether `job` has a slot nobody holds that could be leased now (a thread that asks gets work without a
    /// split).
    pub fn has_leasable(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.retry
                .iter()
                .any(|&c| matches!(j.chunks.get(c), Some(Slot::Pending { .. })))
                || j.next_fresh < j.counts.total
        })
    }

    /// The running jobs that have leased slots and none to lease: the jobs a split would help.
    pub fn tail_jobs(&self) -> Vec<JobId> {
        self.jobs
            .iter()
            .filter(|(id, j)| {
                j.state == JobState::Running
                    && j.counts.leased > 0
                    && j.replicate <= 1
                    && !self.has_leasable(**id)
            })
            .map(|(id, _)| *id)
            .collect()
    }
}
