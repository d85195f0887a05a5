//! Durable state: jobs, chunk states, chunk results and running tallies, behind a small key-value trait with
//! two implementations: sled (production) and an in-memory map (unit tests).
//!
//! Layout (one keyspace, so a whole group commit is one atomic batch):
//! - `m/format` = "sweep-store/1"; `m/next_job`, `m/next_lease`: big-endian u64 counters
//! - `j/<job>`: [`JobRecord`] (JSON)
//! - `t/<job>`: the job's [`Tally`] (JSON), rewritten with every accepted result
//! - `c/<job><chunk>`: [`ChunkRecord`] (JSON); absent = pending, never leased
//! - `o/<job><chunk>`: the chunk's [`ChunkOutput`] (JSON) without its artifact, written in the same batch as its
//!   `Done` record; `a/<job><chunk>`: the blake3 hash of that chunk's artifact
//! - `r/<job>`: the blake3 hash of the job's merged artifact; the batch that writes it removes the chunk
//!   artifacts' hashes, so a table is stored once
//!
//! `<job>` and `<chunk>` are big-endian u64, so a prefix scan returns a job's chunks in order.
//!
//! Artifacts themselves (tables of hundreds of MB) live in files under `artifacts/` beside sled's own files,
//! not in sled: sled keeps every large value in its log until it rewrites a whole segment, so a 169 MB table
//! written as chunks and then once merged left 755 MB on disk. A file is written and synced (to a temporary
//! name, then renamed) *before* the batch that records its hash, so a recorded hash always has its file; a
//! crash in between leaves an unreferenced file that the next write of the same chunk replaces or that
//! start-up removes. Reading checks the hash, so a damaged or missing file is reported, never served.
//!
//! Format 1 kept artifacts inside sled; opening such a store moves them out once (see [`SledKv::open`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sweep_puzzles::{ChunkOutput, Tally};

use crate::scheduler::{ChunkRecord, JobId, JobState};

const FORMAT: &[u8] = b"sweep-store/2";
/// Artifacts inside sled, as the first releases wrote them; migrated on open.
const FORMAT_1: &[u8] = b"sweep-store/1";

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
    #[error("artifact file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
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
    /// Agreeing results from distinct workers each chunk needs (1: no replication).
    #[serde(default = "one")]
    pub replicate: u32,
}

fn one() -> u32 {
    1
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
    /// Opened a format-1 store, whose artifacts still live inside sled.
    legacy: bool,
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
        let legacy = match db.get(b"m/format")? {
            Some(v) if v.as_ref() == FORMAT => false,
            Some(v) if v.as_ref() == FORMAT_1 => true,
            Some(v) => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: format!("unknown format `{}`", String::from_utf8_lossy(&v)),
                })
            }
            None if db.is_empty() => {
                db.insert(b"m/format", FORMAT)?;
                db.flush()?;
                false
            }
            None => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "a sled database without sweep's marker".into(),
                })
            }
        };
        Ok(SledKv { db, legacy })
    }
}

/// Where artifacts live: named, write-once-then-replace blobs.
pub trait Blobs: Send + Sync {
    /// Stores `bytes` under `name` durably and atomically (readers see the old blob or the new one).
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError>;
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    fn remove(&self, name: &str) -> Result<(), StoreError>;
    fn list(&self) -> Result<Vec<String>, StoreError>;
}

/// Blobs as files in one directory.
pub struct FileBlobs {
    dir: PathBuf,
}

const TMP_PREFIX: &str = ".tmp-";

impl FileBlobs {
    pub fn open(dir: PathBuf) -> Result<FileBlobs, StoreError> {
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::File {
            path: dir.clone(),
            source,
        })?;
        Ok(FileBlobs { dir })
    }

    fn io<T>(&self, path: &Path, r: std::io::Result<T>) -> Result<T, StoreError> {
        r.map_err(|source| StoreError::File {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl Blobs for FileBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        use std::io::Write;
        let tmp = self.dir.join(format!("{TMP_PREFIX}{name}"));
        let path = self.dir.join(name);
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
        if let Err(e) = written {
            // Do not leave half a table behind on a full disk.
            let _ = std::fs::remove_file(&tmp);
            return self.io(&tmp, Err(e));
        }
        self.io(&path, std::fs::rename(&tmp, &path))?;
        // The rename is durable only once the directory is synced.
        self.io(
            &self.dir,
            std::fs::File::open(&self.dir).and_then(|d| d.sync_all()),
        )
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => self.io(&path, Err(e)),
        }
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => self.io(&path, Err(e)),
            _ => Ok(()),
        }
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        let entries = self.io(&self.dir, std::fs::read_dir(&self.dir))?;
        let mut names = Vec::new();
        for e in entries {
            let e = self.io(&self.dir, e)?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
}

/// The in-memory twin of [`FileBlobs`].
#[derive(Default)]
pub struct MemBlobs {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemBlobs {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Blobs for MemBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.map().insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map().get(name).cloned())
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        self.map().remove(name);
        Ok(())
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.map().keys().cloned().collect())
    }
}

