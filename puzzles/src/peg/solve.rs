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
//!
//! Pruning: every node is checked against the goal's pagoda functions ([`super::pagoda`]; for `--goal any`, a
//! position is dead when the functions of every class-compatible last hole rule it out), and a start that a
//! pagoda already rules out is reported impossible without search. When the first attempt's budget runs out,
//! an endgame table is built backwards from the goal (complete layers, up to about 32 k positions): from then on
//! positions with few pegs are decided exactly by a lookup, and the last moves are walked through the table.
//! The English board is solved within the first attempt (2-30 ms for every seed measured), so it never pays
//! for the table. Measured weakness: the generated pagodas are generic (soldier weights, parity sub-lattice,
//! lines mod 3) and prune little on the larger boards; european from 1,3 or 2,4 to any hole takes 0.3-4 s
//! for some seeds, and wiegleb's and diamond's solvable games can take more than a minute.

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
    /// A pagoda function proves the goal unreachable.
    ImpossibleByPagoda(String),
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
    /// Positions expanded while building the endgame table.
    pub table_nodes: u64,
    seed: u64,
    neighbours: Vec<u64>,
    far: Vec<u32>,
    /// Nodes left in the current attempt.
    budget: u64,
    /// From the second attempt on, a small random term in each score varies the order between attempts.
    jitter: Option<SplitMix>,
    /// The endgame table: `endgame[j]` holds every position with `j + 1` pegs (canonical under `goal_group`)
    /// from which the goal can be reached.
    endgame: Vec<PosSet>,
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

/// Most positions the endgame table holds before its last layer (which is always complete): under a second of
/// building, and it makes the last ten to fifteen moves of every search exact.
const ENDGAME_CAP: usize = 1 << 15;

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
            table_nodes: 0,
            seed,
            neighbours,
            far,
            budget: FIRST_BUDGET,
            jitter: None,
            endgame: Vec::new(),
        }
    }

    /// Builds the endgame table backwards from the goal: a reverse move needs a peg on `to` and both `from` and
    /// `over` empty. Layers are added while the table holds fewer than `ENDGAME_CAP` positions; each layer is
    /// complete, so membership is exact: a position with few enough pegs reaches the goal iff it is in the table.
    fn build_endgame(&mut self) -> Result<(), SpaceError> {
        let g = self.game;
        let group = &g.goal_group;
        let mut layer: PosSet = match g.goal {
            Goal::Hole(h) => [1u64 << h].into_iter().collect(),
            Goal::Any => super::board::bits(g.board.holes)
                .map(|h| g.canon(group, 1u64 << h))
                .collect(),
        };
        let mut total = layer.len();
        let last = g.start.count_ones() as usize;
        self.endgame.clear();
        while self.endgame.len() + 1 < last && total <= ENDGAME_CAP {
            let mut next = PosSet::default();
            for &pos in &layer {
                for m in &g.board.moves {
                    if pos & m.flip == 1u64 << m.to {
                        next.insert(g.canon(group, pos ^ m.flip));
                    }
                }
            }
            self.table_nodes += layer.len() as u64;
            self.ctl.checkpoint(layer.len() as u64)?;
            total += next.len();
            self.endgame.push(std::mem::replace(&mut layer, next));
        }
        self.endgame.push(layer);
        Ok(())
    }

    pub fn solve(&mut self) -> Result<Outcome, SpaceError> {
        if let Some(why) = self.game.class_obstruction() {
            return Ok(Outcome::ImpossibleByClass(why));
        }
        if let Some(why) = self.game.pagoda_obstruction() {
            return Ok(Outcome::ImpossibleByPagoda(why));
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
                    if attempt == 1 {
                        // A board the first budget does not solve gets the endgame table; the English board
                        // with any seed never needs it (it is solved within the first budget).
                        self.build_endgame()?;
                    }
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
        if let Some(table) = self.endgame.get(pegs as usize - 1) {
            // Exact from here on: walk down through table members only.
            if !table.contains(&self.game.canon(&self.game.goal_group, pos)) {
                return Ok(false);
            }
        } else if self.game.pagoda_dead(pos) {
            return Ok(false);
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
