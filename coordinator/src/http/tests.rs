//! The dashboard's state view and the `/metrics` text, checked against a hand-made observation.

use std::collections::BTreeMap;

use super::metrics_text::render_metrics;
use super::state::{eta_spread, state_view, History, HISTORY_SAMPLES, RATE_POINTS};
use crate::core::{AckKind as AckStatus, FailedAttempt, JobView, Observation, WorkerObservation};
use crate::metrics::Metrics;
use crate::scheduler::{IdentityUse, JobState};

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

fn job(id: u64, state: JobState, total: u64, done: u64, leased: u64, poisoned: u64) -> JobView {
    JobView {
        owner: String::new(),
        share: 1.0,
        id,
        space: "star".into(),
        params_json: "{}".into(),
        state,
        priority: 0,
        chunks_total: total,
        chunks_done: done,
        chunks_leased: leased,
        chunks_poisoned: poisoned,
        pieces: 0,
        chunks_covered: done as f64,
        reissued: 2,
        nodes: u128::MAX,
        running_nodes: 0,
        total_nodes: None,
        estimated_nodes: None,
        created_ms: 0,
        finished_ms: 0,
        workers: 0,
        completions: done,
        duplicates: 1,
        input_jobs: Vec::new(),
        inputs_waiting: 0,
        artifact_digest: None,
        replicate: 1,
        disagreements: 0,
        unverified: false,
        failures: Vec::new(),
        checkpoints: 0,
        listing: Default::default(),
        solutions_stored: 0,
        counters: Default::default(),
        max_attempts: 3,
        chunk_memory: None,
        waiting: None,
    }
}

fn observation() -> Observation {
    Observation {
        now_ms: 100_000,
        lease_ttl_ms: 10_000,
        live_workers: 1,
        jobs: vec![
            job(1, JobState::Running, 10, 4, 3, 1),
            job(2, JobState::Done, 5, 5, 0, 0),
        ],
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
        identities: vec![IdentityUse {
            identity: "token-0123456789ab".into(),
            share: 2.0,
            running_threads: 3,
            decayed_thread_secs: 5400.5,
        }],
    }
}