fn chunk_blob(job: JobId, chunk: u64) -> String {
    format!("a-{job}-{chunk}")
}

fn job_blob(job: JobId) -> String {
    format!("r-{job}")
}

/// blake3 of `bytes` in hex: the digest job records and workers use for artifacts.
pub fn digest_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn hash(bytes: &[u8]) -> Vec<u8> {
    blake3::hash(bytes).as_bytes().to_vec()
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

pub(crate) fn job_key(tag: u8, job: JobId) -> Vec<u8> {
    let mut k = vec![tag, b'/'];
    k.extend_from_slice(&job.to_be_bytes());
    k
}

pub(crate) fn chunk_key(tag: u8, job: JobId, chunk: u64) -> Vec<u8> {
    let mut k = job_key(tag, job);
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

pub(crate) fn key_text(key: &[u8]) -> String {
    String::from_utf8_lossy(key)
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect()
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

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data structs with string keys cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

pub(crate) fn be_u64(key: &[u8], bytes: &[u8]) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| StoreError::Damaged {
        key: key_text(key),
        why: format!("{} bytes, expected 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// Typed access to the store.
pub struct Store {
    kv: Box<dyn Kv>,
    blobs: Box<dyn Blobs>,
}

impl Store {
    /// A store over `kv`, with artifacts kept in memory (tests).
    pub fn new(kv: Box<dyn Kv>) -> Store {
        Store::with_blobs(kv, Box::new(MemBlobs::default()))
    }

    pub fn with_blobs(kv: Box<dyn Kv>, blobs: Box<dyn Blobs>) -> Store {
        Store { kv, blobs }
    }

    /// Opens the store in `path`: sled's files, and artifact files in `path/artifacts`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let kv = SledKv::open(path)?;
        let legacy = kv.legacy;
        let blobs = FileBlobs::open(path.join("artifacts"))?;
        let store = Store::with_blobs(Box::new(kv), Box::new(blobs));
        if legacy {
            store.migrate_format_1()?;
        }
        store.remove_unreferenced_blobs()?;
        Ok(store)
    }

    pub fn in_memory() -> Store {
        Store::new(Box::new(MemKv::default()))
    }

    /// The raw key-value layer, for [`crate::fsck`].
    pub(crate) fn kv(&self) -> &dyn Kv {
        self.kv.as_ref()
    }

    /// Moves format 1's in-sled artifacts into files, then marks the store as format 2, in one batch: a crash
    /// part-way leaves a format-1 store and the migration runs again.
    fn migrate_format_1(&self) -> Result<(), StoreError> {
        let mut writes = Vec::new();
        for (k, v) in self.kv.scan(b"a/")? {
            let (job, chunk) = (be_u64(&k, &k[2..10])?, be_u64(&k, &k[10..])?);
            self.blobs.put(&chunk_blob(job, chunk), &v)?;
            writes.push((k, Some(hash(&v))));
        }
        for (k, v) in self.kv.scan(b"r/")? {
            self.blobs.put(&job_blob(be_u64(&k, &k[2..])?), &v)?;
            writes.push((k, Some(hash(&v))));
        }
        writes.push((b"m/format".to_vec(), Some(FORMAT.to_vec())));
        self.kv.apply(writes)
    }

    /// Removes temporary files and artifacts whose hash was never recorded (a crash between the file and the
    /// batch) or has been dropped (chunk artifacts after their merge).
    fn remove_unreferenced_blobs(&self) -> Result<(), StoreError> {
        for name in self.blobs.list()? {
            let key = if let Some(rest) = name.strip_prefix("a-") {
                rest.split_once('-')
                    .and_then(|(j, c)| Some(chunk_key(b'a', j.parse().ok()?, c.parse().ok()?)))
            } else if let Some(rest) = name.strip_prefix("r-") {
                rest.parse().ok().map(|j| job_key(b'r', j))
            } else {
                None
            };
            let referenced = match key {
                Some(k) => self.kv.get(&k)?.is_some(),
                // Temporary files of an interrupted write; foreign files are left alone.
                None => !name.starts_with(TMP_PREFIX),
            };
            if !referenced {
                self.blobs.remove(&name)?;
            }
        }
        Ok(())
    }

    /// An artifact's bytes, checked against the hash recorded under `key`.
    fn checked_blob(&self, name: &str, key: &[u8], want: &[u8]) -> Result<Vec<u8>, StoreError> {
        let damaged = |why: String| StoreError::Damaged {
            key: key_text(key),
            why,
        };
        let bytes = self
            .blobs
            .get(name)?
            .ok_or_else(|| damaged(format!("its artifact file `{name}` is missing")))?;
        if hash(&bytes) != want {
            return Err(damaged(format!(
                "its artifact file `{name}` does not match the recorded hash"
            )));
        }
        Ok(bytes)
    }

    /// Writes a group commit atomically and durably: artifact files first, then one sled batch that records
    /// their hashes with everything else.
    pub fn write(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(ops.len());
        let mut superseded = Vec::new();
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
                        self.blobs.put(&chunk_blob(job, chunk), &artifact)?;
                        writes.push((chunk_key(b'a', job, chunk), Some(hash(&artifact))));
                    }
                    writes.push((chunk_key(b'o', job, chunk), Some(encode(&out))));
                }
                Op::Artifact(job, bytes) => {
                    self.blobs.put(&job_blob(job), &bytes)?;
                    for (k, _) in self.kv.scan(&job_key(b'a', job))? {
                        superseded.push(chunk_blob(job, be_u64(&k, &k[10..])?));
                        writes.push((k, None));
                    }
                    writes.push((job_key(b'r', job), Some(hash(&bytes))));
                }
                Op::Meta(name, v) => writes.push((
                    format!("m/{name}").into_bytes(),
                    Some(v.to_be_bytes().to_vec()),
                )),
            }
        }
        self.kv.apply(writes)?;
        // No longer referenced; a failure here only leaves files that the next start-up removes.
        for name in superseded {
            let _ = self.blobs.remove(&name);
        }
        Ok(())
    }

    /// Whether any chunk of `job` stored an artifact (only those jobs need a merge).
    pub fn has_chunk_artifacts(&self, job: JobId) -> Result<bool, StoreError> {
        Ok(!self.kv.scan(&job_key(b'a', job))?.is_empty())
    }

    /// A finished job's merged artifact, if it has been stored.
    pub fn artifact(&self, job: JobId) -> Result<Option<Vec<u8>>, StoreError> {
        let key = job_key(b'r', job);
        match self.kv.get(&key)? {
            Some(want) => self.checked_blob(&job_blob(job), &key, &want).map(Some),
            None => Ok(None),
        }
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
        let mut hashes: BTreeMap<u64, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
        for (k, v) in self.kv.scan(&job_key(b'a', job))? {
            hashes.insert(be_u64(&k, &k[10..])?, (k, v));
        }
        self.kv
            .scan(&job_key(b'o', job))?
            .into_iter()
            .map(|(k, v)| {
                let chunk = be_u64(&k, &k[10..])?;
                let mut out: ChunkOutput = decode(&k, &v)?;
                if let Some((key, want)) = hashes.remove(&chunk) {
                    out.artifact = self.checked_blob(&chunk_blob(job, chunk), &key, &want)?;
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
            replicate: 1,
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

    fn temp_store_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sweep-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn artifacts_live_in_files_and_damage_is_named() {
        let dir = temp_store_dir("files");
        let with = |a: Vec<u8>| ChunkOutput {
            nodes: 1,
            artifact: a,
            ..Default::default()
        };
        {
            let store = Store::open(&dir).unwrap();
            store
                .write(vec![Op::Output(7, 0, with(vec![5; 1000]))])
                .unwrap();
        }
        let file = dir.join("artifacts").join("a-7-0");
        assert_eq!(std::fs::read(&file).unwrap(), vec![5; 1000]);
        // An unreferenced file (a crash between file and batch) and a temporary file go at start-up.
        std::fs::write(dir.join("artifacts").join("a-7-1"), b"orphan").unwrap();
        std::fs::write(dir.join("artifacts").join(".tmp-r-7"), b"half").unwrap();
        {
            let store = Store::open(&dir).unwrap();
            assert!(!dir.join("artifacts").join("a-7-1").exists());
            assert!(!dir.join("artifacts").join(".tmp-r-7").exists());
            assert_eq!(store.outputs(7).unwrap(), vec![(0, with(vec![5; 1000]))]);
        }
        std::fs::write(&file, vec![6; 1000]).unwrap();
        let err = Store::open(&dir).unwrap().outputs(7).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        std::fs::remove_file(&file).unwrap();
        let err = Store::open(&dir).unwrap().outputs(7).unwrap_err();
        assert!(err.to_string().contains("`a-7-0` is missing"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn format_1_stores_move_their_artifacts_to_files() {
        let dir = temp_store_dir("legacy");
        {
            // A store as the first releases wrote it: artifacts as raw sled values.
            let db = sled::open(&dir).unwrap();
            db.insert(b"m/format", FORMAT_1).unwrap();
            db.insert(chunk_key(b'a', 3, 1), vec![1u8, 2, 3]).unwrap();
            db.insert(chunk_key(b'o', 3, 1), encode(&ChunkOutput::default()))
                .unwrap();
            db.insert(job_key(b'r', 2), vec![8u8; 40]).unwrap();
            db.flush().unwrap();
        }
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.artifact(2).unwrap(), Some(vec![8; 40]));
        assert_eq!(store.outputs(3).unwrap()[0].1.artifact, vec![1, 2, 3]);
        drop(store);
        let db = sled::open(&dir).unwrap();
        assert_eq!(db.get(b"m/format").unwrap().unwrap().as_ref(), FORMAT);
        assert_eq!(db.get(job_key(b'r', 2)).unwrap().unwrap().len(), 32);
        drop(db);
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
