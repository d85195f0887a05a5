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
        let mut others: BTreeMap<Vec<u8>, Vec<(JobId, u64, Vec<u8>)>> = BTreeMap::new();
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
