//! sweep's coordinator: it partitions jobs into chunks, leases them to workers, and keeps every job's progress in
//! a sled store so that a killed coordinator resumes exactly where it stopped.
//!
//! - [`scheduler`]: the lease/chunk state machine, free of I/O and driven with explicit time.
//! - [`store`]: durable records behind a key-value trait (sled, or memory for tests), artifacts in checked files.
//! - [`inputs`]: a job's input DAG (the jobs whose artifacts it needs, recursively), shared by submit and
//!   `sweep solve`.
//! - [`fsck`]: checks a store and repairs it from its chunk records (`sweep store check|repair`).
//! - [`auth`]: bearer tokens (worker and admin roles) checked in front of both services, and TLS settings.
//! - [`limits`]: what one client may make the coordinator hold or store.
//! - [`core`]: the domain core: jobs, scheduler, tallies, input-DAG holds, votes and workers in one
//!   synchronous type without I/O; it decides and leaves the writes in an outbox.
//! - [`coordinator`]: the shell around the core: one lock, group commit ([`group_commit`]: every acknowledgement
//!   waits until its writes are flushed), the background tasks, and the async methods the adapters call.
//! - [`grpc`]: the gRPC adapters (`Work` for workers, `Jobs` for people), the only code that sees wire types;
//!   [`server`]: `serve()` and shutdown.
//! - [`http`]: the read-only web dashboard and `/metrics` (`--http ADDR`); [`metrics`]: the event counters and
//!   the RPC latency layer they export.
//!
//! Architecture invariants: only the coordinator writes to the store; a chunk's result is committed exactly once
//! (later reports of a done chunk are compared by digest and never counted); every reported result is
//! re-verified with the space's verifier before it is stored.

pub mod auth;
pub mod coordinator;
pub mod core;
pub mod fsck;
pub mod group_commit;
pub mod grpc;
pub mod http;
pub use sweep_space::inputs;
pub mod limits;
pub mod metrics;
pub mod scheduler;
pub mod server;
pub mod store;

pub use auth::ServeSecurity;
pub use coordinator::{Coordinator, CoordinatorConfig, ServeError};
pub use server::{in_process, serve};
