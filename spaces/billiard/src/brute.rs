//! The original program's BilliardBruteForce over a range of permutation ranks, with whole failing blocks counted at once.
//!
//! The original program walks every permutation of `1..=n` in lexicographic order of the index vector and tests the groups
//! in order `(0,1,2), (1,3,4), (2,4,5), ...`. In that index order each group's last ball is its upper right one,
//! so group `g` can be decided as soon as the prefix up to its upper right index is placed. This kernel walks
//! the same lexicographic order as a prefix tree: once a prefix fails a group, every permutation below it fails
//! at that same group (all earlier groups passed on the common prefix), which is exactly the verdict a
//! one-by-one test gives them, so the whole block is counted as tested-and-failed in one addition. `nodes`
//! therefore equals the number of permutations in the rank range, and a solution is reported exactly when the
//! seed would print it.
//!
//! Why the original program's order is kept: it is also the best order for early decisions. A group needs three balls and two
//! groups share at most one ball, so the 1st, 2nd and 4th placements can never complete a group; the original program's order
//! completes one group with every other placement except the first ball of each level, which is the fewest
//! possible. At a completing placement only two values (`left +- bottom`) can pass, so those two children are
//! searched and the rest of the node's rank range is counted as failed without looking at each value.

use sweep_space::perm::FACTORIALS;
use sweep_space::{ChunkOutput, Control, Meter, SpaceError};

use super::triangle::{encode, Geometry};

/// The brute-force walk over ranks `[lo, hi)`.
pub struct Brute<'a> {
    geo: &'a Geometry,
    lo: u64,
    hi: u64,
    out: &'a mut ChunkOutput,
    /// `check[i] = Some((bottom, upper left))` when index `i` is the upper right ball of a group.
    check: Vec<Option<(usize, usize)>>,
    /// Ball values by seed index (0 = unset).
    balls: Vec<u8>,
    /// One step per node visited, and the ranks it accounts for: a leaf, or a failing block.
    meter: Meter<'a>,
}

impl<'a> Brute<'a> {
    pub fn new(
        geo: &'a Geometry,
        lo: u64,
        hi: u64,
        ctl: &'a Control,
        out: &'a mut ChunkOutput,
    ) -> Self {
        Brute {
            geo,
            lo,
            hi,
            out,
            check: completing_groups(geo),
            balls: vec![0; geo.n],
            meter: Meter::new(ctl),
        }
    }

    pub fn run(mut self) -> Result<(), SpaceError> {
        let n = self.geo.n;
        if self.lo < self.hi {
            let all = ((1u32 << (n + 1)) - 1) & !1;
            self.dfs(0, 0, all)?;
        }
        self.out.nodes = self.meter.finish();
        Ok(())
    }

    /// How many ranks of `[start, end)` lie in the chunk.
    fn in_range(&self, start: u64, end: u64) -> u64 {
        end.min(self.hi).saturating_sub(start.max(self.lo))
    }

    /// Places index `depth`. The subtree covers ranks `[base, base + (n - depth)!)`, which overlaps the chunk;
    /// every in-range rank of it is accounted exactly once, either by a leaf or as part of a failing block.
    fn dfs(&mut self, depth: usize, base: u64, unused: u32) -> Result<(), SpaceError> {
        let n = self.geo.n;
        if depth == n {
            self.meter.add(1)?;
            self.found();
            return Ok(());
        }
        let block = FACTORIALS[n - depth - 1];
        match self.check[depth] {
            Some((bottom, left)) => {
                let node_end = base + block * (n - depth) as u64;
                let total = self.in_range(base, node_end);
                let (b, l) = (self.balls[bottom], self.balls[left]);
                // |l - v| = b has at most the two solutions l - b < l + b; every other value fails here.
                let mut passed = 0;
                for v in [l.checked_sub(b), l.checked_add(b)].into_iter().flatten() {
                    if v == 0 || usize::from(v) > n || unused & (1u32 << v) == 0 {
                        continue;
                    }
                    let child = (unused & ((1u32 << v) - 1)).count_ones() as u64;
                    let start = base + child * block;
                    let inside = self.in_range(start, start + block);
                    if inside == 0 {
                        continue;
                    }
                    passed += inside;
                    self.balls[depth] = v;
                    self.dfs(depth + 1, start, unused & !(1u32 << v))?;
                }
                self.meter.add(total - passed)?;
            }
            None => {
                let mut bits = unused;
                let mut start = base;
                while bits != 0 {
                    let v = bits.trailing_zeros() as u8;
                    bits &= bits - 1;
                    let end = start + block;
                    if end > self.lo {
                        if start >= self.hi {
                            break;
                        }
                        self.balls[depth] = v;
                        self.dfs(depth + 1, start, unused & !(1u32 << v))?;
                    }
                    start = end;
                }
            }
        }
        self.balls[depth] = 0;
        Ok(())
    }

    fn found(&mut self) {
        self.out.count("solutions", 1);
        // Both members of a mirror class are permutations of the full space; only the canonical one counts as
        // unique, so unique counts add up over any split into ranges.
        if self.geo.canonical(&self.balls) == self.balls {
            self.out.count("unique", 1);
            self.out.solutions.push(encode(&self.balls));
        }
    }
}

/// For every index, the group (bottom, upper left) it completes as the highest index of the group, if any.
pub fn completing_groups(geo: &Geometry) -> Vec<Option<(usize, usize)>> {
    let mut check = vec![None; geo.n];
    for &[b, l, r] in &geo.groups {
        // The upper right ball is the largest index of its group in the original program's numbering.
        check[usize::from(r)] = Some((usize::from(b), usize::from(l)));
    }
    check
}
