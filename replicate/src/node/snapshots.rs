//! A member's snapshots: when one is due, taking it in place or on a thread of its own while the node goes on
//! voting and appending, and saving it into the log store, which compacts the log behind it. Apart from the
//! Ready protocol in the node, because it runs on its own schedule (every `snapshot_every` entries) and holds
//! the entries applied meanwhile back until the snapshot is saved.

use raft::eraftpb::{ConfState, Entry};

use super::{Node, Output};
use crate::error::ReplicateError;
use crate::state_machine::StateMachine;

/// A snapshot being written by a `SnapshotJob`: what it is of, and where its bytes will arrive.
pub(super) struct Snapshotting {
    index: u64,
    conf_state: ConfState,
    /// The stored snapshot's index when it started: the log is compacted up to there once it is saved.
    previous: u64,
    done: std::sync::mpsc::Receiver<Option<Vec<u8>>>,
}

impl<S: StateMachine> Node<S> {
    /// Every `snapshot_every` applied entries, and once a member was added: save the state machine's snapshot,
    /// and drop the log up to the previous snapshot, so that a follower a little behind still gets entries
    /// rather than a whole snapshot.
    pub(super) fn maybe_snapshot(&mut self) -> Result<(), ReplicateError> {
        let store = self.raw.store();
        let previous = store.snapshot_metadata().index;
        let due = self.snapshot_due && self.applied > previous;
        if !due && self.applied < previous + self.snapshot_every {
            return Ok(());
        }
        if self.snapshotting.is_some() || self.applied < self.retry_from {
            return Ok(());
        }
        self.snapshot_due = false;
        let Some(job) = self.sm.snapshot_job() else {
            let data = self.sm.snapshot();
            return self.save_snapshot(self.applied, self.conf_state.clone(), previous, data);
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let _ = tx.send(job());
            })
            .map_err(|e| ReplicateError::StateMachine(format!("cannot start a snapshot: {e}")))?;
        self.snapshotting = Some(Snapshotting {
            index: self.applied,
            conf_state: self.conf_state.clone(),
            previous,
            done: rx,
        });
        Ok(())
    }

    pub(super) fn save_snapshot(
        &mut self,
        index: u64,
        conf_state: ConfState,
        previous: u64,
        data: Vec<u8>,
    ) -> Result<(), ReplicateError> {
        let store = self.raw.mut_store();
        store.save_snapshot(index, &conf_state, data.clone())?;
        store.compact(previous + 1)?;
        self.sm.snapshot_stored(&data);
        Ok(())
    }

    /// Saves the snapshot being written off this thread once it is done (`wait`: waits until it is), then
    /// applies the entries that waited for it.
    pub(super) fn poll_snapshot(
        &mut self,
        wait: bool,
        out: &mut Output,
    ) -> Result<(), ReplicateError> {
        let Some(pending) = &self.snapshotting else {
            return Ok(());
        };
        // `None`: the thread ended without sending (it panicked).
        let data = if wait {
            pending.done.recv().ok()
        } else {
            match pending.done.try_recv() {
                Ok(d) => Some(d),
                Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(()),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
            }
        };
        let Some(pending) = self.snapshotting.take() else {
            return Ok(());
        };
        match data {
            Some(Some(data)) => {
                // Nothing was applied meanwhile, so the members recorded now are those as of its index.
                self.save_snapshot(pending.index, pending.conf_state, pending.previous, data)?
            }
            // It failed and said why: tried again a little later rather than at every call.
            Some(None) => {
                self.retry_from = self.applied + (self.snapshot_every / 10).max(1);
                self.snapshot_due = true;
            }
            None => {
                return Err(ReplicateError::StateMachine(
                    "the thread writing a snapshot stopped without one".into(),
                ))
            }
        }
        let deferred: Vec<Entry> = self.deferred.drain(..).collect();
        self.apply(deferred, out)?;
        self.check_state_machine()
    }
}
