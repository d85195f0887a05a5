//! The gRPC adapters: the only code in the coordinator that sees generated `v1` types or `tonic::Status`.
//! Each handler decodes its request into domain values, calls one [`Coordinator`] method, and encodes the
//! answer; errors become a `Status` in one place ([`status`]). Files import downward: `status` and `convert` at
//! the bottom, the two services above them, and this facade on top. `replication` is the network side of a
//! replicated coordinator's member (`crate::replica`), beside them.

mod convert;
mod jobs;
pub mod replication;
mod status;
mod work;

use std::sync::Arc;

use crate::coordinator::Coordinator;

pub use jobs::JobsApi;
pub use status::status;
pub use work::WorkApi;

/// Both services over one coordinator.
pub fn services(coord: &Arc<Coordinator>) -> (WorkApi, JobsApi) {
    (WorkApi(coord.clone()), JobsApi(coord.clone()))
}
