//! Group commit: the core's outbox is written as one atomic, flushed batch at a time, and every request waits
//! for the batch that holds its writes before it is answered. Many requests share one fsync, and an
//! acknowledgement never reports what a crash would take back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::core::CoreError;
use crate::store::{Op, Store};

/// A write that takes longer than this is treated as failed: sled can hang in flush after the disk filled up.
const STORE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// The last batch written, or why writing stopped.
struct Commit {
    seq: u64,
    error: Option<String>,
}

pub struct GroupCommit {
    store: Arc<Store>,
    /// Wakes the committer: a request staged writes and waits for them.
    kick: Notify,
    committed: watch::Sender<Commit>,
}

impl GroupCommit {
    pub fn new(store: Arc<Store>) -> GroupCommit {
        GroupCommit {
            store,
            kick: Notify::new(),
            committed: watch::channel(Commit {
                seq: 0,
                error: None,
            })
            .0,
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Asks for a commit soon, without waiting for it (leases and heartbeats: see the coordinator).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Resolves when a commit was asked for.
    pub async fn kicked(&self) {
        self.kick.notified().await
    }

    /// Waits until the batch with sequence number `seq` is durable.
    pub async fn durable(&self, seq: u64) -> Result<(), CoreError> {
        let mut rx = self.committed.subscribe();
        self.kick.notify_one();
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
        let store = self.store.clone();
        let write =
            tokio::task::spawn_blocking(move || store.write_parts(crate::store::split_commit(ops)));
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

    /// Tells every waiter that batch `seq` is written, or why it is not (then every later wait fails too: an
    /// empty round must not report success and let `status` show unstored progress).
    pub fn publish(&self, seq: u64, error: Option<String>) {
        self.committed.send_replace(Commit { seq, error });
    }
}
