//! The distance table: every position within `depth` twists of solved, with its distance.
//!
//! Why this shape: a hash map of the 21.1 M positions (the original program's way) takes about 40 bytes each, 845
//! MB, and is rebuilt on every run. Here the table is one sorted `Vec<u64>` (8 bytes a position) that is built once
//! by the cluster, stored and shipped as bytes, and probed by interpolation inside small buckets (see [`Table`]).
//!
//! Entry layout: `key << 4 | distance`, where `key = mix(position)` is a bijection of the 60-bit canonical form.
//! Mixing spreads the keys (canonical forms near solved share long prefixes), so the top bits of a key pick a
//! bucket of a handful of entries. The distance sits in the low 4 bits so that sorting entries sorts by key and,
//! among equal keys, puts the shortest distance first: merging chunk lists keeps the first entry of each key.
//!
//! Chunks: the prefixes of the first `min(depth, 2)` twists (no twist twice in a row), in lexicographic order, split
//! into contiguous ranges. A chunk walks every twist sequence below its prefixes to `depth` (no immediate repeats),
//! so the union over chunks holds every position within `depth` with at least its true distance; the merge keeps
//! the minimum, which is the true distance because some chunk holds a shortest sequence.

use crate::ball::{Ball, N_TWISTS, POS_MASK};
use sweep_space::{ChunkId, Control, Meter, SpaceError};

/// Deepest table accepted. The 4-bit distances would allow 15; memory is the real limit. Each level multiplies
/// the positions by about 10.3 (depth 6: 2,045,512 positions, depth 7: 21,102,966), so depth 8 holds about
/// 2.2e8 positions (a 1.7 GB table, a few GB more while the chunks are merged) and depth 9 about 2.2e9, an 18 GB
/// table plus its chunks: more than a 24 GB machine holds. Refusing it up front fails cleanly instead of
/// exhausting memory an hour into the job.
pub const MAX_DEPTH: u8 = 8;
/// Identifies the serialised table and its version.
const MAGIC: &[u8; 8] = b"SWBBTAB1";
/// Magic, depth, 7 reserved bytes, count.
const HEADER_LEN: usize = 8 + 8 + 8;
const DIGEST_LEN: usize = 32;
/// A bijection of the low 60 bits (xorshifts and odd multipliers, all taken mod 2^60).
#[inline]
pub fn mix(x: u64) -> u64 {
    let mut x = x & POS_MASK;
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9) & POS_MASK;
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb) & POS_MASK;
    x ^= x >> 31;
    x
}

#[inline]
fn entry(ball: Ball, dist: u8) -> u64 {
    (mix(ball.0) << 4) | u64::from(dist)
}

#[inline]
fn key_of(e: u64) -> u64 {
    e >> 4
}

#[inline]
fn dist_of(e: u64) -> u8 {
    (e & 15) as u8
}

/// The twist sequences that define the chunks: all of length `min(depth, 2)`, lexicographic.
pub fn prefixes(depth: u8) -> Vec<Vec<u8>> {
    let len = depth.min(2) as usize;
    let mut out: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..len {
        let mut next = Vec::new();
        for p in &out {
            for t in 0..N_TWISTS as u8 {
                if p.last() != Some(&t) {
                    let mut q = p.clone();
                    q.push(t);
                    next.push(q);
                }
            }
        }
        out = next;
    }
    out
}

/// What one chunk of a table build produced.
#[derive(Debug)]
pub struct ChunkTable {
    /// Sorted by key, one entry per key (the shortest distance this chunk saw).
    pub entries: Vec<u64>,
    /// Twist sequences walked (tree nodes, including the prefixes).
    pub nodes: u64,
}

/// Walks chunk `chunk` of `n_chunks` of the depth-`depth` table.
pub fn build_chunk(depth: u8, at: ChunkId, ctl: &Control) -> Result<ChunkTable, SpaceError> {
    let prefixes = prefixes(depth);
    let (lo, hi) = at.range(prefixes.len() as u128, prefixes.len() as u64)?;
    let mut walk = Walk {
        depth,
        entries: Vec::new(),
        meter: Meter::new(ctl),
    };
    if lo == 0 {
        walk.visit(Ball::SOLVED, 0)?;
    }
    for p in &prefixes[lo as usize..hi as usize] {
        let mut ball = Ball::SOLVED;
        for (i, &t) in p.iter().enumerate() {
            ball = ball.twist(t as usize);
            walk.visit(ball, i as u8 + 1)?;
        }
        walk.dfs(ball, p.len() as u8, p.last().map(|&t| t as usize))?;
    }
    let nodes = walk.meter.finish();
    let mut entries = walk.entries;
    entries.sort_unstable();
    entries.dedup_by_key(|e| key_of(*e));
    entries.shrink_to_fit();
    Ok(ChunkTable { entries, nodes })
}

