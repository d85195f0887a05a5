//! Group commit: the core's outbox is written as one atomic, flushed batch at a time, and every request waits
//! for the batch that holds its writes before it is answered. Many requests share one fsync, and an
//! acknowledgement never reports what a crash would take back.
//!
//! On a member of a replicated coordinator the batch is not written here: it is proposed as one consensus
//! entry ([`crate::store::encode_entry`]), and it is durable once the group committed it and this member
//! applied it to its own store (which the member's state machine does). So an acknowledgement means a
//! majority has the batch; and a leader that lost its place cannot commit, so it cannot acknowledge anything.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::core::{CoreError, Op};
use crate::replica::MemberHandle;
use crate::store::{split_commit, Store};

/// A write that takes longer than this is treated as failed: sled can hang in flush after the disk filled up.
const STORE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long writes nobody waits for (leases, heartbeats, expiries) may stay in memory before they are written,
/// unless a write somebody waits for comes first and takes them along. Each group commit is a sled flush that
/// wakes sled's I/O threads: committing every lease on its own cost `sweep run star --points 12 --count-only`
/// about two flushes per chunk (489 for 256 chunks). Losing such writes in a crash only re-issues a chunk.
pub const LAZY_COMMIT_DELAY: Duration = Duration::from_millis(50);

/// The last batch written, or why writing stopped.
struct Commit {
    seq: u64,
    error: Option<String>,
}

pub struct GroupCommit {
    store: Arc<Store>,
    /// Wakes the committer for writes nobody waits for: it commits within [`LAZY_COMMIT_DELAY`].
    kick: Notify,
    /// Wakes the committer at once: a request staged writes and waits for them.
    urgent: Notify,
    /// [`LAZY_COMMIT_DELAY`], but for tests.
    lazy_delay: Duration,
    committed: watch::Sender<Commit>,
    /// The member batches are proposed through, when the coordinator is replicated.
    replica: Option<MemberHandle>,
}

impl GroupCommit {
    pub fn new(store: Arc<Store>) -> GroupCommit {
        GroupCommit::with_replica(store, None)
    }

