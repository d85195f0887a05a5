//! Chunk reports: checked outside the lock (decoding, the space's verifier and digests can be costly), then
//! applied under it, where the scheduler decides whether the result is new, a vote, a duplicate or refused.

use sweep_space::{ChunkId, ChunkOutput, SpaceJob};
use tracing::{info, warn};

use crate::error::CoreError;
use crate::limits::{output_bytes, Limits, Usage};
use crate::records::{Listing, Op};
use crate::scheduler::{ChunkRecord, Completion, JobId, LeaseId, Millis};
use crate::state::{Core, SlotPart};
use crate::views::{Ack, AckKind};

/// A report after decoding and verification, ready to be applied under the lock.
pub enum Checked {
    Rejected(LeaseId, String),
    /// Over a configured limit: refused like a failed verification (the attempt counts, the chunk goes back).
    OverLimit {
        lease: LeaseId,
        job: JobId,
        chunk: u64,
        message: String,
    },
    Ready {
        lease: LeaseId,
        job: JobId,
        chunk: u64,
        /// The generation of the slot's part the result was computed in, and the one it was verified against.
        generation: (u32, u32),
        digest: String,
        output: ChunkOutput,
        verified: Result<(), sweep_space::SpaceError>,
    },
}

/// Where the core asks for a done chunk's digest once its result has left the outbox: the shell's store
/// implements it, tests a map. A question the core asks, not a handle it keeps, so that the core stays a value
/// that does no I/O of its own; the answer is needed only for a duplicate report of a chunk already written.
pub trait StoredDigests {
    type Error: std::fmt::Display;

    /// The digest of chunk `chunk` of `job` as stored with its `Done` record; `None` if it is not done there.
    fn done_digest(&self, job: JobId, chunk: u64) -> Result<Option<String>, Self::Error>;
}

/// No chunk stored: for a core whose every result is still in its outbox (tests, tools that never commit).
impl StoredDigests for () {
    type Error = std::convert::Infallible;

    fn done_digest(&self, _: JobId, _: u64) -> Result<Option<String>, Self::Error> {
        Ok(None)
    }
}

/// What a report is checked against: its job, read under the lock, checked outside it.
pub struct ReportTarget {
    pub job: SpaceJob,
    pub n_chunks: u64,
    /// What the reported slot searches.
    pub part: SlotPart,
    /// The job keeps counts only: lists are dropped (after they are verified, if a worker sent one anyway).
    pub counts_only: bool,
}

impl Checked {
    /// Checks one decoded report against the per-report limit and the space's verifier; `target` is the job
    /// it names, `None` if there is no such job.
    pub fn new(
        limits: &Limits,
        lease: LeaseId,
        job_id: JobId,
        (chunk, generation): (u64, u32),
        output: Result<ChunkOutput, String>,
        target: Option<&ReportTarget>,
    ) -> Checked {
        let mut output = match output {
            Ok(o) => o,
            Err(e) => return Checked::Rejected(lease, e),
        };
        let Some(target) = target else {
            return Checked::Rejected(lease, format!("no job {job_id}"));
        };
        let (job, n_chunks) = (&target.job, target.n_chunks);
        if let Err(message) = limits.check_report(output.solutions.len()) {
            return Checked::OverLimit {
                lease,
                job: job_id,
                chunk,
                message,
            };
        }
        let at = ChunkId::new(n_chunks, target.part.chunk);
        let listed = !(target.counts_only && output.solutions.is_empty());
        let verified = match &target.part.part {
            Some(part) => job.verify_part(at, part, &output, listed),
            None if listed => job.verify(at, &output),
            None => job.verify_counts(at, &output),
        };
        if target.counts_only {
            // Dropped before the digest: workers that listed and workers that did not must agree.
            output.solutions = Vec::new();
        }
        Checked::Ready {
            lease,
            job: job_id,
            chunk,
            generation: (generation, target.part.generation),
            digest: hex::encode(output.digest()),
            output,
            verified,
        }
    }

    /// What the report says it found (for the metrics): nodes, and whether it failed verification.
    pub fn nodes_and_failed(&self) -> (u64, bool) {
        match self {
            Checked::Ready {
                output, verified, ..
            } => (output.nodes, verified.is_err()),
            _ => (0, false),
        }
    }
}

