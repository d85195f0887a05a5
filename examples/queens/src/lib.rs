//! N-Queens as a sweep search space: how many ways can n queens stand on an n x n board with no two on a row,
//! a column or a diagonal? The classic benchmark of distributed exhaustive search (the Q27 project counted
//! 27 queens on FPGAs), and the worked example of `docs/your-own-space.md`.
//!
//! The kernel is the usual bitboard backtracker: one row at a time, the free squares of a row are
//! `!(columns | left diagonals | right diagonals)`, and the lowest set bit is the next queen. Mirror symmetry
//! halves the work: a board and its left-right mirror are both solutions, so only boards whose first-row queen
//! stands in the left half are searched and counted twice; with n odd and the first queen in the middle
//! column, the second row's queen is kept in the left half instead.
//!
//! A chunk is a set of "prefixes" (the queens of the first two rows), dealt round-robin so that the chunks'
//! costs are alike. A chunk saves how far it got after each prefix ([`Control::save_resume_state`]): a chunk cut
//! off by a crash resumes on any worker where it stopped.

use serde::{Deserialize, Serialize};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError};

/// Beyond 27 nobody has a count to check against, and 64-bit masks hold up to 64 columns anyway.
pub const MAX_N: u32 = 27;

/// `queens --n N`.
#[derive(clap::Args, Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct QueensParams {
    /// The board's side and the number of queens.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_N as i64))]
    pub n: u32,
}

pub struct Queens;

impl SearchSpace for Queens {
    const NAME: &'static str = "queens";
    const ABOUT: &'static str =
        "N-Queens: count the placements of n non-attacking queens on an n x n board";
    type Params = QueensParams;

    fn build(params: QueensParams) -> Result<impl Job, SpaceError> {
        QueensJob::new(params)
    }
}

/// The queens of the first two rows (columns), and how many boards each stands for (its mirror image too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Prefix {
    rows: [u32; 2],
    weight: u128,
}

fn prefixes(n: u32) -> Vec<Prefix> {
    if n == 1 {
        // One row only: the single board is its own mirror image.
        return vec![Prefix {
            rows: [0, 0],
            weight: 1,
        }];
    }
    let all = (1u64 << n) - 1;
    let half = n / 2;
    let mut out = Vec::new();
    let mut second_rows = |c0: u32, c1s: std::ops::Range<u32>| {
        let b0 = 1u64 << c0;
        let attacked = b0 | ((b0 << 1) & all) | (b0 >> 1);
        for c1 in c1s {
            if attacked & (1 << c1) == 0 {
                out.push(Prefix {
                    rows: [c0, c1],
                    weight: 2,
                });
            }
        }
    };
    for c0 in 0..half {
        second_rows(c0, 0..n);
    }
    if n % 2 == 1 {
        // The middle column is its own mirror: break the symmetry on the second row instead.
        second_rows(half, 0..half);
    }
    out
}

/// Counts the completions of a board whose occupied columns and attacked diagonals (for the next row) are
/// given; adds every queen placed to `nodes`.
fn complete(all: u64, cols: u64, ld: u64, rd: u64, nodes: &mut u64) -> u64 {
    if cols == all {
        return 1;
    }
    let mut free = all & !(cols | ld | rd);
    let mut found = 0;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free ^= bit;
        *nodes += 1;
        found += complete(
            all,
            cols | bit,
            ((ld | bit) << 1) & all,
            (rd | bit) >> 1,
            nodes,
        );
    }
    found
}

#[derive(Debug)]
pub struct QueensJob {
    n: u32,
    prefixes: Vec<Prefix>,
}

impl QueensJob {
    /// The job `params` ask for. Its own constructor, not only `build`, because the tests look inside it.
    fn new(params: QueensParams) -> Result<QueensJob, SpaceError> {
        // Checked here too: parameters also arrive as JSON (a submitted job), not only from the command line.
        SpaceError::check_param_range("n", params.n, 1..=MAX_N)?;
        Ok(QueensJob {
            n: params.n,
            prefixes: prefixes(params.n),
        })
    }

    /// Boards that start with `p`, and the queens placed to find them.
    fn count(&self, p: Prefix) -> (u128, u64) {
        if self.n == 1 {
            return (1, 1);
        }
        let all = (1u64 << self.n) - 1;
        let (b0, b1) = (1u64 << p.rows[0], 1u64 << p.rows[1]);
        let ld = ((((b0 << 1) | b1) << 1) & all) & all;
        let rd = ((b0 >> 1) | b1) >> 1;
        let mut nodes = 2;
        let found = complete(all, b0 | b1, ld, rd, &mut nodes);
        (found as u128 * p.weight, nodes)
    }

    fn chunks(&self) -> u64 {
        (self.prefixes.len() as u64).max(1)
    }
}

/// Where a chunk stands: the next of its prefixes to search, and what the ones before it gave.
fn parse_resume(text: &str) -> Option<(usize, u128, u64)> {
    let mut it = text.split(' ');
    let state = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    it.next().is_none().then_some(state)
}

