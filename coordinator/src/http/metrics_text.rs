//! `/metrics` in the OpenMetrics text format: gauges from one [`Observation`], the event counters and the
//! RPC latency histograms of [`Metrics`].

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use std::collections::BTreeMap;

use super::state::chunk_totals;
use crate::core::Observation;
use crate::member::GroupView;
use crate::metrics::{Labels, Metrics};
use crate::scheduler::JobState;

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
pub(super) fn render_metrics(
    coordinator: Option<(&Observation, &Metrics, f64, f64)>,
    group: Option<&GroupView>,
) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::default();
    if let Some(g) = group {
        register_member(&mut reg, g);
    }
    if let Some((obs, m, nodes_per_s, chunks_per_s)) = coordinator {
        register_coordinator(&mut reg, obs, m, nodes_per_s, chunks_per_s);
    }
    let mut text = String::new();
    encode(&mut text, &reg)?;
    Ok(text)
}

/// A replicated member's own gauges (`sweep coordinator members` as series).
fn register_member(reg: &mut Registry, g: &GroupView) {
    let gauge = |v: u64| {
        let x = Gauge::<i64>::default();
        x.set(i64::try_from(v).unwrap_or(i64::MAX));
        x
    };
    for (name, help, v) in [
        ("sweep_member_id", "This member's id", g.id),
        ("sweep_member_term", "This member's current term", g.term),
        (
            "sweep_member_leader",
            "The id of the leader this member knows of (0: none, an election)",
            g.leader.unwrap_or(0),
        ),
        (
            "sweep_member_serving",
            "1 while this member leads and runs the coordinator",
            u64::from(g.serving),
        ),
        (
            "sweep_member_applied_index",
            "The last entry this member applied to its store",
            g.applied,
        ),
        (
            "sweep_member_last_index",
            "The last entry in this member's log",
            g.last_index,
        ),
    ] {
        reg.register(name, help, gauge(v));
    }
    let lag = Family::<Labels, Gauge>::default();
    for m in &g.members {
        if let Some(matched) = m.matched {
            lag.get_or_create(&labels([("member", m.id.to_string())]))
                .set(i64::try_from(g.last_index.saturating_sub(matched)).unwrap_or(i64::MAX));
        }
    }
    reg.register(
        "sweep_member_lag_entries",
        "On the leader: how many entries each member's log is behind its own",
        lag,
    );
}

