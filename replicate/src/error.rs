//! What can go wrong in the consensus layer, as values: bad input from the network is an error here, never a
//! panic, and "not the leader" is an expected condition the caller acts on (it redirects the client).

/// An error of the consensus layer.
#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    /// Only the leader accepts proposals; `leader` is who the caller should send them to, if known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    /// A membership change is already in the log and not yet applied: raft allows one at a time.
    #[error("a membership change is still pending")]
    ConfChangePending,
    /// A membership change that cannot be made: an id in use or used before, an address in use, the last
    /// member removed, ...
    #[error("{0}")]
    BadMembership(String),
    /// Bytes from the network that are not a raft message.
    #[error("undecodable raft message: {0}")]
    Decode(#[source] protobuf::ProtobufError),
    /// A message that decodes but cannot come from a peer: addressed to someone else, from nobody or from
    /// ourselves, or of a type only the local node may generate.
    #[error("refused raft message: {0}")]
    BadMessage(String),
    /// A snapshot message whose state the state machine cannot take yet (its file has not arrived); dropped,
    /// as a lost message would be.
    #[error("snapshot {index} has not arrived beside its message")]
    SnapshotNotHere { index: u64 },
    /// A message we could not encode (protobuf's encoder fails only on sizes over 2 GiB).
    #[error("cannot encode raft message: {0}")]
    Encode(#[source] protobuf::ProtobufError),
    /// An error raft itself reported (a step from an unknown peer, an invalid configuration, ...).
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The sled tree holding the log failed.
    #[error("log store: {0}")]
    Store(#[from] sled::Error),
    /// The log store holds something this code did not write, or a request contradicts what it holds.
    #[error("log store is inconsistent: {0}")]
    Inconsistent(String),
    /// The state machine cannot apply committed entries any more; the member must stop and be repaired or
    /// replaced.
    #[error("the state machine failed: {0}")]
    StateMachine(String),
    /// raft panicked while handling a message or a tick; the node is not used again (it is `Poisoned`).
    #[error("raft panicked: {0}")]
    Panicked(String),
    /// An earlier call panicked inside raft, or the store failed while `ready` was persisting: the in-memory
    /// state cannot be trusted, so the node must be dropped and reopened from its store.
    #[error("the node is poisoned by an earlier failure; reopen it from its store")]
    Poisoned,
}
