//! `sweep run` (embedded coordinator + local workers over real gRPC) and `sweep solve` (in-process, rayon).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rayon::prelude::*;
use sweep_coordinator::{store::Store, Coordinator, CoordinatorConfig};
use sweep_proto::v1;
use sweep_puzzles::{Answer, ChunkOutput, Control, SpaceError};
use tokio::sync::oneshot;

use crate::args::{self, JobArgs};
use crate::output::Report;
use crate::progress::{Bars, Mode};
use crate::{exit, usage, Exit};

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn parse_or_help(args: &[String]) -> anyhow::Result<Option<JobArgs>> {
    match args::parse(args)? {
        Ok(parsed) => Ok(Some(parsed)),
        Err(help) => {
            print!("{help}");
            Ok(None)
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn poisoned_list(r: &v1::ResultsResponse) -> Vec<serde_json::Value> {
    r.poisoned
        .iter()
        .map(|p| serde_json::json!({"chunk": p.chunk, "attempts": p.attempts, "last_error": p.last_error}))
        .collect()
}

pub fn run(raw: Vec<String>) -> anyhow::Result<ExitCode> {
    let Some(JobArgs { job, engine }) = parse_or_help(&raw)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let plan = job.plan(engine.chunks).map_err(|e| usage(e.to_string()))?;
    if engine.replicate > 1 {
        return Err(usage(
            "--replicate needs several independent workers: use `sweep submit` to a coordinator",
        ));
    }
    let threads = engine
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(default_threads);
    let started = Instant::now();
    let rt = runtime()?;
    rt.block_on(async move {
        let store = Store::open(&engine.data)
            .with_context(|| format!("cannot use --data {}", engine.data.display()))
            .map_err(|e| Exit { code: exit::USAGE, message: crate::one_line(&e) })?;
        let coord = Coordinator::open(store, CoordinatorConfig::default())
            .with_context(|| format!("cannot load the jobs stored in {}", engine.data.display()))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port")?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop_coord, coord_stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(sweep_coordinator::serve(listener, coord, Default::default(), async {
            let _ = coord_stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(url.clone())?
            .connect()
            .await
            .context("cannot reach the embedded coordinator")?;
        let mut jobs = crate::client::jobs_client(channel);
        let submitted = jobs
            .submit(v1::SubmitRequest {
                space: job.space().to_string(),
                params_json: job.params().to_string(),
                chunks: plan.n_chunks,
                priority: engine.priority,
                reuse_existing: true,
                replicate: 1,
            })
            .await?
            .into_inner();
        let mut info = submitted.job.ok_or_else(|| anyhow::anyhow!("the coordinator returned no job"))?;
        // `sweep run` means "get me the answer": a job someone paused is resumed.
        if submitted.existing && info.state == "paused" {
            info = jobs.resume(v1::JobRequest { job_id: info.id }).await?.into_inner();
        }
        // On stderr even with --json: stdout carries only the answer.
        if submitted.existing && info.state == "running" {
            eprintln!(
                "resuming job {} from {} ({}/{} chunks already done)",
                info.id,
                engine.data.display(),
                info.chunks_done,
                info.chunks_total
            );
        } else if submitted.existing {
            eprintln!("job {} in {} is already {}: answering from the store", info.id, engine.data.display(), info.state);
        }
        let (stop_worker, worker_stopped) = oneshot::channel::<()>();
        let worker = tokio::spawn(sweep_worker::run(sweep_worker::WorkerConfig::new(url.clone(), threads), async {
            let _ = worker_stopped.await;
        }));
        // Every job, filtered to ours and the one it takes its input from (a table built first).
        let shown = [info.id, info.input_job];
        let mut stream = jobs.watch(v1::WatchRequest { job_id: 0, interval_ms: 100 }).await?.into_inner();
        let mut bars = Bars::new(if engine.json || engine.no_progress { Mode::Off } else { Mode::Auto });
        let signal = shutdown_signal();
        tokio::pin!(signal);
        let interrupted = loop {
            tokio::select! {
                ev = stream.message() => {
                    let Some(mut ev) = ev? else { anyhow::bail!("the embedded coordinator stopped reporting progress") };
                    ev.jobs.retain(|j| shown.contains(&j.id));
                    bars.update(&ev);
                    if ev.jobs.iter().any(|j| j.id == info.id && j.state != "running" && j.state != "paused") {
                        break false;
                    }
                }
                _ = &mut signal => break true,
            }
        };
        bars.finish();
        let _ = stop_worker.send(());
        let _ = tokio::time::timeout(Duration::from_secs(60), worker).await;
        let results = if interrupted { None } else { Some(jobs.results(v1::JobRequest { job_id: info.id }).await?.into_inner()) };
        // Graceful shutdown waits for open streams and connections: close ours first.
        drop(stream);
        drop(jobs);
        let _ = stop_coord.send(());
        server.await.context("coordinator task")?.context("embedded coordinator")?;
        let Some(results) = results else {
            return Err(Exit {
                code: exit::INTERRUPTED,
                message: format!(
                    "interrupted; progress is stored in {}: run the same command again to resume",
                    engine.data.display()
                ),
            }
            .into());
        };
        let final_info = results.job.clone().unwrap_or(info);
        let result: serde_json::Value =
            serde_json::from_str(&results.result_json).context("the coordinator sent a result that is not JSON")?;
        let report = Report {
            space: job.space().to_string(),
            params: job.params(),
            job: Some(final_info.id),
            state: final_info.state.clone(),
            chunks_total: final_info.chunks_total,
            chunks_done: final_info.chunks_done,
            nodes: final_info.nodes.parse().unwrap_or(0),
            elapsed_s: started.elapsed().as_secs_f64(),
            result,
            poisoned: poisoned_list(&results),
        };
        report.print(job.as_ref(), engine.json);
        crate::output::write_pictures(job.as_ref(), &report.result, engine.svg.as_deref())?;
        Ok(if report.poisoned.is_empty() && final_info.state == "done" {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(exit::POISONED)
        })
    })
}

/// The merged artifact of the finished job `space`/`params` in the store at `data`, if there is one and its digest
/// checks. A missing store, one in use by a running coordinator, or no such job all mean "build it here".
fn stored_artifact(
    data: &std::path::Path,
    space: &str,
    params: &serde_json::Value,
) -> Option<Vec<u8>> {
    if !data.join("conf").exists() {
        return None;
    }
    let store = Store::open(data).ok()?;
    let snap = store.load().ok()?;
    let rec = snap
        .jobs
        .iter()
        .find(|j| j.space == space && &j.params == params && j.artifact_digest.is_some())?;
    let bytes = store.artifact(rec.id).ok()??;
    (Some(sweep_coordinator::store::digest_hex(&bytes)) == rec.artifact_digest).then_some(bytes)
}

pub fn solve(raw: Vec<String>) -> anyhow::Result<ExitCode> {
    let Some(JobArgs { job, engine }) = parse_or_help(&raw)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let plan = job.plan(engine.chunks).map_err(|e| usage(e.to_string()))?;
    if engine.replicate > 1 {
        return Err(usage(
            "--replicate needs several independent workers: use `sweep submit` to a coordinator",
        ));
    }
    let threads = engine
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(default_threads);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start the thread pool")?;
    let started = Instant::now();
    let show = !(engine.json || engine.no_progress)
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A job that needs another job's artifact (a table) gets it the same way: solved here first.
    let job = match job.input() {
        None => job,
        Some(inp) => {
            let input = sweep_puzzles::job_from_params(&inp.space, &inp.params)
                .map_err(|e| usage(format!("the job's input: {e}")))?;
            let artifact = match stored_artifact(&engine.data, input.space(), &input.params()) {
                Some(bytes) => bytes,
                None => {
                    let input_plan = input.plan(None).map_err(|e| usage(e.to_string()))?;
                    if !engine.json {
                        eprintln!(
                            "building the input first (not stored in {}; `sweep run` stores it): {} {}",
                            engine.data.display(),
                            inp.space,
                            inp.params
                        );
                    }
                    run_chunks(&pool, input.as_ref(), input_plan.n_chunks, show)?.artifact
                }
            };
            job.bind_input(&artifact)
                .context("loading the input artifact")?
        }
    };
    let n = plan.n_chunks;
    let answer = run_chunks(&pool, job.as_ref(), n, show)?;
    let report = Report {
        space: job.space().to_string(),
        params: job.params(),
        job: None,
        state: "done".into(),
        chunks_total: n,
        chunks_done: n,
        nodes: answer.tally.nodes,
        elapsed_s: started.elapsed().as_secs_f64(),
        result: job.result(&answer),
        poisoned: Vec::new(),
    };
    report.print(job.as_ref(), engine.json);
    crate::output::write_pictures(job.as_ref(), &report.result, engine.svg.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// Runs every chunk of `job` on `pool` (a bar on stderr if `show`) and merges the outputs.
fn run_chunks(
    pool: &rayon::ThreadPool,
    job: &dyn sweep_puzzles::Job,
    n: u64,
    show: bool,
) -> anyhow::Result<Answer> {
    let ctl = Control::new();
    let done = AtomicU64::new(0);
    let finished = std::sync::atomic::AtomicBool::new(false);
    let outputs: Result<Vec<ChunkOutput>, SpaceError> = std::thread::scope(|s| {
        let ticker = show.then(|| {
            let (ctl, done, finished) = (&ctl, &done, &finished);
            s.spawn(move || {
                let bar = indicatif::ProgressBar::new(n);
                if let Ok(style) = indicatif::ProgressStyle::with_template(
                    "solve [{bar:30}] {pos}/{len} chunks {msg} ETA {eta}",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                let t0 = Instant::now();
                while !finished.load(Ordering::Relaxed) {
                    bar.set_position(done.load(Ordering::Relaxed));
                    let rate = ctl.nodes() as f64 / t0.elapsed().as_secs_f64().max(1e-3);
                    bar.set_message(format!("{} nodes/s", crate::output::human(rate)));
                    std::thread::sleep(Duration::from_millis(200));
                }
                bar.finish_and_clear();
            })
        });
        let r = pool.install(|| {
            (0..n)
                .into_par_iter()
                .map(|i| {
                    let out = job.run_chunk(n, i, &ctl);
                    done.fetch_add(1, Ordering::Relaxed);
                    out
                })
                .collect()
        });
        finished.store(true, Ordering::Relaxed);
        if let Some(t) = ticker {
            let _ = t.join();
        }
        r
    });
    let outputs = outputs.context("a chunk failed")?;
    let mut answer = Answer::from_outputs(&outputs);
    if outputs.iter().any(|o| !o.artifact.is_empty()) {
        let mut it = outputs.iter().map(|o| o.artifact.as_slice());
        answer.artifact = job.merge_artifacts(&mut it).context("merging artifacts")?;
    }
    Ok(answer)
}
