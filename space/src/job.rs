//! The job contract: what one search space's job does, planned into chunks and typed by its parameters.

use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::error::SpaceError;
use crate::output::{Answer, ChunkOutput};

/// One chunk of a plan: chunk `chunk` of `n_chunks`, the whole address a kernel, a verifier or an estimate needs
/// (the job maps it to its part of the space deterministically). Named fields, so the two numbers cannot trade
/// places the way two bare `u64`s can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkId {
    pub n_chunks: u64,
    pub chunk: u64,
}

impl ChunkId {
    /// Chunk `chunk` of a plan of `n_chunks` (the order of the fields, and of the wire's lease).
    pub const fn new(n_chunks: u64, chunk: u64) -> ChunkId {
        ChunkId { n_chunks, chunk }
    }

    /// Every chunk of a plan of `n_chunks`, in order.
    pub fn all(n_chunks: u64) -> impl Iterator<Item = ChunkId> {
        (0..n_chunks).map(move |chunk| ChunkId::new(n_chunks, chunk))
    }

    /// Checks this chunk against a job that plans at most `max` chunks: `chunk` must be one of `n_chunks`, and
    /// `n_chunks` a plan the job can make. A kernel asked for a chunk outside its plan must say so, never guess.
    pub fn check(self, max: u64) -> Result<(), SpaceError> {
        if self.chunk >= self.n_chunks || self.n_chunks > max {
            return Err(SpaceError::out_of_plan(self));
        }
        Ok(())
    }
}

impl std::fmt::Display for ChunkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chunk {} of {}", self.chunk, self.n_chunks)
    }
}

/// How a job is split. Computed once when the job is submitted and stored with it; workers receive only a
/// [`ChunkId`], and the job maps it to its part of the space deterministically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub n_chunks: u64,
    /// Total nodes of the whole job when known in advance (brute force over a fixed space), for honest ETAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_nodes: Option<u128>,
}

impl Plan {
    /// Every chunk of this plan, in order.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkId> {
        ChunkId::all(self.n_chunks)
    }

    /// The chunk count for a job that splits into at most `max` chunks: the user's `requested` (`--chunks`),
    /// rejected when 0 or above `max`, or else `default` capped at `max`. One wording for every space.
    pub fn chunk_count(requested: Option<u64>, max: u64, default: u64) -> Result<u64, SpaceError> {
        match requested {
            Some(0) => Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: "must be at least 1".into(),
            }),
            Some(k) if k > max => Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: format!("{k} is more than this job can be split into ({max})"),
            }),
            Some(k) => Ok(k),
            None => Ok(default.clamp(1, max.max(1))),
        }
    }
}

