//! The original program's brute force: every board with the right number of yellow tiles, tested row by row with popcounts
//! over row masks. Chunks are ranges of combination ranks.
//!
//! Boards are u64 bit sets (bit `t` = tile `t + 1`), so brute force takes boards of up to 64 tiles (side <= 5).
//!
//! Rank order: a board with `Y` yellow tiles is a sequence of decisions over the tiles in [`Brute::order`]
//! (column by column, top to bottom), black before yellow; its rank is its position among all `C(n, Y)` such
//! boards in that lexicographic order. A chunk is a rank range `[lo, hi)`, so any worker can run any chunk and
//! chunk borders neither skip nor repeat a board.
//!
//! Early rejection keeps the original program's verdicts and counts: we walk the boards of the range in rank order as a tree of
//! decisions, and after each decision test the three rows through the decided tile with two popcounts (yellow
//! tiles so far, undecided tiles left). If a row already has more yellow tiles than its clue, or cannot reach it
//! any more, every board below that prefix fails that row in the original program's one-by-one test too, so the whole block is
//! rejected at once and its boards within the range are added to `nodes`. `nodes` is therefore exactly the number
//! of boards in the chunk, as if each had been tested alone.

use super::geometry::Geometry;
use sweep_space::{Control, Meter, SpaceError};

/// Boards are u64 bit sets.
pub const MAX_TILES: usize = 64;

/// Binomial coefficients `C(n, k)` for `n <= 64` (the largest, C(64, 32) ~ 1.8e18, fits a u64).
pub struct Binomials {
    table: Vec<[u64; MAX_TILES + 1]>,
}

impl Binomials {
    pub fn new() -> Self {
        let mut table = vec![[0u64; MAX_TILES + 1]; MAX_TILES + 1];
        for n in 0..=MAX_TILES {
            table[n][0] = 1;
            for k in 1..=n {
                table[n][k] = table[n - 1][k - 1] + if k < n { table[n - 1][k] } else { 0 };
            }
        }
        Binomials { table }
    }

    /// `C(n, k)`, 0 when `k > n`.
    pub fn c(&self, n: usize, k: usize) -> u64 {
        if n > MAX_TILES || k > n {
            0
        } else {
            self.table[n][k]
        }
    }
}

impl Default for Binomials {
    fn default() -> Self {
        Self::new()
    }
}

/// The brute-force kernel's fixed tables for one puzzle.
pub struct Brute {
    /// Decision order: tile indices column by column, top to bottom, so columns close early.
    pub order: Vec<u16>,
    /// `rest[i]` = bits of `order[i..]`, the tiles still undecided at depth i.
    rest: Vec<u64>,
    /// For each depth, the rows through the tile decided there, as (mask, clue).
    checks: Vec<[(u64, u32); 3]>,
    pub yellow: usize,
    pub binom: Binomials,
}

impl Brute {
    /// `clues` must have passed `check_clues`; `yellow` is their common total. Needs at most 64 tiles.
    pub fn new(geo: &Geometry, clues: &[u32], yellow: u32) -> Brute {
        let mut order: Vec<u16> = (0..geo.n_tiles() as u16).collect();
        order.sort_by_key(|&t| geo.coords[t as usize]);
        let n = order.len();
        let mut rest = vec![0u64; n + 1];
        for i in (0..n).rev() {
            rest[i] = rest[i + 1] | (1u64 << order[i]);
        }
        let line_masks: Vec<u64> = geo
            .lines
            .iter()
            .map(|l| l.tiles.iter().fold(0u64, |m, &t| m | (1u64 << t)))
            .collect();
        let checks = order
            .iter()
            .map(|&t| {
                geo.tile_lines[t as usize].map(|l| (line_masks[l as usize], clues[l as usize]))
            })
            .collect();
        Brute {
            order,
            rest,
            checks,
            yellow: yellow as usize,
            binom: Binomials::new(),
        }
    }

    /// `C(n, Y)`: the boards brute force tests.
    pub fn total(&self) -> u64 {
        self.binom.c(self.order.len(), self.yellow)
    }

    /// The rank of a board with exactly `Y` yellow tiles, or None if it has another number.
    pub fn rank(&self, board: u64) -> Option<u64> {
        if board.count_ones() as usize != self.yellow || board & !self.rest[0] != 0 {
            return None;
        }
        let n = self.order.len();
        let mut k = self.yellow;
        let mut r = 0u64;
        for (i, &t) in self.order.iter().enumerate() {
            if board & (1u64 << t) != 0 {
                // Every board that is black here (with the same prefix) comes first.
                r += self.binom.c(n - i - 1, k);
                k -= 1;
            }
        }
        Some(r)
    }

    /// The board of rank `r`, or None if `r >= C(n, Y)`.
    pub fn unrank(&self, mut r: u64) -> Option<u64> {
        if r >= self.total() {
            return None;
        }
        let n = self.order.len();
        let mut k = self.yellow;
        let mut board = 0u64;
        for (i, &t) in self.order.iter().enumerate() {
            let black_first = self.binom.c(n - i - 1, k);
            if r >= black_first {
                r -= black_first;
                board |= 1u64 << t;
                k -= 1;
            }
        }
        Some(board)
    }

    /// Tests every board of rank `lo .. hi`; calls `found` with each solution. Returns the boards tested.
    pub fn run(
        &self,
        lo: u64,
        hi: u64,
        ctl: &Control,
        found: &mut dyn FnMut(u64),
    ) -> Result<u64, SpaceError> {
        let mut walk = Walk {
            brute: self,
            lo,
            hi,
            meter: Meter::new(ctl),
            found,
        };
        walk.dfs(0, self.yellow, 0, 0)?;
        Ok(walk.meter.finish())
    }
}

struct Walk<'a, 'f> {
    brute: &'a Brute,
    lo: u64,
    hi: u64,
    /// One step per inner node; boards are counted at the leaves and in the blocks rejected at once.
    meter: Meter<'a>,
    found: &'f mut dyn FnMut(u64),
}

impl Walk<'_, '_> {
    /// Boards of rank `[a, a + size)` within the chunk.
    fn overlap(&self, a: u64, size: u64) -> u64 {
        (a + size).min(self.hi).saturating_sub(a.max(self.lo))
    }

    /// The subtree after `i` decisions with `k` yellow tiles still to place: ranks `[base, base + C(n-i, k))`.
    fn dfs(&mut self, i: usize, k: usize, base: u64, board: u64) -> Result<(), SpaceError> {
        let b = self.brute;
        let n = b.order.len();
        if i == n {
            // Every row was checked when its last tile was decided: this board meets all clues.
            self.meter.count(1);
            (self.found)(board);
            return Ok(());
        }
        self.meter.step()?;
        let t = b.order[i];
        let undecided = b.rest[i + 1];
        let blacks = b.binom.c(n - i - 1, k);
        let yellows = if k > 0 {
            b.binom.c(n - i - 1, k - 1)
        } else {
            0
        };
        for (next, nk, nbase, nsize) in [
            (board, k, base, blacks),
            (
                board | (1u64 << t),
                k.wrapping_sub(1),
                base + blacks,
                yellows,
            ),
        ] {
            let in_range = self.overlap(nbase, nsize);
            if in_range == 0 {
                continue;
            }
            let rows_ok = b.checks[i].iter().all(|&(mask, clue)| {
                let y = (next & mask).count_ones();
                y <= clue && y + (undecided & mask).count_ones() >= clue
            });
            if rows_ok {
                self.dfs(i + 1, nk, nbase, next)?;
            } else {
                self.meter.count(in_range);
            }
        }
        Ok(())
    }
}
