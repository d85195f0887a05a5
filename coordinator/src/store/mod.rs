//! Durable state: jobs, chunk states, chunk results and running tallies, behind a small key-value trait with
//! two implementations: sled (production) and an in-memory map (unit tests).
//!
//! Layout (one keyspace, so a whole group commit is one atomic batch):
//! - `m/format` = "sweep-store/3"; `m/next_job`, `m/next_lease`: big-endian u64 counters
//! - `j/<job>`: [`JobRecord`] (JSON)
//! - `t/<job>`: the job's [`Tally`] (JSON), rewritten with every accepted result
//! - `b/<job><block>`: the chunk records and small outputs of chunks `block * BLOCK ..`, [`BLOCK`] = 64 of
//!   them (see [`Block`]); a chunk without an entry is pending, never leased. Rewritten whole with every
//!   change to one of its chunks.
//! - `o/<job><chunk>`: a chunk's [`ChunkOutput`] (JSON) without its artifact when it is too large to inline
//!   (over [`INLINE_OUTPUT_MAX`] bytes), written in the same batch as its `Done` record; `a/<job><chunk>`: the
//!   blake3 hash of that chunk's artifact
//! - `r/<job>`: the blake3 hash of the job's merged artifact; the batch that writes it removes the chunk
//!   artifacts' hashes, so a table is stored once
//! - format 2 only, read but never written: `c/<job><chunk>`, a chunk's [`ChunkRecord`] (JSON), and `o/` for
//!   every output. A block entry wins over a `c/` record, an inlined output over an `o/` one.
//!
//! `<job>`, `<chunk>` and `<block>` are big-endian u64, so a prefix scan returns a job's chunks in order.
//!
//! Why blocks (format 3): with one key per chunk (format 2), sled 0.34's index and its crash recovery grew
//! with the chunk count: a job of 1,000,000 tiny chunks held the coordinator at 630 MB and a restart after
//! SIGKILL took 4.5 s. Blocks are rewritten in place, never deleted: sled 0.34 handles removals badly (300,000
//! keys inserted and removed 2,000 behind held a writer at 557 MB, against 89 MB for the inserts alone), so
//! "compact finished chunks into one record and delete theirs" made things worse, while 1,000,000 chunk
//! results as 64-chunk blocks held a plain sled writer at 61 MB (178 MB as per-chunk keys) and reopened after
//! SIGKILL in 0.2 s (1.6 s). A group commit rewrites each block it touches once, so under load a block write
//! carries many results.
//!
//! Artifacts themselves (tables of hundreds of MB) live in files under `artifacts/` beside sled's own files,
//! not in sled: sled keeps every large value in its log until it rewrites a whole segment, so a 169 MB table
//! written as chunks and then once merged left 755 MB on disk. A file is written and synced (to a temporary
//! name, then renamed) *before* the batch that records its hash, so a recorded hash always has its file; a
//! crash in between leaves an unreferenced file that the next write of the same chunk replaces or that
//! start-up removes. Reading checks the hash, so a damaged or missing file is reported, never served.
//!
//! Format 1 kept artifacts inside sled; opening such a store moves them out once (see [`SledKv::open`]).
//! Opening a format-2 store only rewrites its marker (so older releases refuse it): its per-chunk keys stay
//! and are read beside the blocks, which take over each chunk as it changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sweep_space::{ChunkOutput, Tally};

use crate::scheduler::{ChunkRecord, JobId, JobState};

const FORMAT: &[u8] = b"sweep-store/3";
/// One key per chunk record (`c/`) and output (`o/`); read beside the blocks, marked format 3 on open.
const FORMAT_2: &[u8] = b"sweep-store/2";
/// Artifacts inside sled, as the first releases wrote them; migrated on open.
const FORMAT_1: &[u8] = b"sweep-store/1";

/// Chunks per block record (`b/<job><block>`). Small enough that rewriting a block with every change to one of
/// its chunks stays cheap (a block of done tiny chunks is about 9 KB), large enough that sled holds 64 times
/// fewer keys than chunks.
pub const BLOCK: u64 = 64;

/// Outputs whose JSON is longer than this keep a key of their own (`o/`), so a chunk with many solutions does
/// not make every rewrite of its block large.
pub const INLINE_OUTPUT_MAX: usize = 512;

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
}

/// Everything needed to rebuild the coordinator's memory at start-up.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub tallies: BTreeMap<JobId, Tally>,
    /// Every chunk record that is not `Done`, in (job, chunk) order.
    pub chunks: Vec<(JobId, u64, ChunkRecord)>,
    /// The done chunks, in (job, chunk) order: only their number matters at start-up (a duplicate result's
    /// digest is read from the store when one arrives), and a million digests would cost ~150 MB.
    pub done: Vec<(JobId, u64)>,
    pub next_job: u64,
    pub next_lease: u64,
    /// Resume states of chunks that were interrupted (or are running), by (job, chunk).
    pub checkpoints: Vec<(JobId, u64, String)>,
}

