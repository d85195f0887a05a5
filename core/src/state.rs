//! What the core holds: the job table, the scheduler, the workers, the outbox. The state is defined here, at the
//! bottom of the core, and each file above adds the methods of one concern (`open`, `outbox`, `submit`,
//! `reports`, `leases`, `workers`, `jobs`, `results`, `observe`), so that they import it downward and never each
//! other; its fields are visible to the whole core and to nothing outside it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sweep_space::{AnswerMerge, SpaceJob, Tally};

use crate::estimate::{ChunkEstimates, MAX_ESTIMATED_CHUNKS};
use crate::limits::{Limits, Usage};
use crate::records::{JobRecord, Op, PartRecord};
use crate::scheduler::{JobId, LeaseId, Millis, Scheduler};
use crate::views::{FailedAttempt, KeptAnswer};

/// One job as the core keeps it: its stored record, the space's job rebuilt from it, and what memory holds
/// only for speed.
pub(crate) struct JobEntry {
    pub(crate) record: JobRecord,
    pub(crate) job: SpaceJob,
    pub(crate) params_json: String,
    pub(crate) tally: Tally,
    /// The final result as JSON and as text for people, computed once the job is finished. Text, not a
    /// `Value`: a star answer's 10,000 shown stars are 2 MB of JSON (and 0.9 MB for people) and 15 MB as a
    /// `Value` tree.
    pub(crate) result: Option<KeptAnswer>,
    /// The merged artifact, kept in memory once loaded: workers of dependent jobs fetch it, maybe many times.
    pub(crate) artifact: Option<Arc<Vec<u8>>>,
    /// The most recent failed attempts, newest last (memory only: a poisoned chunk's last error is stored with
    /// the chunk).
    pub(crate) failures: VecDeque<FailedAttempt>,
    /// Up-front estimates of the chunks' sizes while the job runs, for a job of unknown size whose space gives
    /// them (memory only: they are a pure function of the job, recomputed after a restart).
    pub(crate) estimates: Option<ChunkEstimates>,
    /// The answer over every result accepted by this process, merged as each is accepted (bounded: the tally
    /// and the smallest solutions), so a finished job's answer needs no pass over its stored outputs. `None`
    /// when it would not cover exactly what is stored: loaded after a restart, once the list is stopped, or
    /// taken by the first answer.
    pub(crate) merged: Option<AnswerMerge>,
    /// The parts of its slots that splits made or narrowed (see [`PartRecord`]); a slot without one is its
    /// plan chunk, whole.
    pub(crate) parts: HashMap<u64, PartRecord>,
    /// Of its done slots, how many have a part record, and the sum of their weights ([`SlotPart::weight`]):
    /// what its progress in plan chunks is computed from without a pass over the parts.
    pub(crate) parted_done: (u64, f64),
}

/// Where the parts of a job's split slots lie: slot -> (plan chunk, path). Outputs sorted by
/// [`SlotOrder::key`] are in the order of the plan's items, as if no chunk had split, which is the order chunk
/// artifacts are merged in.
#[derive(Clone, Debug, Default)]
pub struct SlotOrder(HashMap<u64, (u64, String)>);

impl SlotOrder {
    /// The sort key of slot `slot`'s output: its plan chunk, then its part's path (the kept part of a split
    /// comes before everything given away from it, and earlier gifts after later ones).
    pub fn key(&self, slot: u64) -> (u64, &str) {
        match self.0.get(&slot) {
            Some((chunk, path)) => (*chunk, path.as_str()),
            None => (slot, ""),
        }
    }
}

/// What a slot searches: which plan chunk, which part of it (`None`: all), its generation and path (see
/// [`PartRecord`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotPart {
    pub chunk: u64,
    pub part: Option<String>,
    pub generation: u32,
    pub path: String,
}

impl SlotPart {
    /// Its share of its plan chunk: each split halves what the split slot counts for.
    pub fn weight(&self) -> f64 {
        let halvings = (self.path.len() as u64 + u64::from(self.generation)).min(1100) as i32;
        0.5f64.powi(halvings)
    }
}

/// What the core knows of one worker: memory only, so a restarted coordinator knows a worker again once it is
/// heard from.
pub(crate) struct WorkerInfo {
    pub(crate) last_seen_ms: u64,
    pub(crate) threads: u32,
    pub(crate) chunks_done: u64,
    /// Bytes its chunks may use, as it registered; 0: unknown (it did not say, or has not registered with this
    /// process yet).
    pub(crate) memory_bytes: u64,
    pub(crate) version: String,
    pub(crate) containment: String,
    /// The spaces it declared when it registered; `None` until it registers with this coordinator process
    /// (a worker that outlived a coordinator restart is asked to register again).
    pub(crate) spaces: Option<Vec<String>>,
    /// Its last lease request that carried a request id, with the leases it was granted: asked again under the
    /// same id (the worker gave up waiting for the answer, or never received it), it gets those chunks back
    /// instead of leaving them leased to nobody until they expire and are charged an attempt.
    pub(crate) last_lease: Option<(u64, Vec<LeaseId>)>,
}

