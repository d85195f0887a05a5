//! Rebuilding the scheduler from stored chunk records, done bits and votes at start-up. Apart because it is
//! the one path that trusts stored state instead of deciding it, and runs once per process.

use super::{ChunkBits, ChunkRecord, JobId, LeaseInfo, Scheduler, Slot, Vote};

impl Scheduler {
    /// Restores one chunk's stored state at start-up. Leases keep their stored deadline, so a worker that
    /// survived the coordinator's restart can still heartbeat and complete them.
    pub fn restore_chunk(&mut self, job: JobId, chunk: u64, rec: &ChunkRecord) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if chunk >= j.chunks.total() {
            return;
        }
        let slot = match rec {
            ChunkRecord::Pending { attempts } => {
                if *attempts > 0 {
                    j.retry.push_back(chunk);
                }
                Slot::Pending {
                    attempts: *attempts,
                }
            }
            ChunkRecord::Leased {
                lease,
                worker,
                deadline,
                attempts,
            } => {
                j.counts.leased += 1;
                // Its grant's charge was lost with the old process: it is charged from about its last
                // heartbeat (a deadline is a lease time after one) when it ends.
                let charge = self
                    .fair
                    .lease_restored(job, deadline.saturating_sub(self.cfg.lease_ttl_ms));
                self.leases.insert(
                    *lease,
                    LeaseInfo {
                        job,
                        chunk,
                        worker: worker.clone(),
                        deadline: *deadline,
                        charge,
                    },
                );
                self.next_lease = self.next_lease.max(lease + 1);
                Slot::Leased {
                    lease: *lease,
                    attempts: *attempts,
                }
            }
            ChunkRecord::Done { .. } => {
                j.counts.done += 1;
                Slot::Done
            }
            ChunkRecord::Poisoned { attempts, .. } => {
                j.counts.poisoned += 1;
                Slot::Poisoned {
                    attempts: *attempts,
                }
            }
        };
        j.chunks.set(chunk, slot);
    }

    /// Restores a job's done chunks at start-up, all at once (a bit each, see [`ChunkBits`]).
    pub fn restore_done(&mut self, job: JobId, done: ChunkBits) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        j.chunks.restore_done(done);
        j.counts.done = j.chunks.done().len();
    }

    /// Restores the stored votes of a replicated chunk that is not accepted yet.
    pub fn restore_votes(&mut self, job: JobId, chunk: u64, votes: Vec<Vote>) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if chunk < j.chunks.total() && !votes.is_empty() {
            j.votes.insert(
                chunk,
                votes.into_iter().map(|v| (v.worker, v.digest)).collect(),
            );
        }
    }

    /// The votes a replicated chunk has so far (empty once it is accepted), as the store keeps them.
    pub fn votes(&self, job: JobId, chunk: u64) -> Vec<Vote> {
        self.jobs
            .get(&job)
            .and_then(|j| j.votes.get(&chunk))
            .map(|v| {
                v.iter()
                    .map(|(worker, digest)| Vote {
                        worker: worker.clone(),
                        digest: digest.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Call once after restoring: the fresh scan skips chunks that restored as non-pending.
    pub fn finish_restore(&mut self) {
        for j in self.jobs.values_mut() {
            j.retry.make_contiguous().sort_unstable();
        }
        let ids: Vec<JobId> = self.jobs.keys().copied().collect();
        for id in ids {
            self.sync_queue(id);
        }
    }
}
