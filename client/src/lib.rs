//! sweep's client side: everything that talks to a coordinator from outside it.
//!
//! - [`ClientSecurity`] and the connection code in `connect` build the channel: the URL, TLS and the token
//!   sent on every call (re-read when its file changes).
//! - [`Members`]: a coordinator is given as a list of URLs, the members of a replicated coordinator (or just
//!   one), and clients follow its leader: a member that is not the leader answers every call with `UNAVAILABLE`
//!   and the leader's URL in `sweep-leader` metadata (see [`sweep_proto::not_leader`]).
//! - [`Client`] makes the calls of the `Jobs` service (what `sweep submit`, `status`, `watch`, `results`, the
//!   job controls and `workers`/`drain` do). It returns the generated [`v1`] messages as they are: showing
//!   them is the caller's business. A call answered "not the leader" goes to the leader named, and one whose
//!   member cannot be reached to the next member, a bounded number of times (see [`Client`]).
//! - [`work_client`] gives a worker its `Work` service client (register, lease, heartbeat, fail, fetch
//!   artifact) and its [`ReportClient`] (complete, with reports already encoded). A worker retries those
//!   calls itself, so these clients connect lazily and never fail for a coordinator that is away; it moves
//!   between members itself too, with [`Members::failover`].
//!
//! Every failure is a [`ClientError`], which tells apart what a caller acts on differently: settings that
//! cannot work, a coordinator that cannot be reached, a refused token, and any other answer.

mod connect;
mod members;

use std::future::Future;
use std::time::Duration;

use sweep_proto::deadline::{within, CallKind};
use sweep_proto::v1::jobs_client::JobsClient;
use tonic::Status;
use tracing::debug;

pub use connect::{
    endpoint, in_process, is_refusal, read_token_file, secure, tls_config, token_interceptor,
    ClientSecurity, ConnectError, SecureChannel, TokenInterceptor,
};
pub use members::{Failover, Members};
pub use sweep_proto::v1;

/// The generated `Work` service client over a [`SecureChannel`]: what a worker calls.
pub type WorkClient = v1::work_client::WorkClient<SecureChannel>;

/// A worker's `Work.Complete` client for reports it encoded itself (see `EncodedCompleteRequest` in the proto).
pub type ReportClient = sweep_proto::CompleteClient<SecureChannel>;

/// The pause before a call is sent again to another member, doubled each time up to [`MAX_PAUSE`]: a
/// coordinator electing a leader is given time to finish, a loop of members naming each other is slowed down.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Why a call to the coordinator failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A bad URL, token file or TLS file: nothing was sent.
    #[error("{0}")]
    Settings(ConnectError),
    /// No connection could be made to any member of the coordinator: each one tried, and why.
    #[error("{}", unreachable_text(.tried))]
    Unreachable { tried: Vec<Unreached> },
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

/// A member of the coordinator that could not be reached, and why (refused, timed out...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreached {
    pub url: String,
    pub reason: String,
}

fn unreachable_text(tried: &[Unreached]) -> String {
    match tried {
        [one] => format!(
            "cannot reach the coordinator at {}: {}",
            one.url, one.reason
        ),
        _ => {
            let each: Vec<String> = tried
                .iter()
                .map(|u| format!("{} ({})", u.url, u.reason))
                .collect();
            format!(
                "cannot reach the coordinator at any of its members: {}",
                each.join(", ")
            )
        }
    }
}

