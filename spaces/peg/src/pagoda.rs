//! Pagoda functions: hole weights `w` with `w(to) <= w(from) + w(over)` for every move, so that the weighted
//! peg sum `P(pos)` never grows along a game. A position with `P(pos) < P(goal)` can therefore never reach the
//! goal, whatever moves follow; checking a handful of them costs a few popcounts per position, and prunes whole
//! dead subtrees that the search would otherwise expand (a peg stranded at an arm's tip, the last pegs on the
//! wrong sub-lattice, ...). `P(start) < P(goal)` proves a start/goal pair impossible without any search.
//!
//! Generation, for every board alike: the weight vectors satisfying the move inequalities are closed under
//! pointwise max, so below any target vector `t` there is a largest pagoda, found by lowering `w(to)` to
//! `w(from) + w(over)` wherever the inequality fails until none does (non-negative integers only decrease, so
//! this ends). The targets are a few shapes that make good pagodas on grid boards: Conway's "soldier" weights
//! (Fibonacci numbers of the distance to the goal), the goal's parity sub-lattice (both coordinates of the goal's
//! parity), that lattice with soldier weights, and rows/columns/diagonals with one residue mod 3 removed.
//! Whatever the target, the result is checked to be a pagoda, so a poor target can only give a weak function,
//! never a wrong one.

use super::board::{bits, Board};

/// One pagoda function, stored as the hole sets of each weight so that `P(pos)` is a few masked popcounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pagoda {
    /// (weight, holes with that weight), weights != 0. Weights may be negative: the argument only needs
    /// `w(to) <= w(from) + w(over)` for every move, whatever the signs.
    levels: Vec<(i32, u64)>,
    /// `P(goal)`: a position below it is dead.
    pub threshold: i32,
    /// What the weights look like, for explanations.
    pub shape: &'static str,
}

impl Pagoda {
    fn from_weights(w: &[i32], threshold: i32, shape: &'static str) -> Pagoda {
        let mut levels: Vec<(i32, u64)> = Vec::new();
        for (bit, &x) in w.iter().enumerate() {
            if x == 0 {
                continue;
            }
            match levels.iter_mut().find(|l| l.0 == x) {
                Some(l) => l.1 |= 1u64 << bit,
                None => levels.push((x, 1u64 << bit)),
            }
        }
        levels.sort_unstable();
        Pagoda {
            levels,
            threshold,
            shape,
        }
    }

    #[inline(always)]
    pub fn value(&self, pos: u64) -> i32 {
        self.levels
            .iter()
            .map(|&(w, m)| w * (pos & m).count_ones() as i32)
            .sum()
    }

    /// The weight of one hole.
    pub fn weight(&self, bit: u8) -> i32 {
        self.value(1u64 << bit)
    }

    /// True when no move sequence can lead from `pos` to the goal this function was built for.
    #[inline]
    pub fn dead(&self, pos: u64) -> bool {
        self.value(pos) < self.threshold
    }
}

/// Largest pagoda below the target `t` (indexed by bit; holes only).
fn largest_below(board: &Board, mut w: Vec<i32>) -> Vec<i32> {
    loop {
        let mut changed = false;
        for m in &board.moves {
            let cap = w[m.from as usize] + w[m.over as usize];
            if w[m.to as usize] > cap {
                w[m.to as usize] = cap;
                changed = true;
            }
        }
        if !changed {
            return w;
        }
    }
}

/// Whether `w` satisfies every move inequality (the generator's result is re-checked with this in tests).
pub fn is_pagoda(board: &Board, w: &[i32]) -> bool {
    board
        .moves
        .iter()
        .all(|m| w[m.to as usize] <= w[m.from as usize] + w[m.over as usize])
}

/// Jump-graph distances from `goal`: holes are neighbours when a move jumps from one over the other.
fn distances(board: &Board, goal: u8) -> Vec<u32> {
    let mut d = vec![u32::MAX; 64];
    d[goal as usize] = 0;
    let mut frontier = vec![goal];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for &h in &frontier {
            for m in board.moves.iter().filter(|m| m.from == h) {
                if d[m.over as usize] == u32::MAX {
                    d[m.over as usize] = d[h as usize] + 1;
                    next.push(m.over);
                }
            }
        }
        frontier = next;
    }
    d
}

/// A coordinate of a grid cell along one line direction.
type Coord = dyn Fn((usize, usize)) -> usize;

fn fib(k: u32) -> u32 {
    let (mut a, mut b) = (0u32, 1u32);
    for _ in 0..k {
        (a, b) = (b, a.saturating_add(b));
    }
    a
}

