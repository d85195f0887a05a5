//! sweep's client side: everything that talks to a coordinator from outside it.
//!
//! - [`ClientSecurity`] and the connection code in `connect` build the channel: the URL, TLS and the token
//!   sent on every call (re-read when its file changes).
//! - [`Client`] makes the calls of the `Jobs` service (what `sweep submit`, `status`, `watch`, `results`, the
//!   job controls and `workers`/`drain` do). It returns the generated [`v1`] messages as they are: showing
//!   them is the caller's business.
//! - [`work_client`] gives a worker its `Work` service client (register, lease, heartbeat, fail, fetch
//!   artifact) and its [`ReportClient`] (complete, with reports already encoded). A worker retries those
//!   calls itself, so these clients connect lazily and never fail for a coordinator that is away.
//!
//! Every failure is a [`ClientError`], which tells apart what a caller acts on differently: settings that
//! cannot work, a coordinator that cannot be reached, a refused token, and any other answer.

mod connect;

use std::time::Duration;

use sweep_proto::v1::jobs_client::JobsClient;
use tonic::Status;

pub use connect::{
    endpoint, in_process, is_refusal, secure, token_interceptor, ClientSecurity, ConnectError,
    SecureChannel, TokenInterceptor,
};
pub use sweep_proto::v1;

/// The generated `Work` service client over a [`SecureChannel`]: what a worker calls.
pub type WorkClient = v1::work_client::WorkClient<SecureChannel>;

/// A worker's `Work.Complete` client for reports it encoded itself (see `EncodedCompleteRequest` in the proto).
pub type ReportClient = sweep_proto::CompleteClient<SecureChannel>;

/// How long [`Client::connect`] waits for the coordinator to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a call to the coordinator failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A bad URL, token file or TLS file: nothing was sent.
    #[error("{0}")]
    Settings(ConnectError),
    /// No connection could be made to the coordinator.
    #[error("cannot reach the coordinator at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The coordinator refused the token (missing, unknown, or a worker token on an admin call): sending the
    /// same token again cannot help.
    #[error("refused by the coordinator: {}", .0.message())]
    Refused(Status),
    /// Any other failed call: the coordinator's own error (a job it does not know, a bad request...), or a call
    /// lost on the way (see [`ClientError::is_unreachable`]).
    #[error("{}", call_text(.0))]
    Call(Status),
    /// The coordinator's reply breaks the protocol.
    #[error("{0}")]
    Reply(String),
}

/// Why [`Client::write_solutions`] stopped: the call, or writing what it received.
#[derive(Debug, thiserror::Error)]
pub enum SolutionsError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot write the solutions: {0}")]
    Write(#[from] std::io::Error),
}

/// A transport failure's status message names tonic's internals; people are told what it means.
fn call_text(s: &Status) -> String {
    if s.code() == tonic::Code::Unavailable && s.message().contains("transport") {
        "the coordinator is unreachable".to_string()
    } else {
        s.message().to_string()
    }
}

impl ClientError {
    /// The status the coordinator (or the transport) answered, if the failure was a call's.
    pub fn status(&self) -> Option<&Status> {
        match self {
            ClientError::Refused(s) | ClientError::Call(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the coordinator could not be reached: no connection, or a call that failed in transport or ran
    /// out of time. Trying again later may work.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Call(s) => matches!(
                s.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ),
            _ => false,
        }
    }
}

impl From<Status> for ClientError {
    fn from(s: Status) -> ClientError {
        if is_refusal(&s) {
            ClientError::Refused(s)
        } else {
            ClientError::Call(s)
        }
    }
}

impl From<ConnectError> for ClientError {
    fn from(e: ConnectError) -> ClientError {
        ClientError::Settings(e)
    }
}

/// The innermost cause: for a failed connection, the part that says what happened (refused, timed out...).
fn innermost(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text = s.to_string();
        cur = s.source();
    }
    text
}

/// A connection to a coordinator's `Jobs` service. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct Client {
    jobs: JobsClient<SecureChannel>,
}

