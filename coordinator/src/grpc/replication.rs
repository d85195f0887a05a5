//! The network side of a replicated coordinator's member (`crate::replica`): the `Replication` service, which
//! passes arriving messages to the member's inbox and takes snapshot files in, and a sender per peer, which
//! carries the member's messages in order, batching whatever queued up while a call was in flight, and pushes
//! a snapshot's file before the message that names it. Members at `https://` URLs are called over TLS, with
//! this member's certificate as its client identity when the others require one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sweep_proto::v1::replication_client::ReplicationClient;
use sweep_proto::v1::replication_server::{Replication, ReplicationServer};
use sweep_proto::v1::{PushSnapshotReply, SnapshotPiece, StepReply, StepRequest};
use tonic::transport::{ClientTlsConfig, Endpoint};
use tonic::{Request, Response, Status, Streaming};

use crate::replica::{Carrier, Inbox, PeerLink};
use crate::store::{Descriptor, SnapshotFiles, StoreError};

/// Messages sent in one call at most.
const BATCH: usize = 256;
/// How long a sender waits before trying a peer that failed again.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long one call to a peer may take, by the bytes it carries: a floor well above a healthy round trip, then
/// the pace of [`push_timeout`]. A peer that does not answer (stopped, or behind a link that drops packets)
/// holds its sender no longer than this; raft sends what was lost again.
fn step_timeout(bytes: usize) -> Duration {
    Duration::from_secs(2) + Duration::from_secs(bytes as u64 / (8 << 20))
}
/// The largest call between members: a consensus entry carries a group commit whole, artifacts and shipped
/// programs (up to 1 GiB) included, and gRPC frames a message with a 32-bit length.
pub const MAX_STEP_BYTES: usize = (2 << 30) - 1;
/// Bytes of a snapshot file in one piece of a push.
const PIECE: usize = 1 << 20;
/// Pieces read ahead of the network while a file is pushed.
const PIECES_AHEAD: usize = 4;

/// How long pushing a file of `len` bytes may take: a floor for the connection, then a pace (8 MiB/s) that any
/// link between members keeps; a push slower than that is given up and tried again.
fn push_timeout(len: u64) -> Duration {
    Duration::from_secs(30 + len / (8 << 20))
}

/// The `Replication` service of one member: its inbox, and where received snapshot files go.
pub struct ReplicationApi {
    inbox: Inbox,
    files: SnapshotFiles,
}

impl ReplicationApi {
    pub fn new(inbox: Inbox, files: SnapshotFiles) -> ReplicationApi {
        ReplicationApi { inbox, files }
    }

    pub fn into_server(self) -> ReplicationServer<ReplicationApi> {
        ReplicationServer::new(self).max_decoding_message_size(MAX_STEP_BYTES)
    }
}

fn file_status(e: StoreError) -> Status {
    match e {
        StoreError::Damaged { .. } => Status::data_loss(e.to_string()),
        e => Status::internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl Replication for ReplicationApi {
    async fn step(&self, request: Request<StepRequest>) -> Result<Response<StepReply>, Status> {
        let req = request.into_inner();
        if req.to != self.inbox.id() {
            return Err(Status::invalid_argument(format!(
                "messages for member {} reached member {}",
                req.to,
                self.inbox.id()
            )));
        }
        self.inbox
            .deliver(req.messages)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(StepReply {}))
    }

    async fn push_snapshot(
        &self,
        request: Request<Streaming<SnapshotPiece>>,
    ) -> Result<Response<PushSnapshotReply>, Status> {
        let mut pieces = request.into_inner();
        let first = pieces
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a snapshot push with no piece"))?;
        if first.to != self.inbox.id() {
            return Err(Status::invalid_argument(format!(
                "a snapshot for member {} reached member {}",
                first.to,
                self.inbox.id()
            )));
        }
        let d = Descriptor::decode(&first.descriptor).ok_or_else(|| {
            Status::invalid_argument("the first piece of a snapshot push names no snapshot file")
        })?;
        if self.files.find(&d).is_some() {
            return Ok(Response::new(PushSnapshotReply {}));
        }
        // Dropped on any early return, which removes what was received.
        let mut incoming = self.files.receive(d).map_err(file_status)?;
        incoming.write(&first.data).map_err(file_status)?;
        while let Some(piece) = pieces.message().await? {
            incoming.write(&piece.data).map_err(file_status)?;
        }
        tokio::task::spawn_blocking(move || incoming.finish())
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(file_status)?;
        tracing::info!(
            member = self.inbox.id(),
            from = first.from,
            bytes = d.len,
            "a snapshot file arrived"
        );
        Ok(Response::new(PushSnapshotReply {}))
    }
}

/// What starts a sender task for each peer link. `token` is sent as the `authorization` value of every call
/// (members of a group with token files call each other with an admin token). `tls` is how members at
/// `https://` URLs are called: the CA that signed their certificates and, for members that require client
/// certificates, this member's own certificate as its identity. A member at an `https://` URL without it is
/// not called (the group's flags are checked before this, so that is a bug, logged). Snapshot files are pushed
/// from `files`.
pub fn carrier(
    token: Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<ClientTlsConfig>,
    files: SnapshotFiles,
) -> Carrier {
    Arc::new(move |link| {
        tokio::spawn(send_to_peer(
            link,
            token.clone(),
            tls.clone(),
            files.clone(),
        ));
    })
}

/// The endpoint of a peer at `url`: over TLS as `tls` says for an `https://` URL, plain for `http://`; with the
/// connect timeout and keepalives of every connection.
fn peer_endpoint(url: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(url.to_string()).map_err(|e| e.to_string())?;
    let endpoint = sweep_proto::deadline::keepalive(endpoint);
    if !url.starts_with("https://") {
        return Ok(endpoint);
    }
    let tls = tls.ok_or("it is https:// but this member has no TLS settings for its peers")?;
    endpoint.tls_config(tls.clone()).map_err(|e| e.to_string())
}

/// Pushes the file of `d` to the peer; `Err` says why it did not get there whole.
async fn push_file(
    link: &PeerLink,
    token: &Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<&ClientTlsConfig>,
    files: &SnapshotFiles,
    d: Descriptor,
) -> Result<(), String> {
    let path: PathBuf = files
        .find(&d)
        .ok_or_else(|| "the snapshot file is gone (a newer one replaced it)".to_string())?;
    // Opened now: a newer snapshot may replace this one meanwhile, and an open file stays readable.
    let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // No timeout on the call as a whole: the push has one of its own, by the file's size.
    let channel = peer_endpoint(&link.url, tls)?
        .connect()
        .await
        .map_err(|e| causes(&e))?;
    let (tx, rx) = tokio::sync::mpsc::channel(PIECES_AHEAD);
    let (from, to) = (link.from, link.to);
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut first = true;
        loop {
            let mut data = Vec::with_capacity(PIECE);
            (&mut file)
                .take(PIECE as u64)
                .read_to_end(&mut data)
                .map_err(|e| e.to_string())?;
            let filled = data.len();
            let piece = SnapshotPiece {
                from: if first { from } else { 0 },
                to: if first { to } else { 0 },
                descriptor: if first { d.encode() } else { Vec::new() },
                data,
            };
            let last = filled < PIECE;
            if tx.blocking_send(piece).is_err() {
                return Ok(());
            }
            if last {
                return Ok(());
            }
            first = false;
        }
    });
    let mut request = Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    if let Some(t) = token {
        request.metadata_mut().insert("authorization", t.clone());
    }
    let pushed = tokio::time::timeout(
        push_timeout(d.len),
        ReplicationClient::new(channel).push_snapshot(request),
    )
    .await;
    let read = reader.await.map_err(|e| e.to_string())?;
    match pushed {
        Err(_) => Err(format!("not sent within {:?}", push_timeout(d.len))),
        Ok(Err(status)) => Err(causes(&status)),
        Ok(Ok(_)) => read,
    }
}

