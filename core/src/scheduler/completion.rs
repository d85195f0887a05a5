//! Results: a verified result accepted or counted as a replication vote, duplicates answered, refused results
//! charged to their worker, and a job finished when its last chunk settles. Apart because it is where
//! exactly-once counting is decided.

use super::{Completion, Dirty, JobId, JobSched, JobState, LeaseId, Scheduler, Slot};

impl Scheduler {
    /// Records a verified result for `chunk` of `job`, reported under `lease`, for jobs without replication.
    pub fn complete(&mut self, job: JobId, chunk: u64, lease: LeaseId) -> Completion {
        self.complete_vote(job, chunk, lease, "", "")
    }

    /// Records a verified result for `chunk` of `job`, reported under `lease` by `worker` with `digest`: accepted
    /// at once without replication, else counted as a vote.
    pub fn complete_vote(
        &mut self,
        job: JobId,
        chunk: u64,
        lease: LeaseId,
        worker: &str,
        digest: &str,
    ) -> Completion {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Completion::Rejected(format!("no job {job}"));
        };
        if j.state == JobState::Cancelled {
            return Completion::Rejected(format!("job {job} was cancelled"));
        }
        let max_attempts = j.max_attempts(self.cfg.max_attempts);
        let Some(mut slot) = j.chunks.get(chunk) else {
            return Completion::Rejected(format!("job {job} has no chunk {chunk}"));
        };
        if slot == Slot::Done {
            return Completion::Duplicate;
        }
        let mut outvoted = Vec::new();
        if j.replicate > 1 {
            let needed = j.replicate;
            let votes = j.votes.entry(chunk).or_default();
            let already = votes.iter().any(|(w, _)| w == worker);
            if !already {
                votes.push((worker.to_string(), digest.to_string()));
                // Votes are durable: a restarted coordinator must not ask for them again (nor forget a liar's).
                self.dirty.votes.push((job, chunk));
            }
            let agreeing = votes.iter().filter(|(_, d)| d == digest).count() as u32;
            let disagreement = !already && votes.iter().any(|(_, d)| d != digest);
            if disagreement {
                j.counts.disagreements += 1;
            }
            if agreeing < needed {
                let too_many = votes.len() as u32 >= needed + max_attempts;
                // This worker's lease ends with its vote; another worker gets the chunk.
                if let Slot::Leased {
                    lease: held,
                    attempts,
                } = slot
                {
                    if held == lease {
                        if let Some(info) = self.leases.remove(&held) {
                            self.fair
                                .lease_ended(job, info.charge, self.clock, true, true);
                        }
                        j.counts.leased -= 1;
                        slot = Slot::Pending { attempts };
                        j.retry.push_back(chunk);
                        self.dirty.chunks.push((job, chunk));
                    }
                }
                let mut poisoned = false;
                if too_many {
                    if let Slot::Pending { attempts } = slot {
                        slot = Slot::Poisoned { attempts };
                        j.counts.poisoned += 1;
                        j.retry.retain(|&c| c != chunk);
                        self.dirty.chunks.push((job, chunk));
                        Self::maybe_finish(job, j, &mut self.dirty);
                        poisoned = true;
                    }
                }
                j.chunks.set(chunk, slot);
                self.sync_queue(job);
                return Completion::Voted {
                    agreeing,
                    needed,
                    disagreement,
                    poisoned,
                };
            }
            outvoted = votes
                .iter()
                .filter(|(_, d)| d != digest)
                .map(|(w, _)| w.clone())
                .collect();
            if j.votes.remove(&chunk).is_some() {
                self.dirty.votes.push((job, chunk));
            }
            j.retry.retain(|&c| c != chunk);
        }
        match slot {
            Slot::Done => return Completion::Duplicate,
            Slot::Leased { lease: held, .. } => {
                if let Some(info) = self.leases.remove(&held) {
                    self.fair
                        .lease_ended(job, info.charge, self.clock, true, true);
                }
                j.counts.leased -= 1;
            }
            Slot::Poisoned { .. } => j.counts.poisoned -= 1,
            Slot::Pending { .. } => {}
        }
        // A reporter's own lease may already have been re-granted to someone else and be gone; drop it if not.
        if let Some(info) = self.leases.get(&lease) {
            if info.job == job && info.chunk == chunk {
                if let Some(info) = self.leases.remove(&lease) {
                    self.fair
                        .lease_ended(job, info.charge, self.clock, true, false);
                }
            }
        }
        j.chunks.set(chunk, Slot::Done);
        j.counts.done += 1;
        let finished = Self::maybe_finish(job, j, &mut self.dirty);
        self.sync_queue(job);
        for w in &outvoted {
            self.record_bad_result(w);
        }
        Completion::Accepted {
            job_finished: finished,
            outvoted,
        }
    }

    pub(super) fn maybe_finish(
        job: JobId,
        j: &mut JobSched,
        dirty: &mut Dirty,
    ) -> Option<JobState> {
        if j.state.is_finished() || j.counts.done + j.counts.poisoned < j.counts.total {
            return None;
        }
        j.state = if j.counts.poisoned > 0 {
            JobState::DoneWithPoisonedChunks
        } else {
            JobState::Done
        };
        dirty.jobs.push(job);
        Some(j.state)
    }

    /// `worker`'s result for `chunk` of `job` failed verification: it counts against the worker, the attempt
    /// counts against the chunk (if the lease is still the chunk's), and the chunk goes to other workers only.
    /// Returns whether the worker is now refused work.
    pub fn reject_result(&mut self, job: JobId, chunk: u64, lease: LeaseId, worker: &str) -> bool {
        let key = self.standing(worker).to_string();
        if let Some(j) = self.jobs.get_mut(&job) {
            if chunk < j.chunks.total() {
                j.refused.entry(chunk).or_default().push(key);
            }
        }
        if self.lease_job_chunk(lease) == Some((job, chunk)) {
            self.fail(lease, false);
        }
        self.record_bad_result(worker)
    }
}
