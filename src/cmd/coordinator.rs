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
    /// members. Three members go on when any one is lost, five when any two are.
    #[arg(long, value_name = "URL,URL,...", value_delimiter = ',')]
    peers: Vec<String>,
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
}

/// A consensus tick: a leader sends heartbeats every 2, a follower campaigns after 10 to 20 silent ones.
const TICK: Duration = Duration::from_millis(100);

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
    if let Some(CoordinatorAction::Members {
        remote,
        json,
        listed_only,
    }) = a.action
    {
        return crate::cmd::members::members(&remote, json, listed_only);
    }
    if !a.peers.is_empty() {
        return member(registry, a);
    }
    if let Some(id) = sweep_coordinator::member::member_of(&a.data) {
        return Err(usage(format!(
            "{} is the data directory of member {id} of a replicated coordinator: start it with --peers (and \
             --id {id}); written to without consensus, its store would differ from the other members'",
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

/// The members of `--peers` by id, checked: URLs with a scheme and a port, none twice.
fn peer_urls(peers: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut urls = BTreeMap::new();
    for (i, raw) in peers.iter().enumerate() {
        let url = raw.trim().trim_end_matches('/').to_string();
        let authority = url
            .strip_prefix("http://")
            .ok_or_else(|| {
                usage(format!(
                    "--peers: `{raw}` is not an http:// URL such as http://10.0.0.1:7878 (members do not \
                     speak TLS to each other yet)"
                ))
            })?;
        if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
            return Err(usage(format!(
                "--peers: `{raw}` must be http://HOST:PORT, with the port"
            )));
        }
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
        .filter(|(_, u)| u.strip_prefix("http://") == Some(listen))
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
    use sweep_coordinator::grpc::replication::{spawn_senders, ReplicationApi};
    use sweep_coordinator::member::{self, Leadership};
    use sweep_coordinator::replica::{self, MemberConfig};
    use sweep_coordinator::store::StoreMachine;

    let urls = peer_urls(&a.peers)?;
    let id = own_id(&urls, a.id, &a.listen)?;
    if a.security.tls_cert.is_some() {
        return Err(usage(
            "--tls-cert with --peers: members do not speak TLS to each other yet; keep the members on a \
             private network",
        ));
    }
    if urls.len() % 2 == 0 {
        tracing::warn!(
            members = urls.len(),
            "an even number of members tolerates no more lost members than one fewer would"
        );
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
        let voters: Vec<u64> = urls.keys().copied().collect();
        let log = member::open_log(&a.data, id, &voters, &store).map_err(|e| bad_dir(&e))?;
        let machine = StoreMachine::open(store.clone()).map_err(|e| bad_dir(&e))?;
        let peers = urls
            .iter()
            .filter(|(&p, _)| p != id)
            .map(|(&p, u)| (p, u.clone()))
            .collect();
        let config = MemberConfig::new(id, peers, TICK);
        let election_timeout = config.election_timeout();
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .map_err(|e| usage(format!("cannot listen on {}: {e}", a.listen)))?;
        let addr = listener.local_addr()?;
        let (handle, inbox, links) = replica::start(config, log, machine)
            .context("cannot start the consensus member")?;
        spawn_senders(links, token);
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
            ReplicationApi(inbox).into_server(),
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
            return Err(anyhow::anyhow!(
                "member {id} stopped: {why}. If its data directory was lost or replaced, it cannot come back \
                 under the same id: the group's log says it had entries it no longer has"
            ));
        }
        Ok(ExitCode::SUCCESS)
    })
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
