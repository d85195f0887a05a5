//! The shell's background tasks, started by `serve`, by `start` without a listener, and by a member while it
//! leads: the committer (group commit of the core's outbox), the
//! expirer (leases nobody renewed, and pauses of the coordinator itself), the artifact merger and the chunk
//! estimator. Each loops until the server stops, takes the core's lock only for short synchronous sections, and
//! does its I/O and CPU work off the lock.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use super::{now_ms, Coordinator};
use crate::answers;
use crate::core::{estimate_chunks, CoreError};
use crate::scheduler::JobId;

/// How late the expirer's tick may come before the coordinator counts the time as a pause of its own (see
/// `Coordinator::expirer`): well above scheduling noise, well below a lease time.
const PAUSE_TOLERANCE_MS: u64 = 2_000;

/// A coordinator's background tasks (committer, expirer, merger, estimator), running until [`Tasks::stop`].
pub struct Tasks {
    stop: watch::Sender<bool>,
    merge_stop: watch::Sender<bool>,
    merger: tokio::task::JoinHandle<()>,
    others: Vec<tokio::task::JoinHandle<()>>,
}

impl Tasks {
    /// Starts the tasks of `coord`; must be called within a tokio runtime.
    pub fn start(coord: &Arc<Coordinator>) -> Tasks {
        let (stop, stop_rx) = watch::channel(false);
        // The merger stops first and finishes the merge it is in: a merge waits for a commit, so the committer
        // must outlive it (else `sweep run` could hang at exit waiting for a commit nobody makes).
        let (merge_stop, merge_stop_rx) = watch::channel(false);
        let merger = tokio::spawn(coord.clone().merger(merge_stop_rx));
        let others = vec![
            tokio::spawn(coord.clone().committer(stop_rx.clone())),
            tokio::spawn(coord.clone().expirer(stop_rx.clone())),
            tokio::spawn(coord.clone().estimator(stop_rx)),
        ];
        Tasks {
            stop,
            merge_stop,
            merger,
            others,
        }
    }

    /// Stops the tasks; the committer writes what is still queued before it ends.
    pub async fn stop(self) {
        let _ = self.merge_stop.send(true);
        let _ = self.merger.await;
        let _ = self.stop.send(true);
        for t in self.others {
            let _ = t.await;
        }
    }
}

impl Coordinator {
    /// One group commit: everything the core staged since the last one.
    async fn commit_once(&self) {
        let (ops, seq, failed) = {
            let mut core = self.lock();
            let (ops, seq) = core.take_batch();
            (ops, seq, core.store_failure().map(str::to_string))
        };
        let error = self.commit.write(ops, failed).await;
        if let Some(e) = &error {
            self.lock().note_store_failure(e.clone());
        }
        self.commit.publish(seq, error);
        if self.lock().has_work_to_merge() {
            self.merge_kick.notify_one();
        }
    }

    pub(crate) async fn committer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.commit.kicked() => self.commit_once().await,
                _ = stop.changed() => break,
            }
        }
        // Whatever was decided before the stop is still written.
        self.commit_once().await;
    }

    pub(crate) async fn expirer(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.cfg.expiry_interval);
        let every = self.cfg.expiry_interval.as_millis() as u64;
        let mut last = now_ms();
        let mut quiet_until = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            let now = now_ms();
            // A tick this late means the coordinator did not run (SIGSTOP, a suspended machine or VM) or the
            // clock jumped: workers could not renew their leases meanwhile, so the time is added to every
            // lease instead of expiring them all and starting their chunks again.
            let late = now.saturating_sub(last).saturating_sub(every);
            last = now;
            let expired = {
                let mut core = self.lock();
                if late > PAUSE_TOLERANCE_MS {
                    core.extend_leases(late, now);
                    // Every worker looks silent for the whole gap: each gets a lease time to be heard again,
                    // as its leases do, before it is counted lost.
                    quiet_until = now + core.lease_ttl_ms();
                }
                if now >= quiet_until {
                    self.metrics
                        .note_liveness(now, core.lease_ttl_ms(), core.last_seen());
                }
                core.expire(now)
            };
            if !expired.is_empty() {
                self.metrics.expired(&expired);
                self.commit.kick();
            }
        }
    }

    /// Merges the chunk artifacts of finished jobs into one stored artifact (replacing the chunk artifacts in
    /// the same batch), records its digest, and lets the jobs waiting for it run.
    pub(crate) async fn merger(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let todo = self.lock().take_to_merge();
            for id in todo {
                if let Err(e) = self.merge_one(id).await {
                    warn!(job = id, error = %e, "cannot merge the job's artifacts");
                }
            }
            tokio::select! {
                _ = self.merge_kick.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Computes the chunk estimates of jobs of unknown size (queued by the core when a job is created or loaded)
    /// on the blocking pool and hands them to the core, so that their views carry an expected size. Estimates
    /// are a pure function of the job: nothing is stored, and a restart computes them again.
    pub(crate) async fn estimator(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let todo = self.lock().take_to_estimate();
            for (id, job, n_chunks) in todo {
                let estimate = tokio::task::spawn_blocking(move || estimate_chunks(&job, n_chunks));
                // A shutdown does not wait for a big job's estimates: they are only ever a progress figure.
                let per_chunk = tokio::select! {
                    r = estimate => r,
                    _ = stop.changed() => return,
                };
                match per_chunk {
                    Ok(Some(per_chunk)) => self.lock().set_estimates(id, per_chunk),
                    Ok(None) => {}
                    Err(e) => warn!(job = id, error = %e, "estimating the job's chunks failed"),
                }
            }
            tokio::select! {
                _ = self.estimate_kick.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn merge_one(&self, id: JobId) -> Result<(), CoreError> {
        let Some((job, order)) = self.lock().job_and_order(id) else {
            return Ok(());
        };
        // Queued twice (a reader submitted while it was being merged): the chunk artifacts are gone by now, and
        // merging "nothing" again must not replace the stored artifact with an empty one.
        if self.lock().has_artifact(id) {
            return Ok(());
        }
        self.settle().await?;
        let store = self.store();
        let merged =
            tokio::task::spawn_blocking(move || answers::merged_artifact(&store, id, &job, &order))
                .await
                .map_err(|e| CoreError::Internal(format!("merge task: {e}")))??;
        // A job whose chunks produce no artifact needs none, unless another job reads it: that one waits for a
        // stored artifact, so it gets an empty one (the reader binds it like any other).
        let bytes = {
            let core = self.lock();
            match merged {
                Some(bytes) => bytes,
                None if core.is_read_by_others(id) && !core.has_artifact(id) => Vec::new(),
                None => return Ok(()),
            }
        };
        let digest = blake3::hash(&bytes).to_hex().to_string();
        let size = bytes.len();
        let bytes = Arc::new(bytes);
        let (merged, seq) = self.decide(|core| core.artifact_merged(id, digest.clone(), bytes));
        if !merged {
            return Ok(());
        }
        self.commit.durable(seq).await?;
        // Only now, with the artifact durable, may dependent jobs hand out chunks.
        self.lock().input_ready(id);
        self.work_ready.notify_waiters();
        info!(job = id, bytes = size, digest = %digest, "artifact merged and stored");
        Ok(())
    }
}
