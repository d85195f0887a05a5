//! The `Jobs` service: what people and their tools call (ship, submit, list, status, watch, results, cancel,
//! pause, resume, workers, drain).

use std::time::Duration;

use sweep_proto::v1::{self, jobs_server};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::convert;
use super::status::{change_status, status};
use crate::coordinator::MAX_SHIPPED_BYTES;
use crate::core::SubmitSpec;

#[derive(Clone)]
pub struct JobsApi(pub(super) super::Backend);

#[tonic::async_trait]
impl jobs_server::Jobs for JobsApi {
    async fn ship(
        &self,
        req: Request<tonic::Streaming<v1::ArtifactPiece>>,
    ) -> Result<Response<v1::ShipResponse>, Status> {
        let mut stream = req.into_inner();
        let mut bytes: Vec<u8> = Vec::new();
        let mut want: Option<(String, u64)> = None;
        while let Some(piece) = stream.message().await? {
            let (digest, total) = want.get_or_insert_with(|| (piece.digest.clone(), piece.total));
            if piece.digest != *digest
                || piece.total != *total
                || piece.offset != bytes.len() as u64
            {
                return Err(Status::invalid_argument(
                    "shipped pieces out of order, or with another digest or size",
                ));
            }
            // Checked before buffering: a client must not make the coordinator hold more than it may store.
            if *total > MAX_SHIPPED_BYTES {
                return Err(Status::invalid_argument(format!(
                    "a shipped file may have at most {MAX_SHIPPED_BYTES} bytes, this one has {total}"
                )));
            }
            if bytes.len() as u64 + piece.data.len() as u64 > *total {
                return Err(Status::invalid_argument("more bytes than the file's size"));
            }
            bytes.extend_from_slice(&piece.data);
        }
        let Some((digest, total)) = want else {
            return Err(Status::invalid_argument("no file was sent"));
        };
        if bytes.len() as u64 != total {
            return Err(Status::invalid_argument(format!(
                "the file has {} of its {total} bytes",
                bytes.len()
            )));
        }
        let n = bytes.len() as u64;
        let existing = self.0.coord()?.ship(&digest, bytes).await.map_err(status)?;
        Ok(Response::new(v1::ShipResponse {
            digest,
            bytes: n,
            existing,
        }))
    }

    async fn submit(
        &self,
        req: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        let owner = convert::identity(&req).unwrap_or_default();
        let admin = convert::is_admin(&req);
        let req = req.into_inner();
        let (job, existing) = self
            .0
            .coord()?
            .submit(SubmitSpec {
                share: req.share,
                chunk_hint_ms: req.chunk_time_hint_ms,
                owner,
                admin,
                space: req.space,
                params_json: req.params_json,
                chunks: req.chunks,
                priority: req.priority,
                reuse_existing: req.reuse_existing,
                replicate: req.replicate,
                count_only: req.count_only,
                max_attempts: req.max_attempts,
            })
            .await
            .map_err(status)?;
        Ok(Response::new(v1::SubmitResponse {
            job: Some(convert::job_info(job)),
            existing,
        }))
    }

    async fn list_jobs(
        &self,
        _: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let (jobs, workers, identities) = self.0.coord()?.jobs().await.map_err(status)?;
        Ok(Response::new(v1::ListJobsResponse {
            jobs: jobs.into_iter().map(convert::job_info).collect(),
            workers,
            identities: identities.into_iter().map(convert::identity_info).collect(),
        }))
    }

