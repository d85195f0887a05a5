//! What the worker's tasks share under one lock: the queue, the running chunks, the outbox, the counters, and
//! the caches of built jobs and of their input artifacts.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use sweep_proto::v1;
use sweep_space::{ChunkControl, Handoff, SpaceJob};

/// What a worker did before it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub chunks_done: u64,
    pub chunks_failed: u64,
    pub nodes: u64,
}

/// A finished chunk's report, encoded by the search thread that ran it (see `EncodedCompleteRequest` in the
/// proto): its solutions are freed where they were allocated, and a batch kept for a retry is shared.
pub(crate) struct Outgoing {
    pub(crate) lease_id: u64,
    pub(crate) job_id: u64,
    pub(crate) chunk: u64,
    pub(crate) report: prost::bytes::Bytes,
}

impl Outgoing {
    /// What the report adds to a request: its bytes, their length and the field's tag.
    pub(crate) fn encoded_len(&self) -> usize {
        let len = self.report.len();
        1 + prost::length_delimiter_len(len) + len
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) queue: VecDeque<v1::ChunkLease>,
    pub(crate) running: HashMap<u64, Arc<ChunkControl>>,
    /// The generation of each running lease's part (its `ChunkLease.generation`): states sent for it name
    /// this plus the splits its run made before them.
    pub(crate) generations: HashMap<u64, u32>,
    /// Splits of runs whose kernels can split (see `splitter`).
    pub(crate) splits: HashMap<u64, RunSplits>,
    /// When each running lease's resume state was last sent (see [`crate::RESUME_STATE_INTERVAL`]).
    pub(crate) state_sent: HashMap<u64, Instant>,
    pub(crate) outbox: Vec<Outgoing>,
    /// Reports in a `Complete` call not answered yet (taken out of the outbox; put back if the call fails).
    pub(crate) sending: usize,
    pub(crate) failures: Vec<v1::FailRequest>,
    /// Jobs built (and bound to their inputs) so far, with the digests of those inputs and when each was last
    /// used: see [`State::cache_job`].
    jobs: HashMap<(u64, String), CachedJob>,
    /// Input artifacts by digest, shared by every cached job bound to them.
    pub(crate) artifacts: HashMap<String, Arc<Vec<u8>>>,
    /// Bumped on every use of a cached job: the least recently used bound job is the first to go.
    uses: u64,
    pub(crate) stats: WorkerStats,
    pub(crate) stopping: bool,
    /// Recent chunks' run time, smoothed (seconds; `None` before the first): see [`State::prefetch`].
    pub(crate) chunk_secs: Option<f64>,
}

impl State {
    /// Folds a finished chunk's run time into the smoothed one.
    pub(crate) fn note_chunk_time(&mut self, secs: f64) {
        self.chunk_secs = Some(match self.chunk_secs {
            Some(avg) => 0.8 * avg + 0.2 * secs,
            None => secs,
        });
    }
}

/// The splits of one run whose kernel can split.
#[derive(Default)]
pub(crate) struct RunSplits {
    /// The generation of the leased part (the lease's).
    pub(crate) base: u32,
    /// Splits the coordinator recorded.
    pub(crate) acked: u32,
    /// Parts given away and not recorded yet, oldest first; the first is in flight when `sending`.
    pub(crate) queue: VecDeque<Handoff>,
    pub(crate) sending: bool,
    /// The run's result, finished before its splits were all recorded.
    pub(crate) held: Option<Outgoing>,
    /// A split was refused: the run's work no longer matches any recorded part.
    pub(crate) void: bool,
    pub(crate) finished: bool,
}

impl State {
    /// Whether splits are still to be delivered (the reporter does not stop before).
    pub(crate) fn splits_unsettled(&self) -> bool {
        self.splits
            .values()
            .any(|s| !s.queue.is_empty() || s.held.is_some())
    }

    /// A run of `lease` ended with `report`: reported now, held until its splits are recorded, or dropped (and
    /// its lease handed back) when a split was refused.
    pub(crate) fn finish_split_run(
        &mut self,
        lease: u64,
        handoffs: Vec<Handoff>,
        report: Outgoing,
        worker: &str,
    ) {
        let Some(rs) = self.splits.get_mut(&lease) else {
            self.outbox.push(report);
            return;
        };
        rs.queue.extend(handoffs);
        rs.finished = true;
        if rs.void {
            self.splits.remove(&lease);
            self.failures.push(void_release(worker, lease));
        } else if rs.queue.is_empty() && !rs.sending {
            self.splits.remove(&lease);
            self.outbox.push(report);
        } else {
            rs.held = Some(report);
        }
    }
}

