//! What start-up reads to rebuild the coordinator's memory. It reads every record once, so it is where the
//! cost of a store with a million chunks shows: records are decoded (a damaged one is named now, not when a
//! result needs it) but done ones are only counted, and block outputs are skipped unread. The shape of what it
//! returns ([`Snapshot`]) is the core's: the core says what it starts from, the store finds it.

use super::blocks::{block_entries, block_start, decode_entry};
use super::error::StoreError;
use super::handle::Store;
use super::keys::{be_u64, key_text};
use super::records::decode;
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
