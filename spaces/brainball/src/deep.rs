//! One hard position as many chunks: the search of a single position split by its first twists.
//!
//! A round is one forward level f (solutions of exactly `f + depth` twists). Its chunks are contiguous ranges of
//! the twist sequences of `split` twists that the relation automaton keeps; a chunk walks level f below its
//! prefixes (pattern bound and table as in [`crate::solve`]) and reports the first solution it meets in
//! walk order, as its artifact. The merge keeps the first non-empty artifact in chunk order: the same solution
//! however many workers ran the chunks, and of the round's length, which is minimal if no earlier round found one.
//!
//! Rounds chain through job inputs, not inside a chunk: walking level f + 2 where level f already met the table
//! would cost ~100 times more and prove nothing. The round for length L reads the round for L - 2 (and so on
//! down to the first level of the position's parity), so one submit builds the whole chain and each round runs
//! only after the one below it; a round whose input already holds a solution passes it on from chunk 0 and does
//! no search. Resubmitting with a larger `--max-twists` reuses every round already done.

use crate::ball::{Ball, N_TWISTS};
use crate::pdb::Pdb;
use crate::prune::{Pruner, DEAD};
use crate::solve::{descend, walk_level, Level};
use crate::table::Table;
use sweep_space::{ChunkId, ChunkOutput, Control, SpaceError};

/// Deepest split: 4 twists give about 16,000 chunks, plenty for any cluster.
pub const MAX_SPLIT: u8 = 4;

/// The twist sequences of exactly `len` twists that the relation automaton keeps, in lexicographic order: every
/// position within `len` twists is the end of one of them, so their subtrees cover the level.
pub fn prefixes(len: u8) -> Vec<Vec<u8>> {
    let p = Pruner::get();
    let mut out = vec![(Vec::new(), Pruner::START)];
    for _ in 0..len {
        let mut next = Vec::with_capacity(out.len() * 11);
        for (w, s) in &out {
            for t in 0..N_TWISTS {
                let n = p.step(*s, t);
                if n != DEAD {
                    let mut w2 = w.clone();
                    w2.push(t as u8);
                    next.push((w2, n));
                }
            }
        }
        out = next;
    }
    out.into_iter().map(|(w, _)| w).collect()
}

/// The prefix length a round at level `f` splits on: no longer than the level itself.
pub fn split_len(split: u8, f: u8) -> u8 {
    split.min(f)
}

/// Runs chunk `chunk` of round `f` for `ball`. `known` is a solution found before this round (by an earlier round,
/// or the table itself): chunk 0 passes it on, the others report nothing.
#[allow(clippy::too_many_arguments)]
pub fn run_chunk(
    table: &Table,
    pdb: &Pdb,
    ball: Ball,
    known: Option<&[u8]>,
    split: u8,
    f: u8,
    at: ChunkId,
    ctl: &Control,
) -> Result<ChunkOutput, SpaceError> {
    let mut out = ChunkOutput::default();
    if let Some(path) = known {
        if at.chunk == 0 {
            out.artifact = path.to_vec();
        }
        out.count("passed", 1);
        return Ok(out);
    }
    let all = prefixes(split_len(split, f));
    let (lo, hi) = at.split(all.len() as u128);
    let Level {
        hit,
        probes,
        bounded,
        pruned,
    } = walk_level(
        table,
        Some(pdb),
        ball,
        &all[lo as usize..hi as usize],
        f,
        ctl,
    )?;
    out.nodes = probes + bounded;
    out.count("probes", u128::from(probes));
    out.count("bounded", u128::from(bounded));
    out.count("pruned", u128::from(pruned));
    if let Some(path) = hit {
        out.artifact = path;
    }
    Ok(out)
}

/// A solution known before round `f`: from the table if the position is in it, else the previous round's merged
/// artifact (empty: none).
pub fn known_before(table: &Table, ball: Ball, previous: Option<&[u8]>) -> Option<Vec<u8>> {
    descend(table, ball).or_else(|| previous.filter(|p| !p.is_empty()).map(<[u8]>::to_vec))
}

/// Checks a path artifact: canonical twists (one byte each) from `ball` to solved, of at most `max` twists and
/// of the distance's parity.
pub fn check_path(ball: Ball, path: &[u8], max: usize) -> Result<(), SpaceError> {
    let bad = |why: String| Err(SpaceError::Verification(format!("deep search path: {why}")));
    if path.len() > max {
        return bad(format!(
            "{} twists, more than the round's {max}",
            path.len()
        ));
    }
    let mut b = ball;
    for &t in path {
        if t as usize >= N_TWISTS {
            return bad(format!("twist {t} does not exist"));
        }
        b = b.twist(t as usize);
    }
    if b != Ball::SOLVED {
        return bad(format!("ends at {b}, not solved"));
    }
    Ok(())
}

/// The merged artifact: the first chunk's solution in chunk order, or none.
pub fn merge(
    ball: Ball,
    max: usize,
    artifacts: &mut dyn Iterator<Item = &[u8]>,
) -> Result<Vec<u8>, SpaceError> {
    for a in artifacts {
        if !a.is_empty() {
            check_path(ball, a, max)?;
            return Ok(a.to_vec());
        }
    }
    Ok(Vec::new())
}