    /// Group commit through the consensus group `replica` leads: `store` is this member's, which its state
    /// machine writes (see the module doc). `None`: written to `store` directly.
    pub fn with_replica(store: Arc<Store>, replica: Option<MemberHandle>) -> GroupCommit {
        GroupCommit {
            store,
            kick: Notify::new(),
            urgent: Notify::new(),
            lazy_delay: LAZY_COMMIT_DELAY,
            committed: watch::channel(Commit {
                seq: 0,
                error: None,
            })
            .0,
            replica,
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Asks for a commit soon, without waiting for it (leases and heartbeats: see the coordinator).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Resolves when a commit is due: at once when somebody waits for one, [`LAZY_COMMIT_DELAY`] after a
    /// [`GroupCommit::kick`] otherwise (or sooner, when somebody starts waiting meanwhile).
    pub async fn kicked(&self) {
        tokio::select! {
            _ = self.urgent.notified() => {}
            _ = self.kick.notified() => {
                tokio::select! {
                    _ = self.urgent.notified() => {}
                    _ = tokio::time::sleep(self.lazy_delay) => {}
                }
            }
        }
    }

    /// Waits until the batch with sequence number `seq` is durable.
    pub async fn durable(&self, seq: u64) -> Result<(), CoreError> {
        let mut rx = self.committed.subscribe();
        self.urgent.notify_one();
        let state = rx
            .wait_for(|c| c.seq >= seq || c.error.is_some())
            .await
            .map_err(|_| CoreError::ShuttingDown)?;
        match &state.error {
            Some(e) => Err(CoreError::StoreFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// Writes one batch as one atomic, flushed write. Once a write has failed (`failed`), nothing more is
    /// written: memory is ahead of the store. Returns why this batch is not durable, if it is not.
    pub async fn write(&self, ops: Vec<Op>, failed: Option<String>) -> Option<String> {
        if failed.is_some() {
            return failed;
        }
        if ops.is_empty() {
            return None;
        }
        if let Some(member) = &self.replica {
            return self.propose(member, ops).await;
        }
        let store = self.store.clone();
        let write = tokio::task::spawn_blocking(move || store.write_parts(split_commit(ops)));
        match tokio::time::timeout(STORE_WRITE_TIMEOUT, write).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(e)) => Some(format!("store writer crashed: {e}")),
            Err(_) => Some(format!(
                "a store write did not finish within {} s",
                STORE_WRITE_TIMEOUT.as_secs()
            )),
        }
    }

    /// Proposes one batch as a consensus entry and waits until this member applied it (so a majority has it).
    async fn propose(&self, member: &MemberHandle, ops: Vec<Op>) -> Option<String> {
        let store = self.store.clone();
        let entry =
            match tokio::task::spawn_blocking(move || store.proposed().encode(split_commit(ops)))
                .await
            {
                Ok(Ok(entry)) => entry,
                Ok(Err(e)) => return Some(e.to_string()),
                Err(e) => return Some(format!("encoding a batch crashed: {e}")),
            };
        let (bytes, started) = (entry.len(), std::time::Instant::now());
        // A leader deposed meanwhile (stopped, cut off, outvoted) cannot commit the entry in its term: it stops
        // waiting at once, so the member stops serving and follows the new leader instead of holding its
        // requests, and its tasks, until the timeout.
        let term = member.status().term;
        let mut status = member.watch();
        let deposed = status.wait_for(|s| !(s.is_leader && s.term == term));
        let proposed = tokio::select! {
            proposed = tokio::time::timeout(STORE_WRITE_TIMEOUT, member.propose(entry)) => proposed,
            watched = deposed => {
                return Some(match watched {
                    Ok(_) => format!(
                        "the replicated group did not commit a batch: this member stopped leading in term {term}"
                    ),
                    Err(_) => "the replicated group did not commit a batch: this member's consensus task stopped"
                        .to_string(),
                })
            }
        };
        match proposed {
            Ok(Ok(index)) => {
                tracing::debug!(
                    index,
                    bytes,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "batch committed"
                );
                None
            }
            Ok(Err(e)) => Some(format!("the replicated group did not commit a batch: {e}")),
            Err(_) => Some(format!(
                "the replicated group did not commit a batch within {} s",
                STORE_WRITE_TIMEOUT.as_secs()
            )),
        }
    }

    /// Resolves, with why, once a write has failed.
    pub async fn failed(&self) -> String {
        let mut rx = self.committed.subscribe();
        let why = match rx.wait_for(|c| c.error.is_some()).await {
            Ok(c) => c.error.clone(),
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            // The coordinator is being dropped: nothing fails any more.
            None => std::future::pending().await,
        }
    }

    /// Tells every waiter that batch `seq` is written, or why it is not (then every later wait fails too: an
    /// empty round must not report success and let `status` show unstored progress).
    pub fn publish(&self, seq: u64, error: Option<String>) {
        self.committed.send_replace(Commit { seq, error });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(lazy_delay: Duration) -> Arc<GroupCommit> {
        let mut c = GroupCommit::new(Arc::new(Store::in_memory()));
        c.lazy_delay = lazy_delay;
        Arc::new(c)
    }

    /// A kick alone (a lease) waits for the lazy delay; a request that waits for its writes takes it along at
    /// once, and is answered when the batch is published.
    #[tokio::test]
    async fn lazy_writes_wait_until_somebody_needs_them() {
        let c = commit(Duration::from_secs(3600));
        c.kick();
        let committer = tokio::spawn({
            let c = c.clone();
            async move { c.kicked().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !committer.is_finished(),
            "a lease alone was committed at once"
        );
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.durable(1).await }
        });
        tokio::time::timeout(Duration::from_secs(10), committer)
            .await
            .expect("a durable request did not wake the committer")
            .unwrap();
        c.publish(1, None);
        let answered = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        assert!(matches!(answered, Ok(Ok(Ok(())))), "{answered:?}");
    }

    #[tokio::test]
    async fn lazy_writes_are_committed_after_the_delay() {
        let c = commit(Duration::from_millis(10));
        c.kick();
        let due = tokio::time::timeout(Duration::from_secs(10), c.kicked()).await;
        assert!(due.is_ok(), "a kick was never committed");
    }
}
