//! A group commit's parts as one consensus entry ([`encode_entry`], [`decode_entry`]).
//!
//! Version 2 (written): a version byte, the number of parts and, for each, its ops; then the frames (artifacts
//! and shipped files, by index). The ops every result stages (its chunk record and its output) are written in
//! a compact binary form: varints, a result's digest as 32 raw bytes, lengths before strings; every other op
//! (jobs, tallies, counters, ...) as its JSON. Measured on a job of tiny chunks, binary records made entries
//! about a third of their JSON size, and every member copies, writes and parses each entry several times.
//! Version 1 (JSON only) is still read.
//!
//! Only the last write of a key within a part is carried ([`last_writes`]). A damaged entry is refused whole,
//! naming what is wrong; decoding never panics.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sweep_space::{ChunkOutput, Tally};

use super::digest::{digest_hex, is_digest};
use super::error::StoreError;
use super::framing::{take, take_u32, take_u64};
use crate::core::{IdentityRecord, JobRecord, Op, PartRecord};
use crate::limits::Usage;
use crate::scheduler::{ChunkRecord, JobId, Vote};

const VERSION_JSON: u8 = 1;
const VERSION_BINARY: u8 = 2;

/// The counters an [`Op::Meta`] may name; an entry naming another is damaged.
const META_NAMES: [&str; 2] = ["next_job", "next_lease"];

/// Op tags of version 2.
const TAG_JSON: u8 = 0;
const TAG_CHUNK: u8 = 1;
const TAG_OUTPUT: u8 = 2;

/// Chunk record tags of version 2.
const REC_PENDING: u8 = 0;
const REC_LEASED: u8 = 1;
/// `Done` whose digest is 64 lower-case hex digits, carried as 32 bytes.
const REC_DONE_HEX: u8 = 2;
/// `Done` with any other digest, carried as it is.
const REC_DONE: u8 = 3;
const REC_POISONED: u8 = 4;

fn damaged(why: impl Into<String>) -> StoreError {
    StoreError::Damaged {
        key: "a replicated entry".into(),
        why: why.into(),
    }
}

/// An [`Op`] as an entry carries it: bytes (artifacts) travel as frames after the JSON, by index.
#[derive(Serialize, Deserialize)]
enum WireOp {
    Job(JobRecord),
    Tally(JobId, Tally),
    Chunk(JobId, u64, ChunkRecord),
    /// The output without its artifact, and the frame holding that artifact if it has one.
    Output(JobId, u64, ChunkOutput, Option<usize>),
    Artifact(JobId, usize),
    Meta(String, u64),
    Checkpoint(JobId, u64, Option<String>),
    Votes(JobId, u64, Vec<Vote>),
    Usage(JobId, Usage),
    Identity(IdentityRecord),
    Shipped(String, usize),
    Part(JobId, u64, PartRecord),
}

/// Proposals kept at most in [`Proposed`]: the leader has one batch in flight at a time, and a proposal that
/// never commits (its leader was deposed) must not be kept for ever.
const PROPOSED_KEPT: usize = 64;

/// The entries this member encoded and proposed, kept decoded until it applies them: a leader applies its own
/// entries, and decoding what it had just encoded took about a tenth of its time on a job of tiny chunks.
/// Looked up by the entry's blake3 digest, so kept parts stand only for the very bytes that committed; other
/// entries (every entry on a follower) are decoded.
#[derive(Default)]
pub struct Proposed(Mutex<VecDeque<(blake3::Hash, Vec<Vec<Op>>)>>);

impl Proposed {
    /// `encode_entry(parts)`, keeping `parts` for [`Proposed::decode`].
    pub fn encode(&self, parts: Vec<Vec<Op>>) -> Result<Vec<u8>, StoreError> {
        let bytes = encode_entry(&parts)?;
        let digest = blake3::hash(&bytes);
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= PROPOSED_KEPT {
            kept.pop_front();
        }
        kept.push_back((digest, parts));
        Ok(bytes)
    }

