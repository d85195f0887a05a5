//! sweep's worker: registers with a coordinator, leases a few chunks ahead so cores never wait for the network,
//! runs them on N search threads of its own (each takes its next chunk itself; never on the async runtime),
//! heartbeats progress, and reports results until each is acknowledged.
//!
//! The worker carries every search space in its own binary: a lease brings only the space name, the job's
//! canonical parameters and a chunk index. It survives the coordinator going away (every RPC is retried with
//! backoff), follows the leader of a replicated coordinator given as its members' URLs, and on shutdown stops
//! leasing, hands back unstarted chunks, finishes or cancels running ones within a grace period, and delivers
//! every result it has before it exits.
//!
//! # Module map
//!
//! From the bottom up: a module uses only modules listed before it, and none uses this file.
//!
//! - `lie`: results falsified on purpose, for tests; apart, and behind the `lie` feature, so release builds
//!   cannot lie (see the feature in Cargo.toml).
//! - `backoff`: retry pacing, the same for every task that calls a coordinator that may be restarting.
//! - `memory`: the memory this worker can give chunks (the machine's, its cgroup's limit), and `--memory` sizes.
//! - `config`: [`WorkerConfig`], what the caller decides, and the registration made of it and this machine.
//! - `link`: which member of the coordinator the worker calls (the leader of a replicated one), its clients of
//!   that member, and the moves to another member that failed calls call for.
//! - `state`: the data under the one lock (queue, running chunks, outbox, counters, the job and artifact caches
//!   and their eviction); no I/O and no tasks, so its rules are tested alone.
//! - `shared`: `Shared`, what every task holds (config, clients, state, the wake-ups between tasks).
//! - `inputs`: a lease's job, built once and bound to its input artifacts from memory, disk or the coordinator;
//!   the only code that reads, fetches or writes artifacts.
//! - `leaser`: the task that leases chunks ahead, with the prefetch policy that says how far.
//! - `executor`: the search threads (OS threads, not tasks) that run chunks and encode their reports.
//! - `heartbeat`: the task that keeps leases alive, sends resume states and cancels revoked chunks.
//! - `reporter`: the task that delivers reports and failures until acknowledged, with the batching policy.
//! - `splitter`: the task that splits running chunks for idle threads and delivers every split before the
//!   split chunk's result.
//! - this file: [`run`], which registers, builds `Shared`, starts the tasks and drains them on shutdown.
//!
//! The four task modules never call one another: they meet only in `state`, under the lock, and in the
//! wake-ups of `shared`, so each can be read alone.

mod backoff;
mod config;
mod executor;
mod heartbeat;
mod inputs;
mod leaser;
#[cfg(feature = "lie")]
mod lie;
mod link;
pub mod memory;
mod reporter;
mod shared;
mod splitter;
mod state;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sweep_client::ConnectError;
use sweep_proto::deadline::CallKind;
use sweep_proto::v1;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

pub use config::WorkerConfig;
pub use heartbeat::RESUME_STATE_INTERVAL;
pub use leaser::LEASE_AHEAD;
#[cfg(feature = "lie")]
pub use lie::{Lie, LIE_ENV};
pub use state::WorkerStats;

use backoff::Backoff;
use config::register_request;
use executor::executor;
use heartbeat::heartbeater;
use leaser::leaser;
use link::Link;
use reporter::reporter;
use shared::Shared;
use splitter::splitter;
use state::State;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A bad URL, token file or TLS file.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The coordinator refused this worker's token: retrying cannot help.
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The operating system would not start the search threads asked for.
    #[error("cannot start {0} search threads: {1}")]
    Threads(usize, std::io::Error),
    /// A setting the worker cannot run with (in builds with the `lie` feature: an unknown `SWEEP_TEST_LIE`).
    #[error("{0}")]
    Config(String),
}

