//! The lease/chunk state machine. Plain data, no I/O, time passed in as milliseconds: the gRPC handlers drive it
//! and persist what it decides, and the tests drive it with simulated time.
//!
//! A chunk is `Pending` (with the attempts it has used), `Leased` (to one worker until a deadline), `Done` or
//! `Poisoned`. Completion does not require a live lease: results are deterministic, so a late result from an
//! expired lease is as good as any, and accepting it saves re-running the chunk. What must never happen is a
//! second acceptance of the same chunk: `complete` on a done chunk answers `Duplicate`.
//!
//! Replication (BOINC's quorum): a job with `replicate = K > 1` accepts a chunk only when K results from K
//! different workers have the same digest. Each result is a vote; the chunk goes back to pending after each
//! vote and is never leased again to a worker that already voted on it, so replicas run on distinct workers.
//! Votes live in memory only: a coordinator restart forgets them and the chunk simply runs K times again.
//! Workers whose results fail verification or are outvoted are counted, and after
//! [`SchedulerConfig::max_bad_results`] they get no more work.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

pub type JobId = u64;
pub type LeaseId = u64;
/// Milliseconds since the Unix epoch (simulated in tests).
pub type Millis = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Running,
    Paused,
    Cancelled,
    Done,
    /// Every chunk is finished but some were poisoned: the answer is incomplete and says so.
    DoneWithPoisonedChunks,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Paused => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Done => "done",
            JobState::DoneWithPoisonedChunks => "done-with-poisoned-chunks",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Cancelled | JobState::Done | JobState::DoneWithPoisonedChunks
        )
    }
}

/// A chunk's durable state, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ChunkRecord {
    Pending {
        attempts: u32,
    },
    Leased {
        lease: LeaseId,
        worker: String,
        deadline: Millis,
        attempts: u32,
    },
    Done {
        digest: String,
        worker: String,
    },
    Poisoned {
        attempts: u32,
        last_error: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Pending { attempts: u32 },
    Leased { lease: LeaseId, attempts: u32 },
    Done,
    Poisoned { attempts: u32 },
}

#[derive(Clone, Debug)]
struct LeaseInfo {
    job: JobId,
    chunk: u64,
    worker: String,
    deadline: Millis,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub lease_ttl_ms: u64,
    /// Failed or expired attempts after which a chunk is poisoned; with replication, also the number of
    /// votes beyond K after which a chunk whose results keep disagreeing is poisoned.
    pub max_attempts: u32,
    /// Results that failed verification or were outvoted after which a worker is refused work.
    pub max_bad_results: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            lease_ttl_ms: 30_000,
            max_attempts: 3,
            max_bad_results: 3,
        }
    }
}

/// Counts of one job's chunks by state, and its lifetime counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    pub total: u64,
    pub done: u64,
    pub leased: u64,
    pub poisoned: u64,
    /// Chunks handed out again after an expiry or failure.
    pub reissued: u64,
    /// Replicated results that disagreed with an earlier result for the same chunk.
    pub disagreements: u64,
}

#[derive(Debug)]
struct JobSched {
    priority: i32,
    state: JobState,
    slots: Vec<Slot>,
    /// Chunks below this index have been considered by the fresh-lease scan; above it all are pending, unleased.
    next_fresh: u64,
    /// Pending chunks that were leased before (expired, failed, released), handed out before fresh ones.
    retry: VecDeque<u64>,
    counts: ChunkCounts,
    /// The jobs whose artifacts this one needs and that are not ready yet: no chunk is leased until every one
    /// of them is.
    waiting_for: BTreeSet<JobId>,
    /// Agreeing results (from distinct workers) a chunk needs; 1 = no replication.
    replicate: u32,
    /// Replicated chunks' votes so far: (worker, digest).
    votes: HashMap<u64, Vec<(String, String)>>,
    /// Workers whose result for a chunk failed verification: the chunk is never leased to them again, so one
    /// liar cannot use up a chunk's attempts and poison it.
    refused: HashMap<u64, Vec<String>>,
}

impl JobSched {
    /// Whether `worker` must not get `chunk`: it voted on it already, or its result for it was refused.
    fn excludes(&self, chunk: u64, worker: &str) -> bool {
        let has = |m: &HashMap<u64, Vec<String>>| {
            m.get(&chunk).is_some_and(|v| v.iter().any(|w| w == worker))
        };
        has(&self.refused)
            || self
                .votes
                .get(&chunk)
                .is_some_and(|v| v.iter().any(|(w, _)| w == worker))
    }
}

