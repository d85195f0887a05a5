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
//!
//! Asked to split, a running chunk gives away the upper half of its prefixes not started ([`SpanWalk`]): a part
//! is a span of the chunk's own prefixes, written `span LO HI`, and a run of it counts from zero. A part's saved
//! state names its span after the counts (`NEXT SOLUTIONS NODES span LO HI`), so a part resumed after a crash
//! still counts only that part; a state starting with `span` is a part to start, one starting with a number is
//! where a run stopped.

use serde::{Deserialize, Serialize};
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Span, SpanWalk,
};

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

    /// The prefixes dealt to chunk `at`: every `n_chunks`-th from its index on.
    fn mine(&self, at: ChunkId) -> Vec<Prefix> {
        self.prefixes
            .iter()
            .copied()
            .skip(at.chunk as usize)
            .step_by(at.n_chunks.max(1) as usize)
            .collect()
    }

    /// Where a run of chunk `at` from `state` starts: its part of the chunk's prefixes (indices into
    /// [`QueensJob::mine`]) and, from a saved state, the next prefix and the counts so far. A part's state that
    /// cannot be read, or lies outside the chunk, is refused, and so is a saved state that claims a span it
    /// cannot state; counts that cannot be trusted are ignored (the part, or the whole chunk for a state that
    /// names no span, starts over).
    fn start(&self, at: ChunkId, state: Option<&str>) -> Result<Start, SpaceError> {
        at.check(self.chunks())?;
        let items = self.mine(at).len() as u128;
        let whole = Span::of(WHOLE, items, 1, None)?;
        let Some(text) = state else {
            return Ok(Start::fresh(whole));
        };
        if text.starts_with("span ") {
            return Ok(Start::fresh(Span::of(WHOLE, items, 1, Some(text))?));
        }
        let (counts, part) = match text.split_once(" span ") {
            Some((counts, span)) => (
                counts,
                Span::of(WHOLE, items, 1, Some(&format!("span {span}")))?,
            ),
            // A piece's state that lost its span cannot say which prefixes are the piece's: the whole chunk
            // would count the other pieces twice, so the run fails and the chunk is retried from its recorded
            // part.
            None if text.split_whitespace().any(|w| w.starts_with("span")) => {
                return Err(SpaceError::invalid_param(
                    "state",
                    format!(
                        "`{text}` claims a span of {at}'s prefixes but cannot be read as one \
                         (`NEXT SOLUTIONS NODES span LO HI`)"
                    ),
                ))
            }
            None => (text, whole),
        };
        // Counts this code did not write (another version, a garbled store) are ignored: the part starts over.
        Ok(parse_resume(counts)
            .filter(|&(next, _, _)| (part.lo..=part.hi).contains(&(next as u128)))
            .map_or(Start::fresh(part), |(next, solutions, nodes)| Start {
                part,
                next: next as u128,
                solutions,
                nodes,
            }))
    }
}

/// Every run of a chunk walks indices into the chunk's own prefixes, so its parts are spans of the range of a
/// one-chunk plan over them.
const WHOLE: ChunkId = ChunkId {
    n_chunks: 1,
    chunk: 0,
};

/// Where a run starts: its part, the next prefix in it, and what the prefixes before that gave.
struct Start {
    part: Span,
    next: u128,
    solutions: u128,
    nodes: u64,
}

impl Start {
    fn fresh(part: Span) -> Start {
        Start {
            part,
            next: part.lo,
            solutions: 0,
            nodes: 0,
        }
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
        let mine = self.mine(at);
        let Start {
            part,
            next,
            mut solutions,
            mut nodes,
        } = self.start(at, ctl.resume_state())?;
        let whole = Span::of(WHOLE, mine.len() as u128, 1, None)?;
        // One look at the split flag per prefix; what the walk keeps after a split still starts at the part's
        // start, since the counts carried from a saved state cover the prefixes before `next`.
        let mut walk = SpanWalk::resuming(part, next, ctl);
        while let Some(i) = walk.next() {
            // Inside the chunk's prefixes, a usize range.
            let (found, visited) = self.count(mine[i as usize]);
            solutions += found;
            nodes += visited;
            ctl.checkpoint(visited)?;
            let kept = walk.span();
            let span = if kept == whole {
                String::new()
            } else {
                format!(" {}", kept.state())
            };
            ctl.save_resume_state(format!("{} {solutions} {nodes}{span}", i + 1))?;
        }
        let mut out = ChunkOutput {
            nodes,
            ..Default::default()
        };
        out.count("solutions", solutions);
        Ok(out)
    }

    fn splits(&self) -> bool {
        true
    }

