//! The one way to start a coordinator: alone or as a member of a replicated group, served on a listener or
//! only in this process. [`start`] takes [`Options`] (the store, the limits, the security files, the
//! addresses, the group) and gives back a [`Running`] coordinator that owns everything it started: the store,
//! the consensus log and snapshot files, the carrier and the member, leadership, the gRPC server, the
//! dashboard and the background tasks. [`Running::shutdown`] stops them all in order and waits for them.
//!
//! Every rule about how a coordinator is started lives here, so that the command line only turns flags into
//! options: which URLs may found a group and which member this one is, that a group keeps one URL scheme (all
//! `https://` with a certificate, or all `http://`), which CA a member trusts for the others, the election
//! timing default, and that a member's directory is never opened as a single coordinator's. Errors name the
//! command line's flags, since that is where people meet them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::auth::{Auth, AuthError, ServeSecurity};
use crate::coordinator::{Coordinator, CoordinatorConfig, ServeError, Tasks};
use crate::grpc::Backend;
use crate::member::{self, MemberError};
use crate::replica::{self, MemberHandle};
use crate::server;
use crate::store::Store;

mod group;

use group::start_member;

/// `--election-ms` when not given: members on one site's network.
pub const DEFAULT_ELECTION_MS: u64 = 500;

/// The most members a group may have.
pub const MAX_MEMBERS: usize = 64;

/// What to start.
pub struct Options {
    /// The store directory (created if missing); a member keeps its consensus log and snapshot files in it.
    pub data: PathBuf,
    pub config: CoordinatorConfig,
    pub security: Security,
    /// Where to serve gRPC. `None`: nothing is served, and the coordinator is used in this process only
    /// ([`Running::in_process`]); a member of a group always needs an address.
    pub listen: Option<Listen>,
    /// Where to serve the dashboard and `/metrics`, if anywhere.
    pub http: Option<String>,
    /// `Some`: a member of a replicated coordinator.
    pub group: Option<GroupOptions>,
}

/// Where gRPC is served.
pub enum Listen {
    /// An address to bind (port 0 picks a free port).
    Addr(String),
    /// A listener bound already (tests that must know every member's port before any starts).
    Bound(std::net::TcpListener),
}

/// Token files and TLS files. `Default` serves plain gRPC to anyone.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub worker_token_file: Option<PathBuf>,
    pub user_token_file: Option<PathBuf>,
    /// Also what members of a group call each other with.
    pub admin_token_file: Option<PathBuf>,
    pub tls: Option<TlsFiles>,
}

/// The server's certificate and key, and the CA its clients' certificates must be signed by, if any.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// A member of a replicated coordinator.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    pub membership: Membership,
    /// The CA that signed the other members' certificates (with TLS); default: the TLS client CA.
    pub peer_tls_ca: Option<PathBuf>,
    /// How long a member hears nothing from a leader before it campaigns; default [`DEFAULT_ELECTION_MS`].
    pub election_ms: Option<u64>,
}

/// How a member comes into its group.
#[derive(Clone, Debug)]
pub enum Membership {
    /// One of the founding members: every member's URL in order (ids 1, 2, ...), and this one's id (default:
    /// the member whose URL has the listen address).
    Found { peers: Vec<String>, id: Option<u64> },
    /// A new member of a running group, asked of any of the URLs (comma-separated), reachable at `advertise`
    /// (default: the scheme and the address bound).
    Join {
        urls: String,
        advertise: Option<String>,
    },
}

/// Why a coordinator did not start. Most are a mistake in the options (the command line's usage errors); the
/// rest say what failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "{} is the data directory of member {id} of a replicated coordinator: start it with --peers (and --id \
         {id}), or with --join if it joined a running group; written to without consensus, its store would \
         differ from the other members'",
        path.display()
    )]
    MemberDirectory { path: PathBuf, id: u64 },
    #[error("cannot use --data {}: {source}", path.display())]
    Data {
        path: PathBuf,
        #[source]
        source: MemberError,
    },
    /// The store opened, but its jobs cannot be loaded.
    #[error("{0}")]
    Load(#[source] ServeError),
    #[error("{0}")]
    Security(#[from] AuthError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on --http {addr}: {source}")]
    ListenHttp {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("a member of a replicated coordinator needs an address to listen on")]
    NoListenAddress,
    /// A mistake in the group's options: a URL, an id, a scheme, a CA.
    #[error("{0}")]
    Group(String),
    #[error("cannot reach the group to join at --join {list}")]
    Unreachable {
        list: String,
        #[source]
        source: sweep_client::ClientError,
    },
    #[error("the group at {list} did not add a member at {url}")]
    NotAdded {
        list: String,
        url: String,
        #[source]
        source: sweep_client::ClientError,
    },
    #[error("cannot start the consensus member")]
    Member(#[source] sweep_replicate::ReplicateError),
    #[error("cannot read the address bound: {0}")]
    Io(#[from] std::io::Error),
}

impl StartError {
    /// Whether the options were wrong (rather than something failing): the command line's usage exit.
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            StartError::Load(_)
                | StartError::Unreachable { .. }
                | StartError::NotAdded { .. }
                | StartError::Member(_)
                | StartError::Io(_)
        )
    }
}

/// A member that stopped taking part by itself: the group removed it, or its node or store failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberFailure {
    #[error("member {id} stopped: {why}")]
    Removed { id: u64, why: String },
    #[error(
        "member {id} stopped: {why}. If its data directory was lost or replaced, it cannot come back under the \
         same id: the group's log says it had entries it no longer has. Remove it (sweep coordinator \
         remove-member {id}) and start a new member in an empty directory with --join"
    )]
    Failed { id: u64, why: String },
}

