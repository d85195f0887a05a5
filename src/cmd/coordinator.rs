//! `sweep coordinator`: serve jobs to workers over gRPC, with the dashboard on `--http`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::{store::Store, Coordinator, CoordinatorConfig};
use sweep_space::Registry;

use crate::exit::{self, one_line, usage, Exit};
use crate::runtime::{runtime, shutdown_signal};

#[derive(Args)]
pub struct CoordinatorArgs {
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
    let rt = runtime()?;
    rt.block_on(async move {
        let store = Store::open(&a.data)
            .with_context(|| format!("cannot use --data {}", a.data.display()))
            .map_err(|e| Exit {
                code: exit::USAGE,
                message: one_line(&e),
            })?;
        let cfg = CoordinatorConfig {
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
            Some(http) => Some(start_dashboard(http, coord.clone()).await?),
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

/// Binds `--http ADDR`, prints the dashboard's address (the line after the gRPC one) and serves it until the
/// returned sender fires; also returns the address bound.
async fn start_dashboard(
    addr: &str,
    coord: std::sync::Arc<Coordinator>,
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
        coord,
        async {
            let _ = stopped.await;
        },
    ));
    Ok((stop, task, bound))
}
