//! The real worker follows the leader of a replicated coordinator, here a fake one served in this process on
//! loopback: two members sharing one state (as replicas do), of which one leads at a time, plus a member where
//! nothing listens. Halfway through the job the leader stores a batch of results, loses its leadership and its
//! answer: the worker must move to the new leader, register there, send the unacknowledged results again (each
//! stored once, the resent ones acknowledged as duplicates) and finish every chunk.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sweep_proto::v1::{self, work_server};
use sweep_space::Registry;
use sweep_worker::WorkerConfig;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// Chunks of the job the fake coordinator hands out.
const CHUNKS: u64 = 40;

/// Star with 6 points by brute force: quick chunks.
fn params() -> String {
    serde_json::json!({"points": 6, "method": "brute"}).to_string()
}

/// What the members share, as replicas of one coordinator would.
#[derive(Default)]
struct Cluster {
    /// The members' URLs, and which one leads.
    urls: Vec<String>,
    leader: usize,
    /// Chunks not leased yet (or handed back).
    pending: VecDeque<u64>,
    next_lease: u64,
    /// Chunk of each lease granted.
    leases: HashMap<u64, u64>,
    /// Chunks stored, and the nodes their report counted.
    done: BTreeMap<u64, u64>,
    accepted: usize,
    duplicates: usize,
    /// Registrations, by the member that took them.
    registered: Vec<usize>,
    /// Whether the leader already stepped down halfway.
    stepped_down: bool,
}

#[derive(Clone)]
struct Member {
    index: usize,
    cluster: Arc<Mutex<Cluster>>,
}

type Answer<T> = Result<Response<T>, Status>;

impl Member {
    /// The shared state if this member leads, or the not-leader answer naming the leader.
    fn lead(&self) -> Result<std::sync::MutexGuard<'_, Cluster>, Status> {
        let c = self.cluster.lock().unwrap();
        if c.leader != self.index {
            return Err(sweep_proto::not_leader(Some(&c.urls[c.leader])));
        }
        Ok(c)
    }
}

#[tonic::async_trait]
impl work_server::Work for Member {
    async fn register(&self, req: Request<v1::RegisterRequest>) -> Answer<v1::RegisterResponse> {
        let mut c = self.lead()?;
        c.registered.push(self.index);
        Ok(Response::new(v1::RegisterResponse {
            worker_id: req.into_inner().name,
            heartbeat_interval_ms: 100,
            lease_ttl_ms: 60_000,
        }))
    }

    async fn lease(&self, req: Request<v1::LeaseRequest>) -> Answer<v1::LeaseResponse> {
        let mut c = self.lead()?;
        if c.done.len() as u64 == CHUNKS {
            return Ok(Response::new(v1::LeaseResponse {
                drain: true,
                ..Default::default()
            }));
        }
        let mut leases = Vec::new();
        for _ in 0..req.into_inner().max_chunks {
            let Some(chunk) = c.pending.pop_front() else {
                break;
            };
            c.next_lease += 1;
            let lease_id = c.next_lease;
            c.leases.insert(lease_id, chunk);
            leases.push(v1::ChunkLease {
                lease_id,
                job_id: 1,
                space: "star".into(),
                params_json: params(),
                n_chunks: CHUNKS,
                chunk,
                ..Default::default()
            });
        }
        Ok(Response::new(v1::LeaseResponse {
            leases,
            retry_after_ms: 20,
            ..Default::default()
        }))
    }

    async fn heartbeat(&self, _: Request<v1::HeartbeatRequest>) -> Answer<v1::HeartbeatResponse> {
        drop(self.lead()?);
        Ok(Response::new(v1::HeartbeatResponse::default()))
    }

