//! A game: a board with a start position and a goal, the symmetry groups that keep them, and the invariants.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::board::{bits, Board};
use super::pagoda::{self, Pagoda};

/// Where the last peg must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    /// One peg on this hole (a bit index).
    Hole(u8),
    /// One peg anywhere.
    Any,
}

/// A multiplicative hash for positions: std's SipHash costs more than the rest of a node's work, and positions
/// are not attacker-chosen.
#[derive(Default, Clone, Copy)]
pub struct PosHasher(u64);

impl Hasher for PosHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

pub type PosBuild = BuildHasherDefault<PosHasher>;
pub type PosMap<V> = HashMap<u64, V, PosBuild>;
pub type PosSet = HashSet<u64, PosBuild>;

/// A well-mixed 64-bit hash of a position, used to assign positions to chunks (independent of `PosHasher`, so
/// a chunk's own hash table does not see only keys of one residue class).
pub fn owner_hash(pos: u64) -> u64 {
    // splitmix64's first output for seed `pos` (frozen in `sweep_space::rng`: chunk ownership must not move).
    sweep_space::rng::SplitMix64::new(pos).next_u64()
}

#[derive(Clone, Debug)]
pub struct Game {
    pub board: Board,
    pub start_hole: u8,
    pub start: u64,
    pub goal: Goal,
    /// Symmetries that keep the goal: the number of ways to win is the same from every image under them.
    pub goal_group: Vec<usize>,
    /// Symmetries that keep start and goal: the reachable and the winning sets are closed under them.
    pub game_group: Vec<usize>,
    /// Pagoda functions for the goal hole; for `Goal::Any`, one set per hole where the last peg can end (the
    /// holes of the start's class), and a position is dead when every one of those sets rules it out.
    pub pagodas: Vec<Vec<Pagoda>>,
}

impl Game {
    pub fn new(board: Board, start_hole: u8, goal: Goal) -> Game {
        let start = board.holes & !(1u64 << start_hole);
        let keeps = |g: usize, b: u8| board.symmetries[g].perm[b as usize] == b;
        let goal_group: Vec<usize> = (0..board.symmetries.len())
            .filter(|&g| match goal {
                Goal::Hole(b) => keeps(g, b),
                Goal::Any => true,
            })
            .collect();
        let game_group = goal_group
            .iter()
            .copied()
            .filter(|&g| keeps(g, start_hole))
            .collect();
        let pagodas = match goal {
            Goal::Hole(g) => vec![pagoda::for_goal(&board, g)],
            Goal::Any => {
                let class = board.class(start);
                bits(board.holes)
                    .filter(|&h| board.class(1u64 << h) == class)
                    .map(|h| pagoda::for_goal(&board, h))
                    .collect()
            }
        };
        Game {
            board,
            start_hole,
            start,
            goal,
            goal_group,
            game_group,
            pagodas,
        }
    }

    /// Moves from start to a one-peg position.
    pub fn depth(&self) -> u32 {
        self.start.count_ones() - 1
    }

    #[inline]
    pub fn is_goal(&self, pos: u64) -> bool {
        match self.goal {
            Goal::Hole(b) => pos == 1u64 << b,
            Goal::Any => pos.count_ones() == 1,
        }
    }

    /// The smallest image of `pos` under `group`.
    #[inline]
    pub fn canon(&self, group: &[usize], pos: u64) -> u64 {
        let mut best = pos;
        for &g in group {
            best = best.min(self.board.symmetries[g].apply(pos));
        }
        best
    }

    /// How many images of `pos` under `group` differ (orbit size).
    pub fn orbit_size(&self, group: &[usize], pos: u64) -> u64 {
        let fixed = group
            .iter()
            .filter(|&&g| self.board.symmetries[g].apply(pos) == pos)
            .count();
        (group.len() / fixed.max(1)) as u64
    }

