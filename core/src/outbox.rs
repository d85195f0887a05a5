//! The outbox: how a decision becomes writes. Methods change memory and push the [`Op`]s their decision needs;
//! what the scheduler changed is staged here too (`stage_dirty`), so every write of one decision lands in the
//! same batch. The shell takes the outbox for one group commit at a time (`take_batch`) and waits for that
//! batch's sequence number before it answers; once a write failed, the core accepts no more changes.

use tracing::{info, warn};

use crate::error::CoreError;
use crate::records::Op;
use crate::scheduler::{ChunkRecord, JobId, JobState, Millis};
use crate::state::Core;

impl Core {
    /// The sequence number of the batch now being filled: a request that staged writes waits for it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// How many writes the outbox holds.
    pub fn outbox_len(&self) -> usize {
        self.pending.len()
    }

    /// Takes the outbox for one group commit: the writes and the sequence number they complete.
    pub fn take_batch(&mut self) -> (Vec<Op>, u64) {
        // Usage bounds a job's output; a batch that a crash cuts short may leave it a few results behind,
        // which only lets the job store that much more. Once per batch keeps it off every result's path.
        for job in std::mem::take(&mut self.usage_dirty) {
            if let Some(u) = self.usage.get(&job) {
                self.pending.push(Op::Usage(job, *u));
            }
        }
        let seq = self.seq;
        self.seq += 1;
        (std::mem::take(&mut self.pending), seq)
    }

    /// Why the store failed, once it has.
    pub fn store_failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The store failed: from now on the core accepts no changes (memory may be ahead of disk).
    pub fn note_store_failure(&mut self, why: String) {
        if self.failed.is_none() {
            warn!(error = %why, "store write failed; this coordinator refuses changes until it is opened again (a restart, or a member's next term as leader)");
            self.failed = Some(why);
        }
    }

    pub fn check_writable(&self) -> Result<(), CoreError> {
        match &self.failed {
            Some(e) => Err(CoreError::StoreFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// How many times some job changed state since the core was opened: a reader that saw another number
    /// has something new to show.
    pub fn job_changes(&self) -> u64 {
        self.job_changes
    }

    /// Moves what the scheduler changed into the outbox, and cancels the readers of inputs that ended without
    /// an artifact (and theirs, round after round).
    pub(crate) fn stage_dirty(&mut self, now: Millis) {
        self.maybe_stage_identities(now);
        loop {
            let ended = self.stage_dirty_once(now);
            if !self.cancel_readers_of(&ended) {
                break;
            }
        }
    }

    /// A job whose input ended without a complete artifact (cancelled, or done with poisoned chunks) would wait
    /// for it for ever: it is cancelled, with a warning naming the input. A submit of the same job later creates
    /// what has to run again (neither kind of input is reused). True if any job was cancelled.
    pub(crate) fn cancel_readers_of(&mut self, ended: &[JobId]) -> bool {
        let mut any = false;
        for &input in ended {
            let readers: Vec<JobId> = self
                .jobs
                .values()
                .filter(|e| e.record.input_jobs.contains(&input))
                .map(|e| e.record.id)
                .collect();
            for reader in readers {
                let unfinished = self
                    .sched
                    .job_state(reader)
                    .is_some_and(|s| !s.is_finished());
                if unfinished && self.sched.cancel(reader).is_ok() {
                    let why = self.sched.job_state(input).map_or("gone", JobState::as_str);
                    warn!(
                        job = reader,
                        input,
                        state = why,
                        "job cancelled: its input ended without a complete artifact"
                    );
                    any = true;
                }
            }
        }
        any
    }

    /// One pass of [`Core::stage_dirty`]; returns the jobs that just ended without a complete artifact.
    fn stage_dirty_once(&mut self, now: Millis) -> Vec<JobId> {
        let mut ended = Vec::new();
        let dirty = self.sched.take_dirty();
        for (job, chunk) in dirty.chunks {
            if let Some(mut rec) = self.sched.chunk_record(job, chunk) {
                if let ChunkRecord::Poisoned { last_error, .. } = &mut rec {
                    *last_error = self
                        .last_errors
                        .get(&(job, chunk))
                        .cloned()
                        .unwrap_or_else(|| "lease expired".into());
                }
                self.pending.push(Op::Chunk(job, chunk, rec));
            }
        }
        for (job, chunk) in dirty.votes {
            let votes = self.sched.votes(job, chunk);
            self.pending.push(Op::Votes(job, chunk, votes));
        }
        let mut finished_now = false;
        for job in dirty.jobs {
            let Some(state) = self.sched.job_state(job) else {
                continue;
            };
            self.job_changes += 1;
            if let Some(e) = self.jobs.get_mut(&job) {
                e.record.state = state;
                if state.is_finished() {
                    // The real size is known now; the estimates only held memory.
                    e.estimates = None;
                }
                if state.is_finished() && e.record.finished_ms == 0 {
                    e.record.finished_ms = now.max(1);
                    info!(job, state = state.as_str(), "job finished");
                    finished_now = true;
                    if state == JobState::Done {
                        self.to_merge.push(job);
                    } else {
                        ended.push(job);
                    }
                }
                self.pending.push(Op::job(e.record.clone()));
            }
        }
        if finished_now {
            self.bound_finished_merges();
        }
        let next_lease = self.sched.next_lease_id();
        if next_lease != self.persisted_next_lease {
            self.persisted_next_lease = next_lease;
            self.pending.push(Op::Meta("next_lease", next_lease));
        }
        ended
    }
}
