//! A scripted worker: one method per `Work` call, sending exactly what the test says.

use sweep_client::WorkClient;
use sweep_proto::v1;
use sweep_space::{ChunkId, Registry};
use tonic::Status;

/// The report of `lease` with `output`.
pub fn report(lease: &v1::ChunkLease, output: v1::ChunkOutput) -> v1::ChunkReport {
    v1::ChunkReport {
        lease_id: lease.lease_id,
        job_id: lease.job_id,
        chunk: lease.slot,
        output: Some(output),
        elapsed_s: 0.0,
        generation: lease.generation,
    }
}

/// The true output of a leased chunk of a test space ([`crate::spaces`]), computed here with the real kernel.
pub fn run_lease(lease: &v1::ChunkLease) -> v1::ChunkOutput {
    let job = crate::spaces()
        .job_from_params(
            &lease.space,
            &serde_json::from_str(&lease.params_json).expect("params are JSON"),
        )
        .expect("a leased job builds");
    // A piece of a split chunk, or a resumed one, starts where its lease says.
    let start = (!lease.checkpoint.is_empty()).then(|| lease.checkpoint.clone());
    let out = job
        .run_chunk(
            ChunkId::new(lease.n_chunks, lease.chunk),
            sweep_space::ChunkControl::new(start).control(),
        )
        .expect("the chunk runs");
    v1::ChunkOutput::from(&out)
}

/// A scripted worker: its id and its `sweep-client` `Work` client. Each method is one call, returning what the
/// coordinator answered.
pub struct FakeWorker {
    pub work: WorkClient,
    pub id: String,
    /// What it registered with, sent again by [`FakeWorker::register_again`].
    pub registration: v1::RegisterRequest,
}

impl FakeWorker {
    /// Registers `name` for every space of `registry`.
    pub async fn register(
        work: WorkClient,
        name: &str,
        registry: &Registry,
    ) -> Result<FakeWorker, Status> {
        FakeWorker::register_as(
            work,
            v1::RegisterRequest {
                name: name.into(),
                spaces: crate::space_names(registry),
                ..Default::default()
            },
        )
        .await
    }

    /// Registers with exactly `registration`.
    pub async fn register_as(
        work: WorkClient,
        registration: v1::RegisterRequest,
    ) -> Result<FakeWorker, Status> {
        let mut w = FakeWorker::unregistered(work, "", registration);
        w.register_again().await?;
        Ok(w)
    }

    /// A worker that has not registered yet but calls itself `id` (as a worker whose coordinator restarted
    /// does): its first lease may be answered with `register_again`.
    pub fn unregistered(
        work: WorkClient,
        id: &str,
        registration: v1::RegisterRequest,
    ) -> FakeWorker {
        FakeWorker {
            work,
            id: id.into(),
            registration,
        }
    }

    /// Registers again with the same request (as a worker does when the coordinator asks it to, after a
    /// restart); keeps and returns the id.
    pub async fn register_again(&mut self) -> Result<String, Status> {
        let answer = self.work.register(self.registration.clone()).await?;
        self.id = answer.into_inner().worker_id;
        Ok(self.id.clone())
    }

    /// Asks for up to `max` chunks.
    pub async fn lease(&mut self, max: u32) -> Result<Vec<v1::ChunkLease>, Status> {
        Ok(self.lease_response(max).await?.leases)
    }

    /// Asks for up to `max` chunks and returns the whole answer (`register_again` included).
    pub async fn lease_response(&mut self, max: u32) -> Result<v1::LeaseResponse, Status> {
        let req = v1::LeaseRequest {
            worker_id: self.id.clone(),
            max_chunks: max,
            request_id: 0,
        };
        Ok(self.work.lease(req).await?.into_inner())
    }

    /// Reports progress on leases; returns the leases the coordinator revoked.
    pub async fn heartbeat(
        &mut self,
        progress: Vec<v1::LeaseProgress>,
    ) -> Result<Vec<u64>, Status> {
        let req = v1::HeartbeatRequest {
            worker_id: self.id.clone(),
            progress,
        };
        Ok(self.work.heartbeat(req).await?.into_inner().revoked)
    }

    /// Reports finished chunks; returns one acknowledgement per report.
    pub async fn complete(
        &mut self,
        reports: Vec<v1::ChunkReport>,
    ) -> Result<Vec<v1::ReportAck>, Status> {
        let req = v1::CompleteRequest {
            worker_id: self.id.clone(),
            reports,
        };
        Ok(self.work.complete(req).await?.into_inner().acks)
    }

    /// Reports one finished chunk; returns its acknowledgement.
    pub async fn complete_one(
        &mut self,
        lease: &v1::ChunkLease,
        output: v1::ChunkOutput,
    ) -> Result<v1::ReportAck, Status> {
        let mut acks = self.complete(vec![report(lease, output)]).await?;
        assert_eq!(acks.len(), 1, "one acknowledgement per report");
        Ok(acks.remove(0))
    }

    /// Reports that `lease`'s chunk failed with `error` (or, with `release`, is handed back unrun).
    pub async fn fail(
        &mut self,
        lease: &v1::ChunkLease,
        error: &str,
        release: bool,
    ) -> Result<(), Status> {
        let req = v1::FailRequest {
            worker_id: self.id.clone(),
            lease_id: lease.lease_id,
            error: error.into(),
            release,
            checkpoint: None,
            generation: lease.generation,
        };
        self.work.fail(req).await?;
        Ok(())
    }

    /// Leases up to `n` chunks one at a time, runs each with the real kernel and reports it; returns how many
    /// were accepted. Stops early when no chunk is offered.
    pub async fn run_chunks(&mut self, n: usize) -> Result<usize, Status> {
        let mut accepted = 0;
        for _ in 0..n {
            let Some(lease) = self.lease(1).await?.into_iter().next() else {
                break;
            };
            let out = run_lease(&lease);
            let ack = self.complete_one(&lease, out).await?;
            accepted += usize::from(ack.status() == v1::AckStatus::Accepted);
        }
        Ok(accepted)
    }
}
