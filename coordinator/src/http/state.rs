//! The dashboard's own state and the JSON it serves: a bounded history of throughput samples (one a second,
//! the last hour) that a snapshot cannot give, and the `/api/state` view built from an [`Observation`].

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use crate::core::{JobView, Observation};
use crate::metrics::Metrics;
use crate::scheduler::{JobId, JobState};

/// Throughput samples kept: one a second for an hour.
pub(super) const HISTORY_SAMPLES: usize = 3600;
/// Totals kept for computing rates over a window (seconds at one sample a second).
pub(super) const RATE_POINTS: usize = 61;

fn nodes_of(job: &JobView) -> f64 {
    // A rate only needs a float; node totals may exceed 64 bits.
    job.nodes as f64
}

/// The chunks of a job's plan: its slots less the pieces splitting added.
fn plan_chunks(job: &JobView) -> u64 {
    job.chunks_total.saturating_sub(job.pieces)
}

/// The plan chunks the done slots cover: what chunk rates, chunk ETAs and the page's bar count, since it never
/// falls when a chunk splits (done slots of a growing `chunks_total` would).
fn covered(job: &JobView) -> f64 {
    job.chunks_covered.clamp(0.0, plan_chunks(job) as f64)
}

/// Totals at one instant, for rates over a window.
#[derive(Clone, Debug, Default)]
pub(super) struct Point {
    pub(super) t_ms: u64,
    pub(super) nodes: f64,
    pub(super) chunks: f64,
    pub(super) jobs: HashMap<JobId, (f64, f64)>,
    pub(super) workers: HashMap<String, f64>,
}

/// One throughput sample of the plot.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub(super) struct Sample {
    pub(super) t_ms: u64,
    pub(super) nodes_per_s: f64,
    pub(super) chunks_per_s: f64,
    pub(super) workers: u32,
}

/// Rates over the window, per job (nodes/s, chunks/s) and per worker (nodes/s). Chunks are plan chunks covered,
/// so a piece counts its share of its chunk.
#[derive(Clone, Debug, Default)]
pub(super) struct Rates {
    pub(super) nodes_per_s: f64,
    pub(super) chunks_per_s: f64,
    pub(super) jobs: HashMap<JobId, (f64, f64)>,
    pub(super) workers: HashMap<String, f64>,
}

