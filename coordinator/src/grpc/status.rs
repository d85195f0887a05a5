//! The one mapping from the core's errors to gRPC status codes, apart so that both services use it and every
//! code is pinned by one test.

use tonic::Status;

use crate::core::CoreError;

/// The one mapping from the core's errors to gRPC status codes.
pub fn status(e: CoreError) -> Status {
    let msg = e.to_string();
    match e {
        CoreError::UnknownJob(_) | CoreError::UnknownWorker(_) | CoreError::NotFound(_) => {
            Status::not_found(msg)
        }
        CoreError::Invalid(_) => Status::invalid_argument(msg),
        CoreError::Precondition(_) => Status::failed_precondition(msg),
        CoreError::StoreFailed(_) | CoreError::Store(_) | CoreError::ShuttingDown => {
            Status::unavailable(msg)
        }
        CoreError::WorkerRefused { .. } | CoreError::NotAllowed(_) => {
            Status::permission_denied(msg)
        }
        CoreError::OverLimit(_) => Status::resource_exhausted(msg),
        CoreError::DataLoss(_) => Status::data_loss(msg),
        CoreError::Internal(_) => Status::internal(msg),
    }
}

/// A membership change that was not made (`AddMember`, `RemoveMember`).
pub fn change_status(e: crate::member::ChangeError) -> Status {
    use crate::member::ChangeError;
    match e {
        ChangeError::NotLeader(n) => sweep_proto::not_leader(n.leader_url.as_deref()),
        ChangeError::Pending => Status::aborted(e.to_string()),
        ChangeError::Refused(why) => Status::failed_precondition(why),
        ChangeError::Failed(why) => Status::unavailable(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_error_has_its_status_code() {
        use tonic::Code;
        let cases = [
            (CoreError::UnknownJob(3), Code::NotFound),
            (CoreError::UnknownWorker("w".into()), Code::NotFound),
            (CoreError::Invalid("x".into()), Code::InvalidArgument),
            (
                CoreError::Precondition("x".into()),
                Code::FailedPrecondition,
            ),
            (CoreError::StoreFailed("disk".into()), Code::Unavailable),
            (CoreError::ShuttingDown, Code::Unavailable),
            (
                CoreError::WorkerRefused {
                    worker: "w".into(),
                    bad_results: 3,
                },
                Code::PermissionDenied,
            ),
            (CoreError::NotAllowed("x".into()), Code::PermissionDenied),
            (CoreError::OverLimit("x".into()), Code::ResourceExhausted),
            (CoreError::DataLoss("x".into()), Code::DataLoss),
            (CoreError::Internal("x".into()), Code::Internal),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let s = status(e);
            assert_eq!(s.code(), code, "{text}");
            assert_eq!(s.message(), text);
        }
    }
}
