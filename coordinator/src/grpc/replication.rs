//! The network side of a replicated coordinator's member (`crate::replica`): the `Replication` service, which
//! passes arriving messages to the member's inbox, and a sender per peer, which carries the member's messages
//! in order, batching whatever queued up while a call was in flight. Members at `https://` URLs are called
//! over TLS, with this member's certificate as its client identity when the others require one.

use std::sync::Arc;
use std::time::Duration;

use sweep_proto::v1::replication_client::ReplicationClient;
use sweep_proto::v1::replication_server::{Replication, ReplicationServer};
use sweep_proto::v1::{StepReply, StepRequest};
use tonic::transport::{ClientTlsConfig, Endpoint};
use tonic::{Request, Response, Status};

use crate::replica::{Carrier, Inbox, PeerLink};

/// Messages sent in one call at most.
const BATCH: usize = 256;
/// How long a sender waits before trying a peer that failed again.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long one call to a peer may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest call between members: a consensus entry carries a group commit whole, artifacts and shipped
/// programs (up to 1 GiB) included, and gRPC frames a message with a 32-bit length.
pub const MAX_STEP_BYTES: usize = (2 << 30) - 1;

/// The `Replication` service of one member.
pub struct ReplicationApi(pub Inbox);

impl ReplicationApi {
    pub fn into_server(self) -> ReplicationServer<ReplicationApi> {
        ReplicationServer::new(self).max_decoding_message_size(MAX_STEP_BYTES)
    }
}

#[tonic::async_trait]
impl Replication for ReplicationApi {
    async fn step(&self, request: Request<StepRequest>) -> Result<Response<StepReply>, Status> {
        let req = request.into_inner();
        if req.to != self.0.id() {
            return Err(Status::invalid_argument(format!(
                "messages for member {} reached member {}",
                req.to,
                self.0.id()
            )));
        }
        self.0
            .deliver(req.messages)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(StepReply {}))
    }
}

/// What starts a sender task for each peer link. `token` is sent as the `authorization` value of every call
/// (members of a group with token files call each other with an admin token). `tls` is how members at
/// `https://` URLs are called: the CA that signed their certificates and, for members that require client
/// certificates, this member's own certificate as its identity. A member at an `https://` URL without it is
/// not called (the group's flags are checked before this, so that is a bug, logged).
pub fn carrier(
    token: Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<ClientTlsConfig>,
) -> Carrier {
    Arc::new(move |link| {
        tokio::spawn(send_to_peer(link, token.clone(), tls.clone()));
    })
}

/// The endpoint of a peer at `url`: over TLS as `tls` says for an `https://` URL, plain for `http://`.
fn peer_endpoint(url: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(url.to_string()).map_err(|e| e.to_string())?;
    if !url.starts_with("https://") {
        return Ok(endpoint);
    }
    let tls = tls.ok_or("it is https:// but this member has no TLS settings for its peers")?;
    endpoint.tls_config(tls.clone()).map_err(|e| e.to_string())
}

async fn send_to_peer(
    mut link: PeerLink,
    token: Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<ClientTlsConfig>,
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
        let snapshots = batch.iter().filter(|m| m.snapshot).count();
        if client.is_none() {
            client = match peer_endpoint(&link.url, tls.as_ref()) {
                Ok(e) => match e
                    .timeout(CALL_TIMEOUT)
                    .connect_timeout(CALL_TIMEOUT)
                    .connect()
                    .await
                {
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
                let mut request = Request::new(StepRequest {
                    from: link.from,
                    to: link.to,
                    messages: batch.into_iter().map(|m| m.bytes).collect(),
                });
                if let Some(t) = &token {
                    request.metadata_mut().insert("authorization", t.clone());
                }
                match c.step(request).await {
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
