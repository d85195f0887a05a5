//! Random puzzles with exactly one solution (the original program's future work asks for bigger boards to play).
//!
//! A random board gives clues that usually admit several boards. We ask the exact solver for two solutions; if it
//! finds a second board, the two differ on a set of tiles that can be swapped without changing any clue, so we
//! flip one of those tiles in our board (which changes its clues) and try again. When a board does not become
//! unique after a number of flips, or its clues take too long to decide, we start over from a new random board. Every step is a function of the seed, so
//! `generate(side, seed)` always returns the same puzzle.

use super::geometry::Geometry;
use super::propagate::{Flow, Solver, N_PATHS};
use super::puzzle::Puzzle;
use sweep_space::SpaceError;

/// The board generator's random numbers: splitmix64, frozen so that seeds stay reproducible (see `sweep_space::rng`).
pub use sweep_space::rng::SplitMix64;

/// Flips tried on one random board before starting over.
const FLIPS_PER_BOARD: usize = 200;
/// Search nodes allowed for deciding one board: a board whose clues take longer is dropped for a fresh one, which
/// is faster on average than finishing a rare hard search.
const NODES_PER_BOARD: u64 = 20_000;
/// Fresh boards tried before giving up (not reached in our runs for sides 2..=8).
const MAX_BOARDS: usize = 1000;

/// A puzzle of side `side` whose clues have exactly one solution, checked by the exact solver.
pub fn generate(side: usize, seed: u64) -> Result<(Puzzle, Vec<bool>), SpaceError> {
    let geo = Geometry::new(side)?;
    let mut rng = SplitMix64::new(seed);
    let n = geo.n_tiles();
    for _ in 0..MAX_BOARDS {
        let mut board: Vec<bool> = (0..n).map(|_| rng.below(2) == 1).collect();
        for _ in 0..FLIPS_PER_BOARD {
            let clues = geo.clues_of(&board);
            let mut sols: Vec<Vec<bool>> = Vec::new();
            let mut solver =
                Solver::new(&geo, &clues, 0, N_PATHS, None).with_node_limit(NODES_PER_BOARD);
            // Without a Control nothing can cancel the run.
            let _ = solver.run(&mut |b| {
                sols.push(b.to_vec());
                if sols.len() >= 2 {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            });
            if solver.gave_up() && sols.len() < 2 {
                break;
            }
            let other = sols.iter().find(|s| **s != board);
            let Some(other) = other else {
                // The solver finds every board meeting the clues, and ours does: it is the only one.
                return Ok((
                    Puzzle {
                        side,
                        clues,
                        name: Some(format!("generated, side {side}, seed {seed}")),
                    },
                    board,
                ));
            };
            let differ: Vec<usize> = (0..n).filter(|&t| board[t] != other[t]).collect();
            let t = differ[rng.below(differ.len() as u64) as usize];
            board[t] = !board[t];
        }
    }
    Err(SpaceError::invalid_param(
        "side",
        format!("no unique puzzle of side {side} found from seed {seed}; try another seed"),
    ))
}
