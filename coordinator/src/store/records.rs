//! The typed records the store keeps, as JSON, and the ops a group commit is made of.
//!
//! JSON because records outlive the release that wrote them: a field added later reads with its default, a
//! field renamed keeps an alias (see `input_jobs`), and fsck can show a damaged record as text.

use serde::{Deserialize, Serialize};
use sweep_space::{ChunkOutput, Tally};

use super::keys::key_text;
use super::StoreError;
use crate::limits::Usage;
use crate::scheduler::{ChunkRecord, JobId, JobState, Vote};

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
    Job(JobRecord),
    Tally(JobId, Tally),
    Chunk(JobId, u64, ChunkRecord),
    Output(JobId, u64, ChunkOutput),
    /// The merged artifact of a finished job; replaces its chunk artifacts. Shared, not copied: the
    /// coordinator keeps the same bytes in memory to serve workers, and staging happens under its lock.
    Artifact(JobId, std::sync::Arc<Vec<u8>>),
    Meta(&'static str, u64),
    /// A running chunk's newest resume state (`None`: the chunk is done, its state is dropped).
    Checkpoint(JobId, u64, Option<String>),
    /// A replicated chunk's votes so far (empty: accepted, the votes are dropped).
    Votes(JobId, u64, Vec<Vote>),
    /// What a job's accepted outputs have stored, counted against its caps across restarts.
    Usage(JobId, Usage),
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &[u8],
    value: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Damaged {
        key: key_text(key),
        why: e.to_string(),
    })
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data structs with string keys cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::job_key;
    use crate::store::test_support::record;
    use crate::store::{MemKv, Store};

    #[test]
    fn damaged_records_are_named() {
        let store = Store::new(Box::new(MemKv::default()));
        store
            .kv
            .apply(vec![(job_key(b'j', 5), Some(b"{not json".to_vec()))])
            .unwrap();
        let err = store.load().unwrap_err();
        assert!(err.to_string().contains("damaged record"), "{err}");
    }

    /// A record as releases before multi-input jobs wrote it (one `input_job` number) loads as a one-element
    /// input list and is written back in the new form; a list of several inputs survives a round trip.
    #[test]
    fn single_input_records_migrate_to_an_input_list() {
        let store = Store::new(Box::new(MemKv::default()));
        let old = br#"{"id":2,"space":"brainball","params":{"depth":7},"n_chunks":3,"priority":0,"state":"running","created_ms":1,"input_job":1,"replicate":1}"#;
        let null = br#"{"id":3,"space":"star","params":{"points":6},"n_chunks":3,"priority":0,"state":"done","created_ms":1,"input_job":null}"#;
        let mut many = record(4);
        many.input_jobs = vec![1, 3, 2];
        store
            .kv
            .apply(vec![
                (job_key(b'j', 2), Some(old.to_vec())),
                (job_key(b'j', 3), Some(null.to_vec())),
            ])
            .unwrap();
        store.write(vec![Op::Job(many.clone())]).unwrap();
        let jobs = store.load().unwrap().jobs;
        assert_eq!(jobs[0].input_jobs, vec![1]);
        assert!(jobs[1].input_jobs.is_empty());
        assert_eq!(jobs[2], many);
        store.write(vec![Op::Job(jobs[0].clone())]).unwrap();
        let text = store.kv.get(&job_key(b'j', 2)).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["input_jobs"], serde_json::json!([1]));
        assert!(v.get("input_job").is_none(), "{v}");
        assert_eq!(store.load().unwrap().jobs[0].input_jobs, vec![1]);
    }
}
