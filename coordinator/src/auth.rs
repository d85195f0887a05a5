//! Who may call what: bearer tokens in two roles, checked by a tower layer in front of both gRPC services, and
//! the TLS settings the server is started with ([`ServeSecurity`]).
//!
//! Why a layer and not a tonic interceptor: an interceptor sees the metadata but not the method, and the role a
//! call needs depends on the method (`Jobs/ListJobs` is fine for a worker token, `Jobs/Submit` is not). The
//! layer sees the request path, so the whole policy lives here and no handler has to remember to check.
//!
//! Tokens are never kept or compared in the clear: each configured token is stored as its blake3 hash, the
//! presented token is hashed, and the hashes are compared with blake3's constant-time equality, against every
//! configured token without an early exit. A log line names the method, the peer and why it was refused,
//! never the token.
//!
//! Token files hold one token per line (`#` starts a comment line, blank lines are skipped), so rotation is:
//! add the new token, let the coordinator reload (it re-reads the files every second and on SIGHUP), move the
//! clients over, remove the old token. A file that fails to parse on reload leaves the previous tokens in force.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::Status;
use tracing::{info, warn};

/// Shortest token accepted: a guessable token would make the rest of this module decoration.
pub const MIN_TOKEN_LEN: usize = 16;

/// How often the token files are re-read to notice a rotation.
pub const RELOAD_POLL: Duration = Duration::from_secs(1);

/// What a token may do. Each role may do everything the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Register, Lease, Heartbeat, Complete, Fail, FetchArtifact, and read jobs (list, status, watch, results).
    Worker,
    /// Also Submit, and Cancel, Pause and Resume of the jobs its own identity submitted: a person who runs
    /// searches on a shared cluster and manages them without waiting for an admin. Not an `exec` job (it runs
    /// a program on the workers), not a priority above `--max-user-priority`, not another identity's job (the
    /// handlers check the owner, which this layer cannot see); those, and Ship and SetShare, need an admin
    /// token.
    User,
    /// Everything (and any method not listed for the roles above).
    Admin,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::User => "user",
            Role::Admin => "admin",
        }
    }
}

/// Who made a call that passed the token check; the layer puts it in the request's extensions, where the
/// handlers read it. The coordinator keeps a worker's standing (bad results, refusal) under `identity`, so a
/// worker that lies cannot start afresh by choosing another name: only another token does that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    pub identity: String,
}

/// A token's public name: a prefix of a keyed hash of it, so logs and `sweep workers` can tell tokens apart
/// without showing anything that helps guess one.
pub fn identity_of(token: &str) -> String {
    let h = blake3::keyed_hash(b"sweep token identity, version 1.", token.as_bytes());
    format!("token-{}", &h.to_hex()[..12])
}

/// Calls that need no token: the standard health check, which probes (Kubernetes, load balancers) make
/// without credentials and which says nothing but whether the coordinator can take work.
pub fn is_public(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/")
}

/// The role a gRPC method needs, from its path (`/sweep.v1.Jobs/Submit`). Deny by default: a method added later
/// needs an admin token until it is listed here.
pub fn required_role(path: &str) -> Role {
    // Reflection only describes the protocol, which is public; any valid token may read it.
    if path.starts_with("/grpc.reflection.v1.ServerReflection/") {
        return Role::Worker;
    }
    let Some(rest) = path.strip_prefix("/sweep.v1.") else {
        return Role::Admin;
    };
    match rest.split_once('/') {
        Some(("Work", _)) => Role::Worker,
        Some((
            "Jobs",
            "ListJobs" | "JobStatus" | "Watch" | "Results" | "ListWorkers" | "Members",
        )) => Role::Worker,
        Some(("Jobs", "Submit" | "Cancel" | "Pause" | "Resume")) => Role::User,
        _ => Role::Admin,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read the token file {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("token file {} holds no token (one per line; `#` starts a comment)", file.display())]
    Empty { file: PathBuf },
    #[error(
        "token on line {line} of {} is shorter than {MIN_TOKEN_LEN} characters",
        file.display()
    )]
    Short { file: PathBuf, line: usize },
    #[error(
        "token on line {line} of {} has a character outside printable ASCII (spaces included)",
        file.display()
    )]
    BadChar { file: PathBuf, line: usize },
    #[error("--worker-token-file and --user-token-file need --admin-token-file too: without an admin token nobody could cancel other people's jobs or set shares")]
    WorkerWithoutAdmin,
    #[error("cannot read the TLS file {}: {source}", file.display())]
    TlsFile {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// Parses a token file's text into token hashes; errors name the file and line, never the token.
fn parse_tokens(text: &str, file: &Path) -> Result<Vec<blake3::Hash>, AuthError> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        let line = i + 1;
        // Printable ASCII without spaces: exactly what fits unchanged into an HTTP header value.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AuthError::BadChar {
                file: file.to_path_buf(),
                line,
            });
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(AuthError::Short {
                file: file.to_path_buf(),
                line,
            });
        }
        tokens.push(blake3::hash(token.as_bytes()));
    }
    if tokens.is_empty() {
        return Err(AuthError::Empty {
            file: file.to_path_buf(),
        });
    }
    Ok(tokens)
}