/// Key-value pairs as a prefix scan returns them, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// One atomic batch of writes (`None` = remove the key).
pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The raw key-value layer the two backends implement.
pub trait Kv: Send + Sync {
    /// Applies every write (`None` = remove the key) atomically and makes it durable before returning.
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError>;
    /// Applies each part atomically, in order, and makes all durable before returning. A crash part-way
    /// leaves a prefix of the parts. The default applies them one by one; sled flushes once at the end.
    fn apply_parts(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        parts.into_iter().try_for_each(|p| self.apply(p))
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError>;
    /// Calls `f` with each pair under `prefix`, in key order. sled's override does not collect them first,
    /// which keeps a start-up over a million chunks from holding all their blocks at once.
    fn for_each(&self, prefix: &[u8], f: &mut ScanFn<'_>) -> Result<(), StoreError> {
        self.scan(prefix)?.iter().try_for_each(|(k, v)| f(k, v))
    }
}

/// What [`Kv::for_each`] calls with each key and value.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError> + 'a;

pub struct SledKv {
    db: sled::Db,
    /// The format the store had when opened (1, 2 or 3); [`Store::open`] brings older ones to 3.
    format: u8,
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
        let format = match db.get(b"m/format")? {
            Some(v) if v.as_ref() == FORMAT => 3,
            Some(v) if v.as_ref() == FORMAT_2 => 2,
            Some(v) if v.as_ref() == FORMAT_1 => 1,
            Some(v) => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: format!("unknown format `{}`", String::from_utf8_lossy(&v)),
                })
            }
            None if db.is_empty() => {
                db.insert(b"m/format", FORMAT)?;
                db.flush()?;
                3
            }
            None => {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "a sled database without sweep's marker".into(),
                })
            }
        };
        Ok(SledKv { db, format })
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

fn shipped_blob(digest: &str) -> String {
    format!("s-{digest}")
}

fn shipped_key(digest: &str) -> Vec<u8> {
    format!("s/{digest}").into_bytes()
}

