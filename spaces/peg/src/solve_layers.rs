//! The complete search of `solve`: breadth first, one layer of positions per number of jumps, each layer
//! filtered by pagoda functions that the search learns from its own positions.
//!
//! Why breadth first: a depth-first search with a failed set proves a game impossible only once it has visited
//! every reachable position that no function rules out, and it meets them in an order that keeps no two alike
//! together. On the diamond from a tip, the generic functions leave 187 M canonical positions after 16 jumps
//! alone, and the depth-first search ran for 25 minutes without an answer. A layer, by contrast, is a sample of
//! what is left: a linear program ([`pagoda::tightest_for`]) on a few hundred of its positions finds the
//! functions that rule out most of the rest, and each one found then costs a few popcounts per position for the
//! remaining layers. With them, the same layer holds 2.0 M positions instead of 187 M (measured on
//! `--board diamond --start 1,5 --goal 9,5`), and the layers stay small enough to keep in memory. Measured
//! (one core, a loaded machine): diamond 1,5 -> any impossible after 163 M positions and 914 functions, 4,5 ->
//! any after 420 M positions and 900 functions (26 min of CPU, 3.5 GB), 1,5 -> 9,5 after 73 M (6 min).
//!
//! Soundness: every function is an exact integer pagoda (`w(to) <= w(from) + w(over)` for every jump, checked
//! by [`pagoda::is_pagoda`] before use), so a position below the goal's value cannot reach the goal, whoever
//! proposed the function. Learning only ever removes positions that cannot win; sampling decides how fast the
//! search is, never what it answers. Layers are canonical under the game's symmetries (those that keep start
//! and goal), so a winning line's images are winning lines too.
//!
//! When a layer comes out empty, no move sequence reaches the goal: impossible, by a search whose size the
//! answer reports. When the last layer holds a goal, the layers are walked back to mark the positions on a
//! winning line and forward again to pick a line, in the move order drawn from `--seed`.

use super::board::Board;
use super::endgame::Endgame;
use super::game::Game;
use super::pagoda::{self, Pagoda, Pruner};
use sweep_space::{Control, SpaceError};

/// Positions of a layer given to the linear program: each program takes about 2 ms on the 41-hole board, and a
/// few hundred per layer find nearly every function that matters (the later layers add a few dozen each).
const LEARN_SAMPLE: usize = 256;
/// At most one program per this many positions of the current layer: on a small layer, keeping a position
/// costs less than a program that might rule it out.
const LEARN_EVERY: usize = 8;
/// Functions kept per last hole: beyond this, those that ruled out nothing in the last layer give way.
const MAX_FUNCTIONS: usize = 1024;
/// Parents expanded per block (and between cancellation checks): their successors, about eight each, are
/// sorted and filtered together.
const BLOCK: usize = 1 << 18;
const LEARNED_SHAPE: &str = "signed weights from a linear program, learned by the complete search";

/// What a complete search that found no winning line examined: the size of the proof.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchProof {
    /// Canonical positions kept over all layers (reachable, and not ruled out).
    pub positions: u64,
    /// The number of jumps after which no position was left.
    pub emptied_after: u32,
    /// Pagoda functions in use at the end (generic, tuned to the start, and learned).
    pub functions: u64,
}

pub enum LayerOutcome {
    /// Move indices into `board.moves`.
    Solved(Vec<usize>),
    Impossible(SearchProof),
}

/// One last hole's functions, most useful first (see [`Flat::reorder`]), so that a dead position is usually
/// recognised by the first function or two.
struct HoleSet {
    hole: u8,
    functions: Vec<Pagoda>,
}

/// Every hole's functions laid out for the expansion's inner loop. A child differs from its parent by one move,
/// so its value under a function is the parent's plus the move's change: one add and one compare instead of a
/// popcount per weight level. A parent's value is computed only when one of its children first needs it.
/// Testing the children before their canonical form is taken is sound: a position and its images under the
/// game's symmetries win or lose together.
struct Flat {
    functions: Vec<Pagoda>,
    /// Per hole, the range of its functions, most useful first.
    ranges: Vec<std::ops::Range<usize>>,
    threshold: Vec<i32>,
    /// `delta[m * n + f]`: what move `m` adds to function `f`: `w(to) - w(from) - w(over)`.
    delta: Vec<i32>,
    /// The current parent's values, valid where `stamp` holds its number.
    value: Vec<i32>,
    stamp: Vec<u64>,
    kills: Vec<u64>,
    passed: Vec<u64>,
}

