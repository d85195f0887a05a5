//! Exact backtracking over the top row: every lower ball follows by differences.
//!
//! The top row is chosen left to right. Choosing top ball `j` fixes the whole diagonal below it (row `i` from the
//! top gets `|row(i-1)[j-i] - row(i-1)[j-i+1]|`), and that diagonal is checked ball by ball against a bit mask of
//! used numbers, so a bad choice is usually rejected after one or two subtractions.
//!
//! Pruning that keeps the search exact:
//! - The largest number `n` is never a difference (`|a-b| < max(a,b) <= n`), so it sits in the top row.
//! - Mirror breaking: the reflection moves top position `p` to `rows-1-p`, so only triangles with `n` at
//!   `p <= (rows-1)/2` are searched; once the search reaches that position without having used `n`, `n` is
//!   forced there. A triangle with `p < rows-1-p` stands for itself and its mirror (two solutions, one unique,
//!   reported in canonical form); one with `n` in the middle (odd rows) has its mirror in the searched half too,
//!   so it counts once and is unique when it is canonical. Counts stay exact however the prefixes are split.
//!
//! `nodes` counts placements tried: one per chunk prefix plus one per top-row candidate tried below it.

use crate::space::{ChunkOutput, Control, SpaceError};

use super::triangle::{encode, index, Geometry};

/// Rows are limited so that numbers fit a u128 mask (`12*13/2 = 78`); 12 rows already take hours.
pub const MAX_ROWS: usize = 12;

/// A set of numbers `1..=n` as bits.
type Mask = u128;

/// How many placements pass between progress reports and cancellation checks.
const REPORT_EVERY: u64 = 1 << 16;

/// A partial triangle, `tri[i][k]` = row `i` from the top, position `k`.
#[derive(Clone)]
struct Board {
    rows: usize,
    n: u8,
    /// The largest top position `n` may take (mirror breaking).
    half: usize,
    tri: [[u8; MAX_ROWS]; MAX_ROWS],
}

impl Board {
    fn new(rows: usize) -> Board {
        Board {
            rows,
            n: (rows * (rows + 1) / 2) as u8,
            half: rows.saturating_sub(1) / 2,
            tri: [[0; MAX_ROWS]; MAX_ROWS],
        }
    }

    /// The numbers worth trying at top position `j` given the used mask.
    fn candidates(&self, j: usize, used: Mask) -> Mask {
        let all = ((1 << (self.n + 1)) - 1) & !1;
        let big: Mask = 1 << self.n;
        if used & big != 0 {
            all & !used
        } else if j == self.half {
            big
        } else {
            // Positions right of `half` are never reached without `n`: it is forced at `half`.
            all & !used
        }
    }

    /// Puts `v` at top position `j` and derives the diagonal below it; the new used mask, or `None` when a
    /// derived ball repeats a number.
    #[inline]
    fn place(&mut self, j: usize, v: u8, used: Mask) -> Option<Mask> {
        let mut used = used | (1 << v);
        self.tri[0][j] = v;
        for i in 1..=j {
            let k = j - i;
            let d = self.tri[i - 1][k].abs_diff(self.tri[i - 1][k + 1]);
            let bit: Mask = 1 << d;
            // d >= 1 because the two balls above are distinct numbers.
            if used & bit != 0 {
                return None;
            }
            used |= bit;
            self.tri[i][k] = d;
        }
        Some(used)
    }

    /// The finished triangle as a seed index vector.
    fn balls(&self) -> Vec<u8> {
        let n = usize::from(self.n);
        let mut balls = vec![0; n];
        for i in 0..self.rows {
            let level = self.rows - 1 - i;
            for k in 0..=level {
                balls[index(level, k)] = self.tri[i][k];
            }
        }
        balls
    }

    /// Where `n` sits in the finished top row.
    fn position_of_max(&self) -> usize {
        (0..self.rows)
            .find(|&k| self.tri[0][k] == self.n)
            .unwrap_or(0)
    }
}

/// The chunk prefixes: the first `min(rows, 2)` top balls, every consistent choice under the same rules the
/// search applies, in increasing order.
pub fn prefixes(rows: usize) -> Vec<[u8; 2]> {
    let mut board = Board::new(rows);
    let mut out = Vec::new();
    let mut first = board.candidates(0, 0);
    while first != 0 {
        let a = first.trailing_zeros() as u8;
        first &= first - 1;
        let Some(used) = board.place(0, a, 0) else {
            continue;
        };
        if rows == 1 {
            out.push([a, 0]);
            continue;
        }
        let mut second = board.candidates(1, used);
        while second != 0 {
            let b = second.trailing_zeros() as u8;
            second &= second - 1;
            if board.place(1, b, used).is_some() {
                out.push([a, b]);
            }
        }
    }
    out
}

pub struct Strategy<'a> {
    geo: &'a Geometry,
    ctl: &'a Control,
    out: &'a mut ChunkOutput,
    board: Board,
    nodes: u64,
    unreported: u64,
}

impl<'a> Strategy<'a> {
    pub fn new(geo: &'a Geometry, ctl: &'a Control, out: &'a mut ChunkOutput) -> Self {
        Strategy {
            geo,
            ctl,
            out,
            board: Board::new(geo.rows),
            nodes: 0,
            unreported: 0,
        }
    }

    pub fn run_prefix(&mut self, [a, b]: [u8; 2]) -> Result<(), SpaceError> {
        self.nodes += 1;
        self.unreported += 1;
        let Some(mut used) = self.board.place(0, a, 0) else {
            return Ok(());
        };
        let mut depth = 1;
        if self.geo.rows > 1 {
            let Some(u) = self.board.place(1, b, used) else {
                return Ok(());
            };
            used = u;
            depth = 2;
        }
        self.dfs(depth, used)
    }

    pub fn finish(mut self) -> Result<(), SpaceError> {
        let left = std::mem::take(&mut self.unreported);
        self.ctl.add_nodes(left);
        self.out.nodes = self.nodes;
        Ok(())
    }

    fn dfs(&mut self, j: usize, used: Mask) -> Result<(), SpaceError> {
        if j == self.board.rows {
            self.found();
            return Ok(());
        }
        let mut cands = self.board.candidates(j, used);
        self.nodes += u64::from(cands.count_ones());
        self.unreported += u64::from(cands.count_ones());
        while cands != 0 {
            let v = cands.trailing_zeros() as u8;
            cands &= cands - 1;
            if let Some(u) = self.board.place(j, v, used) {
                self.dfs(j + 1, u)?;
            }
        }
        if self.unreported >= REPORT_EVERY {
            let n = std::mem::take(&mut self.unreported);
            self.ctl.checkpoint(n)?;
        }
        Ok(())
    }

    fn found(&mut self) {
        let balls = self.board.balls();
        let p = self.board.position_of_max();
        let canonical = self.geo.canonical(&balls);
        if 2 * p + 1 < self.geo.rows {
            // Its mirror (n at rows-1-p) is never searched: count it here.
            self.out.count("solutions", 2);
            self.out.count("unique", 1);
            self.out.solutions.push(encode(&canonical));
        } else {
            self.out.count("solutions", 1);
            if canonical == balls {
                self.out.count("unique", 1);
                self.out.solutions.push(encode(&balls));
            }
        }
    }
}
