//! `sweep coordinator`: serve jobs to workers over gRPC, with the dashboard on `--http`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::start::{start, GroupOptions, Listen, Membership, Options, StartError};
use sweep_coordinator::CoordinatorConfig;
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
    let member = !a.peers.is_empty() || a.join.is_some();
    if !member && a.election_ms.is_some() {
        return Err(usage(
            "--election-ms is for a member of a replicated coordinator (with --peers or --join)",
        ));
    }
    if !member && a.peer_tls_ca.is_some() {
        return Err(usage(
            "--peer-tls-ca is for a member of a replicated coordinator (with --peers or --join)",
        ));
    }
    let data = a.data.clone();
    let options = options(registry, a);
    let rt = runtime()?;
    rt.block_on(async move {
        let running = start(options).await.map_err(start_failure)?;
        let addr = running
            .addr()
            .ok_or_else(|| anyhow::anyhow!("the coordinator serves no address"))?;
        // Tests and scripts read the chosen port from this line. Never fail on it: after a restart in place
        // (see `recover`), whoever started us may long have stopped reading.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "sweep coordinator listening on {addr}");
        if let Some((id, urls)) = running.member() {
            let list: Vec<&str> = urls.values().map(String::as_str).collect();
            let _ = writeln!(out, "member {id} of {} ({})", urls.len(), list.join(","));
        }
        if let Some(http) = running.http_addr() {
            let _ = writeln!(out, "sweep dashboard on http://{http}/");
        }
        let _ = out.flush();
        // A single coordinator whose disk filled restarts itself once space returns; a member steps down
        // instead, and the group goes on.
        let recovery = running.coordinator().map(|coord| {
            tokio::spawn(crate::recover::restart_when_space_returns(
                coord.clone(),
                data,
                addr,
                running.http_addr(),
            ))
        });
        let recovery = async {
            match recovery {
                Some(task) => task.await.ok(),
                None => std::future::pending().await,
            }
        };
        let failure = tokio::select! {
            _ = shutdown_signal() => None,
            // Only returns when the restart could not happen: stop, as on a signal, and say why.
            Some(e) = recovery => {
                tracing::error!(error = %e, "cannot restart after the disk filled");
                None
            }
            why = running.failed() => Some(why),
        };
        running.shutdown().await?;
        match failure {
            Some(why) => Err(why.into()),
            None => Ok(ExitCode::SUCCESS),
        }
    })
}

/// The flags as the coordinator crate's options.
fn options(registry: &Registry, a: CoordinatorArgs) -> Options {
    let config = CoordinatorConfig {
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
    };
    let membership = match a.join {
        Some(urls) => Some(Membership::Join {
            urls,
            advertise: a.advertise,
        }),
        None if !a.peers.is_empty() => Some(Membership::Found {
            peers: a.peers,
            id: a.id,
        }),
        None => None,
    };
    Options {
        data: a.data,
        config,
        security: a.security.files(),
        listen: Some(Listen::Addr(a.listen)),
        http: a.http,
        group: membership.map(|membership| GroupOptions {
            membership,
            peer_tls_ca: a.peer_tls_ca,
            election_ms: a.election_ms,
        }),
    }
}

/// A coordinator that did not start, as the command line reports it: a mistake in the flags or the data
/// directory is a usage error; a group that cannot be reached or refuses to add this member exits as any call
/// to a coordinator does; anything else is a failure, with the step that failed first.
pub fn start_failure(e: StartError) -> anyhow::Error {
    match e {
        StartError::Load(source) => {
            anyhow::Error::new(source).context("cannot load the stored jobs")
        }
        StartError::Member(source) => {
            anyhow::Error::new(source).context("cannot start the consensus member")
        }
        StartError::Unreachable { list, source } => anyhow::Error::new(source)
            .context(format!("cannot reach the group to join at --join {list}")),
        StartError::NotAdded { list, url, source } => anyhow::Error::new(source)
            .context(format!("the group at {list} did not add a member at {url}")),
        e if e.is_usage() => Exit {
            code: exit::USAGE,
            message: one_line(&anyhow::Error::new(e)),
        }
        .into(),
        e => e.into(),
    }
}