impl Job for QueensJob {
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let max = self.chunks();
        Ok(Plan {
            n_chunks: Plan::chunk_count(requested, max, max)?,
            total_nodes: None,
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let mine: Vec<Prefix> = self
            .prefixes
            .iter()
            .copied()
            .skip(at.chunk as usize)
            .step_by(at.n_chunks as usize)
            .collect();
        let (mut next, mut solutions, mut nodes) = match ctl.resume_state() {
            // A state this code did not write (another version, a garbled store) is ignored: start over.
            Some(text) => parse_resume(text)
                .filter(|s| s.0 <= mine.len())
                .unwrap_or((0, 0, 0)),
            None => (0, 0, 0),
        };
        while next < mine.len() {
            let (found, visited) = self.count(mine[next]);
            solutions += found;
            nodes += visited;
            next += 1;
            ctl.checkpoint(visited)?;
            ctl.save_resume_state(format!("{next} {solutions} {nodes}"))?;
        }
        let mut out = ChunkOutput {
            nodes,
            ..Default::default()
        };
        out.count("solutions", solutions);
        Ok(out)
    }

    fn verify(&self, _at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        // A count cannot be re-derived cheaply; what can be checked is its shape. `--replicate 2` checks more.
        if !out.solutions.is_empty() || !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "a queens chunk reports a count only".into(),
            ));
        }
        if out.counters.keys().any(|k| k != "solutions") {
            return Err(SpaceError::Verification(
                "unknown counters in a queens chunk".into(),
            ));
        }
        let count = out.counters.get("solutions").copied().unwrap_or(0);
        if self.n > 1 && count % 2 == 1 {
            return Err(SpaceError::Verification(
                "an odd count: every board is counted with its mirror image".into(),
            ));
        }
        Ok(())
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "solutions": answer.tally.counter("solutions").to_string(),
        })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        format!(
            "{} queens: {} solutions\n",
            result["n"],
            result["solutions"].as_str().unwrap_or("?")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OEIS A000170.
    const PUBLISHED: [u128; 12] = [1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200];

    fn job(n: u32) -> QueensJob {
        QueensJob::new(QueensParams { n }).unwrap()
    }

    /// Every chunk run, verified and merged by the contract kit, as the engine would.
    fn total(job: &QueensJob, n_chunks: u64) -> u128 {
        sweep_space::testkit::run_all(job, Some(n_chunks))
            .tally
            .counter("solutions")
    }

    /// Every placement, no symmetry: the reference the kernel is checked against.
    fn brute(n: u32) -> u128 {
        fn place(n: u32, row: u32, cols: &mut Vec<u32>) -> u128 {
            if row == n {
                return 1;
            }
            let mut found = 0;
            for c in 0..n {
                let safe = cols
                    .iter()
                    .enumerate()
                    .all(|(r, &q)| q != c && (row - r as u32) != q.abs_diff(c));
                if safe {
                    cols.push(c);
                    found += place(n, row + 1, cols);
                    cols.pop();
                }
            }
            found
        }
        place(n, 0, &mut Vec::new())
    }

    #[test]
    fn counts_are_the_published_ones_for_any_chunking() {
        for (i, &want) in PUBLISHED.iter().enumerate() {
            let j = job(i as u32 + 1);
            let max = j.plan(None).unwrap().n_chunks;
            for chunks in [1, 3.min(max), max] {
                assert_eq!(total(&j, chunks), want, "n = {} in {chunks} chunks", i + 1);
            }
        }
    }

    #[test]
    fn symmetry_reduction_agrees_with_a_brute_force() {
        for n in 1..=8 {
            assert_eq!(total(&job(n), 1), brute(n), "n = {n}");
        }
    }

    #[test]
    fn a_resumed_chunk_counts_what_it_had_and_the_rest_once() {
        let j = job(10);
        let whole = j.run_chunk(ChunkId::new(2, 1), &Control::new()).unwrap();
        let first = j.count(j.prefixes[1]);
        let ctl = sweep_space::ChunkControl::new(Some(format!("1 {} {}", first.0, first.1)));
        assert_eq!(j.run_chunk(ChunkId::new(2, 1), ctl.control()).unwrap(), whole);
        // Garbage is not trusted: the chunk starts over and still counts right.
        let ctl = sweep_space::ChunkControl::new(Some("9999 1 2".into()));
        assert_eq!(j.run_chunk(ChunkId::new(2, 1), ctl.control()).unwrap(), whole);
    }

    /// What the engine relies on, checked by the contract crate's kit on the job as `sweep` registers it.
    #[test]
    fn the_contract_kit_passes() {
        let j = sweep_space::Registry::new()
            .with::<Queens>()
            .job_from_params("queens", &serde_json::json!({ "n": 10 }))
            .unwrap();
        let answer = sweep_space::testkit::same_answer_under(j.as_ref(), &[Some(1), Some(4), None]);
        assert_eq!(answer.tally.counter("solutions"), 724);
        // A count cannot be re-derived from one output; a made-up solution can be refused.
        assert_eq!(sweep_space::testkit::lies_refused(j.as_ref(), 4, 1, &[]), 1);
        let wait = std::time::Duration::from_secs(30);
        assert!(sweep_space::testkit::resumed_equals_uninterrupted(
            j.as_ref(),
            2,
            1,
            wait
        ));
    }

    #[test]
    fn bad_parameters_and_lying_outputs_are_refused() {
        assert!(Queens::build(QueensParams { n: 0 }).is_err());
        assert!(Queens::build(QueensParams { n: 99 }).is_err());
        let j = job(8);
        let mut out = ChunkOutput::default();
        out.count("solutions", 3);
        assert!(j.verify(ChunkId::new(4, 0), &out).is_err());
        out.solutions.push("x".into());
        assert!(j.verify(ChunkId::new(4, 0), &out).is_err());
        assert!(j.plan(Some(10_000)).is_err());
    }
}
