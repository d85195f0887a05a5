//! Buzzled (facts in `docs/spaces/buzzled.md`): colour the tiles of a hexagonal board yellow or
//! black so that every straight row, in all three directions, holds as many yellow tiles as its clue says. Find
//! every such board.
//!
//! - [`geometry`]: boards of any side, the original program's numbering for side 4 and its generalisation, the clue order.
//! - [`puzzle`]: the checks run before any search and the human-writable puzzle file format.
//! - [`brute`]: the original program's method, every board with the right number of yellow tiles, over combination ranks.
//! - [`propagate`]: exact line solving with backtracking, the default; solves sides 5 and 6 in milliseconds.
//! - [`generate`]: random puzzles with exactly one solution.
//! - [`svg`]: pictures of solutions.
//!
//! Clues have no symmetry to break (they pin the board down), so every solution is reported as itself, in exactly
//! one chunk, as its board string.

pub mod brute;
pub mod generate;
pub mod geometry;
pub mod propagate;
pub mod puzzle;
pub mod svg;

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use brute::Brute;
use geometry::Geometry;
use propagate::{Flow, Solver, N_PATHS};
use puzzle::{check_clues, parse_clue_list, parse_puzzle_file};
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Span,
};

/// The registry's handle for the Buzzled space.
pub struct Buzzled;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The original program's: every board with the right number of yellow tiles (boards of up to 64 tiles).
    Brute,
    /// Line solving plus backtracking: exact, all solutions, any side.
    Propagate,
}

fn default_method() -> Method {
    Method::Propagate
}

// Parameters. The canonical form (what a job stores) always holds `side` and `clues`; a puzzle file's text is
// turned into them when the job is built. (A plain comment: clap would show a doc comment as the help's title.)
/// Every yellow/black colouring of a hexagonal board whose rows show the given yellow counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct BuzzledParams {
    /// Yellow counts of the rows, clockwise from the top, separated by commas (the original program's order for side 4).
    #[arg(long, value_name = "LIST")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clues: Option<String>,
    /// Board side (default 4, the original program's master board; 3 = mini, 5 = expert).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<usize>,
    /// Search method.
    #[arg(long, value_enum, default_value_t = Method::Propagate)]
    #[serde(default = "default_method")]
    pub method: Method,
    /// A name for the puzzle, shown with the answer.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A puzzle file (`side: N`, `clues: ...`, optional `name: ...`; `#` comments). The sweep CLI reads it and
    /// passes its text on as --puzzle-text, so jobs store the clues, never a path.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub puzzle: Option<String>,
    /// The text of a puzzle file (what the CLI makes of --puzzle FILE).
    #[arg(long, value_name = "TEXT", hide = true)]
    #[serde(skip)]
    pub puzzle_text: Option<String>,
}

impl BuzzledParams {
    /// Parameters for a puzzle given by its clues.
    pub fn new(side: usize, clues: &[u32], method: Method) -> Self {
        BuzzledParams {
            clues: Some(join(clues)),
            side: Some(side),
            method,
            name: None,
            puzzle: None,
            puzzle_text: None,
        }
    }
}

fn join(clues: &[u32]) -> String {
    clues
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Default side: the original program's master board.
pub const DEFAULT_SIDE: usize = 4;

impl SearchSpace for Buzzled {
    const NAME: &'static str = "buzzled";
    const ABOUT: &'static str =
        "Buzzled: yellow/black hexagon boards whose rows show given yellow counts (any side)";
    type Params = BuzzledParams;
    const FILE_OPTIONS: &'static [sweep_space::FileOption] = &[sweep_space::FileOption {
        flag: "--puzzle",
        into: "--puzzle-text",
        read: sweep_space::FileRead::Whole,
    }];

    fn build(params: BuzzledParams) -> Result<impl Job, SpaceError> {
        BuzzledJob::new(params)
    }
}

pub struct BuzzledJob {
    params: BuzzledParams,
    geo: Geometry,
    clues: Vec<u32>,
    yellow: u32,
    /// The brute-force tables, for `--method brute` only.
    brute: Option<Brute>,
}

