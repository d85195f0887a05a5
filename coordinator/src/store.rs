//! Durable state: jobs, chunk states, chunk results and running tallies, behind a small key-value trait with
//! two implementations: sled (production) and an in-memory map (unit tests).
//!
//! Layout (one keyspace, so a whole group commit is one atomic batch):
//! - `m/format` = "sweep-store/1"; `m/next_job`, `m/next_lease`: big-endian u64 counters
//! - `j/<job>`: [`JobRecord`] (JSON)
//! - `t/<job>`: the job's [`Tally`] (JSON), rewritten with every accepted result
//! - `c/<job><chunk>`: [`ChunkRecord`] (JSON); absent = pending, never leased
//! - `o/<job><chunk>`: the chunk's [`ChunkOutput`] (JSON) without its artifact, written in the same batch as its
//!   `Done` record; `a/<job><chunk>`: that chunk's artifact, raw bytes (tables are large: no hex, no JSON)
//! - `r/<job>`: the job's merged artifact, raw; once it is written the chunk artifacts are removed in the same
//!   batch, so a table is stored once
//!
//! `<job>` and `<chunk>` are big-endian u64, so a prefix scan returns a job's chunks in order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sweep_puzzles::{ChunkOutput, Tally};

use crate::scheduler::{ChunkRecord, JobId, JobState};

const FORMAT: &[u8] = b"sweep-store/1";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is not a sweep store ({why})")]
    NotAStore { path: PathBuf, why: String },
    #[error("cannot open the store at {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("store I/O failed: {0}")]
    Io(#[from] sled::Error),
    #[error("damaged record `{key}`: {why}")]
    Damaged { key: String, why: String },
}

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
    /// The job whose merged artifact this one's chunks need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_job: Option<JobId>,
    /// blake3 (hex) of the merged artifact, once it is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_digest: Option<String>,
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
}

/// Everything needed to rebuild the coordinator's memory at start-up.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub tallies: BTreeMap<JobId, Tally>,
    pub chunks: Vec<(JobId, u64, ChunkRecord)>,
    pub next_job: u64,
    pub next_lease: u64,
}

/// Key-value pairs as a prefix scan returns them, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The raw key-value layer the two backends implement.
pub trait Kv: Send + Sync {
    /// Applies every write (`None` = remove the key) atomically and makes it durable before returning.
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError>;
}

pub struct SledKv {
    db: sled::Db,
}

impl SledKv {
    /// Opens (or creates) a store directory, refusing directories that hold something else.
    pub fn open(path: &Path) -> Result<SledKv, StoreError> {
        if path.exists() {
            if !path.is_dir() {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "it is not a directory".into(),
                });
            }
            let has_files = std::fs::read_dir(path)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if has_files && !path.join("conf").exists() && !path.join("db").exists() {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "the directory holds other files and no sled database".into(),
                });
            }
        }
        let db = sled::Config::new()
            .path(path)
            .mode(sled::Mode::HighThroughput)
            // sled's default page cache is 1 GiB; the coordinator reads little back (outputs on `results`,
            // everything at start-up), so a small cache keeps its memory flat under heavy write load.
            .cache_capacity(64 << 20)
            .open()
            .map_err(|source| StoreError::Open {
                path: path.into(),
                source,
            })?;
        match db.get(b"m/format")? {
            Some(v) if v.as_ref() == FORMAT => {}
            Some(v) => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: format!("unknown format `{}`", String::from_utf8_lossy(&v)),
                })
            }
            None if db.is_empty() => {
                db.insert(b"m/format", FORMAT)?;
                db.flush()?;
            }
            None => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "a sled database without sweep's marker".into(),
                })
            }
        }
        Ok(SledKv { db })
    }
}

impl Kv for SledKv {
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (k, v) in writes {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        self.db.apply_batch(batch)?;
        self.db.flush()?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError> {
        self.db
            .scan_prefix(prefix)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(Into::into))
            .collect()
    }
}

