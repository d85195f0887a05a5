//! The one-way upgrades of older store formats, run when a store is opened (see `format` for the markers).
//!
//! Format 1 kept artifacts inside sled; opening such a store moves them out once (see
//! `Store::migrate_format_1`). Opening a format-2 store only rewrites its marker (so older releases refuse it):
//! its per-chunk keys stay and are read beside the blocks (in `chunks` and `snapshot`, where chunks are read),
//! which take over each chunk as it changes. Format 3 kept each chunk's list of solutions in a file of its own;
//! format 4 appends them to a segment per job, and opening a format-3 store likewise only rewrites its marker
//! (its list files are read where they are). Format 5 adds a summary per 4,096 chunks, which start-up reads
//! instead of every block; opening a format-4 store builds them from its blocks once.

use super::artifacts::{chunk_blob, job_blob};
use super::digest::hash;
use super::error::StoreError;
use super::format::FORMAT;
use super::handle::Store;
use super::keys::be_u64;
use super::summaries::{summaries_from_blocks, summary_fixes};

impl Store {
    /// Brings a store opened in `format` to the current one.
    pub(super) fn upgrade_from(&self, format: u8) -> Result<(), StoreError> {
        match format {
            1 => self.migrate_format_1()?,
            // Format 2's per-chunk keys and format 3's per-chunk list files are read as they are; blocks
            // (formats 3 and 4) get their summaries. The marker changes last, so that a release that knows
            // nothing of blocks, segments or summaries refuses the store instead of missing what is written
            // from now on, and a crash part-way leaves the old format, whose upgrade runs again.
            2..=4 => {
                self.write_summaries()?;
                self.kv
                    .apply(vec![(b"m/format".to_vec(), Some(FORMAT.to_vec()))])?
            }
            _ => {}
        }
        Ok(())
    }

    /// Makes the stored summaries exactly what the blocks say, in batches of bounded size (a summary is about
    /// 520 bytes; a job of 100,000,000 chunks has 24,415). Returns how many summaries it wrote or removed.
    pub(crate) fn write_summaries(&self) -> Result<usize, StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let want = summaries_from_blocks(self.kv.as_ref())?;
        let fixes = summary_fixes(self.kv.as_ref(), &want)?;
        let n = fixes.len();
        let mut fixes = fixes.into_iter().peekable();
        while fixes.peek().is_some() {
            self.kv.apply(fixes.by_ref().take(1_000).collect())?;
        }
        Ok(n)
    }

    /// How many stored summaries differ from what the blocks say (fsck's check; start-up trusts them).
    pub(crate) fn stale_summaries(&self) -> Result<usize, StoreError> {
        let want = summaries_from_blocks(self.kv.as_ref())?;
        Ok(summary_fixes(self.kv.as_ref(), &want)?.len())
    }

    /// Moves format 1's in-sled artifacts into files, then marks the store as the current format (format 1 had
    /// per-chunk keys like format 2), in one batch: a crash part-way leaves a format-1 store and the migration
    /// runs again.
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
}

#[cfg(test)]
mod tests {
    use sweep_space::{ChunkOutput, Tally};

    use super::*;
    use crate::core::{JobRecord, Op};
    use crate::scheduler::ChunkRecord;
    use crate::store::format::{FORMAT_1, FORMAT_2, FORMAT_3, FORMAT_4};
    use crate::store::keys::{chunk_key, job_key};
    use crate::store::records::encode;
    use crate::store::test_support::{done_record, record, reopen, reopen_sled, temp_store_dir};

    /// The store at `dir`, opened and closed again, is marked as of the current format; then it goes.
    fn assert_upgraded_then_remove(dir: &std::path::Path) {
        let db = reopen_sled(dir);
        assert_eq!(db.get(b"m/format").unwrap().unwrap().as_ref(), FORMAT);
        drop(db);
        let _ = std::fs::remove_dir_all(dir);
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
            let db = reopen_sled(&dir);
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
            assert_eq!(snap.done_list(), vec![(1, 0), (1, 1)]);
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
        assert_eq!(snap.done_list(), vec![(1, 0), (1, 1), (1, 90)]);
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
        assert_upgraded_then_remove(&dir);
    }

