//! Submitting a job: everything a submit decides. First, outside the lock, the request is checked and planned
//! ([`parse_submit`], then [`plan_submit`]: the job's plan and its whole input DAG, each input with its default plan); the
//! shell checks in between that the store holds every file the job ships, the one step that needs I/O. Then,
//! under the lock, [`Core::submit`] finds or creates every job of the DAG, inputs first, in one batch; a job
//! whose inputs have no stored artifact yet is held back in the scheduler until they do.

use std::collections::BTreeMap;

use sweep_space::{AnswerMerge, Plan, Registry, SpaceJob, Tally};
use tracing::{info, warn};

use crate::error::{invalid, CoreError};
use crate::limits::Limits;
use crate::records::{JobRecord, Listing, Op};
use crate::scheduler::{FairSpec, JobId, JobState, Millis, Scheduler};
use crate::state::{Core, JobEntry};
use crate::views::JobView;
use sweep_engine::inputs;

/// Upper bound on the chunks of one job the coordinator keeps. An untouched or done chunk costs it a bit
/// (the scheduler's chunk map, the store's summaries), so a billion is 125 MB; more is a typo.
pub const MAX_CHUNKS_PER_JOB: u64 = 1_000_000_000;
/// More replicas than this buys no extra trust and multiplies the work.
pub const MAX_REPLICATE: u32 = 16;
/// The largest `--share` a job or identity may have: a million to one is far beyond any useful ratio, and a
/// bound keeps the arithmetic of use per share well inside an f64's precision.
pub const MAX_SHARE: f64 = 1_000_000.0;
/// The longest `--chunk-time-hint`: a week.
pub const MAX_CHUNK_HINT_MS: u64 = 7 * 86_400_000;

/// What a submit asks for, decoded.
#[derive(Clone, Debug, Default)]
pub struct SubmitSpec {
    pub space: String,
    pub params_json: String,
    /// 0: the space's default plan.
    pub chunks: u64,
    pub priority: i32,
    pub reuse_existing: bool,
    /// Agreeing results each chunk needs (0 and 1: no replication).
    pub replicate: u32,
    /// Keep counts only, no list of solutions.
    pub count_only: bool,
    /// Failed or expired attempts after which one of the job's chunks is poisoned; `None`: the coordinator's.
    pub max_attempts: Option<u32>,
    /// The job's weight among its identity's jobs of the same priority; `None`: 1.
    pub share: Option<f64>,
    /// The submitter's guess of one chunk's length, in milliseconds.
    pub chunk_hint_ms: Option<u64>,
    /// Who submits it: the token identity the auth layer found (empty without tokens).
    pub owner: String,
    /// Whether the caller holds an admin token (or tokens are off): only then may it ask for a priority above
    /// the coordinator's `--max-user-priority`.
    pub admin: bool,
}

/// Checks a share (a job's `--share`, an identity's `sweep share set`): a number above 0 and at most
/// [`MAX_SHARE`].
pub fn check_share(share: f64) -> Result<f64, CoreError> {
    if !share.is_finite() || share <= 0.0 || share > MAX_SHARE {
        return Err(CoreError::Invalid(format!(
            "a share must be a number above 0 and at most {MAX_SHARE}, got {share}"
        )));
    }
    Ok(share)
}

/// The job a submit names, rebuilt from its space and parameters and checked against what the coordinator
/// takes (parameter size, replication). The shell checks its shipped files next, then calls [`plan_submit`].
pub fn parse_submit(
    spec: &SubmitSpec,
    registry: &Registry,
    limits: &Limits,
) -> Result<SpaceJob, CoreError> {
    if spec.max_attempts == Some(0) {
        return Err(CoreError::Invalid(
            "max_attempts must be at least 1 (the first attempt counts)".into(),
        ));
    }
    limits
        .check_params(&spec.params_json)
        .map_err(CoreError::OverLimit)?;
    let params: serde_json::Value = serde_json::from_str(&spec.params_json)
        .map_err(|e| invalid(format!("params_json is not JSON: {e}")))?;
    let job = registry
        .job_from_params(&spec.space, &params)
        .map_err(invalid)?;
    if let Some(share) = spec.share {
        check_share(share)?;
    }
    if let Some(hint) = spec.chunk_hint_ms {
        if hint == 0 || hint > MAX_CHUNK_HINT_MS {
            return Err(CoreError::Invalid(format!(
                "chunk_hint_ms must be in 1..={MAX_CHUNK_HINT_MS} (a week), got {hint}"
            )));
        }
    }
    if spec.replicate > MAX_REPLICATE {
        return Err(CoreError::Invalid(format!(
            "replicate must be in 1..={MAX_REPLICATE}, got {}",
            spec.replicate
        )));
    }
    Ok(job)
}

