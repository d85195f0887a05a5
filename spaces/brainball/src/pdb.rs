//! A pattern database: the exact distance of where `k` tiles are (and which colour they show), read through the
//! puzzle's 26 symmetric views of a position. It is the lower bound that lets the search go past twice the table
//! depth: outside the table, the table alone only says "more than d".
//!
//! Pattern: the slots and colours of tiles 1..k in the canonical frame. The twists act on slots as fixed signed
//! permutations, so the pattern of a position after a twist is a function of its pattern: the patterns form a
//! quotient of the puzzle, and a pattern's distance (breadth first over the 12!/(12-k)! * 2^k patterns) never
//! exceeds the distance of any position that has it.
//!
//! Views: two transformations keep every distance and change the pattern, so each gives another admissible bound,
//! and the maximum of them is one too.
//! - Renaming tiles around the ring (t -> t + c mod 13): the twists act on ring places, not on tile names, and the
//!   renamed solved ring is the solved ring turned. So the pattern of tiles z+1..z+k read from tile z (as if z were
//!   13) is a bound, for each of the 13 tiles z.
//! - The inverse: a position is a signed slot permutation P (applied to solved), its distance is the length of
//!   the shortest word of twists for P, and each twist is an involution, so P^-1 has the reversed word.
//!
//! Size: k = 6 gives 42,577,920 patterns (one byte each), built in about 18 s; k = 7 would be 511 M.
//!
//! Two origins, one database: [`Pdb::for_tiles`] builds it in this process (the library's [`crate::solve`]
//! and the `solve` mode, which rarely need it), and the `pattern` jobs ([`crate::pattern`]) build it
//! once in chunks on a cluster, whose stored artifact [`Pdb::shared`] loads once per process for every `deep`
//! and `census` job. Serialised (see [`Pdb::to_bytes`]): magic `SWBBPDB1`, tiles, largest distance, 6 reserved
//! bytes, the pattern count (u64 LE), one distance byte per pattern in [`rank`] order, and a blake3 digest of
//! everything before it.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::ball::{Ball, N_TWISTS, SLOTS, TILES, TWISTS};
use sweep_space::SpaceError;

/// Identifies a serialised database and its version.
const MAGIC: &[u8; 8] = b"SWBBPDB1";
/// Magic, tiles, largest distance, 6 reserved bytes, pattern count.
const HEADER_LEN: usize = 8 + 8 + 8;
const DIGEST_LEN: usize = 32;

/// Tiles per pattern in the solver's database.
pub const SOLVER_TILES: usize = 6;
/// Largest database offered: 7 tiles would be 511 M patterns, minutes to build in every worker.
pub const MAX_TILES: usize = 6;

/// Refuses a pattern size the solver does not build.
pub fn check_tiles(k: usize) -> Result<(), SpaceError> {
    if !(1..=MAX_TILES).contains(&k) {
        return Err(SpaceError::invalid_param(
            "pattern-tiles",
            format!("{k} tiles: the pattern database holds 1..={MAX_TILES}"),
        ));
    }
    Ok(())
}

/// Symmetric views a bound is read through: 13 reference tiles, of the position and of its inverse.
pub const VIEWS: usize = 2 * TILES;

/// Distances of every pattern of tiles 1..k.
#[derive(Debug)]
pub struct Pdb {
    k: usize,
    dist: Vec<u8>,
    /// Largest distance of a pattern: no bound read from this database is larger.
    max: u8,
}

/// Where each tile of a position is: `pos[t]` the ring place (0..13, tile 13 at 12) of tile t + 1 and `col[t]`
/// whether it shows the other colour. The form every view is read from.
#[derive(Clone, Copy, Debug)]
pub struct Places {
    pos: [u8; TILES],
    col: [u8; TILES],
}

impl Places {
    /// The places of the tiles of `ball`.
    #[inline]
    pub fn of(ball: Ball) -> Places {
        let mut pos = [SLOTS as u8; TILES];
        let mut col = [0u8; TILES];
        for s in 0..SLOTS {
            let v = (ball.0 >> (5 * (SLOTS - 1 - s))) & 31;
            pos[(v >> 1) as usize] = s as u8;
            col[(v >> 1) as usize] = (v & 1) as u8;
        }
        Places { pos, col }
    }

