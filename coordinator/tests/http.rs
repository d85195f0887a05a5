//! The dashboard's JSON API and `/metrics` of an in-process coordinator on loopback, read while a job is half
//! done (chunks done, leased, failed verification, a duplicate) and checked against the coordinator's own
//! `JobStatus` answer, then again once the job has finished (its rendered answer).

use sweep_space::ChunkId;
use sweep_testkit as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{config, fresh_store, report, FakeWorker, Server};
use sweep_proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The HTTP side of a [`Server`] started with its page (`Server::start_with(.., true)`).
trait Page {
    async fn get(&self, path: &str) -> (u16, String, String);
    async fn json(&self, path: &str) -> serde_json::Value;
    async fn metrics(&self) -> BTreeMap<(String, String), f64>;
}

impl Page for Server {
    /// A plain HTTP/1.1 GET: (status, content type, body).
    async fn get(&self, path: &str) -> (u16, String, String) {
        let mut conn = tokio::net::TcpStream::connect(self.http.expect("started with HTTP"))
            .await
            .unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut raw))
            .await
            .expect("answer within 10 s")
            .unwrap();
        let text = String::from_utf8(raw).expect("UTF-8 answer");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        (status, content_type, body.to_string())
    }

    async fn json(&self, path: &str) -> serde_json::Value {
        let (status, ty, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(ty.starts_with("application/json"), "{path}: {ty}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"))
    }

    /// `/metrics` as (name, sorted labels) -> value, with the `# EOF` the format ends with checked.
    async fn metrics(&self) -> BTreeMap<(String, String), f64> {
        let (status, ty, body) = self.get("/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert!(ty.starts_with("application/openmetrics-text"), "{ty}");
        assert_eq!(body.lines().last(), Some("# EOF"));
        let mut out = BTreeMap::new();
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("name and value");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => {
                    let mut pairs: Vec<&str> = l.trim_end_matches('}').split(',').collect();
                    pairs.sort();
                    (n.to_string(), pairs.join(","))
                }
                None => (series.to_string(), String::new()),
            };
            let value: f64 = value.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            out.insert((name, labels), value);
        }
        out
    }
}

