//! What the core decides must be written, in the core's own types: the job record, the ops of a group commit,
//! and the snapshot the core starts from. The store adapts to them (it encodes records as JSON, turns a commit's
//! ops into crash-consistent batches and reads a snapshot back), as raft-rs's storage persists what a `Ready`
//! hands it; nothing here knows keys, blocks or files.
//!
//! The serde attributes stay on the types because their JSON *is* the store's format: records outlive the
//! release that wrote them, so a field added later reads with its default and a field renamed keeps an alias
//! (see `input_jobs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sweep_space::{ChunkOutput, Tally};

use crate::limits::Usage;
use crate::scheduler::{ChunkBits, ChunkRecord, JobId, JobState, Vote};

/// What the coordinator keeps about a job besides its chunks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub space: String,
    pub params: serde_json::Value,
    pub n_chunks: u64,
    #[serde(default)]
    pub total_nodes: Option<u128>,
    pub priority: i32,
    pub state: JobState,
    pub created_ms: u64,
    #[serde(default)]
    pub finished_ms: u64,
    /// Results that arrived for chunks already done (compared by digest, never counted).
    #[serde(default)]
    pub duplicates: u64,
    #[serde(default)]
    pub digest_mismatches: u64,
    /// The jobs whose merged artifacts this one's chunks need, in the order of the job's `Job::inputs`.
    /// Records written before jobs could have several inputs hold one `input_job` number instead: it reads as a
    /// one-element list, and the record is written back in the new form the next time it changes.
    #[serde(
        default,
        alias = "input_job",
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub input_jobs: Vec<JobId>,
    /// blake3 (hex) of the merged artifact, once it is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_digest: Option<String>,
    /// Agreeing results from distinct workers each chunk needs (1: no replication).
    #[serde(default = "one")]
    pub replicate: u32,
    /// What the job keeps of its solutions besides their counts.
    #[serde(default, skip_serializing_if = "Listing::is_all")]
    pub listing: Listing,
    /// Failed or expired attempts after which one of its chunks is poisoned, when it was submitted with a
    /// limit of its own (at most the coordinator's `--max-attempts` then); absent: the coordinator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Bytes one chunk may use (`Job::chunk_memory`), when the job sets a limit: its chunks are leased only to
    /// workers that report at least this much. Kept with the job so the rule holds without rebuilding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_memory: Option<u64>,
    /// The identity that submitted it (a token's public name; empty without tokens): its use is counted
    /// under that identity, and the identity's share is divided among its jobs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Its weight among its identity's jobs of the same priority (`--share`).
    #[serde(default = "one_share", skip_serializing_if = "is_one_share")]
    pub share: f64,
    /// The submitter's guess of one chunk's length in milliseconds (`--chunk-time-hint`): what a lease is
    /// charged until the job's first chunk ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_hint_ms: Option<u64>,
    /// Its use per share among its identity's jobs (thread-ms), as last written (every few seconds while it
    /// runs, with the identities' use): a restart resumes the order between one person's jobs from it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub use_per_share_ms: f64,
    /// Slots added to the plan's chunks by splitting running chunks (see [`PartRecord`]): the job has
    /// `n_chunks + pieces` slots, each completed exactly once.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub pieces: u64,
}

impl JobRecord {
    /// Every slot of the job: the plan's chunks, then the pieces split off them, in the order they were made.
    pub fn slots(&self) -> u64 {
        self.n_chunks + self.pieces
    }
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// Which part of which plan chunk a slot searches, once a split made it other than the whole chunk it is
/// numbered after: a piece's record is written with the split that made it, and a split chunk's record is
/// rewritten (its part narrowed) in the same batch. A slot without a record is plan chunk `slot`, whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    /// The plan chunk the part belongs to.
    pub chunk: u64,
    /// The part, in the space's state vocabulary: a run started from it searches exactly the part.
    pub part: String,
    /// Splits made from this slot so far. A state a worker sends (a checkpoint, a result) names the
    /// generation it was computed in, and is taken only if that is still the slot's: a result computed before
    /// a split covers what was given away too, and would count it twice.
    pub generation: u32,
    /// Where the part lies in its chunk: a split's kept part extends its parent's path with nothing (it stays
    /// the lowest part of what the parent covered) and its given part with `1` after as many `0`s as the
    /// parent had made splits before. Sorting a chunk's slots by path orders their parts as the chunk's items
    /// are ordered, which is the order chunk artifacts are merged in; its length is how many halvings deep
    /// the part is (its share of the chunk in progress bars).
    pub path: String,
}

impl JobRecord {
    /// A running job as a submit creates it: `n_chunks` chunks of `space` with `params`, created at
    /// `created_ms`, and every other field as a record that never set it reads back (no priority, no inputs, no
    /// replication, every solution listed, the coordinator's attempts, a share of 1). Other fields are set with
    /// struct update syntax from it.
    pub fn new(
        id: JobId,
        space: impl Into<String>,
        params: serde_json::Value,
        n_chunks: u64,
        created_ms: u64,
    ) -> JobRecord {
        JobRecord {
            id,
            space: space.into(),
            params,
            n_chunks,
            total_nodes: None,
            priority: 0,
            state: JobState::Running,
            created_ms,
            finished_ms: 0,
            duplicates: 0,
            digest_mismatches: 0,
            input_jobs: Vec::new(),
            artifact_digest: None,
            replicate: one(),
            listing: Listing::All,
            max_attempts: None,
            chunk_memory: None,
            owner: String::new(),
            share: one_share(),
            chunk_hint_ms: None,
            use_per_share_ms: 0.0,
            pieces: 0,
        }
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn one_share() -> f64 {
    1.0
}

fn is_one_share(share: &f64) -> bool {
    *share == 1.0
}

/// One identity's share and use as stored: the use decayed to `at_ms`, so a restart resumes the decay from
/// there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdentityRecord {
    pub identity: String,
    /// The share an admin set; absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    pub decayed_thread_ms: f64,
    pub at_ms: u64,
}

/// What a job keeps of its solutions besides their counts (which are always exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Listing {
    /// Every listed solution is stored with its chunk.
    #[default]
    All,
    /// Submitted `--count-only`: chunks report counts, no lists.
    CountOnly,
    /// The list outgrew the per-job caps and was stopped there: counts only from then on, the stored list
    /// is incomplete.
    Stopped,
}