    /// The parts of the entry `bytes`: the ones kept if this member encoded it, else `decode_entry(bytes)`.
    /// The kept parts may hold writes of a key that the entry's bytes leave out ([`last_writes`]); applied in
    /// order, they leave the store as the bytes do.
    pub fn decode(&self, bytes: &[u8]) -> Result<Vec<Vec<Op>>, StoreError> {
        {
            let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if !kept.is_empty() {
                let digest = blake3::hash(bytes);
                if let Some(i) = kept.iter().position(|(d, _)| *d == digest) {
                    if let Some((_, parts)) = kept.remove(i) {
                        return Ok(parts);
                    }
                }
            }
        }
        decode_entry(bytes)
    }
}

/// One consensus entry holding a group commit's parts (version 2, see the module documentation).
pub fn encode_entry(parts: &[Vec<Op>]) -> Result<Vec<u8>, StoreError> {
    let mut frames: Vec<&[u8]> = Vec::new();
    let mut out = vec![VERSION_BINARY];
    put_varint(&mut out, parts.len() as u64);
    for part in parts {
        let ops: Vec<&Op> = last_writes(part).collect();
        put_varint(&mut out, ops.len() as u64);
        for op in ops {
            encode_op(op, &mut out, &mut frames)?;
        }
    }
    put_varint(&mut out, frames.len() as u64);
    for f in frames {
        put_varint(&mut out, f.len() as u64);
        out.extend_from_slice(f);
    }
    Ok(out)
}

fn encode_op<'a>(
    op: &'a Op,
    out: &mut Vec<u8>,
    frames: &mut Vec<&'a [u8]>,
) -> Result<(), StoreError> {
    let mut frame = |bytes: &'a [u8]| {
        frames.push(bytes);
        frames.len() - 1
    };
    let wire = match op {
        Op::Chunk(job, chunk, rec) => {
            out.push(TAG_CHUNK);
            put_varint(out, *job);
            put_varint(out, *chunk);
            encode_record(rec, out);
            return Ok(());
        }
        Op::Output(job, chunk, output) => {
            // Every field by name: a field added to `ChunkOutput` must be added here too.
            let ChunkOutput {
                nodes,
                solutions,
                counters,
                artifact,
            } = output;
            out.push(TAG_OUTPUT);
            put_varint(out, *job);
            put_varint(out, *chunk);
            put_varint(out, *nodes);
            put_varint(out, solutions.len() as u64);
            for s in solutions {
                put_str(out, s);
            }
            put_varint(out, counters.len() as u64);
            for (name, v) in counters {
                put_str(out, name);
                out.extend_from_slice(&v.to_le_bytes());
            }
            // 0: no artifact; else its frame + 1.
            let at = if artifact.is_empty() {
                0
            } else {
                frame(artifact) + 1
            };
            put_varint(out, at as u64);
            return Ok(());
        }
        Op::Job(rec) => WireOp::Job((**rec).clone()),
        Op::Tally(job, t) => WireOp::Tally(*job, t.clone()),
        Op::Artifact(job, bytes) => WireOp::Artifact(*job, frame(bytes)),
        Op::Meta(name, v) => WireOp::Meta((*name).to_string(), *v),
        Op::Checkpoint(job, chunk, state) => WireOp::Checkpoint(*job, *chunk, state.clone()),
        Op::Part(job, slot, part) => WireOp::Part(*job, *slot, (**part).clone()),
        Op::Votes(job, chunk, votes) => WireOp::Votes(*job, *chunk, votes.clone()),
        Op::Usage(job, u) => WireOp::Usage(*job, *u),
        Op::Identity(rec) => WireOp::Identity(rec.clone()),
        Op::Shipped(digest, bytes) => WireOp::Shipped(digest.clone(), frame(bytes)),
    };
    let json = serde_json::to_vec(&wire).map_err(|e| damaged(e.to_string()))?;
    out.push(TAG_JSON);
    put_varint(out, json.len() as u64);
    out.extend_from_slice(&json);
    Ok(())
}