    /// A store as format 3 wrote it (a list of solutions in a file per chunk, recorded by its hash) opens as
    /// format 4 with that list read where it is; lists written from then on go to the job's segment.
    #[test]
    fn format_3_list_files_are_read_and_new_lists_go_to_segments() {
        use crate::store::artifacts::{encode_list, list_blob, segment_blob};
        let dir = temp_store_dir("format3");
        let listed = |n: u64| ChunkOutput {
            nodes: n,
            solutions: vec![format!("{n},1"), format!("{n},2")],
            ..Default::default()
        };
        {
            let store = reopen(&dir);
            store.write(vec![Op::Output(4, 1, listed(1))]).unwrap();
        }
        let artifacts = dir.join("artifacts");
        std::fs::remove_file(artifacts.join(segment_blob(4))).unwrap();
        let old = encode_list(&listed(1).solutions).unwrap();
        std::fs::write(artifacts.join(list_blob(4, 1)), &old).unwrap();
        {
            let db = reopen_sled(&dir);
            db.insert(b"m/format", FORMAT_3).unwrap();
            db.insert(chunk_key(b'l', 4, 1), hash(&old)).unwrap();
            db.flush().unwrap();
        }
        {
            let store = reopen(&dir);
            assert_eq!(store.outputs(4).unwrap(), vec![(1, listed(1))]);
            store.write(vec![Op::Output(4, 2, listed(2))]).unwrap();
            assert_eq!(
                store.outputs(4).unwrap(),
                vec![(1, listed(1)), (2, listed(2))]
            );
            assert!(crate::fsck::check(&store, true).unwrap().is_clean());
        }
        assert!(artifacts.join(list_blob(4, 1)).exists());
        assert!(artifacts.join(segment_blob(4)).exists());
        assert!(!artifacts.join(list_blob(4, 2)).exists());
        assert_upgraded_then_remove(&dir);
    }

    /// A store as format 4 wrote it (blocks, no summaries) opens as format 5 with a summary per 4,096 chunks
    /// built from its blocks: start-up then finds the same done chunks and records without reading a block
    /// of done chunks, and a crash before the marker is rewritten builds them again.
    #[test]
    fn format_4_stores_get_summaries_built_from_their_blocks() {
        let dir = temp_store_dir("format4");
        let pending = ChunkRecord::Pending { attempts: 2 };
        let mut ops = vec![Op::job(JobRecord {
            n_chunks: 10_000,
            ..record(1)
        })];
        let mut tally = Tally::default();
        // Done chunks across three segments, and a record that is not done in the middle one.
        for chunk in (0..10_000).step_by(7) {
            tally.add(&ChunkOutput::default());
            ops.push(Op::Chunk(1, chunk, done_record(chunk)));
            ops.push(Op::Output(1, chunk, ChunkOutput::default()));
        }
        ops.push(Op::Tally(1, tally));
        ops.push(Op::Chunk(1, 5_000, pending.clone()));
        let before = {
            let store = reopen(&dir);
            store.write(ops).unwrap();
            store.load().unwrap()
        };
        assert_eq!(before.done_list().len(), 1_429);
        {
            let db = reopen_sled(&dir);
            let summaries: Vec<_> = db
                .scan_prefix(b"d/")
                .keys()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(summaries.len(), 3);
            for k in summaries {
                db.remove(k).unwrap();
            }
            db.insert(b"m/format", FORMAT_4).unwrap();
            db.flush().unwrap();
        }
        let store = reopen(&dir);
        let after = store.load().unwrap();
        assert_eq!(after.done, before.done);
        assert_eq!(after.chunks, vec![(1, 5_000, pending)]);
        assert!(crate::fsck::check(&store, true).unwrap().is_clean());
        drop(store);
        assert_eq!(reopen_sled(&dir).scan_prefix(b"d/").count(), 3);
        assert_upgraded_then_remove(&dir);
    }

    #[test]
    fn format_1_stores_move_their_artifacts_to_files() {
        let dir = temp_store_dir("legacy");
        {
            // A store as the first releases wrote it: artifacts as raw sled values.
            let db = reopen_sled(&dir);
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
        assert_eq!(
            reopen_sled(&dir)
                .get(job_key(b'r', 2))
                .unwrap()
                .unwrap()
                .len(),
            32
        );
        assert_upgraded_then_remove(&dir);
    }
}
