//! `sweep submit SPACE [OPTIONS]`: hand a job to a running coordinator.

use std::process::ExitCode;

use sweep_proto::v1;
use sweep_space::Registry;

use crate::args;
use crate::exec_program::RunsOn;
use crate::exit::usage;
use crate::remote::{connect, ship};
use crate::render::{attempts_note, info_json};
use crate::runtime::runtime;

pub fn submit(registry: &Registry, raw: Vec<String>) -> anyhow::Result<ExitCode> {
    let parsed = match args::parse(registry, &raw)? {
        Ok(p) => p,
        Err(help) => {
            print!("{help}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    if parsed.engine.solutions.is_some() {
        return Err(usage(
            "--solutions is for `run`; for a submitted job use `sweep results JOB --solutions FILE`",
        ));
    }
    let plan = parsed.checked_plan(RunsOn::Workers)?;
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&parsed.engine.coordinator, &parsed.engine.security).await?;
        if let Some(shipped) = parsed.ship {
            ship(&mut c, shipped.files).await?;
        }
        let resp = c
            .submit(v1::SubmitRequest {
                space: parsed.job.space().to_string(),
                params_json: parsed.job.params().to_string(),
                chunks: plan.n_chunks,
                priority: parsed.engine.priority,
                reuse_existing: false,
                replicate: parsed.engine.replicate,
                count_only: parsed.engine.count_only,
                max_attempts: parsed.engine.max_attempts,
                share: parsed.engine.share,
                chunk_time_hint_ms: parsed.engine.chunk_time_hint,
            })
            .await?;
        let job = resp
            .job
            .ok_or_else(|| anyhow::anyhow!("the coordinator returned no job"))?;
        if let Some(note) = attempts_note(parsed.engine.max_attempts, &job) {
            eprintln!("{note}");
        }
        if parsed.engine.json {
            println!("{}", info_json(&job));
        } else {
            println!("submitted job {} ({} chunks)", job.id, job.chunks_total);
        }
        Ok(ExitCode::SUCCESS)
    })
}
