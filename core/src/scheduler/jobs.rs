//! A job's life in the scheduler: added, given its attempts and replication, held for its inputs, queried,
//! cancelled, paused and resumed. Apart from leasing and completion because these change a job as a whole,
//! and the others one chunk at a time.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::chunk_map::ChunkMap;
use super::{
    ChunkCounts, ChunkRecord, FairSpec, JobId, JobSched, JobState, LeaseId, SchedError, Scheduler,
    Slot,
};

impl Scheduler {
    /// Registers a job whose chunks are all pending (new) or about to be restored with [`Self::restore_chunk`].
    pub fn add_job(&mut self, job: JobId, priority: i32, n_chunks: u64, state: JobState) {
        let counts = ChunkCounts {
            total: n_chunks,
            ..Default::default()
        };
        self.jobs.insert(
            job,
            JobSched {
                priority,
                state,
                chunks: ChunkMap::new(n_chunks),
                next_fresh: 0,
                retry: VecDeque::new(),
                counts,
                waiting_for: BTreeSet::new(),
                replicate: 1,
                votes: HashMap::new(),
                refused: HashMap::new(),
                max_attempts: None,
            },
        );
        self.fair.add_job(job, priority, FairSpec::default());
        self.sync_queue(job);
    }

    /// Chunks of `job` are poisoned after `n` failed or expired attempts (at most the coordinator's
    /// `max_attempts`); `None`: after the coordinator's.
    pub fn set_max_attempts(&mut self, job: JobId, n: Option<u32>) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.max_attempts = n;
        }
    }

    /// The attempts a chunk of `job` gets before it is poisoned, as the scheduler applies them.
    pub fn max_attempts(&self, job: JobId) -> Option<u32> {
        self.jobs
            .get(&job)
            .map(|j| j.max_attempts(self.cfg.max_attempts))
    }

    /// Every chunk of `job` needs `k` agreeing results from distinct workers.
    pub fn set_replication(&mut self, job: JobId, k: u32) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.replicate = k.max(1);
        }
    }

    /// Holds `job` back until [`Self::input_ready`] has been called for `input` (and for every other input it
    /// waits for).
    pub fn wait_for_input(&mut self, job: JobId, input: JobId) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.waiting_for.insert(input);
        }
        self.sync_queue(job);
    }

    /// `input`'s artifact is stored: jobs waiting for it wait only for their other inputs, if any.
    pub fn input_ready(&mut self, input: JobId) {
        let mut freed = Vec::new();
        for (id, j) in self.jobs.iter_mut() {
            if j.waiting_for.remove(&input) && j.waiting_for.is_empty() {
                freed.push(*id);
            }
        }
        for id in freed {
            self.sync_queue(id);
        }
    }

    /// The inputs `job` still waits for, in id order (empty: its chunks may be leased).
    pub fn waiting_for(&self, job: JobId) -> Vec<JobId> {
        self.jobs
            .get(&job)
            .map(|j| j.waiting_for.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn job_state(&self, job: JobId) -> Option<JobState> {
        self.jobs.get(&job).map(|j| j.state)
    }

    pub fn counts(&self, job: JobId) -> Option<ChunkCounts> {
        self.jobs.get(&job).map(|j| j.counts)
    }

    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.keys().copied()
    }

    /// The durable record of a chunk that is not done (done records carry the result and are written by the
    /// caller that holds it).
    pub fn chunk_record(&self, job: JobId, chunk: u64) -> Option<ChunkRecord> {
        let slot = self.jobs.get(&job)?.chunks.get(chunk)?;
        Some(match slot {
            Slot::Pending { attempts } => ChunkRecord::Pending { attempts },
            Slot::Leased { lease, attempts } => {
                let info = self.leases.get(&lease)?;
                ChunkRecord::Leased {
                    lease,
                    worker: info.worker.clone(),
                    deadline: info.deadline,
                    attempts,
                }
            }
            Slot::Poisoned { attempts } => ChunkRecord::Poisoned {
                attempts,
                last_error: String::new(),
            },
            Slot::Done => return None,
        })
    }

    /// The chunks of a job that are done, in order (none for an unknown job).
    pub fn done_chunks(&self, job: JobId) -> impl Iterator<Item = u64> + '_ {
        self.jobs
            .get(&job)
            .into_iter()
            .flat_map(|j| j.chunks.done().iter())
    }

    /// Outstanding leases of a job: (lease, chunk, worker).
    pub fn leases_of(&self, job: JobId) -> Vec<(LeaseId, u64, String)> {
        let mut v: Vec<_> = self
            .leases
            .iter()
            .filter(|(_, l)| l.job == job)
            .map(|(id, l)| (*id, l.chunk, l.worker.clone()))
            .collect();
        v.sort();
        v
    }

    pub fn lease_job_chunk(&self, lease: LeaseId) -> Option<(JobId, u64)> {
        self.leases.get(&lease).map(|l| (l.job, l.chunk))
    }

    pub fn cancel(&mut self, job: JobId) -> Result<(), SchedError> {
        let j = self.jobs.get_mut(&job).ok_or(SchedError::UnknownJob(job))?;
        if j.state.is_finished() {
            return Err(SchedError::BadTransition {
                job,
                state: j.state.as_str(),
                action: "cancel",
            });
        }
        j.state = JobState::Cancelled;
        self.dirty.jobs.push(job);
        // Its leases are revoked: heartbeats for them answer "drop it".
        let ids: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.job == job)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(info) = self.leases.remove(&id) {
                self.fair
                    .lease_ended(job, info.charge, self.clock, true, false);
                if let Some(Slot::Leased { attempts, .. }) = j.chunks.get(info.chunk) {
                    j.chunks.set(info.chunk, Slot::Pending { attempts });
                    j.counts.leased -= 1;
                    self.dirty.chunks.push((job, info.chunk));
                }
            }
        }
        self.sync_queue(job);
        Ok(())
    }

    pub fn pause(&mut self, job: JobId) -> Result<(), SchedError> {
        self.transition(job, JobState::Running, JobState::Paused, "pause")
    }

    pub fn resume(&mut self, job: JobId) -> Result<(), SchedError> {
        self.transition(job, JobState::Paused, JobState::Running, "resume")
    }

    fn transition(
        &mut self,
        job: JobId,
        from: JobState,
        to: JobState,
        action: &'static str,
    ) -> Result<(), SchedError> {
        let j = self.jobs.get_mut(&job).ok_or(SchedError::UnknownJob(job))?;
        if j.state != from {
            return Err(SchedError::BadTransition {
                job,
                state: j.state.as_str(),
                action,
            });
        }
        j.state = to;
        self.dirty.jobs.push(job);
        self.sync_queue(job);
        Ok(())
    }
}