/// Pagoda functions that can prune positions aiming at a single peg on `goal`: every generated function with
/// `P(goal) > 0`, without duplicates.
pub fn for_goal(board: &Board, goal: u8) -> Vec<Pagoda> {
    let d = distances(board, goal);
    let reach = bits(board.holes).filter(|&h| d[h as usize] != u32::MAX);
    let far = reach.map(|h| d[h as usize]).max().unwrap_or(0);
    let Some((gr, gc)) = board.cell_of.get(goal as usize).copied().flatten() else {
        return Vec::new();
    };
    let cell = |h: u8| board.cell_of[h as usize].unwrap_or((0, 0));
    let same_lattice = |h: u8| {
        let (r, c) = cell(h);
        r % 2 == gr % 2 && c % 2 == gc % 2
    };
    let target = |f: &dyn Fn(u8) -> i32| -> Vec<i32> {
        let mut t = vec![0i32; 64];
        for h in bits(board.holes) {
            t[h as usize] = f(h);
        }
        t
    };
    let soldier = |h: u8| {
        let dh = d[h as usize];
        if dh == u32::MAX {
            0
        } else {
            fib(far + 2 - dh).min(1 << 20) as i32
        }
    };
    let mut targets: Vec<(&'static str, Vec<i32>)> = vec![
        (
            "soldier (Fibonacci of the distance to the goal)",
            target(&soldier),
        ),
        (
            "the goal's parity sub-lattice",
            target(&|h| i32::from(same_lattice(h))),
        ),
        (
            "soldier weights on the goal's parity sub-lattice",
            target(&|h| if same_lattice(h) { soldier(h) } else { 0 }),
        ),
    ];
    // Lines mod 3: rows, columns and (for the triangle's third direction) diagonals.
    let axes: [(&'static str, &Coord); 3] = [
        ("rows except one residue mod 3", &|(r, _)| r),
        ("columns except one residue mod 3", &|(_, c)| c),
        ("diagonals except one residue mod 3", &|(r, c)| r + 64 - c),
    ];
    for (name, coord) in axes {
        let g = coord((gr, gc)) % 3;
        for k in (0..3).filter(|&k| k != g) {
            targets.push((name, target(&|h| i32::from(coord(cell(h)) % 3 != k))));
        }
    }
    let mut out: Vec<Pagoda> = Vec::new();
    for (shape, t) in targets {
        let w = largest_below(board, t);
        let threshold = w[goal as usize];
        if threshold <= 0 || !is_pagoda(board, &w) {
            continue;
        }
        let p = Pagoda::from_weights(&w, threshold, shape);
        if !out.iter().any(|q| q.levels == p.levels) {
            out.push(p);
        }
    }
    out
}

/// The pagodas as weight vectors (for tests).
#[cfg(test)]
pub fn weights(p: &Pagoda) -> Vec<i32> {
    (0..64u8).map(|b| p.weight(b)).collect()
}

/// A small dense linear program: minimise `c . x` subject to `rows` (`a . x <= b`, or `>=`, or `=`) and `x >= 0`.
/// Two-phase simplex with Bland's rule (no cycling); sizes here are a few hundred rows, so a dense tableau costs
/// milliseconds. Floating point: callers must verify whatever they derive from the answer exactly.
pub mod lp {
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Sense {
        Le,
        Ge,
        Eq,
    }

    const EPS: f64 = 1e-9;

    /// The optimal `x`, or `None` when infeasible or unbounded (or after too many pivots).
    pub fn minimise(n: usize, c: &[f64], rows: &[(Vec<f64>, Sense, f64)]) -> Option<Vec<f64>> {
        let m = rows.len();
        // Columns: n originals, one slack/surplus per inequality, one artificial per row that needs one, rhs.
        let n_slack = rows.iter().filter(|r| r.1 != Sense::Eq).count();
        let mut art_rows = Vec::new();
        for (i, (_, s, b)) in rows.iter().enumerate() {
            // After making b >= 0, a `<=` row has its slack as a starting basic variable; others need one.
            let flipped = *b < 0.0;
            let le = matches!((s, flipped), (Sense::Le, false) | (Sense::Ge, true));
            if !le {
                art_rows.push(i);
            }
        }
        let n_art = art_rows.len();
        let width = n + n_slack + n_art + 1;
        let rhs = width - 1;
        let mut t = vec![vec![0.0f64; width]; m];
        let mut basis = vec![0usize; m];
        let mut slack = n;
        let mut art = n + n_slack;
        for (i, (a, s, b)) in rows.iter().enumerate() {
            let sign = if *b < 0.0 { -1.0 } else { 1.0 };
            for (j, &v) in a.iter().enumerate().take(n) {
                t[i][j] = sign * v;
            }
            t[i][rhs] = sign * b;
            let sense = match (s, sign < 0.0) {
                (Sense::Le, true) => Sense::Ge,
                (Sense::Ge, true) => Sense::Le,
                (s, _) => *s,
            };
            match sense {
                Sense::Le => {
                    t[i][slack] = 1.0;
                    basis[i] = slack;
                    slack += 1;
                }
                Sense::Ge => {
                    t[i][slack] = -1.0;
                    slack += 1;
                    t[i][art] = 1.0;
                    basis[i] = art;
                    art += 1;
                }
                Sense::Eq => {
                    t[i][art] = 1.0;
                    basis[i] = art;
                    art += 1;
                }
            }
        }
        // Phase 1: minimise the sum of the artificials.
        let mut cost = vec![0.0f64; width - 1];
        for c in cost.iter_mut().skip(n + n_slack) {
            *c = 1.0;
        }
        if n_art > 0 {
            run(&mut t, &mut basis, &cost, width - 1)?;
            let infeas: f64 = basis
                .iter()
                .zip(&t)
                .filter(|(&b, _)| b >= n + n_slack)
                .map(|(_, row)| row[rhs])
                .sum();
            if infeas > 1e-7 {
                return None;
            }
            // Drive artificials out of the basis (degenerate rows); a row with no other column is redundant.
            for i in 0..m {
                if basis[i] >= n + n_slack {
                    if let Some(j) = (0..n + n_slack).find(|&j| t[i][j].abs() > EPS) {
                        pivot(&mut t, &mut basis, i, j);
                    }
                }
            }
        }
        // Phase 2 over the original and slack columns only.
        let mut cost = vec![0.0f64; n + n_slack];
        cost[..n].copy_from_slice(&c[..n]);
        run(&mut t, &mut basis, &cost, n + n_slack)?;
        let mut x = vec![0.0; n];
        for (i, &b) in basis.iter().enumerate() {
            if b < n {
                x[b] = t[i][rhs];
            }
        }
        Some(x)
    }

    fn pivot(t: &mut [Vec<f64>], basis: &mut [usize], r: usize, col: usize) {
        let p = t[r][col];
        for v in t[r].iter_mut() {
            *v /= p;
        }
        let prow = t[r].clone();
        for (i, row) in t.iter_mut().enumerate() {
            if i != r {
                let f = row[col];
                if f.abs() > 0.0 {
                    for (v, pv) in row.iter_mut().zip(&prow) {
                        *v -= f * pv;
                    }
                }
            }
        }
        basis[r] = col;
    }

    /// Simplex iterations on the columns `0..cols` with costs `cost`: Dantzig's rule (most negative reduced
    /// cost) for speed, then Bland's rule (smallest index), which cannot cycle, if it takes too long.
    fn run(t: &mut [Vec<f64>], basis: &mut [usize], cost: &[f64], cols: usize) -> Option<()> {
        let rhs = t.first().map_or(0, |r| r.len() - 1);
        let mut in_basis = vec![false; rhs];
        for &b in basis.iter() {
            in_basis[b] = true;
        }
        let mut reduced = vec![0.0f64; cols];
        for iter in 0..20_000 {
            reduced.copy_from_slice(&cost[..cols]);
            for (i, row) in t.iter().enumerate() {
                let cb = cost.get(basis[i]).copied().unwrap_or(0.0);
                if cb != 0.0 {
                    for (r, v) in reduced.iter_mut().zip(row) {
                        *r -= cb * v;
                    }
                }
            }
            let candidates = (0..cols).filter(|&j| !in_basis[j] && reduced[j] < -EPS);
            let entering = if iter < 2_000 {
                candidates.min_by(|&a, &b| reduced[a].total_cmp(&reduced[b]))
            } else {
                candidates.min()
            };
            let Some(col) = entering else {
                return Some(());
            };
            let mut best: Option<(f64, usize)> = None;
            for (i, row) in t.iter().enumerate() {
                if row[col] > EPS {
                    let ratio = row[rhs] / row[col];
                    let better = match best {
                        None => true,
                        Some((r, bi)) => {
                            ratio < r - EPS || (ratio <= r + EPS && basis[i] < basis[bi])
                        }
                    };
                    if better {
                        best = Some((ratio, i));
                    }
                }
            }
            let (_, r) = best?;
            in_basis[basis[r]] = false;
            in_basis[col] = true;
            pivot(t, basis, r, col);
        }
        None
    }
}

/// Largest weight magnitude the linear program may use, before scaling: bounds the program (an unbounded one
/// already proves the goal unreachable; a bound keeps the answer a finite function that shows it).
const LP_BOUND: f64 = 16.0;

/// The pagoda for `goal` with the least value on `pos` relative to the goal's weight: the linear program
/// "minimise P(pos) subject to `w(to) <= w(from) + w(over)` for every move and `w(goal) = 1`", over signed weights
/// (negative weights are as valid as positive ones, and make the family much stronger: it then contains the
/// position-class functionals and Conway's resource counts). The answer is floating point, so it is made exact:
/// scaled to integers, rounded, lowered by the fix-point of [`largest_below`] if rounding broke an inequality,
/// and returned only if [`is_pagoda`] holds exactly. A wrong floating-point answer can thus only give a weaker
/// function, never an unsound one. `None` when no exact function was found.
pub fn tightest_for(board: &Board, goal: u8, pos: u64, shape: &'static str) -> Option<Pagoda> {
    let idx: Vec<u8> = bits(board.holes).collect();
    let n = idx.len();
    let mut col = [0usize; 64];
    for (i, &h) in idx.iter().enumerate() {
        col[h as usize] = i;
    }
    // Columns: u (n), v (n); w = u - v with 0 <= u, v <= LP_BOUND.
    let mut c = vec![0.0; 2 * n];
    for (i, &h) in idx.iter().enumerate() {
        if pos >> h & 1 == 1 {
            c[i] = 1.0;
            c[n + i] = -1.0;
        }
    }
    let mut rows: Vec<(Vec<f64>, lp::Sense, f64)> =
        Vec::with_capacity(board.moves.len() + 2 * n + 1);
    for m in &board.moves {
        let mut a = vec![0.0; 2 * n];
        for (h, s) in [(m.to, 1.0), (m.from, -1.0), (m.over, -1.0)] {
            a[col[h as usize]] += s;
            a[n + col[h as usize]] -= s;
        }
        rows.push((a, lp::Sense::Le, 0.0));
    }
    for i in 0..2 * n {
        let mut a = vec![0.0; 2 * n];
        a[i] = 1.0;
        rows.push((a, lp::Sense::Le, LP_BOUND));
    }
    let mut a = vec![0.0; 2 * n];
    a[col[goal as usize]] = 1.0;
    a[n + col[goal as usize]] = -1.0;
    rows.push((a, lp::Sense::Eq, 1.0));
    let x = lp::minimise(2 * n, &c, &rows)?;
    let mut weakest: Option<Pagoda> = None;
    // Vertices of this program have small denominators: 2520 = lcm(1..10) makes most of them exact integers.
    for scale in [2520.0, 27_720.0, 60.0, 12.0] {
        let mut w = vec![0i32; 64];
        for (i, &h) in idx.iter().enumerate() {
            w[h as usize] = ((x[i] - x[n + i]) * scale).round() as i32;
        }
        let Some(w) = lower_to_pagoda(board, w) else {
            continue;
        };
        if !is_pagoda(board, &w) {
            continue;
        }
        let p = Pagoda::from_weights(&w, w[goal as usize], shape);
        if p.dead(pos) {
            return Some(p);
        }
        if weakest.is_none() {
            weakest = Some(p);
        }
    }
    weakest
}

/// Largest weight magnitude of an exact function: keeps every peg sum (at most 64 weights) far inside `i32`.
const MAX_WEIGHT: i32 = 1 << 24;

/// [`largest_below`] for signed weights, which may not reach a fix-point (lowering can chase itself around a
/// cycle of moves): gives up after a bounded number of sweeps or when a weight leaves `+-MAX_WEIGHT`.
fn lower_to_pagoda(board: &Board, mut w: Vec<i32>) -> Option<Vec<i32>> {
    if w.iter().any(|x| x.abs() > MAX_WEIGHT) {
        return None;
    }
    for _ in 0..64 {
        let mut changed = false;
        for m in &board.moves {
            let cap = w[m.from as usize] + w[m.over as usize];
            if cap < -MAX_WEIGHT {
                return None;
            }
            if w[m.to as usize] > cap {
                w[m.to as usize] = cap;
                changed = true;
            }
        }
        if !changed {
            return Some(w);
        }
    }
    None
}

/// The pruning test of a game: a position is dead when, for every hole where the last peg may end, one of
/// that hole's functions rules it out.
#[derive(Clone, Debug, Default)]
pub struct Pruner {
    /// (goal hole, its functions).
    pub sets: Vec<(u8, Vec<Pagoda>)>,
}

impl Pruner {
    #[inline]
    pub fn dead(&self, pos: u64) -> bool {
        !self.sets.is_empty()
            && self
                .sets
                .iter()
                .all(|(_, set)| set.iter().any(|p| p.dead(pos)))
    }
}