impl Flat {
    fn new(sets: &[HoleSet], board: &Board) -> Flat {
        let mut functions = Vec::new();
        let mut ranges = Vec::with_capacity(sets.len());
        for set in sets {
            let start = functions.len();
            functions.extend(set.functions.iter().cloned());
            ranges.push(start..functions.len());
        }
        let n = functions.len();
        let mut delta = vec![0i32; board.moves.len() * n];
        for (mi, m) in board.moves.iter().enumerate() {
            for (f, p) in functions.iter().enumerate() {
                delta[mi * n + f] = p.weight(m.to) - p.weight(m.from) - p.weight(m.over);
            }
        }
        Flat {
            threshold: functions.iter().map(|p| p.threshold).collect(),
            ranges,
            delta,
            value: vec![0; n],
            stamp: vec![u64::MAX; n],
            kills: vec![0; n],
            passed: vec![0; sets.len()],
            functions,
        }
    }

    /// Whether the child `parent ^ moves[mi].flip` is dead; `tick` numbers the parent.
    #[inline(always)]
    fn dead_child(&mut self, parent: u64, tick: u64, mi: usize) -> bool {
        if self.ranges.is_empty() {
            return false;
        }
        let n = self.functions.len();
        let delta = &self.delta[mi * n..(mi + 1) * n];
        for (s, range) in self.ranges.iter().enumerate() {
            let mut killed = false;
            for f in range.clone() {
                if self.stamp[f] != tick {
                    self.value[f] = self.functions[f].value(parent);
                    self.stamp[f] = tick;
                }
                if self.value[f] + delta[f] < self.threshold[f] {
                    self.kills[f] += 1;
                    killed = true;
                    break;
                }
            }
            if !killed {
                self.passed[s] += 1;
                return false;
            }
        }
        true
    }

    /// Puts each hole's functions that ruled out most in this layer first (over the cap, drops those that ruled
    /// out nothing), and the holes that let most positions through first: a live position stops at the first
    /// hole none of whose functions rules it out.
    fn reorder(self, sets: &mut Vec<HoleSet>) {
        let mut ranked: Vec<(u64, HoleSet)> = Vec::with_capacity(sets.len());
        for (set, (range, &passed)) in sets.drain(..).zip(self.ranges.iter().zip(&self.passed)) {
            let mut pairs: Vec<(u64, Pagoda)> = self.kills[range.clone()]
                .iter()
                .copied()
                .zip(set.functions)
                .collect();
            pairs.sort_by_key(|p| std::cmp::Reverse(p.0));
            if pairs.len() > MAX_FUNCTIONS {
                pairs.retain(|(k, _)| *k > 0);
                pairs.truncate(MAX_FUNCTIONS);
            }
            let functions = pairs.into_iter().map(|(_, p)| p).collect();
            ranked.push((
                passed,
                HoleSet {
                    hole: set.hole,
                    functions,
                },
            ));
        }
        ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
        sets.extend(ranked.into_iter().map(|(_, set)| set));
    }
}

/// The children of `parents` that no function rules out (all of them when `exact`), canonical, into `block`.
#[inline(always)]
fn expand_inner(
    game: &Game,
    flat: &mut Flat,
    parents: &[u64],
    exact: bool,
    tick: &mut u64,
    block: &mut Vec<u64>,
) {
    for &pos in parents {
        *tick += 1;
        for (mi, m) in game.board.moves.iter().enumerate() {
            if m.applies(pos) && (exact || !flat.dead_child(pos, *tick, mi)) {
                block.push(game.canon(&game.game_group, pos ^ m.flip));
            }
        }
    }
}

/// [`expand_inner`] compiled for CPUs with a popcount instruction: a function's value is a popcount per weight
/// level, and the portable build (x86-64 without it) emulates each one with a dozen vector instructions, which
/// was most of the search's time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn expand_popcnt(
    game: &Game,
    flat: &mut Flat,
    parents: &[u64],
    exact: bool,
    tick: &mut u64,
    block: &mut Vec<u64>,
) {
    expand_inner(game, flat, parents, exact, tick, block)
}

fn expand(
    game: &Game,
    flat: &mut Flat,
    parents: &[u64],
    exact: bool,
    tick: &mut u64,
    block: &mut Vec<u64>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: `expand_popcnt` only needs the popcnt instruction, which the CPU was just found to have.
        unsafe { expand_popcnt(game, flat, parents, exact, tick, block) };
        return;
    }
    expand_inner(game, flat, parents, exact, tick, block)
}

pub struct LayerSearch<'a> {
    game: &'a Game,
    ctl: &'a Control,
    sets: Vec<HoleSet>,
    /// Positions expanded (a progress figure).
    pub nodes: u64,
}