/// A lease handed to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub lease: LeaseId,
    pub job: JobId,
    pub chunk: u64,
    pub deadline: Millis,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The result is new: store it with the chunk.
    Accepted {
        job_finished: Option<JobState>,
        /// Workers whose replicated results lost the vote (each now has one more bad result).
        outvoted: Vec<String>,
    },
    /// A replicated chunk's vote, recorded; the chunk needs more agreeing results (or is poisoned when its
    /// results keep disagreeing). Nothing is stored yet.
    Voted {
        agreeing: u32,
        needed: u32,
        disagreement: bool,
        poisoned: bool,
    },
    /// The chunk was already done: compare digests, count nothing.
    Duplicate,
    Rejected(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailOutcome {
    Retry,
    Poisoned,
    /// The lease is not (or no longer) outstanding: nothing changed.
    Stale,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub lease: LeaseId,
    pub job: JobId,
    pub chunk: u64,
    pub poisoned: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error("no job {0}")]
    UnknownJob(JobId),
    #[error("job {job} is {state}; cannot {action}")]
    BadTransition {
        job: JobId,
        state: &'static str,
        action: &'static str,
    },
}

/// Which durable records changed since the last [`Scheduler::take_dirty`]: the caller writes exactly these.
#[derive(Debug, Default)]
pub struct Dirty {
    pub chunks: Vec<(JobId, u64)>,
    pub jobs: Vec<JobId>,
}