/// The bounded throughput history. Rates are measured over a window of about half a lease time: running
/// chunks report progress only with each heartbeat (a quarter of the lease time) and finished chunks add their
/// nodes at once, so a shorter window would show a saw-tooth instead of a rate.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) points: VecDeque<Point>,
    pub(super) samples: VecDeque<Sample>,
    pub(super) rates: Rates,
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

    pub(super) fn record(&mut self, obs: &Observation, metrics: &Metrics) {
        let mut p = Point {
            t_ms: obs.now_ms,
            ..Point::default()
        };
        for j in &obs.jobs {
            let nodes = nodes_of(j) + j.running_nodes as f64;
            p.nodes += nodes;
            p.chunks += covered(j);
            p.jobs.insert(j.id, (nodes, covered(j)));
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

#[derive(Serialize)]
pub(super) struct JobJson {
    pub(super) id: u64,
    pub(super) space: String,
    pub(super) params: String,
    pub(super) state: String,
    pub(super) priority: i32,
    /// Slots: the plan's chunks and the pieces split off running ones.
    pub(super) chunks_total: u64,
    pub(super) chunks_done: u64,
    pub(super) chunks_leased: u64,
    pub(super) chunks_pending: u64,
    /// Of `chunks_total`, the pieces split off running chunks (one per split).
    pub(super) pieces: u64,
    /// The chunks of the plan (`chunks_total - pieces`): the length of the page's bar.
    pub(super) plan_chunks: u64,
    /// How much of the plan the done slots cover, in plan chunks: the bar's done part, which never falls.
    pub(super) chunks_covered: f64,
    pub(super) chunks_poisoned: u64,
    pub(super) reissued: u64,
    /// Decimal strings: may exceed 64 bits.
    pub(super) nodes: String,
    pub(super) total_nodes: String,
    /// The expected size of a running job of unknown size, when its space estimates its chunks (an estimate:
    /// the page shows the ETA computed from it as the range `eta_low_s` to `eta_high_s`).
    pub(super) estimated_nodes: String,
    pub(super) running_nodes: u64,
    pub(super) nodes_per_s: f64,
    pub(super) chunks_per_s: f64,
    /// Seconds left at the current rate; absent when not running or no rate yet.
    pub(super) eta_s: Option<f64>,
    /// When the ETA comes from an estimated size: the range it may really be in ([`eta_spread`]).
    pub(super) eta_low_s: Option<f64>,
    pub(super) eta_high_s: Option<f64>,
    pub(super) workers: u32,
    pub(super) duplicates: u64,
    /// The jobs whose artifacts this one reads, in order, and how many of them it still waits for.
    pub(super) input_jobs: Vec<u64>,
    pub(super) inputs_waiting: u32,
    pub(super) created_ms: u64,
    pub(super) finished_ms: u64,
    /// Nothing re-checks this job's answers (a program's output) and it is not replicated.
    pub(super) unverified: bool,
    /// Recent failed attempts, oldest first, each with its error (a program's exit status and stderr tail).
    pub(super) failures: Vec<FailureJson>,
}

#[derive(Serialize)]
pub(super) struct FailureJson {
    pub(super) chunk: u64,
    pub(super) worker: String,
    pub(super) error: String,
    pub(super) unix_ms: u64,
}

#[derive(Serialize)]
pub(super) struct WorkerJson {
    pub(super) name: String,
    pub(super) threads: u32,
    pub(super) last_seen_ms: u64,
    pub(super) live: bool,
    pub(super) leases: u32,
    pub(super) chunks_done: u64,
    pub(super) nodes_per_s: f64,
}

#[derive(Serialize, Default)]
pub(super) struct ChunkTotals {
    pub(super) total: u64,
    pub(super) pending: u64,
    pub(super) leased: u64,
    pub(super) done: u64,
    pub(super) poisoned: u64,
    /// Of `total`, the pieces split off running chunks.
    pub(super) pieces: u64,
}

#[derive(Serialize)]
pub(super) struct Counters {
    pub(super) completions: u64,
    pub(super) duplicates: u64,
    pub(super) rejected: u64,
    pub(super) verification_failures: u64,
    pub(super) lease_expiries: u64,
    pub(super) reissued: u64,
    pub(super) workers_lost: u64,
}

#[derive(Serialize)]
pub(super) struct StateView {
    pub(super) now_ms: u64,
    pub(super) lease_ttl_ms: u64,
    pub(super) live_workers: u32,
    pub(super) nodes_per_s: f64,
    pub(super) chunks_per_s: f64,
    pub(super) chunks: ChunkTotals,
    pub(super) counters: Counters,
    pub(super) jobs: Vec<JobJson>,
    pub(super) workers: Vec<WorkerJson>,
    pub(super) identities: Vec<IdentityJson>,
    pub(super) samples: Vec<Sample>,
}

/// One identity's part of the cluster (fair share).
#[derive(Serialize)]
pub(super) struct IdentityJson {
    pub(super) identity: String,
    pub(super) share: f64,
    pub(super) running_threads: u64,
    pub(super) decayed_thread_seconds: f64,
}

/// How far an ETA from an estimated size may be off, as a factor either way, when `done` of the job (0 to 1) is
/// behind it: `1 + 3.5 (1 - done)^2`, 4.5 at the start, 1.875 halfway, 1 at the end. The estimate of what is left
/// is worst before finished chunks have corrected it, and the measured ETAs of `docs/performance.md` ("ETA of a
/// search of unknown size": up to 3.7x the time left at 5 %, 2x at 25 %, 1.4x at 50 %) all fall inside it. The
/// command line's bars use the same rule (`src/progress.rs`).
pub(super) fn eta_spread(done: f64) -> f64 {
    let left = (1.0 - done).clamp(0.0, 1.0);
    1.0 + 3.5 * left * left
}

/// The range around `eta_s` for a job whose size is estimated, `None` for one of known size or counted in
/// chunks.
fn eta_range(job: &JobView, eta_s: Option<f64>) -> Option<(f64, f64)> {
    let eta_s = eta_s?;
    if job.total_nodes.is_some() {
        return None;
    }
    let estimate = job.estimated_nodes? as f64;
    if estimate <= 0.0 {
        return None;
    }
    let done = (nodes_of(job) + job.running_nodes as f64) / estimate;
    let f = eta_spread(done);
    Some((eta_s / f, eta_s * f))
}

fn eta(job: &JobView, nodes_per_s: f64, chunks_per_s: f64) -> Option<f64> {
    if job.state != JobState::Running {
        return None;
    }
    // By nodes when the space knows its total work, or estimates it (smoother: running chunks count, and
    // chunks of very different sizes do not mislead), else by chunks.
    if let Some(total) = job.total_nodes.or(job.estimated_nodes).map(|n| n as f64) {
        if nodes_per_s > 0.0 {
            let left = total - nodes_of(job) - job.running_nodes as f64;
            return Some((left / nodes_per_s).max(0.0));
        }
    }
    let left = plan_chunks(job) as f64 - covered(job);
    (chunks_per_s > 0.0).then(|| left / chunks_per_s)
}

pub(super) fn chunk_totals(obs: &Observation) -> ChunkTotals {
    let mut t = ChunkTotals::default();
    for j in &obs.jobs {
        t.total += j.chunks_total;
        t.done += j.chunks_done;
        t.leased += j.chunks_leased;
        t.poisoned += j.chunks_poisoned;
        t.pending += j.pending();
        t.pieces += j.pieces;
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

pub(super) fn state_view(
    obs: Observation,
    history: &History,
    m: &Metrics,
    since: u64,
) -> StateView {
    let rates = &history.rates;
    let horizon = obs.now_ms.saturating_sub(obs.lease_ttl_ms);
    let jobs = obs
        .jobs
        .iter()
        .map(|j| {
            let (nodes_per_s, chunks_per_s) = rates.jobs.get(&j.id).copied().unwrap_or_default();
            let eta_s = eta(j, nodes_per_s, chunks_per_s);
            let range = eta_range(j, eta_s);
            JobJson {
                id: j.id,
                space: j.space.clone(),
                params: j.params_json.clone(),
                state: j.state.as_str().to_string(),
                priority: j.priority,
                chunks_total: j.chunks_total,
                chunks_done: j.chunks_done,
                chunks_leased: j.chunks_leased,
                chunks_pending: j.pending(),
                chunks_poisoned: j.chunks_poisoned,
                pieces: j.pieces,
                plan_chunks: plan_chunks(j),
                chunks_covered: covered(j),
                reissued: j.reissued,
                nodes: j.nodes.to_string(),
                total_nodes: j.total_nodes.map(|n| n.to_string()).unwrap_or_default(),
                estimated_nodes: j.estimated_nodes.map(|n| n.to_string()).unwrap_or_default(),
                running_nodes: j.running_nodes,
                nodes_per_s,
                chunks_per_s,
                eta_s,
                eta_low_s: range.map(|r| r.0),
                eta_high_s: range.map(|r| r.1),
                workers: j.workers,
                duplicates: j.duplicates,
                input_jobs: j.input_jobs.clone(),
                inputs_waiting: j.inputs_waiting,
                created_ms: j.created_ms,
                finished_ms: j.finished_ms,
                unverified: j.unverified,
                failures: j
                    .failures
                    .iter()
                    .map(|f| FailureJson {
                        chunk: f.chunk,
                        worker: f.worker.clone(),
                        error: f.error.clone(),
                        unix_ms: f.unix_ms,
                    })
                    .collect(),
            }
        })
        .collect();
    let mut workers: Vec<WorkerJson> = obs
        .workers
        .iter()
        .map(|w| WorkerJson {
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
        identities: obs
            .identities
            .iter()
            .map(|u| IdentityJson {
                identity: u.identity.clone(),
                share: u.share,
                running_threads: u.running_threads,
                decayed_thread_seconds: u.decayed_thread_secs,
            })
            .collect(),
        samples: history
            .samples
            .iter()
            .filter(|s| s.t_ms > since)
            .copied()
            .collect(),
    }
}
