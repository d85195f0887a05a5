//! The pattern database as cluster jobs: built once in chunks, stored, and shared by every `deep` and `census`
//! job, the way the depth-d table is.
//!
//! Why: a process that builds the 6-tile database itself ([`Pdb::for_tiles`]) spends about 18 s of one core before
//! its first bound, so a deep search built that way takes 22.4 s on one thread and 20.2 s on two: the build
//! dominates and does not split. As an input job, the cluster builds it once, the coordinator stores it, each worker
//! fetches it once (its artifact cache is keyed by digest), and [`Pdb::shared`] parses it once per process.
//!
//! Built breadth first, one job per level, on the segments of [`segbfs`] (states cut by where tiles 1..s are; every
//! twist maps a whole segment onto one segment, so a target segment's next level needs 12 source segments only):
//! - `pattern --level L` (1 <= L <= [`LEVELS`]`[k]`): V@L, the patterns within L twists of solved, one bitmap per
//!   segment. It reads V@(L-1) and V@(L-2): the frontier is their difference (V@0, solved alone, and the empty
//!   V@-1 are known without a job). A chunk is a range of target segments ([`segbfs::expand`]) and reports their
//!   bitmaps; the merge concatenates them in chunk order. 5.3 MB a level for 6 tiles.
//! - `pattern` (no level): the database. It reads V@1..V@M (M = [`LEVELS`]`[k]`, the largest pattern distance)
//!   and refuses levels that do not hold every pattern. A chunk is a range of patterns in [`pdb::rank`] order
//!   and reports each one's distance (the first level whose bitmap holds it); the merge writes [`Pdb::to_bytes`]'s
//!   layout, which [`Pdb::from_bytes`] checks again when a job binds it.
//!
//! The chain is fixed by the parameters alone, as job inputs must be, so M per tile count is a constant here,
//! pinned by a test against the in-memory build.
//!
//! Level artifact layout: magic `SWBBPLV1`, tiles, segment cut, level, 5 reserved bytes, the count of patterns
//! held (u64 LE), the bitmaps (u64 LE words, segment after segment), and a blake3 digest of everything before it.

use std::collections::BTreeMap;

use super::pdb::{self, patterns, Pdb, MAX_TILES};
use super::segbfs::{expand, Kind, Layout, SegKey, SegmentStore};
use sweep_space::{ChunkId, ChunkOutput, Control, Meter, SpaceError};

/// The largest pattern distance of tiles 1..k (index k): the last level job of the chain. Pinned by
/// `the_level_count_of_every_pattern_size_is_the_in_memory_maximum`.
pub const LEVELS: [u8; MAX_TILES + 1] = [0, 3, 6, 7, 8, 10, 12];

/// Chunks a level or database job is split into unless asked: a few per worker of a small cluster, each still
/// seconds of work for 6 tiles (more chunks cost the coordinator a lease and a report each).
pub const DEFAULT_CHUNKS: u64 = 32;
/// Most chunks of the database job (its chunks are ranges of patterns, so any count would split).
pub(crate) const MAX_DB_CHUNKS: u64 = 4096;

const MAGIC: &[u8; 8] = b"SWBBPLV1";
/// Magic, tiles, cut, level, 5 reserved bytes, count.
const HEADER_LEN: usize = 8 + 8 + 8;
const DIGEST_LEN: usize = 32;

/// Tiles 1..s cut the states of `k` tiles into segments: 2 gives 528 segments of 80,640 states for 6 tiles
/// (10 KB bitmaps, enough segments to spread over any cluster); fewer tiles take a smaller cut.
pub fn layout(k: usize) -> Result<Layout, SpaceError> {
    pdb::check_tiles(k)?;
    Layout::new(k, (k - 1).min(2))
}

pub(crate) fn bad(why: String) -> SpaceError {
    SpaceError::Verification(format!("pattern level: {why}"))
}

/// V@level: the patterns within `level` twists of solved, one bitmap per segment of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visited {
    level: u8,
    /// Words per segment.
    words: usize,
    bits: Vec<u64>,
}

