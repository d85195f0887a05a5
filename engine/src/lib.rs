//! sweep's engine pieces that need neither a network nor a store: what the coordinator and `sweep solve`
//! share, and the runner that `sweep solve` is.
//!
//! - [`inputs`]: a job's input DAG (the jobs whose merged artifacts it needs, recursively), walked the same way
//!   by the coordinator's submit and by the local runner, so both agree on what the DAG is and both refuse
//!   cycles and unbounded DAGs.
//! - [`local`]: a job run in this process on a rayon pool, chunk by chunk in plan order as workers take leases,
//!   merged with the same bounded merge the coordinator uses; and a DAG's inputs built here (or taken from
//!   wherever the caller keeps finished artifacts) before the job that reads them.
//!
//! Architecture invariant: no I/O, no async, no storage. The caller says where stored artifacts come from
//! and how progress is shown; the engine runs kernels and merges their outputs.

pub mod inputs;
pub mod local;
