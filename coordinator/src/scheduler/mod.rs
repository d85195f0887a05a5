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
//!
//! Which job a free thread serves is [`fair`]'s decision: priorities strictly, then fair share by use between
//! identities and between one identity's jobs. A job is in its queue exactly while it is running, waits for no
//! input and has a chunk to lease; every method that changes one of those calls `sync_queue`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

mod chunk_map;
mod fair;
mod types;

use chunk_map::ChunkMap;
use fair::{Charge, FairQueue};

/// The most chunks of one job a lease request gets before the fair-share order is looked at again. Chunk
/// records are stored in blocks of 64, and a block is rewritten once per commit whichever of its chunks
/// changed: granting one chunk per job in turn made every commit rewrite a block per job, and with a
/// thousand jobs alive the store's writes (and sled's memory) grew with the number of jobs (11 GB and falling
/// behind, measured). A request is usually a worker's threads and prefetch, so runs bound what one request
/// takes from the order, and the charge of each chunk still moves the job back.
pub const FAIR_RUN: usize = 64;
pub use chunk_map::ChunkBits;
pub use fair::{FairSpec, IdentityUse, DEFAULT_CHUNK_ESTIMATE_MS};
pub use types::*;

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
    /// What its grant charged the job's use, corrected when it ends.
    charge: Charge,
}

#[derive(Debug)]
struct JobSched {
    priority: i32,
    state: JobState,
    chunks: ChunkMap,
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
    /// The job's own limit on attempts per chunk; `None`: the coordinator's. Never more than the coordinator's
    /// either way (see [`JobSched::max_attempts`]).
    max_attempts: Option<u32>,
}

impl JobSched {
    /// Attempts a chunk of this job gets before it is poisoned: its own limit, capped by the coordinator's
    /// (`ceiling`), which is also the default. Capped here, not only when submitted, so a coordinator restarted
    /// with a lower `--max-attempts` lowers it for every stored job too.
    fn max_attempts(&self, ceiling: u32) -> u32 {
        self.max_attempts
            .map_or(ceiling, |n| n.clamp(1, ceiling.max(1)))
    }

    /// Whether `worker` (whose standing is kept under `standing`) must not get `chunk`: it voted on it already,
    /// or a result for it from the same standing was refused.
    fn excludes(&self, chunk: u64, worker: &str, standing: &str) -> bool {
        self.refused
            .get(&chunk)
            .is_some_and(|v| v.iter().any(|w| w == standing))
            || self
                .votes
                .get(&chunk)
                .is_some_and(|v| v.iter().any(|(w, _)| w == worker))
    }
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
    /// Worker name -> the authenticated identity its standing is kept under (see [`Scheduler::bind_identity`]).
    identities: HashMap<String, String>,
    /// The order in which jobs get threads (see [`fair`]).
    fair: FairQueue,
    /// The latest time any method was given: lease ends reported without a time (completions, failures,
    /// cancels) are charged at it.
    clock: Millis,
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
            identities: HashMap::new(),
            fair: FairQueue::new(cfg.usage_half_life_ms),
            clock: 0,
        }
    }

    /// Moves the scheduler's clock to `now` (never back): ends of leases are charged at it.
    pub fn advance(&mut self, now: Millis) {
        self.clock = self.clock.max(now);
    }

    /// Puts `job` in the fair-share queue exactly while it has a chunk to lease (see the module doc).
    fn sync_queue(&mut self, job: JobId) {
        let want = self.jobs.get(&job).is_some_and(|j| {
            j.state == JobState::Running
                && j.waiting_for.is_empty()
                && (!j.retry.is_empty() || j.next_fresh < j.counts.total)
        });
        self.fair.set_queued(job, want);
    }

    /// Who `job` belongs to, its share among that identity's jobs, its chunk-time hint and threads per chunk.
    pub fn set_fair(&mut self, job: JobId, priority: i32, spec: FairSpec) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.priority = priority;
            self.fair.add_job(job, priority, spec);
            self.sync_queue(job);
        }
    }

    /// An admin's share for `identity` (its jobs together get threads in proportion to it).
    pub fn set_identity_share(&mut self, identity: &str, share: f64) {
        self.fair.set_identity_share(identity, share);
    }

    /// Whether an admin set a share for `identity`.
    pub fn has_identity_share(&self, identity: &str) -> bool {
        self.fair.has_identity_share(identity)
    }

    /// The share `identity` has (1 unless set).
    pub fn identity_share(&self, identity: &str) -> f64 {
        self.fair.identity_share(identity)
    }

    /// Restores an identity's decayed use, as stored at `at`.
    pub fn restore_identity_use(&mut self, identity: &str, decayed_thread_ms: f64, at: Millis) {
        self.fair
            .restore_identity_use(identity, decayed_thread_ms, at);
    }

    /// Every identity's share, running threads and use decayed to `now`.
    pub fn identity_uses(&self, now: Millis) -> Vec<IdentityUse> {
        self.fair.identities(now)
    }

    /// Restores a job's use per share as stored at start-up (see [`Scheduler::job_use_per_share`]).
    pub fn restore_job_use(&mut self, job: JobId, per_share: f64) {
        self.fair.restore_job_use(job, per_share);
    }

    /// A job's use per share so far in thread-ms, counted from when it first had a chunk to lease.
    pub fn job_use_per_share(&self, job: JobId) -> Option<f64> {
        self.fair.job_use_per_share(job)
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

    /// From now on `worker`'s standing (bad results, refusal, chunks it may not get again) is kept under
    /// `identity`, which the caller has authenticated (a token): every name that identity registers shares it,
    /// so a liar cannot start afresh under a new name.
    pub fn bind_identity(&mut self, worker: &str, identity: &str) {
        self.identities
            .insert(worker.to_string(), identity.to_string());
    }

    /// The key `worker`'s standing is kept under: its identity if one is bound, else its name.
    fn standing<'a>(&'a self, worker: &'a str) -> &'a str {
        self.identities.get(worker).map_or(worker, String::as_str)
    }

    /// Counts one bad result (failed verification, outvoted) against `worker`; true once it is refused work.
    pub fn record_bad_result(&mut self, worker: &str) -> bool {
        let key = self.standing(worker).to_string();
        let n = self.bad_results.entry(key).or_insert(0);
        *n += 1;
        *n >= self.cfg.max_bad_results
    }

    pub fn bad_results(&self, worker: &str) -> u32 {
        self.bad_results
            .get(self.standing(worker))
            .copied()
            .unwrap_or(0)
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
        let deadline = now + self.cfg.lease_ttl_ms;
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
                if attempts > 0 {
                    j.counts.reissued += 1;
                }
                let lease = self.next_lease;
                self.next_lease += 1;
                j.chunks.set(chunk, Slot::Leased { lease, attempts });
                j.counts.leased += 1;
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
                grants.push(Grant {
                    lease,
                    job,
                    chunk,
                    deadline,
                });
                run += 1;
            }
            if run == 0 {
                skip.insert(job);
            }
            self.sync_queue(job);
        }
        grants
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

#[cfg(test)]
mod fair_tests;
#[cfg(test)]
mod tests;
