//! `sweep workers` and `sweep drain WORKER`: the workers a coordinator has seen, and sending one away.

use std::process::ExitCode;

use clap::Args;

use crate::remote::{connect, Remote};
use crate::render::{gib, worker_json};
use crate::runtime::runtime;

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

/// `sweep workers`: every worker the coordinator has seen, with its standing.
pub fn workers(a: WorkersArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let list = c.list_workers().await?;
        if a.json {
            let list: Vec<_> = list.iter().map(worker_json).collect();
            outln!("{}", serde_json::json!({ "workers": list }));
            return Ok(ExitCode::SUCCESS);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        outln!(
            "{:<28} {:>7} {:>10} {:>10} {:>8} {:>6} {:>4}  {:<21}  containment",
            "worker",
            "threads",
            "memory",
            "last seen",
            "chunks",
            "leases",
            "bad",
            "state"
        );
        for w in &list {
            let state = if w.banned {
                "refused (bad results)"
            } else if w.draining {
                "draining"
            } else {
                "ok"
            };
            // 0 and empty: the worker did not say.
            let memory = match w.memory_bytes {
                0 => "-".to_string(),
                bytes => gib(bytes),
            };
            let containment = match w.containment.as_str() {
                "" => "-",
                c => c,
            };
            outln!(
                "{:<28} {:>7} {:>10} {:>9.1}s {:>8} {:>6} {:>4}  {:<21}  {}",
                w.name,
                w.threads,
                memory,
                now.saturating_sub(w.last_seen_unix_ms) as f64 / 1000.0,
                w.chunks_done,
                w.leases_held,
                w.bad_results,
                state,
                containment
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
            outln!("{}", worker_json(&w));
        } else {
            outln!(
                "worker {} is draining: it finishes its {} leased chunks, then stops",
                w.name,
                w.leases_held
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
