//! `sweep worker`: lease chunks from a coordinator and run them on this machine's cores.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use sweep_space::Registry;

use crate::exit::{self, Exit};
use crate::runtime::{runtime, shutdown_signal};

#[derive(Args)]
pub struct WorkerArgs {
    /// Coordinator URL; for a replicated coordinator, its members' URLs separated by commas (the worker
    /// follows the leader).
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
    /// Run `exec` chunks: any program an admin submits, as this worker's user. Off by default.
    #[arg(long)]
    allow_exec: bool,
    /// Run each `exec` chunk in a sandbox: new user, mount, PID, IPC and (unless its job asks for the network)
    /// network namespaces; the file system read-only but its private directory; other chunks' files hidden.
    #[arg(long, requires = "allow_exec")]
    sandbox: bool,
    /// Memory this worker's chunks may use, e.g. `16G` or `512M` (K, M, G, T are powers of 1024): a job that
    /// needs more per chunk goes to other workers. Default: the machine's memory, or its cgroup's limit when
    /// that is lower.
    #[arg(long, value_name = "BYTES", value_parser = sweep_contain::parse_bytes)]
    memory: Option<u64>,
}

/// Starts `true` in the sandbox once, so that a worker that cannot make one says so at start, not per chunk.
fn check_sandbox() -> std::io::Result<()> {
    let dir = tempfile_dir()?;
    let spec = sweep_contain::Spec {
        program: "true".into(),
        args: Vec::new(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        cwd: dir.clone(),
        limits: Default::default(),
        private_dir: None,
        sandbox: Some(sweep_contain::Sandbox {
            writable: vec![dir.clone()],
            readable: Vec::new(),
            hide: vec![std::env::temp_dir()],
            network: false,
        }),
    };
    let outcome = sweep_contain::spawn(&spec).and_then(|mut b| b.wait());
    let _ = std::fs::remove_dir(&dir);
    match outcome {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(std::io::Error::other(format!(
            "`true` in the sandbox ended with {}",
            o.status
        ))),
        Err(e) => Err(e),
    }
}

fn tempfile_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("sweep-sandbox-check-{}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
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
            .without(<sweep_exec::Exec as sweep_space::SearchSpace>::NAME)
    };
    if a.allow_exec {
        crate::start_launcher();
        sweep_contain::set_policy(sweep_contain::Policy { sandbox: a.sandbox });
        if a.sandbox {
            check_sandbox().map_err(|e| Exit {
                code: exit::USAGE,
                message: format!("--sandbox: this machine cannot make the sandbox: {e}"),
            })?;
        }
        tracing::info!(
            containment = %sweep_contain::Facilities::get().summary(),
            sandbox = a.sandbox,
            "exec chunks run in boxes"
        );
    }
    let mut cfg = sweep_worker::WorkerConfig::new(a.connect, threads, registry);
    cfg.name = a.name.unwrap_or_else(default_worker_name);
    cfg.grace = Duration::from_secs(a.grace_secs);
    cfg.cache_dir = a.cache;
    cfg.security = a.security.security();
    cfg.memory_bytes = a.memory;
    // What contains this worker's programs, as `sweep workers` shows it; a worker without --allow-exec runs
    // only built-in kernels, which start no processes.
    cfg.containment = if a.allow_exec {
        let summary = sweep_contain::Facilities::get().summary();
        if a.sandbox {
            format!("sandbox; {summary}")
        } else {
            summary
        }
    } else {
        "no programs (no --allow-exec)".into()
    };
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
                // Usually a --threads beyond what this machine lets one process start.
                sweep_worker::WorkerError::Threads(..) => exit::USAGE,
                sweep_worker::WorkerError::Config(_) => exit::USAGE,
            },
            message: e.to_string(),
        })?;
    sweep_contain::shutdown();
    eprintln!(
        "worker done: {} chunks, {} failed, {} nodes",
        stats.chunks_done, stats.chunks_failed, stats.nodes
    );
    Ok(ExitCode::SUCCESS)
}