pub(crate) fn void_release(worker: &str, lease: u64) -> v1::FailRequest {
    v1::FailRequest {
        worker_id: worker.to_string(),
        lease_id: lease,
        error: "a split of the chunk was refused; it runs again from its last recorded state"
            .into(),
        release: true,
        checkpoint: None,
        generation: 0,
    }
}

struct CachedJob {
    job: SpaceJob,
    /// Digests of the artifacts it is bound to (empty: a job without inputs).
    inputs: Vec<String>,
    last_use: u64,
}

/// Jobs bound to input artifacts kept at most: a layered search is a DAG of dozens of jobs, each bound to the
/// previous layer, and a worker that kept every one (and every layer's bytes) would grow for the whole run.
const MAX_BOUND_JOBS: usize = 8;

impl State {
    pub(crate) fn cached_job(&mut self, key: &(u64, String)) -> Option<SpaceJob> {
        self.uses += 1;
        let uses = self.uses;
        self.jobs.get_mut(key).map(|c| {
            c.last_use = uses;
            c.job.clone()
        })
    }

    /// Keeps `job` for the next chunks of the same job. Past [`MAX_BOUND_JOBS`] bound jobs the least recently
    /// used one is dropped (chunks running on it hold their own reference), and so are the input artifacts no
    /// kept job is bound to: a job that needs one again gets it from the disk cache or the coordinator.
    pub(crate) fn cache_job(
        &mut self,
        key: (u64, String),
        job: SpaceJob,
        inputs: Vec<(u64, String)>,
    ) {
        self.uses += 1;
        let inputs: Vec<String> = inputs.into_iter().map(|(_, d)| d).collect();
        let bound = !inputs.is_empty();
        self.jobs.insert(
            key,
            CachedJob {
                job,
                inputs,
                last_use: self.uses,
            },
        );
        if !bound {
            return;
        }
        while self.jobs.values().filter(|c| !c.inputs.is_empty()).count() > MAX_BOUND_JOBS {
            let oldest = self
                .jobs
                .iter()
                .filter(|(_, c)| !c.inputs.is_empty())
                .min_by_key(|(_, c)| c.last_use)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.jobs.remove(&k);
                }
                None => break,
            }
        }
        let needed: std::collections::HashSet<&String> =
            self.jobs.values().flat_map(|c| c.inputs.iter()).collect();
        self.artifacts.retain(|digest, _| needed.contains(digest));
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_jobs_are_kept_least_recently_used_first_out_with_their_artifacts() {
        let job = sweep_space::Registry::new()
            .with::<sweep_star::Star>()
            .job_from_params("star", &serde_json::json!({"points": 6, "method": "brute"}))
            .unwrap();
        let mut st = State::default();
        let key = |j: u64| (j, String::new());
        // A job without inputs stays whatever happens.
        st.cache_job(key(100), job.clone(), Vec::new());
        for j in 0..MAX_BOUND_JOBS as u64 {
            let digest = format!("d{j}");
            st.artifacts.insert(digest.clone(), Arc::new(vec![j as u8]));
            st.cache_job(key(j), job.clone(), vec![(j + 1000, digest)]);
        }
        // Job 0 is used again, so job 1 is now the least recently used.
        assert!(st.cached_job(&key(0)).is_some());
        st.artifacts.insert("new".into(), Arc::new(vec![9]));
        st.cache_job(
            key(50),
            job.clone(),
            vec![(2000, "new".into()), (1000, "d0".into())],
        );
        assert!(
            st.cached_job(&key(1)).is_none(),
            "the least recently used went"
        );
        assert!(!st.artifacts.contains_key("d1"), "and so did its artifact");
        for j in [0, 2, 50, 100] {
            assert!(st.cached_job(&key(j)).is_some(), "job {j}");
        }
        assert!(st.artifacts.contains_key("d0") && st.artifacts.contains_key("new"));
        assert_eq!(
            st.jobs.values().filter(|c| !c.inputs.is_empty()).count(),
            MAX_BOUND_JOBS
        );
    }
}
