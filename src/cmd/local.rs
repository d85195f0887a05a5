//! `sweep run` (embedded coordinator + local workers over real gRPC) and `sweep solve` (in-process, rayon): a
//! job on this machine.

use std::cell::RefCell;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use sweep_coordinator::store::{FinishedArtifacts, Store};
use sweep_coordinator::{start, CoordinatorConfig, Options, StartError};
use sweep_engine::inputs::{self, DagNode};
use sweep_engine::local;
use sweep_proto::v1;
use tokio::sync::oneshot;

use crate::args::{self, JobArgs};
use crate::exit::{self, usage, Exit};
use crate::output::{Report, ReportResult};
use crate::progress::{Bars, Mode};
use crate::render::{answer_form, gib, results_report};
use crate::runtime::{runtime, shutdown_signal};
use sweep_space::Registry;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn parse_or_help(registry: &Registry, args: &[String]) -> anyhow::Result<Option<JobArgs>> {
    // Here the command runs on this machine, for the person who typed it: in the directory they typed it in.
    let args = match args.split_first() {
        Some((space, rest)) => {
            let rest = crate::exec_args::in_current_dir(space, rest.to_vec())?;
            std::iter::once(space.clone()).chain(rest).collect()
        }
        None => Vec::new(),
    };
    match args::parse(registry, &args)? {
        Ok(parsed) => Ok(Some(parsed)),
        Err(help) => {
            print!("{help}");
            Ok(None)
        }
    }
}

/// A job to run on this machine (`run` or `solve`): its parsed arguments, its plan and the threads to use.
struct LocalJob {
    args: JobArgs,
    plan: sweep_space::Plan,
    threads: usize,
}

/// Parses `run`/`solve` arguments and what both check the same way; `None` when help was printed.
fn local_job(registry: &Registry, raw: &[String]) -> anyhow::Result<Option<LocalJob>> {
    let Some(args) = parse_or_help(registry, raw)? else {
        return Ok(None);
    };
    let plan = args.checked_plan(crate::exec_program::RunsOn::ThisMachine)?;
    if args.engine.replicate > 1 {
        return Err(usage(
            "--replicate needs several independent workers: use `sweep submit` to a coordinator",
        ));
    }
    let threads = args
        .engine
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(default_threads);
    Ok(Some(LocalJob {
        args,
        plan,
        threads,
    }))
}