    async fn job_status(
        &self,
        req: Request<v1::JobRequest>,
    ) -> Result<Response<v1::JobInfo>, Status> {
        let job = self
            .0
            .coord()?
            .job(req.into_inner().job_id)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::job_info(job)))
    }

    type WatchStream = ReceiverStream<Result<v1::WatchEvent, Status>>;

    async fn watch(
        &self,
        req: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = req.into_inner();
        let coord = self.0.coord()?;
        if req.job_id != 0 {
            coord.job_now(req.job_id).map_err(status)?;
        }
        let interval = Duration::from_millis(
            req.interval_ms
                .clamp(50, 60_000)
                .max(if req.interval_ms == 0 { 500 } else { 50 }),
        );
        let (slot, mut changes) = coord.open_watch().map_err(status)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stopping = coord.stopping();
        tokio::spawn(async move {
            // Held while the stream lives: the slot frees when the client goes away.
            let _slot = slot;
            let mut tick = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = changes.changed() => {}
                    _ = stopping.wait_for(|s| *s) => break,
                }
                let (jobs, workers) = coord.watch_event(req.job_id);
                let event = v1::WatchEvent {
                    jobs: jobs.into_iter().map(convert::job_info).collect(),
                    workers,
                };
                if tx.send(Ok(event)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn results(
        &self,
        req: Request<v1::ResultsRequest>,
    ) -> Result<Response<v1::ResultsResponse>, Status> {
        let req = req.into_inner();
        // An unknown form (a newer client) reads as BOTH: more than asked, never less.
        let form = req.form();
        let r = self.0.coord()?.results(req.job_id).await.map_err(status)?;
        let send_json = form != v1::AnswerForm::Text || r.result.text.is_empty();
        let send_text = form != v1::AnswerForm::Json;
        Ok(Response::new(v1::ResultsResponse {
            job: Some(convert::job_info(r.job)),
            result_json: if send_json {
                r.result.json.to_string()
            } else {
                String::new()
            },
            result_text: if send_text {
                r.result.text.to_string()
            } else {
                String::new()
            },
            poisoned: r
                .poisoned
                .into_iter()
                .map(convert::poisoned_chunk)
                .collect(),
        }))
    }

    type SolutionsStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v1::SolutionsPiece, Status>> + Send>,
    >;

    async fn solutions(
        &self,
        req: Request<v1::JobRequest>,
    ) -> Result<Response<Self::SolutionsStream>, Status> {
        use tokio_stream::StreamExt;
        let rx = self
            .0
            .coord()?
            .solutions(req.into_inner().job_id)
            .await
            .map_err(status)?;
        let pieces = ReceiverStream::new(rx).map(|piece| {
            piece
                .map(|(chunk, solutions)| v1::SolutionsPiece { solutions, chunk })
                .map_err(status)
        });
        Ok(Response::new(Box::pin(pieces)))
    }

    async fn cancel(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let by = convert::actor(&req);
        let job = self
            .0
            .coord()?
            .cancel(req.into_inner().job_id, &by)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::job_info(job)))
    }

    async fn pause(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let by = convert::actor(&req);
        let job = self
            .0
            .coord()?
            .pause(req.into_inner().job_id, &by)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::job_info(job)))
    }

    async fn resume(&self, req: Request<v1::JobRequest>) -> Result<Response<v1::JobInfo>, Status> {
        let by = convert::actor(&req);
        let job = self
            .0
            .coord()?
            .resume(req.into_inner().job_id, &by)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::job_info(job)))
    }

    async fn list_workers(
        &self,
        _: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersResponse>, Status> {
        let workers = self
            .0
            .coord()?
            .workers()
            .into_iter()
            .map(convert::worker_status)
            .collect();
        Ok(Response::new(v1::ListWorkersResponse { workers }))
    }

    async fn drain(
        &self,
        req: Request<v1::DrainRequest>,
    ) -> Result<Response<v1::WorkerStatus>, Status> {
        let w = self
            .0
            .coord()?
            .drain(&req.into_inner().worker)
            .map_err(status)?;
        Ok(Response::new(convert::worker_status(w)))
    }

    async fn members(
        &self,
        _req: Request<v1::MembersRequest>,
    ) -> Result<Response<v1::MembersReply>, Status> {
        let super::Backend::Member(l) = &self.0 else {
            return Ok(Response::new(v1::MembersReply {
                serving: true,
                ..Default::default()
            }));
        };
        let v = l.view();
        Ok(Response::new(v1::MembersReply {
            id: v.id,
            term: v.term,
            leader: v.leader.unwrap_or(0),
            applied: v.applied,
            last_index: v.last_index,
            serving: v.serving,
            members: v
                .members
                .into_iter()
                .map(|m| v1::MemberInfo {
                    id: m.id,
                    url: m.url,
                    matched: m.matched.unwrap_or(0),
                })
                .collect(),
        }))
    }

    async fn add_member(
        &self,
        req: Request<v1::AddMemberRequest>,
    ) -> Result<Response<v1::AddMemberReply>, Status> {
        let l = self.leadership()?;
        let url = req.into_inner().url;
        let url = sweep_proto::member_url(&url)
            .map_err(|e| Status::invalid_argument(format!("member URL `{url}` {e}")))?;
        let (id, urls) = l.add_member(url).await.map_err(change_status)?;
        Ok(Response::new(v1::AddMemberReply {
            id,
            members: member_infos(&urls),
        }))
    }

    async fn remove_member(
        &self,
        req: Request<v1::RemoveMemberRequest>,
    ) -> Result<Response<v1::MembersReply>, Status> {
        let l = self.leadership()?;
        let id = req.into_inner().id;
        if id == 0 {
            return Err(Status::invalid_argument("member ids start at 1"));
        }
        l.remove_member(id).await.map_err(change_status)?;
        self.members(Request::new(v1::MembersRequest {})).await
    }

    async fn set_share(
        &self,
        req: Request<v1::SetShareRequest>,
    ) -> Result<Response<v1::IdentityInfo>, Status> {
        let req = req.into_inner();
        let u = self
            .0
            .coord()?
            .set_share(&req.identity, req.share)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::identity_info(u)))
    }
}

impl JobsApi {
    fn leadership(&self) -> Result<&std::sync::Arc<crate::member::Leadership>, Status> {
        match &self.0 {
            super::Backend::Member(l) => Ok(l),
            super::Backend::Single(_) => Err(Status::failed_precondition(
                "this is a single coordinator, not a member of a replicated one: it has no members to change",
            )),
        }
    }
}

fn member_infos(urls: &std::collections::BTreeMap<u64, String>) -> Vec<v1::MemberInfo> {
    urls.iter()
        .map(|(&id, url)| v1::MemberInfo {
            id,
            url: url.clone(),
            matched: 0,
        })
        .collect()
}
