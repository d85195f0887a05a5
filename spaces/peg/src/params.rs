//! A peg job's parameters and the names of its per-layer counters: what the job built from them (in lib.rs) and
//! the `count`/`positions` DAG ([`crate::dag`]) both read, so they sit below both.

use serde::{Deserialize, Serialize};

use crate::board::BoardKind;

/// The space's name in the registry, which the DAG writes into the inputs it asks for.
pub(crate) const SPACE_NAME: &str = "peg";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One solution, printed move by move.
    Solve,
    /// The exact number of winning move sequences.
    Count,
    /// Reachable positions per peg count, and those on a path to the goal.
    Positions,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct PegParams {
    /// Board.
    #[arg(long, value_enum, default_value_t = BoardKind::English)]
    pub board: BoardKind,
    /// The empty hole at the start, `ROW,COL` from 1 at the top left, or `centre` (default: the centre; `1,1` on
    /// the triangle).
    #[arg(long)]
    pub start: Option<String>,
    /// Where the last peg must end: `ROW,COL`, `centre`, or `any` (default: the start hole).
    #[arg(long)]
    pub goal: Option<String>,
    /// Seed of the move order in `solve`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// What to compute.
    #[arg(long, value_enum, default_value_t = Mode::Solve)]
    pub mode: Mode,
    /// Internal: a stage of the `count`/`positions` job DAG (see [`crate::dag`]); set by the DAG, not by people.
    #[arg(long, value_enum, hide = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// Internal: the stage's layer (jumps from the start).
    #[arg(long, hide = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// Chunks per step of the `count`/`positions` DAG: more workers want more shards (default: 16 on the large
    /// boards, 4 on the triangle).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

/// The internal stages of the DAG (hidden `--stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The canonical positions after `--layer` jumps with their class weights.
    Layer,
    /// The positions of layer `--layer` on a path to the goal, and the layer's figures.
    Path,
}

/// The per-layer figures of `count` and `positions`, each a counter per peg count ([`layer_counter`]).
pub(crate) const LAYER_FIELDS: [&str; 4] = ["reachable", "reachable_raw", "on_path", "on_path_raw"];

/// The counter of figure `what` (one of [`LAYER_FIELDS`]) for the positions with `pegs` pegs.
pub(crate) fn layer_counter(pegs: usize, what: &str) -> String {
    format!("p{pegs:02}_{what}")
}
