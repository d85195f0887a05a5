//! Magic n-pointed stars {n/2} (the "Bierprüfung" puzzle for any n; see `docs/spaces/star.md`).
//!
//! Cells: outer points `O_i` are cells `0..n`, inner crossings `J_i` are cells `n..2n`. Line `i` is
//! `[O_i, J_i, J_{i+1}, O_{i+2}]` (indices mod n); every line must sum to `4n + 2`.
//!
//! Two methods:
//! - `brute` walks the permutations of 1..2n in lexicographic order over the original program's field numbering,
//!   chunked by rank ranges. Each permutation is tested line by line in the order the lines fill up, stopping at
//!   the first failing line, exactly as that program does. Permutations that share a prefix on which a line
//!   already fails are rejected by that same line, so they are accounted for as one block: `nodes` is exactly the
//!   number of permutations tested, and the verdict for each is the one a one-by-one test gives.
//! - `backtrack` visits exactly one labelling per orbit of the 2n symmetries, and it is the canonical one. The
//!   canonical form (smallest image, outer cells first) starts with the smallest outer label, and of the two
//!   images that put it at O_0 (the identity and the reflection through O_0, which swaps O_1 and O_{n-1}) takes
//!   the one with O_1 < O_{n-1}. The symmetries act freely (labels are distinct), so each orbit has 2n members
//!   and exactly one with O_0 < O_1 < O_{n-1} and O_0 below every outer label: every find is unique, canonical,
//!   and stands for 2n solutions, with no test against its images.
//!
//! Backtracking order: O_0, O_1, O_{n-1} and J_0 are chosen, J_{n-1} follows from line n-1; then for k = 1, 2,
//! ... J_k is chosen and O_{k+1} follows from line k-1, one pair per level, all candidates of a level computed as
//! one bit mask (`mirror`). With three cells left (J_{n-3}, O_{n-2}, J_{n-2}) lines n-4 and n-3 and the sum of the
//! three free values fix them, and line n-2 holds by itself since all n lines together sum to twice
//! 1 + ... + 2n. Lines n-2 and n-3 are also known early to need O_{n-2} + J_{n-2} and O_{n-3} + J_{n-3} + J_{n-2}
//! from the free values: a child that leaves no four free values for them is cut (`Search::far_witness`).
//! Chunks are ranges of prefixes (the first four or five choices, [`Prefix`]); `nodes` counts the prefixes, the
//! pairs placed and the stars closed.
//!
//! Unique solutions are counted where they are found: a chunk counts a solution as unique exactly when it equals
//! its own canonical form, so unique counts add up across chunks without any set of solutions being kept.
//!
//! Modules, each below the ones it uses (none reaches up to this file):
//! - [`params`]: the job's parameters and their limits.
//! - [`geometry`]: lines, symmetries, the field numbering and canonical forms, fixed by n.
//! - [`masks`]: label sets as bit masks, shared by the search, the prefixes and the checks.
//! - [`labels`]: a star as text, written by the kernels and read back by the checks.
//! - [`prefixes`]: the tops of the backtracking tree that number the chunks.
//! - [`backtrack`]: the backtracking kernel, where the time goes.
//! - [`brute`]: the brute force kernel, the original program's method.
//! - [`estimate`]: Knuth's estimate of a chunk's size, from random walks of the backtracking search.
//! - [`verify`]: the coordinator's checks of a chunk's report.
//! - [`render`]: the answer, as JSON and as text.

mod backtrack;
mod brute;
mod estimate;
mod geometry;
mod labels;
mod masks;
mod params;
mod prefixes;
mod render;
mod verify;

use std::sync::Arc;

use serde_json::Value;

use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Span, SpanWalk,
};

use backtrack::Backtrack;
use brute::{total_perms, Brute};
use estimate::ESTIMATE_PROBES;
pub use geometry::{Geometry, ORIGINAL_LINES_SIX};
pub use params::{Method, StarParams};
use params::{MAX_BRUTE_POINTS, MAX_POINTS};
use prefixes::{shared_prefixes, Prefix};

/// The registry's handle for the star space.
pub struct Star;

impl SearchSpace for Star {
    const NAME: &'static str = "star";
    const ABOUT: &'static str =
        "Magic n-pointed stars: 1..2n on the 2n cells, every line of four sums to 4n+2";
    type Params = StarParams;

    fn build(params: StarParams) -> Result<impl Job, SpaceError> {
        StarJob::new(params)
    }
}

#[derive(Debug)]
pub struct StarJob {
    params: StarParams,
    geo: Geometry,
    /// Backtrack chunks are ranges of these prefixes, in lexicographic order: O_0 ascending, and the subtrees
    /// shrink as O_0 grows (every outer label must exceed it), so the last chunks are the small ones. Shared by
    /// the jobs of one n alive at once ([`shared_prefixes`]).
    prefixes: Arc<Vec<Prefix>>,
}

impl StarJob {
    /// The job `params` ask for, or why they are out of range. Public beside [`Star`]'s `build` because the
    /// benches reach [`StarJob::estimate_nodes`], which is not part of [`Job`].
    pub fn new(params: StarParams) -> Result<StarJob, SpaceError> {
        // A star {n/2} needs at least 5 points.
        SpaceError::check_param_range("points", params.points, 5..=MAX_POINTS)?;
        if params.method == Method::Brute && params.points > MAX_BRUTE_POINTS {
            return Err(SpaceError::invalid_param(
                "points",
                format!(
                    "brute force enumerates (2n)! permutations and is limited to n <= {MAX_BRUTE_POINTS}; \
                     use --method backtrack"
                ),
            ));
        }
        let geo = Geometry::new(params.points as usize);
        let prefixes = match params.method {
            Method::Backtrack => shared_prefixes(&geo),
            Method::Brute => Arc::default(),
        };
        Ok(StarJob {
            params,
            geo,
            prefixes,
        })
    }

