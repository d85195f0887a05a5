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
//!
//! This file holds the state and the fair-share plumbing; the methods are split by what they decide, each file
//! an `impl Scheduler` of one concern: `jobs` (a job's life as a whole), `standing` (a worker's), `restore`
//! (start-up), `leasing` (handing chunks out and taking them back), `pieces` (slots added by splitting running chunks),
//! `completion` (results and votes).
//! `chunk_map` and `fair` are the per-job chunk slots and the fair-share queue; `types` what callers see.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

mod chunk_map;
mod completion;
mod fair;
mod jobs;
mod leasing;
mod pieces;
mod restore;
mod standing;
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
pub use pieces::SPLIT_ASK_INTERVAL_MS;
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
}

#[cfg(test)]
mod fair_tests;
#[cfg(test)]
mod tests;
