//! sweep's gRPC protocol (`proto/sweep.proto`), compiled at build time with protox, and the conversions between
//! its generated types and the domain types of `sweep-space`, and the wire-level constants every side shares:
//! message limits, the not-leader answer of a replicated coordinator ([`not_leader`], [`LEADER_METADATA`]), and
//! the deadlines and keepalives of every call and connection ([`deadline`]).
//!
//! Architecture invariant: this is the only crate with generated code. Everything past the RPC edge works on
//! domain types; conversions that can fail (counters sent as decimal strings) return [`WireError`].

use std::collections::BTreeMap;

use sweep_space::ChunkOutput;

pub mod deadline;

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("sweep.v1");
}

impl v1::JobState {
    /// The state as people and scripts see it (`sweep status`, `--json`, the dashboard).
    pub fn label(self) -> &'static str {
        match self {
            v1::JobState::Unspecified => "unknown",
            v1::JobState::Running => "running",
            v1::JobState::Paused => "paused",
            v1::JobState::Cancelled => "cancelled",
            v1::JobState::Done => "done",
            v1::JobState::DoneWithPoisonedChunks => "done-with-poisoned-chunks",
        }
    }

    /// Whether the job will change no more (its answer, if any, is final).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            v1::JobState::Cancelled | v1::JobState::Done | v1::JobState::DoneWithPoisonedChunks
        )
    }
}

impl v1::Listing {
    /// What the job keeps of its solutions, as people see it.
    pub fn label(self) -> &'static str {
        match self {
            v1::Listing::Unspecified => "unknown",
            v1::Listing::All => "all",
            v1::Listing::CountOnly => "count-only",
            v1::Listing::Stopped => "stopped",
        }
    }
}

impl v1::ChunkReport {
    /// The report as one [`v1::EncodedCompleteRequest`] entry.
    pub fn encode_shared(&self) -> prost::bytes::Bytes {
        prost::Message::encode_to_vec(self).into()
    }
}

/// The `Work.Complete` call with its reports already encoded ([`v1::EncodedCompleteRequest`]), over any channel
/// the generated `WorkClient` takes. The request, method path and codec are what the generated client sends for
/// the [`v1::CompleteRequest`] those bytes encode; only the Rust type of the reports differs.
#[derive(Clone, Debug)]
pub struct CompleteClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl<T> CompleteClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    pub fn new(channel: T) -> Self {
        let inner = tonic::client::Grpc::new(channel)
            .max_encoding_message_size(MAX_REPORT_BYTES)
            .max_decoding_message_size(MAX_REPORT_BYTES);
        CompleteClient { inner }
    }

    pub async fn complete(
        &mut self,
        request: impl tonic::IntoRequest<v1::EncodedCompleteRequest>,
    ) -> Result<tonic::Response<v1::CompleteResponse>, tonic::Status> {
        self.inner.ready().await.map_err(|e| {
            tonic::Status::unknown(format!("the channel was not ready: {}", e.into()))
        })?;
        let path = http::uri::PathAndQuery::from_static("/sweep.v1.Work/Complete");
        let mut request = request.into_request();
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new("sweep.v1.Work", "Complete"));
        let codec =
            tonic_prost::ProstCodec::<v1::EncodedCompleteRequest, v1::CompleteResponse>::default();
        self.inner.unary(request, path, codec).await
    }
}

/// `sweep.proto` compiled to a `FileDescriptorSet`: what the coordinator's reflection service answers with.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sweep_descriptor.bin"));

/// The largest message a worker may send (a chunk report with its solutions and artifact): bounds what one bad
/// client can make the coordinator buffer.
pub const MAX_REPORT_BYTES: usize = 64 << 20;

/// The largest answer the `Jobs` service sends (a merged result keeps up to a million solutions). Clients must
/// raise tonic's 4 MiB default to this, or a big but valid answer fails to decode.
pub const MAX_RESULT_BYTES: usize = 512 << 20;

/// The ASCII metadata key of a not-leader answer that names the leader: its value is the leader's client URL
/// (what clients give as `--coordinator`). See [`not_leader`] for the whole protocol.
pub const LEADER_METADATA: &str = "sweep-leader";

/// Why [`member_url`] refused a URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadMemberUrl {
    #[error("is not an http:// or https:// URL such as http://10.0.0.1:7878")]
    NotHttp,
    #[error("must be http://HOST:PORT or https://HOST:PORT, with the port")]
    NoPort,
}