    fn total_perms(&self) -> u128 {
        total_perms(&self.geo)
    }

    /// What chunks cut: the permutations' ranks for brute force, the prefixes for backtracking.
    fn chunk_total(&self) -> u128 {
        match self.params.method {
            Method::Brute => self.total_perms(),
            Method::Backtrack => self.prefixes.len() as u128,
        }
    }

    fn check_splits(&self) -> Result<(), SpaceError> {
        if !self.splits() {
            return Err(SpaceError::Verification(
                "brute force star chunks do not split".into(),
            ));
        }
        Ok(())
    }

    fn max_chunks(&self) -> u64 {
        match self.params.method {
            Method::Brute => u64::try_from(self.total_perms())
                .unwrap_or(u64::MAX)
                .min(1 << 32),
            Method::Backtrack => self.prefixes.len().max(1) as u64,
        }
    }

    /// The default chunk count: 256 up to n = 12 (3 s of work in all, 13 ms a chunk), then four times more per
    /// point while the work grows about eightfold, so a chunk's work grows slowly (27 ms for n = 13, 140 ms for
    /// n = 15) and stays well above the engine's cost per chunk; 65,536 from n = 16 on (about 0.3 s each): 64
    /// chunks per thread for 1,000 threads. More can be asked for: from n = 11 on a job has over 64,000 prefixes.
    fn default_chunks(&self) -> u64 {
        match self.params.method {
            Method::Brute => 256,
            Method::Backtrack => {
                let extra = self.geo.n.saturating_sub(12).min(4) as u32;
                256 << (2 * extra)
            }
        }
    }

    /// Knuth's estimate of the nodes `run_chunk(at)` counts, from `probes` random walks
    /// ([`estimate::backtrack_chunk_nodes`]); brute force chunks are counted exactly.
    pub fn estimate_nodes(&self, at: ChunkId, probes: u32) -> Result<f64, SpaceError> {
        let (lo, hi) = at.range(self.chunk_total(), self.max_chunks())?;
        if self.params.method == Method::Brute {
            return Ok((hi - lo) as f64);
        }
        Ok(estimate::backtrack_chunk_nodes(
            &self.geo,
            &self.prefixes,
            at,
            probes,
        ))
    }
}

impl Job for StarJob {
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let max = self.max_chunks();
        let n_chunks = Plan::chunk_count(requested, max, self.default_chunks())?;
        let total_nodes = match self.params.method {
            Method::Brute => Some(self.total_perms()),
            Method::Backtrack => None,
        };
        Ok(Plan {
            n_chunks,
            total_nodes,
        })
    }

    /// Backtrack only: a brute force job's size is exact in its plan, so it needs no estimate.
    fn estimate_chunk_nodes(&self, at: ChunkId) -> Option<f64> {
        match self.params.method {
            Method::Brute => None,
            Method::Backtrack => self.estimate_nodes(at, ESTIMATE_PROBES).ok(),
        }
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let (lo, hi) = at.range(self.chunk_total(), self.max_chunks())?;
        let mut out = ChunkOutput::default();
        match self.params.method {
            Method::Brute => {
                Brute::new(&self.geo, lo as u64, hi as u64, ctl, &mut out).run()?;
            }
            Method::Backtrack => {
                // A piece of a split chunk runs the prefixes its state names; asked to split, the walk gives
                // away the upper half of the prefixes not started.
                let span = Span::of_run(at, self.chunk_total(), self.max_chunks(), ctl)?;
                let mut bt = Backtrack::new(&self.geo, ctl, &mut out);
                for i in SpanWalk::new(span, ctl) {
                    bt.run_prefix(self.prefixes[i as usize])?;
                }
                bt.flush();
            }
        }
        Ok(out)
    }

    /// Backtracking splits by prefixes. Brute force does not: its chunks are ranges of ranks of equal cost,
    /// which the plan already cuts evenly.
    fn splits(&self) -> bool {
        self.params.method == Method::Backtrack
    }

    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        Span::check_split(
            at,
            self.chunk_total(),
            self.max_chunks(),
            parent,
            kept,
            given,
        )
    }

    /// Every check a backtracking chunk's verifier makes holds for any set of its prefixes.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        Span::of(at, self.chunk_total(), self.max_chunks(), Some(part))?;
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_unique_counters("star")?;
        verify::check_counts(&self.geo, self.params.method, at, out)?;
        verify::check_listed(&self.geo, out)
    }

    fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_unique_counts_only("star")?;
        out.check_unlisted("stars")?;
        verify::check_counts(&self.geo, self.params.method, at, out)
    }

    fn result(&self, answer: &Answer) -> Value {
        render::result(&self.geo, self.params.method, answer)
    }

    /// `result` and `render_text` without the tree ([`render::result_texts`]).
    fn result_texts(&self, answer: &Answer) -> (String, String) {
        render::result_texts(&self.geo, self.params.method, answer)
    }

    fn render_text(&self, result: &Value) -> String {
        render::render_text(&self.geo, result)
    }
}

#[cfg(test)]
mod tests;