/// Runs a worker until `shutdown` resolves (then drains as described in the crate docs).
pub async fn run(
    cfg: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, WorkerError> {
    // Read here rather than in `WorkerConfig::new`, which cannot fail: a misspelt lie stops the worker.
    #[cfg(feature = "lie")]
    let cfg = WorkerConfig {
        lie: match cfg.lie {
            Some(lie) => Some(lie),
            None => Lie::from_env().map_err(WorkerError::Config)?,
        },
        ..cfg
    };
    #[cfg(feature = "lie")]
    if let Some(lie) = cfg.lie {
        warn!(?lie, "this worker falsifies its results, for a test");
    }
    let link = Link::new(&cfg)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);

    // Register, retrying until the coordinator's leader answers or we are told to stop.
    let mut backoff = Backoff::new();
    let reg = loop {
        let req = register_request(&cfg, &cfg.name);
        let mut clients = link.clients();
        let register = link.call(
            clients.generation,
            CallKind::Quick,
            clients.work.register(req),
        );
        tokio::select! {
            r = register => match r {
                Ok(r) => {
                    link.registered(clients.generation);
                    break r;
                }
                Err(e) if sweep_client::is_refusal(&e) => {
                    return Err(WorkerError::Refused(e.message().to_string()))
                }
                Err(e) => {
                    debug!(error = %e, "register failed; retrying");
                    link.failed(clients.generation, &e);
                    backoff.wait_after(&e).await;
                }
            },
            _ = &mut shutdown => return Ok(WorkerStats::default()),
        }
    };
    info!(worker = %reg.worker_id, threads = cfg.threads, member = ?link.member(), "registered");
    let threads = cfg.threads;
    let shared = Arc::new(Shared {
        heartbeat: Duration::from_millis(reg.heartbeat_interval_ms.clamp(50, 60_000)),
        worker_id: reg.worker_id,
        link,
        cfg,
        state: Mutex::new(State::default()),
        work_ready: Notify::new(),
        room: Notify::new(),
        outbox_ready: Notify::new(),
        binding: tokio::sync::Mutex::new(()),
        drained: Notify::new(),
        slots: Arc::new(tokio::sync::Semaphore::new(threads)),
    });

    let leaser = tokio::spawn(leaser(shared.clone(), stop_rx.clone()));
    // Threads of their own, not the runtime's blocking pool: they live as long as the worker, and a worker with
    // as many threads as the pool's limit (512) would leave none for the work they wait on (binding inputs).
    let mut executors = Vec::with_capacity(threads);
    for i in 0..threads {
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let (sh, stop, rt) = (
            shared.clone(),
            stop_rx.clone(),
            tokio::runtime::Handle::current(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("sweep-search-{i}"))
            .spawn(move || {
                executor(sh, stop, rt);
                // Dropped unsent if the executor panicked: the receiver sees that as finished too.
                let _ = done.send(());
            });
        if let Err(e) = spawned {
            let _ = stop_tx.send(true);
            shared.lock().stopping = true;
            shared.work_ready.notify_waiters();
            leaser.abort();
            return Err(WorkerError::Threads(threads, e));
        }
        executors.push(finished);
    }
    let heartbeat = tokio::spawn(heartbeater(shared.clone(), stop_rx.clone()));
    let reporter = tokio::spawn(reporter(shared.clone(), stop_rx.clone()));
    let splits = tokio::spawn(splitter(shared.clone(), stop_rx.clone()));

    tokio::select! {
        _ = &mut shutdown => {}
        _ = shared.drained.notified() => info!("drained by the coordinator"),
    }
    info!("stopping: no new leases; finishing running chunks");
    {
        let mut st = shared.lock();
        st.stopping = true;
        // Chunks that can resume (programs that save resume states) stop now and are handed back with their
        // state; the others finish within the grace period.
        for ctl in st.running.values() {
            ctl.request_stop();
        }
    }
    let _ = stop_tx.send(true);
    let _ = leaser.await;
    // Unstarted chunks go back without using an attempt.
    let queued: Vec<v1::ChunkLease> = shared.lock().queue.drain(..).collect();
    for l in queued {
        shared.lock().failures.push(v1::FailRequest {
            worker_id: shared.worker_id.clone(),
            lease_id: l.lease_id,
            error: "worker shutting down".into(),
            release: true,
            checkpoint: None,
            generation: 0,
        });
    }
    shared.work_ready.notify_waiters();
    let deadline = Instant::now() + shared.cfg.grace;
    for ex in executors {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, ex).await.is_err() {
            // Past the grace period: cancel what still runs; its chunk is handed back by the executor.
            for ctl in shared.lock().running.values() {
                ctl.cancel();
            }
        }
    }
    shared.outbox_ready.notify_one();
    // Results still unsent after the grace period (the coordinator is gone) are dropped: their chunks are
    // leased again elsewhere, so a worker told to stop always stops.
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
    if tokio::time::timeout(left, reporter).await.is_err() {
        warn!("the coordinator did not take the last results; stopping without them");
    }
    heartbeat.abort();
    let _ = heartbeat.await;
    splits.abort();
    let _ = splits.await;
    let stats = shared.lock().stats.clone();
    info!(chunks = stats.chunks_done, "worker stopped");
    Ok(stats)
}