/// A job: one search space with fixed, validated parameters. Object safe, so the registry, the coordinator and
/// the workers handle every space alike.
///
/// A job built through a [`crate::Registry`] is held as a [`crate::SpaceJob`]: its space name and canonical
/// parameters come from the registration (a space may still override [`Job::params`] to canonicalise them), and
/// chunk indices are checked against `n_chunks` before [`Job::run_chunk`] or [`Job::verify`] is called.
pub trait Job: Send + Sync + Debug {
    /// The space's name. Registered jobs get it from the registry; only jobs built by hand need it.
    fn space(&self) -> &'static str {
        ""
    }

    /// Canonical parameters; `registry.job_from_params(space, params)` rebuilds an equal job. Registered jobs
    /// default to their parsed parameters as JSON; `Null` means "use that default".
    fn params(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Splits the job. `requested` is the user's `--chunks`; `None` picks the space's default.
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError>;

    /// Runs chunk `at`. Deterministic: the same chunk gives the same output on every machine.
    /// A long chunk may save where it is with [`Control::save_resume_state`] and continue from
    /// [`Control::resume_state`] when it is run again after an interruption.
    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError>;

    /// Cheap checks of a reported output: every solution is a real, canonical solution of this job.
    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError>;

    /// Checks an output of a job that keeps counts only (`--count-only`): the engine has dropped any list of
    /// solutions, so only what the counters say on their own can be checked. The default checks that no list
    /// is left; spaces override it to check their counters' names and relations (e.g. `solutions >= unique`).
    /// Such a job's counts are not re-verified solution by solution, so it is shown as unverified unless it is
    /// replicated.
    fn verify_counts(&self, _at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_unlisted("solutions")
    }

    /// Whether this job's kernels give away part of a running chunk when asked ([`Control::split_requested`],
    /// the [`crate::split`] module). The default: no, and the engine never asks.
    fn splits(&self) -> bool {
        false
    }

    /// Checks a split of chunk `at` that a kernel of this job reported, without running anything: `parent` is
    /// the part the run covered before (`None`: the whole chunk), `kept` and `given` the two parts after.
    /// Refuses a state it cannot read and a split whose parts do not cover the parent exactly once. Spaces that
    /// split by ranges call [`crate::Span::check_split`].
    fn check_split(
        &self,
        _at: ChunkId,
        _parent: Option<&str>,
        _kept: &str,
        _given: &str,
    ) -> Result<(), SpaceError> {
        Err(SpaceError::Verification(format!(
            "{} jobs do not split their chunks",
            self.space()
        )))
    }

    /// [`Job::verify`] (with `listed`) or [`Job::verify_counts`] (without) for the output of a run of part
    /// `part` of chunk `at`, a state a split produced: relations that hold for the whole chunk only (a range's
    /// exact size) are checked against the part.
    fn verify_part(
        &self,
        _at: ChunkId,
        _part: &str,
        _out: &ChunkOutput,
        _listed: bool,
    ) -> Result<(), SpaceError> {
        Err(SpaceError::Verification(format!(
            "{} jobs do not split their chunks",
            self.space()
        )))
    }

    /// Whether [`Job::verify`] really checks the answer. A job that runs a program the coordinator cannot
    /// re-run (`exec`) says no, and is shown as unverified unless it is replicated.
    fn verifiable(&self) -> bool {
        true
    }

    /// How many threads one chunk uses: a worker with T threads runs at most T / this many chunks at once.
    fn threads_per_chunk(&self) -> u32 {
        1
    }

    /// Bytes of memory one chunk may use, when the job sets a limit; the coordinator leases its chunks only to
    /// workers that have this much. `None` (the default): no limit, any worker will do.
    fn chunk_memory(&self) -> Option<u64> {
        None
    }

    /// Combines the artifacts of all chunks (in chunk order) into the job's artifact. Spaces without artifacts
    /// keep the default.
    fn merge_artifacts(
        &self,
        _artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        Ok(Vec::new())
    }

    /// The space-specific `result` object of the merged answer.
    fn result(&self, answer: &Answer) -> serde_json::Value;

    /// The merged answer for people: what the original programs printed, and more.
    fn render_text(&self, result: &serde_json::Value) -> String;

    /// The answer as compact JSON and as text for people: exactly `result` written out and `render_text` of it.
    /// A space whose answer shows many solutions may write both without building the tree (which is what a
    /// job's single-threaded end spends its time on); the default builds it.
    fn result_texts(&self, answer: &Answer) -> (String, String) {
        let value = self.result(answer);
        (value.to_string(), self.render_text(&value))
    }

    /// Every job whose merged artifact this job's chunks need (a distance table, the previous layer), in
    /// order, as (space, canonical params). The engine finds or creates each of them (recursively: an input may
    /// have inputs of its own, so a space can describe a chain or a DAG of jobs), runs none of this job's
    /// chunks before all of them are done, and hands their artifacts, in this order, to [`Job::bind_inputs`].
    /// The default: no inputs.
    fn inputs(&self) -> Vec<JobInput> {
        Vec::new()
    }

    /// Files this job ships to workers (a program and its data, uploaded once by the client), as blake3
    /// digests in hex. Their bytes follow the inputs' artifacts in [`Job::bind_inputs`].
    fn shipped(&self) -> Vec<String> {
        Vec::new()
    }

    /// This job with its input artifacts loaded, in the order of [`Job::inputs`] followed by the files of
    /// [`Job::shipped`]; parsed and checked once, then shared by every chunk the process runs. Only called
    /// for jobs that have inputs or shipped files.
    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        Err(SpaceError::BadParams {
            space: self.space(),
            reason: format!(
                "this job takes no input artifacts, {} were given",
                artifacts.len()
            ),
        })
    }

    /// An estimate of the nodes [`Job::run_chunk`] will count for chunk `at`, made without
    /// running it; `None` (the default) when the space has no honest estimate. It exists for jobs whose size
    /// is not known in advance ([`Plan::total_nodes`] is `None`, e.g. a backtracking search): without it the
    /// engine can only extrapolate from finished chunks, which misleads when chunks differ in size. The
    /// engine combines the estimates with the real sizes of finished chunks into the job's expected size, for
    /// progress and ETAs only; nothing else depends on it.
    ///
    /// Contract: pure and deterministic (a function of the job and `at` alone, so any process
    /// gets the same figure and nothing needs storing), cheap (the engine asks for every chunk of a job when
    /// the job is created or loaded, off its lock: think microseconds, not a run of the chunk), and either
    /// `Some` for every chunk of a plan or for none (the engine asks chunk 0 first and stops at a `None`).
    /// Finite and non-negative; an unbiased estimate (e.g. Knuth's random probes of a backtracking tree) is
    /// worth more than a precise-looking biased one, since the engine corrects only for a bias it sees in
    /// finished chunks.
    fn estimate_chunk_nodes(&self, _at: ChunkId) -> Option<f64> {
        None
    }

    /// Pictures of the merged answer as (file name, SVG text) pairs, written by the CLI's `--svg DIR`. Pure: the
    /// space only draws, the CLI writes. Spaces without pictures keep the default (none).
    fn pictures(&self, _result: &serde_json::Value) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The job whose artifact another job needs: see [`Job::inputs`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInput {
    pub space: String,
    pub params: serde_json::Value,
}

/// The typed side of a search space: parameters with clap (for `sweep run SPACE ...`) and serde (for storage and
/// the wire), and a constructor that validates them. The job's type is whatever `build` returns: the framework
/// only ever holds it as a `dyn Job`, so a space does not name it twice.
pub trait SearchSpace: Send + Sync + 'static {
    const NAME: &'static str;
    const ABOUT: &'static str;
    type Params: clap::Args + Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static;
    /// Options whose value names a file: the command line reads it (a space never does I/O) and passes its
    /// text on as another option. Most spaces have none.
    const FILE_OPTIONS: &'static [FileOption] = &[];

    fn build(params: Self::Params) -> Result<impl Job + 'static, SpaceError>;
}

