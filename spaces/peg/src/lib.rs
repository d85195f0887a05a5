//! Peg solitaire on five boards (facts in `docs/spaces/peg.md`).
//!
//! A position is a `u64` bitboard (see [`board`] for the bit layout and the hole names `ROW,COL` counted from 1
//! at the top left). Three modes:
//! - `solve` ([`solve`]): one winning sequence: a budgeted forward DFS, then beam searches down to an exact
//!   endgame table, then a complete DFS; impossible start/goal pairs are reported with the position-class reason
//!   when the classes differ, a pagoda function's figures when one separates them (including functions derived
//!   by a linear program for this start), or after an exhaustive search otherwise. One chunk.
//! - `count`: the exact number of winning move sequences (u128, printed as a decimal string).
//! - `positions`: reachable positions per peg count, raw and up to symmetry, and those on a path to the goal.
//!
//! Both run as a DAG of jobs ([`dag`], kernels in [`layers`]): one job per layer of a breadth-first search over
//! canonical positions, split into shards that each expand their own part of the previous layer, so every
//! position is expanded once whatever the number of chunks. The single-chunk methods of [`count`] and
//! [`positions`] stay as the independent cross-check of the tests.
//!
//! "Up to symmetry" means up to the board symmetries that keep both the start hole and the goal (all eight on
//! the English centre game): only those map the reachable set and the winning set onto themselves.

pub mod board;
pub mod count;
pub mod dag;
pub mod endgame;
pub mod game;
pub mod layer_artifacts;
pub mod layers;
pub mod pagoda;
mod params;
pub mod positions;
pub mod solve;
mod solve_beam;
pub mod solve_layers;

use std::fmt::Write;

use serde_json::{json, Value};

use board::{Board, BoardKind};
use game::{Game, Goal};
use params::{layer_counter, LAYER_FIELDS, SPACE_NAME};
pub use params::{Mode, PegParams};
use solve::{Outcome, Solver};
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Tally,
};

/// The registry's handle for the peg solitaire space.
pub struct Peg;

/// Default chunk count of a `count` job. Chunks share subtrees that each expands again (see [`count`]): on the
/// English board one chunk expands 23.5 M positions, two chunks 36.8 M together, eight far more, so the default
/// feeds two workers and no more.
const DEFAULT_COUNT_CHUNKS: u64 = 2;
/// `positions` chunks only split the counting, not the search (see [`positions`]).
const MAX_POSITION_CHUNKS: u64 = 1024;

impl SearchSpace for Peg {
    const NAME: &'static str = SPACE_NAME;
    const ABOUT: &'static str =
        "Peg solitaire: one solution, the number of solutions, or every reachable position";
    type Params = PegParams;

    fn build(params: PegParams) -> Result<impl Job, SpaceError> {
        PegJob::new(params)
    }
}

#[derive(Debug, Clone)]
pub struct PegJob {
    params: PegParams,
    game: Game,
    /// `count`, `positions` and their internal stages run as a DAG of jobs ([`dag`]); `None` for `solve`, and
    /// for the single-chunk methods the tests keep as an independent cross-check.
    dag: Option<dag::Dag>,
}

impl PegJob {
    /// The job `params` ask for, or why they cannot be searched.
    fn new(params: PegParams) -> Result<PegJob, SpaceError> {
        let board = Board::new(params.board);
        let start_text = params.start.clone().unwrap_or_else(|| {
            if params.board == BoardKind::Triangle {
                "1,1".into()
            } else {
                "centre".into()
            }
        });
        let start_hole = board
            .parse_hole(&start_text)
            .map_err(|reason| SpaceError::invalid_param("start", reason))?;
        let goal = match params.goal.as_deref() {
            None => Goal::Hole(start_hole),
            Some(t) if t.trim().eq_ignore_ascii_case("any") => Goal::Any,
            Some(t) => Goal::Hole(
                board
                    .parse_hole(t)
                    .map_err(|reason| SpaceError::invalid_param("goal", reason))?,
            ),
        };
        // Canonical parameters: resolved hole names, so equal jobs have equal params.
        let params = PegParams {
            start: Some(board.name(start_hole)),
            goal: Some(match goal {
                Goal::Hole(b) => board.name(b),
                Goal::Any => "any".into(),
            }),
            ..params
        };
        let params = dag::canonical(params);
        let game = Game::new(board, start_hole, goal);
        let dag = dag::Dag::new(&params, &game)?;
        Ok(PegJob { params, game, dag })
    }

