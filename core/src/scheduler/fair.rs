//! Fair share: which job's chunk a free thread goes to. Plain data and arithmetic, no I/O, time passed in.
//!
//! Priorities order strictly: a job of a higher priority with a chunk to lease always goes first. Among the jobs
//! of one priority the choice has two levels:
//!
//! 1. **Identities** (the token that submitted the job; one anonymous identity without tokens) in order of
//!    their decayed use per share: thread-milliseconds of leases, halved every `half_life`, divided by the
//!    identity's share. A person who used much recently yields to one who did not, until the decayed uses per
//!    share meet (HTCondor's and Slurm's fair share). The difference decays: one who used all C threads for
//!    ever has a decayed use of at most C * half_life / ln 2, which halves in a half-life while a newcomer on
//!    the same C threads reaches half of it, so with equal shares nobody waits longer than one half-life
//!    behind a newcomer (log2(1 + s_new / s_old) half-lives with shares s_old and s_new).
//! 2. **Jobs of one identity** in order of their own use per share (`--share W`), counted from when the job
//!    became leasable: a job that joins the queue starts at the smallest use per share of the queued jobs of its
//!    identity and priority (the "minimum virtual runtime" of Linux's CFS), so it neither starves a job that ran
//!    for days nor is starved by it; from then on the two get threads in proportion to their shares.
//!
//! Use is charged when a lease is granted, by the job's expected lease time (the mean lease time of its chunks
//! so far; before its first chunk ends, its hint or [`DEFAULT_CHUNK_ESTIMATE_MS`]), and corrected by the lease's
//! real elapsed time when it ends (completed, failed, expired, cancelled; a lease handed back unstarted costs
//! nothing). Charging ahead keeps every key fixed between events, so the order is a few `BTreeSet`s updated in
//! O(log jobs) per event, and a worker asking for 50 chunks at once gets them spread over the jobs by share.
//!
//! What granularity costs: shares move only when chunks end, so a job that arrives waits for the first running
//! chunk to end (at worst the longest chunk running, plus what workers hold ahead) and reaches its share after
//! about one chunk length of the jobs it shares with; a job whose chunks take an hour frees a thread at most
//! hourly.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::types::{JobId, Millis};

/// What a job's lease is charged before any of its chunks has ended, when it gives no hint.
pub const DEFAULT_CHUNK_ESTIMATE_MS: f64 = 1_000.0;
/// How fast a job's expected lease time follows its chunks' real ones (weight of the newest).
const ESTIMATE_WEIGHT: f64 = 0.2;
/// Uses are kept multiplied by 2^(elapsed half-lives since `epoch`), so decay never reorders anything and costs
/// nothing per event; past this many half-lives they are rescaled once, before the numbers grow out of range.
const RESCALE_AFTER_HALF_LIVES: f64 = 256.0;

/// An f64 ordered totally, as a set key.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Who a job belongs to and what it asked for, as the scheduler needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct FairSpec {
    /// The identity that submitted it ("" without tokens).
    pub owner: String,
    /// Its weight among its identity's jobs of the same priority (> 0).
    pub share: f64,
    /// Expected seconds per chunk, if the submitter said: charged per lease until a chunk has ended.
    pub chunk_hint_ms: Option<f64>,
    /// Threads one chunk takes (a lease uses this many threads for its time).
    pub threads: u32,
}

impl Default for FairSpec {
    fn default() -> Self {
        FairSpec {
            owner: String::new(),
            share: 1.0,
            chunk_hint_ms: None,
            threads: 1,
        }
    }
}

/// One identity's use, as `sweep status` and the dashboard show it.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityUse {
    pub identity: String,
    pub share: f64,
    /// Threads its outstanding leases hold.
    pub running_threads: u64,
    /// Thread-seconds, decayed by the half-life to `now`.
    pub decayed_thread_secs: f64,
}

#[derive(Debug)]
struct Identity {
    share: f64,
    /// Thread-ms of use times 2^((t - epoch) / half_life) at the time t each was charged.
    grown: f64,
    running_threads: u64,
}

impl Identity {
    fn key(&self) -> Key {
        Key(self.grown / self.share)
    }
}