/// A transport failure's status message names tonic's internals; people are told what it means.
fn call_text(s: &Status) -> String {
    if s.code() == tonic::Code::Unavailable && s.message().contains("transport") {
        "the coordinator is unreachable".to_string()
    } else if s.code() == tonic::Code::Unavailable && std::error::Error::source(s).is_some() {
        // A connection lost below gRPC (its keepalive found it dead, say): its causes say how.
        let mut causes = Vec::new();
        let mut cur = std::error::Error::source(s);
        while let Some(e) = cur {
            let text = e.to_string();
            // tonic wraps hyper's error in layers that say the same.
            if !causes.contains(&text) && text != "transport error" {
                causes.push(text);
            }
            cur = e.source();
        }
        format!("the coordinator is unreachable ({})", causes.join(": "))
    } else if matches!(
        s.code(),
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    ) {
        format!("the coordinator did not answer in time ({})", s.message())
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
            ClientError::Call(s) => sweep_proto::deadline::is_lost(s),
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

/// A connection to a coordinator's `Jobs` service. Cheap to clone: clones share the connection until one of
/// them moves to another member.
///
/// Given several members, it follows the leader: a call answered "not the leader" is sent to the leader named
/// (or the next member when none is named), and a call whose member cannot be reached is sent to the next
/// member if the call is safe to repeat: reads, the start of a stream (never the middle of one), and shipping
/// files stored by their digest. Submits and job controls are sent again only after a not-leader answer or a
/// failed connection, which did nothing: a submit sent twice would make two jobs. A call is sent at most
/// [`Members::max_attempts`] times, with a pause growing from 100 ms to 1 s between attempts, and never again
/// to a member that let it run out of its deadline (`sweep_proto::deadline`); then its last error is returned.
#[derive(Clone)]
pub struct Client {
    /// The connection to the member called now; `None` after a failure moved to another member.
    jobs: Option<JobsClient<SecureChannel>>,
    /// The members and how to reach them; `None` for a coordinator in this process, the only one there is.
    route: Option<Route>,
}

/// Which failed calls are sent again to the next member (any call is, after a not-leader answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repeat {
    /// Reads, stream starts, and writes that done twice are done once.
    Safe,
    /// Writes that must not be done twice: not after a member was lost mid-call, which may have done them.
    NotTwice,
}

#[derive(Clone)]
struct Route {
    members: Members,
    security: ClientSecurity,
    token: TokenInterceptor,
}

impl Route {
    /// Connects to the member called now.
    async fn open(&self) -> Result<JobsClient<SecureChannel>, Unreached> {
        let url = self.members.current();
        let unreached = |reason: String| Unreached {
            url: url.to_string(),
            reason,
        };
        // Checked when the member was added; a TLS file removed since is reported as this member's failure.
        let endpoint = endpoint(url, &self.security).map_err(|e| unreached(e.to_string()))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| unreached(innermost(&e)))?;
        Ok(jobs_client(secure(channel, self.token.clone())))
    }
}

/// Keeps one failure per member, the latest, in the order they were first tried.
fn note_unreached(tried: &mut Vec<Unreached>, u: Unreached) {
    match tried.iter_mut().find(|t| t.url == u.url) {
        Some(t) => *t = u,
        None => tried.push(u),
    }
}

fn jobs_client(channel: SecureChannel) -> JobsClient<SecureChannel> {
    // Answers (results with every solution) may be far larger than tonic's default limit.
    JobsClient::new(channel).max_decoding_message_size(sweep_proto::MAX_RESULT_BYTES)
}

impl Client {
    /// Connects to the coordinator at `list`, one URL or the comma-separated URLs of its members (see
    /// [`Members::parse`]), now, so an unreachable coordinator is reported before any call. Members are tried in
    /// order until one connects; the error of none names each one and why.
    pub async fn connect(list: &str, security: &ClientSecurity) -> Result<Client, ClientError> {
        let members = Members::parse(list, security)?;
        Client::connect_members(members, security).await
    }

    /// [`Client::connect`] to members already parsed.
    pub async fn connect_members(
        members: Members,
        security: &ClientSecurity,
    ) -> Result<Client, ClientError> {
        // Read before connecting: a bad token file is reported even when the coordinator is away.
        let token = token_interceptor(security)?;
        let mut route = Route {
            members,
            security: security.clone(),
            token,
        };
        let mut tried = Vec::new();
        for _ in 0..route.members.len() {
            match route.open().await {
                Ok(jobs) => {
                    return Ok(Client {
                        jobs: Some(jobs),
                        route: Some(route),
                    })
                }
                Err(u) => {
                    debug!(member = %u.url, reason = %u.reason, "cannot connect to this member");
                    tried.push(u);
                    route.members.advance();
                }
            }
        }
        Err(ClientError::Unreachable { tried })
    }

    /// A client of a coordinator running in this process (`sweep run`): its services called directly, with no
    /// socket in between.
    pub fn in_process(transport: sweep_proto::Transport) -> Client {
        Client {
            jobs: Some(jobs_client(in_process(transport))),
            route: None,
        }
    }