/// A replicated coordinator member's URL as every member keeps it (in `--peers`, in a membership entry):
/// `http://HOST:PORT`, or `https://HOST:PORT` for a member that serves TLS, trimmed, without a trailing slash,
/// so that one member has one spelling.
pub fn member_url(raw: &str) -> Result<String, BadMemberUrl> {
    let url = raw.trim().trim_end_matches('/');
    let authority = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or(BadMemberUrl::NotHttp)?;
    let port_ok = authority
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if authority.contains('/') || !port_ok {
        return Err(BadMemberUrl::NoPort);
    }
    Ok(url.to_string())
}

/// The ASCII metadata key in which a worker sends the highest leader term it has seen in a lease
/// (`ChunkLease.term`) with its heartbeats, results and failures: a member whose own term is lower has been
/// deposed, so it answers not-leader instead of taking the call (fencing). Absent or 0: no term seen (a single
/// coordinator grants leases in term 0).
pub const TERM_METADATA: &str = "sweep-term";

/// The term a request carries in [`TERM_METADATA`] (0 when absent or not a number).
pub fn term_of<T>(request: &tonic::Request<T>) -> u64 {
    request
        .metadata()
        .get(TERM_METADATA)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// How the message of every not-leader answer begins (see [`not_leader`]).
pub const NOT_LEADER: &str = "this coordinator is not the leader";

/// The answer of a coordinator member that is not the leader, to any `Jobs` or `Work` call.
///
/// Replicated coordinators are several members of which only the leader serves. Clients are given the list of
/// members (`--coordinator A,B,C`) and follow the leader:
///
/// - A member that is not the leader does nothing with the call and answers `UNAVAILABLE` with a message that
///   starts with [`NOT_LEADER`] and, when it knows the leader, the metadata [`LEADER_METADATA`] holding the
///   leader's client URL (absent while no leader is known, during an election).
/// - A client that gets this answer calls the named leader, which may not be in its list, or else the next member
///   of its list. Because a not-leader answer did nothing, any call may be sent again after it, a submit included.
/// - A member that cannot be reached is skipped for the next one, but then the call may have been carried out
///   before the connection broke: only calls that are safe to repeat are sent again.
///
/// `leader` is the leader's client URL if known. A URL that cannot be an ASCII metadata value is left out.
pub fn not_leader(leader: Option<&str>) -> tonic::Status {
    let mut status = match leader {
        Some(url) => tonic::Status::unavailable(format!("{NOT_LEADER}; the leader is {url}")),
        None => tonic::Status::unavailable(format!("{NOT_LEADER}, and it knows of no leader yet")),
    };
    if let Some(value) =
        leader.and_then(|url| url.parse::<tonic::metadata::AsciiMetadataValue>().ok())
    {
        status.metadata_mut().insert(LEADER_METADATA, value);
    }
    status
}

/// The leader a not-leader answer names (see [`not_leader`]): the [`LEADER_METADATA`] value of an `UNAVAILABLE`
/// status, trimmed; `None` for any other status, or when the value is absent, empty or not ASCII.
pub fn leader_hint(status: &tonic::Status) -> Option<String> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    let value = status
        .metadata()
        .get(LEADER_METADATA)?
        .to_str()
        .ok()?
        .trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// Whether `status` is a not-leader answer (see [`not_leader`]), which by construction did nothing: `UNAVAILABLE`
/// naming a leader, or with a message that starts with [`NOT_LEADER`].
pub fn is_not_leader(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable
        && (leader_hint(status).is_some() || status.message().starts_with(NOT_LEADER))
}

/// What carries a client's gRPC calls to a coordinator: a network channel, or the coordinator's own services
/// called in the same process (`sweep run`: no socket, no HTTP/2 framing, the same handlers and checks). Clients
/// and the worker are written once against it.
pub type Transport = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    TransportError,
>;

/// Why a [`Transport`] could not carry a call (the connection failed, say); tonic turns it into a `Status`
/// from its source chain. A concrete type rather than a boxed `dyn Error`: with a trait object as the error,
/// rustc cannot prove the worker's tasks `Send` (its "`From` is not general enough" limitation).
#[derive(Debug)]
pub struct TransportError(tonic::codegen::StdError);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// `service` as a [`Transport`].
pub fn transport<S>(service: S) -> Transport
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<tonic::codegen::StdError> + 'static,
{
    Transport::new(tower::ServiceExt::map_err(service, |e: S::Error| {
        TransportError(e.into())
    }))
}

/// A message that decoded as protobuf but does not make sense.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("counter `{name}` is not a decimal u128: `{value}`")]
    BadCounter { name: String, value: String },
    #[error("missing field `{0}`")]
    Missing(&'static str),
}

impl From<&ChunkOutput> for v1::ChunkOutput {
    fn from(out: &ChunkOutput) -> Self {
        out.clone().into()
    }
}

/// By value: a worker's report takes the chunk's list and artifact without copying them.
impl From<ChunkOutput> for v1::ChunkOutput {
    fn from(out: ChunkOutput) -> Self {
        v1::ChunkOutput {
            nodes: out.nodes,
            counters: out
                .counters
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .collect(),
            solutions: out.solutions,
            artifact: out.artifact,
        }
    }
}

impl TryFrom<v1::ChunkOutput> for ChunkOutput {
    type Error = WireError;

    fn try_from(out: v1::ChunkOutput) -> Result<Self, WireError> {
        let mut counters = BTreeMap::new();
        for (name, value) in out.counters {
            let Ok(n) = value.parse::<u128>() else {
                return Err(WireError::BadCounter { name, value });
            };
            counters.insert(name, n);
        }
        Ok(ChunkOutput {
            nodes: out.nodes,
            solutions: out.solutions,
            counters,
            artifact: out.artifact,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_url_has_one_spelling_and_bad_ones_say_why() {
        assert_eq!(
            member_url(" http://a:7878/ ").as_deref(),
            Ok("http://a:7878")
        );
        assert_eq!(
            member_url("http://[::1]:1").as_deref(),
            Ok("http://[::1]:1")
        );
        assert_eq!(
            member_url("https://a:7878/").as_deref(),
            Ok("https://a:7878")
        );
        for (raw, why) in [
            ("ftp://a:1", BadMemberUrl::NotHttp),
            ("a:1", BadMemberUrl::NotHttp),
            ("https://a", BadMemberUrl::NoPort),
            ("http://a", BadMemberUrl::NoPort),
            ("http://:1", BadMemberUrl::NoPort),
            ("http://a:99999", BadMemberUrl::NoPort),
            ("http://a:1/path", BadMemberUrl::NoPort),
            // The trailing slashes go first: what is left is no URL at all.
            ("http://", BadMemberUrl::NotHttp),
        ] {
            assert_eq!(member_url(raw), Err(why), "{raw}");
        }
    }

    /// The boxed transport must not change how tonic reads a failed call: an unreachable coordinator is
    /// `Unavailable` (a worker retries it; the CLI exits 3), with the same message, as over a bare channel.
    #[tokio::test]
    async fn a_transport_fails_a_call_as_its_channel_does() {
        // Port 1 on loopback: nothing listens there, so the connection is refused at once.
        let channel = || {
            tonic::transport::Endpoint::from_static("http://127.0.0.1:1")
                .connect_timeout(std::time::Duration::from_secs(5))
                .connect_lazy()
        };
        let req = || v1::LeaseRequest {
            worker_id: "w".into(),
            max_chunks: 1,
            request_id: 0,
        };
        let bare = v1::work_client::WorkClient::new(channel())
            .lease(req())
            .await
            .unwrap_err();
        let boxed = v1::work_client::WorkClient::new(transport(channel()))
            .lease(req())
            .await
            .unwrap_err();
        assert_eq!(bare.code(), tonic::Code::Unavailable, "{bare}");
        assert_eq!(boxed.code(), bare.code(), "{boxed}");
        assert_eq!(boxed.message(), bare.message());
    }

    /// Workers send `EncodedCompleteRequest` and the coordinator reads `CompleteRequest`: the bytes must be the
    /// same, for any number of reports, empty ones included.
    #[test]
    fn an_encoded_complete_request_is_the_complete_request_on_the_wire() {
        use prost::Message;
        let report = |i: u64, solutions: Vec<String>| v1::ChunkReport {
            lease_id: i,
            job_id: 3,
            chunk: i * 7,
            output: Some(v1::ChunkOutput {
                nodes: i * 1000,
                solutions,
                counters: [("unique".to_string(), i.to_string())].into(),
                artifact: vec![i as u8; i as usize],
            }),
            elapsed_s: 0.25,
            generation: i as u32,
        };
        let reports = [
            report(0, vec![]),
            report(1, vec!["1,2,3".into()]),
            report(2, (0..300).map(|k| format!("{k},{k}")).collect()),
            v1::ChunkReport::default(),
        ];
        for n in 0..=reports.len() {
            let plain = v1::CompleteRequest {
                worker_id: "w-1".into(),
                reports: reports[..n].to_vec(),
            };
            let encoded = v1::EncodedCompleteRequest {
                worker_id: "w-1".into(),
                reports: reports[..n]
                    .iter()
                    .map(v1::ChunkReport::encode_shared)
                    .collect(),
            };
            let bytes = encoded.encode_to_vec();
            assert_eq!(bytes, plain.encode_to_vec(), "{n} reports");
            assert_eq!(v1::CompleteRequest::decode(&bytes[..]).unwrap(), plain);
        }
    }

    #[test]
    fn chunk_output_roundtrips_with_huge_counters() {
        let mut out = ChunkOutput {
            nodes: 7,
            solutions: vec!["a".into()],
            artifact: vec![1, 2],
            ..Default::default()
        };
        out.count("count", u128::MAX);
        let wire = v1::ChunkOutput::from(&out);
        assert_eq!(wire.counters["count"], u128::MAX.to_string());
        assert_eq!(ChunkOutput::try_from(wire).unwrap(), out);
    }

    /// A worker's memory and containment, a job's own attempts and memory, and why it waits survive the wire;
    /// a submit that names no attempts stays apart from one that names 0 (refused), and the bytes of a worker
    /// older than these fields read as "did not say".
    #[test]
    fn placement_and_attempt_fields_roundtrip() {
        use prost::Message;
        let reg = v1::RegisterRequest {
            name: "w".into(),
            memory_bytes: 8 << 30,
            containment: "cgroup v2 + PID namespace".into(),
            ..Default::default()
        };
        assert_eq!(
            v1::RegisterRequest::decode(reg.encode_to_vec().as_slice()).unwrap(),
            reg
        );
        let older = v1::RegisterRequest {
            name: "w".into(),
            ..Default::default()
        };
        let read = v1::RegisterRequest::decode(older.encode_to_vec().as_slice()).unwrap();
        assert_eq!((read.memory_bytes, read.containment.as_str()), (0, ""));
        for max_attempts in [None, Some(0), Some(1)] {
            let submit = v1::SubmitRequest {
                space: "exec".into(),
                max_attempts,
                ..Default::default()
            };
            let read = v1::SubmitRequest::decode(submit.encode_to_vec().as_slice()).unwrap();
            assert_eq!(read.max_attempts, max_attempts);
        }
        let info = v1::JobInfo {
            id: 3,
            max_attempts: 1,
            chunk_memory: 8 << 30,
            waiting: "needs 8.0 GiB per chunk; the largest live worker has 3.8 GiB".into(),
            ..Default::default()
        };
        assert_eq!(
            v1::JobInfo::decode(info.encode_to_vec().as_slice()).unwrap(),
            info
        );
        let status = v1::WorkerStatus {
            name: "w".into(),
            memory_bytes: 4 << 30,
            containment: "none".into(),
            ..Default::default()
        };
        assert_eq!(
            v1::WorkerStatus::decode(status.encode_to_vec().as_slice()).unwrap(),
            status
        );
    }

    #[test]
    fn a_not_leader_answer_names_the_leader_in_its_metadata() {
        let s = not_leader(Some("http://10.0.0.2:7878"));
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(
            s.message(),
            "this coordinator is not the leader; the leader is http://10.0.0.2:7878"
        );
        assert_eq!(
            s.metadata().get(LEADER_METADATA).unwrap().to_str().unwrap(),
            "http://10.0.0.2:7878"
        );
        assert_eq!(leader_hint(&s).as_deref(), Some("http://10.0.0.2:7878"));
        assert!(is_not_leader(&s));
        // During an election: not the leader, and no hint.
        let s = not_leader(None);
        assert_eq!(leader_hint(&s), None);
        assert!(s.metadata().get(LEADER_METADATA).is_none());
        assert!(is_not_leader(&s), "{s:?}");
        // A URL that cannot be a metadata value is left out, not sent garbled.
        let s = not_leader(Some("http://bad\nhost"));
        assert_eq!(leader_hint(&s), None);
        assert!(is_not_leader(&s));
        // Other answers are not redirections, whatever metadata they carry.
        let mut other = tonic::Status::not_found("no job 7");
        other
            .metadata_mut()
            .insert(LEADER_METADATA, "http://x:1".parse().unwrap());
        assert_eq!(leader_hint(&other), None);
        assert!(!is_not_leader(&other));
        let lost = tonic::Status::unavailable("transport error");
        assert_eq!(leader_hint(&lost), None);
        assert!(!is_not_leader(&lost));
        let mut empty = tonic::Status::unavailable("x");
        empty
            .metadata_mut()
            .insert(LEADER_METADATA, " ".parse().unwrap());
        assert_eq!(leader_hint(&empty), None);
    }

    #[test]
    fn garbled_counter_is_named() {
        let mut wire = v1::ChunkOutput::default();
        wire.counters.insert("unique".into(), "-3".into());
        let err = ChunkOutput::try_from(wire).unwrap_err();
        assert!(err.to_string().contains("unique"), "{err}");
    }
}