/// The coordinator's domain core (see [the crate](crate)): one synchronous value, kept by the shell behind its
/// lock.
pub struct Core {
    pub(crate) sched: Scheduler,
    pub(crate) jobs: BTreeMap<JobId, JobEntry>,
    pub(crate) workers: HashMap<String, WorkerInfo>,
    /// Nodes reported by heartbeats for leases still running (progress only).
    pub(crate) progress: HashMap<LeaseId, u64>,
    /// Why chunks failed, kept for the poisoned report.
    pub(crate) last_errors: HashMap<(JobId, u64), String>,
    /// Resume states of chunks not done yet, as stored (see `Op::Checkpoint`).
    pub(crate) checkpoints: HashMap<(JobId, u64), String>,
    pub(crate) next_job: JobId,
    pub(crate) persisted_next_lease: LeaseId,
    /// The outbox: writes waiting for the next group commit, and that commit's sequence number.
    pub(crate) pending: Vec<Op>,
    pub(crate) seq: u64,
    /// Set when the store failed: memory may be ahead of disk, so nothing more is accepted until a restart.
    pub(crate) failed: Option<String>,
    pub(crate) worker_seq: u64,
    /// Finished jobs whose chunk artifacts still have to be merged into one stored artifact.
    pub(crate) to_merge: Vec<JobId>,
    /// Running jobs of unknown size whose chunk estimates the shell should compute (see [`Core::set_estimates`]).
    pub(crate) to_estimate: Vec<JobId>,
    /// Bumped whenever a job changes state, so watch streams report it at once instead of at their next tick.
    /// A plain counter the shell reads after each decision ([`Core::job_changes`]) and publishes to its
    /// streams however it likes: the core wakes nobody itself.
    pub(crate) job_changes: u64,
    /// Per job: what its accepted outputs stored so far (solutions, bytes), checked against `limits`.
    pub(crate) usage: HashMap<JobId, Usage>,
    /// Jobs whose usage changed since the last batch.
    pub(crate) usage_dirty: BTreeSet<JobId>,
    pub(crate) limits: Limits,
    /// When identities' use was last staged for the store (see `shares.rs`).
    pub(crate) identities_saved_ms: Millis,
    /// Running chunks the coordinator asks to split: when it asked, and whether the holder was told (in its
    /// heartbeat's answer). Memory only: after a restart idle threads ask again.
    pub(crate) split_asks: HashMap<LeaseId, (Millis, bool)>,
    /// When lease requests last looked for chunks to split (see `pieces.rs`).
    pub(crate) splits_looked_ms: Millis,
}

impl JobEntry {
    pub(crate) fn new(
        record: JobRecord,
        job: SpaceJob,
        tally: Tally,
        merged: Option<AnswerMerge>,
    ) -> JobEntry {
        let params_json = record.params.to_string();
        JobEntry {
            record,
            job,
            params_json,
            tally,
            result: None,
            artifact: None,
            failures: VecDeque::new(),
            estimates: None,
            merged,
            parts: HashMap::new(),
            parted_done: (0, 0.0),
        }
    }

    /// Slot `slot` was accepted: its share of its chunk is covered.
    pub(crate) fn slot_done(&mut self, slot: u64) {
        if self.parts.contains_key(&slot) {
            let w = self.slot_part(slot).weight();
            self.parted_done.0 += 1;
            self.parted_done.1 += w;
        }
    }

    /// Where its split slots' parts lie in their chunks, for putting their outputs in the chunk's order.
    pub(crate) fn slot_order(&self) -> SlotOrder {
        SlotOrder(
            self.parts
                .iter()
                .map(|(slot, p)| (*slot, (p.chunk, p.path.clone())))
                .collect(),
        )
    }

    /// What slot `slot` searches.
    pub(crate) fn slot_part(&self, slot: u64) -> SlotPart {
        match self.parts.get(&slot) {
            Some(p) => SlotPart {
                chunk: p.chunk,
                part: Some(p.part.clone()),
                generation: p.generation,
                path: p.path.clone(),
            },
            None => SlotPart {
                chunk: slot,
                ..SlotPart::default()
            },
        }
    }

    /// Whether the job could use chunk estimates: running or paused, of unknown size, not given them yet.
    pub(crate) fn wants_estimates(&self) -> bool {
        self.record.total_nodes.is_none()
            && !self.record.state.is_finished()
            && self.estimates.is_none()
            && self.record.n_chunks <= MAX_ESTIMATED_CHUNKS
    }
}