/// The coordinator's gauges, counters and histograms.
fn register_coordinator(
    reg: &mut Registry,
    obs: &Observation,
    m: &Metrics,
    nodes_per_s: f64,
    chunks_per_s: f64,
) {
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
    let pieces = Gauge::<i64>::default();
    pieces.set(i64::try_from(totals.pieces).unwrap_or(i64::MAX));
    reg.register(
        "sweep_pieces",
        "Pieces split off running chunks, in all jobs (one per split; counted in sweep_chunks)",
        pieces,
    );

    let job_chunks = Family::<Labels, Gauge>::default();
    let job_pieces = Family::<Labels, Gauge>::default();
    let job_plan = Family::<Labels, Gauge>::default();
    let job_covered = Family::<Labels, FloatGauge>::default();
    let job_nodes = Family::<Labels, FloatCounter>::default();
    let job_completions = Family::<Labels, Counter>::default();
    let job_duplicates = Family::<Labels, Counter>::default();
    let job_reissued = Family::<Labels, Counter>::default();
    let mut jobs_by_state: BTreeMap<&str, i64> =
        JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    for j in &obs.jobs {
        *jobs_by_state.entry(j.state.as_str()).or_default() += 1;
        let id = [("job", j.id.to_string()), ("space", j.space.clone())];
        for (state, n) in [
            ("pending", j.pending()),
            ("leased", j.chunks_leased),
            ("done", j.chunks_done),
            ("poisoned", j.chunks_poisoned),
        ] {
            let mut l = labels(id.clone());
            l.push(("state".into(), state.into()));
            job_chunks.get_or_create(&l).set(n as i64);
        }
        let plan = j.chunks_total.saturating_sub(j.pieces);
        job_pieces
            .get_or_create(&labels(id.clone()))
            .set(i64::try_from(j.pieces).unwrap_or(i64::MAX));
        job_plan
            .get_or_create(&labels(id.clone()))
            .set(i64::try_from(plan).unwrap_or(i64::MAX));
        job_covered
            .get_or_create(&labels(id.clone()))
            .set(j.chunks_covered.clamp(0.0, plan as f64));
        job_nodes
            .get_or_create(&labels(id.clone()))
            .inc_by(j.nodes as f64);
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
        "sweep_job_pieces",
        "Pieces split off each job's running chunks (one per split; counted in sweep_job_chunks)",
        job_pieces,
    );
    reg.register(
        "sweep_job_plan_chunks",
        "Chunks of each job's plan (sweep_job_chunks less sweep_job_pieces)",
        job_plan,
    );
    reg.register(
        "sweep_job_chunks_covered",
        "How much of each job's plan its done chunks and pieces cover, in plan chunks: a progress that never \
         falls when a chunk splits, and equals sweep_job_plan_chunks once all are done",
        job_covered,
    );
    reg.register(
        "sweep_job_nodes",
        "Nodes (the space's unit of work) of each job's accepted chunks",
        job_nodes,
    );
    for (name, help, family) in [
        (
            "sweep_job_completions",
            "Accepted chunk results of each job (durable)",
            job_completions,
        ),
        (
            "sweep_job_duplicates",
            "Results of already-done chunks of each job, not counted (durable)",
            job_duplicates,
        ),
        (
            "sweep_job_chunks_reissued",
            "Chunks of each job handed out again after an expiry or a failure",
            job_reissued,
        ),
    ] {
        reg.register(name, help, family);
    }

    for (name, help, counter) in [
        (
            "sweep_completions",
            "Chunk results accepted since the coordinator started",
            &m.completions,
        ),
        (
            "sweep_duplicates",
            "Results of already-done chunks since the coordinator started",
            &m.duplicates,
        ),
        (
            "sweep_reports_rejected",
            "Chunk results rejected (failed verification, unknown or cancelled job, undecodable)",
            &m.rejected,
        ),
        (
            "sweep_verification_failures",
            "Chunk results that failed the space's verifier",
            &m.verification_failures,
        ),
        (
            "sweep_lease_expiries",
            "Leases that expired without a heartbeat",
            &m.lease_expiries,
        ),
        (
            "sweep_chunks_poisoned_by_expiry",
            "Chunks poisoned because their last allowed lease expired",
            &m.poisoned_by_expiry,
        ),
        (
            "sweep_workers_lost",
            "Workers that went silent for a lease time",
            &m.workers_lost,
        ),
    ] {
        reg.register(name, help, counter.clone());
    }

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
    let running = Family::<Labels, Gauge>::default();
    let used = Family::<Labels, FloatGauge>::default();
    let share = Family::<Labels, FloatGauge>::default();
    for u in &obs.identities {
        let l = labels([("identity", u.identity.clone())]);
        running.get_or_create(&l).set(u.running_threads as i64);
        used.get_or_create(&l).set(u.decayed_thread_secs);
        share.get_or_create(&l).set(u.share);
    }
    reg.register(
        "sweep_identity_running_threads",
        "Threads held by the leases of each identity's jobs (fair share)",
        running,
    );
    for (name, help, family) in [
        (
            "sweep_identity_decayed_thread_seconds",
            "Each identity's use in thread-seconds, decayed by --usage-half-life",
            used,
        ),
        (
            "sweep_identity_share",
            "Each identity's share (1 unless an admin set one)",
            share,
        ),
    ] {
        reg.register(name, help, family);
    }
    for (name, help, v) in [
        (
            "sweep_nodes_per_second",
            "Nodes per second over the dashboard's rate window (about half a lease time)",
            nodes_per_s,
        ),
        (
            "sweep_chunks_per_second",
            "Plan chunks covered per second over the same window (a piece counts its share of its chunk)",
            chunks_per_s,
        ),
    ] {
        let rate = FloatGauge::default();
        rate.set(v);
        reg.register(name, help, rate);
    }
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
}
