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
pub mod primes;
pub mod rng;
pub mod star;

/// The contract every space here implements, from `sweep-space`, under the name the modules use.
mod space {
    pub use sweep_space::*;
}

pub use sweep_space::{
    json_u128, Answer, AnswerMerge, ChunkOutput, Control, Job, JobInput, Plan, Registry,
    SearchSpace, Space, SpaceError, Tally, MAX_SHOWN_SOLUTIONS,
};

/// The five puzzles and `primes` (the engine's test space), in the order `sweep spaces` lists them. Adding a
/// built-in space is one line here plus its own module.
pub fn registry() -> Registry {
    Registry::new()
        .with::<star::Star>()
        .with::<billiard::Billiard>()
        .with::<brainball::Brainball>()
        .with::<buzzled::Buzzled>()
        .with::<peg::Peg>()
        .with::<primes::Primes>()
}

/// The built-in registry, built once for this crate's own tests.
#[cfg(test)]
static TEST_REGISTRY: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(registry);

#[cfg(test)]
pub(crate) fn lookup(name: &str) -> Result<&'static dyn Space, SpaceError> {
    TEST_REGISTRY.lookup(name)
}

#[cfg(test)]
pub(crate) fn job_from_params(
    space: &str,
    params: &serde_json::Value,
) -> Result<std::sync::Arc<dyn Job>, SpaceError> {
    TEST_REGISTRY.job_from_params(space, params)
}
