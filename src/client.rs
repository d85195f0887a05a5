//! Commands that run or talk to a standalone coordinator and workers.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use sweep_client::{Client, ClientError};
use sweep_coordinator::scheduler::SchedulerConfig;
use sweep_coordinator::{store::Store, Coordinator, CoordinatorConfig};
use sweep_proto::v1;

use crate::local::{poisoned_list, runtime, shutdown_signal};
use crate::output::Report;
use crate::progress::{Bars, Mode};
use crate::{args, exit, usage, Exit};
use sweep_space::Registry;

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
    #[command(flatten)]
    security: crate::security::ServeArgs,
    #[command(flatten)]
    limits: crate::security::LimitArgs,
    /// Also serve the web dashboard and Prometheus `/metrics` on this address (read-only, no authentication:
    /// keep it on a trusted network). Port 0 picks a free port; the chosen address is printed.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
}

#[derive(Args)]
pub struct WorkerArgs {
    /// Coordinator URL.
    #[arg(
        long,
        env = "SWEEP_COORDINATOR",
        default_value = "http://127.0.0.1:7878"
    )]
    connect: String,
    /// Threads (default: all cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    threads: Option<u32>,
    /// A stable name (default: host name and process id).
    #[arg(long)]
    name: Option<String>,
    /// On shutdown, wait this long for running chunks before handing them back.
    #[arg(long, default_value_t = 30)]
    grace_secs: u64,
    /// Chunks leased beyond the running ones, so cores never wait for the network (default: one per thread;
    /// raise it for jobs of many tiny chunks).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=4096))]
    prefetch: Option<u32>,
    /// Cache fetched input artifacts (tables) here, by digest, so a restarted worker need not fetch them again.
    #[arg(long)]
    cache: Option<PathBuf>,
    #[command(flatten)]
    security: crate::security::ClientArgs,
    /// Tests only: falsify results (drop-solution, inflate-count, bogus-solution) to prove the coordinator
    /// catches liars.
    #[arg(long, hide = true)]
    lie: Option<sweep_worker::Lie>,
    /// Run `exec` chunks: any program an admin submits, as this worker's user. Off by default.
    #[arg(long)]
    allow_exec: bool,
}

#[derive(Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DrainArgs {
    /// The worker's name, as `sweep workers` lists it.
    worker: String,
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct Remote {
    /// Coordinator URL.
    #[arg(
        long,
        env = "SWEEP_COORDINATOR",
        default_value = "http://127.0.0.1:7878"
    )]
    coordinator: String,
    #[command(flatten)]
    security: crate::security::ClientArgs,
}

