//! Brainball (facts in `docs/spaces/brainball.md`): distance tables built in
//! chunks, and optimal solutions by meet in the middle.
//!
//! The modes share one space so that a job names the table it needs by its depth alone:
//! - `table --depth D`: every position within D twists of solved with its distance. Chunks walk the twist
//!   sequences below fixed prefixes and return sorted entry lists as artifacts; [`Job::merge_artifacts`] merges them
//!   into the serialised [`Table`] (see [`table`] for the layout).
//! - `solve`: positions given inline, as a batch, or as seeded random positions, solved against the depth-D table.
//!   Each chunk solves a contiguous range of the positions. A solve job names the table job of its depth as its
//!   input ([`Job::input`]): the engine builds that table once as a distributed job, stores it, and hands it to
//!   every worker, which binds it to the job once ([`Job::bind_inputs`]) instead of rebuilding it. Every answer is
//!   optimal, with its proof ([`solve::Proof`]; past twice the depth a pattern database bounds the search).
//! - `census --samples N --seed S`: N uniformly random positions solved optimally, chunks of samples, a histogram
//!   of exact counters ([`census`]).
//! - `deep --position P --max-twists L`: one position's search split by its first twists, in rounds chained
//!   through job inputs ([`deep`]). The glue of these two modes is in `extra.rs`, apart from the dispatch below.
//! - `pattern [--level L] --pattern-tiles K`: the pattern database that bounds `deep` and `census` searches, built
//!   once in chunks as a chain of breadth-first level jobs and stored like the table ([`pattern`]). Census and
//!   deep jobs name it as their second input; a `solve` job still builds it in-process the first time a position
//!   needs it, which few do.

pub mod ball;
pub mod census;
pub mod deep;
mod extra;
mod job;
mod params;
pub mod pattern;
mod pattern_job;
pub mod pdb;
pub mod prune;
mod random;
mod report;
pub mod segbfs;
pub mod solve;
pub mod table;

use std::sync::Arc;

use serde_json::{json, Value};

use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, JobInput, Plan, SearchSpace, SpaceError, Span,
    SpanWalk,
};

pub use ball::{Ball, Ring};
use extra::{build_census, build_deep, refuse_other_modes_params, render_deep};
pub use job::BrainballJob;
use params::SPACE_NAME;
pub use params::{BrainballParams, Mode};
pub use random::{random_position_at, random_positions};
use report::{check_solution, decode_solution, encode_solution, move_names};
pub use solve::{solve, Move, Solution};
pub use table::Table;

/// The registry's handle for the brainball space.
pub struct Brainball;

/// Random batches larger than this are surely a typo; a million solves is hours of cluster time already.
const MAX_RANDOM: u32 = 1_000_000;