impl std::fmt::Debug for BuzzledJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuzzledJob")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Default chunks for brute force: enough to keep a few machines' cores busy with even pieces.
const BRUTE_CHUNKS: u64 = 64;
/// Default chunks for line solving on boards above side 4 (side 4 and below take milliseconds: one chunk).
const PROPAGATE_CHUNKS: u64 = 64;
/// The most chunks a brute job can be split into.
const MAX_BRUTE_CHUNKS: u64 = 1 << 32;

impl BuzzledJob {
    /// The job `params` ask for, or why they cannot be searched.
    fn new(params: BuzzledParams) -> Result<BuzzledJob, SpaceError> {
        if let Some(path) = &params.puzzle {
            return Err(SpaceError::invalid_param(
                "puzzle",
                format!(
                    "`{path}`: puzzle files are read by the sweep CLI; here pass the file's text with --puzzle-text"
                ),
            ));
        }
        let (side, clues, name) = match &params.puzzle_text {
            Some(text) => {
                let p = parse_puzzle_file(text)?;
                if params.clues.is_some() {
                    return Err(SpaceError::invalid_param(
                        "clues",
                        "give the clues either with --clues or in the puzzle file, not both",
                    ));
                }
                if let Some(s) = params.side.filter(|&s| s != p.side) {
                    return Err(SpaceError::invalid_param(
                        "side",
                        format!(
                            "--side {s} disagrees with the puzzle file's side {}",
                            p.side
                        ),
                    ));
                }
                (p.side, p.clues, params.name.clone().or(p.name))
            }
            None => {
                let Some(text) = &params.clues else {
                    return Err(SpaceError::invalid_param(
                        "clues",
                        "no puzzle given: pass --clues \"5,2,2,...\" (clockwise from the top) or \
                         --puzzle FILE",
                    ));
                };
                let clues = parse_clue_list(text)
                    .map_err(|reason| SpaceError::invalid_param("clues", reason))?;
                (
                    params.side.unwrap_or(DEFAULT_SIDE),
                    clues,
                    params.name.clone(),
                )
            }
        };
        let geo = Geometry::new(side)?;
        // The method's limit first: it does not depend on the clues.
        if params.method == Method::Brute && geo.n_tiles() > brute::MAX_TILES {
            return Err(SpaceError::invalid_param(
                "method",
                format!(
                    "brute force handles boards of up to {} tiles (side <= 5), side {side} has {}; use \
                     --method propagate",
                    brute::MAX_TILES,
                    geo.n_tiles()
                ),
            ));
        }
        let yellow = check_clues(&geo, &clues)?;
        let brute = (params.method == Method::Brute).then(|| Brute::new(&geo, &clues, yellow));
        let mut canonical = BuzzledParams::new(side, &clues, params.method);
        canonical.name = name;
        Ok(BuzzledJob {
            params: canonical,
            geo,
            clues,
            yellow,
            brute,
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn clues(&self) -> &[u32] {
        &self.clues
    }

    fn max_chunks(&self) -> u64 {
        match &self.brute {
            Some(b) => b.total().clamp(1, MAX_BRUTE_CHUNKS),
            None => N_PATHS,
        }
    }

    /// Chunk `chunk`'s part, checked against the plan: a range of board ranks for brute force, of paths for the
    /// propagating solver.
    fn chunk_range(&self, at: ChunkId) -> Result<(u64, u64), SpaceError> {
        let total = self.brute.as_ref().map_or(N_PATHS, |b| b.total());
        let (lo, hi) = at.range(u128::from(total), self.max_chunks())?;
        // lo <= hi <= total, a u64.
        Ok((lo as u64, hi as u64))
    }

    /// What a chunk's counters say on their own, listed or not: only `solutions`, no artifact, and a
    /// brute-force chunk tests every board of its rank range exactly once.
    fn check_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        let (lo, hi) = self.chunk_range(at)?;
        out.check_counters(&["solutions"])?;
        if !out.artifact.is_empty() {
            return Err(SpaceError::Verification("buzzled has no artifacts".into()));
        }
        if self.brute.is_some() {
            out.check_nodes(u128::from(hi - lo), "boards tested")?;
        }
        Ok(())
    }

    fn check_splits(&self) -> Result<(), SpaceError> {
        if !self.splits() {
            return Err(SpaceError::Verification(
                "brute force buzzled chunks do not split".into(),
            ));
        }
        Ok(())
    }

    fn board_bits(board: &[bool]) -> u64 {
        board
            .iter()
            .enumerate()
            .filter(|(_, &y)| y)
            .fold(0u64, |m, (t, _)| m | (1u64 << t))
    }

    fn meets_all(&self, board: &[bool]) -> Option<usize> {
        let got = self.geo.clues_of(board);
        got.iter().zip(&self.clues).position(|(a, b)| a != b)
    }

    fn title(&self) -> String {
        match &self.params.name {
            Some(n) => format!("{n} (side {})", self.geo.side),
            None => format!("Buzzled, side {}", self.geo.side),
        }
    }

    /// The board drawn as a hexagon of characters: `Y` yellow, `.` black, columns side by side.
    pub fn draw(&self, board: &[bool]) -> String {
        let m = self.geo.side as i32 - 1;
        let mut out = String::new();
        for y in -2 * m..=2 * m {
            let mut row = vec![' '; (4 * m + 1) as usize];
            for (t, &(q, r)) in self.geo.coords.iter().enumerate() {
                if 2 * r + q == y {
                    row[(2 * (q + m)) as usize] = if board[t] { 'Y' } else { '.' };
                }
            }
            let line: String = row.into_iter().collect();
            let _ = writeln!(out, "  {}", line.trim_end());
        }
        out
    }
}

impl Job for BuzzledJob {
    fn params(&self) -> Value {
        serde_json::to_value(&self.params).unwrap_or(Value::Null)
    }

    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let default = if self.brute.is_some() {
            BRUTE_CHUNKS
        } else if self.geo.side <= 4 {
            1
        } else {
            PROPAGATE_CHUNKS
        };
        let n_chunks = Plan::chunk_count(requested, self.max_chunks(), default)?;
        Ok(Plan {
            n_chunks,
            total_nodes: self.brute.as_ref().map(|b| u128::from(b.total())),
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let (lo, hi) = self.chunk_range(at)?;
        let mut out = ChunkOutput::default();
        let mut boards: Vec<String> = Vec::new();
        match &self.brute {
            Some(b) => {
                let n = self.geo.n_tiles();
                out.nodes = b.run(lo, hi, ctl, &mut |bits| {
                    let board: Vec<bool> = (0..n).map(|t| bits >> t & 1 == 1).collect();
                    boards.push(self.geo.encode(&board));
                })?;
            }
            None => {
                // A piece of a split chunk searches the paths its state names.
                let part = Span::of(
                    at,
                    u128::from(N_PATHS),
                    self.max_chunks(),
                    ctl.resume_state(),
                )?;
                // Inside 0..N_PATHS.
                let (lo, hi) = (part.lo as u64, part.hi as u64);
                let mut solver = Solver::new(&self.geo, &self.clues, lo, hi, Some(ctl));
                solver.run(&mut |board| {
                    boards.push(self.geo.encode(board));
                    Flow::Continue
                })?;
                out.nodes = solver.nodes();
            }
        }
        if !boards.is_empty() {
            out.count("solutions", boards.len() as u128);
        }
        out.solutions = boards;
        Ok(out)
    }

    /// Line solving splits by path indices. Brute force does not: its chunks are ranges of board ranks of equal
    /// cost, which the plan already cuts evenly.
    fn splits(&self) -> bool {
        self.brute.is_none()
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
            u128::from(N_PATHS),
            self.max_chunks(),
            parent,
            kept,
            given,
        )
    }

    /// Every check the line solver's verifier makes holds for any range of its paths.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        Span::of(at, u128::from(N_PATHS), self.max_chunks(), Some(part))?;
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_unlisted("boards")?;
        self.check_counts(at, out)
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        let counted = out.counters.get("solutions").copied().unwrap_or(0);
        if counted != out.solutions.len() as u128 {
            return Err(SpaceError::Verification(format!(
                "{counted} solutions counted but {} reported",
                out.solutions.len()
            )));
        }
        self.check_counts(at, out)?;
        let range = self
            .brute
            .as_ref()
            .map(|_| self.chunk_range(at))
            .transpose()?;
        let mut seen = std::collections::HashSet::new();
        for s in &out.solutions {
            let board = self
                .geo
                .decode(s)
                .map_err(|e| SpaceError::Verification(format!("board `{s}`: {e}")))?;
            if let Some(l) = self.meets_all(&board) {
                return Err(SpaceError::Verification(format!(
                    "board `{s}` misses {}",
                    self.geo.describe_line(l)
                )));
            }
            if !seen.insert(s.as_str()) {
                return Err(SpaceError::Verification(format!(
                    "board `{s}` reported twice"
                )));
            }
            if let (Some(b), Some((lo, hi))) = (&self.brute, range) {
                if !b
                    .rank(Self::board_bits(&board))
                    .is_some_and(|r| (lo..hi).contains(&r))
                {
                    return Err(SpaceError::Verification(format!(
                        "board `{s}` is not in the chunk's rank range {lo}..{hi}"
                    )));
                }
            }
        }
        Ok(())
    }

    fn result(&self, answer: &Answer) -> Value {
        json!({
            "side": self.geo.side,
            "tiles": self.geo.n_tiles(),
            "clues": self.clues,
            "name": self.params.name,
            "method": self.params.method,
            "yellow": self.yellow,
            "solutions": sweep_space::json_u128(answer.tally.counter("solutions")),
            "boards": answer.solutions,
            "boards_truncated": answer.solutions_truncated,
        })
    }

    fn render_text(&self, result: &Value) -> String {
        let mut text = String::new();
        let count = result["solutions"].as_u64().unwrap_or(0);
        let boards: Vec<&str> = result["boards"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "{}: clues {}; {} yellow tiles; {count} solution{}",
            self.title(),
            join(&self.clues),
            self.yellow,
            if count == 1 { "" } else { "s" }
        );
        for (i, s) in boards.iter().take(TEXT_BOARDS).enumerate() {
            let _ = writeln!(text, "\nsolution {} of {count}: {s}", i + 1);
            if let Ok(board) = self.geo.decode(s) {
                text.push_str(&self.draw(&board));
            }
        }
        if boards.len() > TEXT_BOARDS {
            let _ = writeln!(
                text,
                "\n... {} more boards in --json (board strings: tile {} first, tile 1 last)",
                boards.len() - TEXT_BOARDS,
                self.geo.n_tiles()
            );
        }
        text
    }

    fn pictures(&self, result: &Value) -> Vec<(String, String)> {
        let boards = result["boards"].as_array().cloned().unwrap_or_default();
        let width = boards.len().min(MAX_PICTURES).to_string().len().max(3);
        boards
            .iter()
            .filter_map(Value::as_str)
            .take(MAX_PICTURES)
            .enumerate()
            .filter_map(|(i, s)| {
                let board = self.geo.decode(s).ok()?;
                let title = format!("{}: solution {} of {}", self.title(), i + 1, boards.len());
                Some((
                    format!("buzzled-s{}-{:0width$}.svg", self.geo.side, i + 1),
                    svg::board_svg(&self.geo, &self.clues, &board, &title),
                ))
            })
            .collect()
    }
}

/// Boards drawn in the text answer; the rest are in `--json`.
const TEXT_BOARDS: usize = 60;
/// Pictures written by `--svg`: one per solution, up to this many.
const MAX_PICTURES: usize = 1000;

#[cfg(test)]
mod tests;