/// Whether `digest` is a blake3 digest in lower-case hex: the only names a shipped file may have (they become
/// file names).
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
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
        self.apply_parts(vec![writes])
    }

    fn apply_parts(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        for writes in parts {
            let mut batch = sled::Batch::default();
            for (k, v) in writes {
                match v {
                    Some(v) => batch.insert(k, v),
                    None => batch.remove(k),
                }
            }
            self.db.apply_batch(batch)?;
        }
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

    fn for_each(&self, prefix: &[u8], f: &mut ScanFn<'_>) -> Result<(), StoreError> {
        for r in self.db.scan_prefix(prefix) {
            let (k, v) = r?;
            f(&k, &v)?;
        }
        Ok(())
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

/// Writes per sled batch at most (about): a group commit under load can hold tens of thousands of writes, and
/// sled 0.34 holds every node a batch touches, so one huge batch cost the coordinator ~950 MB over 100,000 tiny
/// chunks (replaying the same writes in parts of 1,000: 48 MB).
pub const MAX_BATCH_OPS: usize = 1_000;

/// Splits a group commit into parts that are each consistent on their own, so a crash after any prefix of
/// them (sled recovers a prefix of its batches) leaves a store that opens. Never between a chunk's `Done`
/// record, its output and the tally that follows them; everything else was staged in causal order, so any
/// prefix is a state the coordinator passed through.
pub fn split_commit(ops: Vec<Op>) -> Vec<Vec<Op>> {
    let mut parts = Vec::with_capacity(ops.len() / MAX_BATCH_OPS + 1);
    let mut part = Vec::with_capacity(ops.len().min(MAX_BATCH_OPS + 2));
    for op in ops {
        let mid_result = matches!(op, Op::Output(..) | Op::Tally(..))
            || matches!(
                part.last(),
                Some(Op::Chunk(_, _, ChunkRecord::Done { .. })) | Some(Op::Output(..))
            );
        if part.len() >= MAX_BATCH_OPS && !mid_result {
            parts.push(std::mem::take(&mut part));
        }
        part.push(op);
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
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

/// The chunks of one block as stored under `b/<job><block>`: for each chunk that has any, its record and its
/// inlined output, each as the JSON that format 2 kept under `c/` and `o/`. Kept as bytes, so rewriting a block
/// re-encodes only the entries that changed, and fsck reads them exactly like per-chunk records.
///
/// Encoding: a version byte ([`BLOCK_VERSION`]), then per entry in chunk order the chunk's offset in the block
/// (u32 LE), the record's length (u32 LE, 0 = none) and bytes, and the output's length (u32 LE, 0 = none) and
/// bytes. Lengths let start-up read every record without decoding any output.
#[derive(Clone, Debug, Default, PartialEq)]
struct Block {
    entries: BTreeMap<u32, Entry>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Entry {
    record: Option<Vec<u8>>,
    output: Option<Vec<u8>>,
}

const BLOCK_VERSION: u8 = 1;

/// One entry of an encoded block, borrowed from it.
struct RawEntry<'a> {
    offset: u32,
    record: Option<&'a [u8]>,
    output: Option<&'a [u8]>,
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let b: [u8; 4] = take(rest, 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// A length-prefixed field; length 0 is "none".
fn take_field<'a>(rest: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = take_u32(rest)? as usize;
    if len == 0 {
        return Some(None);
    }
    take(rest, len).map(Some)
}

/// The entries of the block stored under `key`, checked for framing: a damaged block is named, never half read.
fn block_entries<'a>(key: &[u8], bytes: &'a [u8]) -> Result<Vec<RawEntry<'a>>, StoreError> {
    let damaged = |why: String| StoreError::Damaged {
        key: key_text(key),
        why,
    };
    let Some((&version, mut rest)) = bytes.split_first() else {
        return Err(damaged("an empty block".into()));
    };
    if version != BLOCK_VERSION {
        return Err(damaged(format!("unknown block version {version}")));
    }
    let mut entries: Vec<RawEntry<'a>> = Vec::new();
    while !rest.is_empty() {
        let parsed = take_u32(&mut rest)
            .and_then(|offset| Some((offset, take_field(&mut rest)?, take_field(&mut rest)?)));
        let Some((offset, record, output)) = parsed else {
            return Err(damaged(format!(
                "truncated after {} entries",
                entries.len()
            )));
        };
        if u64::from(offset) >= BLOCK || entries.last().is_some_and(|e| e.offset >= offset) {
            return Err(damaged(format!(
                "entry {} has offset {offset}: out of order or beyond the block's {BLOCK} chunks",
                entries.len()
            )));
        }
        entries.push(RawEntry {
            offset,
            record,
            output,
        });
    }
    Ok(entries)
}

impl Block {
    fn decode(key: &[u8], bytes: &[u8]) -> Result<Block, StoreError> {
        let entries = block_entries(key, bytes)?
            .into_iter()
            .map(|e| {
                let entry = Entry {
                    record: e.record.map(<[u8]>::to_vec),
                    output: e.output.map(<[u8]>::to_vec),
                };
                (e.offset, entry)
            })
            .collect();
        Ok(Block { entries })
    }

    /// The encoded block, or `None` when no chunk has anything left in it.
    fn encode(&self) -> Option<Vec<u8>> {
        let live = || {
            self.entries
                .iter()
                .filter(|(_, e)| e.record.is_some() || e.output.is_some())
        };
        live().next()?;
        let mut out = vec![BLOCK_VERSION];
        for (offset, e) in live() {
            out.extend_from_slice(&offset.to_le_bytes());
            for field in [&e.record, &e.output] {
                let bytes = field.as_deref().unwrap_or_default();
                // A record or output is JSON (never empty) far below 4 GB: the group commit refuses larger
                // reports (limits.rs) long before.
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
        Some(out)
    }
}

/// The key of the block that holds `chunk`, and the chunk's offset in it.
fn block_of(job: JobId, chunk: u64) -> (Vec<u8>, u32) {
    (chunk_key(b'b', job, chunk / BLOCK), (chunk % BLOCK) as u32)
}

/// The job and first chunk of the block stored under `key`.
fn block_start(key: &[u8]) -> Result<(JobId, u64), StoreError> {
    let damaged = |why: &str| StoreError::Damaged {
        key: key_text(key),
        why: why.into(),
    };
    if key.len() != 18 {
        return Err(damaged("bad block key length"));
    }
    let job = be_u64(key, &key[2..10])?;
    let first = be_u64(key, &key[10..18])?
        .checked_mul(BLOCK)
        .ok_or_else(|| damaged("block number out of range"))?;
    Ok((job, first))
}

/// Decodes one record or output held in a block, naming the block and the chunk if it is damaged.
fn decode_entry<T: serde::de::DeserializeOwned>(
    block_key: &[u8],
    chunk: u64,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Damaged {
        key: format!("{} (chunk {chunk})", key_text(block_key)),
        why: e.to_string(),
    })
}

/// One chunk record or output as [`Store::scan_chunks`] finds it: under its format-2 key (`c/` or `o/`
/// + job + chunk), whether it is held by a block or by a key of its own.
#[derive(Debug)]
pub(crate) struct StoredChunk {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// The block that holds it, if any: named when it does not decode.
    pub block: Option<Vec<u8>>,
}

impl StoredChunk {
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        match &self.block {
            Some(b) => {
                let chunk = be_u64(&self.key, self.key.get(10..).unwrap_or_default())?;
                decode_entry(b, chunk, &self.value)
            }
            None => decode(&self.key, &self.value),
        }
    }
}

/// Blocks that do not decode: each key with the error naming it.
pub(crate) type DamagedBlocks = Vec<(Vec<u8>, StoreError)>;

/// The blocks one write changes: each read once, changed by every op on its chunks, and written at the end of
/// each part that touched it (so every part carries its blocks as they are after it).
struct BlockEdits<'a> {
    kv: &'a dyn Kv,
    blocks: BTreeMap<Vec<u8>, Block>,
    touched: std::collections::BTreeSet<Vec<u8>>,
    /// fsck's repair rewrites blocks that do not decode (they are reported and replaced), nothing else does.
    replace_damaged: bool,
}

impl<'a> BlockEdits<'a> {
    fn new(kv: &'a dyn Kv, replace_damaged: bool) -> BlockEdits<'a> {
        BlockEdits {
            kv,
            blocks: BTreeMap::new(),
            touched: Default::default(),
            replace_damaged,
        }
    }

    fn entry(&mut self, job: JobId, chunk: u64) -> Result<&mut Entry, StoreError> {
        let (key, offset) = block_of(job, chunk);
        self.touched.insert(key.clone());
        let block = match self.blocks.entry(key) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let block = match self.kv.get(v.key())? {
                    Some(bytes) => match Block::decode(v.key(), &bytes) {
                        Ok(b) => b,
                        Err(_) if self.replace_damaged => Block::default(),
                        Err(e) => return Err(e),
                    },
                    None => Block::default(),
                };
                v.insert(block)
            }
        };
        Ok(block.entries.entry(offset).or_default())
    }

    /// The touched blocks' writes, as they are now.
    fn drain_into(&mut self, writes: &mut Writes) {
        for key in std::mem::take(&mut self.touched) {
            let value = self.blocks.get(&key).and_then(Block::encode);
            writes.push((key, value));
        }
    }
}

/// Typed access to the store.
pub struct Store {
    kv: Box<dyn Kv>,
    blobs: Box<dyn Blobs>,
    /// Writes read the blocks they change: one writer at a time (the coordinator has only one anyway).
    writer: Mutex<()>,
}

impl Store {
    /// A store over `kv`, with artifacts kept in memory (tests).
    pub fn new(kv: Box<dyn Kv>) -> Store {
        Store::with_blobs(kv, Box::new(MemBlobs::default()))
    }

    pub fn with_blobs(kv: Box<dyn Kv>, blobs: Box<dyn Blobs>) -> Store {
        Store {
            kv,
            blobs,
            writer: Mutex::new(()),
        }
    }

    /// Opens the store in `path`: sled's files, and artifact files in `path/artifacts`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let kv = SledKv::open(path)?;
        let format = kv.format;
        let blobs = FileBlobs::open(path.join("artifacts"))?;
        let store = Store::with_blobs(Box::new(kv), Box::new(blobs));
        match format {
            1 => store.migrate_format_1()?,
            // Format 2's per-chunk keys are read as they are; only the marker changes, so that a release that
            // knows nothing of blocks refuses the store instead of missing every chunk written from now on.
            2 => store
                .kv
                .apply(vec![(b"m/format".to_vec(), Some(FORMAT.to_vec()))])?,
            _ => {}
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

    /// Moves format 1's in-sled artifacts into files, then marks the store as format 3 (format 1 had per-chunk
    /// keys like format 2), in one batch: a crash part-way leaves a format-1 store and the migration runs again.
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
                name.strip_prefix("s-").map(shipped_key)
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
        self.write_parts(vec![ops])
    }

    /// [`Store::write`] for a group commit split into parts (see [`Kv::apply_parts`]): each part one atomic
    /// batch, all durable on return.
    pub fn write_parts(&self, parts: Vec<Vec<Op>>) -> Result<(), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut superseded = Vec::new();
        let mut batches = Vec::with_capacity(parts.len());
        let mut blocks = BlockEdits::new(self.kv.as_ref(), false);
        for ops in parts {
            batches.push(self.encode_part(ops, &mut blocks, &mut superseded)?);
        }
        self.kv.apply_parts(batches)?;
        // No longer referenced; a failure here only leaves files that the next start-up removes.
        for name in superseded {
            let _ = self.blobs.remove(&name);
        }
        Ok(())
    }

    /// One part's key-value writes; artifact files are written (and synced) here, before their batch.
    fn encode_part(
        &self,
        ops: Vec<Op>,
        blocks: &mut BlockEdits<'_>,
        superseded: &mut Vec<String>,
    ) -> Result<Writes, StoreError> {
        let mut writes = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Job(rec) => writes.push((job_key(b'j', rec.id), Some(encode(&rec)))),
                Op::Tally(job, t) => writes.push((job_key(b't', job), Some(encode(&t)))),
                Op::Chunk(job, chunk, rec) => blocks.entry(job, chunk)?.record = Some(encode(&rec)),
                Op::Output(job, chunk, mut out) => {
                    let artifact = std::mem::take(&mut out.artifact);
                    if !artifact.is_empty() {
                        self.blobs.put(&chunk_blob(job, chunk), &artifact)?;
                        writes.push((chunk_key(b'a', job, chunk), Some(hash(&artifact))));
                    }
                    let json = encode(&out);
                    let inline = json.len() <= INLINE_OUTPUT_MAX;
                    let entry = blocks.entry(job, chunk)?;
                    if inline {
                        entry.output = Some(json);
                    } else {
                        entry.output = None;
                        writes.push((chunk_key(b'o', job, chunk), Some(json)));
                    }
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
                Op::Checkpoint(job, chunk, state) => {
                    writes.push((chunk_key(b'k', job, chunk), state.map(String::into_bytes)))
                }
            }
        }
        blocks.drain_into(&mut writes);
        Ok(writes)
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

    /// Stores a shipped file under its digest, durably: the file first, then its record. Storing it again
    /// is a no-op.
    pub fn put_shipped(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let key = shipped_key(digest);
        if !is_digest(digest) || digest_hex(bytes) != digest {
            return Err(StoreError::Damaged {
                key: key_text(&key),
                why: "the file does not match its digest".into(),
            });
        }
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.blobs.put(&shipped_blob(digest), bytes)?;
        self.kv.apply(vec![(key, Some(hash(bytes)))])
    }

    /// Whether a shipped file with this digest is stored.
    pub fn has_shipped(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(is_digest(digest) && self.kv.get(&shipped_key(digest))?.is_some())
    }

    /// A shipped file's bytes, checked against its digest.
    pub fn shipped(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if !is_digest(digest) {
            return Ok(None);
        }
        let key = shipped_key(digest);
        match self.kv.get(&key)? {
            Some(want) => self
                .checked_blob(&shipped_blob(digest), &key, &want)
                .map(Some),
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
        // Format 2's per-chunk records, if any are left; an entry in a block wins over them.
        let mut legacy = Vec::new();
        for (k, v) in self.kv.scan(b"c/")? {
            if k.len() != 18 {
                return Err(StoreError::Damaged {
                    key: key_text(&k),
                    why: "bad chunk key length".into(),
                });
            }
            let job = be_u64(&k, &k[2..10])?;
            let chunk = be_u64(&k, &k[10..18])?;
            legacy.push((job, chunk, decode(&k, &v)?));
        }
        // Records only: the lengths in a block let its outputs be skipped unread. Every record is decoded
        // (a damaged one is named now, not when a result needs it), but a done one is not kept.
        let keep = |snap: &mut Snapshot, job, chunk, rec| match rec {
            ChunkRecord::Done { .. } => snap.done.push((job, chunk)),
            rec => snap.chunks.push((job, chunk, rec)),
        };
        self.kv.for_each(b"b/", &mut |k, v| {
            let (job, first) = block_start(k)?;
            for e in block_entries(k, v)? {
                if let Some(rec) = e.record {
                    let chunk = first + u64::from(e.offset);
                    keep(&mut snap, job, chunk, decode_entry(k, chunk, rec)?);
                }
            }
            Ok(())
        })?;
        if !legacy.is_empty() {
            let in_blocks: std::collections::HashSet<(JobId, u64)> = (snap.done.iter().copied())
                .chain(snap.chunks.iter().map(|(j, c, _)| (*j, *c)))
                .collect();
            for (job, chunk, rec) in legacy {
                if !in_blocks.contains(&(job, chunk)) {
                    keep(&mut snap, job, chunk, rec);
                }
            }
            snap.done.sort_unstable();
            snap.chunks.sort_by_key(|(j, c, _)| (*j, *c));
        }
        for (k, v) in self.kv.scan(b"k/")? {
            if k.len() != 18 {
                continue;
            }
            let (job, chunk) = (be_u64(&k, &k[2..10])?, be_u64(&k, &k[10..])?);
            // A state is the program's own text; one that is not UTF-8 is dropped (the chunk restarts).
            if let Ok(text) = String::from_utf8(v) {
                snap.checkpoints.push((job, chunk, text));
            }
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
        let (found, mut damaged) = self.scan_chunks(b'o', Some(job))?;
        if let Some((_, e)) = damaged.pop() {
            return Err(e);
        }
        found
            .into_iter()
            .map(|s| {
                let chunk = be_u64(&s.key, &s.key[10..])?;
                let mut out: ChunkOutput = s.decode()?;
                if let Some((key, want)) = hashes.remove(&chunk) {
                    out.artifact = self.checked_blob(&chunk_blob(job, chunk), &key, &want)?;
                }
                Ok((chunk, out))
            })
            .collect()
    }

    /// Every chunk record of a job (chunks without one are pending, never leased).
    pub fn chunks(&self, job: JobId) -> Result<Vec<(u64, ChunkRecord)>, StoreError> {
        let (found, mut damaged) = self.scan_chunks(b'c', Some(job))?;
        if let Some((_, e)) = damaged.pop() {
            return Err(e);
        }
        found
            .into_iter()
            .map(|s| Ok((be_u64(&s.key, &s.key[10..])?, s.decode()?)))
            .collect()
    }

    pub fn chunk(&self, job: JobId, chunk: u64) -> Result<Option<ChunkRecord>, StoreError> {
        let (bkey, offset) = block_of(job, chunk);
        if let Some(bytes) = self.kv.get(&bkey)? {
            let held = block_entries(&bkey, &bytes)?
                .into_iter()
                .find(|e| e.offset == offset)
                .and_then(|e| e.record);
            if let Some(rec) = held {
                return decode_entry(&bkey, chunk, rec).map(Some);
            }
        }
        let key = chunk_key(b'c', job, chunk);
        self.kv.get(&key)?.map(|v| decode(&key, &v)).transpose()
    }

    /// Chunk records (`tag` = `b'c'`) or outputs (`b'o'`) of one job or of all, each under its format-2 key
    /// whether a block or a key of its own holds it, in key order; a block's entry wins over a key of its own.
    /// Blocks that do not decode come back apart, as errors naming them; the keys of their own they would have
    /// hidden are not (a format-2 store's older states of the same chunks), so after fsck drops such a block
    /// those show through: work repeated, never invented.
    pub(crate) fn scan_chunks(
        &self,
        tag: u8,
        job: Option<JobId>,
    ) -> Result<(Vec<StoredChunk>, DamagedBlocks), StoreError> {
        let prefix = |t: u8| match job {
            Some(j) => job_key(t, j),
            None => vec![t, b'/'],
        };
        let mut found: BTreeMap<Vec<u8>, StoredChunk> = BTreeMap::new();
        for (key, value) in self.kv.scan(&prefix(tag))? {
            found.insert(
                key.clone(),
                StoredChunk {
                    key,
                    value,
                    block: None,
                },
            );
        }
        let mut damaged = Vec::new();
        for (bkey, bytes) in self.kv.scan(&prefix(b'b'))? {
            let entries = block_start(&bkey).and_then(|s| Ok((s, block_entries(&bkey, &bytes)?)));
            let ((job, first), entries) = match entries {
                Ok(x) => x,
                Err(e) => {
                    damaged.push((bkey, e));
                    continue;
                }
            };
            for e in entries {
                let held = if tag == b'c' { e.record } else { e.output };
                if let Some(value) = held {
                    let key = chunk_key(tag, job, first + u64::from(e.offset));
                    let stored = StoredChunk {
                        key: key.clone(),
                        value: value.to_vec(),
                        block: Some(bkey.clone()),
                    };
                    found.insert(key, stored);
                }
            }
        }
        Ok((found.into_values().collect(), damaged))
    }

    /// Applies raw writes atomically (for fsck's repair), except that writes to format-2 chunk keys
    /// (`c/` and `o/` + job + chunk) change the chunk wherever it lives: setting one sets the entry in its
    /// block, removing one removes both the entry and the key of its own. Blocks that do not decode are
    /// replaced (fsck reports them first).
    pub(crate) fn apply_chunk_writes(&self, writes: Writes) -> Result<(), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut blocks = BlockEdits::new(self.kv.as_ref(), true);
        let mut raw = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            let chunk_write = key.len() == 18 && (key.starts_with(b"c/") || key.starts_with(b"o/"));
            if !chunk_write {
                raw.push((key, value));
                continue;
            }
            let (job, chunk) = (be_u64(&key, &key[2..10])?, be_u64(&key, &key[10..])?);
            let entry = blocks.entry(job, chunk)?;
            let field = if key[0] == b'c' {
                &mut entry.record
            } else {
                &mut entry.output
            };
            if value.is_none() {
                raw.push((key, None));
            }
            *field = value;
        }
        // Blocks last: a batch keeps the last write of a key, and a replaced damaged block is also dropped.
        blocks.drain_into(&mut raw);
        self.kv.apply(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group commit as the coordinator stages it: leases, then per result its `Done` record, output and
    /// the tally after it, with a job record now and then.
    fn staged_commit(results: u64) -> Vec<Op> {
        let mut ops = Vec::new();
        let mut tally = Tally::default();
        for chunk in 0..results {
            ops.push(Op::Chunk(
                1,
                chunk + results,
                ChunkRecord::Leased {
                    lease: chunk,
                    worker: "w".into(),
                    deadline: 9,
                    attempts: 0,
                },
            ));
            let out = ChunkOutput {
                nodes: chunk + 1,
                ..Default::default()
            };
            tally.add(&out);
            ops.push(Op::Chunk(
                1,
                chunk,
                ChunkRecord::Done {
                    digest: format!("{chunk}"),
                    worker: "w".into(),
                },
            ));
            ops.push(Op::Output(1, chunk, out));
            ops.push(Op::Tally(1, tally.clone()));
            if chunk % 700 == 0 {
                ops.push(Op::Meta("next_lease", chunk));
            }
        }
        ops
    }

    #[test]
    fn a_split_commit_keeps_order_and_never_cuts_a_result() {
        for results in [0, 1, 333, 334, 2_000] {
            let ops = staged_commit(results);
            let n = ops.len();
            let parts = split_commit(ops);
            assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), n);
            for part in &parts {
                assert!(part.len() <= MAX_BATCH_OPS + 3, "{}", part.len());
                assert!(!matches!(
                    part.first(),
                    Some(Op::Output(..) | Op::Tally(..))
                ));
                assert!(!matches!(
                    part.last(),
                    Some(Op::Output(..) | Op::Chunk(_, _, ChunkRecord::Done { .. }))
                ));
            }
            if n > MAX_BATCH_OPS {
                assert!(parts.len() > 1);
            }
        }
    }

    /// sled recovers a prefix of its batches: after every prefix of the parts, each tally must sum exactly the
    /// done chunks stored with it (the check the coordinator makes at start-up), and fsck finds nothing wrong.
    /// Parts rewrite blocks that earlier parts of the same commit changed, and some outputs are too large to
    /// inline, so both the block edits carried across parts and the `o/` keys are covered.
    #[test]
    fn every_prefix_of_a_split_commit_is_a_consistent_store() {
        let results = 2_500;
        let mut ops = vec![Op::Job(JobRecord {
            n_chunks: 2 * results,
            ..record(1)
        })];
        ops.extend(staged_commit(results));
        let parts = split_commit(ops);
        assert!(parts.len() >= 3);
        for upto in 1..=parts.len() {
            let store = Store::in_memory();
            store.write_parts(parts[..upto].to_vec()).unwrap();
            let snap = store.load().unwrap();
            let done = snap.done.len() as u64;
            assert_eq!(snap.tallies[&1].chunks, done, "after {upto} parts");
            let outputs = store.outputs(1).unwrap();
            assert_eq!(outputs.len() as u64, done);
            let nodes: u128 = outputs.iter().map(|(_, o)| u128::from(o.nodes)).sum();
            assert_eq!(snap.tallies[&1].nodes, nodes);
            let report = crate::fsck::check(&store, true).unwrap();
            assert!(
                report.is_clean(),
                "after {upto} parts: {:?}",
                report.problems
            );
        }
    }

    fn big_output(chunk: u64) -> ChunkOutput {
        ChunkOutput {
            nodes: chunk,
            solutions: (0..40).map(|i| format!("solution-{chunk}-{i}")).collect(),
            ..Default::default()
        }
    }

    fn done_record(chunk: u64) -> ChunkRecord {
        ChunkRecord::Done {
            digest: format!("{chunk:064x}"),
            worker: format!("w{}", chunk % 3),
        }
    }

    /// Format 3: chunk records and small outputs live in 64-chunk blocks, large outputs in keys of their own;
    /// every reader sees them as it saw per-chunk records.
    #[test]
    fn chunks_live_in_blocks_and_read_like_per_chunk_records() {
        let store = Store::in_memory();
        let mut ops = vec![Op::Job(JobRecord {
            n_chunks: 200,
            ..record(1)
        })];
        let mut want_outputs = Vec::new();
        let mut tally = Tally::default();
        for chunk in 0..150 {
            let out = if chunk % 50 == 7 {
                big_output(chunk)
            } else {
                ChunkOutput {
                    nodes: chunk,
                    ..Default::default()
                }
            };
            tally.add(&out);
            ops.push(Op::Chunk(1, chunk, done_record(chunk)));
            ops.push(Op::Output(1, chunk, out.clone()));
            want_outputs.push((chunk, out));
        }
        ops.push(Op::Tally(1, tally));
        let leased = ChunkRecord::Leased {
            lease: 9,
            worker: "w".into(),
            deadline: 5,
            attempts: 1,
        };
        let poisoned = ChunkRecord::Poisoned {
            attempts: 3,
            last_error: "boom".into(),
        };
        ops.push(Op::Chunk(1, 170, leased.clone()));
        ops.push(Op::Chunk(1, 199, poisoned.clone()));
        // Written over an earlier state in the same commit: the last one counts.
        ops.push(Op::Chunk(1, 180, leased.clone()));
        ops.push(Op::Chunk(1, 180, ChunkRecord::Pending { attempts: 1 }));
        store.write(ops).unwrap();

        assert!(store.kv.scan(b"c/").unwrap().is_empty());
        assert_eq!(store.kv.scan(b"b/").unwrap().len(), 4);
        assert_eq!(store.kv.scan(b"o/").unwrap().len(), 3, "only large outputs");
        let snap = store.load().unwrap();
        assert_eq!(snap.done, (0..150).map(|c| (1, c)).collect::<Vec<_>>());
        let others = vec![
            (1, 170, leased.clone()),
            (1, 180, ChunkRecord::Pending { attempts: 1 }),
            (1, 199, poisoned.clone()),
        ];
        assert_eq!(snap.chunks, others);
        assert_eq!(store.outputs(1).unwrap(), want_outputs);
        let chunks = store.chunks(1).unwrap();
        assert_eq!(chunks.len(), 153);
        assert_eq!(chunks[64], (64, done_record(64)));
        assert_eq!(chunks[152], (199, poisoned.clone()));
        assert_eq!(store.chunk(1, 130).unwrap(), Some(done_record(130)));
        assert_eq!(store.chunk(1, 170).unwrap(), Some(leased));
        assert_eq!(store.chunk(1, 171).unwrap(), None);
        assert_eq!(store.chunk(2, 0).unwrap(), None);
        assert!(crate::fsck::check(&store, true).unwrap().is_clean());
    }

    #[test]
    fn a_damaged_block_is_named() {
        let store = Store::in_memory();
        store
            .write(vec![
                Op::Chunk(3, 70, done_record(70)),
                Op::Output(3, 70, ChunkOutput::default()),
            ])
            .unwrap();
        let (key, bytes) = store.kv.scan(b"b/").unwrap().remove(0);
        for bad in [
            bytes[..bytes.len() - 3].to_vec(),
            vec![],
            vec![9],
            [&bytes[..], &bytes[1..]].concat(),
        ] {
            store.kv.apply(vec![(key.clone(), Some(bad))]).unwrap();
            for err in [
                store.load().unwrap_err(),
                store.outputs(3).unwrap_err(),
                store.chunks(3).unwrap_err(),
                store.chunk(3, 70).unwrap_err(),
            ] {
                let text = err.to_string();
                assert!(text.starts_with("damaged record `b/"), "{text}");
            }
        }
        // A record inside a well-formed block names the block and the chunk.
        store
            .apply_chunk_writes(vec![(chunk_key(b'c', 3, 70), Some(b"{oops".to_vec()))])
            .unwrap();
        let text = store.load().unwrap_err().to_string();
        assert!(text.contains("b/") && text.contains("(chunk 70)"), "{text}");
        // Keys that are not blocks' are named as well.
        store
            .apply_chunk_writes(vec![(
                chunk_key(b'c', 3, 70),
                Some(encode(&done_record(70))),
            )])
            .unwrap();
        assert_eq!(store.load().unwrap().done, vec![(3, 70)]);
        store
            .kv
            .apply(vec![(b"b/short".to_vec(), Some(vec![1]))])
            .unwrap();
        let text = store.load().unwrap_err().to_string();
        assert!(text.contains("`b/short`: bad block key length"), "{text}");
    }

    /// A store as format 2 wrote it (one key per chunk record and output) opens as format 3 with every
    /// chunk where it was; new writes go to blocks and win over the old keys.
    #[test]
    fn format_2_stores_are_read_beside_blocks() {
        let dir = temp_store_dir("format2");
        let small = |n| ChunkOutput {
            nodes: n,
            ..Default::default()
        };
        let mut tally = Tally::default();
        tally.add(&small(1));
        tally.add(&small(2));
        {
            let db = sled::open(&dir).unwrap();
            db.insert(b"m/format", FORMAT_2).unwrap();
            let job = JobRecord {
                n_chunks: 100,
                ..record(1)
            };
            db.insert(job_key(b'j', 1), encode(&job)).unwrap();
            db.insert(job_key(b't', 1), encode(&tally)).unwrap();
            for c in [0, 1] {
                db.insert(chunk_key(b'c', 1, c), encode(&done_record(c)))
                    .unwrap();
                db.insert(chunk_key(b'o', 1, c), encode(&small(c + 1)))
                    .unwrap();
            }
            let leased = ChunkRecord::Leased {
                lease: 4,
                worker: "w".into(),
                deadline: 5,
                attempts: 0,
            };
            db.insert(chunk_key(b'c', 1, 90), encode(&leased)).unwrap();
            db.flush().unwrap();
        }
        {
            let store = reopen(&dir);
            let snap = store.load().unwrap();
            assert_eq!(snap.done, vec![(1, 0), (1, 1)]);
            assert_eq!(snap.chunks.len(), 1);
            assert!(crate::fsck::check(&store, true).unwrap().is_clean());
            tally.add(&small(3));
            store
                .write(vec![
                    Op::Chunk(1, 90, done_record(90)),
                    Op::Output(1, 90, small(3)),
                    Op::Tally(1, tally.clone()),
                    Op::Chunk(1, 91, ChunkRecord::Pending { attempts: 1 }),
                ])
                .unwrap();
        }
        let store = reopen(&dir);
        let snap = store.load().unwrap();
        assert_eq!(snap.done, vec![(1, 0), (1, 1), (1, 90)]);
        assert_eq!(
            snap.chunks,
            vec![(1, 91, ChunkRecord::Pending { attempts: 1 })]
        );
        assert_eq!(store.chunk(1, 90).unwrap(), Some(done_record(90)));
        assert_eq!(store.chunk(1, 1).unwrap(), Some(done_record(1)));
        assert_eq!(
            store.outputs(1).unwrap(),
            vec![(0, small(1)), (1, small(2)), (90, small(3))]
        );
        assert_eq!(store.chunks(1).unwrap().len(), 4);
        assert!(crate::fsck::check(&store, true).unwrap().is_clean());
        drop(store);
        let db = sled::open(&dir).unwrap();
        assert_eq!(db.get(b"m/format").unwrap().unwrap().as_ref(), FORMAT);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

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
            input_jobs: Vec::new(),
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
        assert_eq!(
            snap.chunks,
            vec![(2, 0, ChunkRecord::Pending { attempts: 2 })]
        );
        assert_eq!(snap.done, vec![(2, 1)]);
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
        artifacts_are_raw_and_stored_once(&reopen(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Opens the store at `dir`, waiting for a handle just dropped in this process to let go of sled's file
    /// lock (sled's background flusher releases it a moment after the last `Db` is dropped).
    fn reopen(dir: &Path) -> Store {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match Store::open(dir) {
                Ok(store) => return store,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("cannot reopen {}: {e}", dir.display()),
            }
        }
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
            let store = reopen(&dir);
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
            let store = reopen(&dir);
            assert!(!dir.join("artifacts").join("a-7-1").exists());
            assert!(!dir.join("artifacts").join(".tmp-r-7").exists());
            assert_eq!(store.outputs(7).unwrap(), vec![(0, with(vec![5; 1000]))]);
        }
        std::fs::write(&file, vec![6; 1000]).unwrap();
        let err = reopen(&dir).outputs(7).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        std::fs::remove_file(&file).unwrap();
        let err = reopen(&dir).outputs(7).unwrap_err();
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
        let store = reopen(&dir);
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
            let store = reopen(&dir);
            roundtrip(&store);
        }
        let store = reopen(&dir);
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