/// Plans the job asked for and every job whose artifact it needs (a table, the layers of a layered search),
/// recursively: the DAG for [`Core::submit`], inputs first, each input with its default plan; and how the job
/// asked for runs.
pub fn plan_submit(
    job: SpaceJob,
    spec: &SubmitSpec,
    registry: &Registry,
) -> Result<(Vec<SubmitNode>, JobOptions), CoreError> {
    let requested = (spec.chunks > 0).then_some(spec.chunks);
    let plan = job.plan(requested).map_err(invalid)?;
    check_chunks(plan.n_chunks, "")?;
    let dag = inputs::resolve(job, &|space: &str, params: &serde_json::Value| {
        registry.job_from_params(space, params)
    })
    .map_err(invalid)?;
    let last = dag.len().saturating_sub(1);
    let mut nodes = Vec::with_capacity(dag.len());
    let mut plan = Some(plan);
    for (i, node) in dag.into_iter().enumerate() {
        let plan = match plan.take().filter(|_| i == last) {
            Some(p) => p,
            None => {
                let label = inputs::label(&node.job);
                let p = node
                    .job
                    .plan(None)
                    .map_err(|e| invalid(format!("input job {label}: {e}")))?;
                check_chunks(p.n_chunks, &format!("input job {label}: "))?;
                p
            }
        };
        nodes.push(SubmitNode {
            job: node.job,
            plan,
            inputs: node.inputs,
        });
    }
    let opts = JobOptions {
        replicate: spec.replicate.max(1),
        listing: if spec.count_only {
            Listing::CountOnly
        } else {
            Listing::All
        },
        max_attempts: spec.max_attempts,
        owner: spec.owner.clone(),
        share: spec.share.unwrap_or(1.0),
        chunk_hint_ms: spec.chunk_hint_ms,
    };
    Ok((nodes, opts))
}

fn check_chunks(n_chunks: u64, what: &str) -> Result<(), CoreError> {
    if n_chunks > MAX_CHUNKS_PER_JOB {
        return Err(invalid(format!(
            "{what}{n_chunks} chunks is more than a coordinator keeps for one job ({MAX_CHUNKS_PER_JOB})"
        )));
    }
    Ok(())
}

/// When [`Core::find_or_create`] may answer with an existing job instead of creating one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// A submit without `reuse_existing`: always a new job.
    Never,
    /// A submit with `reuse_existing`: an equal job in any state but cancelled (one that ended with poisoned
    /// chunks answers with what it has, and says what is missing).
    Any,
    /// An input of another job: only one that has, or will have, a complete artifact.
    AsInput,
}

/// One job of a submitted DAG, inputs first: the job, its plan, and the indices (into the DAG) of the jobs
/// whose artifacts it reads.
pub struct SubmitNode {
    pub job: SpaceJob,
    pub plan: Plan,
    pub inputs: Vec<usize>,
}

