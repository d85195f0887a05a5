//! `positions`: every position reachable from the start, per peg count, raw and up to symmetry, and how many of
//! them lie on some path to the goal.
//!
//! Method: a layered breadth-first search over positions canonical under `game_group` (the symmetries that keep
//! start and goal; the reachable set and the winning set are both closed under them), one sorted vector per
//! depth. Then a backward pass from the one-peg layer marks a position as "on a path" when one of its successors
//! is. A raw figure is the sum of the orbit sizes of the canonical positions.
//!
//! Ownership rule for chunks: canonical position `p` is counted by chunk `owner_hash(p) % n_chunks` and by no
//! other, so the engine's plain sum of counters is exact for any split. What a chunk cannot avoid is the search
//! itself: a layer is generated from the whole previous layer, and chunks share nothing, so every chunk runs the
//! full layered search and only counts (and keeps the "on a path" marks for) what it owns in the last pass. More
//! chunks therefore do not make `positions` faster; they exist so the job survives being split and resumed.
//! The default plan is one chunk.
//!
//! Measured on the English centre game: 23,475,688 positions up to symmetry (187,636,299 raw), 1,679,072 of them
//! (13,428,122 raw) on a path to the centre, in 32 s of CPU with a 1.5 GB peak (the sorted layers, 8 bytes per
//! canonical position).

use super::game::{owner_hash, Game};
use sweep_space::{ChunkId, Control, Meter, SpaceError};

/// The classic positions job as command-line words: every position reachable on the triangle with its apex empty
/// (3,016 of them), the reference run of the tests and the benches.
pub const TRIANGLE_ARGS: &[&str] = &[
    "--board",
    "triangle",
    "--goal",
    "any",
    "--mode",
    "positions",
];

/// Figures for one peg count, counted only for the positions a chunk owns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layer {
    pub reachable: u64,
    pub reachable_raw: u64,
    pub on_path: u64,
    pub on_path_raw: u64,
}

/// Runs the search; `layers[pegs]` holds the figures for positions with `pegs` pegs owned by `chunk`.
pub fn run(game: &Game, at: ChunkId, ctl: &Control) -> Result<(Vec<Layer>, u64), SpaceError> {
    let group = &game.game_group;
    let mut meter = Meter::new(ctl);
    // Forward: by_depth[d] = sorted canonical positions reachable in d moves.
    let mut by_depth: Vec<Vec<u64>> = vec![vec![game.canon(group, game.start)]];
    for _ in 0..game.depth() {
        let Some(layer) = by_depth.last() else { break };
        let mut next = Vec::with_capacity(layer.len() * 4);
        for &pos in layer {
            for m in &game.board.moves {
                if m.applies(pos) {
                    next.push(game.canon(group, pos ^ m.flip));
                }
            }
            meter.tick()?;
        }
        if next.is_empty() {
            break;
        }
        next.sort_unstable();
        next.dedup();
        by_depth.push(next);
    }
    // Backward: mark the positions with a successor on a path; the one-peg layer holds the goals themselves.
    let full = game.depth() as usize;
    let mut good_next: Vec<u64> = Vec::new();
    let mut layers = vec![Layer::default(); game.board.n_holes as usize + 1];
    // Layers are dropped as the pass moves up, so the peak is the forward search's.
    while let Some(layer) = by_depth.pop() {
        let d = by_depth.len();
        let good: Vec<u64> = if d == full {
            layer.iter().copied().filter(|&p| game.is_goal(p)).collect()
        } else {
            let mut good = Vec::new();
            for &pos in &layer {
                let on_path = game.board.moves.iter().any(|m| {
                    m.applies(pos)
                        && good_next
                            .binary_search(&game.canon(group, pos ^ m.flip))
                            .is_ok()
                });
                if on_path {
                    good.push(pos);
                }
                meter.tick()?;
            }
            good
        };
        let pegs = game.start.count_ones() as usize - d;
        let owned = |p: &&u64| owner_hash(**p) % at.n_chunks == at.chunk;
        let out = &mut layers[pegs];
        for p in layer.iter().filter(owned) {
            out.reachable += 1;
            out.reachable_raw += game.orbit_size(group, *p);
        }
        for p in good.iter().filter(owned) {
            out.on_path += 1;
            out.on_path_raw += game.orbit_size(group, *p);
        }
        good_next = good;
    }
    Ok((layers, meter.finish()))
}
