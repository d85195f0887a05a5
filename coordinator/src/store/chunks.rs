//! Chunk records and outputs read wherever they live: in a block (format 3) or under a key of their own
//! (format 2's `c/` and `o/`, and any output too large to inline). Everything that reads or repairs single
//! chunks goes through here, so that which of the two holds a chunk is decided in one place.

use std::collections::BTreeMap;

use sweep_space::ChunkOutput;

use super::artifacts::chunk_blob;
use super::blocks::{block_entries, block_of, block_start, decode_entry, BlockEdits, BLOCK};
use super::error::StoreError;
use super::handle::Store;
use super::keys::{be_u64, chunk_key, job_key};
use super::kv::Writes;
use super::records::decode;
use super::summaries::SummaryEdits;
use crate::core::StoredDigests;
use crate::scheduler::{ChunkRecord, JobId};

/// Whether a walk over stored outputs reads each chunk's list of solutions (a file of its own) too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lists {
    Read,
    /// Counts only: outputs come without solutions, and no list file is opened.
    Skip,
}

/// One chunk record or output as [`Store::scan_chunks`] finds it: under its format-2 key (`c/` or `o/`
/// + job + chunk), whether it is held by a block or by a key of its own.
#[derive(Debug)]
pub(crate) struct StoredChunk {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// The block that holds it, if any: named when it does not decode.
    pub block: Option<Vec<u8>>,
}

impl StoredChunk {
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        match &self.block {
            Some(b) => {
                let chunk = be_u64(&self.key, self.key.get(10..).unwrap_or_default())?;
                decode_entry(b, chunk, &self.value)
            }
            None => decode(&self.key, &self.value),
        }
    }
}

/// Blocks that do not decode: each key with the error naming it.
pub(crate) type DamagedBlocks = Vec<(Vec<u8>, StoreError)>;

impl Store {
    /// Every stored result of a job, in chunk order, each with its artifact (empty once the job's merged
    /// artifact has replaced them).
    pub fn outputs(&self, job: JobId) -> Result<Vec<(u64, ChunkOutput)>, StoreError> {
        let mut hashes: BTreeMap<u64, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
        for (k, v) in self.kv.scan(&job_key(b'a', job))? {
            hashes.insert(be_u64(&k, &k[10..])?, (k, v));
        }
        let (found, mut damaged) = self.scan_chunks(b'o', Some(job))?;
        if let Some((_, e)) = damaged.pop() {
            return Err(e);
        }
        found
            .into_iter()
            .map(|s| {
                let chunk = be_u64(&s.key, &s.key[10..])?;
                let mut out: ChunkOutput = s.decode()?;
                if let Some((key, want)) = hashes.remove(&chunk) {
                    out.artifact = self.checked_blob(&chunk_blob(job, chunk), &key, &want)?;
                }
                self.attach_list(job, chunk, &mut out)?;
                Ok((chunk, out))
            })
            .collect()
    }

    /// Every stored result of a job, one at a time in chunk order, without its artifact: what answers and the
    /// solutions stream read, in memory bounded by one block and one output whatever the job's size (unlike
    /// [`Store::outputs`]). `f` may stop the walk by returning an error.
    pub fn for_each_output<E: From<StoreError>>(
        &self,
        job: JobId,
        n_chunks: u64,
        f: &mut dyn FnMut(u64, ChunkOutput) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each_output_in(job, 0..n_chunks, Lists::Read, f)
    }

    /// [`Store::for_each_output`] over the chunks in `chunks` only, reading only their blocks; with
    /// [`Lists::Skip`] a listed output comes without its solutions and its list file is not read (counts only).
    pub fn for_each_output_in<E: From<StoreError>>(
        &self,
        job: JobId,
        chunks: std::ops::Range<u64>,
        lists: Lists,
        f: &mut dyn FnMut(u64, ChunkOutput) -> Result<(), E>,
    ) -> Result<(), E> {
        // Blocks hold the chunks `k * BLOCK ..`: start at the block that holds the first one asked for.
        let mut first = chunks.start - chunks.start % BLOCK;
        while first < chunks.end {
            let (bkey, _) = block_of(job, first);
            let block = self.kv.get(&bkey)?;
            let entries = match &block {
                Some(bytes) => block_entries(&bkey, bytes)?,
                None => Vec::new(),
            };
            let mut inline: BTreeMap<u64, &[u8]> = BTreeMap::new();
            for e in &entries {
                if let Some(out) = e.output {
                    inline.insert(first + u64::from(e.offset), out);
                }
            }
            let last = (first + BLOCK).min(chunks.end);
            for chunk in first.max(chunks.start)..last {
                let out: Option<ChunkOutput> = match inline.get(&chunk) {
                    Some(bytes) => Some(decode_entry(&bkey, chunk, bytes)?),
                    // Too large to inline (or a format-2 store): a key of its own, if the chunk is done.
                    None => {
                        let key = chunk_key(b'o', job, chunk);
                        self.kv.get(&key)?.map(|v| decode(&key, &v)).transpose()?
                    }
                };
                if let Some(mut out) = out {
                    if lists == Lists::Read {
                        self.attach_list(job, chunk, &mut out)?;
                    }
                    f(chunk, out)?;
                }
            }
            first = last;
        }
        Ok(())
    }

