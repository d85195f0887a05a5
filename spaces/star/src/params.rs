//! A star job's parameters and their limits: the one thing a job is built from, apart so that every other module
//! can read the method without reaching up to the job.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every permutation of 1..2n, as the original program does (n <= 10).
    Brute,
    /// Line-by-line backtracking with sum pruning and rotation breaking.
    Backtrack,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct StarParams {
    /// Number of points n (>= 5): 2n cells hold 1..2n, every line sums to 4n+2.
    #[arg(long, default_value_t = 6)]
    pub points: u32,
    /// Search method.
    #[arg(long, value_enum, default_value_t = Method::Backtrack)]
    pub method: Method,
}

/// Values are bit positions 1..=2n of u64 masks, so 2n <= 63 (n = 32 would need bit 64).
pub(crate) const MAX_POINTS: u32 = 31;
/// 2n! must fit in the rank arithmetic.
pub(crate) const MAX_BRUTE_POINTS: u32 = 10;
