//! Event counters of the coordinator and the RPC latency layer, exported by `/metrics` (see `http.rs`).
//!
//! Why a separate struct: most of what an operator watches (chunks by state, nodes, workers) is already in the
//! scheduler and the job table and is read from a snapshot at scrape time ([`crate::Coordinator::observe`]).
//! What a snapshot cannot show are events that leave no state behind: a lease that expired, a result that
//! failed verification, a duplicate report, a worker that went silent. The service bumps these counters where
//! the events happen; they are plain atomics (prometheus-client's `Counter`), so counting never takes the
//! coordinator's lock and never waits.
//!
//! Counters start at zero with each coordinator process, as Prometheus expects of counters (`rate()` handles
//! the reset); the durable per-job figures (completions, duplicates) are in the job table instead.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::core::AckKind as AckStatus;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tracing::{info, warn};

use crate::scheduler::Expired;

/// Labels of a Prometheus series: (name, value) pairs.
pub(crate) type Labels = Vec<(String, String)>;

/// Distinct `method` labels kept for RPC metrics; requests for further paths (only a broken or hostile client
/// calls methods that do not exist) share the label `other`, so a client cannot grow the series without bound.
const MAX_RPC_LABELS: usize = 64;

/// Expired leases logged one by one per expiry round; beyond that only the total is logged, so a lost worker
/// that held thousands of prefetched leases does not flood the log.
const EXPIRIES_LOGGED: usize = 8;

fn rpc_histogram() -> Histogram {
    // 0.25 ms .. about 8 s: a lease or heartbeat is sub-millisecond on loopback, a completion waits for an
    // fsync, a results call may read a whole job from the store.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// The coordinator's event counters. One per [`crate::Coordinator`], shared with the RPC layer.
#[derive(Debug)]
pub struct Metrics {
    pub(crate) completions: Counter,
    pub(crate) duplicates: Counter,
    pub(crate) rejected: Counter,
    pub(crate) verification_failures: Counter,
    pub(crate) lease_expiries: Counter,
    pub(crate) poisoned_by_expiry: Counter,
    pub(crate) workers_lost: Counter,
    pub(crate) rpc_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) rpc_errors: Family<Labels, Counter>,
    rpc_labels: Mutex<HashSet<String>>,
    /// Nodes of accepted chunks per worker name: the dashboard's per-worker throughput.
    worker_nodes: Mutex<HashMap<String, u64>>,
    /// Workers currently considered lost (silent for a lease time), so each loss is logged once.
    lost: Mutex<HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            completions: Counter::default(),
            duplicates: Counter::default(),
            rejected: Counter::default(),
            verification_failures: Counter::default(),
            lease_expiries: Counter::default(),
            poisoned_by_expiry: Counter::default(),
            workers_lost: Counter::default(),
            rpc_seconds: Family::new_with_constructor(rpc_histogram),
            rpc_errors: Family::default(),
            rpc_labels: Mutex::new(HashSet::new()),
            worker_nodes: Mutex::new(HashMap::new()),
            lost: Mutex::new(HashSet::new()),
        }
    }
}

/// A poisoned mutex here only guards counters: keep counting with what is there.
fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// One report's outcome, as acknowledged to the worker. `failed_verification` tells a verifier rejection
    /// (a wrong or lying result) from the other rejections (unknown job, cancelled job, undecodable output).
    pub(crate) fn report(
        &self,
        worker: &str,
        status: AckStatus,
        nodes: u64,
        failed_verification: bool,
    ) {
        match status {
            AckStatus::Accepted => {
                self.completions.inc();
                *relock(&self.worker_nodes)
                    .entry(worker.to_string())
                    .or_default() += nodes;
            }
            AckStatus::Duplicate => {
                self.duplicates.inc();
            }
            _ => {
                self.rejected.inc();
            }
        }
        if failed_verification {
            self.verification_failures.inc();
        }
    }

    /// Leases the expiry ticker took back: counted, and logged with their job and chunk.
    pub(crate) fn expired(&self, expired: &[Expired]) {
        self.lease_expiries.inc_by(expired.len() as u64);
        for e in expired.iter().take(EXPIRIES_LOGGED) {
            info!(
                lease = e.lease,
                job = e.job,
                chunk = e.chunk,
                poisoned = e.poisoned,
                "lease expired"
            );
        }
        let poisoned = expired.iter().filter(|e| e.poisoned).count() as u64;
        self.poisoned_by_expiry.inc_by(poisoned);
    }

    /// Logs each worker once when it goes silent for longer than `horizon_ms` allows (its leases are about to
    /// expire) and once when it is heard from again. `workers` gives (name, last seen in Unix ms).
    pub(crate) fn note_liveness<'a>(
        &self,
        now_ms: u64,
        horizon_ms: u64,
        workers: impl Iterator<Item = (&'a str, u64)>,
    ) {
        let mut lost = relock(&self.lost);
        let cutoff = now_ms.saturating_sub(horizon_ms);
        for (name, last_seen) in workers {
            let silent = last_seen < cutoff;
            if silent && !lost.contains(name) {
                lost.insert(name.to_string());
                self.workers_lost.inc();
                warn!(
                    worker = name,
                    silent_ms = now_ms.saturating_sub(last_seen),
                    "worker lost: no request within a lease time"
                );
            } else if !silent && lost.remove(name) {
                info!(worker = name, "worker back");
            }
        }
    }

    /// Nodes of the chunks this worker has had accepted since the coordinator started.
    pub(crate) fn worker_nodes(&self, worker: &str) -> u64 {
        relock(&self.worker_nodes).get(worker).copied().unwrap_or(0)
    }

    /// The `method` label for a request path `/sweep.v1.Work/Lease` -> `Work/Lease`.
    fn rpc_label(&self, path: &str) -> String {
        let name = path
            .strip_prefix('/')
            .map(|p| p.rsplit_once('.').map_or(p, |(_, tail)| tail))
            .unwrap_or("");
        let plausible = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '/' || c == '_');
        if !plausible {
            return "other".into();
        }
        let mut seen = relock(&self.rpc_labels);
        if seen.contains(name) || seen.len() < MAX_RPC_LABELS {
            seen.insert(name.to_string());
            name.to_string()
        } else {
            "other".into()
        }
    }

    fn rpc_done(&self, method: String, elapsed: Duration, code: Option<String>) {
        let labels = vec![("method".to_string(), method)];
        self.rpc_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(code) = code {
            let mut labels = labels;
            labels.push(("code".into(), code));
            self.rpc_errors.get_or_create(&labels).inc();
        }
    }
}

