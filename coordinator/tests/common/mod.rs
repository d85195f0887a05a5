//! The harness of every test in this directory: one in-process coordinator serving gRPC (and, when asked, its
//! HTTP page and metrics) on loopback port 0, and one scripted fake worker that speaks the Work service a call at
//! a time (register, lease, heartbeat, complete, fail), so a test can put the coordinator in any state it wants.
//!
//! - [`Server::start`] / [`Server::start_with`]: a [`Coordinator`] opened on a store, served until [`Server::stop`].
//! - [`config`]: the configuration the tests run with (the built-in spaces, a lease time, attempts).
//! - [`FakeWorker`]: a registered worker id and its client; [`FakeWorker::run_chunks`] runs leased chunks with
//!   the real kernels, the other methods send exactly what the test says.
//! - [`Bearer`]: the token interceptor every client here goes through (no token: nothing is sent).

#![allow(dead_code)] // each test file uses a different part of the harness

use std::net::SocketAddr;
use std::time::Duration;

use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::store::Store;
use sweep_coordinator::{serve, Coordinator, CoordinatorConfig, ServeSecurity};
use sweep_proto::v1::{self, jobs_client::JobsClient, work_client::WorkClient};
use sweep_space::Registry;
use tokio::sync::oneshot;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// Sends `authorization: Bearer <token>` (or nothing).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    pub fn new(token: Option<&str>) -> Bearer {
        Bearer(token.map(|t| format!("Bearer {t}").parse().unwrap()))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A channel whose calls carry a [`Bearer`] token (or none).
pub type Authed = InterceptedService<Channel, Bearer>;
pub type Work = WorkClient<Authed>;
pub type Jobs = JobsClient<Authed>;

/// The configuration the tests run with: the built-in spaces, leases of `lease_ttl_ms`, `max_attempts` attempts
/// per chunk, and lease expiry checked every 50 ms. Tests change single fields with struct update syntax.
pub fn config(lease_ttl_ms: u64, max_attempts: u32) -> CoordinatorConfig {
    CoordinatorConfig {
        scheduler: SchedulerConfig {
            lease_ttl_ms,
            max_attempts,
            ..SchedulerConfig::default()
        },
        expiry_interval: Duration::from_millis(50),
        registry: spaces(),
        ..CoordinatorConfig::default()
    }
}

/// The built-in puzzles and `primes`, as `sweep` registers them: the spaces these tests submit to a coordinator.
pub fn spaces() -> Registry {
    Registry::new()
        .with::<sweep_star::Star>()
        .with::<sweep_billiard::Billiard>()
        .with::<sweep_brainball::Brainball>()
        .with::<sweep_buzzled::Buzzled>()
        .with::<sweep_peg::Peg>()
        .with::<sweep_primes::Primes>()
}

/// The names of every space of `registry`, as a worker announces them.
pub fn space_names(registry: &Registry) -> Vec<String> {
    registry.names().into_iter().map(String::from).collect()
}

/// A submit request with no priority, no reuse, no replication.
pub fn submit_req(space: &str, params: &str, chunks: u64) -> v1::SubmitRequest {
    v1::SubmitRequest {
        space: space.into(),
        params_json: params.into(),
        chunks,
        priority: 0,
        reuse_existing: false,
        replicate: 0,
        count_only: false,
        max_attempts: None,
        share: None,
        chunk_time_hint_ms: None,
    }
}

/// The report of `lease` with `output`.
pub fn report(lease: &v1::ChunkLease, output: v1::ChunkOutput) -> v1::ChunkReport {
    v1::ChunkReport {
        lease_id: lease.lease_id,
        job_id: lease.job_id,
        chunk: lease.chunk,
        output: Some(output),
        elapsed_s: 0.0,
    }
}

/// An in-process coordinator on 127.0.0.1:0.
pub struct Server {
    /// The gRPC address (`http://` or, with TLS, `https://`).
    pub url: String,
    /// The HTTP page and metrics, when started with them.
    pub http: Option<SocketAddr>,
    /// The `Work` and `Jobs` services called in this process (`sweep_coordinator::in_process`).
    pub in_process: (sweep_proto::Transport, sweep_proto::Transport),
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Opens `store` with `cfg` and serves plain gRPC until [`Server::stop`].
    pub async fn start(store: Store, cfg: CoordinatorConfig) -> Server {
        Server::start_with(store, cfg, ServeSecurity::default(), false).await
    }

    /// [`Server::start`] with tokens or TLS (`security`), and the HTTP page on a second port when `http`.
    pub async fn start_with(
        store: Store,
        cfg: CoordinatorConfig,
        security: ServeSecurity,
        http: bool,
    ) -> Server {
        let coord = Coordinator::open(store, cfg).expect("open coordinator");
        Server::serve(coord, security, http).await
    }