#[test]
fn a_job_view_says_whether_it_is_verified_and_why_attempts_failed() {
    let mut obs = observation();
    obs.jobs[0].unverified = true;
    obs.jobs[0].failures.push(FailedAttempt {
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
    let text = render_metrics(Some((&observation(), &m, 1234.5, 2.0)), None).expect("encode");
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
    let alice = [("identity", "token-0123456789ab")];
    assert_eq!(value(&lines, "sweep_identity_running_threads", &alice), 3.0);
    assert_eq!(
        value(&lines, "sweep_identity_decayed_thread_seconds", &alice),
        5400.5
    );
    assert_eq!(value(&lines, "sweep_identity_share", &alice), 2.0);
    assert_eq!(types["sweep_lease_expiries"], "counter");
    assert_eq!(types["sweep_chunks"], "gauge");
}

/// Job 1 of [`observation`] after two of its running chunks split: 2 pieces more, the same done slots, and
/// half a chunk more covered by a piece that finished.
fn split_observation() -> Observation {
    let mut obs = observation();
    let j = &mut obs.jobs[0];
    j.chunks_total += 2;
    j.pieces = 2;
    j.chunks_done += 1;
    j.chunks_covered = 4.5;
    obs
}

#[test]
fn metrics_show_pieces_and_the_plan_covered() {
    let text = render_metrics(
        Some((&split_observation(), &Metrics::default(), 0.0, 0.0)),
        None,
    )
    .expect("encode");
    let (lines, types) = parse(&text);
    assert_eq!(value(&lines, "sweep_pieces", &[]), 2.0);
    assert_eq!(value(&lines, "sweep_job_pieces", &[("job", "1")]), 2.0);
    assert_eq!(value(&lines, "sweep_job_pieces", &[("job", "2")]), 0.0);
    assert_eq!(
        value(&lines, "sweep_job_plan_chunks", &[("job", "1")]),
        10.0
    );
    assert_eq!(
        value(&lines, "sweep_job_chunks_covered", &[("job", "1")]),
        4.5
    );
    assert_eq!(
        value(&lines, "sweep_job_chunks_covered", &[("job", "2")]),
        5.0
    );
    for name in [
        "sweep_pieces",
        "sweep_job_pieces",
        "sweep_job_plan_chunks",
        "sweep_job_chunks_covered",
    ] {
        assert_eq!(types[name], "gauge", "{name}");
    }
}

#[test]
fn the_page_draws_the_plan_covered_and_shows_pieces() {
    let view = state_view(
        split_observation(),
        &History::default(),
        &Metrics::default(),
        0,
    );
    let json = serde_json::to_value(&view).unwrap();
    let j = &json["jobs"][0];
    // The slots as before (fields are only added), and the plan with what it covers.
    assert_eq!(j["chunks_total"], 12);
    assert_eq!(j["chunks_done"], 5);
    assert_eq!(j["pieces"], 2);
    assert_eq!(j["plan_chunks"], 10);
    assert_eq!(j["chunks_covered"], 4.5);
    assert_eq!(json["chunks"]["pieces"], 2);
}

#[test]
fn chunk_rates_never_go_back_when_chunks_split() {
    let m = Metrics::default();
    let mut h = History::default();
    let mut obs = Observation {
        lease_ttl_ms: 10_000,
        live_workers: 1,
        ..Observation::default()
    };
    // (slots, pieces, done slots, covered): chunks split while the done slots lag.
    for (s, (total, pieces, done, covered)) in [
        (10u64, 0u64, 2u64, 2.0),
        (12, 2, 2, 2.0),
        (14, 4, 3, 2.5),
        (14, 4, 4, 2.75),
    ]
    .into_iter()
    .enumerate()
    {
        obs.now_ms = 1_000 * s as u64;
        let mut j = job(1, JobState::Running, total, done, 0, 0);
        j.pieces = pieces;
        j.chunks_covered = covered;
        obs.jobs = vec![j];
        h.record(&obs, &m);
        assert!(h.rates.chunks_per_s >= 0.0);
    }
    // 0.75 plan chunks covered over 3 s, and 7.25 of the plan's 10 left at that rate.
    assert!((h.rates.jobs[&1].1 - 0.25).abs() < 1e-9, "{:?}", h.rates);
    let view = state_view(obs, &h, &m, 0);
    let eta = view.jobs[0].eta_s.expect("an ETA by chunks");
    assert!((eta - 29.0).abs() < 1e-9, "{eta}");
    assert_eq!(view.jobs[0].eta_low_s, None, "chunks give no range");
}

#[test]
fn an_eta_from_an_estimated_size_comes_with_a_range() {
    let mut obs = observation();
    let j = &mut obs.jobs[0];
    j.nodes = 2500;
    j.running_nodes = 0;
    j.estimated_nodes = Some(10_000);
    let mut h = History::default();
    h.rates.jobs.insert(1, (100.0, 0.0));
    let view = state_view(obs.clone(), &h, &Metrics::default(), 0);
    // 7,500 nodes left at 100/s, a quarter done: a spread of 1 + 3.5 * 0.75^2 = 2.96875 either way.
    let v = &view.jobs[0];
    assert_eq!(v.eta_s, Some(75.0));
    let (low, high) = (v.eta_low_s.expect("low"), v.eta_high_s.expect("high"));
    assert!((low - 75.0 / 2.96875).abs() < 1e-9, "{low}");
    assert!((high - 75.0 * 2.96875).abs() < 1e-9, "{high}");
    // A known size gives one figure.
    obs.jobs[0].total_nodes = Some(10_000);
    let view = state_view(obs, &h, &Metrics::default(), 0);
    assert_eq!(view.jobs[0].eta_s, Some(75.0));
    assert_eq!(
        (view.jobs[0].eta_low_s, view.jobs[0].eta_high_s),
        (None, None)
    );
    assert_eq!(eta_spread(1.0), 1.0);
    assert_eq!(eta_spread(0.0), 4.5);
}

#[test]
fn rpc_histogram_counts_by_method() {
    let m = Metrics::default();
    let h = m
        .rpc_seconds
        .get_or_create(&vec![("method".into(), "Work/Lease".into())]);
    h.observe(0.001);
    h.observe(0.003);
    let text = render_metrics(Some((&Observation::default(), &m, 0.0, 0.0)), None).expect("encode");
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
        let mut j = job(1, JobState::Running, 100_000, s, 0, 0);
        j.nodes = u128::from(s * 100);
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
        let mut j = job(1, JobState::Running, 10, 0, 1, 0);
        j.nodes = 0;
        j.running_nodes = running;
        obs.jobs = vec![j];
        h.record(&obs, &m);
    }
    assert_eq!(h.rates.nodes_per_s, 0.0);
}

/// A replicated member's own series: answered with or without a coordinator, the leader's view giving each
/// member's lag.
#[test]
fn a_member_exports_its_view_of_the_group() {
    use crate::member::{GroupView, MemberView};
    let view = GroupView {
        id: 1,
        term: 7,
        leader: Some(1),
        applied: 120,
        last_index: 125,
        serving: true,
        members: vec![
            MemberView {
                id: 1,
                url: "http://a:7878".into(),
                matched: Some(125),
            },
            MemberView {
                id: 2,
                url: "http://b:7878".into(),
                matched: Some(100),
            },
            MemberView {
                id: 3,
                url: "http://c:7878".into(),
                matched: None,
            },
        ],
    };
    let text = render_metrics(None, Some(&view)).expect("encode");
    let (lines, types) = parse(&text);
    assert_eq!(types["sweep_member_term"], "gauge");
    assert_eq!(value(&lines, "sweep_member_term", &[]), 7.0);
    assert_eq!(value(&lines, "sweep_member_leader", &[]), 1.0);
    assert_eq!(value(&lines, "sweep_member_serving", &[]), 1.0);
    assert_eq!(value(&lines, "sweep_member_applied_index", &[]), 120.0);
    assert_eq!(
        value(&lines, "sweep_member_lag_entries", &[("member", "1")]),
        0.0
    );
    assert_eq!(
        value(&lines, "sweep_member_lag_entries", &[("member", "2")]),
        25.0
    );
    assert!(
        !text.contains("member=\"3\""),
        "a member the leader has no match for has no lag series: {text}"
    );
    assert!(
        !text.contains("sweep_chunks"),
        "no coordinator here: {text}"
    );
    let both = render_metrics(
        Some((&Observation::default(), &Metrics::default(), 0.0, 0.0)),
        Some(&view),
    )
    .expect("encode");
    assert!(both.contains("sweep_chunks") && both.contains("sweep_member_term"));
}

/// A served asset: its content security policy and its text.
async fn served(resp: axum::response::Response) -> (String, String) {
    let policy = resp
        .headers()
        .get(axum::http::header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("asset body");
    (
        policy,
        String::from_utf8(body.to_vec()).expect("UTF-8 asset"),
    )
}

/// The literal ids the script looks up (`$('id')`, `setText('id', ...)`); ids it builds at run time are left out.
fn ids_looked_up(js: &str) -> Vec<&str> {
    let mut ids = Vec::new();
    for (call, end) in [("$('", ')'), ("setText('", ',')] {
        for (at, _) in js.match_indices(call) {
            let rest = &js[at + call.len()..];
            let Some(close) = rest.find('\'') else {
                continue;
            };
            if rest[close + 1..].starts_with(end) {
                ids.push(&rest[..close]);
            }
        }
    }
    ids
}

/// The page as served: nothing inline (its policy allows none), every element the script looks up is in it, and
/// its script asks every member for the group (`/api/members`) and draws the members panel, which starts hidden
/// so that a single coordinator's page (404 there) shows as it always did.
#[tokio::test]
async fn the_page_draws_a_members_panel_only_where_members_are_served() {
    let (policy, html) = served(super::index().await).await;
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    assert!(
        !html.contains("<style") && !html.contains(" style="),
        "inline style"
    );
    for (at, _) in html.match_indices("<script") {
        let tag = &html[at..];
        assert!(
            tag[..tag.find('>').expect("tag ends")].contains(" src=")
                && tag[tag.find('>').unwrap() + 1..].starts_with("</script>"),
            "inline script: {tag}"
        );
    }
    assert!(html.contains(r#"<section class="panel" id="members-panel" hidden>"#));
    assert!(html.contains(r#"<table id="members">"#));
    let (policy_js, js) = served(super::app_js().await).await;
    assert_eq!(policy_js, policy);
    assert!(
        js.contains("fetch('api/members'"),
        "the script polls the members"
    );
    assert!(js.contains("This member is not the leader"));
    let ids = ids_looked_up(&js);
    for id in [
        "members-panel",
        "members-self",
        "not-leader",
        "members-lag-note",
        "members-link",
    ] {
        assert!(ids.contains(&id), "the script does not use #{id}");
    }
    for id in ids {
        assert!(
            html.contains(&format!(r#"id="{id}""#)),
            "the script looks up #{id}, which the page lacks"
        );
    }
    let (_, css) = served(super::style_css().await).await;
    assert!(
        css.contains("body.standby .coord"),
        "a follower hides the job panels"
    );
}
