//! The [`Store`] handle: the key-value layer and the blobs beside it, opened together. It sits below every
//! file that adds methods to it (one concern each: chunks, artifacts, batches, the snapshot, upgrades), so that
//! they import it downward; the facade (`mod.rs`) only re-exports.

use std::path::Path;
use std::sync::Mutex;

use super::blobs::{Blobs, FileBlobs, MemBlobs};
use super::entry::Proposed;
use super::error::StoreError;
use super::kv::{Kv, MemKv, SledKv};

/// Typed access to the store.
pub struct Store {
    pub(super) kv: Box<dyn Kv>,
    pub(super) blobs: Box<dyn Blobs>,
    /// Writes read the blocks they change: one writer at a time (the coordinator has only one anyway).
    pub(super) writer: Mutex<()>,
    /// On a member of a replicated coordinator: the entries it proposed, for its state machine to apply
    /// without decoding them.
    pub(super) proposed: Proposed,
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
            proposed: Default::default(),
        }
    }

    /// The entries this member proposed (see [`Proposed`]).
    pub fn proposed(&self) -> &Proposed {
        &self.proposed
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

    use super::*;
    use crate::core::Op;
    use crate::scheduler::ChunkRecord;
    use crate::store::test_support::{record, reopen};

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
                Op::job(record(2)),
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
        assert_eq!(snap.done_list(), vec![(2, 1)]);
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
