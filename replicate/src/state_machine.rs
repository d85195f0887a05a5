//! The contract between the replicated log and what it drives: a state machine that applies committed entries
//! in order and saves and restores snapshots. Its own file because both the node and its snapshot handling
//! speak it, and a user of the crate implements it without reading the node.

/// What the replicated log drives on every member: committed entries in log order, each exactly once, and
/// snapshots to save and restore.
pub trait StateMachine {
    /// Applies the committed entry at `index`. Called with increasing indices; a gap means a snapshot was
    /// restored in between.
    fn apply(&mut self, index: u64, data: &[u8]);
    /// The whole state, as `restore` takes it back (including whatever `applied` needs).
    fn snapshot(&self) -> Vec<u8>;
    /// A job that takes the snapshot off the node's thread, for a state whose snapshot takes long to write
    /// (`None`, the default: `snapshot` is taken in place). The node applies nothing until the job has
    /// returned, so the job sees the state as it is now, while the node goes on voting, heartbeating and
    /// appending; the job returns `None` when it failed (the node tries again later).
    fn snapshot_job(&self) -> Option<SnapshotJob> {
        None
    }
    /// Replaces the whole state with a snapshot's bytes (from `snapshot` on some member, or the bytes given to
    /// `LogStore::bootstrap`).
    fn restore(&mut self, data: &[u8]);
    /// Whether `restore` can take these snapshot bytes now. A state machine whose snapshot bytes only name a
    /// file, which the transport carries beside the message, says whether that file has arrived; a snapshot
    /// message it cannot take is dropped as if the network had lost it, and the leader sends it again.
    fn has_snapshot(&self, _data: &[u8]) -> bool {
        true
    }
    /// The snapshot with these bytes is now the member's stored one (taken here, or installed from the
    /// leader): whatever older snapshots the state machine keeps outside the log may go.
    fn snapshot_stored(&mut self, _data: &[u8]) {}
    /// The index of the last entry applied (0: none). A durable state machine returns what it has kept, and
    /// the node then does not apply those entries again; one kept in memory returns 0 after a restart and is
    /// rebuilt from the stored snapshot and the log.
    fn applied(&self) -> u64;
    /// Why the state machine can apply nothing more (its disk failed, an entry it cannot read), once that is
    /// so: the node then stops (`ReplicateError::StateMachine`) rather than acknowledge entries it cannot apply.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// A snapshot taken off the node's thread (see `StateMachine::snapshot_job`).
pub type SnapshotJob = Box<dyn FnOnce() -> Option<Vec<u8>> + Send>;
