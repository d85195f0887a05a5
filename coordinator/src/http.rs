//! The coordinator's web side (`sweep coordinator --http ADDR`): a live dashboard, its JSON API and `/metrics`
//! in Prometheus text format.
//!
//! Why it lives beside the gRPC services rather than in a separate tool: the coordinator already holds every
//! number a person or Prometheus wants, so a browser pointed at it is the whole setup. It is read-only, reads
//! the coordinator through one snapshot method ([`Coordinator::observe`], one short lock) and never writes to
//! the store; the only state of its own is a bounded history of throughput samples (one a second, the last
//! hour) that a snapshot cannot give. The page, its script and its style are compiled into the binary
//! (`include_str!`), draw their plot themselves and load nothing from elsewhere, so the dashboard works on a
//! cluster without internet access.
//!
//! Routes: `/` (the page), `/app.js`, `/style.css`, `/api/state?since=MS` (jobs, workers, chunk counts, rates,
//! event counters, and the throughput samples newer than `since`), `/api/jobs/{id}/result` (a finished job's
//! answer as text, with its pictures listed), `/api/jobs/{id}/pictures/{n}` (one SVG), `/metrics`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicU64;
use sweep_proto::v1;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::metrics::{Labels, Metrics};
use crate::scheduler::JobId;
use crate::service::Coordinator;

/// Throughput samples kept: one a second for an hour.
const HISTORY_SAMPLES: usize = 3600;
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Totals kept for computing rates over a window (seconds at one sample a second).
const RATE_POINTS: usize = 61;
/// A finished job's text answer is cut here on the page (the full answer: `sweep results`).
const MAX_RESULT_TEXT: usize = 16 * 1024;
/// Pictures of one job shown on the page (the rest: `sweep results JOB --svg DIR`).
const MAX_PICTURES: usize = 8;

/// What the dashboard and `/metrics` read from the coordinator: one consistent snapshot, taken under its lock by
/// [`Coordinator::observe`].
#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub now_ms: u64,
    pub lease_ttl_ms: u64,
    /// Workers heard from within one lease time.
    pub live_workers: u32,
    pub jobs: Vec<v1::JobInfo>,
    pub workers: Vec<WorkerObservation>,
}

/// One worker as the coordinator knows it.
#[derive(Clone, Debug, Default)]
pub struct WorkerObservation {
    pub name: String,
    pub threads: u32,
    pub last_seen_ms: u64,
    /// Chunks of this worker accepted since the coordinator started.
    pub chunks_done: u64,
    /// Leases it holds now.
    pub leases: u32,
    /// Nodes its running chunks have reported by heartbeat so far.
    pub running_nodes: u64,
}

fn nodes_of(job: &v1::JobInfo) -> f64 {
    // Counters travel as decimal strings (they may exceed 64 bits); a rate only needs a float.
    job.nodes.parse::<f64>().unwrap_or(0.0)
}

fn pending_of(job: &v1::JobInfo) -> u64 {
    job.chunks_total
        .saturating_sub(job.chunks_done)
        .saturating_sub(job.chunks_leased)
        .saturating_sub(job.chunks_poisoned)
}

/// Totals at one instant, for rates over a window.
#[derive(Clone, Debug, Default)]
struct Point {
    t_ms: u64,
    nodes: f64,
    chunks: f64,
    jobs: HashMap<JobId, (f64, f64)>,
    workers: HashMap<String, f64>,
}

/// One throughput sample of the plot.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
struct Sample {
    t_ms: u64,
    nodes_per_s: f64,
    chunks_per_s: f64,
    workers: u32,
}

/// Rates over the window, per job (nodes/s, chunks/s) and per worker (nodes/s).
#[derive(Clone, Debug, Default)]
struct Rates {
    nodes_per_s: f64,
    chunks_per_s: f64,
    jobs: HashMap<JobId, (f64, f64)>,
    workers: HashMap<String, f64>,
}

/// The bounded throughput history. Rates are measured over a window of about half a lease time: running
/// chunks report progress only with each heartbeat (a quarter of the lease time) and finished chunks add their
/// nodes at once, so a shorter window would show a saw-tooth instead of a rate.
#[derive(Debug, Default)]
struct History {
    points: VecDeque<Point>,
    samples: VecDeque<Sample>,
    rates: Rates,
}

