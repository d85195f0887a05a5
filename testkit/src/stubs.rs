//! Stub spaces for what no real space does on demand. [`Counting`] (space `counting`): chunk `i` of `n`
//! counts `i + 1` nodes and finds one solution (`found`), unless it is the chunk named `panic_at`, whose kernel
//! panics. Register it next to the test spaces: `spaces().with::<Counting>()`.

use serde::{Deserialize, Serialize};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError};

/// The `counting` space.
pub struct Counting;

/// `counting`'s parameters.
#[derive(clap::Args, Serialize, Deserialize, Clone, Debug, Default)]
pub struct CountingParams {
    /// The chunk whose kernel panics (none when absent).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panic_at: Option<u64>,
}

/// A `counting` job.
#[derive(Debug)]
pub struct CountingJob(CountingParams);

impl SearchSpace for Counting {
    const NAME: &'static str = "counting";
    const ABOUT: &'static str =
        "a test space: chunk i counts i + 1 nodes and one solution, or panics";
    type Params = CountingParams;

    fn build(params: CountingParams) -> Result<impl Job, SpaceError> {
        Ok(CountingJob(params))
    }
}

impl Job for CountingJob {
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        Ok(Plan {
            n_chunks: Plan::chunk_count(requested, 64, 8)?,
            total_nodes: None,
        })
    }

    fn run_chunk(&self, at: ChunkId, _ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        if self.0.panic_at == Some(at.chunk) {
            panic!("{at} is cursed");
        }
        let mut out = ChunkOutput {
            nodes: at.chunk + 1,
            ..ChunkOutput::default()
        };
        out.count("found", 1);
        Ok(out)
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_nodes(u128::from(at.chunk) + 1, "nodes")
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        serde_json::json!({ "found": answer.tally.counter("found").to_string() })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        result.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_count_their_nodes_and_the_cursed_one_panics() {
        let registry = crate::spaces().with::<Counting>();
        let job = registry
            .job_from_params("counting", &serde_json::json!({"panic_at": 2}))
            .unwrap();
        let out = job.run_chunk(ChunkId::new(4, 1), &Control::new()).unwrap();
        assert_eq!(out.nodes, 2);
        job.verify(ChunkId::new(4, 1), &out).unwrap();
        assert!(
            job.verify(ChunkId::new(4, 0), &out).is_err(),
            "a lie about the nodes"
        );
        let cursed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            job.run_chunk(ChunkId::new(4, 2), &Control::new())
        }));
        assert!(cursed.is_err(), "chunk 2 panics");
    }
}
