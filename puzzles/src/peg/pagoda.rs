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
    /// (weight, holes with that weight), weights > 0.
    levels: Vec<(u32, u64)>,
    /// `P(goal)`: a position below it is dead.
    pub threshold: u32,
    /// What the weights look like, for explanations.
    pub shape: &'static str,
}

impl Pagoda {
    fn from_weights(w: &[u32], threshold: u32, shape: &'static str) -> Pagoda {
        let mut levels: Vec<(u32, u64)> = Vec::new();
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

    #[inline]
    pub fn value(&self, pos: u64) -> u32 {
        self.levels
            .iter()
            .map(|&(w, m)| w * (pos & m).count_ones())
            .sum()
    }

    /// The weight of one hole.
    pub fn weight(&self, bit: u8) -> u32 {
        self.value(1u64 << bit)
    }

    /// True when no move sequence can lead from `pos` to the goal this function was built for.
    #[inline]
    pub fn dead(&self, pos: u64) -> bool {
        self.value(pos) < self.threshold
    }
}

/// Largest pagoda below the target `t` (indexed by bit; holes only).
fn largest_below(board: &Board, mut w: Vec<u32>) -> Vec<u32> {
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
pub fn is_pagoda(board: &Board, w: &[u32]) -> bool {
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
    let target = |f: &dyn Fn(u8) -> u32| -> Vec<u32> {
        let mut t = vec![0u32; 64];
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
            fib(far + 2 - dh)
        }
    };
    let mut targets: Vec<(&'static str, Vec<u32>)> = vec![
        (
            "soldier (Fibonacci of the distance to the goal)",
            target(&soldier),
        ),
        (
            "the goal's parity sub-lattice",
            target(&|h| u32::from(same_lattice(h))),
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
            targets.push((name, target(&|h| u32::from(coord(cell(h)) % 3 != k))));
        }
    }
    let mut out: Vec<Pagoda> = Vec::new();
    for (shape, t) in targets {
        let w = largest_below(board, t);
        let threshold = w[goal as usize];
        if threshold == 0 || !is_pagoda(board, &w) {
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
pub fn weights(p: &Pagoda) -> Vec<u32> {
    (0..64u8).map(|b| p.weight(b)).collect()
}
