//! The real worker against an in-process coordinator, with spaces of these tests' own: a kernel that panics on
//! one chunk (the panic fails that chunk with its message until it is poisoned, and the worker's only search
//! thread survives it and runs every other chunk), and chunks that only finish when all of them run at once
//! (a worker's threads are its own, however many: more than tokio's blocking pool would hold).

use sweep_testkit as common;

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use common::stubs::Counting;
use common::{config, fresh_store, result_json, submit_job, Server};
use serde::{Deserialize, Serialize};
use sweep_proto::v1;
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, Registry, SearchSpace, SpaceError,
};
use sweep_worker::{WorkerConfig, WorkerStats};

/// Every chunk waits (at most 20 s) until all `n` have started, and counts `together` if they all did.
struct Together;

#[derive(clap::Args, Serialize, Deserialize, Clone, Debug)]
struct TogetherParams {
    #[arg(long)]
    n: u64,
}

#[derive(Debug)]
struct TogetherJob(u64);

static STARTED: Mutex<u64> = Mutex::new(0);
static ALL_STARTED: Condvar = Condvar::new();

impl SearchSpace for Together {
    const NAME: &'static str = "together";
    const ABOUT: &'static str = "a test space whose chunks wait for each other";
    type Params = TogetherParams;

    fn build(params: TogetherParams) -> Result<impl Job, SpaceError> {
        Ok(TogetherJob(params.n))
    }
}

impl Job for TogetherJob {
    fn plan(&self, _requested: Option<u64>) -> Result<Plan, SpaceError> {
        Ok(Plan {
            n_chunks: self.0,
            total_nodes: Some(u128::from(self.0)),
        })
    }

    fn run_chunk(&self, _at: ChunkId, _ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        *started += 1;
        ALL_STARTED.notify_all();
        let (started, _) = ALL_STARTED
            .wait_timeout_while(started, Duration::from_secs(20), |s| *s < self.0)
            .unwrap_or_else(|p| p.into_inner());
        let mut out = ChunkOutput {
            nodes: 1,
            ..ChunkOutput::default()
        };
        out.count("together", u128::from(*started >= self.0));
        Ok(out)
    }

    fn verify(&self, _at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_nodes(1, "nodes")
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        serde_json::json!({ "together": answer.tally.counter("together").to_string() })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        result.to_string()
    }
}

/// Polls job `id` until it is no longer running (at most 20 s, in 50 ms steps); its last state.
async fn wait_until_finished(jobs: &mut sweep_client::Client, id: u64) -> v1::JobState {
    let mut state = v1::JobState::Running;
    for _ in 0..400 {
        state = jobs.job_status(id).await.unwrap().state();
        if !matches!(state, v1::JobState::Running) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    state
}

/// Runs one job of `space` with `params` in `chunks` chunks on a coordinator (leases of `lease_ttl_ms`, at most
/// `max_attempts` per chunk) and one real worker of `threads` threads, both knowing `registry`'s spaces; returns
/// the job's last state (polled until it ended, at most 20 s), its results and the worker's stats.
async fn run_on_one_worker(
    registry: Registry,
    (lease_ttl_ms, max_attempts): (u64, u32),
    (space, params, chunks): (&str, &str, u64),
    threads: usize,
) -> (v1::JobState, v1::ResultsResponse, WorkerStats) {
    run_on_one_worker_over(
        Link::Network,
        registry,
        (lease_ttl_ms, max_attempts),
        (space, params, chunks),
        threads,
    )
    .await
}

/// How the worker reaches the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Network,
    /// The coordinator's services called in process, as `sweep run` does; the worker's URL is one nobody
    /// listens on, so a call that went to the network would fail.
    InProcess,
    /// Over the network, given first the URL of a member that accepts connections and never answers (a
    /// process stopped with SIGSTOP looks so), then the coordinator's.
    SilentFirst,
}

