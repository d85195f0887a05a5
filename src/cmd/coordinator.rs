//! `sweep coordinator`: serve jobs to workers over gRPC, with the dashboard on `--http`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sweep_coordinator::grpc::Backend;
use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::{store::Store, Coordinator, CoordinatorConfig};
use sweep_space::Registry;

use crate::exit::{self, one_line, usage, Exit};
use crate::runtime::{runtime, shutdown_signal};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CoordinatorArgs {
    #[command(subcommand)]
    action: Option<CoordinatorAction>,
    /// Address to serve gRPC on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: String,
    /// Store directory (created if missing).
    #[arg(long, default_value = "./sweep-data")]
    data: PathBuf,
    /// A lease expires this long after the last heartbeat.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    lease_ttl_ms: u64,
    /// Failed or expired attempts after which a chunk is poisoned.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_attempts: u32,
    /// Results that fail verification or lose a replication vote after which a worker is refused work.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_bad_results: u32,
    /// How fast an identity's past use stops counting against its share: it counts half after this long
    /// (`1day`, `12h`, `30min`).
    #[arg(long, value_name = "DURATION", default_value = "1day", value_parser = half_life)]
    usage_half_life: u64,
    /// The highest priority a job may ask for without an admin token (with --user-token-file): above it the
    /// submit is refused, so nobody jumps the queue by typing a bigger number. Default: no ceiling.
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    max_user_priority: Option<i32>,
    #[command(flatten)]
    security: crate::security::ServeArgs,
    #[command(flatten)]
    limits: crate::security::LimitArgs,
    /// Also serve the web dashboard and Prometheus `/metrics` on this address (read-only, no authentication:
    /// keep it on a trusted network). Port 0 picks a free port; the chosen address is printed.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Run as one member of a replicated coordinator: every member's URL, this one's included, in the same
    /// order on every member (the order gives the ids 1, 2, 3, ...). Each URL serves clients and the other
    /// members: http:// URLs, or https:// ones with --tls-cert. Three members go on when any one is lost, five
    /// when any two are.
    #[arg(
        long,
        value_name = "URL,URL,...",
        value_delimiter = ',',
        conflicts_with = "join"
    )]
    peers: Vec<String>,
    /// Join a running replicated coordinator as a new member (to replace one lost with its disk, after
    /// `sweep coordinator remove-member`): any of its members' URLs. The new member gets a new id, starts
    /// empty in --data and catches up by snapshot. Restarted with the same flags, it goes on as that member.
    #[arg(long, value_name = "URL,URL,...")]
    join: Option<String>,
    /// The URL the other members and clients reach this member at, with --join. Default: http:// (https://
    /// with --tls-cert) and the address --listen bound.
    #[arg(long, value_name = "URL", requires = "join")]
    advertise: Option<String>,
    /// CA certificate (PEM) that signed the other members' certificates, for a member with --tls-cert: it
    /// calls them over TLS and trusts no other server. This member presents its own --tls-cert as its client
    /// certificate, which members with --tls-client-ca require. Default: --tls-client-ca.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    peer_tls_ca: Option<PathBuf>,
    /// How long a member hears nothing from a leader before it starts an election (it waits this to twice
    /// this, at random); the leader sends a heartbeat every fifth of it. The default suits members on one
    /// site's network; raise it where members are far apart or their network is slow, so that a late
    /// heartbeat does not depose a working leader. The same on every member. Default: 500.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..=60_000))]
    election_ms: Option<u64>,
    /// This member's id: its place in --peers, from 1. Default: the member whose URL has --listen's host and
    /// port.
    #[arg(long, value_name = "N", requires = "peers", value_parser = clap::value_parser!(u64).range(1..=64))]
    id: Option<u64>,
}

#[derive(clap::Subcommand)]
enum CoordinatorAction {
    /// List a replicated coordinator's members: who leads, each one's term, what it applied and how far it
    /// lags behind the leader. Asks every URL of --coordinator.
    Members {
        #[command(flatten)]
        remote: crate::remote::Remote,
        #[arg(long)]
        json: bool,
        /// Ask only the URLs given, not the other members their answers name (a member that is cut off costs
        /// a connect timeout).
        #[arg(long)]
        listed_only: bool,
    },
    /// Remove a member from a replicated coordinator (admin token): one lost with its disk, before a new one
    /// joins in its place (`sweep coordinator --join`). The leader cannot remove itself.
    RemoveMember {
        /// The member's id, as `sweep coordinator members` lists it.
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        id: u64,
        #[command(flatten)]
        remote: crate::remote::Remote,
        #[arg(long)]
        json: bool,
    },
}

