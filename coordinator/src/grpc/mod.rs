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
use crate::member::Leadership;

pub use jobs::JobsApi;
pub use status::status;
pub use work::WorkApi;

/// What the services call: one coordinator, or whichever this member of a replicated coordinator runs while
/// it leads (the others answer with the leader's address, [`sweep_proto::not_leader`]).
#[derive(Clone)]
pub enum Backend {
    Single(Arc<Coordinator>),
    Member(Arc<Leadership>),
}

impl Backend {
    /// The coordinator to call for a worker's `request`, with the term to grant leases in (0 on a single
    /// coordinator), or the not-leader answer: also when the request carries a higher term than this member
    /// leads in (`sweep_proto::TERM_METADATA`), since the worker has then seen a newer leader and this one is
    /// deposed, whether it knows yet or not.
    pub(crate) fn fenced<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> Result<(Arc<Coordinator>, u64), tonic::Status> {
        match self {
            Backend::Single(c) => Ok((c.clone(), 0)),
            Backend::Member(m) => {
                let not_leader =
                    |n: crate::member::NotServing| sweep_proto::not_leader(n.leader_url.as_deref());
                let (c, term) = m.coordinator_in_term().map_err(not_leader)?;
                let seen = sweep_proto::term_of(request);
                if seen > term {
                    tracing::info!(
                        term,
                        seen,
                        "a worker has seen a newer leader: not taking its call"
                    );
                    return Err(sweep_proto::not_leader(None));
                }
                Ok((c, term))
            }
        }
    }

    /// The coordinator to call now, or the not-leader answer.
    pub(crate) fn coord(&self) -> Result<Arc<Coordinator>, tonic::Status> {
        match self {
            Backend::Single(c) => Ok(c.clone()),
            Backend::Member(m) => m
                .coordinator()
                .map_err(|n| sweep_proto::not_leader(n.leader_url.as_deref())),
        }
    }
}

/// Both services over `backend`.
pub fn services(backend: &Backend) -> (WorkApi, JobsApi) {
    (WorkApi(backend.clone()), JobsApi(backend.clone()))
}
