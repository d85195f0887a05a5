//! What happens to a job after it is submitted, besides its chunks: cancel, pause and resume, the chunk
//! estimates the shell computes for it off the lock, and the merge of its chunk artifacts into the one artifact
//! its readers wait for (queued here, merged by the shell, recorded here, then released to the readers).

use std::sync::Arc;

use sweep_space::Job;

use super::error::CoreError;
use super::estimate::ChunkEstimates;
use super::records::Op;
use super::state::Core;
use super::views::JobView;
use crate::scheduler::{JobId, Millis};

impl Core {
    pub fn cancel(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.advance(now);
        self.sched.cancel(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    pub fn pause(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.pause(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    pub fn resume(&mut self, job: JobId, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.sched.resume(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    /// Jobs queued since the last call whose chunk estimates the shell should compute off the lock
    /// ([`estimate_chunks`](super::estimate::estimate_chunks)): each with its job and chunk count.
    pub fn take_to_estimate(&mut self) -> Vec<(JobId, Arc<dyn Job>, u64)> {
        std::mem::take(&mut self.to_estimate)
            .into_iter()
            .filter_map(|id| {
                let e = self.jobs.get(&id)?;
                e.wants_estimates()
                    .then(|| (id, e.job.clone(), e.record.n_chunks))
            })
            .collect()
    }

    /// The shell computed a job's chunk estimates: from now on its view carries an expected size. Ignored for
    /// a job that finished (or vanished) meanwhile, or for estimates of another plan.
    pub fn set_estimates(&mut self, id: JobId, per_chunk: Vec<f64>) {
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        if !e.wants_estimates() || per_chunk.len() as u64 != e.record.n_chunks {
            return;
        }
        // Chunks may have finished while the estimates were computed (or before a restart): their estimates
        // count as done, matching the tally's real nodes.
        e.estimates = Some(ChunkEstimates::new(per_chunk, self.sched.done_chunks(id)));
        self.job_changes.send_modify(|n| *n += 1);
    }

    /// Jobs finished since the last call whose artifacts the shell must merge.
    pub fn take_to_merge(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.to_merge)
    }

    pub fn has_work_to_merge(&self) -> bool {
        !self.to_merge.is_empty()
    }

    /// The job and its chunk count, for verifying a report outside the lock.
    pub fn job_and_chunks(&self, job: JobId) -> Option<(Arc<dyn Job>, u64)> {
        self.jobs
            .get(&job)
            .map(|e| (e.job.clone(), e.record.n_chunks))
    }

    pub fn has_artifact(&self, job: JobId) -> bool {
        self.jobs
            .get(&job)
            .is_some_and(|e| e.record.artifact_digest.is_some())
    }

    /// Whether some job names `job` among its inputs.
    pub fn is_read_by_others(&self, job: JobId) -> bool {
        self.jobs
            .values()
            .any(|e| e.record.input_jobs.contains(&job))
    }

    /// A finished job's merged artifact is stored (in this batch): keep it, and stage its record.
    pub fn artifact_merged(&mut self, id: JobId, digest: String, bytes: Arc<Vec<u8>>) -> bool {
        let Some(e) = self.jobs.get_mut(&id) else {
            return false;
        };
        e.record.artifact_digest = Some(digest);
        e.artifact = Some(bytes.clone());
        let rec = e.record.clone();
        self.pending.push(Op::Artifact(id, bytes));
        self.pending.push(Op::job(rec));
        true
    }

    /// The merged artifact of `id` is durable: the jobs reading it may hand out chunks.
    pub fn input_ready(&mut self, id: JobId) {
        self.sched.input_ready(id);
    }
}
