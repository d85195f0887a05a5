//! A coordinator in this process, served on loopback port 0, and what tests need to reach it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sweep_client::{Client, ClientSecurity, WorkClient};
use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::store::Store;
use sweep_coordinator::{serve, Coordinator, CoordinatorConfig, ServeSecurity};
use sweep_proto::v1;
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};

use crate::worker::FakeWorker;

/// The configuration the tests run with: the test spaces ([`crate::spaces`]), leases of `lease_ttl_ms`,
/// `max_attempts` attempts per chunk, and lease expiry checked every 50 ms (not the default's second, so tests
/// that let leases expire stay short). Tests change single fields with struct update syntax.
pub fn config(lease_ttl_ms: u64, max_attempts: u32) -> CoordinatorConfig {
    CoordinatorConfig {
        scheduler: SchedulerConfig {
            lease_ttl_ms,
            max_attempts,
            ..SchedulerConfig::default()
        },
        expiry_interval: Duration::from_millis(50),
        registry: crate::spaces(),
        ..CoordinatorConfig::default()
    }
}

/// A submit request with no priority, no reuse, no replication.
pub fn submit_req(space: &str, params: &str, chunks: u64) -> v1::SubmitRequest {
    v1::SubmitRequest {
        space: space.into(),
        params_json: params.into(),
        chunks,
        ..Default::default()
    }
}

/// A new store in a directory of its own: the directory (the store goes with it when dropped), the store's
/// path (to open it again, as a restarted coordinator does) and the store.
pub fn fresh_store() -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = dir.path().join("store");
    let store = Store::open(&path).expect("a new store");
    (dir, path, store)
}

/// Submits `submit_req(space, params, chunks)` through `jobs`, which must accept it: the job.
pub async fn submit_job(jobs: &mut Client, space: &str, params: &str, chunks: u64) -> v1::JobInfo {
    jobs.submit(submit_req(space, params, chunks))
        .await
        .expect("the job is accepted")
        .job
        .expect("a submitted job is described")
}

/// The answer to job `job` (counts and solutions) read through `jobs`, as JSON.
pub async fn result_json(jobs: &mut Client, job: u64) -> serde_json::Value {
    let r = jobs
        .results(job, v1::AnswerForm::Both)
        .await
        .expect("the job's results");
    serde_json::from_str(&r.result_json).expect("results are JSON")
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
    pub async fn serve(coord: Arc<Coordinator>, security: ServeSecurity, http: bool) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let scheme = if security.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let addr = listener.local_addr().expect("a bound listener's address");
        let mut server = Server {
            url: format!("{scheme}://{addr}"),
            http: None,
            in_process: sweep_coordinator::in_process(&coord),
            stops: Vec::new(),
            tasks: Vec::new(),
        };
        if http {
            let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind a loopback port");
            server.http = Some(http_listener.local_addr().expect("its address"));
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

    /// One plain connection, for what `sweep-client` does not send: raw bytes through a codec of a test's
    /// own, or requests no client would make.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.url.clone())
            .expect("the server's URL")
            .connect()
            .await
            .expect("connect to the server")
    }

    /// A `sweep-client` connection sending no token.
    pub async fn client(&self) -> Client {
        self.client_as(None).await
    }

    /// A `sweep-client` connection sending `token` (if any) with every call.
    pub async fn client_as(&self, token: Option<&str>) -> Client {
        self.client_with(&token_only(token))
            .await
            .expect("connect to the server")
    }

    /// A `sweep-client` connection with `security` (a token, TLS files), or why it could not connect.
    pub async fn client_with(
        &self,
        security: &ClientSecurity,
    ) -> Result<Client, sweep_client::ClientError> {
        Client::connect(&self.url, security).await
    }

    /// The `Work` client a worker sending `token` (if any) gets from `sweep-client`.
    pub fn work_as(&self, token: Option<&str>) -> WorkClient {
        sweep_client::work_client(&self.url, &token_only(token))
            .expect("a worker's client of the server")
            .0
    }

    /// A worker registered as `name` for every test space, on its own connection.
    pub async fn worker(&self, name: &str) -> FakeWorker {
        FakeWorker::register(self.work_as(None), name, &crate::spaces())
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

/// Client settings that send `token` (if any) and nothing else.
fn token_only(token: Option<&str>) -> ClientSecurity {
    ClientSecurity {
        token: token.map(String::from),
        ..ClientSecurity::default()
    }
}
