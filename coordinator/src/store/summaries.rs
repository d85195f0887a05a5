//! Segment summaries (`d/<job><segment>`): for every 4,096 chunks of a job (64 blocks), which are done, as one
//! bit each, and which others have a record at all (leased, pending after an attempt, poisoned). Start-up
//! reads these instead of the blocks: a job of 100,000,000 chunks has 1,562,500 blocks (gigabytes of records
//! and outputs, minutes to decode) but 24,415 summaries of about 520 bytes.
//!
//! A summary is derived from its blocks and written in the same batch as every block it covers that changed
//! ([`SummaryEdits`], driven by the block edits), so the two never disagree after a crash; fsck recomputes
//! them from the blocks and rewrites any that differ.

use std::collections::{BTreeMap, BTreeSet};

use super::blocks::{block_entries, block_start, BLOCK};
use super::error::StoreError;
use super::framing::take;
use super::keys::{be_u64, chunk_key, key_text};
use super::kv::{Kv, Writes};
use crate::scheduler::JobId;

/// Blocks per segment: one 64-bit word of done bits per block.
pub(super) const SEGMENT_BLOCKS: u64 = 64;
/// Chunks per segment.
pub(super) const SEGMENT: u64 = SEGMENT_BLOCKS * BLOCK;

const SUMMARY_VERSION: u8 = 1;

/// One segment's summary. Encoding: a version byte, 64 little-endian u64 words (word `i`: the done chunks of
/// the segment's block `i`, bit `k` for its chunk `k`), then a little-endian u16 per chunk that has a record
/// that is not done (its offset in the segment), ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Summary {
    pub(super) done: [u64; SEGMENT_BLOCKS as usize],
    pub(super) others: BTreeSet<u16>,
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            done: [0; SEGMENT_BLOCKS as usize],
            others: BTreeSet::new(),
        }
    }
}

/// The key of the summary of `segment` of `job`.
pub(super) fn summary_key(job: JobId, segment: u64) -> Vec<u8> {
    chunk_key(b'd', job, segment)
}

/// The job and segment a summary key names.
pub(super) fn summary_of(key: &[u8]) -> Result<(JobId, u64), StoreError> {
    if key.len() != 18 {
        return Err(StoreError::Damaged {
            key: key_text(key),
            why: "bad summary key length".into(),
        });
    }
    Ok((be_u64(key, &key[2..10])?, be_u64(key, &key[10..18])?))
}

/// Whether an encoded chunk record is `Done`. Records are written by serde with the state tag first
/// (`{"state":"done",...}`), so the prefix decides without parsing the rest; anything else, a damaged record
/// included, counts as a record that is not done, and start-up decodes it (and names it if it is damaged).
pub(super) fn record_is_done(record: &[u8]) -> bool {
    record.starts_with(br#"{"state":"done""#)
}

impl Summary {
    pub(super) fn decode(key: &[u8], bytes: &[u8]) -> Result<Summary, StoreError> {
        let damaged = |why: String| StoreError::Damaged {
            key: key_text(key),
            why,
        };
        let mut rest = bytes;
        match take(&mut rest, 1) {
            Some([SUMMARY_VERSION]) => {}
            Some([v]) => return Err(damaged(format!("unknown summary version {v}"))),
            _ => return Err(damaged("an empty summary".into())),
        }
        let mut s = Summary::default();
        for w in s.done.iter_mut() {
            let bytes = take(&mut rest, 8).ok_or_else(|| damaged("truncated done bits".into()))?;
            *w = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
        }
        if !rest.len().is_multiple_of(2) {
            return Err(damaged("a torn chunk offset".into()));
        }
        for pair in rest.chunks_exact(2) {
            let offset = u16::from_le_bytes([pair[0], pair[1]]);
            if u64::from(offset) >= SEGMENT {
                return Err(damaged(format!("chunk offset {offset} beyond the segment")));
            }
            let block = usize::from(offset) / BLOCK as usize;
            if s.done[block] & (1 << (u64::from(offset) % BLOCK)) != 0 {
                return Err(damaged(format!(
                    "chunk offset {offset} is both done and not"
                )));
            }
            s.others.insert(offset);
        }
        Ok(s)
    }

    /// `None` when the summary says nothing (no chunk of the segment has a record).
    pub(super) fn encode(&self) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(1 + 8 * SEGMENT_BLOCKS as usize + 2 * self.others.len());
        out.push(SUMMARY_VERSION);
        for w in &self.done {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for o in &self.others {
            out.extend_from_slice(&o.to_le_bytes());
        }
        Some(out)
    }

    fn is_empty(&self) -> bool {
        self.others.is_empty() && self.done.iter().all(|&w| w == 0)
    }

    /// Sets what the segment's block `index` holds: `records` are (offset in the block, record) of every
    /// entry with a record.
    pub(super) fn set_block<'r>(
        &mut self,
        index: u64,
        records: impl IntoIterator<Item = (u32, &'r [u8])>,
    ) {
        let base = (index * BLOCK) as u16;
        let end = base + BLOCK as u16;
        self.others.retain(|o| !(base..end).contains(o));
        let mut done = 0u64;
        for (offset, record) in records {
            if record_is_done(record) {
                done |= 1 << offset;
            } else {
                self.others.insert(base + offset as u16);
            }
        }
        self.done[index as usize] = done;
    }
}

/// The summaries one write changes: each read once, and written with every part that changed a block it
/// covers (see [`super::blocks::BlockEdits`]).
pub(super) struct SummaryEdits<'a> {
    kv: &'a dyn Kv,
    summaries: BTreeMap<Vec<u8>, Summary>,
    touched: BTreeSet<Vec<u8>>,
}