impl Visited {
    /// V@0: solved alone.
    pub fn solved(layout: &Layout) -> Visited {
        let words = layout.words();
        let mut bits = vec![0u64; layout.segments() as usize * words];
        let (seg, off) = layout.solved();
        bits[seg as usize * words + off / 64] |= 1 << (off % 64);
        Visited {
            level: 0,
            words,
            bits,
        }
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    /// Patterns held.
    pub fn count(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    fn segment(&self, seg: u32) -> Option<&[u64]> {
        let at = seg as usize * self.words;
        self.bits.get(at..at + self.words)
    }

    #[inline]
    fn holds(&self, seg: u32, off: usize) -> bool {
        let w = seg as usize * self.words + off / 64;
        self.bits.get(w).is_some_and(|w| w >> (off % 64) & 1 == 1)
    }

    /// Loads the merged artifact of the level-`level` job, checking everything the layout fixes: header,
    /// size, digest, the count, and no bit past a segment's states.
    pub fn from_bytes(layout: &Layout, level: u8, bytes: &[u8]) -> Result<Visited, SpaceError> {
        if bytes.len() < HEADER_LEN + DIGEST_LEN || &bytes[..8] != MAGIC {
            return Err(bad(
                "not a brainball pattern level (bad magic or too short)".into(),
            ));
        }
        if (bytes[8] as usize, bytes[9] as usize, bytes[10]) != (layout.k, layout.s, level) {
            return Err(bad(format!(
                "the artifact holds level {} of {} tiles cut by {}, this job needs level {level} of {} cut by {}",
                bytes[10], bytes[8], bytes[9], layout.k, layout.s
            )));
        }
        let words = layout.words();
        let body = bytes.len() - HEADER_LEN - DIGEST_LEN;
        if body != layout.segments() as usize * words * 8 {
            return Err(bad(format!(
                "{body} bytes of bitmaps, the layout has {}",
                layout.segments() as usize * words * 8
            )));
        }
        let (data, digest) = bytes.split_at(bytes.len() - DIGEST_LEN);
        if blake3::hash(data).as_bytes() != digest {
            return Err(bad("digest mismatch: the level is corrupt".into()));
        }
        let bits = words_of(&data[HEADER_LEN..]);
        check_bitmaps(layout, &bits)?;
        let v = Visited { level, words, bits };
        let mut c = [0u8; 8];
        c.copy_from_slice(&bytes[16..24]);
        if u64::from_le_bytes(c) != v.count() {
            return Err(bad(format!(
                "header counts {} patterns, the bitmaps hold {}",
                u64::from_le_bytes(c),
                v.count()
            )));
        }
        Ok(v)
    }
}

/// Little-endian words of `bytes` (a multiple of 8 long).
fn words_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

/// No bit past the states of a segment (the tail of its last word): such a bit names no pattern.
fn check_bitmaps(layout: &Layout, bits: &[u64]) -> Result<(), SpaceError> {
    let (words, len) = (layout.words(), layout.segment_len());
    let tail = len % 64;
    if tail == 0 {
        return Ok(());
    }
    let mask = !0u64 << tail;
    if let Some(seg) = bits
        .chunks(words)
        .position(|s| s.last().is_some_and(|w| w & mask != 0))
    {
        return Err(bad(format!("segment {seg} has bits past its {len} states")));
    }
    Ok(())
}

/// The two levels a level job reads, served to [`segbfs::expand`]: Visited@(L-1) as stored, Frontier@(L-1) as
/// V@(L-1) minus V@(L-2). What it writes of V@L is kept for the chunk's artifact.
struct Pair<'a> {
    visited: &'a Visited,
    before: Option<&'a Visited>,
    out: BTreeMap<u32, Vec<u64>>,
}

impl SegmentStore for Pair<'_> {
    fn get(&self, key: SegKey) -> Result<Option<Vec<u64>>, SpaceError> {
        if key.level != self.visited.level {
            return Err(bad(format!(
                "level {} asked of a job holding level {}",
                key.level, self.visited.level
            )));
        }
        let v = self
            .visited
            .segment(key.segment)
            .ok_or_else(|| bad(format!("no segment {}", key.segment)))?;
        Ok(match (key.kind, self.before) {
            (Kind::Visited, _) | (Kind::Frontier, None) => Some(v.to_vec()),
            (Kind::Frontier, Some(b)) => {
                let b = b
                    .segment(key.segment)
                    .ok_or_else(|| bad(format!("no segment {}", key.segment)))?;
                let f: Vec<u64> = v.iter().zip(b).map(|(v, b)| v & !b).collect();
                // An empty frontier is no source: expand skips it without a scan.
                f.iter().any(|&w| w != 0).then_some(f)
            }
        })
    }