/// The in-memory twin, for tests of everything above the key-value layer.
#[derive(Default)]
pub struct MemKv {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Kv for MemKv {
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in writes {
            match v {
                Some(v) => map.insert(k, v),
                None => map.remove(&k),
            };
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned())
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

fn job_key(tag: u8, job: JobId) -> Vec<u8> {
    let mut k = vec![tag, b'/'];
    k.extend_from_slice(&job.to_be_bytes());
    k
}

fn chunk_key(tag: u8, job: JobId, chunk: u64) -> Vec<u8> {
    let mut k = job_key(tag, job);
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

fn key_text(key: &[u8]) -> String {
    String::from_utf8_lossy(key)
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect()
}

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Damaged {
        key: key_text(key),
        why: e.to_string(),
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data structs with string keys cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

fn be_u64(key: &[u8], bytes: &[u8]) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| StoreError::Damaged {
        key: key_text(key),
        why: format!("{} bytes, expected 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// Typed access to the store.
pub struct Store {
    kv: Box<dyn Kv>,
}

impl Store {
    pub fn new(kv: Box<dyn Kv>) -> Store {
        Store { kv }
    }

    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::new(Box::new(SledKv::open(path)?)))
    }

    pub fn in_memory() -> Store {
        Store::new(Box::new(MemKv::default()))
    }

    /// Writes a group commit atomically and durably.
    pub fn write(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Job(rec) => writes.push((job_key(b'j', rec.id), Some(encode(&rec)))),
                Op::Tally(job, t) => writes.push((job_key(b't', job), Some(encode(&t)))),
                Op::Chunk(job, chunk, rec) => {
                    writes.push((chunk_key(b'c', job, chunk), Some(encode(&rec))))
                }
                Op::Output(job, chunk, mut out) => {
                    let artifact = std::mem::take(&mut out.artifact);
                    if !artifact.is_empty() {
                        writes.push((chunk_key(b'a', job, chunk), Some(artifact)));
                    }
                    writes.push((chunk_key(b'o', job, chunk), Some(encode(&out))));
                }
                Op::Artifact(job, bytes) => {
                    for (k, _) in self.kv.scan(&job_key(b'a', job))? {
                        writes.push((k, None));
                    }
                    writes.push((job_key(b'r', job), Some(bytes.as_ref().clone())));
                }
                Op::Meta(name, v) => writes.push((
                    format!("m/{name}").into_bytes(),
                    Some(v.to_be_bytes().to_vec()),
                )),
            }
        }
        self.kv.apply(writes)
    }

    /// A finished job's merged artifact, if it has been stored.
    pub fn artifact(&self, job: JobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.kv.get(&job_key(b'r', job))
    }

    pub fn load(&self) -> Result<Snapshot, StoreError> {
        let mut snap = Snapshot::default();
        for (k, v) in self.kv.scan(b"j/")? {
            snap.jobs.push(decode(&k, &v)?);
        }
        for (k, v) in self.kv.scan(b"t/")? {
            let job = be_u64(&k, &k[2..])?;
            snap.tallies.insert(job, decode(&k, &v)?);
        }
        for (k, v) in self.kv.scan(b"c/")? {
            if k.len() != 18 {
                return Err(StoreError::Damaged {
                    key: key_text(&k),
                    why: "bad chunk key length".into(),
                });
            }
            let job = be_u64(&k, &k[2..10])?;
            let chunk = be_u64(&k, &k[10..18])?;
            snap.chunks.push((job, chunk, decode(&k, &v)?));
        }
        snap.next_job = match self.kv.get(b"m/next_job")? {
            Some(v) => be_u64(b"m/next_job", &v)?,
            None => 1,
        };
        snap.next_lease = match self.kv.get(b"m/next_lease")? {
            Some(v) => be_u64(b"m/next_lease", &v)?,
            None => 1,
        };
        Ok(snap)
    }

    /// Every stored result of a job, in chunk order, each with its artifact (empty once the job's merged
    /// artifact has replaced them).
    pub fn outputs(&self, job: JobId) -> Result<Vec<(u64, ChunkOutput)>, StoreError> {
        let mut artifacts: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for (k, v) in self.kv.scan(&job_key(b'a', job))? {
            artifacts.insert(be_u64(&k, &k[10..])?, v);
        }
        self.kv
            .scan(&job_key(b'o', job))?
            .into_iter()
            .map(|(k, v)| {
                let chunk = be_u64(&k, &k[10..])?;
                let mut out: ChunkOutput = decode(&k, &v)?;
                if let Some(a) = artifacts.remove(&chunk) {
                    out.artifact = a;
                }
                Ok((chunk, out))
            })
            .collect()
    }

    /// Every chunk record of a job (chunks without one are pending, never leased).
    pub fn chunks(&self, job: JobId) -> Result<Vec<(u64, ChunkRecord)>, StoreError> {
        self.kv
            .scan(&job_key(b'c', job))?
            .into_iter()
            .map(|(k, v)| Ok((be_u64(&k, &k[10..])?, decode(&k, &v)?)))
            .collect()
    }

    pub fn chunk(&self, job: JobId, chunk: u64) -> Result<Option<ChunkRecord>, StoreError> {
        let key = chunk_key(b'c', job, chunk);
        self.kv.get(&key)?.map(|v| decode(&key, &v)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: JobId) -> JobRecord {
        JobRecord {
            id,
            space: "star".into(),
            params: serde_json::json!({"points": 6}),
            n_chunks: 3,
            total_nodes: Some(10),
            priority: 0,
            state: JobState::Running,
            created_ms: 1,
            finished_ms: 0,
            duplicates: 0,
            digest_mismatches: 0,
            input_job: None,
            artifact_digest: None,
        }
    }

    fn roundtrip(store: &Store) {
        let out = ChunkOutput {
            nodes: 4,
            solutions: vec!["x".into()],
            ..Default::default()
        };
        let mut tally = Tally::default();
        tally.add(&out);
        store
            .write(vec![
                Op::Job(record(2)),
                Op::Chunk(
                    2,
                    1,
                    ChunkRecord::Done {
                        digest: "ab".into(),
                        worker: "w".into(),
                    },
                ),
                Op::Output(2, 1, out.clone()),
                Op::Chunk(2, 0, ChunkRecord::Pending { attempts: 2 }),
                Op::Tally(2, tally.clone()),
                Op::Meta("next_job", 3),
                Op::Meta("next_lease", 17),
            ])
            .unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.jobs, vec![record(2)]);
        assert_eq!(snap.tallies[&2], tally);
        assert_eq!(snap.chunks.len(), 2);
        assert_eq!(snap.chunks[0], (2, 0, ChunkRecord::Pending { attempts: 2 }));
        assert_eq!((snap.next_job, snap.next_lease), (3, 17));
        assert_eq!(store.outputs(2).unwrap(), vec![(1, out)]);
        assert_eq!(store.outputs(3).unwrap(), vec![]);
        assert_eq!(
            store.chunk(2, 0).unwrap(),
            Some(ChunkRecord::Pending { attempts: 2 })
        );
    }

    fn artifacts_are_raw_and_stored_once(store: &Store) {
        let with = |a: Vec<u8>| ChunkOutput {
            nodes: 1,
            artifact: a,
            ..Default::default()
        };
        store
            .write(vec![
                Op::Output(4, 0, with(vec![1, 2, 3])),
                Op::Output(4, 1, with(vec![4])),
            ])
            .unwrap();
        let outs = store.outputs(4).unwrap();
        assert_eq!(outs, vec![(0, with(vec![1, 2, 3])), (1, with(vec![4]))]);
        assert_eq!(store.artifact(4).unwrap(), None);
        store
            .write(vec![Op::Artifact(4, std::sync::Arc::new(vec![9, 9]))])
            .unwrap();
        assert_eq!(store.artifact(4).unwrap(), Some(vec![9, 9]));
        // The chunk artifacts are gone; the outputs (nodes, counters) stay.
        assert_eq!(
            store.outputs(4).unwrap(),
            vec![(0, with(vec![])), (1, with(vec![]))]
        );
    }

    #[test]
    fn artifacts_in_memory_and_in_sled() {
        artifacts_are_raw_and_stored_once(&Store::in_memory());
        let dir = std::env::temp_dir().join(format!("sweep-store-art-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        artifacts_are_raw_and_stored_once(&Store::open(&dir).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn memory_store_roundtrip() {
        roundtrip(&Store::in_memory());
    }

    #[test]
    fn sled_store_roundtrip_and_reopen() {
        let dir = std::env::temp_dir().join(format!("sweep-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let store = Store::open(&dir).unwrap();
            roundtrip(&store);
        }
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.load().unwrap().jobs.len(), 1);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn foreign_directories_are_refused() {
        let dir = std::env::temp_dir().join(format!("sweep-store-foreign-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), "hello").unwrap();
        let err = Store::open(&dir).err().unwrap();
        assert!(err.to_string().contains("not a sweep store"), "{err}");
        let file = dir.join("notes.txt");
        assert!(Store::open(&file)
            .err()
            .unwrap()
            .to_string()
            .contains("not a directory"));
        let _ = std::fs::remove_dir_all(&dir);
    }

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
}
