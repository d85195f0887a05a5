//! `solve`: one winning move sequence, as fast as possible on every board, with impossibility only ever
//! reported with a proof.
//!
//! Phases, cheapest first (each stops as soon as it has an answer):
//! 1. Invariants: the position classes (`Game::class_obstruction`) and the game's generic pagoda functions
//!    rule out a start/goal pair in microseconds.
//! 2. A depth-first search forward from the start on a small node budget (2^16): children in the order of a
//!    score (isolated pegs first, then distance from the goal) after a seeded shuffle, pruned by the generic
//!    pagodas, with a set of failed positions canonical under the goal's symmetries. Forward, every position
//!    visited is reachable; the original program's backward search remembers boards that are not. The English
//!    board is solved here for every seed measured (tests check seeds 0..100), in a few milliseconds.
//! 3. Stronger pruning: per hole where the last peg may end, the pagoda function from a linear program tuned to
//!    this start ([`pagoda::tightest_for`], signed weights, verified exactly in integers). If it rules out the
//!    start for every such hole, the pair is impossible by that function (a proof `verify` recomputes).
//! 4. The exact endgame table backwards from the goal ([`Endgame`], complete layers up to about 32 k
//!    positions), then beam searches of growing width down to it ([`super::solve_beam`]): the answer for the
//!    45- and 41-hole boards, where a depth-first search gets lost in dead regions far too large for any
//!    failed set. `--seed` breaks ties among equally ranked positions there.
//! 5. The complete search ([`super::solve_layers`]): breadth first, one layer per jump, each layer filtered by
//!    the pruning of phase 3 plus functions that linear programs find on a sample of the layer, and by the
//!    endgame table where it is exact. Only this phase may conclude "impossible by search", and only once a
//!    layer comes out empty.
//!
//! The diamond's starts 1,5 and 4,5 with goal `any` are neither solved by the beams nor ruled out by any single
//! function; they end in phase 5 (`benches/peg.rs` times them).

use super::board::bits;
use super::endgame::Endgame;
use super::game::{Game, Goal, PosSet};
use super::pagoda::{self, Pruner};
use super::solve_beam::{beam, BeamEnv, Ranking};
use super::solve_layers::{LayerOutcome, LayerSearch, SearchProof};
use sweep_space::{Control, Meter, SpaceError};

/// An isolated peg outweighs any distance sum (at most 64 pegs * 8).
const ISOLATED_WEIGHT: u32 = 1 << 10;

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

/// The move-order shuffler (splitmix64, shared by every space: see `sweep_space::rng`), under the name the benches use.
pub use sweep_space::rng::SplitMix64 as SplitMix;

pub struct Solver<'a> {
    game: &'a Game,
    ctl: &'a Control,
    order: Vec<usize>,
    failed: PosSet,
    path: Vec<usize>,
    /// Nodes of every phase, counted once each phase is over (the later phases publish their own progress).
    pub nodes: u64,
    /// The depth-first phase's nodes.
    dfs_meter: Meter<'a>,
    /// Positions expanded while building the endgame table.
    pub table_nodes: u64,
    seed: u64,
    children: ChildOrder,
    /// Nodes left to the depth-first attempt of phase 2.
    budget: u64,
    /// The exact endgame table, built once the first attempt fails.
    endgame: Endgame,
    /// The stronger pruning (generic functions plus the linear program's), built once the first attempt
    /// fails; until then the game's generic functions.
    prune: Option<Pruner>,
    /// What the complete search examined, when it proved the game impossible.
    pub proof: Option<SearchProof>,
}

/// The depth-first phase's order of children, by how promising each is (lower is tried first): pegs with no
/// neighbour first, as a peg that cannot be jumped over or jump is what most dead ends consist of, then the
/// total distance from the goal, so the rim is cleared before the centre.
pub struct ChildOrder {
    /// The holes next to each hole (those a move from it jumps over).
    neighbours: Vec<u64>,
    /// Each hole's distance from the goal (from the centre when any hole is a goal).
    far: Vec<u32>,
}