/// An option that names a file ([`SearchSpace::FILE_OPTIONS`]): `flag FILE` on the command line becomes
/// `into TEXT`, where TEXT is the file's content as `read` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOption {
    pub flag: &'static str,
    pub into: &'static str,
    pub read: FileRead,
}

/// How a [`FileOption`]'s file becomes an option value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileRead {
    /// The whole text, as it is.
    Whole,
    /// The non-empty lines that are not `#` comments, joined with `sep`; appended to a value of `into` given
    /// on the command line, so files and inline values add up to one list.
    Lines { sep: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's own copy of this rule once planned `default.min(max)` chunks: zero when either was zero, a plan
    /// with no chunk to run. The contract never plans fewer than one.
    #[test]
    fn a_default_or_cap_of_zero_still_plans_one_chunk() {
        assert_eq!(Plan::chunk_count(None, 0, 5), Ok(1));
        assert_eq!(Plan::chunk_count(None, 8, 0), Ok(1));
        assert_eq!(Plan::chunk_count(None, 8, 5), Ok(5));
        assert_eq!(Plan::chunk_count(None, 3, 5), Ok(3));
        assert_eq!(Plan::chunk_count(Some(3), 3, 5), Ok(3));
        for bad in [Some(0), Some(4)] {
            assert!(matches!(
                Plan::chunk_count(bad, 3, 5),
                Err(SpaceError::InvalidParam { name: "chunks", .. })
            ));
        }
    }
}