    async fn complete(&self, req: Request<v1::CompleteRequest>) -> Answer<v1::CompleteResponse> {
        let mut c = self.lead()?;
        let mut acks = Vec::new();
        for r in req.into_inner().reports {
            let chunk = c.leases[&r.lease_id];
            let status = match c.done.entry(chunk) {
                Entry::Occupied(_) => {
                    c.duplicates += 1;
                    v1::AckStatus::Duplicate
                }
                Entry::Vacant(e) => {
                    e.insert(r.output.map_or(0, |o| o.nodes));
                    c.accepted += 1;
                    v1::AckStatus::Accepted
                }
            };
            acks.push(v1::ReportAck {
                lease_id: r.lease_id,
                status: status as i32,
                message: String::new(),
            });
        }
        // Halfway: this batch is stored, then the leader loses its leadership and the answer is lost, as when a
        // member goes away mid-call. The other member leads from now on.
        if !c.stepped_down && c.done.len() as u64 >= CHUNKS / 2 {
            c.stepped_down = true;
            c.leader = 1 - self.index;
            return Err(Status::unavailable("connection reset by peer"));
        }
        Ok(Response::new(v1::CompleteResponse { acks }))
    }

    async fn fail(&self, req: Request<v1::FailRequest>) -> Answer<v1::FailResponse> {
        let mut c = self.lead()?;
        let chunk = c.leases[&req.into_inner().lease_id];
        c.pending.push_back(chunk);
        Ok(Response::new(v1::FailResponse::default()))
    }

    /// The fake's space does not split, so no worker sends this.
    async fn split(&self, _: Request<v1::SplitRequest>) -> Answer<v1::SplitResponse> {
        Err(Status::unimplemented(
            "this fake coordinator records no splits",
        ))
    }

    type FetchArtifactStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<v1::ArtifactPiece, Status>>>;

    async fn fetch_artifact(
        &self,
        _: Request<v1::FetchArtifactRequest>,
    ) -> Answer<Self::FetchArtifactStream> {
        drop(self.lead()?);
        Err(Status::unimplemented("no artifacts here"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_follows_the_leader_and_resends_what_was_not_acknowledged() {
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = |l: &tokio::net::TcpListener| format!("http://{}", l.local_addr().unwrap());
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let cluster = Arc::new(Mutex::new(Cluster {
        urls: vec![url(&a), url(&b)],
        // B leads first: the worker, given [dead, A, B], is turned away by A and told where B is.
        leader: 1,
        pending: (0..CHUNKS).collect(),
        ..Default::default()
    }));
    let members = format!("{dead}, {}, {}", url(&a), url(&b));
    for (index, listener) in [a, b].into_iter().enumerate() {
        let member = Member {
            index,
            cluster: cluster.clone(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(work_server::WorkServer::new(member))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
    }
    let cfg = WorkerConfig {
        name: "w1".into(),
        ..WorkerConfig::new(members, 2, Registry::new().with::<sweep_star::Star>())
    };
    // The leader drains the worker once every chunk is stored; a worker that lost its way never would.
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        sweep_worker::run(cfg, std::future::pending()),
    )
    .await
    .expect("the worker finished the job and was drained")
    .unwrap();

    let c = cluster.lock().unwrap();
    assert!(c.stepped_down);
    assert_eq!(c.done.len() as u64, CHUNKS, "every chunk stored");
    assert_eq!(c.accepted as u64, CHUNKS, "each once");
    assert!(
        c.duplicates >= 1,
        "the batch whose answer was lost was sent again"
    );
    assert_eq!(stats.chunks_done, CHUNKS, "each chunk run once");
    // The chunks' nodes add up to the job's: every permutation once.
    let job = Registry::new()
        .with::<sweep_star::Star>()
        .job_from_params("star", &serde_json::from_str(&params()).unwrap())
        .unwrap();
    let total = job.plan(Some(CHUNKS)).unwrap().total_nodes.unwrap();
    assert_eq!(u128::from(c.done.values().sum::<u64>()), total);
    // Registered with B, then again with A once it led.
    assert_eq!(c.registered.first(), Some(&1), "{:?}", c.registered);
    assert_eq!(c.registered.last(), Some(&0), "{:?}", c.registered);
}