/// A coordinator started by [`start`], until [`Running::shutdown`].
pub struct Running {
    addr: Option<std::net::SocketAddr>,
    dashboard: Option<Dashboard>,
    body: Body,
}

struct Dashboard {
    addr: std::net::SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

enum Body {
    /// One coordinator whose tasks run in this process, serving nothing.
    InProcess {
        coord: Arc<Coordinator>,
        tasks: Tasks,
    },
    /// One coordinator served on a listener (the server runs its tasks).
    Served {
        coord: Arc<Coordinator>,
        stop: oneshot::Sender<()>,
        server: JoinHandle<Result<(), ServeError>>,
    },
    Member(Member),
}

struct Member {
    id: u64,
    urls: BTreeMap<u64, String>,
    handle: MemberHandle,
    /// What the member applies committed entries to, whichever member leads.
    store: Arc<Store>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// The gRPC address served (port 0 resolved); `None` in process only.
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        self.addr
    }

    /// The dashboard's address (port 0 resolved), when it is served.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.dashboard.as_ref().map(|d| d.addr)
    }

    /// The coordinator of a single (not replicated) one; a member's comes and goes with its terms.
    pub fn coordinator(&self) -> Option<&Arc<Coordinator>> {
        match &self.body {
            Body::InProcess { coord, .. } | Body::Served { coord, .. } => Some(coord),
            Body::Member(_) => None,
        }
    }

    /// The `Work` and `Jobs` services of a single coordinator as transports for clients in this process (see
    /// [`server::in_process`]).
    pub fn in_process(&self) -> Option<(sweep_proto::Transport, sweep_proto::Transport)> {
        self.coordinator().map(server::in_process)
    }

    /// A member's id and every member's URL by id as it started.
    pub fn member(&self) -> Option<(u64, &BTreeMap<u64, String>)> {
        match &self.body {
            Body::Member(m) => Some((m.id, &m.urls)),
            _ => None,
        }
    }

    /// A member's consensus handle (its view of the group; proposals, for tests).
    pub fn member_handle(&self) -> Option<&MemberHandle> {
        match &self.body {
            Body::Member(m) => Some(&m.handle),
            _ => None,
        }
    }

    /// A member's store, as far as it applied the group's log.
    pub fn member_store(&self) -> Option<&Arc<Store>> {
        match &self.body {
            Body::Member(m) => Some(&m.store),
            _ => None,
        }
    }

    /// Resolves if a member stops taking part by itself; never for a single coordinator.
    pub async fn failed(&self) -> MemberFailure {
        let Body::Member(m) = &self.body else {
            return std::future::pending().await;
        };
        let why = m.handle.failed().await;
        if why == replica::REMOVED {
            MemberFailure::Removed { id: m.id, why }
        } else {
            MemberFailure::Failed { id: m.id, why }
        }
    }

    /// Stops everything and waits: the coordinator commits what it holds (on a member, through the others,
    /// so the member and its server stop after it), then the server, the member and the dashboard.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let result = match self.body {
            Body::InProcess { coord, tasks } => {
                coord.begin_stopping();
                tasks.stop().await;
                Ok(())
            }
            Body::Served { stop, server, .. } | Body::Member(Member { stop, server, .. }) => {
                let _ = stop.send(());
                let served = server.await;
                served.unwrap_or_else(|e| Err(ServeError::Io(std::io::Error::other(e))))
            }
        };
        if let Some(d) = self.dashboard {
            let _ = d.stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), d.task).await;
        }
        result
    }
}

/// Starts a coordinator as `options` say; must be called within a tokio runtime.
pub async fn start(options: Options) -> Result<Running, StartError> {
    match options.group.clone() {
        None => start_single(options).await,
        Some(group) => start_member(options, group).await,
    }
}

