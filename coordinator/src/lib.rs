//! sweep's coordinator: it partitions jobs into chunks, leases them to workers, and keeps every job's progress in
//! a sled store so that a killed coordinator resumes exactly where it stopped.
//!
//! The domain core it is a shell around (jobs, the scheduler, tallies, input-DAG holds, votes and workers in one
//! synchronous type that decides and leaves its writes in an outbox) is the `sweep-core` crate, which depends on
//! no runtime, store or network: that it does no I/O is a fact of the dependency graph. It is re-exported as
//! [`core`] and [`scheduler`], so the modules here name it as they would a module of their own.
//!
//! Modules, from the bottom up; each imports only modules listed before it, so there is no import cycle:
//! - [`limits`]: the core's limits, and the bound on open `Watch` streams (a semaphore, so the shell's).
//! - [`store`]: durable records behind a key-value trait (sled, or memory for tests), artifacts in checked
//!   files; it persists the core's records and reads back the snapshot the core starts from.
//! - [`fsck`]: checks a store and repairs it from its chunk records (`sweep store check|repair`).
//! - [`metrics`]: the event counters and the RPC latency layer that `/metrics` exports.
//! - [`replica`]: a member of a replicated coordinator (the consensus node of `sweep-replicate` driven by a
//!   task; its network side is `grpc::replication`).
//! - [`group_commit`]: writes the core's outbox as atomic, flushed batches (or, on the leader of a replicated
//!   coordinator, proposes each as a consensus entry); every acknowledgement waits until its writes are
//!   flushed (committed by a majority).
//! - [`answers`]: a job's answer, merged artifact and stream of solutions, read from the store off the lock.
//! - [`auth`]: bearer tokens (worker and admin roles) checked in front of both services, and TLS settings.
//! - [`coordinator`]: the shell around the core: one lock, the background tasks, and the async methods the
//!   adapters call.
//! - [`member`]: a replicated coordinator's member as a server: it opens a coordinator while its member leads
//!   and closes it when a term ends.
//! - [`grpc`]: the gRPC adapters (`Work` for workers, `Jobs` for people, `Replication` between members), the
//!   only code that sees wire types;
//!   [`http`]: the read-only web dashboard and `/metrics` (`--http ADDR`); [`server`]: `serve()` and shutdown.
//! - [`start`]: the one way to start a coordinator, alone or as a member of a group, served or in process:
//!   [`start()`] takes [`Options`] and gives a [`Running`] coordinator that owns everything it started.
//! - [`inputs`]: a job's input DAG (the jobs whose artifacts it needs, recursively), shared by submit and
//!   `sweep solve`.
//!
//! Architecture invariants: only the coordinator writes to the store; a chunk's result is committed exactly once
//! (later reports of a done chunk are compared by digest and never counted); every reported result is
//! re-verified with the space's verifier before it is stored.

pub mod answers;
pub mod auth;
pub mod coordinator;
pub use sweep_core as core;
pub mod fsck;
pub mod group_commit;
pub mod grpc;
pub mod http;
pub use sweep_engine::inputs;
pub mod limits;
pub mod member;
pub mod metrics;
pub mod replica;
pub use sweep_core::scheduler;
pub mod server;
pub mod start;
pub mod store;

pub use auth::ServeSecurity;
pub use coordinator::{Coordinator, CoordinatorConfig, ServeError};
pub use server::{in_process, serve};
pub use start::{start, Options, Running, StartError};
