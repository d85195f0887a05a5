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
//! answer as text, with its pictures listed), `/api/jobs/{id}/pictures/{n}` (one SVG), `/api/members` (a
//! replicated coordinator's member: its view of the group, which the page draws as its Members panel),
//! `/metrics`.

mod metrics_text;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::coordinator::Coordinator;
use crate::core::CoreError;
use crate::grpc::Backend;
use crate::scheduler::JobId;
use metrics_text::render_metrics;
use state::{state_view, History};

const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// A finished job's text answer is cut here on the page (the full answer: `sweep results`).
const MAX_RESULT_TEXT: usize = 16 * 1024;
/// Pictures of one job shown on the page (the rest: `sweep results JOB --svg DIR`).
const MAX_PICTURES: usize = 8;

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
    source: Backend,
    history: Mutex<History>,
    results: Mutex<HashMap<JobId, Arc<ResultView>>>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Dashboard {
    /// The coordinator to read, or why this member does not run one now (it names the leader): answered
    /// `503` ([`unavailable`]).
    fn coord(&self) -> Result<Arc<Coordinator>, String> {
        self.source.coord().map_err(|s| s.message().to_string())
    }
}

/// Serves the dashboard and `/metrics` on `listener` until `shutdown` resolves. On a member of a replicated
/// coordinator, `/metrics` and `/api/members` answer on every member; the rest only where the coordinator runs.
pub async fn serve_http(
    listener: TcpListener,
    source: Backend,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Arc::new(Dashboard {
        source,
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
                if let Ok(coord) = state.coord() {
                    let obs = coord.observe();
                    relock(&state.history).record(&obs, &coord.metrics);
                }
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
        .route("/api/members", get(api_members))
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

async fn api_state(State(d): State<Arc<Dashboard>>, Query(q): Query<StateQuery>) -> Response {
    let coord = match d.coord() {
        Ok(c) => c,
        Err(why) => return unavailable(why),
    };
    let obs = coord.observe();
    let view = state_view(obs, &relock(&d.history), &coord.metrics, q.since);
    ([(header::CACHE_CONTROL, "no-store")], Json(view)).into_response()
}

/// The group as this member sees it (`sweep coordinator members --json` of one member); 404 on a single
/// coordinator.
async fn api_members(State(d): State<Arc<Dashboard>>) -> Response {
    match &d.source {
        Backend::Member(l) => {
            ([(header::CACHE_CONTROL, "no-store")], Json(l.view())).into_response()
        }
        Backend::Single(_) => error(StatusCode::NOT_FOUND, "a single coordinator has no members"),
    }
}

fn unavailable(why: String) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, why)
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into()).into_response()
}

async fn result_view(d: &Dashboard, id: JobId) -> Result<Arc<ResultView>, Response> {
    if let Some(r) = relock(&d.results).get(&id) {
        return Ok(r.clone());
    }
    let resp = d
        .coord()
        .map_err(unavailable)?
        .results(id)
        .await
        .map_err(|e| {
            let code = match e {
                CoreError::UnknownJob(_) | CoreError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            error(code, e.to_string())
        })?;
    let info = resp.job;
    if !matches!(
        info.state,
        crate::scheduler::JobState::Done | crate::scheduler::JobState::DoneWithPoisonedChunks
    ) {
        return Err(error(
            StatusCode::CONFLICT,
            format!("job {id} is {}: no answer yet", info.state.as_str()),
        ));
    }
    let poisoned = resp.poisoned.len();
    // Pictures need the tree, so the page parses the JSON and renders the text with them.
    let result = resp.result.json;
    // Rendering (text and pictures) may take a moment for large answers: off the async runtime.
    let registry = d.coord().map_err(unavailable)?.registry().clone();
    let view = tokio::task::spawn_blocking(move || -> Result<ResultView, String> {
        let params: serde_json::Value = serde_json::from_str(&info.params_json)
            .map_err(|e| format!("stored parameters are not JSON: {e}"))?;
        let job = registry
            .job_from_params(&info.space, &params)
            .map_err(|e| e.to_string())?;
        let result: serde_json::Value = serde_json::from_str(&result)
            .map_err(|e| format!("the job's result is not JSON: {e}"))?;
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
            state: info.state.as_str().to_string(),
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
    let (nodes_per_s, chunks_per_s) = {
        let h = relock(&d.history);
        (h.rates.nodes_per_s, h.rates.chunks_per_s)
    };
    let group = match &d.source {
        Backend::Member(l) => Some(l.view()),
        Backend::Single(_) => None,
    };
    // Every member is scraped: its own gauges always, the coordinator's where it runs.
    let coord = d.coord().ok();
    let observed = coord.as_ref().map(|c| (c.observe(), c.metrics.clone()));
    let coordinator = observed
        .as_ref()
        .map(|(obs, m)| (obs, m.as_ref(), nodes_per_s, chunks_per_s));
    match render_metrics(coordinator, group.as_ref()) {
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
