//! Segmented breadth-first search: the level-by-level algorithm of `docs/brainball-census.md`, on the reduced
//! ring of the pattern database (where tiles 1..k are, and which colour they show; the other tiles are blank).
//!
//! Why segments: the twists act on slots as fixed signed permutations, so the (slot, colour) of tiles 1..s after
//! a twist depend only on what they were before. Cutting the states by those first s tiles (a "segment") makes
//! every twist map a whole segment onto one segment. Level d + 1 of a target segment T is then computed from the
//! level-d frontiers of exactly 13 source segments (t(T) for each twist t, as twists are involutions) and T's own
//! visited set: one task per segment, no shuffling of single positions between machines. On the full puzzle the
//! same cut (tiles 1..3) gives 10,560 segments of 185.8 M positions, 23 MB a bitmap.
//!
//! Storage: bitmaps live behind [`SegmentStore`] (an in-memory twin here; the cluster's would be an object store,
//! see the design document). Every bitmap is written once under a key that names its level, never updated in
//! place: level d + 1 reads `visited@d` and writes `visited@d+1`, so a task that crashed half way, or ran twice,
//! leaves nothing that a rerun does not overwrite with the same bytes. A missing key is an empty bitmap.

use crate::ball::{N_TWISTS, SLOTS};
use sweep_space::{Control, SpaceError};

/// Which bitmap of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// States first reached at this level.
    Frontier,
    /// States reached at this level or before.
    Visited,
}

/// The name of one stored bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegKey {
    pub level: u8,
    pub kind: Kind,
    pub segment: u32,
}

/// Where the bitmaps live. Written keys are immutable: a second put of a key carries the same bytes.
pub trait SegmentStore {
    fn get(&self, key: SegKey) -> Result<Option<Vec<u64>>, SpaceError>;
    fn put(&mut self, key: SegKey, bits: Vec<u64>) -> Result<(), SpaceError>;
}

/// The in-memory twin of the cluster's store, for tests and small instances.
#[derive(Debug, Default)]
pub struct MemStore {
    pub map: std::collections::BTreeMap<SegKey, Vec<u64>>,
}

impl SegmentStore for MemStore {
    fn get(&self, key: SegKey) -> Result<Option<Vec<u64>>, SpaceError> {
        Ok(self.map.get(&key).cloned())
    }

    fn put(&mut self, key: SegKey, bits: Vec<u64>) -> Result<(), SpaceError> {
        if let Some(old) = self.map.get(&key) {
            if *old != bits {
                return Err(SpaceError::Verification(format!(
                    "{key:?} rewritten with other bytes: a task is not deterministic"
                )));
            }
        }
        self.map.insert(key, bits);
        Ok(())
    }
}

/// The reduced ring: states are the (slot, colour) of tiles 1..k, cut into segments by tiles 1..s.
#[derive(Clone, Debug)]
pub struct Layout {
    pub k: usize,
    pub s: usize,
    /// Where the tile in slot x goes under twist t, and whether it turns over.
    dest: [[u8; SLOTS]; N_TWISTS],
    turn: [[u8; SLOTS]; N_TWISTS],
    /// The placement digits of tiles s..k for each placement part of an offset, 4 bits a digit (tile s lowest):
    /// the inner loop of [`expand`] reads them instead of dividing.
    tail_digits: Vec<u32>,
}

/// `SELECT_FREE[used][n]`: the n-th slot (from 0) not in the 12-bit mask `used` (12 when there is none), so that
/// spelling out a placement digit is one load instead of a scan.
static SELECT_FREE: [[u8; SLOTS]; 1 << SLOTS] = {
    let mut t = [[SLOTS as u8; SLOTS]; 1 << SLOTS];
    let mut used = 0;
    while used < 1 << SLOTS {
        let mut n = 0;
        let mut x = 0;
        while x < SLOTS {
            if used >> x & 1 == 0 {
                t[used][n] = x as u8;
                n += 1;
            }
            x += 1;
        }
        used += 1;
    }
    t
};

/// A state spelled out: slot and colour of tiles 1..k.
type Spelled = ([u8; SLOTS], [u8; SLOTS]);