    /// The places of the inverse signed permutation: slot s of `ball` holds tile t, so slot t of the inverse holds
    /// tile s (same colour bit).
    #[inline]
    pub fn of_inverse(ball: Ball) -> Places {
        let mut pos = [SLOTS as u8; TILES];
        let mut col = [0u8; TILES];
        for s in 0..SLOTS {
            let v = (ball.0 >> (5 * (SLOTS - 1 - s))) & 31;
            pos[s] = (v >> 1) as u8;
            col[s] = (v & 1) as u8;
        }
        Places { pos, col }
    }
}

/// `(a) mod 13` for the small sums below, without a division.
const MOD13: [u8; 3 * TILES] = {
    let mut m = [0u8; 3 * TILES];
    let mut i = 0;
    while i < 3 * TILES {
        m[i] = (i % TILES) as u8;
        i += 1;
    }
    m
};

impl Pdb {
    /// The database of tiles 1..k, built once per process on first use (k = 6: about 20 s and 43 MB).
    pub fn for_tiles(k: usize) -> Result<&'static Pdb, SpaceError> {
        static P: [OnceLock<Pdb>; MAX_TILES + 1] = [const { OnceLock::new() }; MAX_TILES + 1];
        check_tiles(k)?;
        Ok(P[k].get_or_init(|| Pdb::build(k)))
    }

    /// A database from its distances (in [`rank`] order), checked: one per pattern of `k` tiles, every one
    /// reached (no `u8::MAX`), solved at 0.
    pub fn from_distances(k: usize, dist: Vec<u8>) -> Result<Pdb, SpaceError> {
        let bad = |why: String| SpaceError::Verification(format!("pattern database: {why}"));
        check_tiles(k)?;
        if dist.len() != patterns(k) {
            return Err(bad(format!(
                "{} distances for the {} patterns of {k} tiles",
                dist.len(),
                patterns(k)
            )));
        }
        // Far above any real distance (6 tiles: 14) and below the u8::MAX that marks an unreached pattern.
        const LIMIT: u8 = 60;
        let max = dist.iter().copied().max().unwrap_or(0);
        if max > LIMIT {
            return Err(bad(format!(
                "a distance of {max}: a pattern was never reached, or the bytes are not distances"
            )));
        }
        let solved: Vec<u8> = (0..k as u8).collect();
        if dist[rank(&solved, 0)] != 0 {
            return Err(bad("solved is not at distance 0".into()));
        }
        Ok(Pdb { k, dist, max })
    }

    /// The serialised database (layout in the module doc).
    pub fn to_bytes(&self) -> Vec<u8> {
        serialise(self.k, self.max, &self.dist)
    }

    /// Loads a serialised database, checking header, size, digest and distances: bytes that are not a whole,
    /// intact database are an error, never a panic or a silently wrong bound.
    pub fn from_bytes(bytes: &[u8]) -> Result<Pdb, SpaceError> {
        let bad = |why: String| SpaceError::Verification(format!("pattern database: {why}"));
        if bytes.len() < HEADER_LEN + DIGEST_LEN || &bytes[..8] != MAGIC {
            return Err(bad(
                "not a brainball pattern database (bad magic or too short)".into(),
            ));
        }
        let k = bytes[8] as usize;
        check_tiles(k)?;
        let mut c = [0u8; 8];
        c.copy_from_slice(&bytes[16..24]);
        let count = u64::from_le_bytes(c);
        let body = bytes.len() - HEADER_LEN - DIGEST_LEN;
        if count != body as u64 || body != patterns(k) {
            return Err(bad(format!(
                "header says {count} patterns, the body holds {body} bytes, {k} tiles have {}",
                patterns(k)
            )));
        }
        let (data, digest) = bytes.split_at(bytes.len() - DIGEST_LEN);
        if blake3::hash(data).as_bytes() != digest {
            return Err(bad("digest mismatch: the database is corrupt".into()));
        }
        let pdb = Pdb::from_distances(k, data[HEADER_LEN..].to_vec())?;
        if pdb.max != bytes[9] {
            return Err(bad(format!(
                "header says the largest distance is {}, the body's is {}",
                bytes[9], pdb.max
            )));
        }
        Ok(pdb)
    }

    /// [`Pdb::from_bytes`] once per process for the same bytes: every `deep` round and `census` job a worker
    /// binds to the stored database shares one copy (43 MB for 6 tiles) instead of parsing its own. Keyed by the
    /// artifact's own digest (its last 32 bytes); held weakly, so the copy goes with the last job using it.
    pub fn shared(bytes: &[u8]) -> Result<Arc<Pdb>, SpaceError> {
        static CACHE: Mutex<Vec<([u8; DIGEST_LEN], Weak<Pdb>)>> = Mutex::new(Vec::new());
        let key: Option<[u8; DIGEST_LEN]> = bytes
            .len()
            .checked_sub(DIGEST_LEN)
            .and_then(|at| bytes[at..].try_into().ok());
        let lock = || CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = key {
            let found = lock()
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, w)| w.upgrade());
            if let Some(p) = found {
                return Ok(p);
            }
        }
        // Parsed outside the lock: checking 43 MB takes a moment, and a second binder of the same bytes merely
        // repeats it.
        let pdb = Arc::new(Pdb::from_bytes(bytes)?);
        if let Some(key) = key {
            let mut cache = lock();
            cache.retain(|(_, w)| w.strong_count() > 0);
            cache.push((key, Arc::downgrade(&pdb)));
        }
        Ok(pdb)
    }

    pub fn tiles(&self) -> usize {
        self.k
    }

    pub fn max(&self) -> u8 {
        self.max
    }

    pub fn len(&self) -> usize {
        self.dist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dist.is_empty()
    }

    /// Patterns per distance.
    pub fn histogram(&self) -> Vec<u64> {
        let mut h = vec![0u64; self.max as usize + 1];
        for &d in &self.dist {
            h[d as usize] += 1;
        }
        h
    }

    /// Breadth first over the patterns of tiles 1..k, level by level over the whole array (no queue: the array
    /// is the frontier, so memory stays one byte a pattern).
    pub fn build(k: usize) -> Pdb {
        // Callers go through `check_tiles`; a larger k would overflow the colour bits of `rank`.
        let k = k.clamp(1, MAX_TILES);
        let n = patterns(k);
        let mut dist = vec![u8::MAX; n];
        let (dest, turn) = slot_moves();
        let solved_slots: Vec<u8> = (0..k as u8).collect();
        dist[rank(&solved_slots, 0)] = 0;
        let mut level = 0u8;
        let mut slots = vec![0u8; k];
        let mut next = vec![0u8; k];
        loop {
            let mut grew = false;
            for i in 0..n {
                if dist[i] != level {
                    continue;
                }
                let colours = unrank(k, i, &mut slots);
                for t in 0..N_TWISTS {
                    let mut c = 0u32;
                    for (j, &s) in slots.iter().enumerate() {
                        next[j] = dest[t][s as usize];
                        c |= u32::from(((colours >> j) & 1) as u8 ^ turn[t][s as usize]) << j;
                    }
                    let r = rank(&next, c);
                    if dist[r] == u8::MAX {
                        dist[r] = level + 1;
                        grew = true;
                    }
                }
            }
            if !grew {
                break;
            }
            level += 1;
        }
        Pdb {
            k,
            dist,
            max: level,
        }
    }

    /// The index of the pattern of tiles z+1..z+k as seen from tile z (0-based `z`; 12 is tile 13 itself).
    #[inline]
    pub fn index(&self, p: &Places, z: usize) -> usize {
        let p0 = p.pos[z] as usize;
        let s0 = p.col[z];
        let mut used = 0u32;
        let mut r = 0usize;
        let mut colours = 0usize;
        for n in 0..self.k {
            let t = MOD13[z + 1 + n] as usize;
            let at = p.pos[t] as usize;
            // Turned over (13 shows the other colour), the ring is read the other way round.
            let slot = if s0 == 0 {
                MOD13[at + 2 * TILES - p0 - 1]
            } else {
                MOD13[p0 + 2 * TILES - 1 - at]
            } as u32;
            let below = (used & ((1 << slot) - 1)).count_ones();
            r = r * (SLOTS - n) + (slot - below) as usize;
            used |= 1 << slot;
            colours |= usize::from(p.col[t] ^ s0) << n;
        }
        (r << self.k) | colours
    }

    /// The pattern distance at `index`.
    #[inline]
    pub fn at(&self, index: usize) -> u8 {
        self.dist[index]
    }

    /// The largest bound over the 26 views (a lower bound on the distance of `ball`).
    pub fn bound(&self, ball: Ball) -> u8 {
        let mut idx = [0usize; VIEWS];
        self.indices(ball, &mut idx);
        idx.iter().map(|&i| self.dist[i]).max().unwrap_or(0)
    }

    /// The indices of the 26 views of `ball`, each asked of the cache at once so that their misses overlap.
    #[inline]
    pub fn indices(&self, ball: Ball, out: &mut [usize; VIEWS]) {
        let fwd = Places::of(ball);
        let inv = Places::of_inverse(ball);
        for z in 0..TILES {
            out[z] = self.index(&fwd, z);
            out[TILES + z] = self.index(&inv, z);
        }
        for &i in out.iter() {
            crate::table::prefetch(&self.dist[i]);
        }
    }

    /// Does some view prove the distance of `ball` greater than `budget`?
    #[inline]
    pub fn exceeds(&self, ball: Ball, budget: u8) -> bool {
        if budget >= self.max {
            return false;
        }
        let mut idx = [0usize; VIEWS];
        self.indices(ball, &mut idx);
        idx.iter().any(|&i| self.dist[i] > budget)
    }
}