    /// The members this client knows (those given, then leaders it was sent to), and the one it calls now;
    /// `None` in process.
    pub fn members(&self) -> Option<&Members> {
        self.route.as_ref().map(|r| &r.members)
    }

    /// Makes the call `f` on the member called now, and again on other members as [`Client`] describes. Each
    /// attempt has the deadline of `kind`: a member that does not answer within it (stopped, or cut off by a
    /// link that drops packets) counts as unreachable. For a stream, the deadline bounds its start; the
    /// connection's keepalive ends a stream whose member went silent later.
    async fn call<T, F, Fut>(
        &mut self,
        repeat: Repeat,
        kind: CallKind,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(JobsClient<SecureChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let Client { jobs, route } = self;
        let Some(route) = route else {
            // In process: always connected, and there is no other member.
            let Some(jobs) = jobs.clone() else {
                return Err(ClientError::Reply("no connection".into()));
            };
            return Ok(f(jobs).await?.into_inner());
        };
        let attempts = route.members.max_attempts();
        let mut pause = FIRST_PAUSE;
        let mut tried: Vec<Unreached> = Vec::new();
        let mut last: Option<ClientError> = None;
        // Members that let this call wait until it ran out of time or their connection was found dead: each
        // costs seconds, so none is called twice.
        let mut silent: Vec<String> = Vec::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            if silent.iter().any(|s| s == route.members.current()) {
                *jobs = None;
                route.members.advance();
                continue;
            }
            let client = match jobs {
                Some(c) => c.clone(),
                None => match route.open().await {
                    Ok(c) => jobs.insert(c).clone(),
                    Err(u) => {
                        // Nothing was sent: any call may go to the next member.
                        debug!(member = %u.url, reason = %u.reason, "cannot connect to this member");
                        note_unreached(&mut tried, u);
                        last = Some(ClientError::Unreachable {
                            tried: tried.clone(),
                        });
                        route.members.advance();
                        continue;
                    }
                },
            };
            let sent = std::time::Instant::now();
            let status = match within(kind.deadline(), f(client)).await {
                Ok(answer) => return Ok(answer.into_inner()),
                Err(status) => status,
            };
            let member = route.members.current().to_string();
            // Lost after a wait as long as a dead connection takes to be found (a deadline, or the keepalive
            // closing it): the member is silent, not restarting, which refuses or resets at once.
            if sweep_proto::deadline::is_lost(&status)
                && sent.elapsed() >= sweep_proto::deadline::KEEPALIVE_TIMEOUT
            {
                silent.push(member.clone());
            }
            let failover = route.members.failover(&status, &route.security);
            if failover == Failover::Answered {
                return Err(status.into());
            }
            // The next call, this one's next attempt or a later one, goes to the member moved to.
            *jobs = None;
            debug!(%member, next = %route.members.current(), ?failover, error = %status.message(), "call failed on this member");
            if failover == Failover::Unreachable && repeat == Repeat::NotTwice {
                return Err(status.into());
            }
            last = Some(status.into());
            if route.members.urls().iter().all(|u| silent.contains(u)) {
                break;
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Reply("no attempt was made".into())))
    }

    /// Submits a job. Sent again after a not-leader answer only (see [`Client`]): a member lost mid-call may
    /// have made the job already, and `reuse_existing` is not set by every caller.
    pub async fn submit(
        &mut self,
        req: v1::SubmitRequest,
    ) -> Result<v1::SubmitResponse, ClientError> {
        self.call(
            Repeat::NotTwice,
            CallKind::Transfer { bytes: 0 },
            |mut c| {
                let req = req.clone();
                async move { c.submit(req).await }
            },
        )
        .await
    }