#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    jobs: BTreeMap<JobId, JobSched>,
    leases: HashMap<LeaseId, LeaseInfo>,
    next_lease: LeaseId,
    dirty: Dirty,
    /// Bad results per worker (failed verification, outvoted).
    bad_results: HashMap<String, u32>,
    /// Workers asked to finish what they hold and take nothing new.
    draining: std::collections::HashSet<String>,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, next_lease: LeaseId) -> Scheduler {
        Scheduler {
            cfg,
            jobs: BTreeMap::new(),
            leases: HashMap::new(),
            next_lease: next_lease.max(1),
            dirty: Dirty::default(),
            bad_results: HashMap::new(),
            draining: Default::default(),
        }
    }

    pub fn config(&self) -> SchedulerConfig {
        self.cfg
    }

    /// The next lease id to be granted; persisted so ids stay unique across restarts.
    pub fn next_lease_id(&self) -> LeaseId {
        self.next_lease
    }

    pub fn take_dirty(&mut self) -> Dirty {
        std::mem::take(&mut self.dirty)
    }

    /// Registers a job whose chunks are all pending (new) or about to be restored with [`Self::restore_chunk`].
    pub fn add_job(&mut self, job: JobId, priority: i32, n_chunks: u64, state: JobState) {
        let slots = vec![Slot::Pending { attempts: 0 }; n_chunks as usize];
        let counts = ChunkCounts {
            total: n_chunks,
            ..Default::default()
        };
        self.jobs.insert(
            job,
            JobSched {
                priority,
                state,
                slots,
                next_fresh: 0,
                retry: VecDeque::new(),
                counts,
                waiting_for: BTreeSet::new(),
                replicate: 1,
                votes: HashMap::new(),
                refused: HashMap::new(),
            },
        );
    }

    /// Every chunk of `job` needs `k` agreeing results from distinct workers.
    pub fn set_replication(&mut self, job: JobId, k: u32) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.replicate = k.max(1);
        }
    }

    /// Counts one bad result (failed verification, outvoted) against `worker`; true once it is refused work.
    pub fn record_bad_result(&mut self, worker: &str) -> bool {
        let n = self.bad_results.entry(worker.to_string()).or_insert(0);
        *n += 1;
        *n >= self.cfg.max_bad_results
    }

    pub fn bad_results(&self, worker: &str) -> u32 {
        self.bad_results.get(worker).copied().unwrap_or(0)
    }

    /// Refused work for too many bad results.
    pub fn is_banned(&self, worker: &str) -> bool {
        self.bad_results(worker) >= self.cfg.max_bad_results
    }

    /// `worker` finishes the chunks it holds and gets no new ones.
    pub fn drain(&mut self, worker: &str) {
        self.draining.insert(worker.to_string());
    }

    pub fn is_draining(&self, worker: &str) -> bool {
        self.draining.contains(worker)
    }

    /// Outstanding leases held by `worker`.
    pub fn leases_held(&self, worker: &str) -> usize {
        self.leases.values().filter(|l| l.worker == worker).count()
    }

    /// Holds `job` back until [`Self::input_ready`] has been called for `input` (and for every other input it
    /// waits for).
    pub fn wait_for_input(&mut self, job: JobId, input: JobId) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.waiting_for.insert(input);
        }
    }

    /// `input`'s artifact is stored: jobs waiting for it wait only for their other inputs, if any.
    pub fn input_ready(&mut self, input: JobId) {
        for j in self.jobs.values_mut() {
            j.waiting_for.remove(&input);
        }
    }

    /// The inputs `job` still waits for, in id order (empty: its chunks may be leased).
    pub fn waiting_for(&self, job: JobId) -> Vec<JobId> {
        self.jobs
            .get(&job)
            .map(|j| j.waiting_for.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Restores one chunk's stored state at start-up. Leases keep their stored deadline, so a worker that
    /// survived the coordinator's restart can still heartbeat and complete them.
    pub fn restore_chunk(&mut self, job: JobId, chunk: u64, rec: &ChunkRecord) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        let Some(slot) = j.slots.get_mut(chunk as usize) else {
            return;
        };
        *slot = match rec {
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
                self.leases.insert(
                    *lease,
                    LeaseInfo {
                        job,
                        chunk,
                        worker: worker.clone(),
                        deadline: *deadline,
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
    }

    /// Call once after restoring: the fresh scan skips chunks that restored as non-pending.
    pub fn finish_restore(&mut self) {
        for j in self.jobs.values_mut() {
            j.retry.make_contiguous().sort_unstable();
        }
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
        let slot = self.jobs.get(&job)?.slots.get(chunk as usize)?;
        Some(match *slot {
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

    /// Up to `max` chunks for `worker`: running jobs by priority (highest first), then by age; retries before
    /// fresh chunks within a job.
    pub fn lease(&mut self, now: Millis, worker: &str, max: usize) -> Vec<Grant> {
        self.lease_where(now, worker, max, &|_| true)
    }

    /// [`Scheduler::lease`] from the jobs `runnable` accepts only: a worker gets chunks of the spaces it
    /// declared (a worker started without `--allow-exec` never gets an `exec` chunk).
    pub fn lease_where(
        &mut self,
        now: Millis,
        worker: &str,
        max: usize,
        runnable: &dyn Fn(JobId) -> bool,
    ) -> Vec<Grant> {
        if self.is_banned(worker) || self.is_draining(worker) {
            return Vec::new();
        }
        let mut order: Vec<(i32, JobId)> = self
            .jobs
            .iter()
            .filter(|(id, j)| {
                j.state == JobState::Running && j.waiting_for.is_empty() && runnable(**id)
            })
            .map(|(id, j)| (j.priority, *id))
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let deadline = now + self.cfg.lease_ttl_ms;
        let mut grants = Vec::new();
        for (_, job) in order {
            let Some(j) = self.jobs.get_mut(&job) else {
                continue;
            };
            // Replicas this worker already voted on go back to the queue after the scan, in order.
            let mut skipped = Vec::new();
            while grants.len() < max {
                let chunk = if let Some(c) = j.retry.pop_front() {
                    c
                } else if j.next_fresh < j.counts.total {
                    j.next_fresh += 1;
                    j.next_fresh - 1
                } else {
                    break;
                };
                if j.excludes(chunk, worker) {
                    skipped.push(chunk);
                    continue;
                }
                let Some(slot) = j.slots.get_mut(chunk as usize) else {
                    continue;
                };
                let Slot::Pending { attempts } = *slot else {
                    continue;
                };
                if attempts > 0 {
                    j.counts.reissued += 1;
                }
                let lease = self.next_lease;
                self.next_lease += 1;
                *slot = Slot::Leased { lease, attempts };
                j.counts.leased += 1;
                self.leases.insert(
                    lease,
                    LeaseInfo {
                        job,
                        chunk,
                        worker: worker.to_string(),
                        deadline,
                    },
                );
                self.dirty.chunks.push((job, chunk));
                grants.push(Grant {
                    lease,
                    job,
                    chunk,
                    deadline,
                });
            }
            for c in skipped.into_iter().rev() {
                j.retry.push_front(c);
            }
            if grants.len() >= max {
                break;
            }
        }
        grants
    }

    /// Extends the leases `worker` still holds; returns the ones it should drop (unknown, someone else's, or of
    /// a job that was cancelled).
    pub fn heartbeat(&mut self, now: Millis, worker: &str, leases: &[LeaseId]) -> Vec<LeaseId> {
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
        let Some(slot) = j.slots.get_mut(chunk as usize) else {
            return Completion::Rejected(format!("job {job} has no chunk {chunk}"));
        };
        if *slot == Slot::Done {
            return Completion::Duplicate;
        }
        let mut outvoted = Vec::new();
        if j.replicate > 1 {
            let needed = j.replicate;
            let votes = j.votes.entry(chunk).or_default();
            let already = votes.iter().any(|(w, _)| w == worker);
            if !already {
                votes.push((worker.to_string(), digest.to_string()));
            }
            let agreeing = votes.iter().filter(|(_, d)| d == digest).count() as u32;
            let disagreement = !already && votes.iter().any(|(_, d)| d != digest);
            if disagreement {
                j.counts.disagreements += 1;
            }
            if agreeing < needed {
                let too_many = votes.len() as u32 >= needed + self.cfg.max_attempts;
                // This worker's lease ends with its vote; another worker gets the chunk.
                if let Slot::Leased {
                    lease: held,
                    attempts,
                } = *slot
                {
                    if held == lease {
                        self.leases.remove(&held);
                        j.counts.leased -= 1;
                        *slot = Slot::Pending { attempts };
                        j.retry.push_back(chunk);
                        self.dirty.chunks.push((job, chunk));
                    }
                }
                let mut poisoned = false;
                if too_many {
                    if let Slot::Pending { attempts } = *slot {
                        *slot = Slot::Poisoned { attempts };
                        j.counts.poisoned += 1;
                        j.retry.retain(|&c| c != chunk);
                        self.dirty.chunks.push((job, chunk));
                        Self::maybe_finish(job, j, &mut self.dirty);
                        poisoned = true;
                    }
                }
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
            j.votes.remove(&chunk);
            j.retry.retain(|&c| c != chunk);
        }
        match *slot {
            Slot::Done => return Completion::Duplicate,
            Slot::Leased { lease: held, .. } => {
                self.leases.remove(&held);
                j.counts.leased -= 1;
            }
            Slot::Poisoned { .. } => j.counts.poisoned -= 1,
            Slot::Pending { .. } => {}
        }
        // A reporter's own lease may already have been re-granted to someone else and be gone; drop it if not.
        if let Some(info) = self.leases.get(&lease) {
            if info.job == job && info.chunk == chunk {
                self.leases.remove(&lease);
            }
        }
        *slot = Slot::Done;
        j.counts.done += 1;
        let finished = Self::maybe_finish(job, j, &mut self.dirty);
        for w in &outvoted {
            *self.bad_results.entry(w.clone()).or_insert(0) += 1;
        }
        Completion::Accepted {
            job_finished: finished,
            outvoted,
        }
    }

    fn maybe_finish(job: JobId, j: &mut JobSched, dirty: &mut Dirty) -> Option<JobState> {
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
        if let Some(j) = self.jobs.get_mut(&job) {
            if (chunk as usize) < j.slots.len() {
                j.refused.entry(chunk).or_default().push(worker.to_string());
            }
        }
        if self.lease_job_chunk(lease) == Some((job, chunk)) {
            self.fail(lease, false);
        }
        self.record_bad_result(worker)
    }

    /// A worker gave up on a lease: `release` hands it back unstarted (no attempt used), otherwise it failed.
    pub fn fail(&mut self, lease: LeaseId, release: bool) -> FailOutcome {
        let Some(info) = self.leases.remove(&lease) else {
            return FailOutcome::Stale;
        };
        self.back_to_pending(&info, !release)
    }

    /// Returns every lease whose deadline has passed to pending (or poisons it: an expiry is a failed attempt,
    /// so a chunk that keeps killing its workers cannot hold a job up forever).
    pub fn expire(&mut self, now: Millis) -> Vec<Expired> {
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
        let Some(j) = self.jobs.get_mut(&info.job) else {
            return FailOutcome::Stale;
        };
        let Some(slot) = j.slots.get_mut(info.chunk as usize) else {
            return FailOutcome::Stale;
        };
        let Slot::Leased { attempts, .. } = *slot else {
            return FailOutcome::Stale;
        };
        j.counts.leased -= 1;
        let attempts = attempts + u32::from(counts_as_attempt);
        self.dirty.chunks.push((info.job, info.chunk));
        if attempts >= self.cfg.max_attempts {
            *slot = Slot::Poisoned { attempts };
            j.counts.poisoned += 1;
            Self::maybe_finish(info.job, j, &mut self.dirty);
            FailOutcome::Poisoned
        } else {
            *slot = Slot::Pending { attempts };
            j.retry.push_back(info.chunk);
            FailOutcome::Retry
        }
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
                if let Some(slot) = j.slots.get_mut(info.chunk as usize) {
                    if let Slot::Leased { attempts, .. } = *slot {
                        *slot = Slot::Pending { attempts };
                        j.counts.leased -= 1;
                        self.dirty.chunks.push((job, info.chunk));
                    }
                }
            }
        }
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(ttl: u64, max_attempts: u32) -> Scheduler {
        Scheduler::new(
            SchedulerConfig {
                lease_ttl_ms: ttl,
                max_attempts,
                max_bad_results: 3,
            },
            1,
        )
    }

    #[test]
    fn leases_every_chunk_once_then_nothing() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 5, JobState::Running);
        let g = s.lease(0, "w", 3);
        assert_eq!(g.iter().map(|g| g.chunk).collect::<Vec<_>>(), vec![0, 1, 2]);
        let g2 = s.lease(0, "w", 10);
        assert_eq!(g2.iter().map(|g| g.chunk).collect::<Vec<_>>(), vec![3, 4]);
        assert!(s.lease(0, "w", 10).is_empty());
        assert_eq!(s.counts(1).unwrap().leased, 5);
        let ids: Vec<LeaseId> = g.iter().chain(&g2).map(|g| g.lease).collect();
        let mut unique = ids.clone();
        unique.dedup();
        assert_eq!(ids, unique);
    }

    #[test]
    fn expiry_reissues_and_late_result_still_counts_once() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 1, JobState::Running);
        let first = s.lease(0, "a", 1).remove(0);
        // Heartbeats keep it alive past the original deadline.
        assert!(s.heartbeat(900, "a", &[first.lease]).is_empty());
        assert!(s.expire(1500).is_empty());
        // Silence: it expires and goes to another worker.
        let exp = s.expire(2000);
        assert_eq!(
            exp,
            vec![Expired {
                lease: first.lease,
                job: 1,
                chunk: 0,
                poisoned: false
            }]
        );
        assert_eq!(s.heartbeat(2001, "a", &[first.lease]), vec![first.lease]);
        let second = s.lease(2001, "b", 1).remove(0);
        assert_eq!(second.chunk, 0);
        assert_eq!(s.counts(1).unwrap().reissued, 1);
        // The slow first worker reports after all: accepted once, then the second report is a duplicate.
        assert_eq!(
            s.complete(1, 0, first.lease),
            Completion::Accepted {
                job_finished: Some(JobState::Done),
                outvoted: vec![]
            }
        );
        assert_eq!(s.complete(1, 0, second.lease), Completion::Duplicate);
        assert_eq!(s.counts(1).unwrap().done, 1);
        assert_eq!(s.counts(1).unwrap().leased, 0);
        assert!(s.leases_of(1).is_empty());
    }

    #[test]
    fn retry_cap_poisons_and_job_ends_marked() {
        let mut s = sched(100, 3);
        s.add_job(7, 0, 2, JobState::Running);
        let ok = s.lease(0, "w", 2);
        assert_eq!(
            s.complete(7, ok[0].chunk, ok[0].lease),
            Completion::Accepted {
                job_finished: None,
                outvoted: vec![]
            }
        );
        let mut lease = ok[1].lease;
        assert_eq!(s.fail(lease, false), FailOutcome::Retry);
        lease = s.lease(10, "w", 1)[0].lease;
        s.expire(1000);
        lease = {
            let _ = lease;
            s.lease(1000, "w", 1)[0].lease
        };
        assert_eq!(s.fail(lease, false), FailOutcome::Poisoned);
        assert_eq!(s.job_state(7), Some(JobState::DoneWithPoisonedChunks));
        assert_eq!(s.counts(7).unwrap().poisoned, 1);
        assert_eq!(s.fail(lease, false), FailOutcome::Stale);
    }

    #[test]
    fn release_does_not_use_an_attempt() {
        let mut s = sched(100, 1);
        s.add_job(1, 0, 1, JobState::Running);
        for _ in 0..5 {
            let g = s.lease(0, "w", 1).remove(0);
            assert_eq!(s.fail(g.lease, true), FailOutcome::Retry);
        }
        assert_eq!(s.job_state(1), Some(JobState::Running));
    }

    #[test]
    fn priority_then_age_decides() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 2, JobState::Running);
        s.add_job(2, 5, 2, JobState::Running);
        s.add_job(3, 5, 2, JobState::Running);
        let jobs: Vec<JobId> = s.lease(0, "w", 6).iter().map(|g| g.job).collect();
        assert_eq!(jobs, vec![2, 2, 3, 3, 1, 1]);
    }

    #[test]
    fn a_job_waits_for_its_input() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 1, JobState::Running);
        s.add_job(2, 9, 2, JobState::Running);
        s.wait_for_input(2, 1);
        // Job 2 has the higher priority but cannot start: only the input's chunk goes out.
        let g = s.lease(0, "w", 5);
        assert_eq!(g.iter().map(|g| g.job).collect::<Vec<_>>(), vec![1]);
        s.complete(1, 0, g[0].lease);
        assert!(
            s.lease(0, "w", 5).is_empty(),
            "the artifact is not stored yet"
        );
        assert_eq!(s.waiting_for(2), vec![1]);
        s.input_ready(1);
        assert_eq!(s.lease(0, "w", 5).len(), 2);
    }

    #[test]
    fn a_job_waits_for_every_one_of_its_inputs() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 1, JobState::Running);
        s.add_job(2, 0, 1, JobState::Running);
        s.add_job(3, 9, 2, JobState::Running);
        s.wait_for_input(3, 2);
        s.wait_for_input(3, 1);
        s.wait_for_input(3, 1);
        assert_eq!(s.waiting_for(3), vec![1, 2]);
        let g = s.lease(0, "w", 5);
        assert_eq!(g.iter().map(|g| g.job).collect::<Vec<_>>(), vec![1, 2]);
        for g in &g {
            s.complete(g.job, g.chunk, g.lease);
        }
        s.input_ready(1);
        assert!(s.lease(0, "w", 5).is_empty(), "input 2 is not stored yet");
        assert_eq!(s.waiting_for(3), vec![2]);
        // A job nobody waits for changes nothing.
        s.input_ready(7);
        assert_eq!(s.waiting_for(3), vec![2]);
        s.input_ready(2);
        assert!(s.waiting_for(3).is_empty());
        assert_eq!(s.lease(0, "w", 5).len(), 2);
    }

    /// A DAG of jobs (a chain, a job without inputs, joins of two and of three) through random leases,
    /// failures, expiries, late merges and two restarts from the durable records, in simulated time: no chunk
    /// is leased before every input of its job is done and merged, and every chunk is accepted exactly once.
    #[test]
    fn a_dag_of_jobs_runs_in_dependency_order_through_chaos_and_restarts() {
        let inputs: BTreeMap<JobId, Vec<JobId>> = [
            (1, vec![]),
            (2, vec![1]),
            (3, vec![2]),
            (4, vec![]),
            (5, vec![3, 4]),
            (6, vec![5, 1, 4]),
        ]
        .into_iter()
        .collect();
        let chunks = |job: JobId| 3 + job % 4;
        let mut accepted: BTreeMap<(JobId, u64), u32> = BTreeMap::new();
        // What the coordinator would have stored: non-done chunk records, done chunks, merged jobs.
        let mut records: BTreeMap<(JobId, u64), ChunkRecord> = BTreeMap::new();
        let mut merged: BTreeSet<JobId> = BTreeSet::new();
        let mut to_merge: Vec<JobId> = Vec::new();
        let build = |merged: &BTreeSet<JobId>, records: &BTreeMap<(JobId, u64), ChunkRecord>| {
            let mut s = sched(50, 1000);
            for (&job, ins) in &inputs {
                let done = (0..chunks(job))
                    .all(|c| matches!(records.get(&(job, c)), Some(ChunkRecord::Done { .. })));
                let state = if done {
                    JobState::Done
                } else {
                    JobState::Running
                };
                s.add_job(job, (job % 3) as i32, chunks(job), state);
                for &i in ins {
                    if !merged.contains(&i) {
                        s.wait_for_input(job, i);
                    }
                }
            }
            for ((job, chunk), rec) in records {
                s.restore_chunk(*job, *chunk, rec);
            }
            s.finish_restore();
            s
        };
        let mut s = build(&merged, &records);
        let mut rng = 0x2545f4914f6cdd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut held: Vec<Grant> = Vec::new();
        let mut now = 0;
        let mut merged_at_restarts = Vec::new();
        for _ in 0..40_000 {
            if merged.len() == inputs.len() {
                break;
            }
            now += next() % 7;
            // Restarts in the middle of the DAG: after the second and the fourth merge.
            if [2, 4].contains(&merged.len()) && !merged_at_restarts.contains(&merged.len()) {
                // Killed and restarted: what was leased restores as leased (and expires), merges not yet
                // durable are redone.
                let finished: Vec<JobId> = inputs
                    .keys()
                    .copied()
                    .filter(|j| s.job_state(*j) == Some(JobState::Done) && !merged.contains(j))
                    .collect();
                s = build(&merged, &records);
                to_merge = finished;
                merged_at_restarts.push(merged.len());
                continue;
            }
            match next() % 8 {
                0..=2 => {
                    for g in s.lease(now, "w", (next() % 4) as usize) {
                        for i in &inputs[&g.job] {
                            assert!(
                                merged.contains(i),
                                "job {} leased before its input {i} was merged",
                                g.job
                            );
                        }
                        held.push(g);
                    }
                }
                3 | 4 if !held.is_empty() => {
                    let g = held.swap_remove((next() % held.len() as u64) as usize);
                    if let Completion::Accepted { job_finished, .. } =
                        s.complete(g.job, g.chunk, g.lease)
                    {
                        *accepted.entry((g.job, g.chunk)).or_default() += 1;
                        // The caller writes the done record, with the result.
                        records.insert(
                            (g.job, g.chunk),
                            ChunkRecord::Done {
                                digest: "d".into(),
                                worker: "w".into(),
                            },
                        );
                        if job_finished == Some(JobState::Done) {
                            to_merge.push(g.job);
                        }
                    }
                }
                5 if !held.is_empty() => {
                    let g = held.swap_remove((next() % held.len() as u64) as usize);
                    s.fail(g.lease, next() % 2 == 0);
                }
                6 if !to_merge.is_empty() => {
                    let job = to_merge.remove(0);
                    merged.insert(job);
                    s.input_ready(job);
                }
                _ => {
                    s.expire(now);
                }
            }
            let dirty = s.take_dirty();
            for (job, chunk) in dirty.chunks {
                if let Some(rec) = s.chunk_record(job, chunk) {
                    records.insert((job, chunk), rec);
                }
            }
        }
        assert_eq!(merged.len(), inputs.len(), "every job finished and merged");
        assert!(
            merged_at_restarts
                .iter()
                .any(|&m| m > 0 && m < inputs.len()),
            "a restart in the middle of the DAG: {merged_at_restarts:?}"
        );
        for &job in inputs.keys() {
            assert_eq!(s.job_state(job), Some(JobState::Done));
            for chunk in 0..chunks(job) {
                assert_eq!(
                    accepted.get(&(job, chunk)),
                    Some(&1),
                    "job {job} chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn paused_jobs_hand_out_nothing_and_resume() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 3, JobState::Running);
        s.pause(1).unwrap();
        assert!(s.lease(0, "w", 3).is_empty());
        assert!(s.pause(1).is_err());
        s.resume(1).unwrap();
        assert_eq!(s.lease(0, "w", 3).len(), 3);
    }

    #[test]
    fn cancel_revokes_leases_and_rejects_results() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 2, JobState::Running);
        let g = s.lease(0, "w", 2);
        s.cancel(1).unwrap();
        assert_eq!(s.heartbeat(1, "w", &[g[0].lease]), vec![g[0].lease]);
        assert!(matches!(
            s.complete(1, 0, g[0].lease),
            Completion::Rejected(_)
        ));
        assert!(s.lease(0, "w", 2).is_empty());
        assert!(s.cancel(1).is_err());
        assert!(matches!(s.complete(9, 0, 1), Completion::Rejected(_)));
        assert!(matches!(s.complete(1, 99, 1), Completion::Rejected(_)));
    }

    #[test]
    fn heartbeat_of_someone_elses_lease_is_revoked() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 1, JobState::Running);
        let g = s.lease(0, "a", 1).remove(0);
        assert_eq!(s.heartbeat(50, "b", &[g.lease]), vec![g.lease]);
        // And did not extend it.
        assert_eq!(s.expire(101).len(), 1);
    }

    #[test]
    fn restore_resumes_where_it_stopped() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 4, JobState::Running);
        s.restore_chunk(
            1,
            0,
            &ChunkRecord::Done {
                digest: "d".into(),
                worker: "w".into(),
            },
        );
        s.restore_chunk(
            1,
            1,
            &ChunkRecord::Leased {
                lease: 41,
                worker: "w".into(),
                deadline: 5000,
                attempts: 0,
            },
        );
        s.restore_chunk(1, 2, &ChunkRecord::Pending { attempts: 1 });
        s.finish_restore();
        assert_eq!(s.next_lease_id(), 42);
        // The surviving worker's lease is still honoured.
        assert!(s.heartbeat(100, "w", &[41]).is_empty());
        let chunks: Vec<u64> = s.lease(100, "x", 10).iter().map(|g| g.chunk).collect();
        assert_eq!(chunks, vec![2, 3]);
        assert_eq!(
            s.complete(1, 1, 41),
            Completion::Accepted {
                job_finished: None,
                outvoted: vec![]
            }
        );
        assert_eq!(s.complete(1, 0, 7), Completion::Duplicate);
    }

    #[test]
    fn dirty_lists_what_must_be_written() {
        let mut s = sched(100, 3);
        s.add_job(1, 0, 2, JobState::Running);
        let g = s.lease(0, "w", 1).remove(0);
        let d = s.take_dirty();
        assert_eq!(d.chunks, vec![(1, 0)]);
        assert_eq!(
            s.chunk_record(1, 0),
            Some(ChunkRecord::Leased {
                lease: g.lease,
                worker: "w".into(),
                deadline: 100,
                attempts: 0
            })
        );
        s.pause(1).unwrap();
        assert_eq!(s.take_dirty().jobs, vec![1]);
        assert!(s.take_dirty().chunks.is_empty());
    }

    /// Many workers, random failures and expiries in simulated time: every chunk ends done exactly once.
    #[test]
    fn simulated_chaos_completes_every_chunk_exactly_once() {
        let mut s = sched(50, 1000);
        let n = 500u64;
        s.add_job(1, 0, n, JobState::Running);
        let mut accepted = vec![0u32; n as usize];
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut held: Vec<Grant> = Vec::new();
        let mut now = 0;
        for _ in 0..20_000 {
            now += next() % 7;
            match next() % 6 {
                0 | 1 => held.extend(s.lease(now, "w", (next() % 4) as usize)),
                2 | 3 if !held.is_empty() => {
                    let g = held.swap_remove((next() % held.len() as u64) as usize);
                    if let Completion::Accepted { .. } = s.complete(g.job, g.chunk, g.lease) {
                        accepted[g.chunk as usize] += 1;
                    }
                }
                4 if !held.is_empty() => {
                    let g = held.swap_remove((next() % held.len() as u64) as usize);
                    s.fail(g.lease, next() % 2 == 0);
                }
                _ => {
                    s.expire(now);
                }
            }
            if s.job_state(1) == Some(JobState::Done) {
                break;
            }
        }
        // Drain what is left without chaos.
        for _ in 0..(2 * n) {
            for g in held.drain(..) {
                if let Completion::Accepted { .. } = s.complete(g.job, g.chunk, g.lease) {
                    accepted[g.chunk as usize] += 1;
                }
            }
            held.extend(s.lease(now, "w", 8));
            if held.is_empty() {
                break;
            }
        }
        assert_eq!(s.job_state(1), Some(JobState::Done));
        assert!(accepted.iter().all(|&a| a == 1), "{accepted:?}");
    }

    #[test]
    fn replicated_chunk_needs_agreeing_votes_from_distinct_workers() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 1, JobState::Running);
        s.set_replication(1, 2);
        let a = s.lease(0, "a", 1).remove(0);
        assert_eq!(
            s.complete_vote(1, 0, a.lease, "a", "good"),
            Completion::Voted {
                agreeing: 1,
                needed: 2,
                disagreement: false,
                poisoned: false
            }
        );
        // The same worker never gets its own replica; another one does.
        assert!(s.lease(1, "a", 5).is_empty());
        let b = s.lease(1, "b", 1).remove(0);
        assert_eq!(b.chunk, 0);
        // A liar disagrees: the chunk runs again, on a third worker.
        assert!(matches!(
            s.complete_vote(1, 0, b.lease, "b", "bad"),
            Completion::Voted {
                disagreement: true,
                ..
            }
        ));
        assert_eq!(s.counts(1).unwrap().disagreements, 1);
        assert!(s.lease(2, "b", 1).is_empty());
        let c = s.lease(2, "c", 1).remove(0);
        assert_eq!(
            s.complete_vote(1, 0, c.lease, "c", "good"),
            Completion::Accepted {
                job_finished: Some(JobState::Done),
                outvoted: vec!["b".to_string()]
            }
        );
        assert_eq!(s.bad_results("b"), 1);
        assert_eq!(s.counts(1).unwrap().done, 1);
        // Late replicas of a done chunk count nothing.
        assert_eq!(
            s.complete_vote(1, 0, b.lease, "d", "good"),
            Completion::Duplicate
        );
    }

    #[test]
    fn endless_disagreement_poisons_instead_of_looping() {
        let mut s = sched(1000, 2);
        s.add_job(1, 0, 1, JobState::Running);
        s.set_replication(1, 2);
        let mut last = None;
        for (i, w) in ["a", "b", "c", "d"].iter().enumerate() {
            let g = s.lease(i as u64, w, 1);
            assert_eq!(g.len(), 1, "worker {w} gets the chunk");
            last = Some(s.complete_vote(1, 0, g[0].lease, w, &format!("digest-{w}")));
        }
        assert!(matches!(
            last,
            Some(Completion::Voted { poisoned: true, .. })
        ));
        assert_eq!(s.job_state(1), Some(JobState::DoneWithPoisonedChunks));
        assert!(s.lease(10, "e", 1).is_empty());
    }

    #[test]
    fn bad_workers_are_refused_and_drained_workers_take_nothing() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 4, JobState::Running);
        assert!(!s.record_bad_result("liar"));
        assert!(!s.record_bad_result("liar"));
        assert!(s.record_bad_result("liar"));
        assert!(s.is_banned("liar"));
        assert!(s.lease(0, "liar", 4).is_empty());
        let held = s.lease(0, "w", 1);
        s.drain("w");
        assert!(s.lease(0, "w", 4).is_empty());
        assert_eq!(s.leases_held("w"), 1);
        // What it holds still completes normally.
        assert!(matches!(
            s.complete(1, held[0].chunk, held[0].lease),
            Completion::Accepted { .. }
        ));
        assert_eq!(s.lease(0, "x", 4).len(), 3);
    }

    #[test]
    fn replication_survives_random_lies_and_expiries() {
        // Three honest workers and one liar race over many chunks with expiries: every chunk ends done with
        // the honest digest, never accepted on the liar's word.
        let mut s = sched(50, 10);
        s.add_job(1, 0, 40, JobState::Running);
        s.set_replication(1, 2);
        let workers = ["h1", "h2", "h3", "liar"];
        let mut accepted = std::collections::HashMap::new();
        let mut rng = 12345u64;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) as usize
        };
        for t in 0..20_000u64 {
            if s.job_state(1) != Some(JobState::Running) {
                break;
            }
            let w = workers[next() % workers.len()];
            for g in s.lease(t, w, 1) {
                match next() % 5 {
                    0 => {} // lost: expires later
                    _ => {
                        let d = if w == "liar" { "lie" } else { "truth" };
                        if let Completion::Accepted { .. } =
                            s.complete_vote(1, g.chunk, g.lease, w, d)
                        {
                            assert!(
                                accepted.insert(g.chunk, d).is_none(),
                                "chunk {} accepted twice",
                                g.chunk
                            );
                        }
                    }
                }
            }
            s.expire(t);
        }
        assert_eq!(s.job_state(1), Some(JobState::Done));
        assert_eq!(accepted.len(), 40);
        assert!(accepted.values().all(|d| *d == "truth"));
    }

    #[test]
    fn a_refused_result_sends_the_chunk_to_someone_else() {
        let mut s = sched(1000, 3);
        s.add_job(1, 0, 2, JobState::Running);
        let g = s.lease(0, "liar", 1).remove(0);
        assert!(!s.reject_result(1, g.chunk, g.lease, "liar"));
        // The liar never gets that chunk back, so it cannot burn the chunk's attempts alone.
        let next = s.lease(1, "liar", 5);
        assert!(next.iter().all(|n| n.chunk != g.chunk), "{next:?}");
        let honest = s.lease(1, "honest", 5);
        assert_eq!(
            honest.iter().map(|h| h.chunk).collect::<Vec<_>>(),
            vec![g.chunk]
        );
        assert_eq!(s.counts(1).unwrap().poisoned, 0);
        assert!(!s.reject_result(1, next[0].chunk, next[0].lease, "liar"));
        assert!(
            s.reject_result(1, 99, 12345, "liar"),
            "third bad result: refused"
        );
        assert!(s.lease(2, "liar", 5).is_empty());
    }
}
