//! What a job's answer is read from, and what a finished job keeps of it in memory. The answer itself is
//! assembled by the shell (`crate::answers`) off the lock, from the store; the core hands out what that needs,
//! decides whether a job has a list to stream, and bounds what finished jobs keep (the store can always rebuild
//! it).

use std::sync::Arc;

use sweep_space::{AnswerMerge, SpaceJob};

use crate::error::CoreError;
use crate::records::Listing;
use crate::scheduler::{JobId, Millis};
use crate::state::{Core, JobEntry, SlotOrder};
use crate::views::{JobView, KeptAnswer};

/// Finished jobs that keep the answer merged while they ran until someone asks for it (see
/// `Core::bound_finished_merges`).
pub const MAX_KEPT_MERGES: usize = 8;

/// How many finished jobs keep their answer's JSON text in memory (see `Core::keep_result`).
pub const MAX_KEPT_RESULTS: usize = 16;

/// What the results of a job are computed from, copied out under the lock.
pub struct ResultsInput {
    pub job: SpaceJob,
    /// Its slots: the plan's chunks and the pieces split off them (each has one output).
    pub n_chunks: u64,
    /// The order of its slots' artifacts.
    pub order: SlotOrder,
    pub view: JobView,
    /// The answer, if it was computed already (finished jobs keep theirs).
    pub cached: Option<KeptAnswer>,
    pub finished: bool,
}

/// A stored artifact's digest, and its bytes if they are in memory.
pub struct ArtifactRef {
    pub digest: String,
    pub bytes: Option<Arc<Vec<u8>>>,
}

impl Core {
    /// What results need at `now`: the job, its view, its cached answer and whether it is finished.
    pub fn results_input(&self, id: JobId, now: Millis) -> Result<ResultsInput, CoreError> {
        let e = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        let view = self.job_view(id, now).ok_or(CoreError::UnknownJob(id))?;
        Ok(ResultsInput {
            job: e.job.clone(),
            n_chunks: e.record.slots(),
            order: e.slot_order(),
            view,
            cached: e.result.clone(),
            finished: e.record.state.is_finished(),
        })
    }

    /// The chunk count of job `id` when it stores its whole list of solutions, for streaming the list; a job
    /// that keeps counts only has no list to stream, and says why.
    pub fn listed_chunks(&self, id: JobId) -> Result<u64, CoreError> {
        let e = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        match e.record.listing {
            Listing::All => Ok(e.record.slots()),
            Listing::CountOnly => Err(CoreError::Precondition(format!(
                "job {id} was submitted --count-only: it has counts, no list of solutions"
            ))),
            Listing::Stopped => Err(CoreError::Precondition(format!(
                "job {id}'s list of solutions outgrew the coordinator's --max-job-solutions or \
                 --max-job-output-mb and was stopped (its counts are exact): raise the limit and run \
                 the job again, or submit it --count-only"
            ))),
        }
    }

    /// The stored digest of a finished job's artifact, and the bytes if they are in memory.
    pub fn artifact_of(&self, id: JobId) -> Result<ArtifactRef, CoreError> {
        let e = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        let Some(digest) = e.record.artifact_digest.clone() else {
            return Err(CoreError::Precondition(format!(
                "job {id} has no stored artifact (not done yet, or it produces none)"
            )));
        };
        Ok(ArtifactRef {
            digest,
            bytes: e.artifact.clone(),
        })
    }

    /// Keeps an artifact read back from the store, for the next fetch.
    pub fn keep_artifact(&mut self, id: JobId, bytes: Arc<Vec<u8>>) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.artifact = Some(bytes);
        }
    }

    /// Drops the merged answers of all but the [`MAX_KEPT_MERGES`] most recently finished jobs whose answer
    /// nobody asked for yet (the layers of a DAG, say): each holds up to `MAX_SHOWN_SOLUTIONS` solutions, and
    /// the store can always rebuild them.
    pub(crate) fn bound_finished_merges(&mut self) {
        self.keep_latest_finished(MAX_KEPT_MERGES, |e| &mut e.merged);
    }

    /// Clears what `slot` holds in all but the `max` most recently finished jobs that hold something there:
    /// memory a finished job keeps only for speed, since the store can rebuild it.
    fn keep_latest_finished<T>(
        &mut self,
        max: usize,
        slot: impl Fn(&mut JobEntry) -> &mut Option<T>,
    ) {
        let mut kept: Vec<(Millis, JobId)> = self
            .jobs
            .values_mut()
            .filter_map(|e| {
                let holds = e.record.state.is_finished() && slot(e).is_some();
                holds.then_some((e.record.finished_ms, e.record.id))
            })
            .collect();
        if kept.len() <= max {
            return;
        }
        kept.sort_unstable();
        for (_, id) in &kept[..kept.len() - max] {
            if let Some(e) = self.jobs.get_mut(id) {
                *slot(e) = None;
            }
        }
    }

    /// The answer merged as job `id`'s results were accepted, if it covers every stored output; taken, since a
    /// finished job's answer is computed once and then kept (see [`Core::keep_result`]).
    pub fn take_merged(&mut self, id: JobId) -> Option<AnswerMerge> {
        let e = self.jobs.get_mut(&id)?;
        if !e.record.state.is_finished() {
            return None;
        }
        e.merged.take()
    }

    /// Whether job `id` holds the answer merged as its results were accepted, so that its answer will need no
    /// pass over the stored outputs (see [`Core::take_merged`]).
    pub fn holds_merged(&self, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|e| e.merged.is_some())
    }

    /// Keeps a finished job's answer, so it is computed once; only the [`MAX_KEPT_RESULTS`] most recently
    /// finished jobs keep theirs (the store can always rebuild one), so asking every job of a long-lived
    /// coordinator for its answer does not pile them all up in memory.
    pub fn keep_result(&mut self, id: JobId, result: KeptAnswer) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.result = Some(result);
        }
        self.keep_latest_finished(MAX_KEPT_RESULTS, |e| &mut e.result);
    }
}