fn encode_record(rec: &ChunkRecord, out: &mut Vec<u8>) {
    match rec {
        ChunkRecord::Pending { attempts } => {
            out.push(REC_PENDING);
            put_varint(out, u64::from(*attempts));
        }
        ChunkRecord::Leased {
            lease,
            worker,
            deadline,
            attempts,
        } => {
            out.push(REC_LEASED);
            put_varint(out, *lease);
            put_str(out, worker);
            put_varint(out, *deadline);
            put_varint(out, u64::from(*attempts));
        }
        ChunkRecord::Done { digest, worker } => {
            match hex32(digest) {
                Some(raw) => {
                    out.push(REC_DONE_HEX);
                    out.extend_from_slice(&raw);
                }
                None => {
                    out.push(REC_DONE);
                    put_str(out, digest);
                }
            }
            put_str(out, worker);
        }
        ChunkRecord::Poisoned {
            attempts,
            last_error,
        } => {
            out.push(REC_POISONED);
            put_varint(out, u64::from(*attempts));
            put_str(out, last_error);
        }
    }
}

/// The parts of an entry written by [`encode_entry`] (or by version 1); a damaged one is refused whole.
pub fn decode_entry(bytes: &[u8]) -> Result<Vec<Vec<Op>>, StoreError> {
    let mut rest = bytes;
    match take(&mut rest, 1) {
        Some([VERSION_BINARY]) => decode_v2(rest),
        Some([VERSION_JSON]) => decode_v1(rest),
        Some([v]) => Err(damaged(format!("unknown entry version {v}"))),
        _ => Err(damaged("an empty entry")),
    }
}

/// An op of version 2 before its frames are known: binary ops are complete, JSON ones and outputs may name a
/// frame.
enum Pending {
    Done(Op),
    Output(JobId, u64, ChunkOutput, usize),
    Wire(WireOp),
}

fn decode_v2(mut rest: &[u8]) -> Result<Vec<Vec<Op>>, StoreError> {
    let rest = &mut rest;
    let n_parts = count(rest, "parts")?;
    let mut parts: Vec<Vec<Pending>> = Vec::new();
    for _ in 0..n_parts {
        let n_ops = count(rest, "ops")?;
        let mut ops = Vec::new();
        for _ in 0..n_ops {
            ops.push(decode_op(rest)?);
        }
        parts.push(ops);
    }
    let n_frames = count(rest, "frames")?;
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for _ in 0..n_frames {
        let len = count(rest, "frame length")?;
        frames.push(
            take(rest, len)
                .ok_or_else(|| damaged("truncated frame"))?
                .to_vec(),
        );
    }
    if !rest.is_empty() {
        return Err(damaged(format!(
            "{} bytes after the last frame",
            rest.len()
        )));
    }
    let frame = |i: usize| -> Result<Vec<u8>, StoreError> {
        frames
            .get(i)
            .cloned()
            .ok_or_else(|| damaged(format!("frame {i} missing ({} frames)", frames.len())))
    };
    parts
        .into_iter()
        .map(|part| {
            part.into_iter()
                .map(|p| match p {
                    Pending::Done(op) => Ok(op),
                    Pending::Output(job, chunk, mut out, at) => {
                        if at > 0 {
                            out.artifact = frame(at - 1)?;
                        }
                        Ok(Op::Output(job, chunk, out))
                    }
                    Pending::Wire(w) => from_wire(w, &frame),
                })
                .collect()
        })
        .collect()
}

fn decode_op(rest: &mut &[u8]) -> Result<Pending, StoreError> {
    let tag = take(rest, 1).ok_or_else(|| damaged("truncated op"))?[0];
    match tag {
        TAG_CHUNK => {
            let job = varint(rest, "job")?;
            let chunk = varint(rest, "chunk")?;
            Ok(Pending::Done(Op::Chunk(job, chunk, decode_record(rest)?)))
        }
        TAG_OUTPUT => {
            let job = varint(rest, "job")?;
            let chunk = varint(rest, "chunk")?;
            let nodes = varint(rest, "nodes")?;
            let n = count(rest, "solutions")?;
            let mut solutions = Vec::new();
            for _ in 0..n {
                solutions.push(string(rest, "solution")?);
            }
            let n = count(rest, "counters")?;
            let mut counters = BTreeMap::new();
            for _ in 0..n {
                let name = string(rest, "counter name")?;
                let v: [u8; 16] = take(rest, 16)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| damaged("truncated counter"))?;
                counters.insert(name, u128::from_le_bytes(v));
            }
            let at = count(rest, "artifact frame")?;
            let out = ChunkOutput {
                nodes,
                solutions,
                counters,
                artifact: Vec::new(),
            };
            Ok(Pending::Output(job, chunk, out, at))
        }
        TAG_JSON => {
            let len = count(rest, "op length")?;
            let json = take(rest, len).ok_or_else(|| damaged("truncated op"))?;
            let w: WireOp =
                serde_json::from_slice(json).map_err(|e| damaged(format!("an op: {e}")))?;
            Ok(Pending::Wire(w))
        }
        t => Err(damaged(format!("unknown op tag {t}"))),
    }
}

