//! The job glue of the `census` and `deep` modes, kept apart from the table and solve modes so that the
//! [`Job`] impl in lib.rs only dispatches to it.

use std::sync::Arc;

use serde_json::{json, Value};

use super::ball::Ring;
use super::job::{BrainballJob, Round};
use super::params::{BrainballParams, Mode, SPACE_NAME};
use super::report::move_names;
use super::solve::{self, first_level, Proof};
use super::table::Table;
use super::{census, deep};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, JobInput, SpaceError};

/// Prefix length of a deep job unless asked: 143 chunks, enough for a few dozen workers.
const DEFAULT_SPLIT: u8 = 2;

/// Refuses the parameter `name` with `why` when it was `given`: how a mode turns away another mode's options.
fn refuse_if(given: bool, name: &'static str, why: &str) -> Result<(), SpaceError> {
    if given {
        return Err(SpaceError::invalid_param(name, why));
    }
    Ok(())
}

/// The table and solve modes take none of the census's or deep search's parameters.
pub fn refuse_other_modes_params(p: &BrainballParams) -> Result<(), SpaceError> {
    refuse_if(
        p.samples.is_some(),
        "samples",
        "only a census takes --samples",
    )?;
    refuse_if(
        p.max_twists.is_some(),
        "max-twists",
        "only a deep search takes --max-twists",
    )?;
    refuse_if(
        p.split.is_some(),
        "split",
        "only a deep search takes --split",
    )?;
    Ok(())
}

pub fn build_census(p: BrainballParams) -> Result<BrainballJob, SpaceError> {
    let samples = p.samples.ok_or_else(|| {
        SpaceError::invalid_param(
            "samples",
            "a census needs --samples N (how many random positions)",
        )
    })?;
    if samples == 0 || samples > census::MAX_SAMPLES {
        return Err(SpaceError::invalid_param(
            "samples",
            format!("{samples} is outside 1..={}", census::MAX_SAMPLES),
        ));
    }
    refuse_if(
        p.position.is_some() || p.positions.is_some() || p.random.is_some(),
        "position",
        "a census draws its own positions from --seed: use `solve` for given ones",
    )?;
    refuse_if(
        p.max_twists.is_some() || p.split.is_some(),
        "split",
        "--max-twists and --split belong to a deep search",
    )?;
    let canonical = BrainballParams {
        mode: Some(Mode::Census),
        depth: p.depth,
        seed: p.seed,
        samples: Some(samples),
        pattern_tiles: p.pattern_tiles,
        ..BrainballParams::empty()
    };
    Ok(BrainballJob::new(canonical, Mode::Census, Vec::new()))
}

pub fn build_deep(p: BrainballParams) -> Result<BrainballJob, SpaceError> {
    let text = match (&p.position, &p.positions) {
        (Some(t), None) => t.clone(),
        _ => {
            return Err(SpaceError::invalid_param(
                "position",
                "a deep search takes exactly one --position",
            ))
        }
    };
    refuse_if(
        p.random.is_some() || p.samples.is_some(),
        "random",
        "a deep search takes one --position, not random ones",
    )?;
    let ring = Ring::parse(&text)?;
    let split = p.split.unwrap_or(DEFAULT_SPLIT);
    if !(1..=deep::MAX_SPLIT).contains(&split) {
        return Err(SpaceError::invalid_param(
            "split",
            format!("{split} is outside 1..={}", deep::MAX_SPLIT),
        ));
    }
    let ball = ring.canonical();
    let (first, _) = first_level(p.depth, None, ball);
    let lowest = first + p.depth;
    let max = p.max_twists.ok_or_else(|| {
        SpaceError::invalid_param(
            "max-twists",
            format!("a deep search needs --max-twists L (the longest solution to look for, at least {lowest})"),
        )
    })?;
    // Only lengths of the position's parity exist: an odd bound for an even position means one less.
    let max = if max >= lowest && (max - lowest) % 2 == 1 {
        max - 1
    } else {
        max
    };
    let top = lowest.max(max);
    if max < lowest || top - p.depth > solve::MAX_LEVEL {
        return Err(SpaceError::invalid_param(
            "max-twists",
            format!(
                "{max} is outside {lowest}..={} for this position and depth",
                solve::MAX_LEVEL + p.depth
            ),
        ));
    }
    let canonical = BrainballParams {
        mode: Some(Mode::Deep),
        depth: p.depth,
        position: Some(ring.to_string()),
        max_twists: Some(max),
        split: Some(split),
        pattern_tiles: p.pattern_tiles,
        ..BrainballParams::empty()
    };
    let mut job = BrainballJob::new(canonical, Mode::Deep, vec![ring]);
    job.round = Some(Round {
        ball,
        level: max - p.depth,
        first,
        split,
    });
    Ok(job)
}

