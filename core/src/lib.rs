//! sweep's coordinator core: the job table, the scheduler, tallies, input-DAG holds, replication votes, workers
//! and checkpoints, in one synchronous type with no I/O, no clock and no wire types. It is a crate of its own so
//! that the compiler keeps it so: its dependencies name no async runtime, no store and no network
//! (`tests/layout.rs` checks the manifest), and it must never grow one.
//!
//! Like the scheduler inside it (and raft-rs's `RawNode`), the core decides and the shell acts: every method
//! takes the time it should use, changes memory, and leaves the writes its decision needs in an outbox
//! ([`Core::take_batch`]), written in the core's own record types (`records`: the job record, the ops of a
//! batch, the snapshot it starts from). The store sits above the core and adapts to those types; what the core
//! needs from it, it is handed as values ([`Snapshot`]) or asks through a trait of its own ([`StoredDigests`]).
//! The shell (the `sweep-coordinator` crate) persists the outbox with group commit, answers a request only once
//! the batch holding its writes is durable, and turns the core's plain change counter ([`Core::job_changes`])
//! into wake-ups for its streams. That split is what lets the core be tested with simulated time, and lets the
//! gRPC handlers and the dashboard be thin adapters over the same methods.
//!
//! Modules import downward only, in this order from the bottom:
//! - [`scheduler`]: the lease/chunk state machine (chunk maps, the fair-share queue), driven with explicit time;
//! - [`limits`]: what one client may make the coordinator hold or store, as plain checks;
//! - `records`: what the core decides must be written, and the snapshot it starts from;
//! - `error`, `estimate`, `placement`, `views`: the core's error, the pure chunk-size estimates, which workers may
//!   take a job's chunks (and why none can), the values it shows;
//! - `state`: [`Core`] itself and its job table; every file above adds the methods of one concern to it;
//! - `outbox`: staging writes, sequence numbers, store failure, the change counter;
//! - `submit`: checking and planning a submit, then finding or creating its jobs;
//! - `shares`: identities' shares and decayed use (persisted every few seconds), the priority ceiling;
//! - `open`: rebuilding the core from a snapshot at start-up;
//! - `workers`, `leases`, `reports`: a worker's registration, its leases and heartbeats, its results;
//! - `pieces`: running chunks asked to split, and splits checked and recorded;
//! - `jobs`, `results`, `observe`: job control (and who may exercise it) and artifact merges, what answers are
//!   read from, the views.
//!
//! This file is only the facade: it re-exports what the coordinator may name, and nothing below imports it.
//! The core's own tests drive it through the real store, in `coordinator/tests/core.rs`.

mod error;
mod estimate;
mod jobs;
mod leases;
pub mod limits;
mod observe;
mod open;
mod outbox;
mod pieces;
mod placement;
mod records;
mod reports;
mod results;
pub mod scheduler;
mod shares;
mod state;
mod submit;
mod views;
mod workers;

pub use error::{invalid, CoreError};
pub use estimate::{estimate_chunks, expected_total, MAX_ESTIMATED_CHUNKS};
pub use jobs::Actor;
pub use leases::{Beat, LeaseProgress, MAX_FAILURE_BYTES, MAX_LEASE_REQUEST};
pub use open::{JobOf, OpenError};
pub use pieces::{SplitAnswer, SplitRequest, MAX_PIECES_PER_JOB};
pub use placement::Waiting;
pub use records::{IdentityRecord, JobRecord, Listing, Op, PartRecord, Snapshot};
pub use reports::{Checked, ReportTarget, StoredDigests};
pub use results::{ArtifactRef, ResultsInput, MAX_KEPT_MERGES, MAX_KEPT_RESULTS};
pub use shares::{check_priority, check_space_right, IDENTITY_SAVE_INTERVAL_MS};
pub use state::{Core, SlotOrder, SlotPart};
pub use submit::{
    check_share, parse_submit, plan_submit, JobOptions, Reuse, SubmitNode, SubmitSpec,
    MAX_CHUNKS_PER_JOB, MAX_CHUNK_HINT_MS, MAX_REPLICATE, MAX_SHARE,
};
pub use views::{
    Ack, AckKind, FailedAttempt, JobView, KeptAnswer, LeaseAnswer, LeaseView, Observation,
    PoisonedChunk, ResultsView, WorkerObservation, WorkerView,
};
pub use workers::Registration;