    /// True when a pagoda function proves that `pos` cannot reach the goal.
    #[inline]
    pub fn pagoda_dead(&self, pos: u64) -> bool {
        !self.pagodas.is_empty()
            && self
                .pagodas
                .iter()
                .all(|set| set.iter().any(|p| p.dead(pos)))
    }

    /// Why no move sequence can lead from start to goal, when a pagoda function proves it.
    pub fn pagoda_obstruction(&self) -> Option<String> {
        if !self.pagoda_dead(self.start) {
            return None;
        }
        let first = self
            .pagodas
            .iter()
            .flat_map(|set| set.iter())
            .find(|p| p.dead(self.start))?;
        Some(format!(
            "pagoda function ({}): no move raises its weighted peg sum, which is {} at the start and {} for the \
             goal{}",
            first.shape,
            first.value(self.start),
            first.threshold,
            if self.pagodas.len() > 1 {
                " (and likewise for every hole where the last peg could end)"
            } else {
                ""
            }
        ))
    }

    /// Why no move sequence can lead from start to goal, when the position classes prove it.
    pub fn class_obstruction(&self) -> Option<String> {
        let b = &self.board;
        let start_class = b.class(self.start);
        let witness = |target: u64| {
            b.class_basis
                .iter()
                .find(|&&w| (self.start & w).count_ones() % 2 != (target & w).count_ones() % 2)
                .copied()
        };
        match self.goal {
            Goal::Hole(g) => {
                let target = 1u64 << g;
                if b.class(target) == start_class {
                    return None;
                }
                let w = witness(target).unwrap_or(0);
                Some(format!(
                    "position class: every move flips an even number of the holes {{{}}}, so the parity of the \
                     pegs on them never changes; the start has {} there, a single peg on {} has {}",
                    b.names(w),
                    (self.start & w).count_ones(),
                    b.name(g),
                    (target & w).count_ones()
                ))
            }
            Goal::Any => {
                let possible: Vec<u8> = bits(b.holes)
                    .filter(|&h| b.class(1u64 << h) == start_class)
                    .collect();
                if possible.is_empty() {
                    Some(format!(
                        "position class: no single peg has the start's class (parities of the pegs on the \
                         invariant hole sets {})",
                        b.class_basis
                            .iter()
                            .map(|&w| format!("{{{}}}", b.names(w)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                } else {
                    None
                }
            }
        }
    }

    /// [`Game::replay`] for moves given as indices into `board.moves`, as the solvers return them.
    pub fn replay_indices(&self, moves: &[usize]) -> Result<Vec<u64>, String> {
        let triples = moves
            .iter()
            .map(|&i| {
                let m = self
                    .board
                    .moves
                    .get(i)
                    .ok_or_else(|| format!("move index {i} is not a jump of this board"))?;
                Ok((m.from, m.over, m.to))
            })
            .collect::<Result<Vec<_>, String>>()?;
        self.replay(&triples)
    }

    /// Replays `moves` from the start: each must apply; the last position must be the goal.
    pub fn replay(&self, moves: &[(u8, u8, u8)]) -> Result<Vec<u64>, String> {
        let mut pos = self.start;
        let mut boards = vec![pos];
        for (i, &(f, o, t)) in moves.iter().enumerate() {
            let Some(m) = self
                .board
                .moves
                .iter()
                .find(|m| m.from == f && m.over == o && m.to == t)
            else {
                return Err(format!(
                    "move {} ({f} over {o} to {t}) is not a jump of this board",
                    i + 1
                ));
            };
            if !m.applies(pos) {
                return Err(format!(
                    "move {} ({} over {} to {}) does not apply",
                    i + 1,
                    self.board.name(f),
                    self.board.name(o),
                    self.board.name(t)
                ));
            }
            pos ^= m.flip;
            boards.push(pos);
        }
        if !self.is_goal(pos) {
            return Err(format!(
                "the moves end with pegs on {{{}}}, not the goal",
                self.board.names(pos)
            ));
        }
        Ok(boards)
    }
}