impl Client {
    /// Connects to the coordinator at `url` now, so an unreachable one is reported before any call.
    pub async fn connect(url: &str, security: &ClientSecurity) -> Result<Client, ClientError> {
        let endpoint = endpoint(url, security)?.connect_timeout(CONNECT_TIMEOUT);
        // Read before connecting: a bad token file is reported even when the coordinator is away.
        let token = token_interceptor(security)?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientError::Unreachable {
                url: url.to_string(),
                reason: innermost(&e),
            })?;
        Ok(Client::over(secure(channel, token)))
    }

    /// A client of a coordinator running in this process (`sweep run`): its services called directly, with no
    /// socket in between.
    pub fn in_process(transport: sweep_proto::Transport) -> Client {
        Client::over(in_process(transport))
    }

    fn over(channel: SecureChannel) -> Client {
        Client {
            // Answers (results with every solution) may be far larger than tonic's default limit.
            jobs: JobsClient::new(channel).max_decoding_message_size(sweep_proto::MAX_RESULT_BYTES),
        }
    }

    pub async fn submit(
        &mut self,
        req: v1::SubmitRequest,
    ) -> Result<v1::SubmitResponse, ClientError> {
        Ok(self.jobs.submit(req).await?.into_inner())
    }

    /// Sends the packed files a job ships (`exec --ship`), stored by the coordinator under `digest`. They go
    /// in pieces small enough for any message limit; a coordinator that has them already keeps its copy.
    pub async fn ship(&mut self, digest: &str, packed: &[u8]) -> Result<(), ClientError> {
        const PIECE: usize = 1 << 20;
        let total = packed.len() as u64;
        let pieces: Vec<v1::ArtifactPiece> = packed
            .chunks(PIECE)
            .enumerate()
            .map(|(i, data)| v1::ArtifactPiece {
                offset: (i * PIECE) as u64,
                total,
                digest: digest.to_string(),
                data: data.to_vec(),
            })
            .collect();
        let resp = self
            .jobs
            .ship(tokio_stream::iter(pieces))
            .await?
            .into_inner();
        if resp.digest != digest {
            return Err(ClientError::Reply(format!(
                "the coordinator stored the shipped files under another digest ({}, expected {digest})",
                resp.digest
            )));
        }
        Ok(())
    }

    /// Every job, and how many workers are live.
    pub async fn list_jobs(&mut self) -> Result<v1::ListJobsResponse, ClientError> {
        Ok(self
            .jobs
            .list_jobs(v1::ListJobsRequest {})
            .await?
            .into_inner())
    }

    pub async fn job_status(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        Ok(self
            .jobs
            .job_status(v1::JobRequest { job_id: job })
            .await?
            .into_inner())
    }

    /// Progress snapshots every `interval_ms` of one job, or of every job for `job` 0.
    pub async fn watch(&mut self, job: u64, interval_ms: u64) -> Result<WatchStream, ClientError> {
        let stream = self
            .jobs
            .watch(v1::WatchRequest {
                job_id: job,
                interval_ms,
            })
            .await?
            .into_inner();
        Ok(WatchStream(stream))
    }

    /// Job `job`'s state and answer, in the forms asked for (a coordinator older than the choice sends both).
    pub async fn results(
        &mut self,
        job: u64,
        form: v1::AnswerForm,
    ) -> Result<v1::ResultsResponse, ClientError> {
        Ok(self
            .jobs
            .results(v1::ResultsRequest {
                job_id: job,
                form: form.into(),
            })
            .await?
            .into_inner())
    }

    /// Streams every solution job `job` stored, in chunk order, one per line into `out`; returns how many.
    /// Memory stays that of one piece however many there are. The coordinator refuses a job that keeps counts
    /// only, and says why.
    pub async fn write_solutions(
        &mut self,
        job: u64,
        out: &mut dyn std::io::Write,
    ) -> Result<u64, SolutionsError> {
        let mut stream = self
            .jobs
            .solutions(v1::JobRequest { job_id: job })
            .await
            .map_err(ClientError::from)?
            .into_inner();
        let mut written = 0u64;
        while let Some(piece) = stream.message().await.map_err(ClientError::from)? {
            for s in &piece.solutions {
                // One solution per line: a line break inside one would make two.
                if s.contains('\n') {
                    return Err(ClientError::Reply(format!(
                        "a solution of chunk {} holds a line break",
                        piece.chunk
                    ))
                    .into());
                }
                out.write_all(s.as_bytes())?;
                out.write_all(b"\n")?;
            }
            written += piece.solutions.len() as u64;
        }
        out.flush()?;
        Ok(written)
    }

    pub async fn cancel(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        Ok(self
            .jobs
            .cancel(v1::JobRequest { job_id: job })
            .await?
            .into_inner())
    }

    pub async fn pause(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        Ok(self
            .jobs
            .pause(v1::JobRequest { job_id: job })
            .await?
            .into_inner())
    }

    pub async fn resume(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        Ok(self
            .jobs
            .resume(v1::JobRequest { job_id: job })
            .await?
            .into_inner())
    }

    /// Every worker the coordinator has seen.
    pub async fn list_workers(&mut self) -> Result<Vec<v1::WorkerStatus>, ClientError> {
        Ok(self
            .jobs
            .list_workers(v1::ListWorkersRequest {})
            .await?
            .into_inner()
            .workers)
    }

    /// Tells the worker named `worker` to finish what it holds, take nothing new and stop.
    pub async fn drain(&mut self, worker: &str) -> Result<v1::WorkerStatus, ClientError> {
        Ok(self
            .jobs
            .drain(v1::DrainRequest {
                worker: worker.to_string(),
            })
            .await?
            .into_inner())
    }

    /// Sets `identity`'s share (admin token): its jobs together get threads in proportion to it.
    pub async fn set_share(
        &mut self,
        identity: &str,
        share: f64,
    ) -> Result<v1::IdentityInfo, ClientError> {
        Ok(self
            .jobs
            .set_share(v1::SetShareRequest {
                identity: identity.to_string(),
                share,
            })
            .await?
            .into_inner())
    }
}