#[derive(Debug)]
struct JobFair {
    priority: i32,
    spec: FairSpec,
    /// Thread-ms charged per share since the job was first queued (see the module's second level).
    per_share: f64,
    queued: bool,
    expected_ms: f64,
    chunks_ended: u64,
}

/// The queued identities and jobs of one priority.
#[derive(Debug, Default)]
struct Level {
    identities: BTreeSet<(Key, String)>,
    jobs: HashMap<String, BTreeSet<(Key, JobId)>>,
}

/// What a grant charged, kept with the lease until it ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Charge {
    pub start: Millis,
    pub thread_ms: f64,
    pub threads: u32,
}

#[derive(Debug)]
pub struct FairQueue {
    half_life_ms: f64,
    epoch: Millis,
    identities: HashMap<String, Identity>,
    /// Shares an admin set; an identity not listed has share 1.
    shares: HashMap<String, f64>,
    jobs: HashMap<JobId, JobFair>,
    levels: BTreeMap<Reverse<i32>, Level>,
}

impl FairQueue {
    pub fn new(half_life_ms: u64) -> FairQueue {
        FairQueue {
            half_life_ms: half_life_ms.max(1) as f64,
            epoch: 0,
            identities: HashMap::new(),
            shares: HashMap::new(),
            jobs: HashMap::new(),
            levels: BTreeMap::new(),
        }
    }

    /// 2^(half-lives from the epoch to `now`): a charge at `now` is stored multiplied by it.
    fn growth(&self, now: Millis) -> f64 {
        ((now as f64 - self.epoch as f64) / self.half_life_ms).exp2()
    }

    fn identity_mut(&mut self, name: &str) -> &mut Identity {
        let share = self.shares.get(name).copied().unwrap_or(1.0);
        self.identities.entry(name.to_string()).or_insert(Identity {
            share,
            grown: 0.0,
            running_threads: 0,
        })
    }

    /// Registers a job (not queued yet), or changes what it asked for.
    pub fn add_job(&mut self, job: JobId, priority: i32, spec: FairSpec) {
        let was_queued = self.jobs.get(&job).is_some_and(|j| j.queued);
        if was_queued {
            self.set_queued(job, false);
        }
        self.identity_mut(&spec.owner);
        let expected_ms = spec
            .chunk_hint_ms
            .filter(|h| h.is_finite() && *h > 0.0)
            .unwrap_or(DEFAULT_CHUNK_ESTIMATE_MS);
        let old = self.jobs.remove(&job);
        self.jobs.insert(
            job,
            JobFair {
                priority,
                spec,
                per_share: old.as_ref().map_or(0.0, |o| o.per_share),
                queued: false,
                expected_ms: old
                    .as_ref()
                    .filter(|o| o.chunks_ended > 0)
                    .map_or(expected_ms, |o| o.expected_ms),
                chunks_ended: old.map_or(0, |o| o.chunks_ended),
            },
        );
        if was_queued {
            self.set_queued(job, true);
        }
    }

