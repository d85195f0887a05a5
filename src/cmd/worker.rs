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
    /// Run `exec` chunks: any program an admin submits, as this worker's user. Off by default.
    #[arg(long)]
    allow_exec: bool,
    /// Memory this worker's chunks may use, e.g. `16G` or `512M` (K, M, G, T are powers of 1024): a job that
    /// needs more per chunk goes to other workers. Default: the machine's memory, or its cgroup's limit when
    /// that is lower.
    #[arg(long, value_name = "BYTES", value_parser = sweep_worker::memory::parse_bytes)]
    memory: Option<u64>,
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
    let mut cfg = sweep_worker::WorkerConfig::new(a.connect, threads, registry);
    cfg.name = a.name.unwrap_or_else(default_worker_name);
    cfg.grace = Duration::from_secs(a.grace_secs);
    cfg.cache_dir = a.cache;
    cfg.security = a.security.security();
    cfg.memory_bytes = a.memory;
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
    eprintln!(
        "worker done: {} chunks, {} failed, {} nodes",
        stats.chunks_done, stats.chunks_failed, stats.nodes
    );
    Ok(ExitCode::SUCCESS)
}