/// The snapshots of [`Client::watch`], until the coordinator ends the stream.
pub struct WatchStream(tonic::Streaming<v1::WatchEvent>);

impl WatchStream {
    /// The next snapshot; `None` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<v1::WatchEvent>, ClientError> {
        Ok(self.0.message().await?)
    }
}

/// The `Work` service client for a worker at `url`, and its client for reports (both over one channel). It
/// connects on its first call and again after the coordinator went away, so only bad settings fail here; each
/// call times out after a minute.
pub fn work_client(
    url: &str,
    security: &ClientSecurity,
) -> Result<(WorkClient, ReportClient), ConnectError> {
    let endpoint = endpoint(url, security)?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(60));
    let token = token_interceptor(security)?;
    Ok(work_client_over(secure(endpoint.connect_lazy(), token)))
}

/// A worker's clients of a coordinator running in this process (see [`Client::in_process`]).
pub fn work_client_in_process(transport: sweep_proto::Transport) -> (WorkClient, ReportClient) {
    work_client_over(in_process(transport))
}

fn work_client_over(channel: SecureChannel) -> (WorkClient, ReportClient) {
    let work = WorkClient::new(channel.clone())
        .max_encoding_message_size(sweep_proto::MAX_REPORT_BYTES)
        .max_decoding_message_size(sweep_proto::MAX_REPORT_BYTES);
    (work, ReportClient::new(channel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_sorted_into_refusals_and_other_answers() {
        let refused = ClientError::from(Status::permission_denied("a worker token"));
        assert!(matches!(refused, ClientError::Refused(_)));
        assert_eq!(
            refused.to_string(),
            "refused by the coordinator: a worker token"
        );
        let missing = ClientError::from(Status::not_found("no job 7"));
        assert!(matches!(missing, ClientError::Call(_)) && !missing.is_unreachable());
        assert_eq!(missing.to_string(), "no job 7");
        let lost = ClientError::from(Status::unavailable("transport error"));
        assert!(lost.is_unreachable());
        assert_eq!(lost.to_string(), "the coordinator is unreachable");
        // The coordinator's own "unavailable" (a full disk) keeps its message.
        let full = ClientError::from(Status::unavailable("store: no space left"));
        assert!(full.is_unreachable());
        assert_eq!(full.to_string(), "store: no space left");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_and_bad_settings_are_not() {
        // Bound then dropped: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let e = Client::connect(&url, &ClientSecurity::default())
            .await
            .err()
            .unwrap();
        assert!(e.is_unreachable(), "{e}");
        assert!(e.to_string().contains(&url), "{e}");
        let e = Client::connect("not a url", &ClientSecurity::default())
            .await
            .err()
            .unwrap();
        assert!(matches!(e, ClientError::Settings(_)), "{e}");
    }
}
