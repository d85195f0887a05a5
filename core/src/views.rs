//! What the core shows of itself: plain values copied out under the lock, with domain types (a job state is a
//! [`JobState`], a node count a `u128`). The gRPC adapter turns them into wire messages and the dashboard into
//! JSON; neither reaches into the core's tables. The types only: they sit below the core's state, which keeps
//! some of them (failed attempts, a finished job's answer); `observe` computes them.

use std::sync::Arc;

use crate::placement::Waiting;
use crate::records::Listing;
use crate::scheduler::{JobId, JobState, LeaseId};

/// One job as `sweep status`, the dashboard and the watch stream see it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub id: JobId,
    pub space: String,
    /// The job's canonical parameters, as JSON text.
    pub params_json: String,
    pub state: JobState,
    pub priority: i32,
    /// Slots: the plan's chunks and the pieces split off running ones.
    pub chunks_total: u64,
    pub chunks_done: u64,
    pub chunks_leased: u64,
    pub chunks_poisoned: u64,
    /// Of `chunks_total`, the pieces split off running chunks.
    pub pieces: u64,
    /// How much of the plan the done slots cover, in plan chunks (each split halves what the split slot counts
    /// for): what a progress bar shows, since it never falls when a chunk splits, and reaches the plan's chunk
    /// count exactly when every slot is done.
    pub chunks_covered: f64,
    /// Chunks handed out again after an expiry or a failure.
    pub reissued: u64,
    /// Nodes of the accepted chunks (part of the answer).
    pub nodes: u128,
    /// Nodes the running chunks reported by heartbeat (progress only).
    pub running_nodes: u64,
    /// The job's size when its space knows it in advance.
    pub total_nodes: Option<u128>,
    /// The job's expected size while it runs, when `total_nodes` is unknown but its space estimates its chunks:
    /// real nodes of the finished chunks plus the others' estimates, corrected by the finished ones
    /// ([`crate::expected_total`]). An estimate, for progress and ETAs only.
    pub estimated_nodes: Option<u128>,
    pub created_ms: u64,
    /// 0 while the job runs.
    pub finished_ms: u64,
    /// Distinct workers holding a lease of this job now.
    pub workers: u32,
    pub completions: u64,
    /// Reports of chunks already done (compared by digest, never counted).
    pub duplicates: u64,
    pub input_jobs: Vec<JobId>,
    /// How many of `input_jobs` still hold this job back.
    pub inputs_waiting: u32,
    /// blake3 of the merged artifact, once stored.
    pub artifact_digest: Option<String>,
    pub replicate: u32,
    /// Replicated results that disagreed with an earlier result for the same chunk.
    pub disagreements: u64,
    /// Nothing checks this job's results: its space cannot verify them and no quorum does either.
    pub unverified: bool,
    /// The most recent failed attempts, newest last.
    pub failures: Vec<FailedAttempt>,
    /// Chunks with a saved resume state.
    pub checkpoints: u64,
    /// What the job keeps of its solutions.
    pub listing: Listing,
    /// Solutions stored with its chunks so far.
    pub solutions_stored: u64,
    /// The accepted chunks' counters, summed.
    pub counters: std::collections::BTreeMap<String, u128>,
    /// Failed or expired attempts after which one of its chunks is poisoned: the job's own limit, at most the
    /// coordinator's.
    pub max_attempts: u32,
    /// Bytes one chunk may use, when the job sets a limit: only workers with that much get its chunks.
    pub chunk_memory: Option<u64>,
    /// Why no live worker can take its chunks now, when it is running with chunks to hand out and none can.
    pub waiting: Option<Waiting>,
    /// The identity that submitted it (empty without tokens).
    pub owner: String,
    /// Its weight among its identity's jobs of the same priority.
    pub share: f64,
}

impl JobView {
    /// Chunks neither done, leased nor poisoned.
    pub fn pending(&self) -> u64 {
        self.chunks_total
            .saturating_sub(self.chunks_done)
            .saturating_sub(self.chunks_leased)
            .saturating_sub(self.chunks_poisoned)
    }
}

/// One failed attempt at a chunk: where, when and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedAttempt {
    pub chunk: u64,
    pub worker: String,
    /// For a program, its exit status or signal and the tail of its stderr.
    pub error: String,
    pub unix_ms: u64,
}

