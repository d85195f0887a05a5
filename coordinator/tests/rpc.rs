//! The coordinator's gRPC services driven on loopback through `sweep-client` and a scripted worker: garbled and
//! hostile requests are refused with a clear status, never a panic, and never cost stored progress.

use sweep_space::ChunkId;
use sweep_testkit as common;

use std::time::Duration;

use common::{config, fresh_store, report, submit_job, submit_req, FakeWorker, Server};
use sweep_coordinator::store::Store;
use sweep_proto::v1;

/// A coordinator on `store` with this file's configuration: long leases, two attempts per chunk.
async fn start(store: Store) -> Server {
    Server::start(store, config(60_000, 2)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_and_progress_survives() {
    let (_dir, path, store) = fresh_store();
    let server = start(store).await;
    let mut jobs = server.client().await;

    // Submissions that make no sense.
    for (req, needle) in [
        (submit_req("nope", "{}", 0), "unknown search space"),
        (submit_req("star", "{not json", 0), "not JSON"),
        (
            submit_req("star", r#"{"points": 3, "method": "brute"}"#, 0),
            "points",
        ),
        (
            submit_req("star", r#"{"points": 6, "method": "brute", "x": 1}"#, 0),
            "x",
        ),
        (
            submit_req("star", r#"{"points": 6, "method": "brute"}"#, u64::MAX),
            "chunks",
        ),
    ] {
        let err = jobs.submit(req).await.unwrap_err();
        let status = err.status().expect("the coordinator's answer");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }

    let job = submit_job(
        &mut jobs,
        "star",
        r#"{"points": 7, "method": "backtrack"}"#,
        4,
    )
    .await;
    let mut worker = FakeWorker::register(server.work_as(None), "probe", &common::spaces())
        .await
        .unwrap();
    for bad in [0, 1_000_000] {
        let err = worker.lease(bad).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
    let leases = worker.lease(4).await.unwrap();
    assert_eq!(leases.len(), 4);

    // One honest result, computed by the real kernel.
    let star = common::spaces()
        .job_from_params(
            "star",
            &serde_json::from_str(&leases[0].params_json).unwrap(),
        )
        .unwrap();
    let honest = star
        .run_chunk(
            ChunkId::new(job.chunks_total, leases[0].chunk),
            &sweep_space::Control::new(),
        )
        .unwrap();
    // Garbled and lying reports for the other chunks. (A lie the verifier cannot see, such as an inflated count
    // with the right solutions, needs the result replicated on another worker: that is not tested here.)
    let mut garbled = v1::ChunkOutput::default();
    garbled.counters.insert("solutions".into(), "lots".into());
    let mut lie = v1::ChunkOutput::from(&honest);
    lie.solutions.push("1,2,3".into());
    let mut wrong_chunk = report(&leases[3], v1::ChunkOutput::default());
    wrong_chunk.chunk = 99;
    let acks = worker
        .complete(vec![
            report(&leases[0], v1::ChunkOutput::from(&honest)),
            report(&leases[1], garbled),
            report(&leases[2], lie),
            wrong_chunk,
            v1::ChunkReport {
                output: None,
                ..report(&leases[3], v1::ChunkOutput::default())
            },
        ])
        .await
        .unwrap();
    let status: Vec<i32> = acks.iter().map(|a| a.status).collect();
    let accepted = v1::AckStatus::Accepted as i32;
    let rejected = v1::AckStatus::Rejected as i32;
    assert_eq!(
        status,
        vec![accepted, rejected, rejected, rejected, rejected],
        "{acks:?}"
    );
    assert!(acks[1].message.contains("solutions"), "{}", acks[1].message);
    // The same honest result again is a duplicate, not a second count.
    let again = worker
        .complete_one(&leases[0], v1::ChunkOutput::from(&honest))
        .await
        .unwrap();
    assert_eq!(again.status(), v1::AckStatus::Duplicate);
    let info = jobs.job_status(job.id).await.unwrap();
    assert_eq!(
        (info.chunks_done, info.completions, info.duplicates),
        (1, 1, 1)
    );
    server.stop().await;

    // A restart on the same store still has the one accepted result, and only it.
    let server = start(Store::open(&path).unwrap()).await;
    let mut jobs = server.client().await;
    let info = jobs.job_status(job.id).await.unwrap();
    assert_eq!((info.chunks_done, info.completions), (1, 1));
    assert_eq!(info.nodes, honest.nodes.to_string());
    let err = jobs.job_status(77).await.unwrap_err();
    assert_eq!(err.status().map(|s| s.code()), Some(tonic::Code::NotFound));
    server.stop().await;
}

/// A store whose writes take a while, so that a test can act between a result being staged and it being
/// durable.
struct SlowKv {
    inner: sweep_coordinator::store::MemKv,
    delay: Duration,
}

impl sweep_coordinator::store::Kv for SlowKv {
    fn apply(
        &self,
        writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<(), sweep_coordinator::store::StoreError> {
        std::thread::sleep(self.delay);
        self.inner.apply(writes)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, sweep_coordinator::store::StoreError> {
        self.inner.get(key)
    }
    fn scan(
        &self,
        prefix: &[u8],
    ) -> Result<sweep_coordinator::store::Pairs, sweep_coordinator::store::StoreError> {
        self.inner.scan(prefix)
    }
}

/// Regression: a job is `done` in memory as soon as its last result is staged. `Results` asked in that window
/// read the store before the result was written, missed it, and cached the short answer for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_wait_for_the_last_result_to_be_durable() {
    let store = Store::new(Box::new(SlowKv {
        inner: Default::default(),
        delay: Duration::from_millis(300),
    }));
    let server = start(store).await;
    let mut jobs = server.client().await;
    let job = submit_job(&mut jobs, "star", r#"{"points": 6, "method": "brute"}"#, 1).await;
    let mut worker = FakeWorker::register(server.work_as(None), "", &common::spaces())
        .await
        .unwrap();
    let lease = worker.lease(1).await.unwrap().remove(0);
    let out = common::run_lease(&lease);
    let completing = tokio::spawn(async move { worker.complete_one(&lease, out).await });
    // Wait until the job shows as done in memory while the write is still under way: the Watch stream reports
    // progress as it happens (status answers wait for the store).
    let mut watch = jobs.watch(job.id, 50).await.unwrap();
    while let Some(ev) = watch.next().await.unwrap() {
        if ev.jobs.iter().any(|j| j.state().label() == "done") {
            break;
        }
    }
    drop(watch);
    let res = jobs.results(job.id, v1::AnswerForm::Both).await.unwrap();
    let result: serde_json::Value = serde_json::from_str(&res.result_json).unwrap();
    assert_eq!(result["solutions"], 960, "{result}");
    assert_eq!(result["unique"], 80, "{result}");
    assert!(!res.result_text.is_empty(), "both forms by default");
    // Each form alone when asked; a form this coordinator does not know gets both. Raw: no client sends an
    // unknown form.
    let mut raw = v1::jobs_client::JobsClient::new(server.channel().await);
    let (json_only, text_only) = (v1::AnswerForm::Json as i32, v1::AnswerForm::Text as i32);
    for (form, json, text) in [
        (json_only, true, false),
        (text_only, false, true),
        (7, true, true),
    ] {
        let one = raw
            .results(v1::ResultsRequest {
                job_id: job.id,
                form,
            })
            .await
            .unwrap()
            .into_inner();
        let sent =
            |got: &str, whole: &str, want: bool| if want { got == whole } else { got.is_empty() };
        assert!(
            sent(&one.result_json, &res.result_json, json),
            "form {form}: JSON"
        );
        assert!(
            sent(&one.result_text, &res.result_text, text),
            "form {form}: text"
        );
        assert_eq!(one.job.map(|j| j.id), Some(job.id), "form {form}");
    }
    completing.await.unwrap().unwrap();
    server.stop().await;
}
