//! Billiard difference triangles (the original "Billiard" program, generalised; facts in `docs/spaces/billiard.md`).
//!
//! A triangle of `rows` rows holds `1..=n`, `n = rows(rows+1)/2`, each once; every ball below the top row is the
//! absolute difference of the two balls above it. The original program solves 5 rows (15 billiard balls) and finds two
//! mirror-image solutions; for 6 rows and more an exhaustive search proves that none exists, and the nodes it
//! visited are the size of that proof.
//!
//! Two methods:
//! - `brute` ([`brute`]): the original program's BilliardBruteForce, every permutation of the index vector in lexicographic
//!   order, chunked by rank ranges (`--ranks` restricts it to a slice), with failing blocks counted in one step.
//! - `strategy` ([`strategy`]): backtracking over the top row with used-number masks and mirror breaking, chunked
//!   by the first two top balls. Its long chunks save a cursor and resume from it on any worker, and a running
//!   chunk gives away prefixes it has not started when asked to split.
//!
//! Unique solutions (up to the left-right mirror) are counted where they are found, once per mirror class, so
//! counts add up exactly over any split into chunks.

pub mod brute;
pub mod strategy;
pub mod triangle;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use sweep_space::perm::{FACTORIALS, MAX_N};
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Span,
};

use self::brute::Brute;
use self::strategy::{prefixes, Saves, MAX_ROWS, SAVE_EVERY};
use self::triangle::{draw, Geometry};

/// The registry's handle for the billiard space.
pub struct Billiard;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every permutation of 1..n in lexicographic order, as the original program does (rows <= 5).
    Brute,
    /// Backtracking over the top row; lower rows follow by differences.
    Strategy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct BilliardParams {
    /// Number of rows r: the triangle holds 1..r(r+1)/2.
    #[arg(long, default_value_t = 5)]
    pub rows: u32,
    /// Search method.
    #[arg(long, value_enum, default_value_t = Method::Strategy)]
    pub method: Method,
    /// Brute force only: test just the permutation ranks START..END (END exclusive, ranks of the original program's
    /// lexicographic order, 0-based), e.g. `--ranks 0..1000000000`.
    #[arg(long, value_name = "START..END")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<String>,
}

/// The largest brute-force triangle: its n! must fit the u64 rank arithmetic of [`sweep_space::perm`].
const MAX_BRUTE_ROWS: u32 = 5;

impl SearchSpace for Billiard {
    const NAME: &'static str = "billiard";
    const ABOUT: &'static str =
        "Billiard difference triangles: 1..r(r+1)/2 in r rows, each ball the difference of the two above";
    type Params = BilliardParams;

    fn build(params: BilliardParams) -> Result<impl Job, SpaceError> {
        BilliardJob::new(params)
    }
}

/// Parses `START..END` (decimal, `_` allowed as a digit separator) into a non-empty range within `0..=total`.
fn parse_ranks(text: &str, total: u64) -> Result<(u64, u64), SpaceError> {
    let bad = |reason: String| SpaceError::invalid_param("ranks", reason);
    let Some((start, end)) = text.split_once("..") else {
        return Err(bad(format!(
            "`{text}` is not of the form START..END (e.g. 0..1000000)"
        )));
    };
    let number = |part: &str| -> Result<u64, SpaceError> {
        let digits: String = part.trim().chars().filter(|&c| c != '_').collect();
        digits
            .parse::<u64>()
            .map_err(|e| bad(format!("`{part}` in `{text}` is not a rank: {e}")))
    };
    let (start, end) = (number(start)?, number(end)?);
    if start >= end {
        return Err(bad(format!("`{text}` is empty: START must be below END")));
    }
    if end > total {
        return Err(bad(format!(
            "`{text}` ends past the last rank: there are {total} permutations (ranks 0..{total})"
        )));
    }
    Ok((start, end))
}

#[derive(Debug)]
pub struct BilliardJob {
    params: BilliardParams,
    geo: Geometry,
    /// Brute force: the rank range `[lo, hi)` of the job.
    ranks: (u64, u64),
    /// Strategy: the chunk prefixes (first two top balls).
    prefixes: Vec<[u8; 2]>,
}