impl SearchSpace for Brainball {
    const NAME: &'static str = SPACE_NAME;
    const ABOUT: &'static str =
        "Brainball: depth-d distance tables built in chunks, optimal solutions by meet in the middle";
    type Params = BrainballParams;
    const FILE_OPTIONS: &'static [sweep_space::FileOption] = &[sweep_space::FileOption {
        flag: "--file",
        into: "--positions",
        read: sweep_space::FileRead::Lines { sep: "; " },
    }];

    fn build(params: BrainballParams) -> Result<impl Job, SpaceError> {
        table::check_depth(params.depth)?;
        pdb::check_tiles(params.pattern_tiles as usize)?;
        if params.level.is_some() && params.mode != Some(Mode::Pattern) {
            return Err(SpaceError::invalid_param(
                "level",
                "only a pattern database job takes --level",
            ));
        }
        match params.mode {
            Some(Mode::Pattern) => return pattern_job::build_job(params),
            Some(Mode::Census) => return build_census(params),
            Some(Mode::Deep) => return build_deep(params),
            _ => {}
        }
        refuse_other_modes_params(&params)?;
        let mut positions = Vec::new();
        for text in params.position.iter().chain(params.positions.iter()) {
            for one in text.split(';').filter(|p| !p.trim().is_empty()) {
                positions.push(Ring::parse(one)?);
            }
        }
        if let Some(k) = params.random {
            if k > MAX_RANDOM {
                return Err(SpaceError::invalid_param(
                    "random",
                    format!("{k} positions is more than the {MAX_RANDOM} allowed"),
                ));
            }
            positions.extend(random_positions(k as usize, params.seed));
        }
        let mode = match params.mode {
            Some(m) => m,
            None if positions.is_empty() && params.random.is_none() => Mode::Table,
            None => Mode::Solve,
        };
        match mode {
            Mode::Table if !positions.is_empty() || params.random.is_some() => {
                // Name what was given: `random` alone (even `--random 0`) is not a position the user typed.
                let given_positions = params.position.is_some() || params.positions.is_some();
                return Err(SpaceError::InvalidParam {
                    name: if given_positions {
                        "position"
                    } else {
                        "random"
                    },
                    reason: "a table job takes no positions: use `solve`".into(),
                });
            }
            Mode::Solve if positions.is_empty() && params.random != Some(0) => {
                return Err(SpaceError::invalid_param(
                    "position",
                    "nothing to solve: give --position, --positions, --file or --random",
                ));
            }
            _ => {}
        }
        // Stored parameters keep the positions as given (their frame defines the moves), one per `;`.
        let explicit = positions.len() - params.random.unwrap_or(0) as usize;
        let canonical = BrainballParams {
            mode: Some(mode),
            depth: params.depth,
            position: None,
            positions: (explicit > 0).then(|| {
                positions[..explicit]
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            random: params.random,
            seed: params.seed,
            pattern_tiles: params.pattern_tiles,
            ..BrainballParams::empty()
        };
        Ok(BrainballJob::new(canonical, mode, positions))
    }
}

/// Chunks a solve job is split into unless asked otherwise: enough to spread a batch over many workers.
const DEFAULT_SOLVE_CHUNKS: u64 = 256;

impl BrainballJob {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn depth(&self) -> u8 {
        self.params.depth
    }

    pub fn positions(&self) -> &[Ring] {
        &self.positions
    }

    fn max_chunks(&self) -> u64 {
        match self.mode {
            Mode::Table => table::prefixes(self.params.depth).len() as u64,
            Mode::Solve => (self.positions.len() as u64).max(1),
            Mode::Census => self.params.samples.unwrap_or(0).max(1),
            Mode::Deep => self.round.map_or(1, |r| {
                deep::prefixes(deep::split_len(r.split, r.level)).len() as u64
            }),
            Mode::Pattern => self.pattern_max_chunks(),
        }
    }

    /// Solves the positions of chunk `chunk` of `n_chunks` with `table`, whatever its origin: those of the
    /// part its resume state names, when it is a piece of a split chunk. Asked to split, it gives away the upper
    /// half of the positions it has not started.
    pub fn solve_chunk(
        &self,
        table: &Table,
        at: ChunkId,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError> {
        let part = self.solve_part(at, ctl.resume_state())?;
        let mut out = ChunkOutput::default();
        for i in SpanWalk::new(part, ctl) {
            // Inside the positions' range, a range of usizes.
            let i = i as usize;
            let sol = solve::solve_with(
                table,
                self.params.pattern_tiles as usize,
                self.params.depth,
                self.positions[i],
                ctl,
            )?;
            out.nodes += sol.probes;
            out.solutions.push(encode_solution(i, &sol));
            out.count("solved", 1);
            // Every solution is proven shortest (see `solve::Proof`); the counter says so in the tally too.
            out.count("optimal", 1);
        }
        Ok(out)
    }

    /// The positions of chunk `at` a run from `state` solves: the span it names, or the whole chunk.
    fn solve_part(&self, at: ChunkId, state: Option<&str>) -> Result<Span, SpaceError> {
        Span::of(at, self.positions.len() as u128, self.max_chunks(), state)
    }

    /// Why a job of this mode does not split a running chunk, if it does not.
    fn check_splits(&self) -> Result<(), SpaceError> {
        let why = match self.mode {
            Mode::Solve => return Ok(()),
            // Distinct entries, deduplicated in the chunk: two pieces reaching one position would count it twice,
            // and the engine merges one artifact per chunk.
            Mode::Table | Mode::Pattern => "its chunks return deduplicated entries as artifacts",
            // The hardest samples are listed per chunk: the pieces' lists are not the chunk's.
            Mode::Census => {
                "a chunk lists its own hardest samples, which its pieces' lists are not"
            }
            // The walk stops at its first solution, so a later piece would search what the chunk never does;
            // the rounds already cut one position's search into thousands of chunks.
            Mode::Deep => "a chunk stops at its first solution in walk order",
        };
        Err(SpaceError::Verification(format!(
            "brainball {:?} chunks do not split: {why}",
            self.mode
        )))
    }

    /// A solve output for the positions `part`: one proven solution each, in order, and no artifact.
    fn verify_solved(&self, part: Span, out: &ChunkOutput) -> Result<(), SpaceError> {
        if out.solutions.len() as u128 != part.len() {
            return Err(SpaceError::Verification(format!(
                "{} solutions for the {} positions of the chunk",
                out.solutions.len(),
                part.len()
            )));
        }
        // Inside the positions' range, a range of usizes.
        for (line, i) in out.solutions.iter().zip(part.lo as usize..part.hi as usize) {
            let (idx, v) = decode_solution(line)?;
            if idx != i {
                return Err(SpaceError::Verification(format!(
                    "solution {idx} reported where {i} was expected"
                )));
            }
            check_solution(self.positions[i], &v)?;
        }
        if !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "a solve chunk has no artifact".into(),
            ));
        }
        Ok(())
    }
}

