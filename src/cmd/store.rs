//! `sweep store check|repair --data DIR`: inspect a store offline and rebuild it from its chunk records when
//! sled or a disk damaged it (see `sweep_coordinator::fsck`). The store is opened exclusively, so a running
//! coordinator on the same directory makes these commands fail rather than race it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use sweep_coordinator::fsck;
use sweep_coordinator::store::Store;

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

pub fn run(a: StoreArgs) -> anyhow::Result<ExitCode> {
    let (c, repair) = match a.command {
        StoreCommand::Check(c) => (c, false),
        StoreCommand::Repair(c) => (c, true),
    };
    if !c.data.join("conf").exists() && !c.data.join("db").exists() {
        return Err(Exit {
            code: exit::USAGE,
            message: format!("{} holds no sweep store", c.data.display()),
        }
        .into());
    }
    let store = Store::open(&c.data).with_context(|| {
        format!(
            "cannot open the store in {} (is a coordinator using it?)",
            c.data.display()
        )
    })?;
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
