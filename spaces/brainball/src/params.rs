//! A brainball job's parameters, one struct for every mode: the job built from them (lib.rs) and each mode's
//! builder (`extra.rs`, `pattern_job.rs`) read them, so they sit below all of those.

use serde::{Deserialize, Serialize};

use crate::pdb::SOLVER_TILES;

/// The space's name in the registry, which jobs write into the inputs they ask for and into their errors.
pub(crate) const SPACE_NAME: &str = "brainball";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Build the table of all positions within --depth twists.
    Table,
    /// Solve positions against the depth-D table.
    Solve,
    /// Solve --samples uniformly random positions optimally; report the distance histogram and the hardest.
    Census,
    /// One position searched by many chunks (split by its first --split twists), up to --max-twists.
    Deep,
    /// Build the pattern database of --pattern-tiles tiles (or, with --level, one breadth-first level of it).
    Pattern,
}

pub(crate) fn default_depth() -> u8 {
    7
}

pub(crate) fn default_tiles() -> u8 {
    SOLVER_TILES as u8
}

fn is_default_tiles(k: &u8) -> bool {
    *k == default_tiles()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct BrainballParams {
    /// `table` or `solve` (default: solve when positions are given, else table).
    #[arg(value_enum)]
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Table depth d: solutions up to 2d twists are proven optimal.
    #[arg(long, default_value_t = 7)]
    #[serde(default = "default_depth")]
    pub depth: u8,
    /// A position: 13 signed tiles clockwise from anywhere, e.g. "1 -2 3 -4 5 -6 7 -8 9 -10 11 -12 13".
    #[arg(long, allow_hyphen_values = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<String>,
    /// Several positions separated by `;` (`--file F` on the command line reads one per line into this).
    #[arg(long, allow_hyphen_values = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions: Option<String>,
    /// Also solve K uniformly random positions drawn from --seed.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random: Option<u32>,
    /// Seed of the random positions.
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub seed: u64,
    /// census: how many uniformly random positions to solve.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// deep: the longest solution to look for; rounds of every shorter length of the right parity run first.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_twists: Option<u8>,
    /// deep: twists fixed per chunk (1..=4: 13, 143, about 1,500 or 16,000 chunks; default 2).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<u8>,
    /// Tiles of the pattern database used past 2d (1..=6: fewer build faster and bound less).
    #[arg(long, default_value_t = SOLVER_TILES as u8)]
    #[serde(default = "default_tiles", skip_serializing_if = "is_default_tiles")]
    pub pattern_tiles: u8,
    /// pattern: one breadth-first level of the database (the jobs the database job reads; not needed by hand).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
}

impl BrainballParams {
    /// No mode, the default depth and pattern size, nothing else.
    pub fn empty() -> BrainballParams {
        BrainballParams {
            mode: None,
            depth: default_depth(),
            position: None,
            positions: None,
            random: None,
            seed: 0,
            samples: None,
            max_twists: None,
            split: None,
            pattern_tiles: default_tiles(),
            level: None,
        }
    }
}
