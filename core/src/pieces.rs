//! Splitting running chunks (work follows the idle threads): which running chunks the coordinator asks to
//! split, and a worker's split checked and recorded. A split's records are written in one batch: the new
//! piece's part and pending slot, the split slot's narrowed part and next generation, its old resume state
//! dropped, and the job's slot count. Until that batch is durable the worker is not answered, and it holds the
//! split chunk's result until then, so a crash on either side leaves either no split (the chunk runs whole
//! again from its durable state, the worker's kept work is refused by generation) or the whole split.

use sweep_space::ChunkId;
use tracing::{debug, info};

use crate::error::{invalid, CoreError};
use crate::records::{Op, PartRecord};
use crate::scheduler::{LeaseId, Millis, SPLIT_ASK_INTERVAL_MS};
use crate::state::Core;
use crate::views::LeaseView;

/// The most slots splitting may add to one job: each is a record and an output in the store, so a kernel that
/// splits without end cannot grow a job without bound.
pub const MAX_PIECES_PER_JOB: u64 = 1_000_000;

/// A worker's split of a chunk it runs: the part it keeps and the part it gives away, as its kernel stated them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitRequest {
    pub lease: LeaseId,
    /// The generation the run was in when it split: the lease's generation plus the splits it made before.
    pub generation: u32,
    pub kept: String,
    pub given: String,
    /// Lease the given part to the caller at once: it has a thread for it.
    pub take: bool,
}

/// A split recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitAnswer {
    /// The new piece's slot.
    pub piece: u64,
    /// Its lease, when the caller asked to take it.
    pub lease: Option<LeaseView>,
}

impl Core {
    /// Records `worker`'s split of the chunk it runs under `req.lease`, or refuses it with the reason; nothing
    /// changes on a refusal.
    pub fn split(
        &mut self,
        worker: &str,
        req: SplitRequest,
        now: Millis,
    ) -> Result<SplitAnswer, CoreError> {
        self.check_writable()?;
        self.touch_worker(worker, now);
        let Some((job, slot)) = self.sched.lease_job_chunk(req.lease) else {
            return Err(CoreError::Precondition(format!(
                "lease {} is not outstanding (it ended, expired or was revoked): its chunk runs again from \
                 its last recorded state",
                req.lease
            )));
        };
        if !self.sched.holds(worker, req.lease) {
            return Err(CoreError::Precondition(format!(
                "lease {} is not held by worker {worker}",
                req.lease
            )));
        }
        let e = self.jobs.get(&job).ok_or(CoreError::UnknownJob(job))?;
        if e.record.replicate > 1 {
            return Err(CoreError::Precondition(format!(
                "job {job} is replicated: its chunks are compared whole between workers, so they do not split"
            )));
        }
        if e.record.pieces >= MAX_PIECES_PER_JOB {
            return Err(CoreError::OverLimit(format!(
                "job {job} has {MAX_PIECES_PER_JOB} pieces already, the most splits may make"
            )));
        }
        let part = e.slot_part(slot);
        if req.generation != part.generation {
            return Err(CoreError::Precondition(format!(
                "the split of slot {slot} of job {job} was made in generation {} of its part, which is in \
                 generation {}: it was made from a part that is no longer this slot's",
                req.generation, part.generation
            )));
        }
        let at = ChunkId::new(e.record.n_chunks, part.chunk);
        e.job
            .check_split(at, part.part.as_deref(), &req.kept, &req.given)
            .map_err(|err| invalid(format!("split of {at} refused: {err}")))?;
        let take = req.take.then_some(worker);
        let Some((piece, grant)) = self.sched.add_piece(job, take, now) else {
            return Err(CoreError::Precondition(format!(
                "job {job} is not running: its chunks do not split"
            )));
        };
        let kept = PartRecord {
            chunk: part.chunk,
            part: req.kept,
            generation: part.generation + 1,
            path: part.path.clone(),
        };
        let given = PartRecord {
            chunk: part.chunk,
            part: req.given,
            generation: 0,
            path: format!("{}{}1", part.path, "0".repeat(part.generation as usize)),
        };
        if let Some(e) = self.jobs.get_mut(&job) {
            e.record.pieces += 1;
            for (s, rec) in [(slot, kept), (piece, given)] {
                self.pending.push(Op::Part(job, s, Box::new(rec.clone())));
                e.parts.insert(s, rec);
            }
        }
        // The old state names a point of the part before the split: a restart from it would search the given
        // part again.
        if self.checkpoints.remove(&(job, slot)).is_some() {
            self.pending.push(Op::Checkpoint(job, slot, None));
        }
        self.split_asks.remove(&req.lease);
        debug!(job, slot, piece, worker, "chunk split");
        self.stage_dirty(now);
        let lease = grant.and_then(|g| self.lease_view(g.lease, g.job, g.chunk, g.deadline));
        Ok(SplitAnswer { piece, lease })
    }

    /// Asks the holders of running chunks to split, for `idle` threads of `worker` that found nothing to
    /// lease: in every job that has running chunks and nothing else to lease and whose space splits, the
    /// chunks with the most work left (by their up-front estimates and progress, else the longest running)
    /// are asked first; a chunk asked is not asked again for [`SPLIT_ASK_INTERVAL_MS`].
    pub(crate) fn ask_splits(&mut self, worker: &str, idle: usize, now: Millis) {
        if idle == 0 || now < self.splits_looked_ms + SPLIT_LOOK_INTERVAL_MS {
            return;
        }
        self.splits_looked_ms = now;
        let spaces = self
            .workers
            .get(worker)
            .and_then(|w| w.spaces.clone())
            .unwrap_or_default();
        self.split_asks
            .retain(|_, (at, _)| now < *at + SPLIT_ASK_INTERVAL_MS);
        let mut candidates: Vec<(f64, LeaseId)> = Vec::new();
        for job in self.sched.tail_jobs() {
            let Some(e) = self.jobs.get(&job) else {
                continue;
            };
            if !e.job.splits() || !spaces.contains(&e.record.space) {
                continue;
            }
            for (lease, slot, _) in self.sched.leases_of(job) {
                if self.split_asks.contains_key(&lease) {
                    continue;
                }
                let done = self.progress.get(&lease).copied().unwrap_or(0) as f64;
                let part = e.slot_part(slot);
                let left = e
                    .estimates
                    .as_ref()
                    .and_then(|est| est.nodes(part.chunk))
                    .map(|n| n * part.weight() - done);
                // Without estimates the oldest lease (lowest id) has run longest: in a job's tail, the biggest.
                let score = left.unwrap_or(-(lease as f64));
                candidates.push((score, lease));
            }
        }
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, lease) in candidates.into_iter().take(idle) {
            self.split_asks.insert(lease, (now, false));
        }
    }

    /// The leases of `worker` the coordinator asks to split and has not told it of yet (its heartbeat's answer).
    pub(crate) fn splits_for(&mut self, worker: &str) -> Vec<LeaseId> {
        let mut out = Vec::new();
        for (lease, (_, told)) in self.split_asks.iter_mut() {
            if !*told && self.sched.holds(worker, *lease) {
                *told = true;
                out.push(*lease);
            }
        }
        if !out.is_empty() {
            info!(worker, leases = out.len(), "running chunks asked to split");
        }
        out.sort_unstable();
        out
    }
}

/// How often lease requests that found nothing look for chunks to split: the look is a pass over the jobs.
const SPLIT_LOOK_INTERVAL_MS: Millis = 100;