/// `--election-ms` when not given: members on one site's network.
const DEFAULT_ELECTION_MS: u64 = 500;

/// `--usage-half-life DURATION` in milliseconds: from a second to ten years.
fn half_life(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration such as 1day, 12h or 30min: {e}"))?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if !(1_000..=10 * 365 * 86_400_000).contains(&ms) {
        return Err(format!("must be from 1s to 10 years, got {text}"));
    }
    Ok(ms)
}

pub fn coordinator(registry: &Registry, a: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    match a.action {
        Some(CoordinatorAction::Members {
            remote,
            json,
            listed_only,
        }) => return crate::cmd::members::members(&remote, json, listed_only),
        Some(CoordinatorAction::RemoveMember { id, remote, json }) => {
            return crate::cmd::members::remove(&remote, id, json)
        }
        None => {}
    }
    if !a.peers.is_empty() || a.join.is_some() {
        return member(registry, a);
    }
    if a.election_ms.is_some() {
        return Err(usage(
            "--election-ms is for a member of a replicated coordinator (with --peers or --join)",
        ));
    }
    if a.peer_tls_ca.is_some() {
        return Err(usage(
            "--peer-tls-ca is for a member of a replicated coordinator (with --peers or --join)",
        ));
    }
    if let Some(id) = sweep_coordinator::member::member_of(&a.data) {
        return Err(usage(format!(
            "{} is the data directory of member {id} of a replicated coordinator: start it with --peers (and \
             --id {id}), or with --join if it joined a running group; written to without consensus, its store would differ from the other members'",
            a.data.display()
        )));
    }
    let rt = runtime()?;
    rt.block_on(async move {
        let store = Store::open(&a.data)
            .with_context(|| format!("cannot use --data {}", a.data.display()))
            .map_err(|e| Exit {
                code: exit::USAGE,
                message: one_line(&e),
            })?;
        let cfg = config(registry, &a);
        let coord = Coordinator::open(store, cfg).context("cannot load the stored jobs")?;
        let security = a.security.security()?;
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .map_err(|e| usage(format!("cannot listen on {}: {e}", a.listen)))?;
        let addr = listener.local_addr()?;
        // Tests and scripts read the chosen port from this line. Never fail on it: after a restart in place
        // (see `recover`), whoever started us may long have stopped reading.
        let _ = writeln!(std::io::stdout(), "sweep coordinator listening on {addr}");
        let _ = std::io::stdout().flush();
        if security.auth.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "no token files: anyone who reaches this address may submit and run jobs");
        }
        let dashboard = match &a.http {
            Some(http) => Some(start_dashboard(http, Backend::Single(coord.clone())).await?),
            None => None,
        };
        let recovery = tokio::spawn(crate::recover::restart_when_space_returns(
            coord.clone(),
            a.data.clone(),
            addr,
            dashboard.as_ref().map(|d| d.2),
        ));
        let served = sweep_coordinator::serve(listener, coord, security, async {
            tokio::select! {
                _ = shutdown_signal() => {}
                // Only returns when the restart could not happen: stop, as on a signal, and say why.
                Ok(e) = recovery => tracing::error!(error = %e, "cannot restart after the disk filled"),
            }
        })
        .await;
        if let Some((stop, task, _)) = dashboard {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        served?;
        Ok(ExitCode::SUCCESS)
    })
}

fn config(registry: &Registry, a: &CoordinatorArgs) -> CoordinatorConfig {
    CoordinatorConfig {
        scheduler: SchedulerConfig {
            lease_ttl_ms: a.lease_ttl_ms,
            max_attempts: a.max_attempts,
            max_bad_results: a.max_bad_results,
            usage_half_life_ms: a.usage_half_life,
        },
        limits: a.limits.limits(),
        registry: registry.clone(),
        max_user_priority: a.max_user_priority,
        ..CoordinatorConfig::default()
    }
}

/// A member's URL as given to `flag`, checked: http://HOST:PORT (https:// with --tls-cert), without a trailing
/// slash.
fn member_url(flag: &str, raw: &str) -> anyhow::Result<String> {
    sweep_proto::member_url(raw).map_err(|e| usage(format!("{flag}: `{raw}` {e}")))
}