impl Job for BrainballJob {
    fn params(&self) -> Value {
        serde_json::to_value(&self.params).unwrap_or(Value::Null)
    }

    /// Only a solve job splits, by its positions: each is solved on its own, so pieces add up. The others do
    /// not, and [`BrainballJob::check_splits`] says why.
    fn splits(&self) -> bool {
        self.mode == Mode::Solve
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
            self.positions.len() as u128,
            self.max_chunks(),
            parent,
            kept,
            given,
        )
    }

    /// A piece solves every position of its part, in order, as a chunk does its own.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        let part = self.solve_part(at, Some(part))?;
        if listed {
            self.verify_solved(part, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let max = self.max_chunks();
        let n_chunks = Plan::chunk_count(
            requested,
            max,
            match self.mode {
                Mode::Table | Mode::Deep => max,
                Mode::Solve | Mode::Census => DEFAULT_SOLVE_CHUNKS,
                Mode::Pattern => pattern::DEFAULT_CHUNKS,
            },
        )?;
        Ok(Plan {
            n_chunks,
            total_nodes: None,
        })
    }

    fn inputs(&self) -> Vec<JobInput> {
        if self.mode == Mode::Pattern {
            return self.pattern_inputs();
        }
        // Every other mode but the table itself reads the table of its depth; census and deep jobs read the stored
        // pattern database next, and a deep round also reads the round before.
        let table = (self.mode != Mode::Table)
            .then(|| {
                Brainball::build(BrainballParams {
                    mode: Some(Mode::Table),
                    depth: self.params.depth,
                    ..BrainballParams::empty()
                })
                .ok()
            })
            .flatten()
            .map(|t| JobInput {
                space: Brainball::NAME.to_string(),
                params: t.params(),
            });
        let patterns = matches!(self.mode, Mode::Census | Mode::Deep)
            .then(|| pattern_job::input(self.params.pattern_tiles, None))
            .flatten();
        table
            .into_iter()
            .chain(patterns)
            .chain(self.previous_round())
            .collect()
    }

    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        if self.mode == Mode::Pattern {
            return self.bind_pattern(artifacts);
        }
        self.bind_rounds(artifacts)
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        at.check(self.max_chunks())?;
        match self.mode {
            Mode::Table => {
                let part = table::build_chunk(self.params.depth, at, ctl)?;
                let mut out = ChunkOutput {
                    nodes: part.nodes,
                    ..Default::default()
                };
                out.count("entries", part.entries.len() as u128);
                out.artifact = table::entries_to_artifact(&part.entries);
                Ok(out)
            }
            Mode::Solve => {
                let Some(table) = &self.table else {
                    return Err(SpaceError::BadParams {
                        space: Brainball::NAME,
                        reason:
                            "a solve chunk needs its table: bind the table job's artifact first"
                                .into(),
                    });
                };
                self.solve_chunk(table, at, ctl)
            }
            Mode::Census | Mode::Deep => self.run_extra_chunk(at, ctl),
            Mode::Pattern => self.run_pattern_chunk(at, ctl),
        }
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        at.check(self.max_chunks())?;
        match self.mode {
            Mode::Table => {
                let n = table::check_artifact(self.params.depth, &out.artifact)?;
                if out.counters.get("entries").copied() != Some(n as u128)
                    || out.counters.len() != 1
                {
                    return Err(SpaceError::Verification(format!(
                        "counters {:?} do not match the {n} entries of the artifact",
                        out.counters
                    )));
                }
                if !out.solutions.is_empty() {
                    return Err(SpaceError::Verification(
                        "a table chunk reports no solutions".into(),
                    ));
                }
            }
            Mode::Solve => self.verify_solved(self.solve_part(at, None)?, out)?,
            Mode::Census | Mode::Deep => self.verify_extra(at, out)?,
            Mode::Pattern => self.verify_pattern(at, out)?,
        }
        Ok(())
    }

    fn merge_artifacts(
        &self,
        artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        if self.mode == Mode::Deep {
            return self.merge_round(artifacts);
        }
        if self.mode == Mode::Pattern {
            return self.merge_pattern(artifacts);
        }
        if self.mode != Mode::Table {
            return Ok(Vec::new());
        }
        let lists: Vec<&[u8]> = artifacts.collect();
        table::merge_artifacts(self.params.depth, &lists)
    }

    fn result(&self, answer: &Answer) -> Value {
        match self.mode {
            Mode::Census | Mode::Deep => self.extra_result(answer),
            Mode::Pattern => self.pattern_result(answer),
            Mode::Table => {
                let depth = self.params.depth;
                match table::summarize(&answer.artifact) {
                    Ok((_, hist)) => json!({
                        "mode": "table",
                        "depth": depth,
                        "positions": hist.iter().sum::<u64>(),
                        "histogram": hist,
                        "digest": blake3::hash(&answer.artifact).to_hex().to_string(),
                        "bytes": answer.artifact.len(),
                    }),
                    Err(e) => json!({
                        "mode": "table",
                        "depth": depth,
                        "error": e.to_string(),
                    }),
                }
            }
            Mode::Solve => {
                let mut sols: Vec<Value> = Vec::with_capacity(answer.solutions.len());
                for line in &answer.solutions {
                    if let Ok((_, v)) = decode_solution(line) {
                        sols.push(v);
                    }
                }
                let optimal = sols.iter().filter(|s| s["optimal"] == json!(true)).count();
                let max = sols.iter().filter_map(|s| s["twists"].as_u64()).max();
                json!({
                    "mode": "solve",
                    "depth": self.params.depth,
                    "count": sols.len(),
                    "optimal": optimal,
                    "max_twists": max,
                    "solutions": sols,
                })
            }
        }
    }

    fn render_text(&self, result: &Value) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if result["mode"] == "census" {
            return census::render(result);
        }
        if result["mode"] == "deep" {
            return render_deep(result);
        }
        if result["mode"] == "pattern" {
            return pattern_job::render(result);
        }
        if result["mode"] == "table" {
            if let Some(e) = result["error"].as_str() {
                let _ = writeln!(s, "depth-{} table not available: {e}", result["depth"]);
                return s;
            }
            let _ = write!(
                s,
                "depth-{} table: {} positions, ",
                result["depth"], result["positions"]
            );
            pattern_job::write_stored(&mut s, result);
            return s;
        }
        let empty = Vec::new();
        for sol in result["solutions"].as_array().unwrap_or(&empty) {
            let _ = writeln!(s, "position {}", sol["position"].as_str().unwrap_or(""));
            let label = if sol["optimal"] == json!(true) {
                "optimal"
            } else {
                "not proven optimal"
            };
            let proof = sol["proof"].as_str().unwrap_or("");
            let moves = move_names(&sol["moves"]);
            let _ = writeln!(
                s,
                "  {} twists ({label}): {}",
                sol["twists"],
                moves.join(" ")
            );
            if !proof.is_empty() {
                let _ = writeln!(s, "  proof: {proof}");
            }
            let balls = sol["balls"].as_array().unwrap_or(&empty);
            for (i, (m, b)) in moves.iter().zip(balls).enumerate() {
                let _ = writeln!(s, "  {:3}. {m:>4}  {}", i + 1, b.as_str().unwrap_or(""));
            }
        }
        let _ = writeln!(
            s,
            "{} positions solved, {} proven optimal (table depth {}), longest {} twists",
            result["count"], result["optimal"], result["depth"], result["max_twists"]
        );
        s
    }
}

#[cfg(test)]
mod tests;