/// A tower layer for tonic's server that times every RPC by method, from the request to the response head
/// (for streams: to the start of the stream), and counts the ones answered with an error status.
#[derive(Clone)]
pub struct RpcLayer {
    metrics: Arc<Metrics>,
}

impl RpcLayer {
    pub fn new(metrics: Arc<Metrics>) -> RpcLayer {
        RpcLayer { metrics }
    }
}

impl<S> tower_layer::Layer<S> for RpcLayer {
    type Service = RpcTimed<S>;

    fn layer(&self, inner: S) -> RpcTimed<S> {
        RpcTimed {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`RpcLayer`] wraps around the gRPC routes.
#[derive(Clone)]
pub struct RpcTimed<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for RpcTimed<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = self.metrics.rpc_label(req.uri().path());
        let metrics = self.metrics.clone();
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            // A handler's error travels in the response head (a trailers-only response); success puts status
            // 0 in the trailers, which this layer does not wait for.
            let code = match &res {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .filter(|c| *c != "0")
                    .map(grpc_code_name),
                Err(_) => Some("transport".to_string()),
            };
            metrics.rpc_done(method, start.elapsed(), code);
            res
        })
    }
}

/// The canonical name of a gRPC status code (`5` -> `NOT_FOUND`), so the label reads like the gRPC docs.
fn grpc_code_name(code: &str) -> String {
    let name = match code {
        "1" => "CANCELLED",
        "2" => "UNKNOWN",
        "3" => "INVALID_ARGUMENT",
        "4" => "DEADLINE_EXCEEDED",
        "5" => "NOT_FOUND",
        "6" => "ALREADY_EXISTS",
        "7" => "PERMISSION_DENIED",
        "8" => "RESOURCE_EXHAUSTED",
        "9" => "FAILED_PRECONDITION",
        "10" => "ABORTED",
        "11" => "OUT_OF_RANGE",
        "12" => "UNIMPLEMENTED",
        "13" => "INTERNAL",
        "14" => "UNAVAILABLE",
        "15" => "DATA_LOSS",
        "16" => "UNAUTHENTICATED",
        _ => "OTHER",
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_labels_are_the_method_and_bounded() {
        let m = Metrics::default();
        assert_eq!(m.rpc_label("/sweep.v1.Work/Lease"), "Work/Lease");
        assert_eq!(m.rpc_label("/sweep.v1.Jobs/ListJobs"), "Jobs/ListJobs");
        assert_eq!(m.rpc_label("/a.b/<script>"), "other");
        assert_eq!(m.rpc_label(""), "other");
        for i in 0..200 {
            let _ = m.rpc_label(&format!("/x.Y/M{i}"));
        }
        assert_eq!(relock(&m.rpc_labels).len(), MAX_RPC_LABELS);
        assert_eq!(m.rpc_label("/x.Y/M199"), "other");
        // Labels seen before the cap keep their name.
        assert_eq!(m.rpc_label("/sweep.v1.Work/Lease"), "Work/Lease");
    }

    #[test]
    fn reports_count_by_outcome_and_worker() {
        let m = Metrics::default();
        m.report("w0", AckStatus::Accepted, 10, false);
        m.report("w0", AckStatus::Accepted, 5, false);
        m.report("w1", AckStatus::Duplicate, 7, false);
        m.report("w1", AckStatus::Rejected, 7, true);
        assert_eq!(m.completions.get(), 2);
        assert_eq!(m.duplicates.get(), 1);
        assert_eq!(m.rejected.get(), 1);
        assert_eq!(m.verification_failures.get(), 1);
        assert_eq!(m.worker_nodes("w0"), 15);
        assert_eq!(m.worker_nodes("w1"), 0);
    }

    #[test]
    fn a_silent_worker_is_lost_once_and_can_come_back() {
        let m = Metrics::default();
        m.note_liveness(10_000, 1_000, [("w0", 9_500), ("w1", 5_000)].into_iter());
        m.note_liveness(10_500, 1_000, [("w0", 10_400), ("w1", 5_000)].into_iter());
        assert_eq!(m.workers_lost.get(), 1);
        m.note_liveness(11_000, 1_000, [("w1", 10_900)].into_iter());
        assert!(relock(&m.lost).is_empty());
        m.note_liveness(20_000, 1_000, [("w1", 10_900)].into_iter());
        assert_eq!(m.workers_lost.get(), 2);
    }

    #[test]
    fn expiries_count_leases_and_poisoned_chunks() {
        let m = Metrics::default();
        let e = |lease, poisoned| Expired {
            lease,
            job: 1,
            chunk: lease,
            poisoned,
        };
        m.expired(&[e(1, false), e(2, true), e(3, false)]);
        assert_eq!(m.lease_expiries.get(), 3);
        assert_eq!(m.poisoned_by_expiry.get(), 1);
    }
}