impl<'a> SummaryEdits<'a> {
    pub(super) fn new(kv: &'a dyn Kv) -> SummaryEdits<'a> {
        SummaryEdits {
            kv,
            summaries: BTreeMap::new(),
            touched: BTreeSet::new(),
        }
    }

    /// Block number `block` of `job` now holds `records` (see [`Summary::set_block`]). A summary that does not
    /// decode is replaced: it is derived from blocks, and the block being written is the truth.
    pub(super) fn block_written<'r>(
        &mut self,
        job: JobId,
        block: u64,
        records: impl IntoIterator<Item = (u32, &'r [u8])>,
    ) -> Result<(), StoreError> {
        let key = summary_key(job, block / SEGMENT_BLOCKS);
        let summary = match self.summaries.entry(key.clone()) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let s = match self.kv.get(v.key())? {
                    Some(bytes) => Summary::decode(v.key(), &bytes).unwrap_or_default(),
                    None => Summary::default(),
                };
                v.insert(s)
            }
        };
        summary.set_block(block % SEGMENT_BLOCKS, records);
        self.touched.insert(key);
        Ok(())
    }

    pub(super) fn drain_into(&mut self, writes: &mut Writes) {
        for key in std::mem::take(&mut self.touched) {
            let value = self.summaries.get(&key).and_then(Summary::encode);
            writes.push((key, value));
        }
    }
}

/// Every summary as the blocks under `kv` say it should be, by key; blocks that do not decode are left out
/// (fsck names them).
pub(super) fn summaries_from_blocks(kv: &dyn Kv) -> Result<BTreeMap<Vec<u8>, Summary>, StoreError> {
    let mut out: BTreeMap<Vec<u8>, Summary> = BTreeMap::new();
    kv.for_each(b"b/", &mut |k, v| {
        let (Ok((job, first)), Ok(entries)) = (block_start(k), block_entries(k, v)) else {
            return Ok(());
        };
        let block = first / BLOCK;
        let records: Vec<(u32, &[u8])> = entries
            .iter()
            .filter_map(|e| Some((e.offset, e.record?)))
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        out.entry(summary_key(job, block / SEGMENT_BLOCKS))
            .or_default()
            .set_block(block % SEGMENT_BLOCKS, records);
        Ok(())
    })?;
    Ok(out)
}

/// The writes that make the stored summaries exactly `want`: changed and missing ones written, stale ones
/// removed.
pub(super) fn summary_fixes(
    kv: &dyn Kv,
    want: &BTreeMap<Vec<u8>, Summary>,
) -> Result<Writes, StoreError> {
    let mut writes = Vec::new();
    let mut seen = BTreeSet::new();
    kv.for_each(b"d/", &mut |k, v| {
        seen.insert(k.to_vec());
        let stored = Summary::decode(k, v).ok();
        match want.get(k) {
            Some(s) if stored.as_ref() == Some(s) => {}
            Some(s) => writes.push((k.to_vec(), s.encode())),
            None => writes.push((k.to_vec(), None)),
        }
        Ok(())
    })?;
    for (k, s) in want {
        if !seen.contains(k) {
            writes.push((k.clone(), s.encode()));
        }
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::ChunkRecord;
    use crate::store::records::encode;

    #[test]
    fn only_done_records_count_as_done() {
        let done = ChunkRecord::Done {
            digest: "d".into(),
            worker: "w".into(),
        };
        assert!(record_is_done(&encode(&done)));
        for rec in [
            ChunkRecord::Pending { attempts: 0 },
            ChunkRecord::Leased {
                lease: 1,
                worker: "done".into(),
                deadline: 2,
                attempts: 0,
            },
            ChunkRecord::Poisoned {
                attempts: 3,
                last_error: "done".into(),
            },
        ] {
            assert!(!record_is_done(&encode(&rec)), "{rec:?}");
        }
        assert!(!record_is_done(b"{oops"));
    }

    #[test]
    fn a_summary_round_trips_and_damage_is_named() {
        let mut s = Summary::default();
        let done = encode(&ChunkRecord::Done {
            digest: "d".into(),
            worker: "w".into(),
        });
        let leased = encode(&ChunkRecord::Pending { attempts: 1 });
        s.set_block(0, [(0, &done[..]), (5, &leased[..]), (63, &done[..])]);
        s.set_block(63, [(1, &leased[..])]);
        assert_eq!(s.done[0], 1 | (1 << 63));
        assert_eq!(s.others, BTreeSet::from([5, 63 * 64 + 1]));
        let key = summary_key(3, 7);
        let bytes = s.encode().unwrap();
        assert_eq!(Summary::decode(&key, &bytes).unwrap(), s);
        // Rewriting a block replaces what the summary said of it, and only of it.
        s.set_block(0, [(5, &done[..])]);
        assert_eq!(s.done[0], 1 << 5);
        assert_eq!(s.others, BTreeSet::from([63 * 64 + 1]));
        for bad in [
            vec![],
            vec![9],
            bytes[..100].to_vec(),
            [&bytes[..], &[1]].concat(),
        ] {
            let text = Summary::decode(&key, &bad).unwrap_err().to_string();
            assert!(text.starts_with("damaged record `d/"), "{text}");
        }
        assert_eq!(Summary::default().encode(), None);
    }
}
