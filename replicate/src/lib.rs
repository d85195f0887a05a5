//! sweep-replicate: the consensus layer of a replicated coordinator, on raft-rs.
//!
//! Where it sits: the coordinator's core decides, and leaves the writes its decisions imply in an outbox; a
//! single coordinator commits those batches straight to its store. With several members, the leader's batches
//! are instead proposed here (`Node::propose`), replicated to a majority of members' logs, and applied, in the
//! same order, by a `StateMachine` on every member (which writes them to that member's store). Only the leader
//! decides; followers only apply. This crate holds the log and the protocol, nothing of jobs or chunks: the
//! entries are opaque bytes, and it depends on no other sweep crate.
//!
//! Like the scheduler, it does no I/O of its own except its log: `Node` is driven by the caller (`tick`,
//! `step` with the bytes that arrived, `propose`, then `ready` for the messages to send as bytes), so the
//! transport (a gRPC service) and the clock live outside, and tests run a whole group with simulated time and
//! network, deterministically.
//!
//! - `store`: `LogStore`, raft's `Storage` in a sled tree (log, hard state, membership, latest snapshot).
//! - `node`: `Node`, `Config`, `StateMachine`, `Membership`, `Output`.
//! - `members`: `Members`, the members' addresses (raft knows ids only), kept in the store and in snapshots.
//! - `error`: `ReplicateError`.
//!
//! Invariants:
//! - nothing is acknowledged before it is durable: entries and hard state are flushed before the messages
//!   that promise them (votes, append responses) leave `ready`, and a leader counts its own entry only then;
//! - every member applies the same entries in the same order, each once (the state machine's `applied` says
//!   what it already has); an index is applied with one content on every member, ever;
//! - a proposal is committed if and only if an entry with its index and its term is applied; a deposed leader's
//!   uncommitted entries are replaced, never applied;
//! - bytes from the network are checked and decoded into errors, never panics; a panic inside raft poisons the
//!   node (`ReplicateError::Poisoned`) so that it is reopened from its store rather than trusted.

mod error;
mod members;
mod node;
mod state_machine;
mod store;

pub use error::ReplicateError;
pub use members::Members;
pub use node::{Applied, Config, Membership, Node, Outgoing, Output};
pub use state_machine::{SnapshotJob, StateMachine};
pub use store::LogStore;