fn read_file(file: &Path) -> Result<String, AuthError> {
    std::fs::read_to_string(file).map_err(|source| AuthError::Read {
        file: file.to_path_buf(),
        source,
    })
}

/// The tokens in force, as hashes.
#[derive(Default)]
struct TokenSets {
    worker: Vec<blake3::Hash>,
    user: Vec<blake3::Hash>,
    admin: Vec<blake3::Hash>,
}

/// Why a request was refused (logged; the client gets the matching status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    Unknown,
    NotAdmin,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "no token",
            Refusal::Malformed => "malformed authorization header",
            Refusal::Unknown => "unknown or revoked token",
            Refusal::NotAdmin => "token of a lesser role than the method needs",
        }
    }

    /// The status a refused call to `path` (`/sweep.v1.Jobs/Submit`) gets; the message names the method.
    fn status(self, path: &str) -> Status {
        let method = path.rsplit('/').next().unwrap_or(path);
        match self {
            Refusal::Missing => Status::unauthenticated(
                "this coordinator requires a token (sweep: --token-file FILE or SWEEP_TOKEN)",
            ),
            Refusal::Malformed => {
                Status::unauthenticated("the authorization header is not `Bearer <token>`")
            }
            Refusal::Unknown => {
                Status::unauthenticated("the token was not accepted (unknown or revoked)")
            }
            Refusal::NotAdmin if required_role(path) == Role::User => Status::permission_denied(
                format!("{method} needs a user or admin token; this is a worker token"),
            ),
            Refusal::NotAdmin => Status::permission_denied(format!(
                "{method} needs an admin token; this is a worker or user token"
            )),
        }
    }
}

/// The token sets of a running coordinator, loaded from its token files and reloaded when they change.
pub struct Auth {
    worker_file: Option<PathBuf>,
    user_file: Option<PathBuf>,
    admin_file: PathBuf,
    sets: RwLock<Arc<TokenSets>>,
    /// blake3 of the files' contents as last loaded: a reload happens only when they differ.
    loaded: Mutex<blake3::Hash>,
}

impl Auth {
    /// Loads both files. `worker_file` may be absent (workers then use an admin token); `admin_file` may not be
    /// absent when `worker_file` is given. Returns `None` when neither is given: the coordinator stays open.
    pub fn from_files(
        worker_file: Option<PathBuf>,
        admin_file: Option<PathBuf>,
    ) -> Result<Option<Arc<Auth>>, AuthError> {
        Self::from_role_files(worker_file, None, admin_file)
    }

    /// [`Auth::from_files`] with user tokens too (`--user-token-file`: people who may submit jobs).
    pub fn from_role_files(
        worker_file: Option<PathBuf>,
        user_file: Option<PathBuf>,
        admin_file: Option<PathBuf>,
    ) -> Result<Option<Arc<Auth>>, AuthError> {
        let admin_file = match (worker_file.is_some() || user_file.is_some(), admin_file) {
            (_, Some(a)) => a,
            (false, None) => return Ok(None),
            (true, None) => return Err(AuthError::WorkerWithoutAdmin),
        };
        let auth = Auth {
            worker_file,
            user_file,
            admin_file,
            sets: RwLock::new(Arc::new(TokenSets::default())),
            loaded: Mutex::new(blake3::hash(b"")),
        };
        auth.reload(true)?;
        Ok(Some(Arc::new(auth)))
    }