    fn put(&mut self, key: SegKey, bits: Vec<u64>) -> Result<(), SpaceError> {
        if key.kind == Kind::Visited {
            self.out.insert(key.segment, bits);
        }
        Ok(())
    }
}

/// Chunk `chunk` of `n_chunks` of the level after `visited` (V@(L-1); `before` is V@(L-2), none for L = 1):
/// V@L of its range of target segments as the artifact, and the patterns first reached at L as `found`.
pub fn level_chunk(
    layout: &Layout,
    visited: &Visited,
    before: Option<&Visited>,
    at: ChunkId,
    ctl: &Control,
) -> Result<ChunkOutput, SpaceError> {
    let segments = layout.segments();
    let (lo, hi) = at.range(u128::from(segments), u64::from(segments))?;
    let mut store = Pair {
        visited,
        before,
        out: BTreeMap::new(),
    };
    let found = expand(layout, &mut store, visited.level, lo as u32..hi as u32, ctl)?;
    let words = layout.words();
    let mut out = ChunkOutput {
        nodes: found,
        ..Default::default()
    };
    out.artifact = Vec::with_capacity((hi - lo) as usize * words * 8);
    let zeros = vec![0u64; words];
    for seg in lo as u32..hi as u32 {
        // A segment nothing reached yet is not written by expand: its bitmap is empty.
        for w in store.out.get(&seg).unwrap_or(&zeros) {
            out.artifact.extend_from_slice(&w.to_le_bytes());
        }
    }
    out.count("found", u128::from(found));
    Ok(out)
}

/// The shape of a level chunk's output: its segments' bitmaps, no bit past a segment, and a `found` count no
/// larger than what the bitmaps hold (the bits themselves need the inputs to check; a replicated job compares
/// them across workers).
pub fn check_level_chunk(
    layout: &Layout,
    at: ChunkId,
    out: &ChunkOutput,
) -> Result<(), SpaceError> {
    let (lo, hi) = at.split(u128::from(layout.segments()));
    let want = (hi - lo) as usize * layout.words() * 8;
    if out.artifact.len() != want {
        return Err(bad(format!(
            "a chunk of {} segments reported {} bytes, not {want}",
            hi - lo,
            out.artifact.len()
        )));
    }
    let bits = words_of(&out.artifact);
    check_bitmaps(layout, &bits)?;
    let held: u128 = bits.iter().map(|w| u128::from(w.count_ones())).sum();
    let found = out.counters.get("found").copied();
    if out.counters.len() != 1 || found.is_none_or(|f| f > held) || !out.solutions.is_empty() {
        return Err(bad(format!(
            "counters {:?} and {} solutions do not fit a chunk holding {held} patterns",
            out.counters,
            out.solutions.len()
        )));
    }
    Ok(())
}