/// Parses a local command's arguments and runs `f` on them; help printed instead is a success.
fn with_local_job(
    registry: &Registry,
    raw: &[String],
    f: impl FnOnce(LocalJob) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    match local_job(registry, raw)? {
        Some(local) => f(local),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// What the embedded worker is told it connects to: it reaches the coordinator in process and never dials it.
const IN_PROCESS_URL: &str = "in-process";

pub fn run(registry: &Registry, raw: Vec<String>) -> anyhow::Result<ExitCode> {
    with_local_job(registry, &raw, |local| run_local(registry, local))
}

fn run_local(registry: &Registry, local: LocalJob) -> anyhow::Result<ExitCode> {
    let LocalJob {
        args: JobArgs { job, engine, ship },
        plan,
        threads,
    } = local;
    fits_the_local_worker(job.chunk_memory(), sweep_worker::memory::detect())?;
    let started = Instant::now();
    let rt = runtime()?;
    rt.block_on(async move {
        let mut config = CoordinatorConfig { registry: registry.clone(), ..CoordinatorConfig::default() };
        // The embedded coordinator is the person's own: its ceiling rises to what they ask for, and stays at the
        // usual default for the other jobs of the store.
        if let Some(n) = engine.max_attempts {
            config.scheduler.max_attempts = config.scheduler.max_attempts.max(n);
        }
        // No listener: the worker and the bars call the coordinator's services in process (a listing job's
        // solutions, 24 MB for star n = 12, crossed loopback TCP and HTTP/2 framing otherwise, a tenth of the
        // run's CPU), and its background tasks (commits, expiry, merges) run all the same.
        let options = Options {
            data: engine.data.clone(),
            config,
            security: Default::default(),
            listen: None,
            http: None,
            group: None,
        };
        let coordinator = start(options).await.map_err(|e| match e {
            StartError::Load(source) => anyhow::Error::new(source)
                .context(format!("cannot load the jobs stored in {}", engine.data.display())),
            e => crate::cmd::coordinator::start_failure(e),
        })?;
        let (work_link, jobs_link) =
            coordinator.in_process().ok_or_else(|| anyhow::anyhow!("the embedded coordinator is not a single one"))?;
        let mut jobs = sweep_client::Client::in_process(jobs_link);
        if let Some(shipped) = ship {
            crate::remote::ship(&mut jobs, shipped.files).await?;
        }
        let submitted = jobs
            .submit(v1::SubmitRequest {
                space: job.space().to_string(),
                params_json: job.params().to_string(),
                chunks: plan.n_chunks,
                priority: engine.priority,
                reuse_existing: true,
                replicate: 1,
                count_only: engine.count_only,
                max_attempts: engine.max_attempts,
                share: engine.share,
                chunk_time_hint_ms: engine.chunk_time_hint,
            })
            .await?;
        let mut info = submitted.job.ok_or_else(|| anyhow::anyhow!("the coordinator returned no job"))?;
        // `sweep run` means "get me the answer": a job someone paused is resumed.
        if submitted.existing && info.state() == v1::JobState::Paused {
            info = jobs.resume(info.id).await?;
        }
        // On stderr even with --json: stdout carries only the answer.
        if submitted.existing && info.state() == v1::JobState::Running {
            let pieces = match info.pieces {
                0 => String::new(),
                1 => ", 1 piece split off".to_string(),
                n => format!(", {n} pieces split off"),
            };
            eprintln!(
                "resuming job {} from {} ({}/{} chunks already done{pieces})",
                info.id,
                engine.data.display(),
                crate::render::covered_figure(&info),
                crate::render::plan_chunks(&info)
            );
        } else if submitted.existing {
            eprintln!("job {} in {} is already {}: answering from the store", info.id, engine.data.display(), info.state().label());
        }
        let (stop_worker, worker_stopped) = oneshot::channel::<()>();
        // The worker reaches the coordinator in process only: the URL is never dialled.
        let worker_cfg = sweep_worker::WorkerConfig {
            in_process: Some(work_link),
            ..sweep_worker::WorkerConfig::new(IN_PROCESS_URL.to_string(), threads, registry.clone())
        };
        let mut worker = tokio::spawn(sweep_worker::run(worker_cfg, async {
            let _ = worker_stopped.await;
        }));
        // Every job, folded to ours and the inputs it waits for (a table built first, the layers of a layered
        // search): its bar, the input running now, and how many of its inputs are done.
        let quiet = engine.json || engine.no_progress;
        // Bars want ten views a second; without them the view is only for noticing the end, and a change of a
        // job's state wakes the stream at once, so a rare tick costs the computing programs nothing.
        let mut stream = jobs.watch(0, if quiet { 2_000 } else { 100 }).await?;
        let mut bars = Bars::new(if quiet { Mode::Off } else { Mode::Auto });
        let signal = shutdown_signal();
        tokio::pin!(signal);
        let interrupted = loop {
            tokio::select! {
                ev = stream.next() => {
                    let Some(ev) = ev? else { anyhow::bail!("the embedded coordinator stopped reporting progress") };
                    bars.update_folded(&ev, Some(info.id));
                    if ev.jobs.iter().any(|j| j.id == info.id && !matches!(j.state(), v1::JobState::Running | v1::JobState::Paused)) {
                        break false;
                    }
                }
                _ = &mut signal => break true,
                // Only an error stops the embedded worker before it is told to: nothing would run the job.
                stopped = &mut worker => {
                    let why = match stopped {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(_)) => "it stopped".to_string(),
                        Err(e) => format!("it crashed: {e}"),
                    };
                    anyhow::bail!("the embedded worker stopped before the job ended: {why}");
                }
            }
        };
        bars.finish();
        let _ = stop_worker.send(());
        // The answer is asked for while the worker stops: the job is finished, nothing the worker still sends
        // can change it. The report reads the forms asked for, so both use this one value.
        let form = answer_form(engine.json, engine.svg.is_some());
        let (_, results) = tokio::join!(tokio::time::timeout(Duration::from_secs(60), worker), async {
            if interrupted {
                Ok(None)
            } else {
                jobs.results(info.id, form).await.map(Some)
            }
        });
        let results = results?;
        // Streamed while the embedded coordinator still serves: the list never has to fit in memory.
        if let (Some(path), Some(_)) = (&engine.solutions, &results) {
            crate::remote::write_solutions(&mut jobs, info.id, path).await?;
        }
        // The coordinator's watch streams end when it stops; ours are closed first so nothing waits on them.
        drop(stream);
        drop(jobs);
        let stopping = coordinator.shutdown();
        // The answer is durable once `results` returns, so it is printed while the coordinator shuts down (its
        // last commits and sled's flush) on the runtime's threads; a failed shutdown is still reported after it.
        let answered = results.map(|results| {
            report_run(results, form, info, (&job, &engine), started)
        });
        stopping.await.context("embedded coordinator")?;
        answered.unwrap_or_else(|| {
            Err(Exit {
                code: exit::INTERRUPTED,
                message: format!(
                    "interrupted; progress is stored in {}: run the same command again to resume",
                    engine.data.display()
                ),
            }
            .into())
        })
    })
}

/// Refuses a job whose chunks each need `chunk_memory` bytes when the embedded worker, the only one `run`
/// has, reports less (`worker_memory`; 0: unknown): the coordinator would lease it none, and the job would wait
/// for ever.
fn fits_the_local_worker(chunk_memory: Option<u64>, worker_memory: u64) -> anyhow::Result<()> {
    match chunk_memory {
        Some(needs) if worker_memory != 0 && worker_memory < needs => Err(usage(format!(
            "each chunk of this job needs {}, and this machine's worker has {} (the lower of its memory \
             and its cgroup's limit): submit it to a coordinator whose workers have more",
            gib(needs),
            gib(worker_memory)
        ))),
        _ => Ok(()),
    }
}

/// Prints a finished `sweep run`'s answer, `results` as asked for in `form` (and writes its pictures); the exit
/// code says whether it is whole.
fn report_run(
    results: v1::ResultsResponse,
    form: v1::AnswerForm,
    info: v1::JobInfo,
    (job, engine): (&sweep_space::SpaceJob, &args::EngineOpts),
    started: Instant,
) -> anyhow::Result<ExitCode> {
    let final_info = results.job.clone().unwrap_or(info);
    let report = results_report(
        results,
        &final_info,
        (job.space().to_string(), job.params().clone()),
        started.elapsed().as_secs_f64(),
        form,
    )
    .context("the coordinator sent a result that is not JSON")?;
    report
        .print(job, engine.json)
        .context("the coordinator sent a result that is not JSON")?;
    crate::output::write_pictures(job, &report.result, engine.svg.as_deref())?;
    Ok(
        if report.poisoned.is_empty() && final_info.state() == v1::JobState::Done {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(exit::POISONED)
        },
    )
}

/// The merged artifacts of finished jobs in the store at `--data`, through the store's own API. A missing
/// store, one in use by a running coordinator, or no such job all mean "build it here".
fn stored_artifacts(data: &std::path::Path) -> Option<FinishedArtifacts> {
    if !data.join("conf").exists() {
        return None;
    }
    Store::open(data).ok()?.finished_artifacts().ok()
}

/// The last job of `dag` bound to its inputs: each built here (a bar per input) or read from the store in
/// `--data`.
fn bind_dag(
    pool: &rayon::ThreadPool,
    dag: Vec<DagNode>,
    engine: &args::EngineOpts,
    show: bool,
) -> anyhow::Result<sweep_space::SpaceJob> {
    // Open only while the engine looks inputs up: building them can take long, and a store held open is
    // locked against a `sweep run` on the same --data meanwhile.
    let finished = RefCell::new(stored_artifacts(&engine.data));
    let stored =
        |job: &sweep_space::SpaceJob| finished.borrow().as_ref()?.get(job.space(), job.params());
    let bar = SolveBar::new(show);
    let building = |built: usize, to_build: usize, label: &str, n_chunks: u64| {
        drop(finished.borrow_mut().take());
        bar.start(n_chunks);
        if !engine.json {
            eprintln!(
                "building input {built}/{to_build} (not stored in {}; `sweep run` stores it): {label}",
                engine.data.display(),
            );
        }
    };
    let progress = |done: u64, nodes: u64| bar.update(done, nodes);
    let sources = local::DagSources {
        stored: &stored,
        building: &building,
        progress: &progress,
    };
    local::bind_dag(pool, dag, &sources).map_err(local_error)
}

/// A run's errors as the command reports them: a space's refusal of its own plan or inputs is a usage error.
fn local_error(e: local::RunError) -> anyhow::Error {
    match e {
        local::RunError::Plan { .. } => usage(e.to_string()),
        other => anyhow::Error::new(other),
    }
}

/// The bar `solve` draws on stderr while chunks run (none when not `show`).
struct SolveBar {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
}

impl SolveBar {
    fn new(show: bool) -> SolveBar {
        let bar = show.then(|| {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "solve [{bar:30}] {pos}/{len} chunks {msg} ETA {eta}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        SolveBar {
            bar,
            started: Instant::now(),
        }
    }

    fn start(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(n);
            bar.set_position(0);
        }
    }

    fn update(&self, done: u64, nodes: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            let rate = nodes as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!("{} nodes/s", crate::output::human(rate)));
        }
    }
}

