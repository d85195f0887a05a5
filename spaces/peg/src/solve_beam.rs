//! Beam search for `solve`: breadth-first by peg count, keeping only the `width` most promising positions of
//! each layer, until a layer meets the exact endgame table.
//!
//! Why: a depth-first search commits to its first moves; on the 41- and 45-hole boards one early move into a
//! large dead region costs minutes before the search backs out of it, and a failed-position set does not help
//! because the dead region is astronomically large. A beam looks at many alternatives of the same depth side
//! by side and drops the worst, so a bad early move costs one slot, not the whole run. The beam is incomplete
//! (it may drop every winning line), so [`super::solve`] runs it with growing widths and falls back to the
//! complete depth-first search; an impossibility is never concluded from a beam.
//!
//! The ranking keeps the pegs packed and near the goal: the number of peg/hole contacts along the lines
//! (perimeter), the sum of the pegs' distances from the goal, and a heavy penalty per isolated peg. These are
//! the measures of how "clearable" a position looks: a packed group can be cleared by standard packages, a
//! scattered one strands pegs. A seeded hash of the position breaks ties, so `--seed` picks among equally
//! ranked positions reproducibly.

use super::board::bits;
use super::endgame::Endgame;
use super::game::{Game, Goal, PosSet};
use super::pagoda::Pruner;
use sweep_space::{Control, SpaceError};

/// One kept position: where it came from, for the path back to the start.
#[derive(Clone, Copy)]
struct Node {
    pos: u64,
    /// Index of the parent in the previous layer.
    parent: u32,
    /// The move (index into `board.moves`) from the parent.
    mv: u16,
    /// Its rank, kept so a child's is an update of three holes' surroundings.
    score: u32,
}

/// A child candidate: sort key first, so sorting the tuples ranks them.
type Candidate = (u32, u64, u64, u32, u16);

/// Precomputed per-hole data of the ranking.
pub struct Ranking {
    /// `adj[h]`: holes next to `h` along some line of the board.
    adj: Vec<u64>,
    /// Distance weight of a peg on each hole.
    dist: Vec<u32>,
    holes: u64,
    /// Weights of the terms: isolated peg, peg/hole contact, distance.
    weights: [u32; 3],
}

impl Ranking {
    pub fn new(game: &Game, weights: [u32; 3]) -> Ranking {
        let b = &game.board;
        let mut adj = vec![0u64; 64];
        for m in &b.moves {
            adj[m.from as usize] |= 1u64 << m.over;
            adj[m.over as usize] |= 1u64 << m.from;
        }
        let (gr, gc) = match game.goal {
            Goal::Hole(h) => b.cell_of[h as usize].unwrap_or((b.rows / 2, b.cols / 2)),
            Goal::Any => (b.rows / 2, b.cols / 2),
        };
        let mut dist = vec![0u32; 64];
        for h in bits(b.holes) {
            let (r, c) = b.cell_of[h as usize].unwrap_or((gr, gc));
            let d = (r.abs_diff(gr) + c.abs_diff(gc)) as u32;
            dist[h as usize] = d;
        }
        Ranking {
            adj,
            dist,
            holes: b.holes,
            weights,
        }
    }

    /// Lower is better.
    pub fn score(&self, pos: u64) -> u32 {
        self.partial(pos, self.holes)
    }

    /// The score of `pos ^ flip` from the score of `pos`: a peg's term depends only on its neighbours, so only
    /// the flipped holes and their neighbours change (a few holes instead of every peg).
    #[inline]
    pub fn child_score(&self, pos: u64, score: u32, flip: u64) -> u32 {
        let mut near = flip;
        for h in bits(flip) {
            near |= self.adj[h as usize];
        }
        score + self.partial(pos ^ flip, near) - self.partial(pos, near)
    }

    /// The terms of the pegs of `pos` on the holes `within`.
    #[inline]
    fn partial(&self, pos: u64, within: u64) -> u32 {
        let empty = self.holes & !pos;
        let [isolated, contact, distance] = self.weights;
        let mut s = 0;
        for h in bits(pos & within) {
            let a = self.adj[h as usize];
            if a & pos == 0 {
                s += isolated;
            }
            s += contact * (a & empty).count_ones() + distance * self.dist[h as usize];
        }
        s
    }
}

