//! The network side of a replicated coordinator's member (`crate::replica`): the `Replication` service, which
//! passes arriving messages to the member's inbox, and a sender per peer, which carries the member's messages
//! in order, batching whatever queued up while a call was in flight.

use std::sync::Arc;
use std::time::Duration;

use sweep_proto::v1::replication_client::ReplicationClient;
use sweep_proto::v1::replication_server::{Replication, ReplicationServer};
use sweep_proto::v1::{StepReply, StepRequest};
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
/// (members of a group with token files call each other with an admin token).
pub fn carrier(token: Option<tonic::metadata::AsciiMetadataValue>) -> Carrier {
    Arc::new(move |link| {
        tokio::spawn(send_to_peer(link, token.clone()));
    })
}

async fn send_to_peer(mut link: PeerLink, token: Option<tonic::metadata::AsciiMetadataValue>) {
    let mut client: Option<ReplicationClient<tonic::transport::Channel>> = None;
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
            client = match tonic::transport::Endpoint::from_shared(link.url.clone()) {
                Ok(e) => e
                    .timeout(CALL_TIMEOUT)
                    .connect_timeout(CALL_TIMEOUT)
                    .connect()
                    .await
                    .ok()
                    .map(|c| ReplicationClient::new(c).max_encoding_message_size(MAX_STEP_BYTES)),
                Err(e) => {
                    tracing::error!(
                        "member {}'s address {:?} is not a URL: {e}",
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
                    Ok(_) => true,
                    Err(e) => {
                        tracing::debug!(peer = link.to, "a call to a member failed: {e}");
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