impl Listing {
    pub fn is_all(&self) -> bool {
        *self == Listing::All
    }

    /// Whether chunks of such a job report counts only.
    pub fn counts_only(self) -> bool {
        self != Listing::All
    }
}

fn one() -> u32 {
    1
}

/// `input_jobs` as a list, or as the single number (or null) that the older `input_job` field held.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<JobId>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Option<JobId>),
        Many(Vec<JobId>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(one) => one.into_iter().collect(),
        OneOrMany::Many(many) => many,
    })
}

/// One write of a group commit.
#[derive(Clone, Debug)]
pub enum Op {
    /// Boxed: a job record is 272 bytes and every op was as large, while the ops a result stages (its chunk,
    /// output and tally) are under 100; the outbox holds a few per result while commits lag (44.6 of a
    /// 136 MB heap peak at 100,000 chunks, measured with heaptrack).
    Job(Box<JobRecord>),
    Tally(JobId, Tally),
    Chunk(JobId, u64, ChunkRecord),
    Output(JobId, u64, ChunkOutput),
    /// The merged artifact of a finished job; replaces its chunk artifacts. Shared, not copied: the
    /// coordinator keeps the same bytes in memory to serve workers, and staging happens under its lock.
    Artifact(JobId, std::sync::Arc<Vec<u8>>),
    Meta(&'static str, u64),
    /// A running chunk's newest resume state (`None`: the chunk is done, or split, and its state is dropped).
    Checkpoint(JobId, u64, Option<String>),
    /// The part a slot searches, written when a split makes or narrows it (boxed for the op's size).
    Part(JobId, u64, Box<PartRecord>),
    /// A replicated chunk's votes so far (empty: accepted, the votes are dropped).
    Votes(JobId, u64, Vec<Vote>),
    /// What a job's accepted outputs have stored, counted against its caps across restarts.
    Usage(JobId, Usage),
    /// An identity's share and decayed use (written every few seconds while it changes, and when an admin
    /// sets a share).
    Identity(IdentityRecord),
    /// A shipped file (an `exec` program) under its digest, checked when the op is made. Through the outbox
    /// rather than straight to the store, so that a replicated coordinator's members all get it.
    Shipped(String, std::sync::Arc<Vec<u8>>),
}

impl Op {
    /// The write of a job record.
    pub fn job(record: JobRecord) -> Op {
        Op::Job(Box::new(record))
    }
}

/// Everything needed to rebuild the coordinator's memory at start-up.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub tallies: BTreeMap<JobId, Tally>,
    /// Every chunk record that is not `Done`, in (job, chunk) order.
    pub chunks: Vec<(JobId, u64, ChunkRecord)>,
    /// Each job's done chunks, a bit each: which chunks are done is all start-up needs of them (a duplicate
    /// result's digest is read from the store when one arrives), and a million digests would cost ~150 MB.
    pub done: BTreeMap<JobId, ChunkBits>,
    pub next_job: u64,
    pub next_lease: u64,
    /// Resume states of chunks that were interrupted (or are running), by (job, chunk).
    pub checkpoints: Vec<(JobId, u64, String)>,
    /// Votes of replicated chunks not accepted yet, by (job, chunk).
    pub votes: Vec<(JobId, u64, Vec<Vote>)>,
    /// What each job's outputs have stored so far (for its caps).
    pub usage: BTreeMap<JobId, Usage>,
    /// Every identity's share and decayed use, as last written.
    pub identities: Vec<IdentityRecord>,
    /// The parts of slots made or narrowed by splits, by (job, slot).
    pub parts: Vec<(JobId, u64, PartRecord)>,
}

impl Snapshot {
    /// The done chunks as (job, chunk) pairs, in order (for tests and small stores).
    pub fn done_list(&self) -> Vec<(JobId, u64)> {
        self.done
            .iter()
            .flat_map(|(job, bits)| bits.iter().map(move |c| (*job, c)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outbox holds several ops per result while commits lag: no variant may make them all large again.
    #[test]
    fn an_op_stays_small() {
        assert!(
            std::mem::size_of::<Op>() <= 104,
            "{}",
            std::mem::size_of::<Op>()
        );
    }

    /// A new record is what a stored record that names only the required fields reads back as, so a field
    /// added with a serde default and forgotten in `new` (or the other way round) fails here.
    #[test]
    fn a_new_record_has_the_defaults_of_a_stored_one() {
        let params = serde_json::json!({"points": 6});
        let stored = serde_json::json!({
            "id": 3, "space": "star", "params": params, "n_chunks": 12,
            "priority": 0, "state": "running", "created_ms": 7,
        });
        let read: JobRecord = serde_json::from_value(stored).unwrap();
        let new = JobRecord::new(3, "star", params, 12, 7);
        assert_eq!(new, read);
        // And it writes out as that minimal record again, with nothing a default would leave out.
        let written = serde_json::to_value(&new).unwrap();
        let back: JobRecord = serde_json::from_value(written).unwrap();
        assert_eq!(back, new);
    }
}