impl BrainballJob {
    /// The deep round two twists shorter, which this one reads, unless this is the first.
    pub(super) fn previous_round(&self) -> Option<JobInput> {
        let r = self.round?;
        if r.level < r.first + 2 {
            return None;
        }
        let prev = build_deep(BrainballParams {
            max_twists: Some(r.level - 2 + self.params.depth),
            ..self.params.clone()
        })
        .ok()?;
        Some(JobInput {
            space: SPACE_NAME.to_string(),
            params: prev.params(),
        })
    }

    /// Binds the table, then (census and deep) the stored pattern database, then (a deep round after the first)
    /// the previous round's result: the order of [`Job::inputs`].
    pub(super) fn bind_rounds(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        let reads_patterns = matches!(self.mode, Mode::Census | Mode::Deep);
        let want = 1 + usize::from(reads_patterns) + usize::from(self.previous_round().is_some());
        if artifacts.len() != want {
            return Err(SpaceError::BadParams {
                space: SPACE_NAME,
                reason: format!(
                    "this job takes {want} input artifacts, {} were given",
                    artifacts.len()
                ),
            });
        }
        let table = Table::from_bytes(artifacts[0])?;
        if table.depth() != self.params.depth {
            return Err(SpaceError::BadParams {
                space: SPACE_NAME,
                reason: format!(
                    "the input table has depth {}, this job needs {}",
                    table.depth(),
                    self.params.depth
                ),
            });
        }
        let pdb = if reads_patterns {
            let p = super::pdb::Pdb::shared(artifacts[1])?;
            if p.tiles() != self.params.pattern_tiles as usize {
                return Err(SpaceError::BadParams {
                    space: SPACE_NAME,
                    reason: format!(
                        "the input pattern database has {} tiles, this job needs {}",
                        p.tiles(),
                        self.params.pattern_tiles
                    ),
                });
            }
            Some(p)
        } else {
            None
        };
        let previous = match (self.round, artifacts.get(1 + usize::from(reads_patterns))) {
            (Some(r), Some(a)) => {
                let shorter = (r.level + self.params.depth) as usize - 2;
                if !a.is_empty() {
                    deep::check_path(r.ball, a, shorter)?;
                }
                Some(Arc::new(a.to_vec()))
            }
            _ => None,
        };
        Ok(Arc::new(BrainballJob {
            table: Some(Arc::new(table)),
            previous,
            pdb,
            ..self.clone()
        }))
    }

    fn bound_table(&self) -> Result<&Table, SpaceError> {
        self.table.as_deref().ok_or_else(|| SpaceError::BadParams {
            space: SPACE_NAME,
            reason: "this chunk needs its table: bind the table job's artifact first".into(),
        })
    }

    fn round(&self) -> Result<Round, SpaceError> {
        self.round.ok_or_else(|| SpaceError::BadParams {
            space: SPACE_NAME,
            reason: "a deep job without its position".into(),
        })
    }

