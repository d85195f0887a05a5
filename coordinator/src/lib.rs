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
//! - [`service`]: the gRPC services (`Work` for workers, `Jobs` for people) that drive the scheduler and
//!   persist what it decides, with group commit: every acknowledgement waits until its writes are flushed.
//! - [`http`]: the read-only web dashboard and `/metrics` (`--http ADDR`); [`metrics`]: the event counters and
//!   the RPC latency layer they export.
//!
//! Architecture invariants: only the coordinator writes to the store; a chunk's result is committed exactly once
//! (later reports of a done chunk are compared by digest and never counted); every reported result is
//! re-verified with the space's verifier before it is stored.

pub mod auth;
pub mod fsck;
pub mod http;
pub use sweep_space::inputs;
pub mod limits;
pub mod metrics;
pub mod scheduler;
mod service;
pub mod store;

pub use auth::ServeSecurity;
pub use service::{serve, Coordinator, CoordinatorConfig, ServeError};