impl ChildOrder {
    pub fn new(game: &Game) -> ChildOrder {
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
        for h in bits(b.holes) {
            let (r, c) = b.cell_of[h as usize].unwrap_or((0, 0));
            far[h as usize] = (r.abs_diff(gr) + c.abs_diff(gc)) as u32;
        }
        ChildOrder { neighbours, far }
    }

    /// The child position `pos`'s rank: lower is tried first.
    #[inline]
    pub fn score(&self, pos: u64) -> u32 {
        let mut isolated = 0;
        let mut far = 0;
        for b in bits(pos) {
            if pos & self.neighbours[b as usize] == 0 {
                isolated += 1;
            }
            far += self.far[b as usize];
        }
        isolated * ISOLATED_WEIGHT + far
    }
}

/// Why a search stopped without an answer.
enum Stop {
    /// The attempt's node budget ran out: go on with the later phases.
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

/// The depth-first attempt's node budget: enough for the English board with any seed, small next to the beams.
const FIRST_BUDGET: u64 = 1 << 16;

const LP_SHAPE: &str = "signed weights from a linear program";

/// Beam widths tried one after the other before the complete search; at each width every ranking.
const BEAM_WIDTHS: [usize; 4] = [256, 2048, 16_384, 65_536];

/// Weights of the beam's ranking terms (isolated peg, peg/hole contact, distance from the goal). No single
/// ranking suits every board: measured at width 512, "packed" (contacts and distance only) solves every
/// wiegleb start and no diamond one, "loose" (isolated pegs and distance) the diamond's 3,5 and not wiegleb's
/// 3,5; trying each at a small width before any larger one is much cheaper than a wide beam of one ranking.
const RANKINGS: [[u32; 3]; 3] = [[0, 4, 1], [64, 4, 1], [64, 1, 1]];

impl<'a> Solver<'a> {
    pub fn new(game: &'a Game, seed: u64, ctl: &'a Control) -> Solver<'a> {
        let mut rng = SplitMix::new(seed);
        let order = rng.permutation(game.board.moves.len());
        Solver {
            game,
            ctl,
            order,
            failed: PosSet::default(),
            path: Vec::with_capacity(64),
            nodes: 0,
            dfs_meter: Meter::new(ctl),
            table_nodes: 0,
            seed,
            children: ChildOrder::new(game),
            budget: FIRST_BUDGET,
            endgame: Endgame::default(),
            prune: None,
            proof: None,
        }
    }

    pub fn solve(&mut self) -> Result<Outcome, SpaceError> {
        if let Some(why) = self.game.class_obstruction() {
            return Ok(Outcome::ImpossibleByClass(why));
        }
        if let Some(why) = self.game.pagoda_obstruction() {
            return Ok(Outcome::ImpossibleByPagoda(why));
        }
        self.search()
    }