fn rate(now: f64, then: f64, dt_s: f64) -> f64 {
    // An expired lease takes its reported progress back; a rate is never negative.
    if dt_s <= 0.0 {
        0.0
    } else {
        ((now - then) / dt_s).max(0.0)
    }
}

impl History {
    fn window_ms(lease_ttl_ms: u64) -> u64 {
        (lease_ttl_ms / 2).clamp(5_000, 60_000)
    }

    fn record(&mut self, obs: &Observation, metrics: &Metrics) {
        let mut p = Point {
            t_ms: obs.now_ms,
            ..Point::default()
        };
        for j in &obs.jobs {
            let nodes = nodes_of(j) + j.running_nodes as f64;
            p.nodes += nodes;
            p.chunks += j.chunks_done as f64;
            p.jobs.insert(j.id, (nodes, j.chunks_done as f64));
        }
        for w in &obs.workers {
            let nodes = metrics.worker_nodes(&w.name) as f64 + w.running_nodes as f64;
            p.workers.insert(w.name.clone(), nodes);
        }
        let window = Self::window_ms(obs.lease_ttl_ms);
        let base = self
            .points
            .iter()
            .find(|q| q.t_ms + window >= p.t_ms)
            .cloned()
            .unwrap_or_else(|| p.clone());
        let dt = p.t_ms.saturating_sub(base.t_ms) as f64 / 1000.0;
        let mut rates = Rates {
            nodes_per_s: rate(p.nodes, base.nodes, dt),
            chunks_per_s: rate(p.chunks, base.chunks, dt),
            ..Rates::default()
        };
        for (id, (nodes, chunks)) in &p.jobs {
            // A job new since the base point started from zero.
            let (n0, c0) = base.jobs.get(id).copied().unwrap_or((0.0, 0.0));
            rates
                .jobs
                .insert(*id, (rate(*nodes, n0, dt), rate(*chunks, c0, dt)));
        }
        for (name, nodes) in &p.workers {
            // A worker new since the base point did all its work since (its count starts with this process).
            let n0 = base.workers.get(name).copied().unwrap_or(0.0);
            rates.workers.insert(name.clone(), rate(*nodes, n0, dt));
        }
        self.samples.push_back(Sample {
            t_ms: p.t_ms,
            nodes_per_s: rates.nodes_per_s,
            chunks_per_s: rates.chunks_per_s,
            workers: obs.live_workers,
        });
        while self.samples.len() > HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        self.points.push_back(p);
        while self.points.len() > RATE_POINTS {
            self.points.pop_front();
        }
        self.rates = rates;
    }
}

/// A finished job's answer as the page shows it, computed once (a finished job's answer never changes).
#[derive(Clone, Debug, Serialize)]
struct ResultView {
    job: u64,
    space: String,
    state: String,
    text: String,
    truncated: bool,
    /// Names of the pictures served at `/api/jobs/{job}/pictures/{index}`.
    pictures: Vec<String>,
    pictures_total: usize,
    poisoned: usize,
    #[serde(skip)]
    svgs: Vec<String>,
}