async fn run_on_one_worker_over(
    link: Link,
    registry: Registry,
    (lease_ttl_ms, max_attempts): (u64, u32),
    (space, params, chunks): (&str, &str, u64),
    threads: usize,
) -> (v1::JobState, v1::ResultsResponse, WorkerStats) {
    let (_dir, _, store) = fresh_store();
    let mut cfg = config(lease_ttl_ms, max_attempts);
    cfg.registry = registry.clone();
    let server = Server::start(store, cfg).await;
    let mut jobs = server.client().await;
    let job = submit_job(&mut jobs, space, params, chunks).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Never accepted: connections wait in its backlog.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let worker_cfg = match link {
        Link::Network => WorkerConfig::new(server.url.clone(), threads, registry),
        Link::SilentFirst => WorkerConfig::new(
            format!("http://{},{}", silent.local_addr().unwrap(), server.url),
            threads,
            registry,
        ),
        Link::InProcess => WorkerConfig {
            in_process: Some(server.in_process.0.clone()),
            ..WorkerConfig::new("http://127.0.0.1:1", threads, registry)
        },
    };
    let worker = tokio::spawn(sweep_worker::run(worker_cfg, async {
        let _ = stopped.await;
    }));
    let state = wait_until_finished(&mut jobs, job.id).await;
    let res = jobs.results(job.id, v1::AnswerForm::Both).await.unwrap();
    let _ = stop.send(());
    let stats = tokio::time::timeout(Duration::from_secs(30), worker)
        .await
        .expect("the worker stops")
        .expect("worker task")
        .expect("worker run");
    server.stop().await;
    (state, res, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_threads_run_six_hundred_chunks_at_once() {
    const N: u64 = 600;
    let (state, res, stats) = run_on_one_worker(
        common::spaces().with::<Together>(),
        (60_000, 1),
        ("together", &format!(r#"{{"n":{N}}}"#), 0),
        N as usize,
    )
    .await;

    assert_eq!(state, v1::JobState::Done);
    let result: serde_json::Value = serde_json::from_str(&res.result_json).unwrap();
    assert_eq!(
        result["together"],
        N.to_string(),
        "every chunk saw all {N} running: {result}"
    );
    assert_eq!(stats.chunks_done, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_kernel_fails_its_chunk_and_the_search_thread_runs_the_others() {
    // The job ends within seconds: two attempts of the cursed chunk, seven tiny ones, on one thread.
    let (state, res, stats) = run_on_one_worker(
        common::spaces().with::<Counting>(),
        (5_000, 2),
        ("counting", r#"{"panic_at":3}"#, 8),
        1,
    )
    .await;

    assert_ne!(state, v1::JobState::Running, "the job did not end");
    let result: serde_json::Value = serde_json::from_str(&res.result_json).unwrap();
    assert_eq!(result["found"], "7", "{result}");
    assert_eq!(res.poisoned.len(), 1, "{:?}", res.poisoned);
    let poisoned = &res.poisoned[0];
    assert_eq!((poisoned.chunk, poisoned.attempts), (3, 2));
    assert!(
        poisoned
            .last_error
            .contains("the search kernel panicked: chunk 3 of 8 is cursed"),
        "{}",
        poisoned.last_error
    );
    assert_eq!((stats.chunks_done, stats.chunks_failed), (7, 2));
}

/// A worker whose first member never answers gives up on it after a deadline and does the job on the next;
/// a client given the same list answers within one deadline. Without deadlines both waited forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_answers_costs_a_deadline_not_the_job() {
    let job = ("star", r#"{"points":10,"method":"backtrack"}"#, 16);
    let started = std::time::Instant::now();
    let (state, res, stats) =
        run_on_one_worker_over(Link::SilentFirst, common::spaces(), (60_000, 3), job, 2).await;
    assert_eq!(state, v1::JobState::Done);
    let result: serde_json::Value = serde_json::from_str(&res.result_json).unwrap();
    assert_eq!(result["unique"], 10_882, "{result}");
    assert_eq!(stats.chunks_done, 16);
    let quick = sweep_proto::deadline::CallKind::Quick.deadline();
    assert!(
        started.elapsed() < quick * 3,
        "the job took {:?} with a silent first member (deadline {quick:?})",
        started.elapsed()
    );

    let (_dir, _, store) = fresh_store();
    let server = Server::start(store, config(60_000, 3)).await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let list = format!("http://{},{}", silent.local_addr().unwrap(), server.url);
    let asked = std::time::Instant::now();
    let mut client = sweep_client::Client::connect(&list, &Default::default())
        .await
        .expect("connects: the silent member's kernel accepts");
    let jobs = client.list_jobs().await.expect("the second member answers");
    assert!(jobs.jobs.is_empty());
    assert!(
        asked.elapsed() < quick + Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        client.members().map(|m| m.current().to_string()),
        Some(server.url.clone())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_process_gets_the_answer_a_networked_one_gets() {
    let job = ("star", r#"{"points":10,"method":"backtrack"}"#, 16);
    let run = |link| run_on_one_worker_over(link, common::spaces(), (60_000, 3), job, 2);
    let (net_state, net, net_stats) = run(Link::Network).await;
    let (local_state, local, local_stats) = run(Link::InProcess).await;
    assert_eq!(net_state, v1::JobState::Done);
    assert_eq!(local_state, net_state);
    let result: serde_json::Value = serde_json::from_str(&local.result_json).unwrap();
    assert_eq!(result["unique"], 10_882, "{result}");
    assert_eq!(local.result_json, net.result_json);
    // The text for people comes with it: the space's rendering of that same answer.
    let star = common::spaces()
        .job_from_params("star", &serde_json::from_str(job.1).unwrap())
        .unwrap();
    assert_eq!(local.result_text, star.render_text(&result));
    assert!(
        local.result_text.starts_with("10-pointed magic stars"),
        "{}",
        local.result_text
    );
    assert_eq!(local.result_text, net.result_text);
    assert_eq!(local_stats.chunks_done, 16);
    assert_eq!(net_stats.chunks_done, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_process_submits_and_reads_answers_without_a_socket() {
    let (_dir, _, store) = fresh_store();
    let server = Server::start(store, config(60_000, 3)).await;
    let mut jobs = sweep_client::Client::in_process(server.in_process.1.clone());
    let job = submit_job(&mut jobs, "star", r#"{"points":8,"method":"backtrack"}"#, 4).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let cfg = WorkerConfig {
        in_process: Some(server.in_process.0.clone()),
        ..WorkerConfig::new("http://127.0.0.1:1", 2, common::spaces())
    };
    let worker = tokio::spawn(sweep_worker::run(cfg, async {
        let _ = stopped.await;
    }));
    let mut watch = jobs.watch(job.id, 50).await.unwrap();
    let mut done = false;
    for _ in 0..200 {
        let Some(ev) = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("a progress event")
            .unwrap()
        else {
            break;
        };
        if ev
            .jobs
            .iter()
            .any(|j| j.id == job.id && j.state() == v1::JobState::Done)
        {
            done = true;
            break;
        }
    }
    assert!(done, "the job finished");
    let result = result_json(&mut jobs, job.id).await;
    assert_eq!(result["unique"], 112, "{result}");
    // The in-process services keep the coordinator's checks: an unknown job is refused as over the network.
    let err = jobs
        .results(job.id + 100, v1::AnswerForm::Both)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no job"), "{err}");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), worker)
        .await
        .expect("the worker stops")
        .expect("worker task")
        .expect("worker run");
    server.stop().await;
}