impl<'a> LayerSearch<'a> {
    /// Starts from the solver's pruning (the generic functions and the ones tuned to the start).
    pub fn new(game: &'a Game, prune: &Pruner, ctl: &'a Control) -> LayerSearch<'a> {
        let sets = prune
            .sets
            .iter()
            .map(|(h, f)| HoleSet {
                hole: *h,
                functions: f.clone(),
            })
            .collect();
        LayerSearch {
            game,
            ctl,
            sets,
            nodes: 0,
        }
    }

    /// Runs the linear program on a sample of the next layer and keeps every exact function that rules out a
    /// position the current ones let through. The sample is one successor of each of a few hundred positions
    /// spread over the whole current layer, so it is drawn from all of the next one before any of it is built.
    fn learn(&mut self, layer: &[u64]) {
        let game = self.game;
        let samples = (layer.len() / LEARN_EVERY).min(LEARN_SAMPLE);
        if samples == 0 {
            return;
        }
        let step = layer.len() / samples;
        for (i, &parent) in layer.iter().step_by(step).take(samples).enumerate() {
            let successors: Vec<u64> = game
                .board
                .moves
                .iter()
                .filter(|m| m.applies(parent))
                .map(|m| game.canon(&game.game_group, parent ^ m.flip))
                .collect();
            let Some(&pos) = successors.get(i % successors.len().max(1)) else {
                continue;
            };
            for set in &mut self.sets {
                if set.functions.iter().any(|p| p.dead(pos)) {
                    continue;
                }
                match pagoda::tightest_for(&game.board, set.hole, pos, LEARNED_SHAPE) {
                    Some(p) if p.dead(pos) => {
                        set.functions.push(p);
                    }
                    // Alive for this hole: the other holes' programs cannot make it dead.
                    _ => break,
                }
            }
        }
    }

    /// Canonical successors of `layer`, sorted and distinct, without the dead ones (where the endgame table
    /// covers the layer's peg count, its exact membership replaces the functions). Built a block of parents
    /// at a time and filtered per block, so that only survivors, about a fifth of the distinct successors on
    /// the diamond, are ever held for the whole layer.
    fn next_layer(
        &mut self,
        layer: &[u64],
        endgame: &Endgame,
        pegs: u32,
    ) -> Result<Vec<u64>, SpaceError> {
        let game = self.game;
        let exact = endgame.covers(pegs);
        if !exact {
            self.learn(layer);
        }
        let mut flat = Flat::new(&self.sets, &game.board);
        let mut kept: Vec<u64> = Vec::new();
        let mut block: Vec<u64> = Vec::new();
        let mut tick = 0u64;
        for parents in layer.chunks(BLOCK) {
            block.clear();
            expand(game, &mut flat, parents, exact, &mut tick, &mut block);
            block.sort_unstable();
            block.dedup();
            if exact {
                block.retain(|&p| endgame.contains(game, p));
            }
            kept.extend_from_slice(&block);
            self.nodes += parents.len() as u64;
            self.ctl.checkpoint(parents.len() as u64)?;
        }
        kept.sort_unstable();
        kept.dedup();
        kept.shrink_to_fit();
        flat.reorder(&mut self.sets);
        Ok(kept)
    }

    /// The search. `order` is the move order drawn from `--seed`, used to choose among winning lines.
    pub fn run(&mut self, endgame: &Endgame, order: &[usize]) -> Result<LayerOutcome, SpaceError> {
        let game = self.game;
        let depth = game.depth();
        let mut layers: Vec<Vec<u64>> = vec![vec![game.canon(&game.game_group, game.start)]];
        let mut positions = 1u64;
        for k in 1..=depth {
            let pegs = game.start.count_ones() - k;
            let prev = layers.last().map_or(&[][..], Vec::as_slice);
            let next = self.next_layer(prev, endgame, pegs)?;
            positions += next.len() as u64;
            if next.is_empty() || (k == depth && !next.iter().any(|&p| game.is_goal(p))) {
                return Ok(LayerOutcome::Impossible(SearchProof {
                    positions,
                    emptied_after: k,
                    functions: self.sets.iter().map(|s| s.functions.len() as u64).sum(),
                }));
            }
            layers.push(next);
        }
        Ok(LayerOutcome::Solved(self.walk(layers, order)))
    }

    /// Marks, from the last layer back, the positions with a successor on a winning line, then follows them
    /// forward from the real start (not its canonical image), so the moves apply to the board as set up.
    fn walk(&self, mut layers: Vec<Vec<u64>>, order: &[usize]) -> Vec<usize> {
        let game = self.game;
        let group = &game.game_group;
        let moves = &game.board.moves;
        if let Some(last) = layers.last_mut() {
            last.retain(|&p| game.is_goal(p));
        }
        for k in (0..layers.len().saturating_sub(1)).rev() {
            let (head, tail) = layers.split_at_mut(k + 1);
            let on_next = &tail[0];
            head[k].retain(|&p| {
                moves.iter().any(|m| {
                    m.applies(p)
                        && on_next
                            .binary_search(&game.canon(group, p ^ m.flip))
                            .is_ok()
                })
            });
        }
        let mut pos = game.start;
        let mut path = Vec::with_capacity(layers.len());
        for on_next in layers.iter().skip(1) {
            let Some(&mi) = order.iter().find(|&&mi| {
                moves[mi].applies(pos)
                    && on_next
                        .binary_search(&game.canon(group, pos ^ moves[mi].flip))
                        .is_ok()
            }) else {
                break;
            };
            path.push(mi);
            pos ^= moves[mi].flip;
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::board::{bits, Board, BoardKind};
    use crate::game::Goal;
    use crate::solve::{self, Solver};
    use crate::tests::{custom_board, naive_count};

    fn games() -> Vec<Game> {
        let mut games = Vec::new();
        // Every start of the triangle; a third of the other board's (each has 17 goals).
        for (board, every) in [(Board::new(BoardKind::Triangle), 1), (custom_board(), 3)] {
            for start in bits(board.holes).step_by(every) {
                games.push(Game::new(board.clone(), start, Goal::Any));
                for goal in bits(board.holes) {
                    games.push(Game::new(board.clone(), start, Goal::Hole(goal)));
                }
            }
        }
        games
    }

    /// The layered search decides every start and goal of two small boards exactly as a plain exhaustive
    /// search does, with and without the endgame table, and every line it returns replays to the goal.
    #[test]
    fn decides_every_small_game_like_a_plain_search() {
        let ctl = Control::new();
        let (mut solved, mut impossible) = (0, 0);
        for game in games() {
            let truth = naive_count(&game, game.start, &mut HashMap::new()) > 0;
            let prune = solve::strong_pruner(&game);
            let mut nodes = 0;
            let tables = [
                Endgame::default(),
                Endgame::build(&game, 64, &ctl, &mut nodes).expect("table"),
            ];
            for table in &tables {
                let mut search = LayerSearch::new(&game, &prune, &ctl);
                let order: Vec<usize> = (0..game.board.moves.len()).collect();
                let what = format!(
                    "{:?} start {} goal {:?}",
                    game.board.kind,
                    game.board.name(game.start_hole),
                    game.goal
                );
                match search.run(table, &order).expect("search") {
                    LayerOutcome::Solved(moves) => {
                        assert!(truth, "{what}: solved an impossible game");
                        game.replay_indices(&moves)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        solved += 1;
                    }
                    LayerOutcome::Impossible(proof) => {
                        assert!(!truth, "{what}: called a winnable game impossible");
                        assert!(proof.emptied_after >= 1 && proof.emptied_after <= game.depth());
                        impossible += 1;
                    }
                }
            }
        }
        // Both outcomes are exercised, many times over.
        assert!(
            solved > 100 && impossible > 100,
            "{solved} solved, {impossible} impossible"
        );
    }

    /// Every function the search learns is an exact pagoda for its hole.
    #[test]
    fn learned_functions_are_pagodas() {
        let ctl = Control::new();
        let mut learned = 0;
        for game in games().into_iter().step_by(11) {
            let prune = solve::strong_pruner(&game);
            let before: usize = prune.sets.iter().map(|(_, f)| f.len()).sum();
            let mut search = LayerSearch::new(&game, &prune, &ctl);
            let order: Vec<usize> = (0..game.board.moves.len()).collect();
            search.run(&Endgame::default(), &order).expect("search");
            let after: usize = search.sets.iter().map(|s| s.functions.len()).sum();
            learned += after.saturating_sub(before);
            for set in &search.sets {
                for p in &set.functions {
                    assert!(pagoda::is_pagoda(&game.board, &pagoda::weights(p)));
                }
            }
        }
        assert!(learned > 0, "no function was learned on any game");
    }

    /// The solver's complete phase ends where the old depth-first search could not: diamond 1,5 to 9,5, an
    /// impossible game that no single function rules out. About six minutes of CPU and 0.6 GB: run
    /// with `cargo test -p sweep-peg --release diamond_tip_to_tip -- --ignored`.
    #[test]
    #[ignore]
    fn diamond_tip_to_tip_is_impossible_by_search() {
        let board = Board::new(BoardKind::Diamond);
        let start = board.parse_hole("1,5").expect("hole");
        let goal = board.parse_hole("9,5").expect("hole");
        let game = Game::new(board, start, Goal::Hole(goal));
        let ctl = Control::new();
        let mut solver = Solver::new(&game, 0, &ctl);
        assert_eq!(
            solver.solve().expect("solve"),
            solve::Outcome::ImpossibleBySearch
        );
        let proof = solver.proof.expect("the layered search's proof");
        assert!(proof.positions > 1_000_000 && proof.emptied_after < game.depth());
    }
}