    /// Serves an opened coordinator (one on a replicated member, say) as [`Server::start_with`] does.
    pub async fn serve(
        coord: std::sync::Arc<Coordinator>,
        security: ServeSecurity,
        http: bool,
    ) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if security.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let mut server = Server {
            url,
            http: None,
            in_process: sweep_coordinator::in_process(&coord),
            stops: Vec::new(),
            tasks: Vec::new(),
        };
        if http {
            let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            server.http = Some(http_listener.local_addr().unwrap());
            let (stop, stopped) = oneshot::channel::<()>();
            let c = coord.clone();
            server.stops.push(stop);
            server.tasks.push(tokio::spawn(async move {
                sweep_coordinator::http::serve_http(
                    http_listener,
                    sweep_coordinator::grpc::Backend::Single(c),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
                .expect("serve HTTP");
            }));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        server.stops.push(stop);
        server.tasks.push(tokio::spawn(async move {
            serve(listener, coord, security, async {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
        }));
        server
    }

    /// One connection to the server, for clients of either service (or a raw codec).
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Clients of both services on one connection, sending no token.
    pub async fn clients(&self) -> (Work, Jobs) {
        self.clients_as(None).await
    }

    /// Clients of both services on one connection, sending `token` (if any) with every call.
    pub async fn clients_as(&self, token: Option<&str>) -> (Work, Jobs) {
        let ch = self.channel().await;
        (
            WorkClient::with_interceptor(ch.clone(), Bearer::new(token)),
            JobsClient::with_interceptor(ch, Bearer::new(token)),
        )
    }

    /// A worker registered as `name` for every built-in space, on its own connection.
    pub async fn worker(&self, name: &str) -> FakeWorker {
        let (work, _) = self.clients().await;
        FakeWorker::register(work, name, &spaces())
            .await
            .expect("register")
    }

    /// Stops serving and waits (at most 10 s) until the server has let go of its store.
    pub async fn stop(mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for task in self.tasks.drain(..) {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("server stops")
                .expect("server task");
        }
    }
}

/// A scripted worker: its id and its client. Each method is one RPC, returning what the coordinator answered.
pub struct FakeWorker {
    pub work: Work,
    pub id: String,
    /// What it registered with, sent again by [`FakeWorker::register_again`].
    pub registration: v1::RegisterRequest,
}

impl FakeWorker {
    /// Registers `name` for every space of `registry`.
    pub async fn register(
        work: Work,
        name: &str,
        registry: &Registry,
    ) -> Result<FakeWorker, Status> {
        FakeWorker::register_as(
            work,
            v1::RegisterRequest {
                name: name.into(),
                spaces: space_names(registry),
                ..Default::default()
            },
        )
        .await
    }

    /// Registers with exactly `registration`.
    pub async fn register_as(
        work: Work,
        registration: v1::RegisterRequest,
    ) -> Result<FakeWorker, Status> {
        let mut w = FakeWorker {
            work,
            id: String::new(),
            registration,
        };
        w.register_again().await?;
        Ok(w)
    }

    /// A worker that has not registered yet but calls itself `id` (as a worker whose coordinator restarted
    /// does): its first lease may be answered with `register_again`.
    pub fn unregistered(work: Work, id: &str, registration: v1::RegisterRequest) -> FakeWorker {
        FakeWorker {
            work,
            id: id.into(),
            registration,
        }
    }

    /// Registers again with the same request (as a worker does when the coordinator asks it to, after a
    /// restart); keeps and returns the id.
    pub async fn register_again(&mut self) -> Result<String, Status> {
        self.id = self
            .work
            .register(self.registration.clone())
            .await?
            .into_inner()
            .worker_id;
        Ok(self.id.clone())
    }

    /// Asks for up to `max` chunks.
    pub async fn lease(&mut self, max: u32) -> Result<Vec<v1::ChunkLease>, Status> {
        Ok(self.lease_response(max).await?.leases)
    }

    /// Asks for up to `max` chunks and returns the whole answer (`register_again` included).
    pub async fn lease_response(&mut self, max: u32) -> Result<v1::LeaseResponse, Status> {
        Ok(self
            .work
            .lease(v1::LeaseRequest {
                worker_id: self.id.clone(),
                max_chunks: max,
                request_id: 0,
            })
            .await?
            .into_inner())
    }

    /// Reports progress on leases; returns the leases the coordinator revoked.
    pub async fn heartbeat(
        &mut self,
        progress: Vec<v1::LeaseProgress>,
    ) -> Result<Vec<u64>, Status> {
        Ok(self
            .work
            .heartbeat(v1::HeartbeatRequest {
                worker_id: self.id.clone(),
                progress,
            })
            .await?
            .into_inner()
            .revoked)
    }

    /// Reports finished chunks; returns one acknowledgement per report.
    pub async fn complete(
        &mut self,
        reports: Vec<v1::ChunkReport>,
    ) -> Result<Vec<v1::ReportAck>, Status> {
        Ok(self
            .work
            .complete(v1::CompleteRequest {
                worker_id: self.id.clone(),
                reports,
            })
            .await?
            .into_inner()
            .acks)
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
        self.work
            .fail(v1::FailRequest {
                worker_id: self.id.clone(),
                lease_id: lease.lease_id,
                error: error.into(),
                release,
                checkpoint: None,
            })
            .await?;
        Ok(())
    }

    /// Leases up to `n` chunks one at a time, runs each with the real kernel of the built-in spaces and reports
    /// it; returns how many were accepted. Stops early when no chunk is offered.
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

/// The true output of a leased chunk of a built-in space, computed here with the real kernel.
pub fn run_lease(lease: &v1::ChunkLease) -> v1::ChunkOutput {
    let job = spaces()
        .job_from_params(
            &lease.space,
            &serde_json::from_str(&lease.params_json).expect("params are JSON"),
        )
        .expect("a leased job builds");
    let out = job
        .run_chunk(lease.n_chunks, lease.chunk, &sweep_space::Control::new())
        .expect("the chunk runs");
    v1::ChunkOutput::from(&out)
}