/// A seeded 64-bit mix of a position, for tie-breaking.
#[inline]
fn noise(seed: u64, pos: u64) -> u64 {
    super::game::owner_hash(pos ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// What every beam pass of one solve shares.
pub struct BeamEnv<'a> {
    pub game: &'a Game,
    /// The exact endgame table the beam runs down to.
    pub table: &'a Endgame,
    pub prune: &'a Pruner,
    pub ctl: &'a Control,
    /// The move order drawn from `--seed`, for the walk down the endgame table.
    pub order: &'a [usize],
}

/// One beam pass of the given width. Returns the moves of a solution, or `None` when the beam died out or
/// reached the table without a member.
pub fn beam(
    env: &BeamEnv,
    rank: &Ranking,
    width: usize,
    seed: u64,
    nodes: &mut u64,
) -> Result<Option<Vec<usize>>, SpaceError> {
    let BeamEnv {
        game,
        table,
        prune,
        ctl,
        order,
    } = *env;
    let moves = &game.board.moves;
    let mut layers: Vec<Vec<Node>> = vec![vec![Node {
        pos: game.start,
        parent: 0,
        mv: 0,
        score: rank.score(game.start),
    }]];
    let mut pegs = game.start.count_ones();
    let mut cands: Vec<Candidate> = Vec::new();
    let mut kept_keys = PosSet::default();
    loop {
        let layer = layers.last().map_or(&[][..], |l| &l[..]);
        if layer.is_empty() {
            return Ok(None);
        }
        if table.covers(pegs) {
            // Exact from here: any member of the table wins; walk its moves down the table.
            for (i, n) in layer.iter().enumerate() {
                if table.contains(game, n.pos) {
                    let mut path = table.walk(game, n.pos, order);
                    let mut idx = i;
                    let mut prefix = Vec::new();
                    for l in layers.iter().skip(1).rev() {
                        let node = l[idx];
                        prefix.push(node.mv as usize);
                        idx = node.parent as usize;
                    }
                    prefix.reverse();
                    prefix.append(&mut path);
                    return Ok(Some(prefix));
                }
            }
            return Ok(None);
        }
        cands.clear();
        for (i, n) in layer.iter().enumerate() {
            for (mi, m) in moves.iter().enumerate() {
                if m.applies(n.pos) {
                    let child = n.pos ^ m.flip;
                    if pegs - 1 > 1 && !table.covers(pegs - 1) && prune.dead(child) {
                        continue;
                    }
                    cands.push((
                        rank.child_score(n.pos, n.score, m.flip),
                        noise(seed, child),
                        child,
                        i as u32,
                        mi as u16,
                    ));
                }
            }
        }
        *nodes += layer.len() as u64;
        ctl.checkpoint(layer.len() as u64)?;
        // Keep the best `width` distinct positions up to the symmetries that keep the goal. Duplicates of one
        // position have equal keys, so after sorting they are adjacent; images under a symmetry are caught by
        // the canonical key set.
        let take = (2 * width).min(cands.len());
        if take < cands.len() {
            cands.select_nth_unstable(take);
            cands.truncate(take);
        }
        cands.sort_unstable();
        kept_keys.clear();
        let mut next: Vec<Node> = Vec::with_capacity(width.min(cands.len()));
        for &(score, _, child, parent, mv) in &cands {
            if next.len() == width {
                break;
            }
            if kept_keys.insert(game.canon(&game.goal_group, child)) {
                next.push(Node {
                    pos: child,
                    parent,
                    mv,
                    score,
                });
            }
        }
        pegs -= 1;
        layers.push(next);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::board::{Board, BoardKind};

    proptest! {
        /// The incremental rank of a child equals the rank computed from scratch.
        #[test]
        fn child_score_matches_a_full_recount(raw in any::<u64>(), kind in 0usize..5, goal_any in any::<bool>()) {
            let kinds = [BoardKind::English, BoardKind::European, BoardKind::Wiegleb, BoardKind::Diamond, BoardKind::Triangle];
            let board = Board::new(kinds[kind]);
            let pos = raw & board.holes;
            let goal = if goal_any { Goal::Any } else { Goal::Hole(board.holes.trailing_zeros() as u8) };
            let game = Game::new(board, 0, goal);
            let rank = Ranking::new(&game, [64, 4, 1]);
            let s = rank.score(pos);
            for m in game.board.moves.iter().filter(|m| m.applies(pos)) {
                prop_assert_eq!(rank.child_score(pos, s, m.flip), rank.score(pos ^ m.flip));
            }
        }
    }
}
