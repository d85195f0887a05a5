//! `sweep store check|repair --data DIR`: inspect a store offline and rebuild it from its chunk records when
//! sled or a disk damaged it (see `sweep_coordinator::fsck`); `sweep store chunks` lists what each chunk of a
//! job found, for checking a slice of a long job against a recomputation. The store is opened exclusively, so
//! a running coordinator on the same directory makes these commands fail rather than race it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use sweep_coordinator::fsck;
use sweep_coordinator::scheduler::ChunkRecord;
use sweep_coordinator::store::{Lists, Store};
use sweep_space::{json_u128, Tally};

use crate::exit::{self, Exit};

#[derive(Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// List every inconsistency (undecodable records, done chunks without output, tallies that disagree with
    /// their chunks, damaged artifacts). Exit code 1 if there is any.
    Check(CheckArgs),
    /// Fix what `check` finds: lost chunks go back to pending (they run again), tallies are rebuilt from the
    /// chunks that stay done. Work may be repeated; nothing is invented.
    Repair(CheckArgs),
    /// List a job's chunks in a range: state, worker, nodes and counters of each, then their sums. A slice of
    /// a long job can be recomputed apart (another plan whose chunk boundaries fall on these) and compared.
    Chunks(ChunksArgs),
}

#[derive(Args)]
struct ChunksArgs {
    /// The store directory (the coordinator's --data).
    #[arg(long, default_value = "./sweep-data")]
    data: PathBuf,
    /// The job.
    #[arg(long)]
    job: u64,
    /// First chunk listed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Chunk after the last one listed (default: the job's chunk count).
    #[arg(long)]
    to: Option<u64>,
    /// One JSON object per chunk, then one with the sums.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CheckArgs {
    /// The store directory (the coordinator's --data).
    #[arg(long, default_value = "./sweep-data")]
    data: PathBuf,
    /// Also re-hash every artifact file (slow for large tables).
    #[arg(long)]
    deep: bool,
    #[arg(long)]
    json: bool,
}

/// Opens an existing store exclusively, saying what is wrong when it cannot.
fn open_store(data: &Path) -> anyhow::Result<Store> {
    if !data.join("conf").exists() && !data.join("db").exists() {
        return Err(Exit {
            code: exit::USAGE,
            message: format!("{} holds no sweep store", data.display()),
        }
        .into());
    }
    Store::open(data).with_context(|| {
        format!(
            "cannot open the store in {} (is a coordinator using it?)",
            data.display()
        )
    })
}

pub fn run(a: StoreArgs) -> anyhow::Result<ExitCode> {
    let (c, repair) = match a.command {
        StoreCommand::Check(c) => (c, false),
        StoreCommand::Repair(c) => (c, true),
        StoreCommand::Chunks(c) => return chunks(c),
    };
    let store = open_store(&c.data)?;
    let report = fsck::check(&store, c.deep).context("cannot read the store")?;
    let fixed = if repair && !report.is_clean() {
        fsck::repair(&store, &report).context("cannot write the repaired store")?
    } else {
        0
    };
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    if c.json {
        println!(
            "{}",
            serde_json::json!({
                "jobs": report.jobs,
                "chunk_records": report.chunk_records,
                "outputs": report.outputs,
                "problems": problems,
                "repaired": fixed,
            })
        );
    } else {
        println!(
            "{}: {} jobs, {} chunk records, {} outputs",
            c.data.display(),
            report.jobs,
            report.chunk_records,
            report.outputs
        );
        for p in &problems {
            println!("  {p}");
        }
        match (problems.is_empty(), repair) {
            (true, _) => println!("no problems found"),
            (false, false) => println!(
                "{} problems; `sweep store repair --data {}` fixes them",
                problems.len(),
                c.data.display()
            ),
            (false, true) => println!("{fixed} problems repaired"),
        }
    }
    Ok(if problems.is_empty() || repair {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}

fn chunks(c: ChunksArgs) -> anyhow::Result<ExitCode> {
    let usage = |message: String| -> anyhow::Error {
        Exit {
            code: exit::USAGE,
            message,
        }
        .into()
    };
    let store = open_store(&c.data)?;
    let jobs = store.load().context("cannot read the store")?.jobs;
    let Some(job) = jobs.iter().find(|j| j.id == c.job) else {
        let ids: Vec<String> = jobs.iter().map(|j| j.id.to_string()).collect();
        return Err(usage(format!(
            "no job {} in {} (jobs: {})",
            c.job,
            c.data.display(),
            if ids.is_empty() {
                "none".into()
            } else {
                ids.join(", ")
            }
        )));
    };
    let to = c.to.unwrap_or(job.n_chunks);
    if c.from >= to || to > job.n_chunks {
        return Err(usage(format!(
            "--from {} --to {to}: job {} has chunks 0..{}, and the range must not be empty",
            c.from, job.id, job.n_chunks
        )));
    }
    let records: BTreeMap<u64, ChunkRecord> = store
        .chunks(job.id)
        .context("cannot read the chunk records")?
        .into_iter()
        .filter(|(chunk, _)| (c.from..to).contains(chunk))
        .collect();
    let mut outputs = BTreeMap::new();
    // Counts only, and only the blocks of the range: a listed job's solutions are streamed by `sweep results
    // --solutions`.
    store
        .for_each_output_in(job.id, c.from..to, Lists::Skip, &mut |chunk, out| {
            outputs.insert(chunk, out);
            Ok::<(), anyhow::Error>(())
        })
        .context("cannot read the chunks' outputs")?;
    let mut sums = Tally::default();
    let mut done = 0u64;
    for chunk in c.from..to {
        let (state, worker) = match records.get(&chunk) {
            None | Some(ChunkRecord::Pending { .. }) => ("pending", ""),
            Some(ChunkRecord::Leased { worker, .. }) => ("leased", worker.as_str()),
            Some(ChunkRecord::Done { worker, .. }) => ("done", worker.as_str()),
            Some(ChunkRecord::Poisoned { .. }) => ("poisoned", ""),
        };
        let out = outputs.get(&chunk).filter(|_| state == "done");
        if let Some(out) = out {
            sums.add(out);
            done += 1;
        }
        if c.json {
            println!(
                "{}",
                serde_json::json!({
                    "chunk": chunk,
                    "state": state,
                    "worker": worker,
                    "nodes": out.map(|o| o.nodes),
                    "counters": out.map(|o| counters_json(&o.counters)),
                })
            );
        } else {
            let found = out.map_or(String::new(), |o| {
                let counters: Vec<String> = o
                    .counters
                    .iter()
                    .map(|(k, v)| format!(" {k}={v}"))
                    .collect();
                format!(" nodes={}{}", o.nodes, counters.concat())
            });
            let by = if worker.is_empty() {
                String::new()
            } else {
                format!(" ({worker})")
            };
            println!("chunk {chunk} {state}{by}{found}");
        }
    }
    if c.json {
        println!(
            "{}",
            serde_json::json!({
                "from": c.from,
                "to": to,
                "done": done,
                "nodes": json_u128(sums.nodes),
                "counters": counters_json(&sums.counters),
            })
        );
    } else {
        let counters: Vec<String> = sums
            .counters
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
        println!(
            "chunks {}..{to}: {done} of {} done, nodes={}{}",
            c.from,
            to - c.from,
            sums.nodes,
            counters.concat()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Counters as JSON, each a number while it fits in 64 bits (as everywhere in sweep's JSON: `json_u128`).
fn counters_json(counters: &BTreeMap<String, u128>) -> serde_json::Value {
    counters
        .iter()
        .map(|(k, v)| (k.clone(), json_u128(*v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}