fn metric(m: &BTreeMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    *m.get(&(name.to_string(), labels.to_string()))
        .unwrap_or_else(|| panic!("no {name}{{{labels}}} in {m:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_state_and_metrics_match_the_job() {
    let (_dir, _, store) = fresh_store();
    let server = Server::start_with(store, config(60_000, 3), Default::default(), true).await;
    let work = server.work_as(None);
    let mut jobs = server.client().await;

    // Before any job: an empty but well-formed state, and the page itself.
    let empty = server.json("/api/state").await;
    assert_eq!(empty["jobs"].as_array().map(Vec::len), Some(0));
    let (status, ty, page) = server.get("/").await;
    assert_eq!(status, 200);
    assert!(ty.starts_with("text/html"), "{ty}");
    assert!(page.contains("<title>sweep coordinator</title>"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no external loads"
    );
    let (status, ty, _) = server.get("/app.js").await;
    assert_eq!((status, ty.starts_with("text/javascript")), (200, true));
    assert_eq!(server.get("/nope").await.0, 404);
    assert_eq!(server.get("/api/jobs/99/result").await.0, 404);

    let job = jobs
        .submit(v1::SubmitRequest {
            space: "star".into(),
            params_json: r#"{"points": 7, "method": "backtrack"}"#.into(),
            chunks: 4,
            ..Default::default()
        })
        .await
        .unwrap()
        .job
        .unwrap();
    let registration = |name: &str, threads| v1::RegisterRequest {
        name: name.into(),
        threads,
        spaces: common::space_names(&common::spaces()),
        ..Default::default()
    };
    let mut worker = FakeWorker::register_as(work.clone(), registration("w0", 2))
        .await
        .unwrap();
    let leases = worker.lease(3).await.unwrap();
    assert_eq!(leases.len(), 3);
    worker
        .heartbeat(vec![v1::LeaseProgress {
            lease_id: leases[2].lease_id,
            nodes: 123,
            checkpoint: None,
            generation: 0,
        }])
        .await
        .unwrap();

    let star = common::spaces()
        .job_from_params(
            "star",
            &serde_json::from_str(&leases[0].params_json).unwrap(),
        )
        .unwrap();
    let run = |chunk| {
        star.run_chunk(
            ChunkId::new(job.chunks_total, chunk),
            &sweep_space::Control::new(),
        )
        .unwrap()
    };
    let honest = run(leases[0].chunk);
    let mut lie = v1::ChunkOutput::from(&run(leases[1].chunk));
    lie.solutions.push("1,2,3".into());
    let acks = worker
        .complete(vec![
            report(&leases[0], v1::ChunkOutput::from(&honest)),
            report(&leases[1], lie),
        ])
        .await
        .unwrap();
    assert_eq!(acks[0].status, v1::AckStatus::Accepted as i32);
    assert_eq!(acks[1].status, v1::AckStatus::Rejected as i32);
    let again = worker
        .complete_one(&leases[0], v1::ChunkOutput::from(&honest))
        .await
        .unwrap();
    assert_eq!(again.status(), v1::AckStatus::Duplicate);
    // A refused call, for the error counter.
    let err = jobs.job_status(42).await.unwrap_err();
    assert_eq!(err.status().map(|s| s.code()), Some(tonic::Code::NotFound));

    // The dashboard's state says what JobStatus says.
    let info = jobs.job_status(job.id).await.unwrap();
    assert_eq!((info.chunks_done, info.chunks_leased), (1, 1));
    let state = server.json("/api/state").await;
    let j = &state["jobs"][0];
    assert_eq!(j["id"], info.id);
    assert_eq!(j["space"], "star");
    assert_eq!(j["state"], info.state().label());
    assert_eq!(j["chunks_total"], info.chunks_total);
    assert_eq!(j["chunks_done"], info.chunks_done);
    assert_eq!(j["chunks_leased"], info.chunks_leased);
    assert_eq!(j["chunks_poisoned"], info.chunks_poisoned);
    assert_eq!(
        j["chunks_pending"],
        info.chunks_total - info.chunks_done - info.chunks_leased - info.chunks_poisoned
    );
    assert_eq!(j["nodes"], info.nodes.as_str());
    assert_eq!(j["nodes"], honest.nodes.to_string().as_str());
    assert_eq!(j["running_nodes"], 123);
    assert_eq!(j["duplicates"], info.duplicates);
    assert_eq!(state["chunks"]["done"], 1);
    assert_eq!(state["chunks"]["pending"], 2);
    let w = &state["workers"][0];
    assert_eq!(w["name"], "w0");
    assert_eq!(w["threads"], 2);
    assert_eq!(w["leases"], 1);
    assert_eq!(w["chunks_done"], 1);
    assert_eq!(w["live"], true);
    assert_eq!(state["live_workers"], 1);
    let c = &state["counters"];
    assert_eq!(
        (
            &c["completions"],
            &c["duplicates"],
            &c["rejected"],
            &c["verification_failures"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1)
        )
    );

    // /metrics says the same.
    let m = server.metrics().await;
    let job_labels = |state: &str| format!("job=\"{}\",space=\"star\",state=\"{state}\"", job.id);
    assert_eq!(metric(&m, "sweep_job_chunks", &job_labels("done")), 1.0);
    assert_eq!(metric(&m, "sweep_job_chunks", &job_labels("leased")), 1.0);
    assert_eq!(metric(&m, "sweep_job_chunks", &job_labels("pending")), 2.0);
    assert_eq!(metric(&m, "sweep_chunks", "state=\"done\""), 1.0);
    assert_eq!(
        metric(
            &m,
            "sweep_job_nodes_total",
            &format!("job=\"{}\",space=\"star\"", job.id)
        ),
        honest.nodes as f64
    );
    assert_eq!(metric(&m, "sweep_completions_total", ""), 1.0);
    assert_eq!(metric(&m, "sweep_duplicates_total", ""), 1.0);
    assert_eq!(metric(&m, "sweep_verification_failures_total", ""), 1.0);
    assert_eq!(metric(&m, "sweep_jobs", "state=\"running\""), 1.0);
    assert_eq!(metric(&m, "sweep_workers", "state=\"live\""), 1.0);
    assert_eq!(metric(&m, "sweep_worker_threads", ""), 2.0);
    assert_eq!(
        metric(
            &m,
            "sweep_rpc_duration_seconds_count",
            "method=\"Work/Complete\""
        ),
        2.0
    );
    assert_eq!(
        metric(
            &m,
            "sweep_rpc_duration_seconds_count",
            "method=\"Work/Lease\""
        ),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "sweep_rpc_errors_total",
            "code=\"NOT_FOUND\",method=\"Jobs/JobStatus\""
        ),
        1.0
    );

    // Not finished: no answer yet.
    assert_eq!(
        server.get(&format!("/api/jobs/{}/result", job.id)).await.0,
        409
    );

    // Finish the job honestly; the page then shows its answer. A second worker takes the chunk whose result
    // failed verification: the scheduler does not hand it back to the worker that got it wrong.
    let mut second = FakeWorker::register_as(work, registration("w1", 1))
        .await
        .unwrap();
    let rest = second.lease(4).await.unwrap();
    let reports: Vec<v1::ChunkReport> = rest
        .iter()
        .map(|l| report(l, v1::ChunkOutput::from(&run(l.chunk))))
        .collect();
    let acks = second.complete(reports).await.unwrap();
    assert!(
        acks.iter()
            .all(|a| a.status == v1::AckStatus::Accepted as i32),
        "{acks:?}"
    );
    let acks = worker
        .complete(vec![report(
            &leases[2],
            v1::ChunkOutput::from(&run(leases[2].chunk)),
        )])
        .await
        .unwrap();
    assert!(
        acks.iter()
            .all(|a| a.status == v1::AckStatus::Accepted as i32),
        "{acks:?}"
    );
    let state = server.json("/api/state").await;
    assert_eq!(state["jobs"][0]["chunks_done"], 4, "{state}");
    assert_eq!(state["workers"].as_array().map(Vec::len), Some(2));
    assert_eq!(state["jobs"][0]["state"], "done");
    assert_eq!(state["jobs"][0]["chunks_done"], 4);
    let result = server.json(&format!("/api/jobs/{}/result", job.id)).await;
    let text = result["text"].as_str().unwrap();
    assert!(text.contains("1008 solutions, 72 unique"), "{text}");
    assert_eq!(result["pictures_total"], 0);
    assert_eq!(
        server
            .get(&format!("/api/jobs/{}/pictures/0", job.id))
            .await
            .0,
        404
    );
    // Samples since the future: none.
    let later = server.json("/api/state?since=99999999999999").await;
    assert_eq!(later["samples"].as_array().map(Vec::len), Some(0));

    server.stop().await;
}
