//! The job's state, shared by the modes: lib.rs runs the table and solve modes on it, `extra.rs` the census and
//! deep ones, `pattern_job.rs` the pattern database. Apart from all three so that each can build and read a job
//! without reaching up to the crate root.

use std::sync::Arc;

use crate::ball::{Ball, Ring};
use crate::params::{BrainballParams, Mode};
use crate::pattern::Visited;
use crate::pdb::Pdb;
use crate::table::Table;

/// A deep job's round: the position, and the forward level it walks (solutions of `level + depth` twists).
#[derive(Clone, Copy, Debug)]
pub struct Round {
    pub ball: Ball,
    pub level: u8,
    /// The first level of the position's parity: where the chain of rounds starts.
    pub first: u8,
    pub split: u8,
}

#[derive(Debug, Clone)]
pub struct BrainballJob {
    pub(crate) params: BrainballParams,
    pub(crate) mode: Mode,
    pub(crate) positions: Vec<Ring>,
    /// The depth-d table a solve job runs against, once bound (see [`Job::bind_inputs`]).
    pub(crate) table: Option<Arc<Table>>,
    /// A deep job's round (see [`deep`]).
    pub(crate) round: Option<Round>,
    /// A deep round's bound input: the previous round's merged artifact (a solution, or empty for none).
    pub(crate) previous: Option<Arc<Vec<u8>>>,
    /// The stored pattern database a census or deep job is bound to (shared per process: [`Pdb::shared`]).
    pub(crate) pdb: Option<Arc<Pdb>>,
    /// A pattern job's bound levels (see [`pattern`]).
    pub(crate) levels: Option<Arc<Vec<Visited>>>,
}

impl BrainballJob {
    pub(crate) fn new(params: BrainballParams, mode: Mode, positions: Vec<Ring>) -> BrainballJob {
        BrainballJob {
            params,
            mode,
            positions,
            table: None,
            round: None,
            previous: None,
            pdb: None,
            levels: None,
        }
    }
}