/// Header, `dist`, digest: the layout of [`Pdb::to_bytes`], also written by the `pattern` job's merge.
/// Where the tile in slot s goes under twist t (`dest[t][s]`), and whether it turns over there (`turn[t][s]`,
/// 0 or 1): the twists as moves of single tiles, which is all a search over some tiles' places needs.
pub(crate) fn slot_moves() -> ([[u8; SLOTS]; N_TWISTS], [[u8; SLOTS]; N_TWISTS]) {
    let mut dest = [[0u8; SLOTS]; N_TWISTS];
    let mut turn = [[0u8; SLOTS]; N_TWISTS];
    for (t, tw) in TWISTS.iter().enumerate() {
        for (d, &s) in tw.src.iter().enumerate() {
            dest[t][s as usize] = d as u8;
            turn[t][s as usize] = u8::from(tw.flip >> (5 * (SLOTS - 1 - d)) & 1 == 1);
        }
    }
    (dest, turn)
}

pub(crate) fn serialise(k: usize, max: u8, dist: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + dist.len() + DIGEST_LEN);
    out.extend_from_slice(MAGIC);
    out.push(k as u8);
    out.push(max);
    out.extend_from_slice(&[0u8; 6]);
    out.extend_from_slice(&(dist.len() as u64).to_le_bytes());
    out.extend_from_slice(dist);
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out
}