/// Refuses a member URL given to `flag` whose scheme does not match this member's TLS (`tls`: it has
/// --tls-cert). Members serve what they are called with: plain gRPC at http://, TLS only at https://.
fn check_scheme(flag: &str, url: &str, tls: bool) -> anyhow::Result<()> {
    if tls && url.starts_with("http://") {
        return Err(usage(format!(
            "{flag}: `{url}` is http://, but with --tls-cert the members serve TLS only: give their https:// URLs"
        )));
    }
    if !tls && url.starts_with("https://") {
        return Err(usage(format!(
            "{flag}: `{url}` is https://: give --tls-cert and --tls-key, so that this member serves TLS, and \
             --peer-tls-ca (or --tls-client-ca), the CA that signed the other members' certificates"
        )));
    }
    Ok(())
}

/// How this member calls the other members over TLS (with --tls-cert): it trusts the CA of --peer-tls-ca
/// (default --tls-client-ca) and presents its own certificate as its client identity. Read and checked once,
/// before anything starts.
struct PeerTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// For the consensus senders (`carrier`).
    config: tonic::transport::ClientTlsConfig,
}

impl PeerTls {
    /// From the flags: `None` without --tls-cert (the members speak plain gRPC).
    fn from_args(a: &CoordinatorArgs) -> anyhow::Result<Option<PeerTls>> {
        let (Some(cert), Some(key)) = (&a.security.tls_cert, &a.security.tls_key) else {
            return Ok(None);
        };
        let (ca, flag) = match (&a.peer_tls_ca, &a.security.tls_client_ca) {
            (Some(ca), _) => (ca, "--peer-tls-ca"),
            (None, Some(ca)) => (ca, "--tls-client-ca"),
            (None, None) => {
                return Err(usage(
                    "--tls-cert with --peers or --join: give --peer-tls-ca FILE, the CA certificate that signed \
                     the other members' certificates (the members call each other over TLS)",
                ))
            }
        };
        sweep_client::tls_config(ca, None).map_err(|e| usage(format!("{flag}: {e}")))?;
        let config = sweep_client::tls_config(ca, Some((cert, key)))
            .map_err(|e| usage(format!("--tls-cert and --tls-key: {e}")))?;
        Ok(Some(PeerTls {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
            config,
        }))
    }
}

/// The members of `--peers` by id, checked: URLs with a scheme and a port, none twice.
fn peer_urls(peers: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut urls = BTreeMap::new();
    for (i, raw) in peers.iter().enumerate() {
        let url = member_url("--peers", raw)?;
        if urls.values().any(|u| *u == url) {
            return Err(usage(format!("--peers names {url} twice")));
        }
        urls.insert(i as u64 + 1, url);
    }
    if urls.len() > 64 {
        return Err(usage(format!(
            "--peers names {} members; at most 64",
            urls.len()
        )));
    }
    Ok(urls)
}