    pub(super) fn run_extra_chunk(
        &self,
        at: ChunkId,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError> {
        let table = self.bound_table()?;
        let pdb = self.pdb.as_deref().ok_or_else(|| SpaceError::BadParams {
            space: SPACE_NAME,
            reason: "this chunk needs its pattern database: bind the pattern job's artifact first"
                .into(),
        })?;
        if self.mode == Mode::Census {
            let samples = self.params.samples.unwrap_or(0);
            return census::run_chunk(table, pdb, self.params.seed, samples, at, ctl);
        }
        let r = self.round()?;
        if r.level >= r.first + 2 && self.previous.is_none() {
            return Err(SpaceError::BadParams {
                space: SPACE_NAME,
                reason: "a deep round needs the previous round's result: bind its inputs first"
                    .into(),
            });
        }
        let known = deep::known_before(table, r.ball, self.previous.as_deref().map(Vec::as_slice));
        deep::run_chunk(
            table,
            pdb,
            r.ball,
            known.as_deref(),
            r.split,
            r.level,
            at,
            ctl,
        )
    }

    pub(super) fn verify_extra(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        if self.mode == Mode::Census {
            let samples = self.params.samples.unwrap_or(0);
            return census::verify(self.params.seed, samples, at, out);
        }
        let r = self.round()?;
        let known = ["passed", "probes", "bounded", "pruned"];
        out.check_counters(&known)?;
        if !out.solutions.is_empty() {
            return Err(SpaceError::Verification(
                "a deep chunk reports its solution as its artifact".into(),
            ));
        }
        if !out.artifact.is_empty() {
            deep::check_path(
                r.ball,
                &out.artifact,
                (r.level + self.params.depth) as usize,
            )?;
        }
        Ok(())
    }

    pub(super) fn merge_round(
        &self,
        artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        let r = self.round()?;
        deep::merge(r.ball, (r.level + self.params.depth) as usize, artifacts)
    }

    pub(super) fn extra_result(&self, answer: &Answer) -> Value {
        let depth = self.params.depth;
        if self.mode == Mode::Census {
            return census::result(
                depth,
                self.params.seed,
                self.params.samples.unwrap_or(0),
                answer,
            );
        }
        let (Some(r), Some(&start)) = (self.round, self.positions.first()) else {
            return json!({"mode": "deep", "error": "a deep job without its position"});
        };
        let max = r.level + depth;
        let counters = &answer.tally.counters;
        let mut v = json!({
            "mode": "deep",
            "depth": depth,
            "position": start.to_string(),
            "max_twists": max,
            "chunks": answer.tally.chunks,
            "probes": sweep_space::json_u128(counters.get("probes").copied().unwrap_or(0)),
            "pruned": sweep_space::json_u128(counters.get("pruned").copied().unwrap_or(0)),
        });
        let path = &answer.artifact;
        if path.is_empty() || deep::check_path(r.ball, path, max as usize).is_err() {
            v["found"] = json!(false);
            v["proof"] = json!(format!(
                "no solution of {} twists or fewer: the rounds of {}..={max} twists (every other length) met the \
                 depth-{depth} table nowhere, and other lengths have the wrong parity",
                max,
                r.first + depth
            ));
            return v;
        }
        let proof = if path.len() <= depth as usize {
            Proof::InTable { depth }
        } else {
            Proof::Levels {
                depth,
                pattern_bound: None,
                walked: (r.first..=path.len() as u8 - depth).step_by(2).collect(),
            }
        };
        let sol = solve::to_moves(start, path, proof);
        v["found"] = json!(true);
        v["twists"] = json!(sol.twists);
        v["optimal"] = json!(true);
        v["proof"] = json!(sol.proof.to_string());
        v["moves"] = json!(sol.moves.iter().map(|m| m.to_string()).collect::<Vec<_>>());
        v["balls"] = json!(sol.balls.iter().map(|b| b.to_string()).collect::<Vec<_>>());
        v
    }
}

pub fn render_deep(result: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(e) = result["error"].as_str() {
        let _ = writeln!(s, "deep search: {e}");
        return s;
    }
    let _ = writeln!(s, "position {}", result["position"].as_str().unwrap_or(""));
    let empty = Vec::new();
    if result["found"] == json!(true) {
        let moves = move_names(&result["moves"]);
        let _ = writeln!(
            s,
            "  {} twists (optimal): {}",
            result["twists"],
            moves.join(" ")
        );
        let balls = result["balls"].as_array().unwrap_or(&empty);
        for (i, (m, b)) in moves.iter().zip(balls).enumerate() {
            let _ = writeln!(s, "  {:3}. {m:>4}  {}", i + 1, b.as_str().unwrap_or(""));
        }
    } else {
        let _ = writeln!(s, "  no solution within {} twists", result["max_twists"]);
    }
    let _ = writeln!(s, "  proof: {}", result["proof"].as_str().unwrap_or(""));
    let _ = writeln!(
        s,
        "  this round: {} chunks, {} table probes, {} nodes cut by the pattern bound",
        result["chunks"], result["probes"], result["pruned"]
    );
    s
}