    /// Re-reads the files; swaps the token sets in if their contents changed (or always, if `force`). On an
    /// error the previous tokens stay in force. Returns whether anything was swapped in.
    pub fn reload(&self, force: bool) -> Result<bool, AuthError> {
        let admin_text = read_file(&self.admin_file)?;
        let worker_text = match &self.worker_file {
            Some(f) => Some(read_file(f)?),
            None => None,
        };
        let user_text = match &self.user_file {
            Some(f) => Some(read_file(f)?),
            None => None,
        };
        let mut h = blake3::Hasher::new();
        h.update(admin_text.as_bytes());
        h.update(&[0]);
        h.update(worker_text.as_deref().unwrap_or("").as_bytes());
        h.update(&[0]);
        h.update(user_text.as_deref().unwrap_or("").as_bytes());
        let digest = h.finalize();
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if !force && *loaded == digest {
            return Ok(false);
        }
        let admin = parse_tokens(&admin_text, &self.admin_file)?;
        let worker = match (&self.worker_file, &worker_text) {
            (Some(f), Some(t)) => parse_tokens(t, f)?,
            _ => Vec::new(),
        };
        let user = match (&self.user_file, &user_text) {
            (Some(f), Some(t)) => parse_tokens(t, f)?,
            _ => Vec::new(),
        };
        info!(
            worker_tokens = worker.len(),
            user_tokens = user.len(),
            admin_tokens = admin.len(),
            "tokens loaded"
        );
        *self.sets.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(TokenSets {
            worker,
            user,
            admin,
        });
        *loaded = digest;
        Ok(true)
    }

    /// The role of a presented token, if any. Hashes compare in constant time and every configured token is
    /// compared, so the timing says nothing about how close a guess was or which token matched.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        let presented = blake3::hash(token.as_bytes());
        let sets = self.sets.read().unwrap_or_else(|p| p.into_inner()).clone();
        let is_admin = sets
            .admin
            .iter()
            .fold(false, |acc, t| acc | (*t == presented));
        let is_user = sets
            .user
            .iter()
            .fold(false, |acc, t| acc | (*t == presented));
        let is_worker = sets
            .worker
            .iter()
            .fold(false, |acc, t| acc | (*t == presented));
        if is_admin {
            Some(Role::Admin)
        } else if is_user {
            Some(Role::User)
        } else if is_worker {
            Some(Role::Worker)
        } else {
            None
        }
    }

    /// Decides one call: the role it was granted, or why it is refused.
    pub fn check(&self, path: &str, authorization: Option<&[u8]>) -> Result<Role, Refusal> {
        self.caller(path, authorization).map(|c| c.role)
    }

    /// Decides one call: who is calling (the role and the token's identity), or why it is refused.
    pub fn caller(&self, path: &str, authorization: Option<&[u8]>) -> Result<Caller, Refusal> {
        let Some(value) = authorization else {
            return Err(Refusal::Missing);
        };
        let token = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(Refusal::Malformed)?;
        let role = self.role_of(token).ok_or(Refusal::Unknown)?;
        if role < required_role(path) {
            return Err(Refusal::NotAdmin);
        }
        Ok(Caller {
            role,
            identity: identity_of(token),
        })
    }

    /// Reloads the token files when they change (polled every [`RELOAD_POLL`]) and at once on SIGHUP, until
    /// `stop` turns true. A failed reload is logged once per distinct error and the old tokens stay.
    pub async fn watch_files(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(RELOAD_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut last_error = String::new();
        loop {
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<()>();
            let force = tokio::select! {
                _ = tick.tick() => false,
                _ = hangup => true,
                _ = stop.wait_for(|s| *s) => return,
            };
            let me = self.clone();
            // Reading files is blocking I/O: off the async runtime.
            let outcome = tokio::task::spawn_blocking(move || me.reload(force)).await;
            match outcome {
                Ok(Ok(true)) => {
                    last_error.clear();
                    info!(signal = force, "token files reloaded");
                }
                Ok(Ok(false)) => last_error.clear(),
                Ok(Err(e)) => {
                    let text = e.to_string();
                    if text != last_error {
                        warn!(error = %text, "token files not reloaded; the previous tokens stay in force");
                        last_error = text;
                    }
                }
                Err(e) => warn!(error = %e, "token reload task failed"),
            }
        }
    }
}