async fn start_single(o: Options) -> Result<Running, StartError> {
    if let Some(id) = member::member_of(&o.data) {
        return Err(StartError::MemberDirectory { path: o.data, id });
    }
    let store = Store::open(&o.data).map_err(|e| bad_data(&o.data, e.into()))?;
    let coord = Coordinator::open(store, o.config).map_err(StartError::Load)?;
    let Some(listen) = o.listen else {
        // Served to nobody: the only workers are this process's, so any lease in the store is an interrupted
        // run's.
        coord.release_all_leases();
        let tasks = Tasks::start(&coord);
        let dashboard = dashboard(o.http.as_deref(), Backend::Single(coord.clone())).await?;
        return Ok(Running {
            addr: None,
            dashboard,
            body: Body::InProcess { coord, tasks },
        });
    };
    let security = serve_security(&o.security)?;
    let listener = bind(listen).await?;
    let addr = listener.local_addr()?;
    if security.auth.is_none() && !addr.ip().is_loopback() {
        warn!(%addr, "no token files: anyone who reaches this address may submit and run jobs");
    }
    let dashboard = dashboard(o.http.as_deref(), Backend::Single(coord.clone())).await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(listener, coord.clone(), security, async {
        let _ = stopped.await;
    }));
    Ok(Running {
        addr: Some(addr),
        dashboard,
        body: Body::Served {
            coord,
            stop,
            server,
        },
    })
}

fn bad_data(path: &Path, source: MemberError) -> StartError {
    StartError::Data {
        path: path.to_path_buf(),
        source,
    }
}

fn serve_security(s: &Security) -> Result<ServeSecurity, StartError> {
    let auth = Auth::from_role_files(
        s.worker_token_file.clone(),
        s.user_token_file.clone(),
        s.admin_token_file.clone(),
    )?;
    let tls = match &s.tls {
        Some(t) => Some(ServeSecurity::tls_from_files(
            &t.cert,
            &t.key,
            t.client_ca.as_deref(),
        )?),
        None => None,
    };
    Ok(ServeSecurity { auth, tls })
}

async fn bind(listen: Listen) -> Result<TcpListener, StartError> {
    match listen {
        Listen::Addr(addr) => TcpListener::bind(&addr)
            .await
            .map_err(|source| StartError::Listen { addr, source }),
        Listen::Bound(l) => {
            let addr = l.local_addr()?.to_string();
            l.set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(l))
                .map_err(|source| StartError::Listen { addr, source })
        }
    }
}

/// Binds the dashboard's address and serves it until the returned stop fires.
async fn dashboard(addr: Option<&str>, source: Backend) -> Result<Option<Dashboard>, StartError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::ListenHttp {
            addr: addr.to_string(),
            source,
        })?;
    let bound = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(crate::http::serve_http(listener, source, async {
        let _ = stopped.await;
    }));
    Ok(Some(Dashboard {
        addr: bound,
        stop,
        task,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[tokio::test]
    async fn a_member_needs_an_address_and_a_single_coordinator_refuses_a_members_directory() {
        let dir = tempfile::tempdir().expect("dir");
        let group = GroupOptions {
            membership: Membership::Found {
                peers: vec!["http://127.0.0.1:1".into()],
                id: Some(1),
            },
            peer_tls_ca: None,
            election_ms: None,
        };
        let options = |group| Options {
            data: dir.path().into(),
            config: CoordinatorConfig::default(),
            security: Security::default(),
            listen: None,
            http: None,
            group,
        };
        let err = start(options(Some(group))).await.err().expect("no address");
        assert!(matches!(err, StartError::NoListenAddress), "{err}");
        std::fs::create_dir_all(dir.path().join(member::LOG_DIR)).expect("dir");
        std::fs::write(dir.path().join(member::LOG_DIR).join("member"), "2\n").expect("marker");
        let err = start(options(None))
            .await
            .err()
            .expect("a member's directory");
        assert!(
            matches!(err, StartError::MemberDirectory { id: 2, .. }),
            "{err}"
        );
        assert!(err.is_usage());
    }

    /// Without a listener the background tasks still run: a job submitted in process finishes and its
    /// answer is committed, and shutdown returns once the last commit is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_process_the_background_tasks_run_without_a_listener() {
        let dir = tempfile::tempdir().expect("dir");
        let running = start(Options {
            data: dir.path().into(),
            config: CoordinatorConfig::default(),
            security: Security::default(),
            listen: None,
            http: None,
            group: None,
        })
        .await
        .expect("started");
        assert!(running.addr().is_none());
        assert!(running.member().is_none());
        let (_, jobs) = running.in_process().expect("a single coordinator");
        let mut jobs = sweep_proto::v1::jobs_client::JobsClient::new(jobs);
        let listed = jobs
            .list_jobs(sweep_proto::v1::ListJobsRequest::default())
            .await
            .expect("answered in process");
        assert!(listed.into_inner().jobs.is_empty());
        // The committer runs: a share set by an admin is durable once answered, which only a commit makes it.
        let coord = running.coordinator().expect("coordinator").clone();
        tokio::time::timeout(Duration::from_secs(10), coord.set_share("someone", 2.0))
            .await
            .expect("committed without a listener")
            .expect("set");
        // The transports hold the coordinator, and the coordinator holds the store.
        drop((coord, jobs));
        running.shutdown().await.expect("stopped");
        // sled lets go of its lock once its flusher thread ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let store = loop {
            match Store::open(dir.path()) {
                Ok(store) => break store,
                Err(e) => {
                    assert!(std::time::Instant::now() < deadline, "reopening: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let snap = store.load().expect("load");
        assert!(
            snap.identities.iter().any(|i| i.identity == "someone"),
            "{:?}",
            snap.identities
        );
    }
}