struct Dashboard {
    coord: Arc<Coordinator>,
    history: Mutex<History>,
    results: Mutex<HashMap<JobId, Arc<ResultView>>>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves the dashboard and `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve_http(
    listener: TcpListener,
    coord: Arc<Coordinator>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Arc::new(Dashboard {
        coord,
        history: Mutex::new(History::default()),
        results: Mutex::new(HashMap::new()),
    });
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let sampler = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop_rx.changed() => return,
                }
                let obs = state.coord.observe();
                relock(&state.history).record(&obs, &state.coord.metrics);
            }
        })
    };
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "dashboard and /metrics listening");
    }
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = stop_tx.send(true);
    let _ = sampler.await;
    result
}

fn router(state: Arc<Dashboard>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(app_js))
        .route("/style.css", get(style_css))
        .route("/api/state", get(api_state))
        .route("/api/jobs/{id}/result", get(api_result))
        .route("/api/jobs/{id}/pictures/{n}", get(api_picture))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Everything the page loads comes from here; nothing inline, nothing from elsewhere.
const PAGE_POLICY: &str = "default-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset(
        "text/html; charset=utf-8",
        include_str!("dashboard/index.html"),
    )
}

async fn app_js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("dashboard/app.js"),
    )
}

async fn style_css() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("dashboard/style.css"),
    )
}

#[derive(Deserialize)]
struct StateQuery {
    /// Only samples newer than this (Unix ms) are sent: the page keeps the ones it has.
    #[serde(default)]
    since: u64,
}

#[derive(Serialize)]
struct JobView {
    id: u64,
    space: String,
    params: String,
    state: String,
    priority: i32,
    chunks_total: u64,
    chunks_done: u64,
    chunks_leased: u64,
    chunks_pending: u64,
    chunks_poisoned: u64,
    reissued: u64,
    /// Decimal strings: may exceed 64 bits.
    nodes: String,
    total_nodes: String,
    running_nodes: u64,
    nodes_per_s: f64,
    chunks_per_s: f64,
    /// Seconds left at the current rate; absent when not running or no rate yet.
    eta_s: Option<f64>,
    workers: u32,
    duplicates: u64,
    /// The jobs whose artifacts this one reads, in order, and how many of them it still waits for.
    input_jobs: Vec<u64>,
    inputs_waiting: u32,
    created_ms: u64,
    finished_ms: u64,
    /// Nothing re-checks this job's answers (a program's output) and it is not replicated.
    unverified: bool,
    /// Recent failed attempts, oldest first, each with its error (a program's exit status and stderr tail).
    failures: Vec<FailureView>,
}

#[derive(Serialize)]
struct FailureView {
    chunk: u64,
    worker: String,
    error: String,
    unix_ms: u64,
}

#[derive(Serialize)]
struct WorkerView {
    name: String,
    threads: u32,
    last_seen_ms: u64,
    live: bool,
    leases: u32,
    chunks_done: u64,
    nodes_per_s: f64,
}

#[derive(Serialize, Default)]
struct ChunkTotals {
    total: u64,
    pending: u64,
    leased: u64,
    done: u64,
    poisoned: u64,
}

#[derive(Serialize)]
struct Counters {
    completions: u64,
    duplicates: u64,
    rejected: u64,
    verification_failures: u64,
    lease_expiries: u64,
    reissued: u64,
    workers_lost: u64,
}

#[derive(Serialize)]
struct StateView {
    now_ms: u64,
    lease_ttl_ms: u64,
    live_workers: u32,
    nodes_per_s: f64,
    chunks_per_s: f64,
    chunks: ChunkTotals,
    counters: Counters,
    jobs: Vec<JobView>,
    workers: Vec<WorkerView>,
    samples: Vec<Sample>,
}

fn eta(job: &v1::JobInfo, nodes_per_s: f64, chunks_per_s: f64) -> Option<f64> {
    if job.state != "running" {
        return None;
    }
    // By nodes when the space knows its total work (smoother: running chunks count), else by chunks.
    if let Ok(total) = job.total_nodes.parse::<f64>() {
        if nodes_per_s > 0.0 {
            let left = total - nodes_of(job) - job.running_nodes as f64;
            return Some((left / nodes_per_s).max(0.0));
        }
    }
    let left = job.chunks_total.saturating_sub(job.chunks_done) as f64;
    (chunks_per_s > 0.0).then(|| left / chunks_per_s)
}

fn chunk_totals(obs: &Observation) -> ChunkTotals {
    let mut t = ChunkTotals::default();
    for j in &obs.jobs {
        t.total += j.chunks_total;
        t.done += j.chunks_done;
        t.leased += j.chunks_leased;
        t.poisoned += j.chunks_poisoned;
        t.pending += pending_of(j);
    }
    t
}

fn counters(obs: &Observation, m: &Metrics) -> Counters {
    Counters {
        completions: m.completions.get(),
        duplicates: m.duplicates.get(),
        rejected: m.rejected.get(),
        verification_failures: m.verification_failures.get(),
        lease_expiries: m.lease_expiries.get(),
        reissued: obs.jobs.iter().map(|j| j.reissued).sum(),
        workers_lost: m.workers_lost.get(),
    }
}

fn state_view(obs: Observation, history: &History, m: &Metrics, since: u64) -> StateView {
    let rates = &history.rates;
    let horizon = obs.now_ms.saturating_sub(obs.lease_ttl_ms);
    let jobs = obs
        .jobs
        .iter()
        .map(|j| {
            let (nodes_per_s, chunks_per_s) = rates.jobs.get(&j.id).copied().unwrap_or_default();
            JobView {
                id: j.id,
                space: j.space.clone(),
                params: j.params_json.clone(),
                state: j.state.clone(),
                priority: j.priority,
                chunks_total: j.chunks_total,
                chunks_done: j.chunks_done,
                chunks_leased: j.chunks_leased,
                chunks_pending: pending_of(j),
                chunks_poisoned: j.chunks_poisoned,
                reissued: j.reissued,
                nodes: j.nodes.clone(),
                total_nodes: j.total_nodes.clone(),
                running_nodes: j.running_nodes,
                nodes_per_s,
                chunks_per_s,
                eta_s: eta(j, nodes_per_s, chunks_per_s),
                workers: j.workers,
                duplicates: j.duplicates,
                input_jobs: j.input_jobs.clone(),
                inputs_waiting: j.inputs_waiting,
                created_ms: j.created_unix_ms,
                finished_ms: j.finished_unix_ms,
                unverified: j.unverified,
                failures: j
                    .failures
                    .iter()
                    .map(|f| FailureView {
                        chunk: f.chunk,
                        worker: f.worker.clone(),
                        error: f.error.clone(),
                        unix_ms: f.unix_ms,
                    })
                    .collect(),
            }
        })
        .collect();
    let mut workers: Vec<WorkerView> = obs
        .workers
        .iter()
        .map(|w| WorkerView {
            name: w.name.clone(),
            threads: w.threads,
            last_seen_ms: w.last_seen_ms,
            live: w.last_seen_ms >= horizon,
            leases: w.leases,
            chunks_done: w.chunks_done,
            nodes_per_s: rates.workers.get(&w.name).copied().unwrap_or(0.0),
        })
        .collect();
    workers.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.name.cmp(&b.name)));
    StateView {
        now_ms: obs.now_ms,
        lease_ttl_ms: obs.lease_ttl_ms,
        live_workers: obs.live_workers,
        nodes_per_s: rates.nodes_per_s,
        chunks_per_s: rates.chunks_per_s,
        chunks: chunk_totals(&obs),
        counters: counters(&obs, m),
        jobs,
        workers,
        samples: history
            .samples
            .iter()
            .filter(|s| s.t_ms > since)
            .copied()
            .collect(),
    }
}

async fn api_state(State(d): State<Arc<Dashboard>>, Query(q): Query<StateQuery>) -> Response {
    let obs = d.coord.observe();
    let view = state_view(obs, &relock(&d.history), &d.coord.metrics, q.since);
    ([(header::CACHE_CONTROL, "no-store")], Json(view)).into_response()
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into()).into_response()
}

async fn result_view(d: &Dashboard, id: JobId) -> Result<Arc<ResultView>, Response> {
    if let Some(r) = relock(&d.results).get(&id) {
        return Ok(r.clone());
    }
    let resp = d.coord.results(id).await.map_err(|s| {
        let code = match s.code() {
            tonic::Code::NotFound => StatusCode::NOT_FOUND,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        error(code, s.message().to_string())
    })?;
    let Some(info) = resp.job else {
        return Err(error(StatusCode::NOT_FOUND, format!("no job {id}")));
    };
    if !matches!(info.state.as_str(), "done" | "done-with-poisoned-chunks") {
        return Err(error(
            StatusCode::CONFLICT,
            format!("job {id} is {}: no answer yet", info.state),
        ));
    }
    let poisoned = resp.poisoned.len();
    let result_json = resp.result_json;
    // Rendering (text and pictures) may take a moment for large answers: off the async runtime.
    let registry = d.coord.registry().clone();
    let view = tokio::task::spawn_blocking(move || -> Result<ResultView, String> {
        let params: serde_json::Value = serde_json::from_str(&info.params_json)
            .map_err(|e| format!("stored parameters are not JSON: {e}"))?;
        let job = registry
            .job_from_params(&info.space, &params)
            .map_err(|e| e.to_string())?;
        let result: serde_json::Value = serde_json::from_str(&result_json)
            .map_err(|e| format!("stored result is not JSON: {e}"))?;
        let mut text = job.render_text(&result);
        let truncated = text.len() > MAX_RESULT_TEXT;
        if truncated {
            let mut cut = MAX_RESULT_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let pictures = job.pictures(&result);
        let pictures_total = pictures.len();
        let (names, svgs) = pictures.into_iter().take(MAX_PICTURES).unzip();
        Ok(ResultView {
            job: info.id,
            space: info.space,
            state: info.state,
            text,
            truncated,
            pictures: names,
            pictures_total,
            poisoned,
            svgs,
        })
    })
    .await
    .map_err(|e| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("render task: {e}"),
        )
    })?
    .map_err(|e| {
        warn!(job = id, error = %e, "cannot render the job's answer for the dashboard");
        error(StatusCode::INTERNAL_SERVER_ERROR, e)
    })?;
    let view = Arc::new(view);
    relock(&d.results).insert(id, view.clone());
    Ok(view)
}

async fn api_result(State(d): State<Arc<Dashboard>>, Path(id): Path<JobId>) -> Response {
    match result_view(&d, id).await {
        Ok(v) => Json(v.as_ref().clone()).into_response(),
        Err(r) => r,
    }
}

async fn api_picture(
    State(d): State<Arc<Dashboard>>,
    Path((id, n)): Path<(JobId, usize)>,
) -> Response {
    let view = match result_view(&d, id).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(svg) = view.svgs.get(n) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("job {id} has no picture {n}"),
        );
    };
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            // A space draws its own SVG: even opened directly it may not run script or load anything.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        svg.clone(),
    )
        .into_response()
}

async fn metrics(State(d): State<Arc<Dashboard>>) -> Response {
    let obs = d.coord.observe();
    let (nodes_per_s, chunks_per_s) = {
        let h = relock(&d.history);
        (h.rates.nodes_per_s, h.rates.chunks_per_s)
    };
    match render_metrics(&obs, &d.coord.metrics, nodes_per_s, chunks_per_s) {
        Ok(text) => {
            let mut resp = text.into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            resp
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn labels<const N: usize>(pairs: [(&str, String); N]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// The `/metrics` text: gauges from the snapshot, the event counters and the RPC histograms.
///
/// A registry is built per scrape: the snapshot's series (one per job and state) come and go with the jobs,
/// while the long-lived counters are registered by handle (prometheus-client metrics are shared handles).
fn render_metrics(
    obs: &Observation,
    m: &Metrics,
    nodes_per_s: f64,
    chunks_per_s: f64,
) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::default();

    let chunks = Family::<Labels, Gauge>::default();
    let totals = chunk_totals(obs);
    for (state, n) in [
        ("pending", totals.pending),
        ("leased", totals.leased),
        ("done", totals.done),
        ("poisoned", totals.poisoned),
    ] {
        chunks
            .get_or_create(&labels([("state", state.to_string())]))
            .set(n as i64);
    }
    reg.register("sweep_chunks", "Chunks of all jobs by state", chunks);

    let job_chunks = Family::<Labels, Gauge>::default();
    let job_nodes = Family::<Labels, FloatCounter>::default();
    let job_completions = Family::<Labels, Counter>::default();
    let job_duplicates = Family::<Labels, Counter>::default();
    let job_reissued = Family::<Labels, Counter>::default();
    let mut jobs_by_state: BTreeMap<&str, i64> = [
        "running",
        "paused",
        "done",
        "done-with-poisoned-chunks",
        "cancelled",
    ]
    .into_iter()
    .map(|s| (s, 0))
    .collect();
    for j in &obs.jobs {
        *jobs_by_state.entry(j.state.as_str()).or_default() += 1;
        let id = [("job", j.id.to_string()), ("space", j.space.clone())];
        for (state, n) in [
            ("pending", pending_of(j)),
            ("leased", j.chunks_leased),
            ("done", j.chunks_done),
            ("poisoned", j.chunks_poisoned),
        ] {
            let mut l = labels(id.clone());
            l.push(("state".into(), state.into()));
            job_chunks.get_or_create(&l).set(n as i64);
        }
        job_nodes
            .get_or_create(&labels(id.clone()))
            .inc_by(nodes_of(j));
        job_completions
            .get_or_create(&labels(id.clone()))
            .inc_by(j.completions);
        job_duplicates
            .get_or_create(&labels(id.clone()))
            .inc_by(j.duplicates);
        job_reissued.get_or_create(&labels(id)).inc_by(j.reissued);
    }
    let jobs = Family::<Labels, Gauge>::default();
    for (state, n) in jobs_by_state {
        jobs.get_or_create(&labels([("state", state.to_string())]))
            .set(n);
    }
    reg.register("sweep_jobs", "Jobs by state", jobs);
    reg.register(
        "sweep_job_chunks",
        "Chunks of each job by state",
        job_chunks,
    );
    reg.register(
        "sweep_job_nodes",
        "Nodes (the space's unit of work) of each job's accepted chunks",
        job_nodes,
    );
    reg.register(
        "sweep_job_completions",
        "Accepted chunk results of each job (durable)",
        job_completions,
    );
    reg.register(
        "sweep_job_duplicates",
        "Results of already-done chunks of each job, not counted (durable)",
        job_duplicates,
    );
    reg.register(
        "sweep_job_chunks_reissued",
        "Chunks of each job handed out again after an expiry or a failure",
        job_reissued,
    );

    reg.register(
        "sweep_completions",
        "Chunk results accepted since the coordinator started",
        m.completions.clone(),
    );
    reg.register(
        "sweep_duplicates",
        "Results of already-done chunks since the coordinator started",
        m.duplicates.clone(),
    );
    reg.register(
        "sweep_reports_rejected",
        "Chunk results rejected (failed verification, unknown or cancelled job, undecodable)",
        m.rejected.clone(),
    );
    reg.register(
        "sweep_verification_failures",
        "Chunk results that failed the space's verifier",
        m.verification_failures.clone(),
    );
    reg.register(
        "sweep_lease_expiries",
        "Leases that expired without a heartbeat",
        m.lease_expiries.clone(),
    );
    reg.register(
        "sweep_chunks_poisoned_by_expiry",
        "Chunks poisoned because their last allowed lease expired",
        m.poisoned_by_expiry.clone(),
    );
    reg.register(
        "sweep_workers_lost",
        "Workers that went silent for a lease time",
        m.workers_lost.clone(),
    );

    let workers = Family::<Labels, Gauge>::default();
    let known = obs.workers.len() as i64;
    workers
        .get_or_create(&labels([("state", "live".to_string())]))
        .set(obs.live_workers as i64);
    workers
        .get_or_create(&labels([("state", "silent".to_string())]))
        .set(known - obs.live_workers as i64);
    reg.register(
        "sweep_workers",
        "Workers known to the coordinator, live (heard from within a lease time) or silent",
        workers,
    );
    let threads = Gauge::<i64>::default();
    let horizon = obs.now_ms.saturating_sub(obs.lease_ttl_ms);
    threads.set(
        obs.workers
            .iter()
            .filter(|w| w.last_seen_ms >= horizon)
            .map(|w| w.threads as i64)
            .sum(),
    );
    reg.register(
        "sweep_worker_threads",
        "Threads of the live workers",
        threads,
    );
    let rate = FloatGauge::default();
    rate.set(nodes_per_s);
    reg.register(
        "sweep_nodes_per_second",
        "Nodes per second over the dashboard's rate window (about half a lease time)",
        rate,
    );
    let crate_ = FloatGauge::default();
    crate_.set(chunks_per_s);
    reg.register(
        "sweep_chunks_per_second",
        "Chunks completed per second over the same window",
        crate_,
    );
    reg.register(
        "sweep_rpc_duration_seconds",
        "gRPC handling time by method, until the response head",
        m.rpc_seconds.clone(),
    );
    reg.register(
        "sweep_rpc_errors",
        "gRPC calls answered with an error status, by method and code",
        m.rpc_errors.clone(),
    );

    let mut text = String::new();
    encode(&mut text, &reg)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sweep_proto::v1::AckStatus;

    /// A parsed sample line: `name{k="v",...} value`.
    #[derive(Debug)]
    struct Line {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// A small parser of the exposition format, enough to read back what [`render_metrics`] writes: it
    /// rejects any line it does not understand, so malformed output fails the test.
    fn parse(text: &str) -> (Vec<Line>, BTreeMap<String, String>) {
        let mut lines = Vec::new();
        let mut types = BTreeMap::new();
        let mut saw_eof = false;
        for raw in text.lines() {
            assert!(!saw_eof, "text after # EOF: {raw}");
            if raw == "# EOF" {
                saw_eof = true;
                continue;
            }
            if let Some(rest) = raw.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("TYPE line has a type");
                types.insert(name.to_string(), ty.to_string());
                continue;
            }
            if raw.starts_with("# HELP ") || raw.starts_with("# UNIT ") {
                continue;
            }
            let (series, value) = raw.rsplit_once(' ').expect("sample has a value");
            let value: f64 = value
                .parse()
                .unwrap_or_else(|e| panic!("bad value in {raw}: {e}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels end with }");
                    let mut labels = BTreeMap::new();
                    for pair in body.split(',').filter(|p| !p.is_empty()) {
                        let (k, v) = pair.split_once('=').expect("label k=v");
                        let v = v
                            .strip_prefix('"')
                            .and_then(|v| v.strip_suffix('"'))
                            .expect("quoted label value");
                        labels.insert(k.to_string(), v.to_string());
                    }
                    (name.to_string(), labels)
                }
            };
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "bad metric name {name}"
            );
            lines.push(Line {
                name,
                labels,
                value,
            });
        }
        assert!(saw_eof, "no # EOF line");
        (lines, types)
    }

    fn value(lines: &[Line], name: &str, want: &[(&str, &str)]) -> f64 {
        let hits: Vec<&Line> = lines
            .iter()
            .filter(|l| {
                l.name == name
                    && want
                        .iter()
                        .all(|(k, v)| l.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert_eq!(hits.len(), 1, "{name} {want:?}: {hits:?}");
        hits[0].value
    }

    fn job(id: u64, state: &str, total: u64, done: u64, leased: u64, poisoned: u64) -> v1::JobInfo {
        v1::JobInfo {
            id,
            space: "star".into(),
            params_json: "{}".into(),
            state: state.into(),
            chunks_total: total,
            chunks_done: done,
            chunks_leased: leased,
            chunks_poisoned: poisoned,
            reissued: 2,
            nodes: "340282366920938463463374607431768211455".into(),
            completions: done,
            duplicates: 1,
            ..v1::JobInfo::default()
        }
    }

    fn observation() -> Observation {
        Observation {
            now_ms: 100_000,
            lease_ttl_ms: 10_000,
            live_workers: 1,
            jobs: vec![job(1, "running", 10, 4, 3, 1), job(2, "done", 5, 5, 0, 0)],
            workers: vec![
                WorkerObservation {
                    name: "w0".into(),
                    threads: 4,
                    last_seen_ms: 99_000,
                    chunks_done: 9,
                    leases: 3,
                    running_nodes: 7,
                },
                WorkerObservation {
                    name: "gone".into(),
                    threads: 8,
                    last_seen_ms: 1_000,
                    ..WorkerObservation::default()
                },
            ],
        }
    }

    #[test]
    fn a_job_view_says_whether_it_is_verified_and_why_attempts_failed() {
        let mut obs = observation();
        obs.jobs[0].unverified = true;
        obs.jobs[0].failures.push(v1::FailedAttempt {
            chunk: 3,
            worker: "w1".into(),
            error: "exit status 2; stderr tail:\nboom".into(),
            unix_ms: 5,
        });
        let view = state_view(obs, &History::default(), &Metrics::default(), 0);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["jobs"][0]["unverified"], true);
        assert_eq!(json["jobs"][0]["failures"][0]["chunk"], 3);
        assert_eq!(
            json["jobs"][0]["failures"][0]["error"],
            "exit status 2; stderr tail:\nboom"
        );
        assert_eq!(json["jobs"][1]["unverified"], false);
        assert_eq!(json["jobs"][1]["failures"], serde_json::json!([]));
    }

    #[test]
    fn metric_text_parses_back_to_the_snapshot() {
        let m = Metrics::default();
        m.report("w0", AckStatus::Accepted, 10, false);
        m.report("w0", AckStatus::Rejected, 10, true);
        m.report("w0", AckStatus::Duplicate, 10, false);
        m.lease_expiries.inc_by(3);
        let text = render_metrics(&observation(), &m, 1234.5, 2.0).expect("encode");
        let (lines, types) = parse(&text);

        assert_eq!(value(&lines, "sweep_chunks", &[("state", "pending")]), 2.0);
        assert_eq!(value(&lines, "sweep_chunks", &[("state", "leased")]), 3.0);
        assert_eq!(value(&lines, "sweep_chunks", &[("state", "done")]), 9.0);
        assert_eq!(value(&lines, "sweep_chunks", &[("state", "poisoned")]), 1.0);
        assert_eq!(
            value(
                &lines,
                "sweep_job_chunks",
                &[("job", "1"), ("state", "leased")]
            ),
            3.0
        );
        assert_eq!(value(&lines, "sweep_jobs", &[("state", "running")]), 1.0);
        assert_eq!(value(&lines, "sweep_jobs", &[("state", "paused")]), 0.0);
        assert_eq!(
            value(&lines, "sweep_job_completions_total", &[("job", "2")]),
            5.0
        );
        // Node counts beyond 64 bits survive as floats.
        assert!(value(&lines, "sweep_job_nodes_total", &[("job", "1")]) > 3.0e38);
        assert_eq!(
            value(&lines, "sweep_job_chunks_reissued_total", &[("job", "1")]),
            2.0
        );
        assert_eq!(value(&lines, "sweep_completions_total", &[]), 1.0);
        assert_eq!(value(&lines, "sweep_duplicates_total", &[]), 1.0);
        assert_eq!(value(&lines, "sweep_reports_rejected_total", &[]), 1.0);
        assert_eq!(value(&lines, "sweep_verification_failures_total", &[]), 1.0);
        assert_eq!(value(&lines, "sweep_lease_expiries_total", &[]), 3.0);
        assert_eq!(value(&lines, "sweep_workers", &[("state", "live")]), 1.0);
        assert_eq!(value(&lines, "sweep_workers", &[("state", "silent")]), 1.0);
        assert_eq!(value(&lines, "sweep_worker_threads", &[]), 4.0);
        assert_eq!(value(&lines, "sweep_nodes_per_second", &[]), 1234.5);
        assert_eq!(types["sweep_lease_expiries"], "counter");
        assert_eq!(types["sweep_chunks"], "gauge");
    }

    #[test]
    fn rpc_histogram_counts_by_method() {
        let m = Metrics::default();
        let h = m
            .rpc_seconds
            .get_or_create(&vec![("method".into(), "Work/Lease".into())]);
        h.observe(0.001);
        h.observe(0.003);
        let text = render_metrics(&Observation::default(), &m, 0.0, 0.0).expect("encode");
        let (lines, types) = parse(&text);
        assert_eq!(types["sweep_rpc_duration_seconds"], "histogram");
        assert_eq!(
            value(
                &lines,
                "sweep_rpc_duration_seconds_count",
                &[("method", "Work/Lease")]
            ),
            2.0
        );
        let sum = value(
            &lines,
            "sweep_rpc_duration_seconds_sum",
            &[("method", "Work/Lease")],
        );
        assert!((sum - 0.004).abs() < 1e-9, "{sum}");
        // Cumulative buckets: every observation is below the +Inf bucket.
        assert_eq!(
            value(
                &lines,
                "sweep_rpc_duration_seconds_bucket",
                &[("method", "Work/Lease"), ("le", "+Inf")]
            ),
            2.0
        );
    }

    #[test]
    fn history_rates_use_the_window_and_stay_bounded() {
        let m = Metrics::default();
        let mut h = History::default();
        let mut obs = Observation {
            lease_ttl_ms: 10_000,
            live_workers: 1,
            ..Observation::default()
        };
        // 100 nodes and 1 chunk a second for two hours of samples.
        for s in 0..7200u64 {
            obs.now_ms = 1_000_000 + s * 1000;
            let mut j = job(1, "running", 100_000, s, 0, 0);
            j.nodes = (s * 100).to_string();
            obs.jobs = vec![j];
            h.record(&obs, &m);
        }
        assert_eq!(h.samples.len(), HISTORY_SAMPLES);
        assert!(h.points.len() <= RATE_POINTS);
        let last = h.samples.back().copied().expect("a sample");
        assert!((last.nodes_per_s - 100.0).abs() < 1e-9, "{last:?}");
        assert!((last.chunks_per_s - 1.0).abs() < 1e-9, "{last:?}");
        assert_eq!(h.rates.jobs[&1], (100.0, 1.0));
        let view = state_view(obs.clone(), &h, &m, last.t_ms - 3000);
        assert_eq!(view.samples.len(), 3);
        // 100,000 - 7,199 chunks left at 1 chunk/s; the job has no node total, so the ETA is by chunks.
        assert_eq!(view.jobs[0].eta_s, Some(100_000.0 - 7199.0));
    }

    #[test]
    fn an_expired_lease_never_makes_a_negative_rate() {
        let m = Metrics::default();
        let mut h = History::default();
        let mut obs = Observation {
            lease_ttl_ms: 10_000,
            ..Observation::default()
        };
        for (s, running) in [(0u64, 500u64), (1, 900), (2, 0)] {
            obs.now_ms = s * 1000;
            let mut j = job(1, "running", 10, 0, 1, 0);
            j.nodes = "0".into();
            j.running_nodes = running;
            obs.jobs = vec![j];
            h.record(&obs, &m);
        }
        assert_eq!(h.rates.nodes_per_s, 0.0);
    }
}