/// How the job asked for is run (its inputs always run once, with full lists and the coordinator's attempts,
/// a share of 1 and no hint, under the same owner).
#[derive(Clone, Debug, PartialEq)]
pub struct JobOptions {
    /// Agreeing results from distinct workers each chunk needs (1: no replication).
    pub replicate: u32,
    pub listing: Listing,
    /// Attempts per chunk before it is poisoned, as asked for; lowered to the coordinator's `--max-attempts`
    /// when it is more. `None`: the coordinator's.
    pub max_attempts: Option<u32>,
    /// The identity that submitted it (empty without tokens).
    pub owner: String,
    /// Its weight among its identity's jobs of the same priority.
    pub share: f64,
    /// Expected milliseconds per chunk, if the submitter said.
    pub chunk_hint_ms: Option<u64>,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            replicate: 1,
            listing: Listing::All,
            max_attempts: None,
            owner: String::new(),
            share: 1.0,
            chunk_hint_ms: None,
        }
    }
}

/// Holds job `id` back in the scheduler until each of its `inputs` has its merged artifact stored. Returns the
/// inputs that are done but have no stored artifact: jobs whose chunks produce none, which only get an (empty)
/// artifact once some job reads them, so the merger must look at them again.
pub(crate) fn hold_for_inputs(
    sched: &mut Scheduler,
    jobs: &BTreeMap<JobId, JobEntry>,
    id: JobId,
    inputs: &[JobId],
) -> Vec<JobId> {
    let mut merge = Vec::new();
    for &input in inputs {
        let entry = jobs.get(&input);
        if entry.is_some_and(|i| i.record.artifact_digest.is_some()) {
            continue;
        }
        sched.wait_for_input(id, input);
        if entry.is_some_and(|i| i.record.state == JobState::Done) {
            merge.push(input);
        }
    }
    merge
}

impl Core {
    /// The attempts job `id` gets when it asks for `asked`: lowered to the coordinator's `--max-attempts`
    /// rather than refused, so the job still runs with what this coordinator allows (its view says how many).
    fn allowed_attempts(&self, id: JobId, asked: Option<u32>) -> Option<u32> {
        let ceiling = self.sched.config().max_attempts.max(1);
        if let Some(asked) = asked.filter(|&n| n > ceiling) {
            warn!(
                job = id,
                asked,
                ceiling,
                "the job asked for more attempts per chunk than this coordinator's --max-attempts allows: \
                 it gets {ceiling}"
            );
        }
        asked.map(|n| n.clamp(1, ceiling))
    }

    /// Gives an unfinished job found again by a submit the attempts that submit asked for.
    fn change_max_attempts(&mut self, id: JobId, asked: Option<u32>) {
        let allowed = self.allowed_attempts(id, asked);
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        if e.record.state.is_finished() || e.record.max_attempts == allowed {
            return;
        }
        e.record.max_attempts = allowed;
        self.sched.set_max_attempts(id, allowed);
        self.pending.push(Op::job(e.record.clone()));
    }

    /// Submits a DAG (inputs first, the job asked for last): every input is reused if an equal one will have
    /// a complete artifact, the last job is reused only if `reuse_existing`. Returns the last job's view and
    /// whether it existed already.
    pub fn submit(
        &mut self,
        dag: Vec<SubmitNode>,
        priority: i32,
        reuse_existing: bool,
        opts: JobOptions,
        now: Millis,
    ) -> Result<(JobView, bool), CoreError> {
        self.check_writable()?;
        let last = dag.len().saturating_sub(1);
        let mut ids: Vec<JobId> = Vec::with_capacity(dag.len());
        let mut existing = false;
        for (i, node) in dag.into_iter().enumerate() {
            let inputs = node
                .inputs
                .iter()
                .filter_map(|&k| ids.get(k).copied())
                .collect();
            let (id, found) = if i == last {
                let reuse = if reuse_existing {
                    Reuse::Any
                } else {
                    Reuse::Never
                };
                self.find_or_create(
                    node.job,
                    &node.plan,
                    priority,
                    reuse,
                    inputs,
                    opts.clone(),
                    now,
                )
            } else {
                self.find_or_create(
                    node.job,
                    &node.plan,
                    priority,
                    Reuse::AsInput,
                    inputs,
                    JobOptions {
                        owner: opts.owner.clone(),
                        ..JobOptions::default()
                    },
                    now,
                )
            };
            ids.push(id);
            existing = found;
        }
        let id = ids
            .last()
            .copied()
            .ok_or_else(|| CoreError::Invalid("nothing to submit".into()))?;
        let view = self.job_view(id, now).ok_or(CoreError::UnknownJob(id))?;
        Ok((view, existing))
    }