    /// Every chunk record of a job (chunks without one are pending, never leased).
    pub fn chunks(&self, job: JobId) -> Result<Vec<(u64, ChunkRecord)>, StoreError> {
        let (found, mut damaged) = self.scan_chunks(b'c', Some(job))?;
        if let Some((_, e)) = damaged.pop() {
            return Err(e);
        }
        found
            .into_iter()
            .map(|s| Ok((be_u64(&s.key, &s.key[10..])?, s.decode()?)))
            .collect()
    }

    pub fn chunk(&self, job: JobId, chunk: u64) -> Result<Option<ChunkRecord>, StoreError> {
        let (bkey, offset) = block_of(job, chunk);
        if let Some(bytes) = self.kv.get(&bkey)? {
            let held = block_entries(&bkey, &bytes)?
                .into_iter()
                .find(|e| e.offset == offset)
                .and_then(|e| e.record);
            if let Some(rec) = held {
                return decode_entry(&bkey, chunk, rec).map(Some);
            }
        }
        let key = chunk_key(b'c', job, chunk);
        self.kv.get(&key)?.map(|v| decode(&key, &v)).transpose()
    }

    /// Chunk records (`tag` = `b'c'`) or outputs (`b'o'`) of one job or of all, each under its format-2 key
    /// whether a block or a key of its own holds it, in key order; a block's entry wins over a key of its own.
    /// Blocks that do not decode come back apart, as errors naming them; the keys of their own they would have
    /// hidden are not (a format-2 store's older states of the same chunks), so after fsck drops such a block
    /// those show through: work repeated, never invented.
    pub(crate) fn scan_chunks(
        &self,
        tag: u8,
        job: Option<JobId>,
    ) -> Result<(Vec<StoredChunk>, DamagedBlocks), StoreError> {
        let prefix = |t: u8| match job {
            Some(j) => job_key(t, j),
            None => vec![t, b'/'],
        };
        let mut found: BTreeMap<Vec<u8>, StoredChunk> = BTreeMap::new();
        for (key, value) in self.kv.scan(&prefix(tag))? {
            found.insert(
                key.clone(),
                StoredChunk {
                    key,
                    value,
                    block: None,
                },
            );
        }
        let mut damaged = Vec::new();
        for (bkey, bytes) in self.kv.scan(&prefix(b'b'))? {
            let entries = block_start(&bkey).and_then(|s| Ok((s, block_entries(&bkey, &bytes)?)));
            let ((job, first), entries) = match entries {
                Ok(x) => x,
                Err(e) => {
                    damaged.push((bkey, e));
                    continue;
                }
            };
            for e in entries {
                let held = if tag == b'c' { e.record } else { e.output };
                if let Some(value) = held {
                    let key = chunk_key(tag, job, first + u64::from(e.offset));
                    let stored = StoredChunk {
                        key: key.clone(),
                        value: value.to_vec(),
                        block: Some(bkey.clone()),
                    };
                    found.insert(key, stored);
                }
            }
        }
        Ok((found.into_values().collect(), damaged))
    }

    /// Applies raw writes atomically (for fsck's repair), except that writes to format-2 chunk keys
    /// (`c/` and `o/` + job + chunk) change the chunk wherever it lives: setting one sets the entry in its
    /// block, removing one removes both the entry and the key of its own. Blocks that do not decode are
    /// replaced (fsck reports them first).
    pub(crate) fn apply_chunk_writes(&self, writes: Writes) -> Result<(), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut blocks = BlockEdits::new(self.kv.as_ref(), true);
        let mut raw = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            let chunk_write = key.len() == 18 && (key.starts_with(b"c/") || key.starts_with(b"o/"));
            if !chunk_write {
                raw.push((key, value));
                continue;
            }
            let (job, chunk) = (be_u64(&key, &key[2..10])?, be_u64(&key, &key[10..])?);
            let entry = blocks.entry(job, chunk)?;
            let field = if key[0] == b'c' {
                &mut entry.record
            } else {
                &mut entry.output
            };
            if value.is_none() {
                raw.push((key, None));
            }
            *field = value;
        }
        // Blocks last: a batch keeps the last write of a key, and a replaced damaged block is also dropped.
        let mut summaries = SummaryEdits::new(self.kv.as_ref());
        blocks.drain_into(&mut raw, &mut |job, block, records| {
            summaries.block_written(job, block, records.iter().copied())
        })?;
        summaries.drain_into(&mut raw);
        self.kv.apply(raw)
    }
}

/// The core asks for a done chunk's digest when a duplicate report arrives after the first result's batch was
/// written; it is the `Done` record's, wherever the chunk's record lives.
impl StoredDigests for Store {
    type Error = StoreError;

    fn done_digest(&self, job: JobId, chunk: u64) -> Result<Option<String>, StoreError> {
        Ok(match self.chunk(job, chunk)? {
            Some(ChunkRecord::Done { digest, .. }) => Some(digest),
            _ => None,
        })
    }
}