    /// A job over any game (tests use custom boards).
    #[cfg(test)]
    fn from_game(game: Game, mode: Mode, seed: u64) -> PegJob {
        PegJob {
            params: PegParams {
                board: game.board.kind,
                start: None,
                goal: None,
                seed,
                mode,
                stage: None,
                layer: None,
                shards: None,
            },
            game,
            dag: None,
        }
    }

    fn encode_moves(&self, moves: &[usize]) -> String {
        let b = &self.game.board;
        moves
            .iter()
            .map(|&i| {
                let m = b.moves[i];
                format!("{}>{}>{}", b.name(m.from), b.name(m.over), b.name(m.to))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn parse_moves(&self, s: &str) -> Result<Vec<(u8, u8, u8)>, SpaceError> {
        let b = &self.game.board;
        s.split_whitespace()
            .map(|t| {
                let parts: Vec<&str> = t.split('>').collect();
                let hole = |x: &str| {
                    b.parse_hole(x)
                        .map_err(|e| SpaceError::Verification(format!("move `{t}`: {e}")))
                };
                match parts.as_slice() {
                    [f, o, to] => Ok((hole(f)?, hole(o)?, hole(to)?)),
                    _ => Err(SpaceError::Verification(format!(
                        "move `{t}` is not FROM>OVER>TO"
                    ))),
                }
            })
            .collect()
    }

    /// The DAG role that splits its chunks, or why this job does not.
    fn splitting_dag(&self) -> Result<&dag::Dag, SpaceError> {
        self.dag.as_ref().ok_or_else(|| {
            SpaceError::Verification(
                "this peg job does not split: a solve chunk reports one outcome".into(),
            )
        })
    }

    fn count_chunks_max(&self) -> u64 {
        count::max_chunks(&self.game)
    }
}

/// A solve chunk's outcome: exactly one of these counters, set to 1.
const OUTCOMES: [&str; 4] = [
    "solved",
    "impossible_class",
    "impossible_pagoda",
    "impossible_search",
];
/// The size of an impossible-by-search proof ([`solve_layers::SearchProof`]).
const PROOF_POSITIONS: &str = "search_positions";
const PROOF_AFTER: &str = "search_emptied_after";
const PROOF_FUNCTIONS: &str = "search_functions";
const PROOF_FIGURES: [&str; 3] = [PROOF_POSITIONS, PROOF_AFTER, PROOF_FUNCTIONS];

fn search_proof_text(tally: &Tally) -> String {
    let positions = tally.counter(PROOF_POSITIONS);
    if positions == 0 {
        return "exhaustive search: no reachable position leads to the goal".into();
    }
    format!(
        "exhaustive search, breadth first: no position after {} jumps can still lead to the goal ({} \
         canonical positions kept on the way; every other one ruled out by one of {} pagoda functions, \
         proven by linear programs and checked exactly, or by the exact endgame table)",
        tally.counter(PROOF_AFTER),
        positions,
        tally.counter(PROOF_FUNCTIONS)
    )
}

impl Job for PegJob {
    fn params(&self) -> Value {
        serde_json::to_value(&self.params).unwrap_or(Value::Null)
    }

    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        if let Some(d) = &self.dag {
            return d.plan(&self.game, requested);
        }
        let n_chunks = match self.params.mode {
            Mode::Solve => Plan::chunk_count(requested, 1, 1)?,
            Mode::Count => {
                Plan::chunk_count(requested, self.count_chunks_max(), DEFAULT_COUNT_CHUNKS)?
            }
            Mode::Positions => Plan::chunk_count(requested, MAX_POSITION_CHUNKS, 1)?,
        };
        Ok(Plan {
            n_chunks,
            total_nodes: None,
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        if let Some(d) = &self.dag {
            return d.run_chunk(&self.game, at, ctl);
        }
        at.check(u64::MAX)?;
        let mut out = ChunkOutput::default();
        match self.params.mode {
            Mode::Solve => {
                if at.n_chunks != 1 {
                    return Err(SpaceError::out_of_plan(at));
                }
                let mut solver = Solver::new(&self.game, self.params.seed, ctl);
                match solver.solve()? {
                    Outcome::Solved(moves) => {
                        out.count("solved", 1);
                        out.solutions.push(self.encode_moves(&moves));
                    }
                    Outcome::ImpossibleByClass(_) => out.count("impossible_class", 1),
                    Outcome::ImpossibleByPagoda(_) => out.count("impossible_pagoda", 1),
                    Outcome::ImpossibleBySearch => {
                        out.count("impossible_search", 1);
                        if let Some(p) = solver.proof {
                            out.count(PROOF_POSITIONS, u128::from(p.positions));
                            out.count(PROOF_AFTER, u128::from(p.emptied_after));
                            out.count(PROOF_FUNCTIONS, u128::from(p.functions));
                        }
                    }
                }
                out.nodes = solver.nodes + solver.table_nodes;
            }
            Mode::Count => {
                let Some((_, classes)) = count::split_depth(&self.game, at.n_chunks) else {
                    return Err(SpaceError::out_of_plan(at));
                };
                let (lo, hi) = at.split(classes.len() as u128);
                let mut counter = count::Counter::new(&self.game, ctl);
                let mut total = 0u128;
                for &(pos, ways) in &classes[lo as usize..hi as usize] {
                    total += ways * counter.wins(pos)?;
                }
                out.count("count", total);
                out.count("classes", hi - lo);
                out.nodes = counter.finish();
            }
            Mode::Positions => {
                if at.n_chunks > MAX_POSITION_CHUNKS {
                    return Err(SpaceError::out_of_plan(at));
                }
                let (layers, nodes) = positions::run(&self.game, at, ctl)?;
                for (pegs, l) in layers.iter().enumerate() {
                    for (what, v) in LAYER_FIELDS.iter().zip([
                        l.reachable,
                        l.reachable_raw,
                        l.on_path,
                        l.on_path_raw,
                    ]) {
                        if v > 0 {
                            out.count(&layer_counter(pegs, what), u128::from(v));
                        }
                    }
                }
                out.nodes = nodes;
            }
        }
        Ok(out)
    }

    /// The count join splits by the join layer's positions ([`dag::Dag::splits`] says why the other DAG jobs
    /// do not). A `solve` chunk does not: it looks for one winning sequence, cheap proofs first, and reports
    /// exactly one outcome, which pieces of its search could not add up to.
    fn splits(&self) -> bool {
        self.dag.as_ref().is_some_and(dag::Dag::splits)
    }

    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        self.splitting_dag()?.check_split(at, parent, kept, given)
    }

    /// Every check of a count chunk's verifier holds for any part of it; a part also joins no more classes
    /// than it has positions.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.splitting_dag()?.check_part(at, part, out)?;
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        if let Some(d) = self.dag.as_ref().filter(|d| d.is_stage()) {
            return d.verify_stage(&self.game, at, out);
        }
        at.check(u64::MAX)?;
        if !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "the peg space has no artifacts".into(),
            ));
        }
        let bad_counter = |k: &String| SpaceError::Verification(format!("unknown counter `{k}`"));
        match self.params.mode {
            Mode::Solve => {
                for k in out.counters.keys() {
                    if !OUTCOMES.contains(&k.as_str()) && !PROOF_FIGURES.contains(&k.as_str()) {
                        return Err(bad_counter(k));
                    }
                }
                let outcomes: u128 = OUTCOMES
                    .iter()
                    .map(|k| out.counters.get(*k).copied().unwrap_or(0))
                    .sum();
                let figures = PROOF_FIGURES.iter().any(|k| out.counters.contains_key(*k));
                if figures && !out.counters.contains_key("impossible_search") {
                    return Err(SpaceError::Verification(
                        "search figures belong to an impossible-by-search outcome".into(),
                    ));
                }
                if outcomes != 1 {
                    return Err(SpaceError::Verification(
                        "a solve chunk reports exactly one outcome".into(),
                    ));
                }
                let solved = out.counters.contains_key("solved");
                if solved != (out.solutions.len() == 1) || out.solutions.len() > 1 {
                    return Err(SpaceError::Verification(
                        "a solved chunk carries exactly one move list".into(),
                    ));
                }
                for s in &out.solutions {
                    let moves = self.parse_moves(s)?;
                    self.game.replay(&moves).map_err(SpaceError::Verification)?;
                }
                if out.counters.contains_key("impossible_class")
                    && self.game.class_obstruction().is_none()
                {
                    return Err(SpaceError::Verification(
                        "impossible by class claimed, but start and goal have the same class"
                            .into(),
                    ));
                }
                if out.counters.contains_key("impossible_pagoda")
                    && solve::pagoda_obstruction(&self.game).is_none()
                {
                    return Err(SpaceError::Verification(
                        "impossible by a pagoda function claimed, but none separates start and goal"
                            .into(),
                    ));
                }
            }
            Mode::Count => {
                for k in out.counters.keys() {
                    if !["count", "classes"].contains(&k.as_str()) {
                        return Err(bad_counter(k));
                    }
                }
                if !out.solutions.is_empty() {
                    return Err(SpaceError::Verification(
                        "count chunks list no solutions".into(),
                    ));
                }
            }
            Mode::Positions => {
                let n = self.game.board.n_holes as usize;
                for pegs in 0..=n {
                    let get = |w: &str| {
                        out.counters
                            .get(&layer_counter(pegs, w))
                            .copied()
                            .unwrap_or(0)
                    };
                    let [r, rr, p, pr] = LAYER_FIELDS.map(get);
                    if p > r || pr > rr || r > rr || p > pr {
                        return Err(SpaceError::Verification(format!(
                            "inconsistent figures for {pegs} pegs"
                        )));
                    }
                }
                let known = (0..=n)
                    .flat_map(|p| LAYER_FIELDS.iter().map(move |w| layer_counter(p, w)))
                    .collect::<Vec<_>>();
                if let Some(k) = out.counters.keys().find(|k| !known.contains(k)) {
                    return Err(bad_counter(k));
                }
            }
        }
        Ok(())
    }

    fn inputs(&self) -> Vec<sweep_space::JobInput> {
        match &self.dag {
            Some(d) => d.inputs(&self.params, &self.game),
            None => Vec::new(),
        }
    }

    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<std::sync::Arc<dyn Job>, SpaceError> {
        let Some(d) = &self.dag else {
            return Err(SpaceError::BadParams {
                space: Peg::NAME,
                reason: "a solve job takes no input artifacts".into(),
            });
        };
        Ok(std::sync::Arc::new(PegJob {
            dag: Some(d.bind(&self.params, &self.game, artifacts)?),
            ..self.clone()
        }))
    }

    fn merge_artifacts(
        &self,
        artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        match &self.dag {
            Some(d) => d.merge(artifacts),
            None => Ok(Vec::new()),
        }
    }

    fn result(&self, answer: &Answer) -> Value {
        if let Some(d) = self.dag.as_ref().filter(|d| d.is_stage()) {
            return d.stage_result(&self.game, answer);
        }
        let b = &self.game.board;
        let mut head = json!({
            "board": self.params.board,
            "holes": b.n_holes,
            "start": b.name(self.game.start_hole),
            "goal": match self.game.goal {
                Goal::Hole(h) => b.name(h),
                Goal::Any => "any".into(),
            },
            "mode": self.params.mode,
        });
        let body = match self.params.mode {
            Mode::Solve => {
                let solution = answer
                    .solutions
                    .first()
                    .and_then(|s| self.parse_moves(s).ok());
                let moves: Vec<Value> = solution
                    .iter()
                    .flatten()
                    .map(
                        |&(f, o, t)| json!({"from": b.name(f), "over": b.name(o), "to": b.name(t)}),
                    )
                    .collect();
                let impossible = if answer.tally.counter("impossible_class") > 0 {
                    self.game.class_obstruction()
                } else if answer.tally.counter("impossible_pagoda") > 0 {
                    solve::pagoda_obstruction(&self.game)
                } else if answer.tally.counter("impossible_search") > 0 {
                    Some(search_proof_text(&answer.tally))
                } else {
                    None
                };
                json!({
                    "seed": self.params.seed,
                    "solved": solution.is_some(),
                    "moves": moves,
                    "impossible": impossible,
                })
            }
            Mode::Count => json!({
                "count": answer.tally.counter("count").to_string(),
                "symmetries": self.game.game_group.len(),
            }),
            Mode::Positions => {
                let n = b.n_holes as usize;
                let mut arrays: Vec<Vec<u128>> = vec![Vec::new(); 4];
                let mut pegs = Vec::new();
                for p in (1..=n).rev() {
                    let row: Vec<u128> = LAYER_FIELDS
                        .iter()
                        .map(|w| answer.tally.counter(&layer_counter(p, w)))
                        .collect();
                    if row[0] == 0 {
                        continue;
                    }
                    pegs.push(p);
                    for (a, v) in arrays.iter_mut().zip(row) {
                        a.push(v);
                    }
                }
                // Saturating, and as JSON numbers or decimal strings (`json_u128`): counters are u128 and a
                // worker may report any of them.
                let totals: Vec<Value> = arrays
                    .iter()
                    .map(|a| {
                        sweep_space::json_u128(a.iter().fold(0u128, |s, v| s.saturating_add(*v)))
                    })
                    .collect();
                let arrays: Vec<Vec<Value>> = arrays
                    .iter()
                    .map(|a| a.iter().map(|v| sweep_space::json_u128(*v)).collect())
                    .collect();
                json!({
                    "symmetries": self.game.game_group.len(),
                    "positions": {
                        "pegs": pegs,
                        "reachable": arrays[0],
                        "reachable_raw": arrays[1],
                        "on_path": arrays[2],
                        "on_path_raw": arrays[3],
                        "totals": {
                            "reachable": totals[0],
                            "reachable_raw": totals[1],
                            "on_path": totals[2],
                            "on_path_raw": totals[3],
                        }
                    }
                })
            }
        };
        if let (Some(h), Some(extra)) = (head.as_object_mut(), body.as_object()) {
            for (k, v) in extra {
                h.insert(k.clone(), v.clone());
            }
        }
        head
    }

    fn render_text(&self, result: &Value) -> String {
        if self.dag.as_ref().is_some_and(|d| d.is_stage()) {
            return dag::Dag::stage_text(result);
        }
        let b = &self.game.board;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "peg solitaire, {:?} board ({} holes), start {}, goal {}",
            self.params.board,
            b.n_holes,
            result["start"].as_str().unwrap_or_default(),
            result["goal"].as_str().unwrap_or_default()
        );
        match self.params.mode {
            Mode::Solve => {
                if let Some(why) = result["impossible"].as_str() {
                    let _ = writeln!(s, "impossible: {why}");
                    return s;
                }
                let moves: Vec<(u8, u8, u8)> = result["moves"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| {
                        let h = |k: &str| m[k].as_str().and_then(|t| b.parse_hole(t).ok());
                        Some((h("from")?, h("over")?, h("to")?))
                    })
                    .collect();
                let _ = writeln!(s, "{} moves (from over to):", moves.len());
                for (i, &(f, o, t)) in moves.iter().enumerate() {
                    let _ = writeln!(
                        s,
                        "{:3}. {} over {} to {}",
                        i + 1,
                        b.name(f),
                        b.name(o),
                        b.name(t)
                    );
                }
                match self.game.replay(&moves) {
                    Ok(boards) => {
                        s.push('\n');
                        s.push_str(&b.draw_row(&boards, 16));
                    }
                    Err(e) => {
                        let _ = writeln!(s, "(the moves do not replay: {e})");
                    }
                }
            }
            Mode::Count => {
                let _ = writeln!(
                    s,
                    "winning move sequences: {}",
                    result["count"].as_str().unwrap_or_default()
                );
            }
            Mode::Positions => {
                let p = &result["positions"];
                let _ = writeln!(
                    s,
                    "up to the {} symmetries that keep start and goal",
                    result["symmetries"]
                );
                let _ = writeln!(
                    s,
                    "{:>5} {:>14} {:>14} {:>14} {:>14}",
                    "pegs", "reachable", "up to sym", "on a path", "up to sym"
                );
                let col = |k: &str, i: usize| p[k][i].as_u64().unwrap_or(0);
                for (i, pegs) in p["pegs"].as_array().into_iter().flatten().enumerate() {
                    let _ = writeln!(
                        s,
                        "{:>5} {:>14} {:>14} {:>14} {:>14}",
                        pegs,
                        col("reachable_raw", i),
                        col("reachable", i),
                        col("on_path_raw", i),
                        col("on_path", i)
                    );
                }
                let t = |k: &str| p["totals"][k].as_u64().unwrap_or(0);
                let _ = writeln!(
                    s,
                    "{:>5} {:>14} {:>14} {:>14} {:>14}",
                    "total",
                    t("reachable_raw"),
                    t("reachable"),
                    t("on_path_raw"),
                    t("on_path")
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod dag_tests;
#[cfg(test)]
mod tests;