/// The level's artifact from its chunks' bitmaps, in chunk order (layout in the module doc).
pub fn merge_level(
    layout: &Layout,
    level: u8,
    artifacts: &mut dyn Iterator<Item = &[u8]>,
) -> Result<Vec<u8>, SpaceError> {
    let size = layout.segments() as usize * layout.words() * 8;
    let mut out = Vec::with_capacity(HEADER_LEN + size + DIGEST_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[layout.k as u8, layout.s as u8, level, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&[0u8; 8]);
    for a in artifacts {
        out.extend_from_slice(a);
    }
    if out.len() != HEADER_LEN + size || !(out.len() - HEADER_LEN).is_multiple_of(8) {
        return Err(bad(format!(
            "the chunks hold {} bytes of bitmaps, the layout {size}",
            out.len() - HEADER_LEN
        )));
    }
    let count: u64 = words_of(&out[HEADER_LEN..])
        .iter()
        .map(|w| u64::from(w.count_ones()))
        .sum();
    out[16..24].copy_from_slice(&count.to_le_bytes());
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    Ok(out)
}

/// Chunk `chunk` of `n_chunks` of the database: the distance of each pattern of its range ([`pdb::rank`]
/// order), read from `levels` = V@0..=V@M, the last holding every pattern.
pub fn database_chunk(
    layout: &Layout,
    levels: &[Visited],
    at: ChunkId,
    ctl: &Control,
) -> Result<ChunkOutput, SpaceError> {
    let k = layout.k;
    let (lo, hi) = at.split(patterns(k) as u128);
    let (lo, hi) = (lo as usize, hi as usize);
    let mut dist = Vec::with_capacity(hi - lo);
    let mut meter = Meter::new(ctl);
    // Rank order and the layout differ only in where the colour bits go: a placement rank is the segment's
    // placement digits then the offset's (the same mixed radix), and colour bit n is tile n's in a rank but
    // tile 0 comes first (most significant) in a segment's and tile s first in an offset's. So the (segment,
    // offset) of a rank is arithmetic, with the bit reversals tabulated per colouring.
    let (s, tail) = (layout.s, k - layout.s);
    let reversed = |v: usize, bits: usize| (0..bits).fold(0, |r, b| r << 1 | (v >> b & 1));
    let seg_colours: Vec<usize> = (0..1usize << k)
        .map(|c| reversed(c & ((1 << s) - 1), s))
        .collect();
    let off_colours: Vec<usize> = (0..1usize << k).map(|c| reversed(c >> s, tail)).collect();
    let tail_placements = layout.segment_len() >> tail;
    for i in lo..hi {
        let (c, r) = (i & ((1 << k) - 1), i >> k);
        let seg = ((r / tail_placements) << s | seg_colours[c]) as u32;
        let off = (r % tail_placements) << tail | off_colours[c];
        // The levels grow, so the first one holding the pattern is found by bisection.
        let d = levels.partition_point(|v| !v.holds(seg, off));
        if d == levels.len() {
            return Err(bad(format!(
                "pattern {i} is in none of the {} levels",
                levels.len()
            )));
        }
        dist.push(d as u8);
        meter.tick()?;
    }
    Ok(ChunkOutput {
        nodes: meter.finish(),
        artifact: dist,
        ..Default::default()
    })
}

/// The shape of a database chunk: one distance per pattern of its range, none beyond the last level.
pub fn check_database_chunk(k: usize, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
    let (lo, hi) = at.split(patterns(k) as u128);
    if out.artifact.len() as u128 != hi - lo {
        return Err(bad(format!(
            "{} distances for the {} patterns of the chunk",
            out.artifact.len(),
            hi - lo
        )));
    }
    if let Some(d) = out.artifact.iter().find(|&&d| d > LEVELS[k]) {
        return Err(bad(format!(
            "a distance of {d}, beyond the largest of {k} tiles ({})",
            LEVELS[k]
        )));
    }
    if !out.counters.is_empty() || !out.solutions.is_empty() {
        return Err(bad("a database chunk reports only its distances".into()));
    }
    Ok(())
}

/// The database's artifact ([`Pdb::to_bytes`]) from its chunks' distances, in chunk order.
pub fn merge_database(
    k: usize,
    artifacts: &mut dyn Iterator<Item = &[u8]>,
) -> Result<Vec<u8>, SpaceError> {
    let mut dist = Vec::with_capacity(patterns(k));
    for a in artifacts {
        dist.extend_from_slice(a);
    }
    Ok(Pdb::from_distances(k, dist)?.to_bytes())
}

/// The whole chain in this process, `n_chunks` chunks a job, as a cluster would run it (tests compare it with
/// [`Pdb::build`]).
pub fn build_in_chunks(k: usize, n_chunks: u64, ctl: &Control) -> Result<Pdb, SpaceError> {
    let layout = layout(k)?;
    let n = n_chunks.clamp(1, u64::from(layout.segments()));
    let mut levels = vec![Visited::solved(&layout)];
    for level in 1..=LEVELS[k] {
        let (visited, before) = match levels.as_slice() {
            [.., b, v] => (v, Some(b)),
            [v] => (v, None),
            [] => return Err(bad("no level to start from".into())),
        };
        let outs = ChunkId::all(n)
            .map(|at| level_chunk(&layout, visited, before, at, ctl))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = merge_level(
            &layout,
            level,
            &mut outs.iter().map(|o| o.artifact.as_slice()),
        )?;
        levels.push(Visited::from_bytes(&layout, level, &bytes)?);
    }
    let outs = ChunkId::all(n_chunks.max(1))
        .map(|at| database_chunk(&layout, &levels, at, ctl))
        .collect::<Result<Vec<_>, _>>()?;
    Pdb::from_bytes(&merge_database(
        k,
        &mut outs.iter().map(|o| o.artifact.as_slice()),
    )?)
}
