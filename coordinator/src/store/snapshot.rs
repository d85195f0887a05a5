//! What start-up reads to rebuild the coordinator's memory. It is where the cost of a store with many chunks
//! shows, so it reads no block whole: done chunks come from the segment summaries (a bit each), and only the
//! records a summary names as not done (leased, pending after an attempt, poisoned) are read from their
//! blocks. A damaged block among those is named now; one holding done chunks only is found when its outputs
//! are read, and by fsck. The shape of what it
//! returns ([`Snapshot`]) is the core's: the core says what it starts from, the store finds it.

use std::collections::BTreeMap;

use super::blocks::{block_entries, block_of, decode_entry};
use super::error::StoreError;
use super::handle::Store;
use super::keys::{be_u64, key_text};
use super::records::decode;
use super::summaries::{summary_of, Summary, SEGMENT};
use crate::core::Snapshot;
use crate::scheduler::{ChunkRecord, JobId};

/// A chunk a summary names as having a record that is not done: its job, its number and the summary's key.
type Named = (JobId, u64, Vec<u8>);

impl Store {
    pub fn load(&self) -> Result<Snapshot, StoreError> {
        let mut snap = Snapshot::default();
        for (k, v) in self.kv.scan(b"j/")? {
            snap.jobs.push(decode(&k, &v)?);
        }
        for (k, v) in self.kv.scan(b"t/")? {
            let job = be_u64(&k, &k[2..])?;
            snap.tallies.insert(job, decode(&k, &v)?);
        }
        // Done chunks and which others have a record, from the summaries, not the blocks: see `summaries`.
        let mut others: BTreeMap<Vec<u8>, Vec<Named>> = BTreeMap::new();
        self.kv.for_each(b"d/", &mut |k, v| {
            let (job, segment) = summary_of(k)?;
            let summary = Summary::decode(k, v)?;
            let first = segment
                .checked_mul(SEGMENT)
                .ok_or_else(|| StoreError::Damaged {
                    key: key_text(k),
                    why: "segment number out of range".into(),
                })?;
            let bits = snap.done.entry(job).or_default();
            for (i, &word) in summary.done.iter().enumerate() {
                bits.insert_word(first / 64 + i as u64, word);
            }
            for &offset in &summary.others {
                let chunk = first + u64::from(offset);
                let (block, _) = block_of(job, chunk);
                others
                    .entry(block)
                    .or_default()
                    .push((job, chunk, k.to_vec()));
            }
            Ok(())
        })?;
        // The records a summary names are read from their blocks, each block once.
        for (bkey, wanted) in others {
            let bytes = self.kv.get(&bkey)?.unwrap_or_default();
            let entries = if bytes.is_empty() {
                Vec::new()
            } else {
                block_entries(&bkey, &bytes)?
            };
            for (job, chunk, skey) in wanted {
                let (_, offset) = block_of(job, chunk);
                let record = entries
                    .iter()
                    .find(|e| e.offset == offset)
                    .and_then(|e| e.record)
                    .ok_or_else(|| StoreError::Damaged {
                        key: key_text(&skey),
                        why: format!("names chunk {chunk}, which its block does not hold"),
                    })?;
                match decode_entry(&bkey, chunk, record)? {
                    ChunkRecord::Done { .. } => snap.done.entry(job).or_default().insert(chunk),
                    rec => {
                        snap.chunks.push((job, chunk, rec));
                        false
                    }
                };
            }
        }
        // Format 2's per-chunk records, if any are left; an entry in a block wins over them.
        for (k, v) in self.kv.scan(b"c/")? {
            if k.len() != 18 {
                return Err(StoreError::Damaged {
                    key: key_text(&k),
                    why: "bad chunk key length".into(),
                });
            }
            let job = be_u64(&k, &k[2..10])?;
            let chunk = be_u64(&k, &k[10..18])?;
            let rec: ChunkRecord = decode(&k, &v)?;
            let (block, offset) = block_of(job, chunk);
            let in_block = match self.kv.get(&block)? {
                Some(bytes) => block_entries(&block, &bytes)?
                    .iter()
                    .any(|e| e.offset == offset && e.record.is_some()),
                None => false,
            };
            if in_block {
                continue;
            }
            match rec {
                ChunkRecord::Done { .. } => {
                    snap.done.entry(job).or_default().insert(chunk);
                }
                rec => snap.chunks.push((job, chunk, rec)),
            }
        }
        snap.chunks.sort_by_key(|(j, c, _)| (*j, *c));
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
        for (k, v) in self.kv.scan(b"p/")? {
            if k.len() != 18 {
                return Err(StoreError::Damaged {
                    key: key_text(&k),
                    why: "bad part key length".into(),
                });
            }
            let (job, slot) = (be_u64(&k, &k[2..10])?, be_u64(&k, &k[10..])?);
            snap.parts.push((job, slot, decode(&k, &v)?));
        }
        for (k, v) in self.kv.scan(b"v/")? {
            if k.len() != 18 {
                return Err(StoreError::Damaged {
                    key: key_text(&k),
                    why: "bad votes key length".into(),
                });
            }
            let (job, chunk) = (be_u64(&k, &k[2..10])?, be_u64(&k, &k[10..])?);
            snap.votes.push((job, chunk, decode(&k, &v)?));
        }
        for (k, v) in self.kv.scan(b"u/")? {
            let job = be_u64(&k, &k[2..])?;
            snap.usage.insert(job, decode(&k, &v)?);
        }
        for (k, v) in self.kv.scan(b"i/")? {
            snap.identities.push(decode(&k, &v)?);
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
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use sweep_space::Tally;

    use super::*;
    use crate::core::{JobRecord, Op};
    use crate::store::keys::job_key;
    use crate::store::summaries::{summary_key, SEGMENT_BLOCKS};
    use crate::store::test_support::{record, reopen, temp_store_dir};

    /// Start-up of a store holding a job of a hundred million done chunks reads its 24,415 summaries, not its
    /// 1,562,500 blocks. The summaries are written directly (writing the blocks would take gigabytes and an
    /// hour), which is all start-up reads; it prints how long loading took and checks every chunk is done.
    /// `cargo test --release -p sweep-coordinator --lib -- --ignored hundred_million --nocapture`.
    #[test]
    #[ignore = "writes a 100,000,000-chunk store: run by name"]
    fn a_hundred_million_done_chunks_load_from_summaries() {
        const CHUNKS: u64 = 100_000_000;
        let dir = temp_store_dir("hundred-million");
        {
            let store = reopen(&dir);
            let tally = Tally {
                chunks: CHUNKS,
                ..Default::default()
            };
            store
                .write(vec![
                    Op::job(JobRecord {
                        n_chunks: CHUNKS,
                        ..record(1)
                    }),
                    Op::Tally(1, tally),
                ])
                .unwrap();
            let segments = CHUNKS.div_ceil(SEGMENT);
            let mut batch = Vec::new();
            for segment in 0..segments {
                let mut s = Summary::default();
                for (i, w) in s.done.iter_mut().enumerate() {
                    let first = segment * SEGMENT + i as u64 * 64;
                    let n = CHUNKS.saturating_sub(first).min(64);
                    *w = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                }
                batch.push((summary_key(1, segment), s.encode()));
                if batch.len() == 1_000 {
                    store.kv.apply(std::mem::take(&mut batch)).unwrap();
                }
            }
            store.kv.apply(batch).unwrap();
            assert_eq!(segments, 24_415);
            assert_eq!(SEGMENT_BLOCKS, 64);
            assert!(store.kv.get(&job_key(b'j', 1)).unwrap().is_some());
        }
        let t = Instant::now();
        let store = reopen(&dir);
        let opened = t.elapsed();
        let snap = store.load().unwrap();
        let loaded = t.elapsed();
        assert_eq!(snap.done[&1].len(), CHUNKS);
        assert_eq!(snap.tallies[&1].chunks, CHUNKS);
        assert!(snap.chunks.is_empty());
        let bits_mb = snap.done[&1].heap_bytes() as f64 / 1e6;
        eprintln!(
            "100,000,000 done chunks: sled opened in {:.2} s, summaries loaded by {:.2} s, {bits_mb:.1} MB of bits",
            opened.as_secs_f64(),
            loaded.as_secs_f64()
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