#[derive(Args)]
pub struct StatusArgs {
    /// One job (default: every job).
    job: Option<u64>,
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct WatchArgs {
    /// One job (default: every job).
    job: Option<u64>,
    #[command(flatten)]
    remote: Remote,
    /// Snapshot interval.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    interval_ms: u64,
    /// Keep watching after every job has finished (new jobs appear as they are submitted).
    #[arg(long)]
    follow: bool,
}

#[derive(Args)]
pub struct JobArgs {
    job: u64,
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ResultsArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Write the answer's pictures (SVG files) into this directory, created if missing.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
}

pub enum Control {
    Cancel,
    Pause,
    Resume,
}

async fn connect(url: &str, security: &crate::security::ClientArgs) -> anyhow::Result<Client> {
    Ok(Client::connect(url, &security.security()).await?)
}

/// Sends the files a job ships (`exec --ship`) to the coordinator.
pub async fn ship(
    c: &mut Client,
    crate::exec::Shipped { digest, packed }: crate::exec::Shipped,
) -> anyhow::Result<()> {
    match c.ship(&digest, &packed).await {
        Ok(()) => Ok(()),
        // The coordinator's reply names what went wrong itself.
        Err(e @ ClientError::Reply(_)) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot ship the files to the coordinator")),
    }
}

pub fn coordinator(registry: &Registry, a: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let store = Store::open(&a.data)
            .with_context(|| format!("cannot use --data {}", a.data.display()))
            .map_err(|e| Exit {
                code: exit::USAGE,
                message: crate::one_line(&e),
            })?;
        let cfg = CoordinatorConfig {
            scheduler: SchedulerConfig {
                lease_ttl_ms: a.lease_ttl_ms,
                max_attempts: a.max_attempts,
                max_bad_results: a.max_bad_results,
            },
            limits: a.limits.limits(),
            registry: registry.clone(),
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

fn default_worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    format!("{host}-{}", std::process::id())
}

pub fn worker(registry: &Registry, a: WorkerArgs) -> anyhow::Result<ExitCode> {
    let threads = a.threads.map(|t| t as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    // Without --allow-exec the worker does not even declare `exec`, so the coordinator never leases it one.
    let registry = if a.allow_exec {
        registry.clone()
    } else {
        registry
            .clone()
            .without(<crate::exec::Exec as sweep_space::SearchSpace>::NAME)
    };
    let mut cfg = sweep_worker::WorkerConfig::new(a.connect, threads, registry);
    cfg.name = a.name.unwrap_or_else(default_worker_name);
    cfg.grace = Duration::from_secs(a.grace_secs);
    cfg.cache_dir = a.cache;
    cfg.security = a.security.security();
    cfg.lie = a.lie;
    if let Some(p) = a.prefetch {
        cfg.prefetch = p as usize;
    }
    let rt = runtime()?;
    let stats = rt
        .block_on(sweep_worker::run(cfg, shutdown_signal()))
        .map_err(|e| Exit {
            code: match e {
                sweep_worker::WorkerError::Refused(_) => exit::AUTH,
                sweep_worker::WorkerError::Connect(_) => exit::USAGE,
            },
            message: e.to_string(),
        })?;
    eprintln!(
        "worker done: {} chunks, {} failed, {} nodes",
        stats.chunks_done, stats.chunks_failed, stats.nodes
    );
    Ok(ExitCode::SUCCESS)
}

pub fn submit(registry: &Registry, raw: Vec<String>) -> anyhow::Result<ExitCode> {
    let parsed = match args::parse(registry, &raw)? {
        Ok(p) => p,
        Err(help) => {
            print!("{help}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let plan = parsed
        .job
        .plan(parsed.engine.chunks)
        .map_err(|e| usage(e.to_string()))?;
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&parsed.engine.coordinator, &parsed.engine.security).await?;
        if let Some(shipped) = parsed.ship {
            ship(&mut c, shipped).await?;
        }
        let resp = c
            .submit(v1::SubmitRequest {
                space: parsed.job.space().to_string(),
                params_json: parsed.job.params().to_string(),
                chunks: plan.n_chunks,
                priority: parsed.engine.priority,
                reuse_existing: false,
                replicate: parsed.engine.replicate,
            })
            .await?;
        let job = resp
            .job
            .ok_or_else(|| anyhow::anyhow!("the coordinator returned no job"))?;
        if parsed.engine.json {
            println!("{}", info_json(&job));
        } else {
            println!("submitted job {} ({} chunks)", job.id, job.chunks_total);
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn info_json(j: &v1::JobInfo) -> serde_json::Value {
    serde_json::json!({
        "job": j.id,
        "space": j.space,
        "params": serde_json::from_str::<serde_json::Value>(&j.params_json).unwrap_or(serde_json::Value::Null),
        "state": j.state,
        "priority": j.priority,
        "chunks_total": j.chunks_total,
        "chunks_done": j.chunks_done,
        "chunks_leased": j.chunks_leased,
        "chunks_poisoned": j.chunks_poisoned,
        "reissued": j.reissued,
        "completions": j.completions,
        "duplicates": j.duplicates,
        "replicate": j.replicate.max(1),
        "disagreements": j.disagreements,
        // `input_job` for scripts written when a job had one input at most.
        "input_job": (j.input_job != 0).then_some(j.input_job),
        "input_jobs": if j.input_jobs.is_empty() && j.input_job != 0 { vec![j.input_job] } else { j.input_jobs.clone() },
        "inputs_waiting": j.inputs_waiting,
        "artifact_digest": (!j.artifact_digest.is_empty()).then_some(&j.artifact_digest),
        "nodes": crate::output::big(j.nodes.parse().unwrap_or(0)),
        "unverified": j.unverified,
        "checkpoints": j.checkpoints,
        "failures": failures_json(&j.failures),
    })
}

pub fn failures_json(failures: &[v1::FailedAttempt]) -> Vec<serde_json::Value> {
    failures
        .iter()
        .map(|f| serde_json::json!({"chunk": f.chunk, "worker": f.worker, "error": f.error, "unix_ms": f.unix_ms}))
        .collect()
}

/// The lines that tell a person why a job's answer needs care: it cannot be re-verified, or attempts failed.
pub fn caveats(j: &v1::JobInfo) -> Vec<String> {
    let mut lines = Vec::new();
    if j.unverified {
        lines.push(format!(
            "job {}: unverified: the coordinator cannot re-check a {} chunk's answer; submit with --replicate 2 \
             or more to have distinct workers agree",
            j.id, j.space
        ));
    }
    for f in &j.failures {
        lines.push(format!(
            "job {} chunk {} failed on {}: {}",
            j.id, f.chunk, f.worker, f.error
        ));
    }
    lines
}

pub fn status(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let (jobs, workers) = match a.job {
            Some(id) => (vec![c.job_status(id).await?], None),
            None => {
                let r = c.list_jobs().await?;
                (r.jobs, Some(r.workers))
            }
        };
        if a.json {
            let list: Vec<_> = jobs.iter().map(info_json).collect();
            println!(
                "{}",
                serde_json::json!({ "jobs": list, "workers": workers })
            );
        } else {
            if let Some(w) = workers {
                println!("{w} live workers");
            }
            println!(
                "{:>5} {:<10} {:<26} {:>17} {:>8} {:>8}  params",
                "job", "space", "state", "chunks", "poisoned", "reissued"
            );
            for j in &jobs {
                println!(
                    "{:>5} {:<10} {:<26} {:>8}/{:<8} {:>8} {:>8}  {}",
                    j.id,
                    j.space,
                    j.state,
                    j.chunks_done,
                    j.chunks_total,
                    j.chunks_poisoned,
                    j.reissued,
                    j.params_json
                );
            }
            for j in &jobs {
                for line in caveats(j) {
                    println!("{line}");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub fn watch(a: WatchArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        // On stdout: watching is this command's whole output, so `sweep watch > log` gets plain lines.
        let mut bars = Bars::new(Mode::Stdout);
        let signal = shutdown_signal();
        tokio::pin!(signal);
        let mut backoff = Duration::from_millis(200);
        let mut connected_once = false;
        // Reconnects while the coordinator restarts; ends when the watched jobs finish or on Ctrl-C.
        loop {
            let attempt = async {
                let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
                let mut stream = c.watch(a.job.unwrap_or(0), a.interval_ms).await?;
                while let Some(ev) = stream.next().await? {
                    bars.update_folded(&ev, None);
                    let all_finished = !ev.jobs.is_empty() && ev.jobs.iter().all(|j| j.state != "running" && j.state != "paused");
                    if all_finished && !a.follow {
                        return Ok::<bool, anyhow::Error>(true);
                    }
                }
                Ok(false)
            };
            tokio::select! {
                r = attempt => match r {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        let failure = e.downcast_ref::<ClientError>();
                        if !connected_once && failure.and_then(ClientError::status).is_some_and(|s| s.code() == tonic::Code::NotFound) {
                            return Err(e);
                        }
                        // A refused token or a bad URL does not fix itself by reconnecting.
                        if matches!(failure, Some(ClientError::Refused(_) | ClientError::Settings(_))) {
                            return Err(e);
                        }
                        eprintln!("watch: {} (reconnecting)", crate::one_line(&e));
                    }
                },
                _ = &mut signal => break,
            }
            connected_once = true;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        bars.finish();
        Ok(ExitCode::SUCCESS)
    })
}

pub fn results(
    registry: &Registry,
    ResultsArgs { job: a, svg }: ResultsArgs,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let r = c.results(a.job).await?;
        let info = r
            .job
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the coordinator returned no job info"))?;
        let params: serde_json::Value =
            serde_json::from_str(&info.params_json).context("job parameters are not JSON")?;
        let job = registry
            .job_from_params(&info.space, &params)
            .with_context(|| {
                format!(
                    "job {} is of space `{}`, which this build of sweep cannot show",
                    info.id, info.space
                )
            })?;
        let result: serde_json::Value =
            serde_json::from_str(&r.result_json).context("the result is not JSON")?;
        let elapsed = if info.finished_unix_ms > 0 {
            info.finished_unix_ms.saturating_sub(info.created_unix_ms) as f64 / 1000.0
        } else {
            started.elapsed().as_secs_f64()
        };
        let report = Report {
            space: info.space.clone(),
            params,
            job: Some(info.id),
            state: info.state.clone(),
            chunks_total: info.chunks_total,
            chunks_done: info.chunks_done,
            nodes: info.nodes.parse().unwrap_or(0),
            elapsed_s: elapsed,
            result,
            poisoned: poisoned_list(&r),
            unverified: info.unverified,
            failures: failures_json(&info.failures),
        };
        report.print(job.as_ref(), a.json);
        crate::output::write_pictures(job.as_ref(), &report.result, svg.as_deref())?;
        Ok(ExitCode::SUCCESS)
    })
}

pub fn control(a: JobArgs, what: Control) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let info = match what {
            Control::Cancel => c.cancel(a.job).await?,
            Control::Pause => c.pause(a.job).await?,
            Control::Resume => c.resume(a.job).await?,
        };
        if a.json {
            println!("{}", info_json(&info));
        } else {
            println!("job {} is {}", info.id, info.state);
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn worker_json(w: &v1::WorkerStatus) -> serde_json::Value {
    serde_json::json!({
        "name": w.name,
        "threads": w.threads,
        "memory_bytes": w.memory_bytes,
        "last_seen_unix_ms": w.last_seen_unix_ms,
        "chunks_done": w.chunks_done,
        "leases_held": w.leases_held,
        "bad_results": w.bad_results,
        "banned": w.banned,
        "draining": w.draining,
        "version": w.version,
    })
}

/// `sweep workers`: every worker the coordinator has seen, with its standing.
pub fn workers(a: WorkersArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let list = c.list_workers().await?;
        if a.json {
            let list: Vec<_> = list.iter().map(worker_json).collect();
            println!("{}", serde_json::json!({ "workers": list }));
            return Ok(ExitCode::SUCCESS);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        println!(
            "{:<28} {:>7} {:>9} {:>10} {:>8} {:>6} {:>4}  state",
            "worker", "threads", "memory", "last seen", "chunks", "leases", "bad"
        );
        for w in &list {
            let state = if w.banned {
                "refused (bad results)"
            } else if w.draining {
                "draining"
            } else {
                "ok"
            };
            println!(
                "{:<28} {:>7} {:>7}G {:>9.1}s {:>8} {:>6} {:>4}  {}",
                w.name,
                w.threads,
                w.memory_bytes >> 30,
                now.saturating_sub(w.last_seen_unix_ms) as f64 / 1000.0,
                w.chunks_done,
                w.leases_held,
                w.bad_results,
                state
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `sweep drain WORKER`: the worker finishes what it holds, takes nothing new and exits.
pub fn drain(a: DrainArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let w = c.drain(&a.worker).await?;
        if a.json {
            println!("{}", worker_json(&w));
        } else {
            println!(
                "worker {} is draining: it finishes its {} leased chunks, then stops",
                w.name, w.leases_held
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
