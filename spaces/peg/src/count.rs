//! `count`: the exact number of winning move sequences, split into chunks by the positions at a fixed depth.
//!
//! The number of sequences is `sum over positions q at depth D of ways(start -> q) * wins(q)`, where `wins(q)` is
//! the number of sequences from `q` to the goal. Positions at depth D are grouped into classes under the
//! symmetries that keep both start and goal (`game_group`); `wins` is the same for every member of a class, so a
//! class contributes `wins(representative) * (sum of ways over its members)`. Chunk i takes a contiguous range
//! of the sorted class representatives. Each chunk recomputes the prefix ways itself: a layered count over raw
//! positions up to depth D, a few thousand positions on the English board. The merge is then a plain sum.
//!
//! `wins` is a depth-first search memoised on positions canonical under `goal_group` (the number of ways to win
//! is the same from every image of a position under a symmetry that keeps the goal). Dead positions are
//! memoised too (as 0), so every reachable position of the chunk's subtrees is expanded once per chunk. Chunks
//! share no memory, so subtrees reachable from the roots of two chunks are expanded in both: more chunks give more
//! parallelism and some repeated work. D is the smallest depth with at least `n_chunks` classes, a pure function
//! of `n_chunks`, so every worker agrees on the split.
//!
//! Positions a pagoda function of the goal rules out count 0 without being expanded or remembered: on the English
//! centre game that leaves 21,927,923 expanded positions in one chunk instead of 23,475,679 (96 s of CPU on the
//! loaded 2-core test machine).
//!
//! Measured before the pagodas on the English centre game (40,861,647,040,079,968 sequences, Bell's and Durango
//! Bill's figure): one chunk expands 23,475,679 positions in 76 s of CPU with a 1.6 GB peak; two chunks expand 36.8 M
//! together (131 s of CPU, about 65 s on two idle cores). The repeated work grows with the chunk count, which is
//! why the default is two chunks; a split without repetition would need chunks that exchange their frontiers.

use super::game::{Game, PosMap};
use sweep_space::{Control, Meter, SpaceError};

/// Prefix depths beyond this would make the raw prefix layer large; the class count there is plenty.
pub const MAX_SPLIT_DEPTH: u32 = 7;

/// The sorted class representatives at depth `d` with the number of move sequences reaching each class.
pub fn classes_at(game: &Game, d: u32) -> Vec<(u64, u128)> {
    let mut layer: PosMap<u128> = PosMap::default();
    layer.insert(game.start, 1);
    for _ in 0..d {
        let mut next: PosMap<u128> = PosMap::default();
        for (&pos, &ways) in &layer {
            for m in &game.board.moves {
                if m.applies(pos) {
                    *next.entry(pos ^ m.flip).or_default() += ways;
                }
            }
        }
        layer = next;
    }
    let mut by_class: PosMap<u128> = PosMap::default();
    for (&pos, &ways) in &layer {
        *by_class
            .entry(game.canon(&game.game_group, pos))
            .or_default() += ways;
    }
    let mut classes: Vec<(u64, u128)> = by_class.into_iter().collect();
    classes.sort_unstable();
    classes
}

/// The split depth for `n_chunks`: the smallest depth with at least that many classes.
pub fn split_depth(game: &Game, n_chunks: u64) -> Option<(u32, Vec<(u64, u128)>)> {
    let max_d = MAX_SPLIT_DEPTH.min(game.depth());
    (0..=max_d)
        .map(|d| (d, classes_at(game, d)))
        .find(|(_, c)| c.len() as u64 >= n_chunks)
}

/// The largest number of chunks a count job can be split into.
pub fn max_chunks(game: &Game) -> u64 {
    let max_d = MAX_SPLIT_DEPTH.min(game.depth());
    (0..=max_d)
        .map(|d| classes_at(game, d).len() as u64)
        .max()
        .unwrap_or(1)
        .max(1)
}

pub struct Counter<'a> {
    game: &'a Game,
    memo: PosMap<u128>,
    /// Positions expanded (a memo hit or a pruned position is not a node).
    meter: Meter<'a>,
    /// Positions a pagoda function proved dead.
    pub pruned: u64,
}

impl<'a> Counter<'a> {
    pub fn new(game: &'a Game, ctl: &'a Control) -> Counter<'a> {
        Counter {
            game,
            memo: PosMap::default(),
            meter: Meter::new(ctl),
            pruned: 0,
        }
    }

    /// Winning sequences from `pos`.
    pub fn wins(&mut self, pos: u64) -> Result<u128, SpaceError> {
        let pegs = pos.count_ones();
        if pegs <= 1 {
            return Ok(u128::from(self.game.is_goal(pos)));
        }
        if pegs == 2 {
            // The last move: computed directly, which is cheaper than a memo lookup for this numerous layer.
            let hits = self
                .game
                .board
                .moves
                .iter()
                .filter(|m| m.applies(pos) && self.game.is_goal(pos ^ m.flip))
                .count();
            return Ok(hits as u128);
        }
        if self.game.pagoda_dead(pos) {
            // No winning continuation: neither expanded nor remembered.
            self.pruned += 1;
            return Ok(0);
        }
        let key = self.game.canon(&self.game.goal_group, pos);
        if let Some(&w) = self.memo.get(&key) {
            return Ok(w);
        }
        self.meter.tick()?;
        let mut total = 0u128;
        for m in &self.game.board.moves {
            if m.applies(pos) {
                total += self.wins(pos ^ m.flip)?;
            }
        }
        self.memo.insert(key, total);
        Ok(total)
    }

    /// The positions expanded, all of them now published as progress.
    pub fn finish(&mut self) -> u64 {
        self.meter.finish()
    }
}
