//! Durable state: jobs, chunk states, chunk results and running tallies, behind a small key-value trait with
//! two implementations: sled (production) and an in-memory map (unit tests).
//!
//! Layout (one keyspace, so a whole group commit is one atomic batch):
//! - `m/format` = "sweep-store/5"; `m/next_job`, `m/next_lease`: big-endian u64 counters
//! - `j/<job>`: [`JobRecord`](crate::core::JobRecord) (JSON)
//! - `t/<job>`: the job's [`Tally`](sweep_space::Tally) (JSON), rewritten with every accepted result
//! - `b/<job><block>`: the chunk records and small outputs of chunks `block * BLOCK ..`, [`BLOCK`] = 64 of
//!   them (see `blocks`); a chunk without an entry is pending, never leased. Rewritten whole with every
//!   change to one of its chunks.
//! - `d/<job><segment>`: the summary of 4,096 chunks (64 blocks; see `summaries`): which are done, a bit each,
//!   and which others have a record. Written in the batch of every block change it covers; start-up reads
//!   these instead of the blocks.
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
//! - `p/<job><slot>`: the part a slot searches once a split made or narrowed it
//!   ([`PartRecord`](crate::core::PartRecord), JSON); pieces are the slots from the job's `n_chunks` on, and
//!   their records and outputs are keyed like any chunk's
//! - format 2 only, read but never written: `c/<job><chunk>`, a chunk's
//!   [`ChunkRecord`](crate::scheduler::ChunkRecord) (JSON), and `o/` for every output. A block entry wins
//!   over a `c/` record, an inlined output over an `o/` one.
//!
//! `<job>`, `<chunk>` and `<block>` are big-endian u64, so a prefix scan returns a job's chunks in order.
//!
//! The store sits above the core: what it writes and reads back are the core's types (`core::records`: the job
//! record, the ops of a group commit, the start-up snapshot), as raft-rs's storage persists what a `Ready`
//! hands it. The code is split by concern, so that a change to one (say, the block encoding) is read and
//! reviewed without the others, and so that the key-value layer stays ignorant of what its keys mean. Files
//! import downward only, in this order from the bottom:
//! - `error`: [`StoreError`], which every layer returns;
//! - `framing`: reading length-prefixed fields, shared by the block and list codecs;
//! - `digest`: blake3 digests in hex (names, records) and as raw bytes (the hashes kept beside what is written);
//! - `keys`: how keys are spelled and named in errors;
//! - `format`: the format marker, checked when sled is opened;
//! - `kv`: the raw key-value layer, sled and its in-memory twin;
//! - `blobs`: named files beside sled (or in memory), written atomically and durably;
//! - `records`: how the core's records are encoded (JSON);
//! - `entry`: a group commit's parts as one consensus entry (a compact binary form for the ops of results), and
//!   the entries a member proposed, which the store keeps;
//! - `blocks`: the 64-chunk block codec, and the block edits of one write;
//! - `summaries`: the segment summaries derived from blocks, what start-up reads;
//! - `handle`: the [`Store`] itself, the key-value layer and the blobs opened together;
//! - `artifacts`: artifacts, lists and shipped files, checked against their recorded hashes;
//! - `chunks`: chunk records and outputs read wherever they live, and fsck's writes to them;
//! - `batches`: group commits, split into crash-consistent parts and encoded as batches;
//! - `snapshot`: what start-up reads to rebuild the core;
//! - `snapshot_file`: the store written to, and installed from, a file a replicated snapshot names;
//! - `replicated`: the store as a replicated coordinator's state machine (applying entries, snapshots);
//! - `upgrade`: the one-way upgrades of older formats on open.
//!
//! This file is only the facade: it re-exports what the rest of the coordinator may name, and nothing below
//! imports it.

mod artifacts;
mod batches;
mod blobs;
mod blocks;
mod chunks;
mod digest;
mod entry;
mod error;
mod format;
mod framing;
mod handle;
mod keys;
mod kv;
mod records;
mod replicated;
mod snapshot;
mod snapshot_file;
mod summaries;
#[cfg(test)]
mod test_support;
mod upgrade;

pub use artifacts::FinishedArtifacts;
pub use batches::{split_commit, MAX_BATCH_OPS};
pub use blobs::{Blobs, FileBlobs, MemBlobs};
pub use blocks::{BLOCK, INLINE_OUTPUT_MAX};
pub use chunks::Lists;
pub use digest::{digest_hex, is_digest};
pub use entry::{decode_entry, encode_entry, Proposed};
pub use error::StoreError;
pub use handle::Store;
pub(crate) use keys::{be_u64, chunk_key, job_key, key_text};
pub use kv::{Kv, MemKv, Pairs, ScanFn, SledKv, Writes};
pub(crate) use records::decode;
pub use replicated::StoreMachine;
pub use snapshot_file::{Descriptor, Incoming, SnapshotFiles};