impl Layout {
    pub fn new(k: usize, s: usize) -> Result<Layout, SpaceError> {
        // s = 0 is one segment of every state: what a database of one tile is cut into.
        if !(1..=8).contains(&k) || s >= k {
            return Err(SpaceError::invalid_param(
                "tiles",
                format!("{k} tiles cut by {s}: need 0 <= s < k <= 8"),
            ));
        }
        let (dest, turn) = crate::pdb::slot_moves();
        // Offsets' placement parts in mixed radix, tile s most significant (as `encode` writes them).
        let tail = placements(s, k) as usize;
        let mut tail_digits = Vec::with_capacity(tail);
        for mut r in 0..tail {
            let mut packed = 0u32;
            for n in (s..k).rev() {
                packed |= ((r % (SLOTS - n)) as u32) << (4 * (n - s));
                r /= SLOTS - n;
            }
            tail_digits.push(packed);
        }
        Ok(Layout {
            k,
            s,
            dest,
            turn,
            tail_digits,
        })
    }

    pub fn segments(&self) -> u32 {
        placements(0, self.s) << self.s
    }

    /// States per segment.
    pub fn segment_len(&self) -> usize {
        (placements(self.s, self.k) as usize) << (self.k - self.s)
    }

    /// (segment, offset) of a spelled-out state.
    pub fn encode(&self, st: &Spelled) -> (u32, usize) {
        let (slots, cols) = st;
        let mut used = 0u32;
        let mut seg = 0u32;
        let mut off = 0usize;
        for (n, &x) in slots[..self.k].iter().enumerate() {
            let x = u32::from(x);
            let digit = x - (used & ((1 << x) - 1)).count_ones();
            if n < self.s {
                seg = seg * (SLOTS - n) as u32 + digit;
            } else {
                off = off * (SLOTS - n) + digit as usize;
            }
            used |= 1 << x;
        }
        for (n, &c) in cols[..self.k].iter().enumerate() {
            if n < self.s {
                seg = seg << 1 | u32::from(c);
            } else {
                off = off << 1 | usize::from(c);
            }
        }
        (seg, off)
    }

    pub fn decode(&self, seg: u32, off: usize) -> Spelled {
        let mut digits = [0usize; SLOTS];
        let mut cols = [0u8; SLOTS];
        let (mut seg, mut off) = (seg as usize, off);
        for n in (self.s..self.k).rev() {
            cols[n] = (off & 1) as u8;
            off >>= 1;
        }
        for n in (0..self.s).rev() {
            cols[n] = (seg & 1) as u8;
            seg >>= 1;
        }
        for n in (self.s..self.k).rev() {
            digits[n] = off % (SLOTS - n);
            off /= SLOTS - n;
        }
        for n in (0..self.s).rev() {
            digits[n] = seg % (SLOTS - n);
            seg /= SLOTS - n;
        }
        let mut slots = [0u8; SLOTS];
        crate::pdb::place_digits(&digits[..self.k], &mut slots);
        (slots, cols)
    }

    pub fn twist(&self, t: usize, st: &Spelled) -> Spelled {
        let mut out = ([0u8; SLOTS], [0u8; SLOTS]);
        for n in 0..self.k {
            let x = st.0[n] as usize;
            out.0[n] = self.dest[t][x];
            out.1[n] = st.1[n] ^ self.turn[t][x];
        }
        out
    }

    /// The offset in the target segment of state `off` of a source segment under twist `t`, where `src_used` and
    /// `dst_used` are the slots of tiles 0..s in the source and the target: [`Layout::encode`] of
    /// [`Layout::twist`] of [`Layout::decode`] for the tail tiles only, by table loads and no division (the
    /// inner loop of the breadth-first search). An offset past the segment gives a value past it too.
    #[inline]
    fn twist_tail(
        &self,
        t: usize,
        off: usize,
        mut src_used: u32,
        mut dst_used: u32,
        tail_tiles: usize,
        colour_mask: usize,
    ) -> usize {
        let Some(&packed) = self.tail_digits.get(off >> tail_tiles) else {
            return usize::MAX;
        };
        let colours = off & colour_mask;
        let (mut to, mut to_colours) = (0usize, 0usize);
        for i in 0..tail_tiles {
            let digit = (packed >> (4 * i) & 15) as usize;
            let x =
                SELECT_FREE[src_used as usize & ((1 << SLOTS) - 1)][digit.min(SLOTS - 1)] as usize;
            if x >= SLOTS {
                return usize::MAX;
            }
            src_used |= 1 << x;
            let y = u32::from(self.dest[t][x]);
            let below = (dst_used & ((1 << y) - 1)).count_ones();
            dst_used |= 1 << y;
            to = to * (SLOTS - self.s - i) + (y - below) as usize;
            // Colour bits: tile s is the most significant of the tail's.
            let c = (colours >> (tail_tiles - 1 - i) & 1) as u8 ^ self.turn[t][x];
            to_colours = to_colours << 1 | usize::from(c);
        }
        to << tail_tiles | to_colours
    }