/// How the coordinator's gRPC server is secured. `Default` is what `sweep run` and tests use: no TLS, no tokens.
#[derive(Clone, Default)]
pub struct ServeSecurity {
    /// Token checking; `None` leaves every method open (the coordinator then trusts its network).
    pub auth: Option<Arc<Auth>>,
    /// Serve TLS only; with a client CA in it, clients must present a certificate signed by that CA.
    pub tls: Option<ServerTlsConfig>,
}

impl ServeSecurity {
    /// The server's TLS settings from PEM files; with `client_ca`, client certificates are required.
    pub fn tls_from_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<ServerTlsConfig, AuthError> {
        let read = |file: &Path| {
            std::fs::read(file).map_err(|source| AuthError::TlsFile {
                file: file.to_path_buf(),
                source,
            })
        };
        let identity = Identity::from_pem(read(cert)?, read(key)?);
        // A client that opens a connection and never finishes the handshake must not hold it forever.
        let mut tls = ServerTlsConfig::new()
            .identity(identity)
            .timeout(Duration::from_secs(10));
        if let Some(ca) = client_ca {
            tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
        }
        Ok(tls)
    }
}

/// The tower layer that puts [`AuthService`] in front of the gRPC router.
#[derive(Clone)]
pub struct AuthLayer {
    auth: Option<Arc<Auth>>,
}