    /// The parent may be a saved state, which names its part; the two halves are spans.
    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        let parent = self.start(at, parent)?.part;
        let items = self.mine(at).len() as u128;
        Span::check_split(WHOLE, items, 1, Some(&parent.state()), kept, given)
    }

    /// A count's shape and parity hold for any part of a chunk.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.start(at, Some(part))?;
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
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
        assert_eq!(
            j.run_chunk(ChunkId::new(2, 1), ctl.control()).unwrap(),
            whole
        );
        // Garbage is not trusted: the chunk starts over and still counts right.
        let ctl = sweep_space::ChunkControl::new(Some("9999 1 2".into()));
        assert_eq!(
            j.run_chunk(ChunkId::new(2, 1), ctl.control()).unwrap(),
            whole
        );
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

    /// A chunk split into pieces, each asked to split again, adds up to the whole chunk.
    #[test]
    fn a_split_chunk_adds_up_to_the_whole() {
        let j = job(10);
        for at in [ChunkId::new(1, 0), ChunkId::new(4, 1)] {
            let splits = sweep_space::testkit::split_adds_up(&j, at, 7);
            assert!(splits >= 4, "{at}: {splits} splits");
        }
    }

    #[test]
    fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
        let j = job(10);
        let at = ChunkId::new(1, 0);
        assert!(j
            .check_split(at, Some("span 0 20"), "span 0 10", "span 10 20")
            .is_ok());
        // A saved state names its part: the whole chunk, or the span after its counts.
        assert!(j
            .check_split(
                at,
                Some("3 40 900"),
                "span 0 10",
                &format!("span 10 {}", j.prefixes.len())
            )
            .is_ok());
        assert!(j
            .check_split(at, Some("3 40 900 span 0 20"), "span 0 10", "span 10 20")
            .is_ok());
        for (parent, kept, given) in [
            (Some("span 0 20"), "span 0 11", "span 10 20"),
            (Some("span 0 20"), "span 0 9", "span 10 20"),
            (Some("span 0 20"), "span 0 10", "span 10 21"),
            (Some("span 0 20"), "nonsense", "span 10 20"),
            (Some("3 40 900 span 0 30"), "span 0 10", "span 10 20"),
            (None, "span 0 10", "span 10 20"),
            // Past the chunk's prefixes.
            (None, "span 0 10", "span 10 100000"),
        ] {
            assert!(
                j.check_split(at, parent, kept, given).is_err(),
                "{parent:?} into {kept} and {given}"
            );
        }
        let outside = sweep_space::ChunkControl::new(Some("span 0 100000".into()));
        assert!(j.run_chunk(at, outside.control()).is_err());
    }

    /// A piece's saved state names the piece: resumed from it, the piece counts only itself.
    #[test]
    fn a_piece_resumed_from_its_saved_state_counts_only_that_piece() {
        let j = job(10);
        let at = ChunkId::new(2, 1);
        let run = |state: &str| {
            let ctl = sweep_space::ChunkControl::new(Some(state.to_string()));
            (
                j.run_chunk(at, ctl.control()).unwrap(),
                ctl.take_resume_state(),
            )
        };
        let (piece, saved) = run("span 3 9");
        let saved = saved.expect("it saved its place");
        assert!(saved.ends_with(" span 3 9"), "{saved}");
        let mut part = ChunkOutput::default();
        for p in &j.mine(at)[3..9] {
            let (found, visited) = j.count(*p);
            part.count("solutions", found);
            part.nodes += visited;
        }
        assert_eq!(piece, part);
        let (first, _) = j.count(j.mine(at)[3]);
        let visited = j.count(j.mine(at)[3]).1;
        assert_eq!(run(&format!("4 {first} {visited} span 3 9")).0, piece);
        // Counts past the part are not trusted: the part starts over, and still counts only itself.
        assert_eq!(run("99 1 2 span 3 9").0, piece);
        assert!(j
            .run_chunk(
                at,
                sweep_space::ChunkControl::new(Some("1 2 3 span 3 999".into())).control()
            )
            .is_err());
    }

    /// A saved state that claims a span but cannot be read is refused: run as the whole chunk, it would count
    /// the chunk's other pieces twice.
    #[test]
    fn a_saved_state_with_an_unreadable_span_is_refused_not_run_whole() {
        let j = job(10);
        let at = ChunkId::new(2, 1);
        for state in [
            "4 10 900 span",
            "4 10 900 span 3",
            "4 10 900 span 3 x",
            "4 10 900 span 9 3",
            "4 10 900 span=3..9",
            "4 10 900 spanx 3 9",
            "4 10 900\tspan 3 9",
            "span",
            "span 3 9 1 2",
        ] {
            let ctl = sweep_space::ChunkControl::new(Some(state.to_string()));
            let err = j.run_chunk(at, ctl.control());
            assert!(
                matches!(&err, Err(SpaceError::InvalidParam { name: "state", .. })),
                "{state:?}: {err:?}"
            );
        }
        // Garbled counts without a span are still ignored: the whole chunk starts over, as it was never split.
        let whole = j.run_chunk(at, &Control::new()).unwrap();
        let ctl = sweep_space::ChunkControl::new(Some("4 x 900".into()));
        assert_eq!(j.run_chunk(at, ctl.control()).unwrap(), whole);
    }

    #[test]
    fn bad_parameters_and_lying_outputs_are_refused() {
        assert!(Queens::build(QueensParams { n: 0 }).is_err());
        assert!(Queens::build(QueensParams { n: 99 }).is_err());
        let j = job(8);
        let mut out = ChunkOutput::default();
        out.count("solutions", 3);
        assert!(j.verify(ChunkId::new(4, 0), &out).is_err());
        assert!(j
            .verify_part(ChunkId::new(4, 0), "span 0 2", &out, true)
            .is_err());
        out.solutions.push("x".into());
        assert!(j.verify(ChunkId::new(4, 0), &out).is_err());
        assert!(j.plan(Some(10_000)).is_err());
    }
}
