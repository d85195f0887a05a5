//! The `Work` service: what workers call (register, lease, heartbeat, complete, fail, fetch an artifact).

use sweep_proto::v1::{self, work_server};
use sweep_space::ChunkOutput;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::info;

use super::convert::{self, identity};
use super::status::status;
use crate::coordinator::Report;
use crate::core::{LeaseAnswer, LeaseProgress, Registration, SplitRequest};

/// Artifacts travel in pieces well under the message limit.
const ARTIFACT_PIECE_BYTES: usize = 1 << 20;

#[derive(Clone)]
pub struct WorkApi(pub(super) super::Backend);

#[tonic::async_trait]
impl work_server::Work for WorkApi {
    type FetchArtifactStream = ReceiverStream<Result<v1::ArtifactPiece, Status>>;

    async fn fetch_artifact(
        &self,
        req: Request<v1::FetchArtifactRequest>,
    ) -> Result<Response<Self::FetchArtifactStream>, Status> {
        let req = req.into_inner();
        let coord = self.0.coord()?;
        let (bytes, digest) = if req.job_id == 0 {
            coord.shipped(&req.digest).await
        } else {
            coord.artifact(req.job_id).await
        }
        .map_err(status)?;
        info!(worker = %req.worker_id, job = req.job_id, bytes = bytes.len(), "serving artifact");
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stopping = coord.stopping();
        tokio::spawn(async move {
            let total = bytes.len() as u64;
            let mut offset = 0usize;
            // An empty artifact still gets one piece, so the reader learns the total and digest.
            loop {
                let end = (offset + ARTIFACT_PIECE_BYTES).min(bytes.len());
                let piece = v1::ArtifactPiece {
                    offset: offset as u64,
                    total,
                    digest: digest.clone(),
                    data: bytes[offset..end].to_vec(),
                };
                tokio::select! {
                    sent = tx.send(Ok(piece)) => if sent.is_err() { return },
                    _ = stopping.wait_for(|s| *s) => return,
                }
                offset = end;
                if offset >= bytes.len() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn register(
        &self,
        req: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        let identity = identity(&req);
        let req = req.into_inner();
        let (worker_id, ttl) = self.0.coord()?.register(Registration {
            name: req.name,
            identity,
            threads: req.threads,
            memory_bytes: req.memory_bytes,
            version: req.version,
            spaces: req.spaces,
            containment: req.containment,
        });
        Ok(Response::new(v1::RegisterResponse {
            worker_id,
            heartbeat_interval_ms: (ttl / 4).max(50),
            lease_ttl_ms: ttl,
        }))
    }

    async fn lease(
        &self,
        req: Request<v1::LeaseRequest>,
    ) -> Result<Response<v1::LeaseResponse>, Status> {
        let (coord, term) = self.0.fenced(&req)?;
        let req = req.into_inner();
        let (answer, retry_after_ms) = coord
            .lease(&req.worker_id, req.max_chunks, req.request_id)
            .await
            .map_err(status)?;
        let mut resp = v1::LeaseResponse {
            retry_after_ms: u64::from(retry_after_ms),
            ..Default::default()
        };
        match answer {
            LeaseAnswer::Chunks(leases) => {
                resp.leases = leases
                    .into_iter()
                    .map(|l| v1::ChunkLease {
                        term,
                        ..convert::chunk_lease(l)
                    })
                    .collect()
            }
            LeaseAnswer::Drain => resp.drain = true,
            LeaseAnswer::RegisterAgain => resp.register_again = true,
        }
        Ok(Response::new(resp))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let (coord, _) = self.0.fenced(&req)?;
        let req = req.into_inner();
        let progress = req
            .progress
            .into_iter()
            .map(|p| LeaseProgress {
                lease: p.lease_id,
                nodes: p.nodes,
                checkpoint: p.checkpoint,
                generation: p.generation,
            })
            .collect();
        let beat = coord.heartbeat(&req.worker_id, progress).map_err(status)?;
        Ok(Response::new(v1::HeartbeatResponse {
            revoked: beat.revoked,
            register_again: beat.register_again,
            split: beat.split,
        }))
    }

    async fn complete(
        &self,
        req: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::CompleteResponse>, Status> {
        let (coord, _) = self.0.fenced(&req)?;
        let req = req.into_inner();
        let reports = req
            .reports
            .into_iter()
            .map(|r| Report {
                lease: r.lease_id,
                job: r.job_id,
                chunk: r.chunk,
                generation: r.generation,
                output: match r.output {
                    None => Err("report without output".to_string()),
                    Some(wire) => ChunkOutput::try_from(wire).map_err(|e| e.to_string()),
                },
            })
            .collect();
        let acks = coord
            .complete(&req.worker_id, reports)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::CompleteResponse {
            acks: acks.into_iter().map(convert::report_ack).collect(),
        }))
    }

    async fn fail(
        &self,
        req: Request<v1::FailRequest>,
    ) -> Result<Response<v1::FailResponse>, Status> {
        let (coord, _) = self.0.fenced(&req)?;
        let req = req.into_inner();
        let poisoned = coord
            .fail(
                &req.worker_id,
                req.lease_id,
                req.release,
                &req.error,
                req.checkpoint.map(|c| (c, req.generation)),
            )
            .await
            .map_err(status)?;
        Ok(Response::new(v1::FailResponse { poisoned }))
    }

    async fn split(
        &self,
        req: Request<v1::SplitRequest>,
    ) -> Result<Response<v1::SplitResponse>, Status> {
        let (coord, term) = self.0.fenced(&req)?;
        let req = req.into_inner();
        let answer = coord
            .split(
                &req.worker_id,
                SplitRequest {
                    lease: req.lease_id,
                    generation: req.generation,
                    kept: req.kept,
                    given: req.given,
                    take: req.take,
                },
            )
            .await
            .map_err(status)?;
        Ok(Response::new(v1::SplitResponse {
            piece: answer.piece,
            lease: answer.lease.map(|l| v1::ChunkLease {
                term,
                ..convert::chunk_lease(l)
            }),
        }))
    }
}
