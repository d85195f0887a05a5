//! The block codec: how the records and small outputs of 64 consecutive chunks share one key
//! (`b/<job><block>`), and the block edits one write makes.
//!
//! Why blocks (format 3): with one key per chunk (format 2), sled 0.34's index and its crash recovery grew
//! with the chunk count: a job of 1,000,000 tiny chunks held the coordinator at 630 MB and a restart after
//! SIGKILL took 4.5 s. Blocks are rewritten in place, never deleted: sled 0.34 handles removals badly (300,000
//! keys inserted and removed 2,000 behind held a writer at 557 MB, against 89 MB for the inserts alone), so
//! "compact finished chunks into one record and delete theirs" made things worse, while 1,000,000 chunk
//! results as 64-chunk blocks held a plain sled writer at 61 MB (178 MB as per-chunk keys) and reopened after
//! SIGKILL in 0.2 s (1.6 s). A group commit rewrites each block it touches once, so under load a block write
//! carries many results.

use std::collections::BTreeMap;

use super::error::StoreError;
use super::framing::{take, take_u32};
use super::keys::{be_u64, chunk_key, key_text};
use super::kv::{Kv, Writes};
use crate::scheduler::JobId;

/// Chunks per block record (`b/<job><block>`). Small enough that rewriting a block with every change to one of
/// its chunks stays cheap (a block of done tiny chunks is about 9 KB), large enough that sled holds 64 times
/// fewer keys than chunks.
pub const BLOCK: u64 = 64;

/// Outputs whose JSON is longer than this keep a key of their own (`o/`), so a chunk with many solutions does
/// not make every rewrite of its block large.
pub const INLINE_OUTPUT_MAX: usize = 512;

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
pub(super) struct Entry {
    pub(super) record: Option<Vec<u8>>,
    pub(super) output: Option<Vec<u8>>,
}

const BLOCK_VERSION: u8 = 1;

/// One entry of an encoded block, borrowed from it.
pub(super) struct RawEntry<'a> {
    pub(super) offset: u32,
    pub(super) record: Option<&'a [u8]>,
    pub(super) output: Option<&'a [u8]>,
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
pub(super) fn block_entries<'a>(
    key: &[u8],
    bytes: &'a [u8],
) -> Result<Vec<RawEntry<'a>>, StoreError> {
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
pub(super) fn block_of(job: JobId, chunk: u64) -> (Vec<u8>, u32) {
    (chunk_key(b'b', job, chunk / BLOCK), (chunk % BLOCK) as u32)
}

/// The job and first chunk of the block stored under `key`.
pub(super) fn block_start(key: &[u8]) -> Result<(JobId, u64), StoreError> {
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
pub(super) fn decode_entry<T: serde::de::DeserializeOwned>(
    block_key: &[u8],
    chunk: u64,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Damaged {
        key: format!("{} (chunk {chunk})", key_text(block_key)),
        why: e.to_string(),
    })
}

/// What [`BlockEdits::drain_into`] calls with each block it writes: its job, its number and its records.
pub(super) type BlockWritten<'a> =
    dyn FnMut(JobId, u64, &[(u32, &[u8])]) -> Result<(), StoreError> + 'a;

/// The blocks one write changes: each read once, changed by every op on its chunks, and written at the end of
/// each part that touched it (so every part carries its blocks as they are after it).
pub(super) struct BlockEdits<'a> {
    kv: &'a dyn Kv,
    blocks: BTreeMap<Vec<u8>, Block>,
    touched: std::collections::BTreeSet<Vec<u8>>,
    /// fsck's repair rewrites blocks that do not decode (they are reported and replaced), nothing else does.
    replace_damaged: bool,
}