    /// The segment every state of `seg` lands in under twist `t` (any state of it shows where).
    pub fn segment_after(&self, t: usize, seg: u32) -> u32 {
        self.encode(&self.twist(t, &self.decode(seg, 0))).0
    }

    /// Solved: tile n + 1 in slot n, every tile white.
    pub fn solved(&self) -> (u32, usize) {
        let mut slots = [0u8; SLOTS];
        for (n, x) in slots.iter_mut().enumerate() {
            *x = n as u8;
        }
        self.encode(&(slots, [0u8; SLOTS]))
    }

    /// 64-bit words of one segment's bitmap.
    pub fn words(&self) -> usize {
        self.segment_len().div_ceil(64)
    }
}

/// 12 * 11 * ... placements of tiles `from..to` once tiles `0..from` are placed.
fn placements(from: usize, to: usize) -> u32 {
    (from..to).map(|n| (SLOTS - n) as u32).product()
}

/// Level 0: solved alone.
pub fn start(layout: &Layout, store: &mut dyn SegmentStore) -> Result<(), SpaceError> {
    let (seg, off) = layout.solved();
    let mut bits = vec![0u64; layout.words()];
    bits[off / 64] |= 1 << (off % 64);
    for kind in [Kind::Frontier, Kind::Visited] {
        store.put(
            SegKey {
                level: 0,
                kind,
                segment: seg,
            },
            bits.clone(),
        )?;
    }
    Ok(())
}

/// Computes level `level + 1` of the target segments `targets` from level `level`; returns the states first
/// reached at `level + 1` in them. A cluster chunk is one such range.
pub fn expand(
    layout: &Layout,
    store: &mut dyn SegmentStore,
    level: u8,
    targets: std::ops::Range<u32>,
    ctl: &Control,
) -> Result<u64, SpaceError> {
    let words = layout.words();
    let mut found = 0u64;
    for target in targets {
        let key = |level, kind| SegKey {
            level,
            kind,
            segment: target,
        };
        let mut visited = store
            .get(key(level, Kind::Visited))?
            .unwrap_or_else(|| vec![0; words]);
        let mut next = vec![0u64; words];
        let mut new_here = 0u64;
        for t in 0..N_TWISTS {
            let source = layout.segment_after(t, target);
            let Some(front) = store.get(SegKey {
                level,
                kind: Kind::Frontier,
                segment: source,
            })?
            else {
                continue;
            };
            // Tiles 0..s are the same in every state of the source (that is what a segment is), and so are their
            // images: spelled out once per source. Checked once here instead of per state.
            let head = layout.decode(source, 0);
            if layout.encode(&layout.twist(t, &head)).0 != target {
                return Err(SpaceError::Verification(format!(
                    "twist {t} took segment {source} elsewhere than {target}"
                )));
            }
            let (mut src_used, mut dst_used) = (0u32, 0u32);
            for n in 0..layout.s {
                let x = head.0[n] as usize;
                src_used |= 1 << x;
                dst_used |= 1 << layout.dest[t][x];
            }
            let (tail_tiles, seg_len) = (layout.k - layout.s, layout.segment_len());
            let colour_mask = (1usize << tail_tiles) - 1;
            for (w, &word) in front.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let off = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let to = layout.twist_tail(t, off, src_used, dst_used, tail_tiles, colour_mask);
                    if to >= seg_len {
                        return Err(SpaceError::Verification(format!(
                            "state {off} of segment {source} has no image under twist {t}"
                        )));
                    }
                    if visited[to / 64] >> (to % 64) & 1 == 0 {
                        visited[to / 64] |= 1 << (to % 64);
                        next[to / 64] |= 1 << (to % 64);
                        new_here += 1;
                    }
                }
            }
        }
        ctl.checkpoint(new_here)?;
        found += new_here;
        if new_here > 0 {
            store.put(key(level + 1, Kind::Frontier), next)?;
        }
        if visited.iter().any(|&w| w != 0) {
            store.put(key(level + 1, Kind::Visited), visited)?;
        }
    }
    Ok(found)
}