struct Walk<'a> {
    depth: u8,
    entries: Vec<u64>,
    meter: Meter<'a>,
}

impl Walk<'_> {
    #[inline]
    fn visit(&mut self, ball: Ball, dist: u8) -> Result<(), SpaceError> {
        self.entries.push(entry(ball, dist));
        self.meter.tick()
    }

    fn dfs(&mut self, ball: Ball, dist: u8, last: Option<usize>) -> Result<(), SpaceError> {
        if dist >= self.depth {
            return Ok(());
        }
        for t in 0..N_TWISTS {
            // Every twist is its own inverse: repeating it only returns to a shorter sequence's position.
            if Some(t) == last {
                continue;
            }
            let next = ball.twist(t);
            self.visit(next, dist + 1)?;
            self.dfs(next, dist + 1, Some(t))?;
        }
        Ok(())
    }
}

/// A chunk's entries as its artifact: little-endian u64s.
pub fn entries_to_artifact(entries: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 8);
    for e in entries {
        out.extend_from_slice(&e.to_le_bytes());
    }
    out
}

/// Reads little-endian u64 `i` of a validated-length artifact.
#[inline]
fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// Checks that a chunk artifact is a list of entries strictly increasing by key with distances within `depth`.
pub fn check_artifact(depth: u8, bytes: &[u8]) -> Result<usize, SpaceError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(SpaceError::Verification(format!(
            "table chunk of {} bytes is not a whole number of 8-byte entries",
            bytes.len()
        )));
    }
    let n = bytes.len() / 8;
    let mut prev: Option<u64> = None;
    for i in 0..n {
        let e = word(bytes, i);
        if dist_of(e) > depth {
            return Err(SpaceError::Verification(format!(
                "entry {i} has distance {} beyond the table depth {depth}",
                dist_of(e)
            )));
        }
        if prev.is_some_and(|p| key_of(p) >= key_of(e)) {
            return Err(SpaceError::Verification(format!(
                "entry {i} is out of order or repeats a position"
            )));
        }
        prev = Some(e);
    }
    Ok(n)
}

/// K-way merge of sorted entry lists, keeping the shortest distance of each key; calls `emit` in key order.
fn merge_lists(depth: u8, lists: &[&[u8]], mut emit: impl FnMut(u64)) -> Result<u64, SpaceError> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    for l in lists {
        check_artifact(depth, l)?;
    }
    let mut next = vec![0usize; lists.len()];
    let mut heap = BinaryHeap::with_capacity(lists.len());
    for (s, l) in lists.iter().enumerate() {
        if !l.is_empty() {
            heap.push(Reverse((word(l, 0), s)));
            next[s] = 1;
        }
    }
    let mut count = 0u64;
    let mut last_key: Option<u64> = None;
    while let Some(Reverse((e, s))) = heap.pop() {
        // Equal keys pop in distance order, so the first one is the minimum.
        if last_key != Some(key_of(e)) {
            emit(e);
            count += 1;
            last_key = Some(key_of(e));
        }
        let l = lists[s];
        if next[s] * 8 < l.len() {
            heap.push(Reverse((word(l, next[s]), s)));
            next[s] += 1;
        }
    }
    Ok(count)
}

/// Merges chunk artifacts (in any order) into the serialised table.
pub fn merge_artifacts(depth: u8, lists: &[&[u8]]) -> Result<Vec<u8>, SpaceError> {
    let upper: usize = lists.iter().map(|l| l.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + upper + DIGEST_LEN);
    out.extend_from_slice(&header(depth, 0));
    let count = merge_lists(depth, lists, |e| out.extend_from_slice(&e.to_le_bytes()))?;
    out[16..24].copy_from_slice(&count.to_le_bytes());
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out.shrink_to_fit();
    Ok(out)
}

fn header(depth: u8, count: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8] = depth;
    h[16..24].copy_from_slice(&count.to_le_bytes());
    h
}

/// A loaded table, ready to probe.
///
/// Lookup: the keys are mixed, so they are spread evenly, and within a bucket a key's rank is close to where its
/// value falls between the bucket's ends. The index only holds where each bucket starts (2^bits buckets of
/// about 128 entries: 1 MB at depth 7, which stays in cache) and a probe guesses the entry by interpolation, so
/// it usually costs one cache miss (the entry's line) instead of two (an index line, then the entry line).
#[derive(Debug, Clone)]
pub struct Table {
    depth: u8,
    entries: Vec<u64>,
    /// `index[b]..index[b + 1]` are the entries whose key starts with the `bits` bits `b`.
    index: Vec<u32>,
    bits: u32,
}

