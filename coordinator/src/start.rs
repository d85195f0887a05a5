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
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::ClientTlsConfig;
use tracing::warn;

use crate::auth::{Auth, AuthError, ServeSecurity};
use crate::coordinator::{Coordinator, CoordinatorConfig, ServeError, Tasks};
use crate::grpc::replication::{carrier, ReplicationApi};
use crate::grpc::Backend;
use crate::member::{self, Leadership, LogStore, MemberError};
use crate::replica::{self, MemberConfig, MemberHandle};
use crate::server;
use crate::store::{Store, StoreMachine};

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

async fn start_member(o: Options, group: GroupOptions) -> Result<Running, StartError> {
    let Some(listen) = o.listen else {
        return Err(StartError::NoListenAddress);
    };
    // Founding: this member's id and the founding URLs; joining: whom to ask, and the URL to be added at.
    let founding = match &group.membership {
        Membership::Join { urls, advertise } => Err((urls.clone(), advertise.clone())),
        Membership::Found { peers, id } => {
            let urls = peer_urls(peers)?;
            let listen_text = match &listen {
                Listen::Addr(a) => a.clone(),
                Listen::Bound(l) => l.local_addr()?.to_string(),
            };
            let id = own_id(&urls, *id, &listen_text)?;
            if urls.len() % 2 == 0 {
                warn!(
                    members = urls.len(),
                    "an even number of members tolerates no more lost members than one fewer would"
                );
            }
            Ok((id, urls))
        }
    };
    let peer_tls = PeerTls::from_options(&o.security, &group)?;
    let tls = peer_tls.is_some();
    for url in founding.iter().flat_map(|(_, urls)| urls.values()) {
        check_scheme("--peers", url, tls)?;
    }
    let security = serve_security(&o.security)?;
    // Members call each other with an admin token when the group has token files.
    let token = match &o.security.admin_token_file {
        Some(file) => Some(
            sweep_client::read_token_file(file).map_err(|e| StartError::Group(e.to_string()))?,
        ),
        None => None,
    };
    let data = o.data.clone();
    let bad = |e: MemberError| bad_data(&data, e);
    let store = Arc::new(Store::open(&data).map_err(|e| bad(e.into()))?);
    let listener = bind(listen).await?;
    let addr = listener.local_addr()?;
    let (id, log, started_with) = match founding {
        Ok((id, urls)) => {
            let log = member::open_log(&data, id, Some(&urls), &store).map_err(bad)?;
            (id, log, urls)
        }
        Err((urls, advertise)) => {
            join(
                &data,
                &urls,
                advertise.as_deref(),
                &o.security,
                peer_tls.as_ref(),
                &store,
                addr,
            )
            .await?
        }
    };
    // The log's membership, once it has one, is the group: the options only found it or join it.
    let urls = match log.members().addresses.is_empty() {
        true => started_with,
        false => log.members().addresses.clone(),
    };
    // A group keeps the scheme it was founded with: a member restarted with a certificate in a group at
    // http:// URLs (or without one in a group at https:// URLs) could neither call the others nor be called.
    if let Some((member, url)) = urls
        .iter()
        .find(|(_, u)| !u.is_empty() && member::serves_tls(u) != tls)
    {
        return Err(StartError::Group(format!(
            "the group's log names member {member} at `{url}`, but this member was started {} --tls-cert: a \
             group keeps the scheme it was founded with (all https:// with --tls-cert, or all http:// without)",
            if tls { "with" } else { "without" }
        )));
    }
    let files = member::snapshot_files(&data).map_err(bad)?;
    let machine = StoreMachine::open(store.clone(), files.clone()).map_err(|e| bad(e.into()))?;
    let peers = urls
        .iter()
        .filter(|(&p, _)| p != id)
        .map(|(&p, u)| (p, u.clone()))
        .collect();
    // A consensus tick: elections after 10 to 20 silent ticks, heartbeats every 2.
    let tick = Duration::from_millis(group.election_ms.unwrap_or(DEFAULT_ELECTION_MS) / 10);
    let config = MemberConfig::new(id, peers, tick);
    let election_timeout = config.election_timeout();
    let senders = carrier(token, peer_tls.map(|t| t.config), files.clone());
    let (handle, inbox) =
        replica::start(config, log, machine, senders).map_err(StartError::Member)?;
    let leadership = Leadership::new(id, handle.clone(), urls.clone(), election_timeout);
    let (stop_leading, stop_rx) = watch::channel(false);
    let run = tokio::spawn(leadership.clone().run(store.clone(), o.config, stop_rx));
    if security.auth.is_none() && !addr.ip().is_loopback() {
        warn!(%addr, "no token files: anyone who reaches this address may submit and run jobs, or pose as a member");
    }
    let dashboard = match dashboard(o.http.as_deref(), Backend::Member(leadership.clone())).await {
        Ok(d) => d,
        Err(e) => {
            let _ = stop_leading.send(true);
            let _ = run.await;
            handle.stop().await;
            return Err(e);
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = handle.clone();
    let server = tokio::spawn(async move {
        let served = server::serve_member(
            listener,
            leadership,
            ReplicationApi::new(inbox, files).into_server(),
            security,
            async {
                let _ = stopped.await;
                // The coordinator stops first, committing what it holds through the other members, so the
                // member and its server must still run meanwhile.
                let _ = stop_leading.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(30), run).await;
            },
        )
        .await;
        serving.stop().await;
        served
    });
    Ok(Running {
        addr: Some(addr),
        dashboard,
        body: Body::Member(Member {
            id,
            urls,
            handle,
            store,
            stop,
            server,
        }),
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

/// A member's URL as given to `flag`, checked: http://HOST:PORT (https:// with TLS), without a trailing slash.
fn member_url(flag: &str, raw: &str) -> Result<String, StartError> {
    sweep_proto::member_url(raw).map_err(|e| StartError::Group(format!("{flag}: `{raw}` {e}")))
}

/// Refuses a member URL given to `flag` whose scheme does not match this member's TLS (`tls`: it serves with a
/// certificate). Members serve what they are called with: plain gRPC at http://, TLS only at https://.
fn check_scheme(flag: &str, url: &str, tls: bool) -> Result<(), StartError> {
    match (tls, member::serves_tls(url)) {
        (true, false) => Err(StartError::Group(format!(
            "{flag}: `{url}` is http://, but with --tls-cert the members serve TLS only: give their https:// URLs"
        ))),
        (false, true) => Err(StartError::Group(format!(
            "{flag}: `{url}` is https://: give --tls-cert and --tls-key, so that this member serves TLS, and \
             --peer-tls-ca (or --tls-client-ca), the CA that signed the other members' certificates"
        ))),
        _ => Ok(()),
    }
}

/// How this member calls the other members over TLS (when it serves TLS): it trusts the peer CA (default the
/// client CA) and presents its own certificate as its client identity. Read and checked once, before anything
/// starts.
struct PeerTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// For the consensus senders (`carrier`).
    config: ClientTlsConfig,
}

impl PeerTls {
    /// `None` without TLS (the members speak plain gRPC).
    fn from_options(s: &Security, g: &GroupOptions) -> Result<Option<PeerTls>, StartError> {
        let Some(tls) = &s.tls else {
            return Ok(None);
        };
        let (ca, flag) = match (&g.peer_tls_ca, &tls.client_ca) {
            (Some(ca), _) => (ca, "--peer-tls-ca"),
            (None, Some(ca)) => (ca, "--tls-client-ca"),
            (None, None) => {
                return Err(StartError::Group(
                    "--tls-cert with --peers or --join: give --peer-tls-ca FILE, the CA certificate that signed \
                     the other members' certificates (the members call each other over TLS)"
                        .into(),
                ))
            }
        };
        sweep_client::tls_config(ca, None)
            .map_err(|e| StartError::Group(format!("{flag}: {e}")))?;
        let config = sweep_client::tls_config(ca, Some((&tls.cert, &tls.key)))
            .map_err(|e| StartError::Group(format!("--tls-cert and --tls-key: {e}")))?;
        Ok(Some(PeerTls {
            ca: ca.clone(),
            cert: tls.cert.clone(),
            key: tls.key.clone(),
            config,
        }))
    }
}

/// The founding members by id, checked: URLs with a scheme and a port, none twice, at most [`MAX_MEMBERS`].
fn peer_urls(peers: &[String]) -> Result<BTreeMap<u64, String>, StartError> {
    let mut urls = BTreeMap::new();
    for (i, raw) in peers.iter().enumerate() {
        let url = member_url("--peers", raw)?;
        if urls.values().any(|u| *u == url) {
            return Err(StartError::Group(format!("--peers names {url} twice")));
        }
        urls.insert(i as u64 + 1, url);
    }
    if urls.len() > MAX_MEMBERS {
        return Err(StartError::Group(format!(
            "--peers names {} members; at most {MAX_MEMBERS}",
            urls.len()
        )));
    }
    Ok(urls)
}

/// This member's id: the one given, else the founding member whose host and port are the listen address.
fn own_id(urls: &BTreeMap<u64, String>, id: Option<u64>, listen: &str) -> Result<u64, StartError> {
    if let Some(id) = id {
        if !urls.contains_key(&id) {
            return Err(StartError::Group(format!(
                "--id {id}: --peers names only {} members",
                urls.len()
            )));
        }
        return Ok(id);
    }
    let found: Vec<u64> = urls
        .iter()
        .filter(|(_, u)| {
            let authority = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"));
            authority == Some(listen)
        })
        .map(|(&id, _)| id)
        .collect();
    match found.as_slice() {
        [id] => Ok(*id),
        _ => Err(StartError::Group(format!(
            "no member of --peers is at --listen {listen}: give --id N (this member's place in --peers, from 1)"
        ))),
    }
}

/// A joining member's id, its consensus log and the members' URLs. A directory that is already a member's goes
/// on as that member (asking the group for the members again only while it has not caught up); a new one asks
/// the group to add it at its URL.
async fn join(
    data: &Path,
    list: &str,
    advertise: Option<&str>,
    security: &Security,
    peer_tls: Option<&PeerTls>,
    store: &Store,
    addr: std::net::SocketAddr,
) -> Result<(u64, LogStore, BTreeMap<u64, String>), StartError> {
    let bad = |e: MemberError| bad_data(data, e);
    let url = match advertise {
        Some(u) => member_url("--advertise", u)?,
        None if peer_tls.is_some() => format!("https://{addr}"),
        None => format!("http://{addr}"),
    };
    check_scheme("--advertise", &url, peer_tls.is_some())?;
    // This member's own address is not asked: it listens already but serves nothing before it joins.
    let others: Vec<&str> = list
        .split(',')
        .map(|u| u.trim())
        .filter(|u| !u.is_empty() && u.trim_end_matches('/') != url)
        .collect();
    if others.is_empty() {
        return Err(StartError::Group(
            "--join names no member of the running group (only this member's own URL, or nothing)"
                .into(),
        ));
    }
    for other in &others {
        check_scheme("--join", other, peer_tls.is_some())?;
    }
    let list = others.join(",");
    let ask = || ask_to_join(security, peer_tls, &list, &url);
    if let Some(id) = member::member_of(data) {
        let log = member::open_log(data, id, None, store).map_err(bad)?;
        if log.is_initialized() {
            return Ok((id, log, BTreeMap::new()));
        }
        let (asked, urls) = ask().await?;
        if asked != id {
            return Err(StartError::Group(format!(
                "{} is the directory of member {id}, but the group has member {asked} at {url}: give this \
                 member its own --advertise URL, or an empty --data directory",
                data.display()
            )));
        }
        return Ok((id, log, urls));
    }
    let (id, urls) = ask().await?;
    let log = member::open_log(data, id, None, store).map_err(bad)?;
    Ok((id, log, urls))
}

/// Asks the group at `list` to add a member at `url`: the id it got and every member's URL. Over TLS with
/// `peer_tls`, as the members call each other.
async fn ask_to_join(
    security: &Security,
    peer_tls: Option<&PeerTls>,
    list: &str,
    url: &str,
) -> Result<(u64, BTreeMap<u64, String>), StartError> {
    let client_security = sweep_client::ClientSecurity {
        token_file: security.admin_token_file.clone(),
        tls_ca: peer_tls.map(|t| t.ca.clone()),
        tls_cert: peer_tls.map(|t| t.cert.clone()),
        tls_key: peer_tls.map(|t| t.key.clone()),
        ..Default::default()
    };
    let mut client = sweep_client::Client::connect(list, &client_security)
        .await
        .map_err(|source| StartError::Unreachable {
            list: list.to_string(),
            source,
        })?;
    let reply = client
        .add_member(url)
        .await
        .map_err(|source| StartError::NotAdded {
            list: list.to_string(),
            url: url.to_string(),
            source,
        })?;
    let urls = reply.members.into_iter().map(|m| (m.id, m.url)).collect();
    tracing::info!(id = reply.id, %url, "added to the group");
    Ok((reply.id, urls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(peers: &[&str]) -> BTreeMap<u64, String> {
        peer_urls(&peers.iter().map(|p| p.to_string()).collect::<Vec<_>>()).expect("valid peers")
    }

    #[test]
    fn a_founding_member_is_found_by_its_listen_address_or_its_id() {
        let urls = found(&["http://a:1", "http://b:2/", " http://c:3"]);
        assert_eq!(urls[&2], "http://b:2", "one spelling per member");
        assert_eq!(own_id(&urls, None, "c:3").expect("by address"), 3);
        assert_eq!(own_id(&urls, Some(1), "c:3").expect("by id"), 1);
        let err = own_id(&urls, Some(4), "a:1").expect_err("no fourth member");
        assert!(err.to_string().contains("names only 3 members"), "{err}");
        let err = own_id(&urls, None, "d:4").expect_err("not among them");
        assert!(err.to_string().contains("give --id N"), "{err}");
        assert!(err.is_usage());
    }

    #[test]
    fn peers_named_twice_or_without_a_port_are_refused() {
        let twice = peer_urls(&["http://a:1".into(), "http://a:1/".into()]).expect_err("twice");
        assert!(
            twice.to_string().contains("names http://a:1 twice"),
            "{twice}"
        );
        let no_port = peer_urls(&["http://a".into()]).expect_err("no port");
        assert!(
            no_port.to_string().starts_with("--peers: `http://a`"),
            "{no_port}"
        );
        let many: Vec<String> = (1..=65).map(|p| format!("http://a:{p}")).collect();
        let err = peer_urls(&many).expect_err("too many");
        assert!(err.to_string().contains("at most 64"), "{err}");
    }

    #[test]
    fn a_member_url_must_have_the_scheme_of_the_members_tls() {
        assert!(check_scheme("--peers", "https://a:1", true).is_ok());
        assert!(check_scheme("--peers", "http://a:1", false).is_ok());
        let err = check_scheme("--join", "http://a:1", true).expect_err("plain with TLS");
        assert!(
            err.to_string()
                .starts_with("--join: `http://a:1` is http://"),
            "{err}"
        );
        let err =
            check_scheme("--peers", "https://a:1", false).expect_err("TLS without a certificate");
        assert!(
            err.to_string().contains("give --tls-cert and --tls-key"),
            "{err}"
        );
    }

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