impl Core {
    /// What a report for slot `slot` of `job` is checked against (outside the lock).
    pub fn report_target(&self, job: JobId, slot: u64) -> Option<ReportTarget> {
        self.jobs.get(&job).map(|e| ReportTarget {
            job: e.job.clone(),
            n_chunks: e.record.n_chunks,
            part: e.slot_part(slot),
            counts_only: e.record.listing.counts_only(),
        })
    }

    /// Applies one checked report from `worker`. `stored` gives a done chunk's digest, for a duplicate whose
    /// first result is no longer in the outbox.
    pub fn apply_report(
        &mut self,
        worker: &str,
        checked: Checked,
        stored: &impl StoredDigests,
        now: Millis,
    ) -> Result<Ack, CoreError> {
        // The lease this report ends is charged its real time, up to now.
        self.sched.advance(now);
        let (lease, job_id, chunk, mut digest, mut output, verified) = match checked {
            Checked::Rejected(lease, message) => {
                return Ok(Ack {
                    lease,
                    kind: AckKind::Rejected,
                    message,
                })
            }
            Checked::OverLimit {
                lease,
                job,
                chunk,
                message,
            } => return self.refuse_over_limit(worker, lease, (job, chunk), message, now),
            Checked::Ready {
                lease,
                job,
                chunk,
                generation,
                digest,
                output,
                verified,
            } => {
                // The part may have been split since the result was verified (by another lease of the slot).
                let current = self.jobs.get(&job).map(|e| e.slot_part(chunk).generation);
                if generation.0 != generation.1 || current.is_some_and(|g| g != generation.0) {
                    return Ok(Ack {
                        lease,
                        kind: AckKind::Rejected,
                        message: format!(
                            "the result of slot {chunk} of job {job} was computed in generation {} of its \
                             part, which is in generation {}: it covers work given away by a split",
                            generation.0,
                            current.unwrap_or(generation.1)
                        ),
                    });
                }
                (lease, job, chunk, digest, output, verified)
            }
        };
        self.check_writable()?;
        self.touch_worker(worker, now);
        if let Err(e) = verified {
            let banned = self.sched.reject_result(job_id, chunk, lease, worker);
            warn!(worker, job = job_id, chunk = chunk, error = %e, banned, "result failed verification");
            self.last_errors.insert((job_id, chunk), e.to_string());
            self.stage_dirty(now);
            return Ok(Ack {
                lease,
                kind: AckKind::Rejected,
                message: e.to_string(),
            });
        }
        // The per-job caps, checked under the lock so that concurrent reports cannot overshoot them together.
        let mut add = Usage {
            solutions: output.solutions.len() as u64,
            bytes: output_bytes(&output),
        };
        let used = self.usage.get(&job_id).copied().unwrap_or_default();
        if let Err(message) = self.limits.check_job(job_id, used, add) {
            // A list too long to store is not a reason to lose the counts: the job keeps counts only from here
            // on (the answer says so), and this verified result is stored without its list.
            let without_list = Usage {
                solutions: 0,
                bytes: output.artifact.len() as u64,
            };
            let stoppable = !output.solutions.is_empty()
                && self.limits.check_job(job_id, used, without_list).is_ok();
            match self.jobs.get_mut(&job_id) {
                Some(e) if stoppable && e.record.listing == Listing::All => {
                    warn!(job = job_id, chunk, %message, "the job's list of solutions is stopped; it keeps counts only");
                    e.record.listing = Listing::Stopped;
                    // The lists accepted so far stay stored; the answer is read from the store from now on.
                    e.merged = None;
                    self.pending.push(Op::job(e.record.clone()));
                    output.solutions = Vec::new();
                    digest = hex::encode(output.digest());
                    add = without_list;
                }
                _ => return self.refuse_over_limit(worker, lease, (job_id, chunk), message, now),
            }
        }
        let outcome = self
            .sched
            .complete_vote(job_id, chunk, lease, worker, &digest);
        self.progress.remove(&lease);
        let (kind, message) = match outcome {
            Completion::Voted {
                agreeing,
                needed,
                disagreement,
                poisoned,
            } => {
                if disagreement {
                    warn!(
                        worker,
                        job = job_id,
                        chunk,
                        "replicated results disagree; the chunk runs again"
                    );
                }
                if poisoned {
                    self.last_errors.insert(
                        (job_id, chunk),
                        "replicated results kept disagreeing".into(),
                    );
                }
                (
                    AckKind::Voted,
                    format!("vote recorded: {agreeing} of {needed} agreeing results"),
                )
            }
            Completion::Accepted { outvoted, .. } => {
                for w in &outvoted {
                    warn!(worker = %w, job = job_id, chunk, banned = self.sched.is_banned(w), "worker outvoted: its result disagreed with the quorum");
                }
                let Some(entry) = self.jobs.get_mut(&job_id) else {
                    return Ok(Ack {
                        lease,
                        kind: AckKind::Rejected,
                        message: format!("no job {job_id}"),
                    });
                };
                entry.tally.add(&output);
                if let Some(m) = &mut entry.merged {
                    m.add(&output);
                }
                let part = entry.slot_part(chunk);
                if let Some(est) = &mut entry.estimates {
                    est.part_done(part.chunk, part.weight());
                }
                entry.slot_done(chunk);
                let tally = entry.tally.clone();
                let usage = self.usage.entry(job_id).or_default();
                usage.solutions += add.solutions;
                usage.bytes += add.bytes;
                self.pending.push(Op::Chunk(
                    job_id,
                    chunk,
                    ChunkRecord::Done {
                        digest,
                        worker: worker.to_string(),
                    },
                ));
                self.pending.push(Op::Output(job_id, chunk, output));
                if self.checkpoints.remove(&(job_id, chunk)).is_some() {
                    self.pending.push(Op::Checkpoint(job_id, chunk, None));
                }
                // The tally right after this result: a group commit may be split after it (see
                // `store::split_commit`), and every part must carry a tally that sums exactly its done chunks.
                self.pending.push(Op::Tally(job_id, tally));
                // Written once per batch, not per result (see `take_batch`): it only bounds the job's output.
                self.usage_dirty.insert(job_id);
                if let Some(w) = self.workers.get_mut(worker) {
                    w.chunks_done += 1;
                }
                (AckKind::Accepted, String::new())
            }
            Completion::Duplicate => {
                let stored = match self.pending_digest(job_id, chunk) {
                    Some(d) => Some(d),
                    None => stored
                        .done_digest(job_id, chunk)
                        .map_err(|e| CoreError::Store(e.to_string()))?,
                };
                let matches = stored.as_deref() == Some(digest.as_str());
                if let Some(e) = self.jobs.get_mut(&job_id) {
                    e.record.duplicates += 1;
                    if !matches {
                        e.record.digest_mismatches += 1;
                    }
                    let rec = e.record.clone();
                    self.pending.push(Op::job(rec));
                }
                if matches {
                    info!(
                        worker,
                        job = job_id,
                        chunk = chunk,
                        "duplicate result, digest matches; not counted"
                    );
                    (
                        AckKind::Duplicate,
                        "chunk already done; digest matches".to_string(),
                    )
                } else {
                    warn!(
                        worker,
                        job = job_id,
                        chunk = chunk,
                        "duplicate result with a DIFFERENT digest; not counted"
                    );
                    (
                        AckKind::Duplicate,
                        "chunk already done; digest MISMATCH (logged)".to_string(),
                    )
                }
            }
            Completion::Rejected(msg) => (AckKind::Rejected, msg),
        };
        self.stage_dirty(now);
        Ok(Ack {
            lease,
            kind,
            message,
        })
    }

    /// A report over a limit: the attempt counts and the chunk goes back, with the limit as its last error.
    fn refuse_over_limit(
        &mut self,
        worker: &str,
        lease: LeaseId,
        (job, chunk): (JobId, u64),
        message: String,
        now: Millis,
    ) -> Result<Ack, CoreError> {
        self.check_writable()?;
        warn!(worker, job, chunk, error = %message, "report refused: over a limit");
        if self.sched.lease_job_chunk(lease) == Some((job, chunk)) {
            self.last_errors.insert((job, chunk), message.clone());
            self.sched.fail(lease, false);
            self.stage_dirty(now);
        }
        Ok(Ack {
            lease,
            kind: AckKind::Rejected,
            message,
        })
    }

    /// The digest staged for a done chunk in the outbox, if its batch is not written yet.
    fn pending_digest(&self, job: JobId, chunk: u64) -> Option<String> {
        self.pending.iter().rev().find_map(|op| match op {
            Op::Chunk(j, c, ChunkRecord::Done { digest, .. }) if *j == job && *c == chunk => {
                Some(digest.clone())
            }
            _ => None,
        })
    }
}