/// This member's id: `--id`, else the member of `--peers` whose host and port are `--listen`'s.
fn own_id(urls: &BTreeMap<u64, String>, id: Option<u64>, listen: &str) -> anyhow::Result<u64> {
    if let Some(id) = id {
        if !urls.contains_key(&id) {
            return Err(usage(format!(
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
        _ => Err(usage(format!(
            "no member of --peers is at --listen {listen}: give --id N (this member's place in --peers, from 1)"
        ))),
    }
}

/// `sweep coordinator --peers ...`: one member of a replicated coordinator.
fn member(registry: &Registry, a: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    use sweep_coordinator::grpc::replication::{carrier, ReplicationApi};
    use sweep_coordinator::member::{self, Leadership};
    use sweep_coordinator::replica::{self, MemberConfig};
    use sweep_coordinator::store::StoreMachine;

    let founding = match a.join {
        Some(_) => None,
        None => {
            let urls = peer_urls(&a.peers)?;
            let id = own_id(&urls, a.id, &a.listen)?;
            if urls.len() % 2 == 0 {
                tracing::warn!(
                    members = urls.len(),
                    "an even number of members tolerates no more lost members than one fewer would"
                );
            }
            Some((id, urls))
        }
    };
    let peer_tls = PeerTls::from_args(&a)?;
    let tls = peer_tls.is_some();
    for url in founding.iter().flat_map(|(_, urls)| urls.values()) {
        check_scheme("--peers", url, tls)?;
    }
    let security = a.security.security()?;
    // Members call each other with an admin token when the group has token files.
    let token = match &a.security.admin_token_file {
        Some(file) => Some(sweep_client::read_token_file(file).map_err(|e| usage(e.to_string()))?),
        None => None,
    };
    let cfg = config(registry, &a);
    let rt = runtime()?;
    rt.block_on(async move {
        let bad_dir = |e: &dyn std::fmt::Display| Exit {
            code: exit::USAGE,
            message: format!("cannot use --data {}: {e}", a.data.display()),
        };
        let store = std::sync::Arc::new(Store::open(&a.data).map_err(|e| bad_dir(&e))?);
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .map_err(|e| usage(format!("cannot listen on {}: {e}", a.listen)))?;
        let addr = listener.local_addr()?;
        let (id, log, started_with) = match founding {
            Some((id, urls)) => {
                let log = member::open_log(&a.data, id, Some(&urls), &store)
                    .map_err(|e| bad_dir(&e))?;
                (id, log, urls)
            }
            None => join(&a, peer_tls.as_ref(), &store, addr).await?,
        };
        // The log's membership, once it has one, is the group: the flags only found it or join it.
        let urls = match log.members().addresses.is_empty() {
            true => started_with,
            false => log.members().addresses.clone(),
        };
        // A group keeps the scheme it was founded with: a member restarted with --tls-cert in a group at
        // http:// URLs (or without it in one at https:// URLs) could neither call the others nor be called.
        if let Some((member, url)) = urls
            .iter()
            .find(|(_, u)| !u.is_empty() && u.starts_with("https://") != tls)
        {
            return Err(usage(format!(
                "the group's log names member {member} at `{url}`, but this member was started {} --tls-cert: a \
                 group keeps the scheme it was founded with (all https:// with --tls-cert, or all http:// without)",
                if tls { "with" } else { "without" }
            )));
        }
        let files = sweep_coordinator::member::snapshot_files(&a.data).map_err(|e| bad_dir(&e))?;
        let machine = StoreMachine::open(store.clone(), files.clone()).map_err(|e| bad_dir(&e))?;
        let peers = urls
            .iter()
            .filter(|(&p, _)| p != id)
            .map(|(&p, u)| (p, u.clone()))
            .collect();
        // A consensus tick: elections after 10 to 20 silent ticks, heartbeats every 2.
        let tick = Duration::from_millis(a.election_ms.unwrap_or(DEFAULT_ELECTION_MS) / 10);
        let config = MemberConfig::new(id, peers, tick);
        let election_timeout = config.election_timeout();
        let senders = carrier(token, peer_tls.map(|t| t.config), files.clone());
        let (handle, inbox) = replica::start(config, log, machine, senders)
            .context("cannot start the consensus member")?;
        let leadership = Leadership::new(id, handle.clone(), urls.clone(), election_timeout);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let run = tokio::spawn(leadership.clone().run(store, cfg, stop_rx));
        let _ = writeln!(std::io::stdout(), "sweep coordinator listening on {addr}");
        let _ = writeln!(
            std::io::stdout(),
            "member {id} of {} ({})",
            urls.len(),
            urls.values().cloned().collect::<Vec<_>>().join(",")
        );
        let _ = std::io::stdout().flush();
        if security.auth.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "no token files: anyone who reaches this address may submit and run jobs, or pose as a member");
        }
        let dashboard = match &a.http {
            Some(http) => Some(start_dashboard(http, Backend::Member(leadership.clone())).await?),
            None => None,
        };
        let watched = handle.clone();
        let failure = std::sync::Mutex::new(None::<String>);
        let served = sweep_coordinator::server::serve_member(
            listener,
            leadership,
            ReplicationApi::new(inbox, files).into_server(),
            security,
            async {
                tokio::select! {
                    _ = shutdown_signal() => {}
                    why = watched.failed() => *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why),
                }
                // The coordinator stops first, committing what it holds through the other members, so the
                // member and its server must still run meanwhile.
                let _ = stop_tx.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(30), run).await;
            },
        )
        .await;
        handle.stop().await;
        if let Some((stop, task, _)) = dashboard {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        served?;
        if let Some(why) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if why == replica::REMOVED {
                return Err(anyhow::anyhow!("member {id} stopped: {why}"));
            }
            return Err(anyhow::anyhow!(
                "member {id} stopped: {why}. If its data directory was lost or replaced, it cannot come back \
                 under the same id: the group's log says it had entries it no longer has. Remove it \
                 (sweep coordinator remove-member {id}) and start a new member in an empty directory with \
                 --join"
            ));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `--join`: this member's id, its consensus log and the members' URLs. A directory that is already a member's
/// goes on as that member (asking the group for the members again only while it has not caught up); a new
/// one asks the group to add it at its URL.
async fn join(
    a: &CoordinatorArgs,
    peer_tls: Option<&PeerTls>,
    store: &Store,
    addr: std::net::SocketAddr,
) -> anyhow::Result<(
    u64,
    sweep_coordinator::member::LogStore,
    BTreeMap<u64, String>,
)> {
    use sweep_coordinator::member;
    let bad_dir = |e: &dyn std::fmt::Display| Exit {
        code: exit::USAGE,
        message: format!("cannot use --data {}: {e}", a.data.display()),
    };
    let url = match &a.advertise {
        Some(u) => member_url("--advertise", u)?,
        None if peer_tls.is_some() => format!("https://{addr}"),
        None => format!("http://{addr}"),
    };
    check_scheme("--advertise", &url, peer_tls.is_some())?;
    // This member's own address is not asked: it listens already but serves nothing before it joins.
    let others: Vec<&str> = a
        .join
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(|u| u.trim())
        .filter(|u| !u.is_empty() && u.trim_end_matches('/') != url)
        .collect();
    if others.is_empty() {
        return Err(usage(
            "--join names no member of the running group (only this member's own URL, or nothing)",
        ));
    }
    for other in &others {
        check_scheme("--join", other, peer_tls.is_some())?;
    }
    let list = others.join(",");
    let list = list.as_str();
    let known = member::member_of(&a.data);
    if let Some(id) = known {
        let log = member::open_log(&a.data, id, None, store).map_err(|e| bad_dir(&e))?;
        if log.is_initialized() {
            return Ok((id, log, BTreeMap::new()));
        }
        let (asked, urls) = ask_to_join(a, peer_tls, list, &url).await?;
        if asked != id {
            return Err(usage(format!(
                "{} is the directory of member {id}, but the group has member {asked} at {url}: give this \
                 member its own --advertise URL, or an empty --data directory",
                a.data.display()
            )));
        }
        return Ok((id, log, urls));
    }
    let (id, urls) = ask_to_join(a, peer_tls, list, &url).await?;
    let log = member::open_log(&a.data, id, None, store).map_err(|e| bad_dir(&e))?;
    Ok((id, log, urls))
}

/// Asks the group at `list` to add a member at `url`: the id it got and every member's URL. Over TLS with
/// `peer_tls`, as the members call each other.
async fn ask_to_join(
    a: &CoordinatorArgs,
    peer_tls: Option<&PeerTls>,
    list: &str,
    url: &str,
) -> anyhow::Result<(u64, BTreeMap<u64, String>)> {
    let security = sweep_client::ClientSecurity {
        token_file: a.security.admin_token_file.clone(),
        tls_ca: peer_tls.map(|t| t.ca.clone()),
        tls_cert: peer_tls.map(|t| t.cert.clone()),
        tls_key: peer_tls.map(|t| t.key.clone()),
        ..Default::default()
    };
    let mut client = sweep_client::Client::connect(list, &security)
        .await
        .with_context(|| format!("cannot reach the group to join at --join {list}"))?;
    let reply = client
        .add_member(url)
        .await
        .with_context(|| format!("the group at {list} did not add a member at {url}"))?;
    let urls = reply.members.into_iter().map(|m| (m.id, m.url)).collect();
    tracing::info!(id = reply.id, %url, "added to the group");
    Ok((reply.id, urls))
}

/// Binds `--http ADDR`, prints the dashboard's address (the line after the gRPC one) and serves it until the
/// returned sender fires; also returns the address bound.
async fn start_dashboard(
    addr: &str,
    source: Backend,
) -> anyhow::Result<(
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
    std::net::SocketAddr,
)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| usage(format!("cannot listen on --http {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    // Whoever started us may have stopped reading stdout after the first line: never fail on that.
    let _ = writeln!(std::io::stdout(), "sweep dashboard on http://{bound}/");
    let _ = std::io::stdout().flush();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(sweep_coordinator::http::serve_http(
        listener,
        source,
        async {
            let _ = stopped.await;
        },
    ));
    Ok((stop, task, bound))
}
