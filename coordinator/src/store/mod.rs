//! Durable state: jobs, chunk states, chunk results and running tallies, behind a small key-value trait with
//! two implementations: sled (production) and an in-memory map (unit tests).
//!
//! Layout (one keyspace, so a whole group commit is one atomic batch):
//! - `m/format` = "sweep-store/4"; `m/next_job`, `m/next_lease`: big-endian u64 counters
//! - `j/<job>`: [`JobRecord`] (JSON)
//! - `t/<job>`: the job's [`Tally`](sweep_space::Tally) (JSON), rewritten with every accepted result
//! - `b/<job><block>`: the chunk records and small outputs of chunks `block * BLOCK ..`, [`BLOCK`] = 64 of
//!   them (see `blocks`); a chunk without an entry is pending, never leased. Rewritten whole with every
//!   change to one of its chunks.
//! - `o/<job><chunk>`: a chunk's [`ChunkOutput`](sweep_space::ChunkOutput) (JSON) without its artifact when
//!   it is too large to inline (over [`INLINE_OUTPUT_MAX`] bytes), written in the same batch as its `Done`
//!   record; `a/<job><chunk>`: the blake3 hash of that chunk's artifact
//! - `l/<job><chunk>`: where the chunk's list of solutions is in the job's segment file beside sled
//!   (`ls-<job>`; offset, length and blake3 hash), never in sled, so the coordinator's memory does not grow
//!   with the lists it stores; outputs are stored without it and readers put it back. Stores of format 3 and
//!   before recorded the hash alone, of a file per chunk (`l-<job>-<chunk>`), which is still read
//! - `r/<job>`: the blake3 hash of the job's merged artifact; the batch that writes it removes the chunk
//!   artifacts' hashes, so a table is stored once
//! - `s/<digest>`: the blake3 hash of a shipped file (a program `sweep exec --ship` uploaded)
//! - `k/<job><chunk>`: a running chunk's newest resume state (the program's own text)
//! - format 2 only, read but never written: `c/<job><chunk>`, a chunk's
//!   [`ChunkRecord`](crate::scheduler::ChunkRecord) (JSON), and `o/` for every output. A block entry wins
//!   over a `c/` record, an inlined output over an `o/` one.
//!
//! `<job>`, `<chunk>` and `<block>` are big-endian u64, so a prefix scan returns a job's chunks in order.
//!
//! The code is split by concern, so that a change to one (say, the block encoding) is read and reviewed
//! without the others, and so that the key-value layer stays ignorant of what its keys mean:
//! - `kv`: the raw key-value layer, sled and its in-memory twin;
//! - `keys`: how keys are spelled and named in errors;
//! - `records`: the typed records (JSON) and the ops a group commit is made of;
//! - `blocks`: the 64-chunk block codec, and the block edits of one write;
//! - `artifacts`: artifact and shipped files beside sled, checked against their recorded hashes;
//! - `batches`: group commits, split into crash-consistent parts and encoded as batches;
//! - `chunks`: chunk records and outputs read wherever they live, and fsck's writes to them;
//! - `snapshot`: what start-up reads to rebuild the coordinator's memory;
//! - `format`: the format marker, and the upgrades of older stores on open.
//!
//! [`Store`] is the facade over all of them: the rest of the coordinator names only what is re-exported here.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod artifacts;
mod batches;
mod blocks;
mod chunks;
mod format;
mod keys;
mod kv;
mod records;
mod snapshot;
#[cfg(test)]
mod test_support;

pub use artifacts::{digest_hex, is_digest, Blobs, FileBlobs, MemBlobs};
pub use batches::{split_commit, MAX_BATCH_OPS};
pub use blocks::{BLOCK, INLINE_OUTPUT_MAX};
pub use chunks::Lists;
pub(crate) use keys::{be_u64, chunk_key, job_key, key_text};
pub use kv::{Kv, MemKv, Pairs, ScanFn, SledKv, Writes};
pub(crate) use records::decode;
pub use records::{JobRecord, Listing, Op};
pub use snapshot::Snapshot;

/// Why a store could not be opened, read or written; each names the path or key involved, so that an operator
/// (or `sweep store check`) can find what is wrong.
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
    #[error("{what} of {bytes} bytes is too large to store")]
    TooLarge { what: String, bytes: u64 },
    #[error("artifact file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
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

    /// Opens the store in `path`: sled's files, and artifact files in `path/artifacts`. An older format is
    /// brought to the current one first (see `format`).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let kv = SledKv::open(path)?;
        let format = kv.format;
        let blobs = FileBlobs::open(path.join("artifacts"))?;
        let store = Store::with_blobs(Box::new(kv), Box::new(blobs));
        store.upgrade_from(format)?;
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
}

#[cfg(test)]
mod tests {
    use sweep_space::{ChunkOutput, Tally};

    use super::test_support::{record, reopen};
    use super::*;
    use crate::scheduler::ChunkRecord;

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
}