fn decode_record(rest: &mut &[u8]) -> Result<ChunkRecord, StoreError> {
    let tag = take(rest, 1).ok_or_else(|| damaged("truncated chunk record"))?[0];
    let attempts = |rest: &mut &[u8]| -> Result<u32, StoreError> {
        u32::try_from(varint(rest, "attempts")?).map_err(|_| damaged("attempts beyond u32"))
    };
    Ok(match tag {
        REC_PENDING => ChunkRecord::Pending {
            attempts: attempts(rest)?,
        },
        REC_LEASED => ChunkRecord::Leased {
            lease: varint(rest, "lease")?,
            worker: string(rest, "worker")?,
            deadline: varint(rest, "deadline")?,
            attempts: attempts(rest)?,
        },
        REC_DONE_HEX => {
            let raw = take(rest, 32).ok_or_else(|| damaged("truncated digest"))?;
            let digest = hex::encode(raw);
            ChunkRecord::Done {
                digest,
                worker: string(rest, "worker")?,
            }
        }
        REC_DONE => ChunkRecord::Done {
            digest: string(rest, "digest")?,
            worker: string(rest, "worker")?,
        },
        REC_POISONED => ChunkRecord::Poisoned {
            attempts: attempts(rest)?,
            last_error: string(rest, "error")?,
        },
        t => return Err(damaged(format!("unknown chunk record tag {t}"))),
    })
}

/// `digest` as 32 bytes if it is exactly 64 lower-case hex digits (so that it reads back the same).
fn hex32(digest: &str) -> Option<[u8; 32]> {
    let b = digest.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nibble(b[2 * i])? << 4) | nibble(b[2 * i + 1])?;
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A LEB128 varint; `what` names the field in the error.
fn varint(rest: &mut &[u8], what: &str) -> Result<u64, StoreError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = take(rest, 1).ok_or_else(|| damaged(format!("truncated {what}")))?[0];
        let bits = u64::from(b & 0x7f);
        if shift == 63 && bits > 1 {
            break;
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(damaged(format!("{what} is not a 64-bit varint")))
}

/// A varint used as a count or a length: it must fit what is left, so a forged one cannot make us allocate.
fn count(rest: &mut &[u8], what: &str) -> Result<usize, StoreError> {
    let n = varint(rest, what)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or_else(|| {
            damaged(format!(
                "{what}: {n} is more than the {} bytes left",
                rest.len()
            ))
        })
}

fn string(rest: &mut &[u8], what: &str) -> Result<String, StoreError> {
    let len = count(rest, what)?;
    let b = take(rest, len).ok_or_else(|| damaged(format!("truncated {what}")))?;
    String::from_utf8(b.to_vec()).map_err(|_| damaged(format!("{what} is not UTF-8")))
}

/// An op carried as JSON, its frames resolved.
fn from_wire(
    op: WireOp,
    frame: &impl Fn(usize) -> Result<Vec<u8>, StoreError>,
) -> Result<Op, StoreError> {
    Ok(match op {
        WireOp::Job(rec) => Op::job(rec),
        WireOp::Tally(job, t) => Op::Tally(job, t),
        WireOp::Chunk(job, chunk, rec) => Op::Chunk(job, chunk, rec),
        WireOp::Output(job, chunk, mut out, at) => {
            if let Some(i) = at {
                out.artifact = frame(i)?;
            }
            Op::Output(job, chunk, out)
        }
        WireOp::Artifact(job, i) => Op::Artifact(job, Arc::new(frame(i)?)),
        WireOp::Meta(name, v) => {
            let name = META_NAMES
                .iter()
                .find(|n| **n == name)
                .ok_or_else(|| damaged(format!("unknown counter `{name}`")))?;
            Op::Meta(name, v)
        }
        WireOp::Checkpoint(job, chunk, state) => Op::Checkpoint(job, chunk, state),
        WireOp::Part(job, slot, part) => Op::Part(job, slot, Box::new(part)),
        WireOp::Votes(job, chunk, votes) => Op::Votes(job, chunk, votes),
        WireOp::Usage(job, u) => Op::Usage(job, u),
        WireOp::Identity(rec) => Op::Identity(rec),
        WireOp::Shipped(digest, i) => {
            let bytes = frame(i)?;
            if !is_digest(&digest) || digest_hex(&bytes) != digest {
                return Err(damaged(format!(
                    "shipped file `{digest}` does not match its digest"
                )));
            }
            Op::Shipped(digest, Arc::new(bytes))
        }
    })
}