impl Drop for SolveBar {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

pub fn solve(registry: &Registry, raw: Vec<String>) -> anyhow::Result<ExitCode> {
    with_local_job(registry, &raw, |local| solve_local(registry, local))
}

fn solve_local(registry: &Registry, local: LocalJob) -> anyhow::Result<ExitCode> {
    let (JobArgs { job, engine, ship }, plan, threads) = (local.args, local.plan, local.threads);
    if engine.max_attempts.is_some() {
        return Err(usage(
            "--max-attempts is for `run` and `submit`: `solve` runs each chunk once and stops at the first that fails",
        ));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start the thread pool")?;
    let started = Instant::now();
    let show = !(engine.json || engine.no_progress)
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A job that needs other jobs' artifacts (a table, the layers of a layered search) gets them the same way:
    // solved here first, or read from the store in --data.
    // Shipped files (`exec --ship`) are the job's only inputs that are not jobs: bound here directly.
    let job = match ship {
        Some(shipped) => job
            .bind_inputs(&[shipped.files.packed.as_slice()])
            .map_err(|e| usage(format!("the shipped files: {e}")))?,
        None => job,
    };
    let dag = inputs::resolve(job.clone(), &|space: &str, params: &serde_json::Value| {
        registry.job_from_params(space, params)
    })
    .map_err(|e| usage(format!("the job's inputs: {e}")))?;
    let job = if dag.len() > 1 {
        bind_dag(&pool, dag, &engine, show)?
    } else {
        job
    };
    let n = plan.n_chunks;
    if engine.solutions.is_some() {
        return Err(usage(
            "--solutions needs the store that `run` keeps (solve holds no list to stream): use `sweep run`",
        ));
    }
    let bar = SolveBar::new(show);
    bar.start(n);
    let answer = local::run_chunks(&pool, &job, n, engine.count_only, &|done, nodes| {
        bar.update(done, nodes)
    })
    .map_err(local_error)?;
    drop(bar);
    let (json, text) = job.result_texts(&answer);
    let report = Report {
        space: job.space().to_string(),
        params: job.params().clone(),
        job: None,
        state: "done".into(),
        chunks_total: n,
        chunks_done: n,
        pieces: None,
        nodes: answer.tally.nodes,
        elapsed_s: started.elapsed().as_secs_f64(),
        result: ReportResult::sent(json, text).context("the answer as JSON")?,
        poisoned: Vec::new(),
        unverified: !job.verifiable(),
        failures: Vec::new(),
        listing: listing_label(engine.count_only).into(),
        solutions_listed: answer.solutions_listed,
        max_attempts: None,
    };
    report
        .print(&job, engine.json)
        .context("the answer as JSON")?;
    crate::output::write_pictures(&job, &report.result, engine.svg.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// What `solve` reports as its listing, in the words the coordinator uses.
fn listing_label(count_only: bool) -> &'static str {
    if count_only {
        v1::Listing::CountOnly.label()
    } else {
        v1::Listing::All.label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_refuses_a_job_its_worker_has_too_little_memory_for() {
        const GIB: u64 = 1 << 30;
        assert!(fits_the_local_worker(None, GIB).is_ok());
        assert!(fits_the_local_worker(Some(GIB), GIB).is_ok());
        assert!(
            fits_the_local_worker(Some(8 * GIB), 0).is_ok(),
            "unknown memory"
        );
        let err = fits_the_local_worker(Some(8 * GIB), 4 * GIB).unwrap_err();
        assert!(
            err.to_string()
                .contains("needs 8.0 GiB, and this machine's worker has 4.0 GiB"),
            "{err}"
        );
        assert_eq!(
            err.downcast_ref::<Exit>().map(|e| e.code),
            Some(exit::USAGE)
        );
    }
}