impl<'a> BlockEdits<'a> {
    pub(super) fn new(kv: &'a dyn Kv, replace_damaged: bool) -> BlockEdits<'a> {
        BlockEdits {
            kv,
            blocks: BTreeMap::new(),
            touched: Default::default(),
            replace_damaged,
        }
    }

    pub(super) fn entry(&mut self, job: JobId, chunk: u64) -> Result<&mut Entry, StoreError> {
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

    /// The touched blocks' writes, as they are now; `written` is told each block's job, number and records
    /// (offset, record) as written, so what is derived from blocks (the segment summaries) goes in the same
    /// batch.
    pub(super) fn drain_into(
        &mut self,
        writes: &mut Writes,
        written: &mut BlockWritten<'_>,
    ) -> Result<(), StoreError> {
        for key in std::mem::take(&mut self.touched) {
            let block = self.blocks.get(&key);
            let (job, first) = block_start(&key)?;
            let records: Vec<(u32, &[u8])> = block
                .into_iter()
                .flat_map(|b| b.entries.iter())
                .filter_map(|(offset, e)| Some((*offset, e.record.as_deref()?)))
                .collect();
            written(job, first / BLOCK, &records)?;
            let value = block.and_then(Block::encode);
            writes.push((key, value));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sweep_space::{ChunkOutput, Tally};

    use super::*;
    use crate::core::{JobRecord, Op};
    use crate::scheduler::ChunkRecord;
    use crate::store::records::encode;
    use crate::store::test_support::{done_record, record, streamed_outputs};
    use crate::store::{Lists, Store};

    /// Too large to inline, by its counters (its list of solutions is a file of its own, never in the output).
    fn big_output(chunk: u64) -> ChunkOutput {
        let mut out = ChunkOutput {
            nodes: chunk,
            solutions: (0..40).map(|i| format!("solution-{chunk}-{i}")).collect(),
            ..Default::default()
        };
        for i in 0..40 {
            out.count(
                &format!("a-counter-with-a-long-name-{i}"),
                u128::from(chunk),
            );
        }
        out
    }

    /// Format 3: chunk records and small outputs live in 64-chunk blocks, large outputs in keys of their own;
    /// every reader sees them as it saw per-chunk records.
    #[test]
    fn chunks_live_in_blocks_and_read_like_per_chunk_records() {
        let store = Store::in_memory();
        let mut ops = vec![Op::job(JobRecord {
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
        assert_eq!(store.kv.scan(b"l/").unwrap().len(), 3, "lists of solutions");
        let snap = store.load().unwrap();
        assert_eq!(
            snap.done_list(),
            (0..150).map(|c| (1, c)).collect::<Vec<_>>()
        );
        let others = vec![
            (1, 170, leased.clone()),
            (1, 180, ChunkRecord::Pending { attempts: 1 }),
            (1, 199, poisoned.clone()),
        ];
        assert_eq!(snap.chunks, others);
        assert_eq!(store.outputs(1).unwrap(), want_outputs);
        // Streamed one at a time, inlined and large alike, in chunk order.
        assert_eq!(streamed_outputs(&store, 1, 200), want_outputs);
        // A range, across block edges, without the lists: the same outputs, their solutions left out.
        for (from, to) in [
            (0, 200),
            (3, 64),
            (60, 131),
            (64, 128),
            (149, 150),
            (150, 200),
        ] {
            let mut part = Vec::new();
            store
                .for_each_output_in(1, from..to, Lists::Skip, &mut |chunk, out| {
                    part.push((chunk, out));
                    Ok::<(), StoreError>(())
                })
                .unwrap();
            let want: Vec<(u64, ChunkOutput)> = want_outputs
                .iter()
                .filter(|(c, _)| (from..to).contains(c))
                .map(|(c, o)| {
                    let mut o = o.clone();
                    o.solutions = Vec::new();
                    (*c, o)
                })
                .collect();
            assert_eq!(part, want, "chunks {from}..{to}");
        }
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
            // Start-up reads the block's summary, not the block: its done chunk is found by what reads it.
            assert_eq!(store.load().unwrap().done_list(), vec![(3, 70)]);
            for err in [
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
        assert_eq!(store.load().unwrap().done_list(), vec![(3, 70)]);
        store
            .kv
            .apply(vec![(b"b/short".to_vec(), Some(vec![1]))])
            .unwrap();
        // Start-up never reads it (no summary names it); fsck does.
        store.load().unwrap();
        let text: Vec<String> = crate::fsck::check(&store, false)
            .unwrap()
            .problems
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert!(
            text.iter()
                .any(|t| t.contains("`b/short`: bad block key length")),
            "{text:?}"
        );
    }
}