impl BilliardJob {
    /// The job `params` ask for, or why they cannot be searched.
    fn new(mut params: BilliardParams) -> Result<BilliardJob, SpaceError> {
        SpaceError::check_param_range("rows", params.rows as usize, 1..=MAX_ROWS)?;
        let geo = Geometry::new(params.rows as usize);
        let ranks = match (params.method, &params.ranks) {
            (Method::Brute, _) if params.rows > MAX_BRUTE_ROWS => {
                return Err(SpaceError::invalid_param(
                    "rows",
                    format!(
                        "brute force enumerates n! permutations and is limited to rows <= {MAX_BRUTE_ROWS} \
                         (n = {} > {MAX_N}); use --method strategy",
                        geo.n
                    ),
                ));
            }
            (Method::Brute, Some(text)) => parse_ranks(text, FACTORIALS[geo.n])?,
            (Method::Brute, None) => (0, FACTORIALS[geo.n]),
            (Method::Strategy, Some(_)) => {
                return Err(SpaceError::invalid_param(
                    "ranks",
                    "permutation ranks only apply to --method brute",
                ));
            }
            (Method::Strategy, None) => (0, 0),
        };
        // Canonical parameters: `1_000..2_000` and `1000..2000` are the same job.
        if params.ranks.is_some() {
            params.ranks = Some(format!("{}..{}", ranks.0, ranks.1));
        }
        let prefixes = match params.method {
            Method::Strategy => prefixes(geo.rows),
            Method::Brute => Vec::new(),
        };
        Ok(BilliardJob {
            params,
            geo,
            ranks,
            prefixes,
        })
    }

    fn max_chunks(&self) -> u64 {
        match self.params.method {
            Method::Brute => (self.ranks.1 - self.ranks.0).min(1 << 32),
            Method::Strategy => self.prefixes.len().max(1) as u64,
        }
    }

    /// A brute-force chunk tests every permutation of its rank range once, listed or not.
    fn check_nodes(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        if self.params.method == Method::Brute {
            let (lo, hi) = self.chunk_ranks(at);
            out.check_nodes(u128::from(hi - lo), "permutations tested")?;
        }
        Ok(())
    }

    /// Strategy only: brute force chunks are ranges of ranks of about equal cost, which the plan already cuts
    /// evenly, and its kernel runs a rank range in one loop with no boundary worth looking at.
    fn check_splits(&self) -> Result<(), SpaceError> {
        if !self.splits() {
            return Err(SpaceError::Verification(
                "brute force billiard chunks do not split".into(),
            ));
        }
        Ok(())
    }

    /// The rank range of brute chunk `chunk`.
    fn chunk_ranks(&self, at: ChunkId) -> (u64, u64) {
        let (lo, hi) = self.ranks;
        let (a, b) = at.split(u128::from(hi - lo));
        // a, b <= hi - lo, which is a u64.
        (lo + a as u64, lo + b as u64)
    }
}

impl Job for BilliardJob {
    fn params(&self) -> Value {
        serde_json::to_value(&self.params).unwrap_or(Value::Null)
    }

    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let max = self.max_chunks();
        let n_chunks = Plan::chunk_count(requested, max, 256)?;
        let total_nodes = match self.params.method {
            Method::Brute => Some(u128::from(self.ranks.1 - self.ranks.0)),
            Method::Strategy => None,
        };
        Ok(Plan {
            n_chunks,
            total_nodes,
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        at.check(self.max_chunks())?;
        match self.params.method {
            Method::Brute => {
                let mut out = ChunkOutput::default();
                let (lo, hi) = self.chunk_ranks(at);
                Brute::new(&self.geo, lo, hi, ctl, &mut out).run()?;
                Ok(out)
            }
            Method::Strategy => {
                let mut sink = |state: String| ctl.save_resume_state(state);
                let saves = Saves {
                    every: SAVE_EVERY,
                    sink: &mut sink,
                };
                strategy::run_chunk(
                    &self.geo,
                    &self.prefixes,
                    at,
                    ctl,
                    ctl.resume_state(),
                    saves,
                )
            }
        }
    }

    fn splits(&self) -> bool {
        self.params.method == Method::Strategy
    }

    /// Parts are spans of the chunk's prefixes; a parent may also be a cursor, which names its part.
    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        at.check(self.max_chunks())?;
        let parent = strategy::part_of(self.prefixes.len(), at, parent)?;
        let parent = Span {
            lo: parent.start as u128,
            hi: parent.end as u128,
        };
        Span::check_split(
            at,
            self.prefixes.len() as u128,
            self.max_chunks(),
            Some(&parent.state()),
            kept,
            given,
        )
    }

