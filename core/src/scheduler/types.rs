//! The scheduler's vocabulary: ids, job states, the durable chunk record, configuration, and what its
//! methods answer. Plain data, shared with the core and the store.

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
    /// Every state, in the order status tables list them.
    pub const ALL: [JobState; 5] = [
        JobState::Running,
        JobState::Paused,
        JobState::Done,
        JobState::DoneWithPoisonedChunks,
        JobState::Cancelled,
    ];

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

/// One replicated result: who sent it and its digest. Kept until the chunk is accepted, durably.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    pub worker: String,
    pub digest: String,
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

/// One day: yesterday's use counts half today.
pub const DEFAULT_USAGE_HALF_LIFE_MS: u64 = 86_400_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub lease_ttl_ms: u64,
    /// Failed or expired attempts after which a chunk is poisoned; with replication, also the number of
    /// votes beyond K after which a chunk whose results keep disagreeing is poisoned. A job may ask for fewer
    /// ([`super::Scheduler::set_max_attempts`]), never for more: this is the default and the ceiling.
    pub max_attempts: u32,
    /// Results that failed verification or were outvoted after which a worker is refused work.
    pub max_bad_results: u32,
    /// An identity's use counts half after this long (fair share between identities, see `fair.rs`).
    pub usage_half_life_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            lease_ttl_ms: 30_000,
            max_attempts: 3,
            max_bad_results: 3,
            usage_half_life_ms: DEFAULT_USAGE_HALF_LIFE_MS,
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
    /// Of `total`, the slots that are pieces split off running chunks (the rest are the plan's chunks).
    pub pieces: u64,
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
    /// Chunks whose replication votes changed (see [`Scheduler::votes`]).
    pub votes: Vec<(JobId, u64)>,
}
