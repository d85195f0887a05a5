//! `sweep status`, `watch`, `results`, `cancel`, `pause` and `resume`: one job, or every job, of a running
//! coordinator.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use sweep_client::ClientError;
use sweep_space::Registry;

use crate::exit::one_line;
use crate::progress::{Bars, Mode};
use crate::remote::{connect, Remote};
use crate::render::{
    answer_form, caveats, covered_figure, identity_json, info_json, plan_chunks, results_report,
};
use crate::runtime::{runtime, shutdown_signal};

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
    /// Write every solution the job stored into this file, one per line, in chunk order (streamed: any
    /// number of them).
    #[arg(long, value_name = "FILE")]
    solutions: Option<PathBuf>,
}

pub enum Control {
    Cancel,
    Pause,
    Resume,
}

pub fn status(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let (jobs, workers, identities) = match a.job {
            Some(id) => (vec![c.job_status(id).await?], None, Vec::new()),
            None => {
                let r = c.list_jobs().await?;
                (r.jobs, Some(r.workers), r.identities)
            }
        };
        if a.json {
            let list: Vec<_> = jobs.iter().map(info_json).collect();
            let identities: Vec<_> = identities.iter().map(identity_json).collect();
            outln!(
                "{}",
                serde_json::json!({ "jobs": list, "workers": workers, "identities": identities })
            );
        } else {
            if let Some(w) = workers {
                outln!("{w} live workers");
            }
            outln!("{}", status_header());
            for j in &jobs {
                outln!("{}", status_row(j));
            }
            for j in &jobs {
                for line in caveats(j) {
                    outln!("{line}");
                }
            }
            if !identities.is_empty() {
                outln!();
                outln!(
                    "{:<24} {:>8} {:>8} {:>22}",
                    "identity",
                    "share",
                    "threads",
                    "use (thread-h, decayed)"
                );
                for u in &identities {
                    let name = if u.identity.is_empty() {
                        "(no token)"
                    } else {
                        u.identity.as_str()
                    };
                    outln!(
                        "{:<24} {:>8} {:>8} {:>22.2}",
                        name,
                        u.share,
                        u.running_threads,
                        u.decayed_thread_seconds / 3600.0
                    );
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The head of `sweep status`'s table.
fn status_header() -> String {
    format!(
        "{:>5} {:<10} {:<26} {:>17} {:>8} {:>8} {:>8}  params",
        "job", "space", "state", "chunks", "pieces", "poisoned", "reissued"
    )
}

/// One job in `sweep status`'s table: its chunks as the plan covered out of the plan's chunks (never falling
/// when a chunk splits), and the pieces splitting added.
fn status_row(j: &sweep_proto::v1::JobInfo) -> String {
    format!(
        "{:>5} {:<10} {:<26} {:>8}/{:<8} {:>8} {:>8} {:>8}  {}",
        j.id,
        j.space,
        j.state().label(),
        covered_figure(j),
        plan_chunks(j),
        j.pieces,
        j.chunks_poisoned,
        j.reissued,
        j.params_json
    )
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
                    let all_finished = !ev.jobs.is_empty() && ev.jobs.iter().all(|j| !matches!(j.state(), sweep_proto::v1::JobState::Running | sweep_proto::v1::JobState::Paused));
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
                        eprintln!("watch: {} (reconnecting)", one_line(&e));
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
    ResultsArgs {
        job: a,
        svg,
        solutions,
    }: ResultsArgs,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&a.remote.coordinator, &a.remote.security).await?;
        let form = answer_form(a.json, svg.is_some());
        let r = c.results(a.job, form).await?;
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
        let now_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let elapsed =
            job_seconds(&info, now_unix_ms).unwrap_or_else(|| started.elapsed().as_secs_f64());
        let report = results_report(r, &info, (info.space.clone(), params), elapsed, form)
            .context("the result is not JSON")?;
        report
            .print(&job, a.json)
            .context("the result is not JSON")?;
        crate::output::write_pictures(&job, &report.result, svg.as_deref())?;
        if let Some(path) = solutions {
            if !info.state().is_finished() {
                eprintln!(
                    "job {} is {}: these are the solutions of its chunks done so far",
                    info.id,
                    info.state().label()
                );
            }
            crate::remote::write_solutions(&mut c, a.job, &path).await?;
        }
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
            outln!("{}", info_json(&info));
        } else {
            outln!("job {} is {}", info.id, info.state().label());
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// How long job `info` has run: from its creation to its end, or to `now_unix_ms` while it runs (this machine's
/// clock against the coordinator's); `None` if the coordinator gave no creation time or the clocks disagree.
fn job_seconds(info: &sweep_proto::v1::JobInfo, now_unix_ms: u64) -> Option<f64> {
    if info.created_unix_ms == 0 {
        return None;
    }
    let end = match info.finished_unix_ms {
        0 => now_unix_ms,
        finished => finished,
    };
    end.checked_sub(info.created_unix_ms)
        .map(|ms| ms as f64 / 1000.0)
}

#[cfg(test)]
mod elapsed_tests {
    use super::*;

    /// A running job's rate is over the time it has run, not over the few milliseconds `sweep results` took
    /// (which made a job two days in report tera-nodes per second).
    #[test]
    fn a_job_runs_from_its_creation_to_its_end_or_to_now() {
        let job = |created, finished| sweep_proto::v1::JobInfo {
            created_unix_ms: created,
            finished_unix_ms: finished,
            ..Default::default()
        };
        assert_eq!(job_seconds(&job(1_000, 61_000), 90_000), Some(60.0));
        assert_eq!(job_seconds(&job(1_000, 0), 3_601_000), Some(3600.0));
        assert_eq!(
            job_seconds(&job(5_000, 0), 4_000),
            None,
            "a clock behind the coordinator's"
        );
        assert_eq!(job_seconds(&job(0, 0), 4_000), None, "no creation time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sweep_proto::v1;

    #[test]
    fn the_status_table_shows_the_plan_covered_and_the_pieces() {
        let header = status_header();
        let j = v1::JobInfo {
            id: 7,
            space: "billiard".into(),
            state: v1::JobState::Running as i32,
            chunks_total: 67,
            pieces: 3,
            chunks_done: 20,
            chunks_covered: 18.25,
            chunks_poisoned: 1,
            reissued: 2,
            params_json: "{}".into(),
            ..Default::default()
        };
        let row = status_row(&j);
        assert_eq!(
            row,
            "    7 billiard   running                        18.2/64              3        1        2  {}"
        );
        // The new column lines up with its head.
        let at = |line: &str, word: &str| line.find(word).map(|i| i + word.len());
        assert_eq!(at(&header, "pieces"), at(&row, " 3"));
        // Unsplit, the covered chunks are the done ones.
        let plain = v1::JobInfo {
            chunks_total: 64,
            pieces: 0,
            chunks_done: 12,
            chunks_covered: 0.0,
            ..j
        };
        assert!(
            status_row(&plain).contains("      12/64              0 "),
            "{}",
            status_row(&plain)
        );
    }
}