/// log2 of the entries a bucket holds on average.
const BUCKET_LOG: u32 = 7;

impl Table {
    /// Builds the table in this process, chunk by chunk as the cluster would (one chunk per first twist).
    pub fn build(depth: u8, ctl: &Control) -> Result<Table, SpaceError> {
        check_depth(depth)?;
        let n = (prefixes(depth).len() as u64).min(N_TWISTS as u64);
        let mut chunks = Vec::with_capacity(n as usize);
        for at in ChunkId::all(n) {
            chunks.push(entries_to_artifact(&build_chunk(depth, at, ctl)?.entries));
        }
        let lists: Vec<&[u8]> = chunks.iter().map(|c| c.as_slice()).collect();
        let mut entries = Vec::new();
        merge_lists(depth, &lists, |e| entries.push(e))?;
        Ok(Table::from_entries(depth, entries))
    }

    fn from_entries(depth: u8, entries: Vec<u64>) -> Table {
        let bits = (usize::BITS - entries.len().leading_zeros())
            .saturating_sub(BUCKET_LOG + 1)
            .min(28);
        let mut index = vec![0u32; (1usize << bits) + 1];
        for e in &entries {
            index[(key_of(*e) >> (60 - bits)) as usize + 1] += 1;
        }
        for b in 1..index.len() {
            index[b] += index[b - 1];
        }
        Table {
            depth,
            entries,
            index,
            bits,
        }
    }

    /// Loads a serialised table, checking its header, digest, order and distances.
    pub fn from_bytes(bytes: &[u8]) -> Result<Table, SpaceError> {
        let (depth, list) = validate(bytes)?;
        let entries = (0..list.len() / 8).map(|i| word(list, i)).collect();
        Ok(Table::from_entries(depth, entries))
    }

    /// The serialised table: header, little-endian entries, blake3 digest of everything before it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.entries.len() * 8 + DIGEST_LEN);
        out.extend_from_slice(&header(self.depth, self.entries.len() as u64));
        for e in &self.entries {
            out.extend_from_slice(&e.to_le_bytes());
        }
        let digest = blake3::hash(&out);
        out.extend_from_slice(digest.as_bytes());
        out
    }

    pub fn depth(&self) -> u8 {
        self.depth
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bucket range of `key` and the interpolated guess of its place in it (`lo <= guess <= hi`).
    #[inline(always)]
    fn locate(&self, key: u64) -> (usize, usize, usize) {
        let b = (key >> (60 - self.bits)) as usize;
        let (lo, hi) = (self.index[b] as usize, self.index[b + 1] as usize);
        // The key's offset inside its bucket's key range, as a fraction of 2^(60 - bits), scales the bucket size.
        let rem = key & ((1u64 << (60 - self.bits)) - 1);
        let guess = lo + ((u128::from(rem) * (hi - lo) as u128) >> (60 - self.bits)) as usize;
        (lo, guess, hi)
    }

    /// Finds `key` in `entries[lo..hi]`, starting at `guess` and walking towards it.
    #[inline(always)]
    fn find(&self, key: u64, lo: usize, guess: usize, hi: usize) -> Option<u8> {
        let e = &self.entries;
        let mut i = guess;
        if i < hi && key_of(e[i]) < key {
            while i < hi && key_of(e[i]) < key {
                i += 1;
            }
        } else {
            while i > lo && key_of(e[i - 1]) >= key {
                i -= 1;
            }
        }
        (i < hi && key_of(e[i]) == key).then(|| dist_of(e[i]))
    }

    /// The distance of `ball` from solved if it is at most the table's depth.
    #[inline]
    pub fn distance(&self, ball: Ball) -> Option<u8> {
        let key = mix(ball.0);
        let (lo, guess, hi) = self.locate(key);
        self.find(key, lo, guess, hi)
    }

    /// [`Table::distance`] of up to 16 positions at once (the plain level-scan solver's probe of the 12 children
    /// of a node, which the benchmark's before/after comparison runs).
    #[inline]
    pub fn distance_batch(&self, balls: &[Ball], out: &mut [Option<u8>]) {
        for (o, b) in out.iter_mut().zip(balls).take(16) {
            *o = self.distance(*b);
        }
    }

    /// [`Table::distance`] of many positions, software-pipelined: the guessed entry lines of a whole group are
    /// requested (prefetched) before any is read, so their cache misses are served in parallel instead of one
    /// after the other. The misses are most of the cost of the search's probes.
    pub fn distance_many(&self, balls: &[Ball], out: &mut [Option<u8>]) {
        const GROUP: usize = 16;
        let n = balls.len().min(out.len());
        let mut keys = [0u64; GROUP];
        let mut places = [(0usize, 0usize, 0usize); GROUP];
        for (bs, os) in balls[..n].chunks(GROUP).zip(out[..n].chunks_mut(GROUP)) {
            for ((k, p), b) in keys.iter_mut().zip(places.iter_mut()).zip(bs) {
                *k = mix(b.0);
                *p = self.locate(*k);
                // The guess is a few entries off on average: ask for its line and the neighbouring ones.
                let (lo, guess, hi) = *p;
                for at in [guess.saturating_sub(4).max(lo), guess, (guess + 4).min(hi)] {
                    if at < self.entries.len() {
                        prefetch(&self.entries[at]);
                    }
                }
            }
            for ((o, &(lo, guess, hi)), &key) in os.iter_mut().zip(&places).zip(&keys) {
                *o = self.find(key, lo, guess, hi);
            }
        }
    }

    /// Positions per distance 0..=depth.
    pub fn histogram(&self) -> Vec<u64> {
        histogram_of(self.depth, self.entries.iter().copied())
    }
}