/// A chunk that failed too often and is left out of the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoisonedChunk {
    pub chunk: u64,
    pub attempts: u32,
    pub last_error: String,
}

/// A job's answer as it is sent: the space's result as JSON text and as its text for people, as
/// `Job::result_texts` writes them (from a tree that is then dropped, or directly where the space can).
#[derive(Clone, Debug)]
pub struct KeptAnswer {
    pub json: Arc<str>,
    pub text: Arc<str>,
}

/// A job's answer as far as it goes: the space's result over the accepted chunks, and what is missing.
#[derive(Clone, Debug)]
pub struct ResultsView {
    pub job: JobView,
    /// The space's result, shared: a finished job's answer is computed once and kept.
    pub result: KeptAnswer,
    pub poisoned: Vec<PoisonedChunk>,
}

/// One worker as `sweep workers` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerView {
    pub name: String,
    pub threads: u32,
    pub memory_bytes: u64,
    pub last_seen_ms: u64,
    /// Chunks of this worker accepted since the coordinator started.
    pub chunks_done: u64,
    pub leases_held: u32,
    /// Results that failed verification or lost a replication vote, counted against the worker's standing
    /// (its token's identity when tokens are on).
    pub bad_results: u32,
    pub banned: bool,
    pub draining: bool,
    pub version: String,
    /// How it contains the programs it runs; empty: it did not say.
    pub containment: String,
}

/// What the dashboard and `/metrics` read: one consistent snapshot, taken under one short lock. It reads
/// memory only, so it may be ahead of the store by one commit.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub now_ms: u64,
    pub lease_ttl_ms: u64,
    /// Workers heard from within one lease time.
    pub live_workers: u32,
    pub jobs: Vec<JobView>,
    pub workers: Vec<WorkerObservation>,
    /// Every identity's share, running threads and decayed use.
    pub identities: Vec<crate::scheduler::IdentityUse>,
}

/// One worker in an [`Observation`].
#[derive(Clone, Debug, Default)]
pub struct WorkerObservation {
    pub name: String,
    pub threads: u32,
    pub last_seen_ms: u64,
    /// Chunks of this worker accepted since the coordinator started.
    pub chunks_done: u64,
    /// Leases it holds now.
    pub leases: u32,
    /// Nodes its running chunks have reported by heartbeat so far.
    pub running_nodes: u64,
}

/// How the coordinator answered one chunk report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckKind {
    /// Stored: the result is part of the answer.
    Accepted,
    /// The chunk was already done; compared by digest, not counted.
    Duplicate,
    /// Not stored (unknown job, failed verification, over a limit, cancelled job). Do not retry.
    Rejected,
    /// A replicated job's vote, recorded; the chunk needs more agreeing results.
    Voted,
}

/// The answer to one report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub lease: LeaseId,
    pub kind: AckKind,
    pub message: String,
}

/// One chunk handed to a worker, with everything it needs to run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    pub lease: LeaseId,
    pub job: JobId,
    pub space: String,
    pub params_json: String,
    pub n_chunks: u64,
    /// The plan chunk to run.
    pub chunk: u64,
    /// The slot its result is reported for: the chunk itself, or a piece split off it.
    pub slot: u64,
    /// The generation of the slot's part: states sent for this lease name it, plus the splits made since.
    pub generation: u32,
    pub deadline_ms: u64,
    /// Every input job with the digest of its stored artifact, in the order the job binds them.
    pub inputs: Vec<(JobId, String)>,
    /// Where the run starts: the slot's saved resume state, if an earlier attempt left one, else its part
    /// (`None`: the whole chunk).
    pub checkpoint: Option<String>,
    /// Digests of the files the job ships.
    pub shipped: Vec<String>,
    /// The job keeps counts only: the chunk need not list its solutions.
    pub count_only: bool,
}

/// The answer to a lease request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Zero or more chunks (none: nothing to do now).
    Chunks(Vec<LeaseView>),
    /// The worker is draining: finish what it holds, take nothing new.
    Drain,
    /// This coordinator does not know the worker (it restarted): register again.
    RegisterAgain,
}

impl LeaseAnswer {
    /// No chunks, and nothing else to do: the request may wait for work to appear.
    pub fn is_empty(&self) -> bool {
        matches!(self, LeaseAnswer::Chunks(c) if c.is_empty())
    }
}
