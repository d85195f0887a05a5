//! sweep's search-space contract: what a search space is to the engine, with no engine attached.
//!
//! - [`Job`]: one search with fixed parameters: a plan into `n_chunks` chunks addressed only by a [`ChunkId`], a
//!   kernel that runs one chunk under a [`Control`] handle (progress, cancellation, resume state), a verifier of
//!   reported results, and a summary of the merged [`Answer`].
//! - [`SearchSpace`]: the typed side: clap/serde parameters and a validating constructor.
//! - [`Registry`]: the spaces a process knows, as a value the command line hands to the coordinator and the
//!   workers. The five puzzles, `exec` and a user's own spaces all register the same way. A job built through
//!   it is a [`SpaceJob`]: the space's job with its name, canonical parameters and the framework's checks.
//! - [`testkit`]: the checks every space's tests run (every chunking the same answer, lies refused, a resumed
//!   chunk equal to an uninterrupted one).
//! - [`Meter`]: the node accounting of every kernel: exact counts, progress published and cancellation checked
//!   every [`STEPS_PER_CHECK`] steps.
//! - [`split`]: a running chunk giving away the part of its work it has not started ([`Control::hand_off`],
//!   [`Span`], [`SpanWalk`]), so that work follows the idle threads and every piece still counts exactly once.
//! - Checks every space makes alike: [`SpaceError::check_param_range`] for a parameter's bounds and
//!   [`ChunkId::range`] for a chunk's part of a range.
//! - Helpers every space may use and none should write twice: [`perm`] (factorials, permutation rank and unrank,
//!   and the exact split of a rank range into chunks) and [`rng`] (the frozen splitmix64 generator whose bits are
//!   part of stored answers).
//!
//! Architecture invariant: this crate does no I/O and knows nothing of networks, storage or async runtimes;
//! `proto`, `coordinator` and `worker` depend on it, never on a particular space.

mod checks;
mod control;
mod error;
mod job;
mod meter;
mod output;
pub mod perm;
mod registry;
pub mod rng;
pub mod split;
pub mod testkit;

pub use control::{ChunkControl, Control, Handoff, MAX_RESUME_STATE_BYTES};
pub use error::{json_u128, SpaceError};
pub use job::{ChunkId, FileOption, FileRead, Job, JobInput, Plan, SearchSpace};
pub use meter::{Meter, STEPS_PER_CHECK};
pub use output::{
    Answer, AnswerMerge, ChunkOutput, Tally, MAX_REPORT_SOLUTIONS, MAX_SHOWN_SOLUTIONS,
};
pub use registry::{Registry, Space, SpaceJob};
pub use split::{Span, SpanWalk};