impl AuthLayer {
    /// With `None`, requests pass unchecked (an open coordinator).
    pub fn new(auth: Option<Arc<Auth>>) -> AuthLayer {
        AuthLayer { auth }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// Checks the `authorization: Bearer <token>` metadata of every call before the router sees it; refused calls
/// are answered with a gRPC status at once and never reach a handler.
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Option<Arc<Auth>>,
}

fn peer<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for AuthService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let public = is_public(req.uri().path());
        if let (Some(auth), false) = (&self.auth, public) {
            let path = req.uri().path().to_string();
            let header = req.headers().get(http::header::AUTHORIZATION);
            match auth.caller(&path, header.map(|v| v.as_bytes())) {
                Ok(caller) => {
                    req.extensions_mut().insert(caller);
                }
                Err(refusal) => {
                    warn!(
                        method = %path,
                        peer = %peer(&req).map_or("unknown".into(), |a| a.to_string()),
                        needs = required_role(&path).as_str(),
                        reason = refusal.as_str(),
                        "request refused"
                    );
                    let response = refusal.status(&path).into_http::<RB>();
                    return Box::pin(std::future::ready(Ok(response)));
                }
            }
        }
        Box::pin(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const WORKER: &str = "worker-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789ab";

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn auth(
        worker: &str,
        admin: &str,
    ) -> (Arc<Auth>, tempfile::NamedTempFile, tempfile::NamedTempFile) {
        let w = file(worker);
        let a = file(admin);
        let auth = Auth::from_files(Some(w.path().into()), Some(a.path().into()))
            .unwrap()
            .unwrap();
        (auth, w, a)
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    #[test]
    fn a_user_token_submits_but_is_no_admin() {
        let w = file("worker-token-0123456789");
        let u = file("user-token-0123456789ab");
        let a = file("admin-token-0123456789");
        let auth = Auth::from_role_files(
            Some(w.path().into()),
            Some(u.path().into()),
            Some(a.path().into()),
        )
        .unwrap()
        .unwrap();
        let user = bearer("user-token-0123456789ab");
        let caller = auth.caller("/sweep.v1.Jobs/Submit", Some(&user)).unwrap();
        assert_eq!(caller.role, Role::User);
        assert_eq!(caller.identity, identity_of("user-token-0123456789ab"));
        // Cancel, Pause and Resume pass the layer; whose job it is, the handler decides.
        for m in ["Cancel", "Pause", "Resume"] {
            let path = format!("/sweep.v1.Jobs/{m}");
            assert_eq!(auth.check(&path, Some(&user)), Ok(Role::User), "{m}");
        }
        let worker = bearer("worker-token-0123456789");
        let refused = [
            (&user, &["SetShare", "Ship", "Drain"][..]),
            (&worker, &["Submit", "Cancel", "Pause", "Resume"]),
        ];
        for (token, methods) in refused {
            for m in methods {
                let path = format!("/sweep.v1.Jobs/{m}");
                assert_eq!(
                    auth.check(&path, Some(token)),
                    Err(Refusal::NotAdmin),
                    "{m}"
                );
            }
        }
        let admin = bearer("admin-token-0123456789");
        assert_eq!(
            auth.check("/sweep.v1.Jobs/SetShare", Some(&admin)),
            Ok(Role::Admin)
        );
        let err = Auth::from_role_files(None, Some(u.path().into()), None)
            .err()
            .unwrap();
        assert!(matches!(err, AuthError::WorkerWithoutAdmin), "{err}");
    }

    #[test]
    fn methods_need_the_right_role() {
        for m in [
            "Register",
            "Lease",
            "Heartbeat",
            "Complete",
            "Fail",
            "FetchArtifact",
        ] {
            assert_eq!(required_role(&format!("/sweep.v1.Work/{m}")), Role::Worker);
        }
        for m in ["ListJobs", "JobStatus", "Watch", "Results"] {
            assert_eq!(required_role(&format!("/sweep.v1.Jobs/{m}")), Role::Worker);
        }
        // A person's token submits and cancels, pauses and resumes (its own jobs: the handlers check the
        // owner); what runs programs, drains workers or sets shares is admin's.
        for m in ["Submit", "Cancel", "Pause", "Resume"] {
            assert_eq!(
                required_role(&format!("/sweep.v1.Jobs/{m}")),
                Role::User,
                "{m}"
            );
        }
        for m in ["Ship", "SetShare", "Drain", "SomethingNew"] {
            assert_eq!(required_role(&format!("/sweep.v1.Jobs/{m}")), Role::Admin);
        }
        // Reflection describes the public protocol: any valid token. Health needs none at all. Any other
        // service is admin-only until it is listed.
        assert_eq!(
            required_role("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            Role::Worker
        );
        assert!(is_public("/grpc.health.v1.Health/Check"));
        assert!(!is_public("/sweep.v1.Jobs/ListJobs"));
        assert!(!is_public(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
        assert_eq!(required_role("/grpc.other.v1.Service/X"), Role::Admin);
        assert_eq!(required_role("/sweep.v1.Other/Lease"), Role::Admin);
        assert_eq!(required_role(""), Role::Admin);
        // Shipping files is submitting code: admin only, like submitting an exec job (refused by the
        // coordinator for a user token, which may submit other jobs).
        assert_eq!(required_role("/sweep.v1.Jobs/Ship"), Role::Admin);
    }

    #[test]
    fn tokens_grant_their_role_and_nothing_more() {
        let (auth, _w, _a) = auth(&format!("# workers\n\n{WORKER}\n"), ADMIN);
        let submit = "/sweep.v1.Jobs/Submit";
        let lease = "/sweep.v1.Work/Lease";
        assert_eq!(auth.check(lease, Some(&bearer(WORKER))), Ok(Role::Worker));
        assert_eq!(auth.check(lease, Some(&bearer(ADMIN))), Ok(Role::Admin));
        assert_eq!(auth.check(submit, Some(&bearer(ADMIN))), Ok(Role::Admin));
        assert_eq!(
            auth.check(submit, Some(&bearer(WORKER))),
            Err(Refusal::NotAdmin)
        );
        assert_eq!(auth.check(lease, None), Err(Refusal::Missing));
        assert_eq!(
            auth.check(lease, Some(WORKER.as_bytes())),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            auth.check(lease, Some(b"Bearer \xff\xfe")),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            auth.check(lease, Some(&bearer("worker-token-012345678X"))),
            Err(Refusal::Unknown)
        );
        // A prefix of a valid token is not that token.
        assert_eq!(
            auth.check(lease, Some(&bearer(&WORKER[..20]))),
            Err(Refusal::Unknown)
        );
        assert_eq!(auth.check(lease, Some(b"Bearer ")), Err(Refusal::Unknown));
    }

    #[test]
    fn statuses_do_not_echo_the_token() {
        for r in [
            Refusal::Missing,
            Refusal::Malformed,
            Refusal::Unknown,
            Refusal::NotAdmin,
        ] {
            let s = r.status("/sweep.v1.Jobs/Submit");
            assert!(!s.message().contains(WORKER));
            assert!(!s.message().is_empty());
        }
        // A worker token on Submit or Cancel is told a user token would do; on SetShare, that it takes an
        // admin's.
        for m in ["Submit", "Cancel"] {
            let s = Refusal::NotAdmin.status(&format!("/sweep.v1.Jobs/{m}"));
            assert!(
                s.message()
                    .starts_with(&format!("{m} needs a user or admin token")),
                "{s:?}"
            );
        }
        let set = Refusal::NotAdmin.status("/sweep.v1.Jobs/SetShare");
        assert!(
            set.message().starts_with("SetShare needs an admin token"),
            "{set:?}"
        );
        assert_eq!(
            Refusal::Unknown.status("x").code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            Refusal::NotAdmin.status("x").code(),
            tonic::Code::PermissionDenied
        );
    }

    #[test]
    fn bad_token_files_are_named_without_their_tokens() {
        let short = file("# c\nshort\n");
        let err = Auth::from_files(None, Some(short.path().into()))
            .err()
            .unwrap();
        assert!(matches!(err, AuthError::Short { line: 2, .. }), "{err}");
        assert!(!err.to_string().contains("short\n"));
        let spaced = file("has a space in the middle of it\n");
        let err = Auth::from_files(None, Some(spaced.path().into()))
            .err()
            .unwrap();
        assert!(matches!(err, AuthError::BadChar { line: 1, .. }), "{err}");
        assert!(!err.to_string().contains("middle"), "{err}");
        let empty = file("# only a comment\n\n");
        let err = Auth::from_files(None, Some(empty.path().into()))
            .err()
            .unwrap();
        assert!(matches!(err, AuthError::Empty { .. }), "{err}");
        let w = file(WORKER);
        let err = Auth::from_files(Some(w.path().into()), None).err().unwrap();
        assert!(matches!(err, AuthError::WorkerWithoutAdmin), "{err}");
        let err = Auth::from_files(None, Some("/nonexistent/tokens".into()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/tokens"), "{err}");
        assert!(Auth::from_files(None, None).unwrap().is_none());
    }

    #[test]
    fn admin_file_alone_serves_both_roles() {
        let a = file(ADMIN);
        let auth = Auth::from_files(None, Some(a.path().into()))
            .unwrap()
            .unwrap();
        assert_eq!(
            auth.check("/sweep.v1.Work/Lease", Some(&bearer(ADMIN))),
            Ok(Role::Admin)
        );
        assert_eq!(
            auth.check("/sweep.v1.Work/Lease", Some(&bearer(WORKER))),
            Err(Refusal::Unknown)
        );
    }

    #[test]
    fn reload_rotates_and_a_broken_file_keeps_the_old_tokens() {
        let (auth, w, _a) = auth(WORKER, ADMIN);
        let new = "worker-token-NEW-abcdefgh";
        assert!(
            !auth.reload(false).unwrap(),
            "unchanged files are not reloaded"
        );
        std::fs::write(w.path(), format!("{WORKER}\n{new}\n")).unwrap();
        assert!(auth.reload(false).unwrap());
        assert_eq!(auth.role_of(WORKER), Some(Role::Worker));
        assert_eq!(auth.role_of(new), Some(Role::Worker));
        std::fs::write(w.path(), format!("# rotated\n{new}\n")).unwrap();
        assert!(auth.reload(false).unwrap());
        assert_eq!(auth.role_of(WORKER), None);
        assert_eq!(auth.role_of(new), Some(Role::Worker));
        // A half-written file must not lock everybody out.
        std::fs::write(w.path(), "tiny\n").unwrap();
        assert!(auth.reload(false).is_err());
        assert_eq!(auth.role_of(new), Some(Role::Worker));
    }
}