    /// Sends the packed files a job ships (`exec --ship`), stored by the coordinator under `digest`. They go
    /// in pieces small enough for any message limit; a coordinator that has them already keeps its copy (so
    /// sending them again is safe).
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
            .call(
                Repeat::Safe,
                CallKind::Transfer { bytes: total },
                |mut c| {
                    let pieces = pieces.clone();
                    async move { c.ship(tokio_stream::iter(pieces)).await }
                },
            )
            .await?;
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
        self.call(Repeat::Safe, CallKind::Quick, |mut c| async move {
            c.list_jobs(v1::ListJobsRequest {}).await
        })
        .await
    }

    pub async fn job_status(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        self.call(Repeat::Safe, CallKind::Quick, |mut c| async move {
            c.job_status(v1::JobRequest { job_id: job }).await
        })
        .await
    }

    /// Progress snapshots every `interval_ms` of one job, or of every job for `job` 0. Starting the stream
    /// follows the leader; a stream that breaks is the caller's to start again.
    pub async fn watch(&mut self, job: u64, interval_ms: u64) -> Result<WatchStream, ClientError> {
        let req = v1::WatchRequest {
            job_id: job,
            interval_ms,
        };
        let stream = self
            .call(Repeat::Safe, CallKind::Quick, |mut c| async move {
                c.watch(req).await
            })
            .await?;
        Ok(WatchStream(stream))
    }

    /// Job `job`'s state and answer, in the forms asked for (a coordinator older than the choice sends both).
    pub async fn results(
        &mut self,
        job: u64,
        form: v1::AnswerForm,
    ) -> Result<v1::ResultsResponse, ClientError> {
        let req = v1::ResultsRequest {
            job_id: job,
            form: form.into(),
        };
        // An answer may be as large as the largest message.
        let kind = CallKind::Transfer {
            bytes: sweep_proto::MAX_RESULT_BYTES as u64,
        };
        self.call(
            Repeat::Safe,
            kind,
            |mut c| async move { c.results(req).await },
        )
        .await
    }

    /// Streams every solution job `job` stored, in chunk order, one per line into `out`; returns how many.
    /// Memory stays that of one piece however many there are. The coordinator refuses a job that keeps counts
    /// only, and says why. Starting the stream follows the leader; a stream that breaks midway is an error (part
    /// of the solutions may have been written).
    pub async fn write_solutions(
        &mut self,
        job: u64,
        out: &mut dyn std::io::Write,
    ) -> Result<u64, SolutionsError> {
        let mut stream = self
            .call(Repeat::Safe, CallKind::Quick, |mut c| async move {
                c.solutions(v1::JobRequest { job_id: job }).await
            })
            .await?;
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
        self.call(Repeat::NotTwice, CallKind::Quick, |mut c| async move {
            c.cancel(v1::JobRequest { job_id: job }).await
        })
        .await
    }

    pub async fn pause(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        self.call(Repeat::NotTwice, CallKind::Quick, |mut c| async move {
            c.pause(v1::JobRequest { job_id: job }).await
        })
        .await
    }

    pub async fn resume(&mut self, job: u64) -> Result<v1::JobInfo, ClientError> {
        self.call(Repeat::NotTwice, CallKind::Quick, |mut c| async move {
            c.resume(v1::JobRequest { job_id: job }).await
        })
        .await
    }

    /// Every worker the coordinator has seen.
    pub async fn list_workers(&mut self) -> Result<Vec<v1::WorkerStatus>, ClientError> {
        let resp = self
            .call(Repeat::Safe, CallKind::Quick, |mut c| async move {
                c.list_workers(v1::ListWorkersRequest {}).await
            })
            .await?;
        Ok(resp.workers)
    }

    /// Tells the worker named `worker` to finish what it holds, take nothing new and stop.
    pub async fn drain(&mut self, worker: &str) -> Result<v1::WorkerStatus, ClientError> {
        let req = v1::DrainRequest {
            worker: worker.to_string(),
        };
        self.call(Repeat::NotTwice, CallKind::Quick, |mut c| {
            let req = req.clone();
            async move { c.drain(req).await }
        })
        .await
    }

    /// Sets `identity`'s share (admin token): its jobs together get threads in proportion to it.
    pub async fn set_share(
        &mut self,
        identity: &str,
        share: f64,
    ) -> Result<v1::IdentityInfo, ClientError> {
        let req = v1::SetShareRequest {
            identity: identity.to_string(),
            share,
        };
        self.call(Repeat::NotTwice, CallKind::Quick, |mut c| {
            let req = req.clone();
            async move { c.set_share(req).await }
        })
        .await
    }

    /// Adds a new empty member at `url` to a replicated coordinator (admin token). Safe to send again: a
    /// member already at `url` is named, not added twice.
    pub async fn add_member(&mut self, url: &str) -> Result<v1::AddMemberReply, ClientError> {
        let req = v1::AddMemberRequest { url: url.into() };
        self.call(Repeat::Safe, CallKind::Transfer { bytes: 0 }, |mut c| {
            let req = req.clone();
            async move { c.add_member(req).await }
        })
        .await
    }

    /// Removes member `id` from a replicated coordinator (admin token); the group as the leader sees it then.
    pub async fn remove_member(&mut self, id: u64) -> Result<v1::MembersReply, ClientError> {
        self.call(
            Repeat::NotTwice,
            CallKind::Transfer { bytes: 0 },
            |mut c| async move { c.remove_member(v1::RemoveMemberRequest { id }).await },
        )
        .await
    }

    /// The group as the member called sees it (every member answers, leader or not; see
    /// [`Client::connect`] with one URL to ask a given member).
    pub async fn group(&mut self) -> Result<v1::MembersReply, ClientError> {
        self.call(Repeat::Safe, CallKind::Quick, |mut c| async move {
            c.members(v1::MembersRequest {}).await
        })
        .await
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

/// The `Work` service client for a worker at `url` (one member), and its client for reports (both over one
/// channel). It connects on its first call and again after the coordinator went away (or its keepalive found
/// the connection dead), so only bad settings fail here. Its calls have no deadline of their own: the worker
/// gives each one the deadline of what it does (`sweep_proto::deadline`).
pub fn work_client(
    url: &str,
    security: &ClientSecurity,
) -> Result<(WorkClient, ReportClient), ConnectError> {
    work_client_with(url, security, token_interceptor(security)?)
}

/// [`work_client`] with the token read already: a worker that moves to another member keeps its token (and
/// follows its file) rather than read it again.
pub fn work_client_with(
    url: &str,
    security: &ClientSecurity,
    token: TokenInterceptor,
) -> Result<(WorkClient, ReportClient), ConnectError> {
    Ok(work_client_over(secure(
        endpoint(url, security)?.connect_lazy(),
        token,
    )))
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

    /// A member that accepts connections and never answers (a stopped process: its kernel still completes
    /// the handshake) costs one wait (its connection's keepalive or the call's deadline, whichever ends it
    /// first), not one per attempt, and is reported as unreachable.
    #[tokio::test]
    async fn a_silent_member_costs_one_deadline_and_is_unreachable() {
        // Never accepted: connections wait in the backlog, as they do for a process stopped with SIGSTOP.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let started = std::time::Instant::now();
        let answer = match Client::connect(&url, &ClientSecurity::default()).await {
            Ok(mut c) => c.list_jobs().await.map(|_| ()),
            Err(e) => Err(e),
        };
        let took = started.elapsed();
        let e = answer.expect_err("a silent member answered");
        assert!(e.is_unreachable(), "{e}");
        let quick = CallKind::Quick.deadline();
        assert!(
            took < quick * 2,
            "a silent member held the call {took:?} (deadline {quick:?})"
        );
        let text = e.to_string();
        assert!(
            text.contains("did not answer in time") || text.contains("unreachable"),
            "{text}"
        );
    }

    /// A call with a long deadline (an answer may be large) on a member that went silent still ends within
    /// seconds: the connection's keepalive finds it dead.
    #[tokio::test]
    async fn keepalive_ends_a_long_call_on_a_silent_member() {
        use sweep_proto::deadline::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let mut c = Client::connect(&url, &ClientSecurity::default())
            .await
            .expect("the kernel accepts for a silent member");
        let started = std::time::Instant::now();
        let e = c
            .results(7, v1::AnswerForm::Json)
            .await
            .expect_err("a silent member answered");
        let took = started.elapsed();
        assert!(e.is_unreachable(), "{e}");
        assert!(e.to_string().contains("keep-alive"), "{e}");
        let found = KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT;
        assert!(
            took < found + Duration::from_secs(2),
            "the dead connection held a call {took:?} (keepalive finds it after {found:?})"
        );
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
        assert!(
            e.to_string().starts_with("cannot reach the coordinator at"),
            "{e}"
        );
        let e = Client::connect("not a url", &ClientSecurity::default())
            .await
            .err()
            .unwrap();
        assert!(matches!(e, ClientError::Settings(_)), "{e}");
    }
}