/// Asks the cache for the line holding `x` without waiting for it (a hint: never faults, changes no state).
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch only hints the cache: it reads nothing the
        // program sees and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

fn histogram_of(depth: u8, entries: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut h = vec![0u64; depth as usize + 1];
    for e in entries {
        if let Some(slot) = h.get_mut(dist_of(e) as usize) {
            *slot += 1;
        }
    }
    h
}

/// Checks serialised table bytes (header, digest, order, distances) and returns the depth and the entry bytes.
fn validate(bytes: &[u8]) -> Result<(u8, &[u8]), SpaceError> {
    let bad = |why: String| SpaceError::Verification(format!("brainball table: {why}"));
    if bytes.len() < HEADER_LEN + DIGEST_LEN || &bytes[..8] != MAGIC {
        return Err(bad("not a brainball table (bad magic or too short)".into()));
    }
    let depth = bytes[8];
    check_depth(depth)?;
    let mut c = [0u8; 8];
    c.copy_from_slice(&bytes[16..24]);
    let count = u64::from_le_bytes(c);
    let body = bytes.len() - HEADER_LEN - DIGEST_LEN;
    if count.checked_mul(8) != Some(body as u64) {
        return Err(bad(format!(
            "header says {count} entries, the body holds {body} bytes"
        )));
    }
    if count > u64::from(u32::MAX) {
        return Err(bad(format!(
            "{count} entries exceed the index's 32-bit offsets"
        )));
    }
    let (data, digest) = bytes.split_at(bytes.len() - DIGEST_LEN);
    if blake3::hash(data).as_bytes() != digest {
        return Err(bad("digest mismatch: the table is corrupt".into()));
    }
    let list = &data[HEADER_LEN..];
    check_artifact(depth, list)?;
    Ok((depth, list))
}

/// Depth and positions per distance of serialised table bytes, fully validated, without building an index.
pub fn summarize(bytes: &[u8]) -> Result<(u8, Vec<u64>), SpaceError> {
    let (depth, list) = validate(bytes)?;
    Ok((
        depth,
        histogram_of(depth, (0..list.len() / 8).map(|i| word(list, i))),
    ))
}

pub fn check_depth(depth: u8) -> Result<(), SpaceError> {
    if depth > MAX_DEPTH {
        return Err(SpaceError::invalid_param(
            "depth",
            format!(
                "{depth} is beyond the deepest supported table ({MAX_DEPTH}): a depth-{depth} table would hold \
                 about {:.1e} positions ({:.0} GB at 8 bytes each, more while merging), beyond the memory of \
                 the machines sweep runs on",
                estimated_positions(depth),
                estimated_positions(depth) * 8.0 / 1e9
            ),
        ));
    }
    Ok(())
}

/// Positions within `depth` twists, for sizing: exact counts up to 7, then about 10.3 times more per level.
pub fn estimated_positions(depth: u8) -> f64 {
    const EXACT: [u64; 8] = [1, 14, 157, 1_704, 18_344, 195_131, 2_045_512, 21_102_966];
    match EXACT.get(depth as usize) {
        Some(&n) => n as f64,
        None => 21_102_966.0 * 10.3f64.powi(i32::from(depth) - 7),
    }
}