    /// The phases, cheapest first; only the last is complete, and only it may conclude "impossible" by search.
    fn search(&mut self) -> Result<Outcome, SpaceError> {
        // Phase 2: a depth-first attempt on a small budget: the English board with any seed ends here.
        let first = self.dfs(self.game.start, self.game.start.count_ones());
        self.nodes += self.dfs_meter.finish();
        match first {
            Ok(true) => return Ok(Outcome::Solved(std::mem::take(&mut self.path))),
            Ok(false) => return Ok(Outcome::ImpossibleBySearch),
            Err(Stop::Err(e)) => return Err(e),
            Err(Stop::Budget) => {}
        }
        // Phases 3 and 4: stronger pruning, which may prove the game impossible outright; the exact endgame
        // table, then beams of growing width down to it.
        let prune = strong_pruner(self.game);
        if prune.dead(self.game.start) {
            if let Some(why) = obstruction_text(self.game, &prune) {
                return Ok(Outcome::ImpossibleByPagoda(why));
            }
        }
        self.prune = Some(prune);
        self.endgame = Endgame::build(self.game, ENDGAME_CAP, self.ctl, &mut self.table_nodes)?;
        let no_prune = Pruner::default();
        let env = BeamEnv {
            game: self.game,
            table: &self.endgame,
            prune: self.prune.as_ref().unwrap_or(&no_prune),
            ctl: self.ctl,
            order: &self.order,
        };
        for width in BEAM_WIDTHS {
            for weights in RANKINGS {
                let rank = Ranking::new(self.game, weights);
                if let Some(moves) = beam(&env, &rank, width, self.seed, &mut self.nodes)? {
                    return Ok(Outcome::Solved(moves));
                }
            }
        }
        // Phase 5: the complete search, breadth first with functions learned on the way (see
        // [`super::solve_layers`]); the only phase that may conclude "impossible" by search.
        let mut layered = LayerSearch::new(
            self.game,
            self.prune.as_ref().unwrap_or(&no_prune),
            self.ctl,
        );
        let outcome = layered.run(&self.endgame, &self.order);
        self.nodes += layered.nodes;
        match outcome? {
            LayerOutcome::Solved(moves) => Ok(Outcome::Solved(moves)),
            LayerOutcome::Impossible(proof) => {
                self.proof = Some(proof);
                Ok(Outcome::ImpossibleBySearch)
            }
        }
    }

    #[inline]
    fn dead(&self, pos: u64) -> bool {
        match &self.prune {
            Some(p) => p.dead(pos),
            None => self.game.pagoda_dead(pos),
        }
    }

    fn dfs(&mut self, pos: u64, pegs: u32) -> Result<bool, Stop> {
        if pegs == 1 {
            return Ok(self.game.is_goal(pos));
        }
        if self.endgame.covers(pegs) {
            // Exact from here on: walk down through table members only.
            if !self.endgame.contains(self.game, pos) {
                return Ok(false);
            }
        } else if self.dead(pos) {
            return Ok(false);
        }
        if self.budget == 0 {
            return Err(Stop::Budget);
        }
        self.budget -= 1;
        self.dfs_meter.tick()?;
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
                children.push((self.children.score(pos ^ m.flip), mi));
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

/// The holes where the last peg may end: the goal, or for `any` every hole of the start's position class.
pub fn last_holes(game: &Game) -> Vec<u8> {
    match game.goal {
        Goal::Hole(g) => vec![g],
        Goal::Any => {
            let class = game.board.class(game.start);
            bits(game.board.holes)
                .filter(|&h| game.board.class(1u64 << h) == class)
                .collect()
        }
    }
}

/// Per last hole: the generic functions and the linear program's tightest one for this start.
pub fn strong_pruner(game: &Game) -> Pruner {
    let sets = last_holes(game)
        .into_iter()
        .map(|h| {
            let mut set = pagoda::for_goal(&game.board, h);
            if let Some(p) = pagoda::tightest_for(&game.board, h, game.start, LP_SHAPE) {
                set.push(p);
            }
            (h, set)
        })
        .collect();
    Pruner { sets }
}

fn obstruction_text(game: &Game, prune: &Pruner) -> Option<String> {
    let b = &game.board;
    let parts: Vec<String> = prune
        .sets
        .iter()
        .map(|(h, set)| {
            let p = set.iter().find(|p| p.dead(game.start))?;
            Some(format!(
                "for a last peg on {}, {} give {} at the start and {} for the goal",
                b.name(*h),
                p.shape,
                p.value(game.start),
                p.threshold
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(format!(
        "pagoda function: no move raises a weighted peg sum whose weights satisfy w(to) <= w(from) + w(over) \
         for every jump; {}",
        parts.join("; ")
    ))
}

/// Why a pagoda function proves start and goal apart, if one does: the game's generic functions, then the
/// linear program's (recomputed deterministically, so a claimed obstruction can be verified).
pub fn pagoda_obstruction(game: &Game) -> Option<String> {
    game.pagoda_obstruction()
        .or_else(|| obstruction_text(game, &strong_pruner(game)))
}
