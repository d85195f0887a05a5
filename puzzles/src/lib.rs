//! sweep's search spaces: pure, deterministic search kernels.
//!
//! Every puzzle implements [`SearchSpace`]: typed, validated parameters (parsed from command-line style arguments or
//! from the canonical JSON that travels with a job), a plan that splits the space into `n_chunks` chunks addressed
//! only by their index, a kernel that runs one chunk under a [`Control`] handle (progress and cancellation), a
//! cheap verifier for reported results, and a summary of the merged [`Answer`].
//!
//! Architecture invariant: this crate never does I/O, never spawns threads and knows nothing of networks, storage
//! or async runtimes. Everything here is a function of its inputs, which is what lets the coordinator re-verify a
//! worker's result and lets any worker run any chunk.

pub mod billiard;
pub mod brainball;
pub mod buzzled;
pub mod peg;
pub mod perm;
mod registry;
mod space;
pub mod star;

pub use registry::{job_from_params, lookup, spaces};
pub use space::{
    json_u128, Answer, ChunkOutput, Control, Job, JobInput, Plan, SearchSpace, Space, SpaceError,
    Tally, MAX_KEPT_SOLUTIONS,
};