    /// Puts `job` in the queue (it has a chunk to lease) or takes it out. A job joining starts at the smallest
    /// use per share of its identity's queued jobs of its priority, so time spent out of the queue (waiting,
    /// paused, every chunk leased) is neither banked nor held against it.
    pub fn set_queued(&mut self, job: JobId, queued: bool) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.queued == queued {
            return;
        }
        j.queued = queued;
        let level_key = Reverse(j.priority);
        let owner = j.spec.owner.clone();
        let ident_key = self.identities.get(&owner).map_or(Key(0.0), Identity::key);
        let level = self.levels.entry(level_key).or_default();
        if queued {
            let set = level.jobs.entry(owner.clone()).or_default();
            if let Some((Key(min), _)) = set.first() {
                j.per_share = j.per_share.max(*min);
            }
            if set.is_empty() {
                level.identities.insert((ident_key, owner));
            }
            set.insert((Key(j.per_share), job));
        } else {
            if let Some(set) = level.jobs.get_mut(&owner) {
                set.remove(&(Key(j.per_share), job));
                if set.is_empty() {
                    level.jobs.remove(&owner);
                    level.identities.remove(&(ident_key, owner));
                }
            }
            if level.jobs.is_empty() {
                self.levels.remove(&level_key);
            }
        }
    }

    /// The first queued job, in order (priority, identity, job), that `pick` accepts.
    pub fn first_where(&self, mut pick: impl FnMut(JobId) -> bool) -> Option<JobId> {
        for level in self.levels.values() {
            for (_, owner) in &level.identities {
                let Some(jobs) = level.jobs.get(owner) else {
                    continue;
                };
                if let Some(&(_, job)) = jobs.iter().find(|(_, job)| pick(*job)) {
                    return Some(job);
                }
            }
        }
        None
    }

    /// A lease of `job` was granted at `now`: its expected use is charged now (see the module doc).
    pub fn lease_granted(&mut self, job: JobId, now: Millis) -> Charge {
        self.maybe_rescale(now);
        let (threads, expected) = match self.jobs.get(&job) {
            Some(j) => (j.spec.threads.max(1), j.expected_ms),
            None => (1, DEFAULT_CHUNK_ESTIMATE_MS),
        };
        let thread_ms = expected * f64::from(threads);
        self.charge(job, thread_ms, thread_ms * self.growth(now));
        if let Some(owner) = self.jobs.get(&job).map(|j| j.spec.owner.clone()) {
            self.identity_mut(&owner).running_threads += u64::from(threads);
        }
        Charge {
            start: now,
            thread_ms,
            threads,
        }
    }

    /// A lease restored at start-up, last heard of at `since`: nothing charged yet, its threads running.
    pub fn lease_restored(&mut self, job: JobId, since: Millis) -> Charge {
        let threads = self.jobs.get(&job).map_or(1, |j| j.spec.threads.max(1));
        if let Some(owner) = self.jobs.get(&job).map(|j| j.spec.owner.clone()) {
            self.identity_mut(&owner).running_threads += u64::from(threads);
        }
        Charge {
            start: since,
            thread_ms: 0.0,
            threads,
        }
    }

    /// A lease ended at `now`: the charge is corrected to its real time (`ran`: it ran; a lease handed back
    /// unstarted costs nothing), and a finished chunk's time updates the job's expected lease time.
    pub fn lease_ended(&mut self, job: JobId, charge: Charge, now: Millis, ran: bool, done: bool) {
        self.maybe_rescale(now);
        let elapsed = now.saturating_sub(charge.start) as f64;
        let real = if ran {
            elapsed * f64::from(charge.threads)
        } else {
            0.0
        };
        // The estimate is taken back as it was charged, at the grant's time, and the real use put in at the
        // end's: the decayed use is then exactly that of the real use.
        let grown = real * self.growth(now) - charge.thread_ms * self.growth(charge.start);
        self.charge(job, real - charge.thread_ms, grown);
        if let Some(j) = self.jobs.get_mut(&job) {
            if done {
                j.expected_ms = if j.chunks_ended == 0 {
                    elapsed.max(1.0)
                } else {
                    (1.0 - ESTIMATE_WEIGHT) * j.expected_ms + ESTIMATE_WEIGHT * elapsed.max(1.0)
                };
                j.chunks_ended += 1;
            }
            let owner = j.spec.owner.clone();
            let id = self.identity_mut(&owner);
            id.running_threads = id.running_threads.saturating_sub(u64::from(charge.threads));
        }
    }

    /// Adds `thread_ms` (maybe negative, a correction) to `job`'s use and `grown` (the same in the stored,
    /// grown units) to its identity's, moving both in the order.
    fn charge(&mut self, job: JobId, thread_ms: f64, grown: f64) {
        if thread_ms == 0.0 && grown == 0.0 {
            return;
        }
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        let (owner, priority, queued) = (j.spec.owner.clone(), j.priority, j.queued);
        if queued {
            self.set_queued(job, false);
        }
        if let Some(j) = self.jobs.get_mut(&job) {
            j.per_share = (j.per_share + thread_ms / j.spec.share).max(0.0);
        }
        self.move_identity(&owner, |id| {
            id.grown = (id.grown + grown).max(0.0);
        });
        if queued {
            // Back in at its own (new) use: not clamped, it never left.
            if let Some(j) = self.jobs.get_mut(&job) {
                j.queued = true;
                let per_share = j.per_share;
                let level = self.levels.entry(Reverse(priority)).or_default();
                let set = level.jobs.entry(owner.clone()).or_default();
                if set.is_empty() {
                    let key = self.identities.get(&owner).map_or(Key(0.0), Identity::key);
                    level.identities.insert((key, owner));
                }
                set.insert((Key(per_share), job));
            }
        }
    }

    /// Changes an identity's use or share with `change`, keeping its place in every level it is queued at.
    fn move_identity(&mut self, owner: &str, change: impl FnOnce(&mut Identity)) {
        let old = self.identity_mut(owner).key();
        let id = self.identity_mut(owner);
        change(id);
        let new = id.key();
        if old == new {
            return;
        }
        for level in self.levels.values_mut() {
            if level.identities.remove(&(old, owner.to_string())) {
                level.identities.insert((new, owner.to_string()));
            }
        }
    }

    fn maybe_rescale(&mut self, now: Millis) {
        if (now as f64 - self.epoch as f64) / self.half_life_ms > RESCALE_AFTER_HALF_LIVES {
            self.rescale(now);
        }
    }

    /// Divides every stored use by the growth so far and restarts the epoch at `now`: the same decayed uses,
    /// the same order, smaller numbers.
    fn rescale(&mut self, now: Millis) {
        let growth = self.growth(now);
        for level in self.levels.values_mut() {
            level.identities.clear();
        }
        for id in self.identities.values_mut() {
            id.grown /= growth;
        }
        self.epoch = now;
        for level in self.levels.values_mut() {
            for owner in level.jobs.keys() {
                if let Some(id) = self.identities.get(owner) {
                    level.identities.insert((id.key(), owner.clone()));
                }
            }
        }
    }

    /// An admin's share for `identity` (> 0), from now on.
    pub fn set_identity_share(&mut self, identity: &str, share: f64) {
        self.shares.insert(identity.to_string(), share);
        self.move_identity(identity, |id| id.share = share);
    }

    /// Restores an identity's decayed use as stored at `at` (start-up).
    pub fn restore_identity_use(&mut self, identity: &str, decayed_thread_ms: f64, at: Millis) {
        let grown = decayed_thread_ms.max(0.0) * self.growth(at);
        self.move_identity(identity, |id| id.grown = grown);
    }

    /// Every identity known: its share, running threads and use decayed to `now`, by name.
    pub fn identities(&self, now: Millis) -> Vec<IdentityUse> {
        let growth = self.growth(now);
        let mut v: Vec<IdentityUse> = self
            .identities
            .iter()
            // An identity that never used anything and has no share of its own (the anonymous one while
            // tokens are on, say) is not worth a line.
            .filter(|(name, id)| {
                id.grown > 0.0 || id.running_threads > 0 || self.shares.contains_key(*name)
            })
            .map(|(name, id)| IdentityUse {
                identity: name.clone(),
                share: id.share,
                running_threads: id.running_threads,
                decayed_thread_secs: id.grown / growth / 1000.0,
            })
            .collect();
        v.sort_by(|a, b| a.identity.cmp(&b.identity));
        v
    }

    /// Whether an admin set a share for `identity`.
    pub fn has_identity_share(&self, identity: &str) -> bool {
        self.shares.contains_key(identity)
    }

    /// The share `identity` has (1 unless an admin set one).
    pub fn identity_share(&self, identity: &str) -> f64 {
        self.shares.get(identity).copied().unwrap_or(1.0)
    }

    /// A job's own use per share so far, in thread-ms (tests and views).
    /// Restores a job's use per share as stored (start-up), moving it in the queue if it is queued.
    pub fn restore_job_use(&mut self, job: JobId, per_share: f64) {
        let Some(queued) = self.jobs.get(&job).map(|j| j.queued) else {
            return;
        };
        if queued {
            self.set_queued(job, false);
        }
        if let Some(j) = self.jobs.get_mut(&job) {
            j.per_share = if per_share.is_finite() {
                per_share.max(0.0)
            } else {
                0.0
            };
        }
        if queued {
            self.set_queued(job, true);
        }
    }

    pub fn job_use_per_share(&self, job: JobId) -> Option<f64> {
        self.jobs.get(&job).map(|j| j.per_share)
    }
}