    /// The unfinished (or done) job with the same space, parameters and chunking if `reuse` allows and there is
    /// one, else a new job reading `inputs`, staged for the next commit. Returns its id and whether it existed.
    ///
    /// An unfinished job is reused only if it reads the same input jobs: one waiting for an input that was
    /// cancelled since would never run. A job that ended with poisoned chunks is never reused as an `input`
    /// (it has no complete artifact, so its readers would wait for ever); it runs again as a new job.
    #[allow(clippy::too_many_arguments)]
    fn find_or_create(
        &mut self,
        job: SpaceJob,
        plan: &Plan,
        priority: i32,
        reuse: Reuse,
        inputs: Vec<JobId>,
        opts: JobOptions,
        now: Millis,
    ) -> (JobId, bool) {
        let JobOptions {
            replicate,
            listing,
            max_attempts,
            owner,
            share,
            chunk_hint_ms,
        } = opts;
        // Canonical parameters: equal jobs compare equal however the user spelled them.
        let params = job.params();
        let space = job.space();
        if reuse != Reuse::Never {
            let found = self.jobs.values().find(|e| {
                e.record.space == space
                    && &e.record.params == params
                    && e.record.n_chunks == plan.n_chunks
                    && e.record.replicate == replicate
                    // A job with a complete list serves a request for counts only, not the other way round.
                    && (listing.counts_only() || e.record.listing == Listing::All)
                    && e.record.state != JobState::Cancelled
                    && !(reuse == Reuse::AsInput
                        && e.record.state == JobState::DoneWithPoisonedChunks)
                    && (e.record.state.is_finished() || e.record.input_jobs == inputs)
            });
            if let Some(id) = found.map(|e| e.record.id) {
                // Asked for again with another limit (`sweep run` repeated with a new --max-attempts): the
                // limit applies from now on, to the attempts still to come.
                if reuse == Reuse::Any && max_attempts.is_some() {
                    self.change_max_attempts(id, max_attempts);
                }
                return (id, true);
            }
        }
        let id = self.next_job;
        self.next_job += 1;
        let max_attempts = self.allowed_attempts(id, max_attempts);
        let record = JobRecord {
            total_nodes: plan.total_nodes,
            priority,
            input_jobs: inputs.clone(),
            replicate,
            listing,
            max_attempts,
            chunk_memory: job.chunk_memory(),
            owner,
            share,
            chunk_hint_ms,
            ..JobRecord::new(id, space, params.clone(), plan.n_chunks, now)
        };
        self.sched
            .add_job(id, priority, plan.n_chunks, JobState::Running);
        self.sched.set_fair(id, priority, fair_spec(&record, &job));
        self.sched.set_replication(id, replicate);
        self.sched.set_max_attempts(id, max_attempts);
        let merge = hold_for_inputs(&mut self.sched, &self.jobs, id, &inputs);
        for input in merge {
            if !self.to_merge.contains(&input) {
                self.to_merge.push(input);
            }
        }
        self.pending.push(Op::job(record.clone()));
        self.pending.push(Op::Meta("next_job", id + 1));
        let entry = JobEntry::new(record, job, Tally::default(), Some(AnswerMerge::default()));
        if entry.wants_estimates() {
            self.to_estimate.push(id);
        }
        self.jobs.insert(id, entry);
        info!(
            job = id,
            space,
            chunks = plan.n_chunks,
            ?inputs,
            "job submitted"
        );
        (id, false)
    }
}

/// What the scheduler's fair share needs of a job: its owner, share, hint and threads per chunk.
pub(crate) fn fair_spec(record: &JobRecord, job: &SpaceJob) -> FairSpec {
    FairSpec {
        owner: record.owner.clone(),
        share: record.share,
        chunk_hint_ms: record.chunk_hint_ms.map(|ms| ms as f64),
        threads: job.threads_per_chunk().max(1),
    }
}