/// What a part's ops write, without the ops whose every write a later op of the same part overwrites: a chunk's
/// lease record replaced by its `Done` record, the tally staged after each result, a counter moved several
/// times. Within one part (one atomic batch) only the last write of a key reaches the store, so an entry needs
/// only that; it makes entries about half as large (measured on a job of tiny chunks, where leases and tallies
/// are most of the ops). Outputs, artifacts and shipped files are all kept: they append or write files.
fn last_writes(part: &[Op]) -> impl Iterator<Item = &Op> {
    #[derive(PartialEq, Eq, Hash)]
    enum Key<'a> {
        Job(JobId),
        Tally(JobId),
        Chunk(JobId, u64),
        Meta(&'a str),
        Checkpoint(JobId, u64),
        Part(JobId, u64),
        Votes(JobId, u64),
        Usage(JobId),
        Identity(&'a str),
    }
    fn key(op: &Op) -> Option<Key<'_>> {
        Some(match op {
            Op::Job(rec) => Key::Job(rec.id),
            Op::Tally(job, _) => Key::Tally(*job),
            Op::Chunk(job, chunk, _) => Key::Chunk(*job, *chunk),
            Op::Meta(name, _) => Key::Meta(name),
            Op::Checkpoint(job, chunk, _) => Key::Checkpoint(*job, *chunk),
            Op::Part(job, slot, _) => Key::Part(*job, *slot),
            Op::Votes(job, chunk, _) => Key::Votes(*job, *chunk),
            Op::Usage(job, _) => Key::Usage(*job),
            Op::Identity(rec) => Key::Identity(&rec.identity),
            Op::Output(..) | Op::Artifact(..) | Op::Shipped(..) => return None,
        })
    }
    // The index of the last op writing each key.
    let mut last: std::collections::HashMap<Key<'_>, usize> =
        std::collections::HashMap::with_capacity(part.len());
    for (i, op) in part.iter().enumerate() {
        if let Some(k) = key(op) {
            last.insert(k, i);
        }
    }
    part.iter()
        .enumerate()
        .filter(move |(i, op)| key(op).is_none_or(|k| last.get(&k) == Some(i)))
        .map(|(_, op)| op)
}

/// The parts of a version 1 entry (the JSON of every op), after its version byte.
fn decode_v1(mut rest: &[u8]) -> Result<Vec<Vec<Op>>, StoreError> {
    let len = take_u32(&mut rest).ok_or_else(|| damaged("truncated length"))? as usize;
    let json = take(&mut rest, len).ok_or_else(|| damaged("truncated records"))?;
    let wire: Vec<Vec<WireOp>> =
        serde_json::from_slice(json).map_err(|e| damaged(format!("records: {e}")))?;
    let mut frames: Vec<Vec<u8>> = Vec::new();
    while !rest.is_empty() {
        let n = take_u64(&mut rest).ok_or_else(|| damaged("truncated frame length"))?;
        let n = usize::try_from(n).map_err(|_| damaged("a frame beyond memory"))?;
        let f = take(&mut rest, n).ok_or_else(|| damaged("truncated frame"))?;
        frames.push(f.to_vec());
    }
    let frame = |i: usize| -> Result<Vec<u8>, StoreError> {
        frames
            .get(i)
            .cloned()
            .ok_or_else(|| damaged(format!("frame {i} missing ({} frames)", frames.len())))
    };
    wire.into_iter()
        .map(|part| part.into_iter().map(|op| from_wire(op, &frame)).collect())
        .collect()
}