/// Patterns of k tiles: 12 * 11 * ... * (13 - k) placements times 2^k colourings.
pub fn patterns(k: usize) -> usize {
    (0..k).map(|i| SLOTS - i).product::<usize>() << k
}

/// Index of `slots` (distinct, 0..12, tile 1 first) with colour bits `colours`.
pub(crate) fn rank(slots: &[u8], colours: u32) -> usize {
    let mut used = 0u32;
    let mut r = 0usize;
    for (n, &s) in slots.iter().enumerate() {
        let below = (used & ((1 << s) - 1)).count_ones();
        r = r * (SLOTS - n) + (u32::from(s) - below) as usize;
        used |= 1 << s;
    }
    (r << slots.len()) | colours as usize
}

/// Inverse of [`rank`]: fills `slots`, returns the colour bits.
pub(crate) fn unrank(k: usize, index: usize, slots: &mut [u8]) -> u32 {
    let colours = (index & ((1 << k) - 1)) as u32;
    let mut r = index >> k;
    let mut digits = [0usize; SLOTS];
    for n in (0..k).rev() {
        digits[n] = r % (SLOTS - n);
        r /= SLOTS - n;
    }
    place_digits(&digits[..k], slots);
    colours
}

/// The slots a pattern's mixed-radix digits name, tile 1 first: tile `n` takes the `digits[n]`-th slot still free
/// (the inverse of the ranking in [`rank`], shared by [`unrank`] and the segmented layout's decoding).
#[inline]
pub(crate) fn place_digits(digits: &[usize], slots: &mut [u8]) {
    let mut used = 0u32;
    for (n, &digit) in digits.iter().enumerate() {
        let mut left = digit;
        let mut s = 0;
        loop {
            if used & (1 << s) == 0 {
                if left == 0 {
                    break;
                }
                left -= 1;
            }
            s += 1;
        }
        slots[n] = s as u8;
        used |= 1 << s;
    }
}

/// The inverse signed permutation of `ball` as a position: the one its solving sequences reach from solved.
pub fn inverse(ball: Ball) -> Ball {
    let mut out = 0u64;
    for s in 0..SLOTS {
        let v = (ball.0 >> (5 * (SLOTS - 1 - s))) & 31;
        let t = (v >> 1) as usize;
        out |= ((s as u64) << 1 | (v & 1)) << (5 * (SLOTS - 1 - t));
    }
    Ball(out)
}
