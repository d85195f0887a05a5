//! How a group commit (the core's [`Op`]s) becomes sled batches: split into parts that each leave a consistent
//! store ([`split_commit`]), each part encoded as one atomic batch. Artifact files are written and lists of
//! solutions appended to their jobs' segments here, before the batch that records their hashes, because that
//! order is what makes a recorded hash always have its bytes.

use std::collections::BTreeMap;

use super::artifacts::{
    chunk_blob, encode_list_into, job_blob, segment_blob, shipped_blob, shipped_key, ListRef,
};
use super::blocks::{BlockEdits, INLINE_OUTPUT_MAX};
use super::digest::hash;
use super::error::StoreError;
use super::handle::Store;
use super::keys::{be_u64, chunk_key, identity_key, job_key};
use super::kv::Writes;
use super::records::encode;
use super::summaries::SummaryEdits;
use crate::core::Op;
use crate::scheduler::{ChunkRecord, JobId};

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

/// Whether a write returns only once its sled batches are flushed. Files beside sled (artifacts, lists) are
/// synced either way: a key that names them may reach the disk before the next flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    Flushed,
    /// For a replicated member's store: every entry it applies is durable in its consensus log already, and
    /// is applied again after a crash (see `replicated`), so waiting for sled's flush would only add latency.
    Lazy,
}

/// A job's lists of one commit part: their bytes, and where each chunk's list starts in them and how long it
/// is.
type SegmentAppend = (Vec<u8>, Vec<(u64, usize, usize)>);

impl Store {
    /// Writes a group commit atomically and durably: artifact files first, then one sled batch that records
    /// their hashes with everything else.
    pub fn write(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        self.write_parts(vec![ops])
    }

    /// [`Store::write`] for a group commit split into parts (see
    /// [`Kv::apply_parts`](super::Kv::apply_parts)): each part one atomic batch, all durable on return.
    pub fn write_parts(&self, parts: Vec<Vec<Op>>) -> Result<(), StoreError> {
        self.write_parts_then(parts, Vec::new(), Durability::Flushed)
    }

    /// [`Store::write_parts`], with `extra` raw writes in the last part's batch (a replicated member's
    /// applied index, which must move exactly when the entry's last part lands).
    pub(crate) fn write_parts_then(
        &self,
        parts: Vec<Vec<Op>>,
        extra: Writes,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut superseded = Vec::new();
        let mut batches = Vec::with_capacity(parts.len());
        let mut blocks = BlockEdits::new(self.kv.as_ref(), false);
        let mut summaries = SummaryEdits::new(self.kv.as_ref());
        for ops in parts {
            let mut writes = self.encode_part(ops, &mut blocks, &mut superseded)?;
            blocks.drain_into(&mut writes, &mut |job, block, records| {
                summaries.block_written(job, block, records.iter().copied())
            })?;
            summaries.drain_into(&mut writes);
            batches.push(writes);
        }
        match batches.last_mut() {
            Some(last) => last.extend(extra),
            None if !extra.is_empty() => batches.push(extra),
            None => {}
        }
        match durability {
            Durability::Flushed => self.kv.apply_parts(batches)?,
            Durability::Lazy => self.kv.apply_parts_lazily(batches)?,
        }
        // No longer referenced; a failure here only leaves files that the next start-up removes.
        for name in superseded {
            let _ = self.blobs.remove(&name);
        }
        Ok(())
    }

    /// One part's key-value writes, but for its blocks and summaries; artifact files are written (and synced, together) and lists appended to
    /// their jobs' segments (synced once per job) here, before their batch.
    fn encode_part(
        &self,
        ops: Vec<Op>,
        blocks: &mut BlockEdits<'_>,
        superseded: &mut Vec<String>,
    ) -> Result<Writes, StoreError> {
        let mut writes = Vec::with_capacity(ops.len());
        // The part's chunk files, written together after the loop: one directory sync for all of them.
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        // The part's lists by job: appended to the job's segment at once after the loop, one sync per job.
        let mut lists: BTreeMap<JobId, SegmentAppend> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Job(rec) => writes.push((job_key(b'j', rec.id), Some(encode(&rec)))),
                Op::Tally(job, t) => writes.push((job_key(b't', job), Some(encode(&t)))),
                Op::Chunk(job, chunk, rec) => blocks.entry(job, chunk)?.record = Some(encode(&rec)),
                Op::Output(job, chunk, mut out) => {
                    let artifact = std::mem::take(&mut out.artifact);
                    if !artifact.is_empty() {
                        writes.push((chunk_key(b'a', job, chunk), Some(hash(&artifact))));
                        files.push((chunk_blob(job, chunk), artifact));
                    }
                    // A chunk's list of solutions goes to its job's segment file beside sled, not into sled: sled
                    // 0.34 held a coordinator that stored 260 MB of lists at 420 MB and growing; files cost no
                    // memory.
                    let solutions = std::mem::take(&mut out.solutions);
                    if !solutions.is_empty() {
                        let (segment, at) = lists.entry(job).or_default();
                        let start = segment.len();
                        encode_list_into(&solutions, segment)?;
                        at.push((chunk, start, segment.len() - start));
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
                Op::Part(job, slot, part) => {
                    writes.push((chunk_key(b'p', job, slot), Some(encode(&*part))))
                }
                Op::Votes(job, chunk, votes) => writes.push((
                    chunk_key(b'v', job, chunk),
                    (!votes.is_empty()).then(|| encode(&votes)),
                )),
                Op::Usage(job, usage) => writes.push((job_key(b'u', job), Some(encode(&usage)))),
                Op::Identity(rec) => writes.push((identity_key(&rec.identity), Some(encode(&rec)))),
                Op::Shipped(digest, bytes) => {
                    self.blobs.put(&shipped_blob(&digest), &bytes)?;
                    writes.push((shipped_key(&digest), Some(hash(&bytes))));
                }
            }
        }
        self.blobs.put_all(&files)?;
        for (job, (segment, at)) in lists {
            let base = self.blobs.append(&segment_blob(job), &segment)?;
            for (chunk, start, len) in at {
                let list = &segment[start..start + len];
                let r = ListRef::of(base + start as u64, list);
                writes.push((chunk_key(b'l', job, chunk), Some(r.encode())));
            }
        }
        Ok(writes)
    }
}

#[cfg(test)]
mod tests {
    use sweep_space::{ChunkOutput, Tally};

    use super::*;
    use crate::core::JobRecord;
    use crate::store::test_support::record;

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
        let mut ops = vec![Op::job(JobRecord {
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
            let done = snap.done_list().len() as u64;
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
}
