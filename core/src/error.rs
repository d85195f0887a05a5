//! The core's errors: what went wrong in domain terms. The gRPC adapter maps each to a `tonic::Status` and the
//! dashboard to an HTTP status, each in one place; nothing inside the core knows either. A store failure
//! arrives as [`CoreError::Store`]: the conversion is the store's (`store::error`), since the core sits below it.

use crate::scheduler::{JobId, SchedError};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("no job {0}")]
    UnknownJob(JobId),
    #[error("no worker named `{0}` has registered with this coordinator")]
    UnknownWorker(String),
    /// A request that can never succeed as sent: the message may quote the input (clipped).
    #[error("{0}")]
    Invalid(String),
    /// The job is in a state where this cannot be done (cancel a finished job, read an artifact not stored).
    #[error("{0}")]
    Precondition(String),
    /// The store failed earlier: memory may be ahead of disk, so nothing more is accepted until a restart.
    #[error("the coordinator's store failed ({0}); it accepts no changes until it is restarted")]
    StoreFailed(String),
    /// Reading or writing the store failed now.
    #[error("store: {0}")]
    Store(String),
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    /// The worker's standing is used up: too many of its results failed verification or lost a vote.
    #[error("worker {worker} is refused work: {bad_results} of its results failed verification or lost a replication vote")]
    WorkerRefused { worker: String, bad_results: u32 },
    /// Over a configured limit; the message names the flag that raises it.
    #[error("{0}")]
    OverLimit(String),
    #[error("{0}")]
    NotFound(String),
    /// The caller's token may not do this (a priority above the ceiling without an admin token, a user
    /// token on another identity's job).
    #[error("{0}")]
    NotAllowed(String),
    /// Something stored is gone or does not match: the store is damaged.
    #[error("{0}")]
    DataLoss(String),
    #[error("{0}")]
    Internal(String),
}

impl From<SchedError> for CoreError {
    fn from(e: SchedError) -> CoreError {
        match e {
            SchedError::UnknownJob(id) => CoreError::UnknownJob(id),
            SchedError::BadTransition { .. } => CoreError::Precondition(e.to_string()),
        }
    }
}

/// A refusal whose message may quote the input (a space name, a parameter value), clipped: gRPC sends the message
/// in a header, and one past the peer's header limit arrives as an opaque HTTP/2 protocol error instead.
pub fn invalid(e: impl std::fmt::Display) -> CoreError {
    const MAX: usize = 2000;
    let msg = e.to_string();
    if msg.len() <= MAX {
        return CoreError::Invalid(msg);
    }
    let cut: String = msg.chars().take(MAX).collect();
    CoreError::Invalid(format!("{cut}... ({} bytes in all)", msg.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_refusals_are_clipped_and_say_how_long_they_were() {
        let e = invalid("x".repeat(10_000));
        let CoreError::Invalid(msg) = e else {
            panic!("not Invalid: {e:?}");
        };
        assert!(msg.len() < 2100, "{}", msg.len());
        assert!(msg.ends_with("(10000 bytes in all)"), "{msg}");
        assert_eq!(invalid("short"), CoreError::Invalid("short".into()));
    }
}
