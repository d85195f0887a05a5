//! `solve`: one winning move sequence, found by a forward depth-first search.
//!
//! Why forward and not the seed's backward search: forward from the start, every position visited is reachable,
//! and a position from which the goal cannot be reached is remembered (canonical under the symmetries that keep
//! the goal, so one failure rules out all its images). The seed remembers every board seen backwards from the
//! goal, most of which are not reachable from the start at all. Before searching, the position-class invariant
//! rules out start/goal pairs that can never meet (e.g. the centre game on the European board) in microseconds.
//!
//! Children are tried in order of a score (isolated pegs first, then distance from the goal), which keeps the
//! English board at about 43 k nodes for every seed; `--seed S` shuffles the move list (splitmix64 +
//! Fisher-Yates) before the stable sort, so it decides among equal scores, reproducibly. A node budget with
//! restarts (doubling budgets, reshuffled order, failed set kept) bounds the heavy tail a fixed order has.
//! The larger boards (wiegleb, european from some holes) still take seconds or more: the score is a heuristic,
//! not a pagoda-function bound.

use super::game::{Game, Goal, PosSet};
use crate::space::{Control, SpaceError};

/// An isolated peg outweighs any distance sum (at most 64 pegs * 8).
const ISOLATED_WEIGHT: u32 = 1 << 10;

/// Nodes between cancellation checks.
const CHECK_EVERY: u64 = 1 << 14;

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The moves as indices into `board.moves`.
    Solved(Vec<usize>),
    /// The position class proves the goal unreachable.
    ImpossibleByClass(String),
    /// Every reachable position was searched.
    ImpossibleBySearch,
}

/// splitmix64: a tiny, well-mixed generator, enough to shuffle a move order.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A uniformly shuffled `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

pub struct Solver<'a> {
    game: &'a Game,
    ctl: &'a Control,
    order: Vec<usize>,
    failed: PosSet,
    path: Vec<usize>,
    pub nodes: u64,
    seed: u64,
    neighbours: Vec<u64>,
    far: Vec<u32>,
    /// Nodes left in the current attempt.
    budget: u64,
    /// From the second attempt on, a small random term in each score varies the order between attempts.
    jitter: Option<SplitMix>,
}

/// Why a search stopped without an answer.
enum Stop {
    /// The attempt's node budget ran out: restart with another order (the failed set is kept).
    Budget,
    Err(SpaceError),
}

impl From<SpaceError> for Stop {
    fn from(e: SpaceError) -> Stop {
        Stop::Err(e)
    }
}

/// The first attempt's node budget; each restart doubles it, so the total stays within twice the last budget.
const FIRST_BUDGET: u64 = 1 << 17;

impl<'a> Solver<'a> {
    pub fn new(game: &'a Game, seed: u64, ctl: &'a Control) -> Solver<'a> {
        let mut rng = SplitMix::new(seed);
        let order = rng.permutation(game.board.moves.len());
        let b = &game.board;
        let (gr, gc) = match game.goal {
            Goal::Hole(h) => b.cell_of[h as usize].unwrap_or((b.rows / 2, b.cols / 2)),
            Goal::Any => (b.rows / 2, b.cols / 2),
        };
        let mut neighbours = vec![0u64; 64];
        let mut far = vec![0u32; 64];
        for m in &b.moves {
            neighbours[m.from as usize] |= 1u64 << m.over;
        }
        for h in super::board::bits(b.holes) {
            let (r, c) = b.cell_of[h as usize].unwrap_or((0, 0));
            far[h as usize] = (r.abs_diff(gr) + c.abs_diff(gc)) as u32;
        }
        Solver {
            game,
            ctl,
            order,
            failed: PosSet::default(),
            path: Vec::with_capacity(64),
            nodes: 0,
            seed,
            neighbours,
            far,
            budget: FIRST_BUDGET,
            jitter: None,
        }
    }

    pub fn solve(&mut self) -> Result<Outcome, SpaceError> {
        if let Some(why) = self.game.class_obstruction() {
            return Ok(Outcome::ImpossibleByClass(why));
        }
        // Restarts: a depth-first search with a fixed order has a heavy-tailed run time (one early move into a
        // large dead region costs everything); restarting with a varied order and a doubled budget cuts the tail.
        // Positions proved dead stay in the failed set, so no attempt's work is lost, and the last attempt's
        // budget grows without bound, so an impossible game still ends with a full search.
        let mut attempt = 0u64;
        let found = loop {
            self.path.clear();
            match self.dfs(self.game.start, self.game.start.count_ones()) {
                Ok(found) => break found,
                Err(Stop::Err(e)) => return Err(e),
                Err(Stop::Budget) => {
                    attempt += 1;
                    self.budget = FIRST_BUDGET << attempt.min(40);
                    let mut rng =
                        SplitMix::new(self.seed ^ attempt.wrapping_mul(0xA076_1D64_78BD_642F));
                    self.order = rng.permutation(self.game.board.moves.len());
                    self.jitter = Some(rng);
                }
            }
        };
        self.ctl.add_nodes(self.nodes % CHECK_EVERY);
        Ok(if found {
            Outcome::Solved(std::mem::take(&mut self.path))
        } else {
            Outcome::ImpossibleBySearch
        })
    }

    /// How promising a child is (lower is tried first): pegs with no neighbour first, as a peg that cannot be
    /// jumped over or jump is what most dead ends consist of, then the total distance from the centre, so the
    /// rim is cleared before the centre.
    fn score(&mut self, pos: u64) -> u32 {
        let mut isolated = 0;
        let mut far = 0;
        for b in super::board::bits(pos) {
            if pos & self.neighbours[b as usize] == 0 {
                isolated += 1;
            }
            far += self.far[b as usize];
        }
        let noise = self
            .jitter
            .as_mut()
            .map_or(0, |r| (r.next_u64() % 4) as u32);
        isolated * ISOLATED_WEIGHT + far + noise
    }

    fn dfs(&mut self, pos: u64, pegs: u32) -> Result<bool, Stop> {
        if pegs == 1 {
            return Ok(self.game.is_goal(pos));
        }
        if self.budget == 0 {
            return Err(Stop::Budget);
        }
        self.budget -= 1;
        self.nodes += 1;
        if self.nodes.is_multiple_of(CHECK_EVERY) {
            self.ctl.checkpoint(CHECK_EVERY)?;
        }
        let key = self.game.canon(&self.game.goal_group, pos);
        if self.failed.contains(&key) {
            return Ok(false);
        }
        let moves = &self.game.board.moves;
        let order = std::mem::take(&mut self.order);
        let mut children: Vec<(u32, usize)> = Vec::with_capacity(16);
        for &mi in &order {
            let m = moves[mi];
            if m.applies(pos) {
                children.push((self.score(pos ^ m.flip), mi));
            }
        }
        self.order = order;
        children.sort_by_key(|c| c.0);
        for (_, mi) in children {
            let m = moves[mi];
            self.path.push(mi);
            if self.dfs(pos ^ m.flip, pegs - 1)? {
                return Ok(true);
            }
            self.path.pop();
        }
        self.failed.insert(key);
        Ok(false)
    }
}
