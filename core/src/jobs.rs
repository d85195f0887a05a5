//! What happens to a job after it is submitted, besides its chunks: cancel, pause and resume, the chunk
//! estimates the shell computes for it off the lock, and the merge of its chunk artifacts into the one artifact
//! its readers wait for (queued here, merged by the shell, recorded here, then released to the readers).

use std::sync::Arc;

use sweep_space::SpaceJob;

use crate::error::CoreError;
use crate::estimate::ChunkEstimates;
use crate::records::Op;
use crate::scheduler::{JobId, Millis};
use crate::state::{Core, SlotOrder};
use crate::views::JobView;

/// Who asks to cancel, pause or resume a job, as the auth layer found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// An admin token, or anyone when the coordinator has no tokens (it then trusts its network): any job.
    Admin,
    /// A user token, by its identity: only the jobs that identity submitted, so people sharing a cluster
    /// manage their own work without being able to stop each other's.
    User(String),
}

impl Core {
    pub fn cancel(&mut self, job: JobId, by: &Actor, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.check_control(job, by, "cancel")?;
        // Cancelling an input also cancels the jobs still waiting for it: a user may not stop another
        // identity's job that way either.
        if let Actor::User(identity) = by {
            if let Some(reader) = self
                .unfinished_readers(job)
                .into_iter()
                .find(|r| self.owner_of(*r) != Some(identity.as_str()))
            {
                return Err(CoreError::NotAllowed(format!(
                    "job {job} is an input of job {reader}, which belongs to {}: cancelling it would cancel \
                     that job too, which only an admin token may do",
                    shown_owner(self.owner_of(reader).unwrap_or(""))
                )));
            }
        }
        self.sched.advance(now);
        self.sched.cancel(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    pub fn pause(&mut self, job: JobId, by: &Actor, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.check_control(job, by, "pause")?;
        self.sched.pause(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    pub fn resume(&mut self, job: JobId, by: &Actor, now: Millis) -> Result<JobView, CoreError> {
        self.check_writable()?;
        self.check_control(job, by, "resume")?;
        self.sched.resume(job)?;
        self.stage_dirty(now);
        self.job_view(job, now).ok_or(CoreError::UnknownJob(job))
    }

    fn owner_of(&self, job: JobId) -> Option<&str> {
        self.jobs.get(&job).map(|e| e.record.owner.as_str())
    }

    /// Whether `by` may `verb` job `job`: an admin any job, a user only its own. An unknown job is
    /// reported as unknown whoever asks.
    fn check_control(&self, job: JobId, by: &Actor, verb: &str) -> Result<(), CoreError> {
        let owner = self.owner_of(job).ok_or(CoreError::UnknownJob(job))?;
        match by {
            Actor::Admin => Ok(()),
            Actor::User(identity) if identity == owner => Ok(()),
            Actor::User(identity) => Err(CoreError::NotAllowed(format!(
                "job {job} belongs to {}, and this user token is {identity}: a user token may {verb} only its \
                 own jobs, an admin token any job",
                shown_owner(owner)
            ))),
        }
    }

    /// The unfinished jobs that read `job`, directly or through other jobs: what cancelling it cancels.
    fn unfinished_readers(&self, job: JobId) -> Vec<JobId> {
        let mut found: Vec<JobId> = Vec::new();
        let mut frontier = vec![job];
        // Each job enters `found` once, so this ends after at most one pass per job.
        while let Some(input) = frontier.pop() {
            for e in self.jobs.values() {
                let id = e.record.id;
                if e.record.input_jobs.contains(&input)
                    && !found.contains(&id)
                    && self.sched.job_state(id).is_some_and(|s| !s.is_finished())
                {
                    found.push(id);
                    frontier.push(id);
                }
            }
        }
        found
    }

    /// Jobs queued since the last call whose chunk estimates the shell should compute off the lock
    /// ([`estimate_chunks`](crate::estimate::estimate_chunks)): each with its job and chunk count.
    pub fn take_to_estimate(&mut self) -> Vec<(JobId, SpaceJob, u64)> {
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
        let done = self.sched.done_chunks(id).map(|slot| {
            let part = e.slot_part(slot);
            (part.chunk, part.weight())
        });
        e.estimates = Some(ChunkEstimates::new(per_chunk, done));
        self.job_changes += 1;
    }

    /// Jobs finished since the last call whose artifacts the shell must merge.
    pub fn take_to_merge(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.to_merge)
    }

    pub fn has_work_to_merge(&self) -> bool {
        !self.to_merge.is_empty()
    }

    /// The job and the order of its slots' artifacts, for merging them outside the lock.
    pub fn job_and_order(&self, job: JobId) -> Option<(SpaceJob, SlotOrder)> {
        self.jobs.get(&job).map(|e| (e.job.clone(), e.slot_order()))
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

/// An owner as a refusal names it: a job submitted while the coordinator had no tokens has none.
fn shown_owner(owner: &str) -> String {
    if owner.is_empty() {
        "no identity (it was submitted without a token)".into()
    } else {
        owner.to_string()
    }
}