    /// Every check a strategy chunk's verifier makes holds for any set of its prefixes.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        at.check(self.max_chunks())?;
        strategy::part_of(self.prefixes.len(), at, Some(part))?;
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        at.check(self.max_chunks())?;
        out.check_unique_counters("billiard")?;
        self.check_nodes(at, out)?;
        for s in &out.solutions {
            let balls = self.geo.parse_solution(s)?;
            if self.geo.canonical(&balls) != balls {
                return Err(SpaceError::Verification(format!(
                    "triangle `{s}` is not in canonical (mirror-minimal) form"
                )));
            }
        }
        Ok(())
    }

    fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        at.check(self.max_chunks())?;
        out.check_unique_counts_only("billiard")?;
        out.check_unlisted("triangles")?;
        self.check_nodes(at, out)
    }

    fn result(&self, answer: &Answer) -> Value {
        let mut canonical = Vec::new();
        let mut index_vectors = Vec::new();
        for s in &answer.solutions {
            let Ok(balls) = self.geo.parse_solution(s) else {
                continue;
            };
            canonical.push(json!(self.geo.to_rows(&balls)));
            index_vectors.push(json!(balls));
        }
        let solutions = answer.tally.counter("solutions");
        let ranks = match self.params.method {
            Method::Brute => json!({ "start": self.ranks.0, "end": self.ranks.1 }),
            Method::Strategy => Value::Null,
        };
        json!({
            "rows": self.geo.rows,
            "balls": self.geo.n,
            "method": self.params.method,
            "ranks": ranks,
            "whole_space": self.params.ranks.is_none(),
            "solutions": sweep_space::json_u128(solutions),
            "unique": sweep_space::json_u128(answer.tally.counter("unique")),
            "exists": solutions > 0,
            "nodes": sweep_space::json_u128(answer.tally.nodes),
            "canonical": canonical,
            "canonical_truncated": answer.solutions_truncated,
            "index_vectors": index_vectors,
        })
    }

    fn render_text(&self, result: &Value) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let rows = self.geo.rows;
        let n = self.geo.n;
        let nodes = &result["nodes"];
        let what = match self.params.method {
            Method::Brute => "permutations tested",
            Method::Strategy => "placements tried",
        };
        let scope = if self.params.ranks.is_some() {
            format!(
                " among permutation ranks {}..{}",
                self.ranks.0, self.ranks.1
            )
        } else {
            String::new()
        };
        let rows_text = if rows == 1 {
            "1 row".to_string()
        } else {
            format!("{rows} rows")
        };
        let solutions = result["solutions"].as_u64().unwrap_or(0);
        if solutions == 0 {
            let _ = writeln!(
                s,
                "No difference triangle with {rows_text} (numbers 1..{n}) exists{scope}: the exhaustive {} search \
                 proves it with {nodes} {what}.",
                method_name(self.params.method)
            );
            return s;
        }
        let _ = writeln!(
            s,
            "Difference triangles with {rows_text} (numbers 1..{n}){scope}: {solutions} solutions, {} unique up \
             to the mirror ({nodes} {what}).",
            result["unique"]
        );
        const MAX_DRAWN: usize = 20;
        let list = result["index_vectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for item in list.iter().take(MAX_DRAWN) {
            let balls: Vec<u8> = item
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|b| b.as_u64())
                        .map(|b| b as u8)
                        .collect()
                })
                .unwrap_or_default();
            if balls.len() != n {
                continue;
            }
            let mirror = self.geo.mirrored(&balls);
            let _ = writeln!(s);
            let _ = write!(s, "{}", draw(&self.geo.to_rows(&balls), n));
            if mirror != balls {
                let _ = writeln!(s, "  and its mirror image:");
                let _ = write!(s, "{}", draw(&self.geo.to_rows(&mirror), n));
            }
        }
        if list.len() > MAX_DRAWN {
            let _ = writeln!(
                s,
                "\n({} more unique triangles in --json)",
                list.len() - MAX_DRAWN
            );
        }
        if result["canonical_truncated"].as_bool() == Some(true) {
            let _ = writeln!(s, "(list truncated; counts are exact)");
        }
        s
    }
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Brute => "brute-force",
        Method::Strategy => "strategy",
    }
}

#[cfg(test)]
mod tests;