async fn send_to_peer(
    mut link: PeerLink,
    token: Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<ClientTlsConfig>,
    files: SnapshotFiles,
) {
    let mut client: Option<ReplicationClient<tonic::transport::Channel>> = None;
    // Whether calls to the peer failed since the last one that worked (and the first failure was logged).
    let mut failing = false;
    while let Some(first) = link.queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match link.queue.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        // A snapshot's file goes first; a snapshot whose file does not get there is not sent, and raft is told
        // it failed (it tries again later).
        let mut failed_snapshots = 0;
        let mut kept = Vec::with_capacity(batch.len());
        for m in batch {
            let file = m.snapshot.as_deref().and_then(Descriptor::decode);
            if let Some(d) = file {
                if let Err(why) = push_file(&link, &token, tls.as_ref(), &files, d).await {
                    tracing::warn!(
                        peer = link.to,
                        bytes = d.len,
                        "a snapshot file was not sent: {why}"
                    );
                    failed_snapshots += 1;
                    continue;
                }
            }
            kept.push(m);
        }
        let batch = kept;
        for _ in 0..failed_snapshots {
            if link.feedback.snapshot(link.to, false).await.is_err() {
                return;
            }
        }
        if batch.is_empty() {
            continue;
        }
        let snapshots = batch.iter().filter(|m| m.snapshot.is_some()).count();
        if client.is_none() {
            client = match peer_endpoint(&link.url, tls.as_ref()) {
                Ok(e) => match e.connect().await {
                    Ok(c) => {
                        Some(ReplicationClient::new(c).max_encoding_message_size(MAX_STEP_BYTES))
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(peer = link.to, url = %link.url, "cannot connect to a member: {}", causes(&e));
                        }
                        failing = true;
                        None
                    }
                },
                Err(e) => {
                    tracing::error!(
                        "member {}'s address {:?} cannot be called: {e}",
                        link.to,
                        link.url
                    );
                    return;
                }
            };
        }
        let sent = match client.as_mut() {
            Some(c) => {
                let bytes = batch.iter().map(|m| m.bytes.len()).sum();
                let mut request = Request::new(StepRequest {
                    from: link.from,
                    to: link.to,
                    messages: batch.into_iter().map(|m| m.bytes).collect(),
                });
                if let Some(t) = &token {
                    request.metadata_mut().insert("authorization", t.clone());
                }
                match sweep_proto::deadline::within(step_timeout(bytes), c.step(request)).await {
                    Ok(_) => {
                        failing = false;
                        true
                    }
                    Err(e) => {
                        // Warned once per outage: a member that is down stays so for a while, but a refused
                        // TLS handshake or token never heals by itself and must show at the default level.
                        if !failing {
                            tracing::warn!(peer = link.to, url = %link.url, "a call to a member failed: {}", causes(&e));
                        }
                        failing = true;
                        false
                    }
                }
            }
            None => false,
        };
        for _ in 0..snapshots {
            if link.feedback.snapshot(link.to, sent).await.is_err() {
                return;
            }
        }
        if !sent {
            client = None;
            if link.feedback.unreachable(link.to).await.is_err() {
                return;
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}

/// An error with its causes, as one line, each said once: tonic's transport errors say only "transport error"
/// themselves, and the causes below them often repeat each other. A status is its message and causes.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let text = match err.downcast_ref::<Status>() {
            Some(s) => s.message().to_string(),
            None => err.to_string(),
        };
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = err.source();
    }
    parts.join(": ")
}
