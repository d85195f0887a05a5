//! Jobs with several inputs and input DAGs of several levels, through a real coordinator on loopback.
//!
//! The jobs come from a test space of this file (a hand-written `Space` in the coordinator's registry), whose graph is a table: a
//! diamond (d reads b, c and a; b and c read a), a job whose chunks produce no artifact read by another, a
//! cycle, an unbounded chain and an input with bad parameters. A hand-written worker leases, fetches every input
//! artifact (checking its digest), binds, runs and reports; the coordinator is restarted in the middle. The
//! answer must equal the one computed in this process from the same DAG, with every chunk counted once.
use sweep_testkit as common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{fresh_store, result_json, FakeWorker, Server};
use sweep_client::Client as Jobs;
use sweep_coordinator::store::Store;
use sweep_coordinator::CoordinatorConfig;
use sweep_engine::inputs;
use sweep_proto::v1;
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, JobInput, Plan, SpaceError};
use sweep_space::{Registry, Space, SpaceJob};

/// name -> (inputs, chunks). Names missing here fail to build, like bad parameters.
fn graph(name: &str) -> Option<(Vec<String>, u64)> {
    let table: &[(&str, &[&str], u64)] = &[
        ("a", &[], 3),
        ("b", &["a"], 2),
        ("c", &["a"], 4),
        ("d", &["b", "c", "a"], 3),
        // Its chunks produce no artifact: its reader still gets one (empty).
        ("quiet", &[], 2),
        ("e", &["d", "quiet"], 5),
        ("loop1", &["loop2"], 1),
        ("loop2", &["loop1"], 1),
    ];
    if let Some(n) = name.strip_prefix("grow") {
        let n: u64 = n.parse().ok()?;
        return Some((vec![format!("grow{}", n + 1)], 1));
    }
    table
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, i, c)| (i.iter().map(|s| s.to_string()).collect(), *c))
}

#[derive(Debug)]
struct DagJob {
    name: String,
    inputs: Vec<String>,
    chunks: u64,
    /// The input artifacts, once bound.
    bound: Option<Vec<Vec<u8>>>,
}

fn build(space: &str, params: &serde_json::Value) -> Result<SpaceJob, SpaceError> {
    if space == "broken" {
        // Reads a job whose parameters are ill-typed.
        let job = DagJob {
            name: "broken".into(),
            inputs: vec!["a".into(), "5".into()],
            chunks: 1,
            bound: None,
        };
        return Ok(SpaceJob::new("broken", params.clone(), Arc::new(job)));
    }
    if space != "dag" {
        return common::spaces().job_from_params(space, params);
    }
    let name =
        params
            .get("node")
            .and_then(|n| n.as_str())
            .ok_or_else(|| SpaceError::BadParams {
                space: "dag",
                reason: format!("node: expected a string, got {params}"),
            })?;
    let (inputs, chunks) = graph(name).ok_or_else(|| SpaceError::BadParams {
        space: "dag",
        reason: format!("no node `{name}`"),
    })?;
    let job = DagJob {
        name: name.to_string(),
        inputs,
        chunks,
        bound: None,
    };
    Ok(SpaceJob::new("dag", params.clone(), Arc::new(job)))
}

fn params(node: &str) -> serde_json::Value {
    serde_json::json!({ "node": node })
}

impl Job for DagJob {
    fn space(&self) -> &'static str {
        "dag"
    }
    fn params(&self) -> serde_json::Value {
        params(&self.name)
    }
    fn plan(&self, _: Option<u64>) -> Result<Plan, SpaceError> {
        Ok(Plan {
            n_chunks: self.chunks,
            total_nodes: None,
        })
    }
    fn run_chunk(&self, at: ChunkId, _: &Control) -> Result<ChunkOutput, SpaceError> {
        let bound: &[Vec<u8>] = match &self.bound {
            Some(b) => b,
            None if self.inputs.is_empty() => &[],
            None => {
                return Err(SpaceError::BadParams {
                    space: "dag",
                    reason: "run before its inputs were bound".into(),
                })
            }
        };
        let mut out = ChunkOutput {
            nodes: 1,
            ..Default::default()
        };
        out.count("input_bytes", bound.iter().map(|a| a.len() as u128).sum());
        if self.name != "quiet" {
            // Depends on every input's bytes, in order: a wrong or reordered input changes the answer.
            let mut h = blake3::Hasher::new();
            h.update(self.name.as_bytes());
            for a in bound {
                h.update(&(a.len() as u64).to_le_bytes());
                h.update(a);
            }
            h.update(&at.n_chunks.to_le_bytes());
            h.update(&at.chunk.to_le_bytes());
            out.artifact = h.finalize().as_bytes()[..8].to_vec();
        }
        Ok(out)
    }
    fn verify(&self, _at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        let want = if self.name == "quiet" { 0 } else { 8 };
        if out.artifact.len() != want {
            return Err(SpaceError::Verification(
                "artifact of the wrong size".into(),
            ));
        }
        Ok(())
    }
    fn merge_artifacts(
        &self,
        artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        Ok(artifacts.flatten().copied().collect())
    }
    fn result(&self, answer: &Answer) -> serde_json::Value {
        serde_json::json!({
            "artifact": blake3::hash(&answer.artifact).to_hex().to_string(),
            "input_bytes": answer.tally.counter("input_bytes").to_string(),
            "chunks": answer.tally.chunks,
        })
    }
    fn render_text(&self, result: &serde_json::Value) -> String {
        result.to_string()
    }
    fn inputs(&self) -> Vec<JobInput> {
        self.inputs
            .iter()
            .map(|n| JobInput {
                space: "dag".into(),
                params: if n == "5" {
                    serde_json::json!({ "node": 5 })
                } else {
                    params(n)
                },
            })
            .collect()
    }
    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        if artifacts.len() != self.inputs.len() {
            return Err(SpaceError::BadParams {
                space: "dag",
                reason: format!(
                    "{} artifacts for {} inputs",
                    artifacts.len(),
                    self.inputs.len()
                ),
            });
        }
        Ok(Arc::new(DagJob {
            name: self.name.clone(),
            inputs: self.inputs.clone(),
            chunks: self.chunks,
            bound: Some(artifacts.iter().map(|a| a.to_vec()).collect()),
        }))
    }
}

/// The answer `sweep solve` would give: the DAG run in this process, inputs first.
fn solve_here(root: &str) -> serde_json::Value {
    let dag = inputs::resolve(build("dag", &params(root)).unwrap(), &build).unwrap();
    let mut artifacts: Vec<Vec<u8>> = Vec::new();
    let mut last = serde_json::Value::Null;
    for node in dag {
        let views: Vec<&[u8]> = node
            .inputs
            .iter()
            .map(|&k| artifacts[k].as_slice())
            .collect();
        let job = if views.is_empty() {
            node.job
        } else {
            node.job.bind_inputs(&views).unwrap()
        };
        let n = job.plan(None).unwrap().n_chunks;
        let outputs: Vec<ChunkOutput> = (0..n)
            .map(|c| job.run_chunk(ChunkId::new(n, c), &Control::new()).unwrap())
            .collect();
        let mut answer = Answer::from_outputs(&outputs);
        let mut it = outputs.iter().map(|o| o.artifact.as_slice());
        answer.artifact = job.merge_artifacts(&mut it).unwrap();
        last = job.result(&answer);
        artifacts.push(answer.artifact);
    }
    last
}

/// The test spaces, beside the built-in ones: `dag` (the graph above) and `broken` (reads ill-typed params).
struct DagSpace(&'static str);

impl Space for DagSpace {
    fn name(&self) -> &'static str {
        self.0
    }
    fn about(&self) -> &'static str {
        "a table of jobs and their inputs, for tests"
    }
    fn parse_args(&self, _: &[String]) -> Result<SpaceJob, SpaceError> {
        Err(SpaceError::Help("built from parameters only".into()))
    }
    fn parse_params(&self, params: &serde_json::Value) -> Result<SpaceJob, SpaceError> {
        build(self.0, params)
    }
}

fn registry() -> Registry {
    common::spaces()
        .with_space(Arc::new(DagSpace("dag")))
        .with_space(Arc::new(DagSpace("broken")))
}

/// The coordinator configuration this file's tests run with.
fn config() -> CoordinatorConfig {
    CoordinatorConfig {
        registry: registry(),
        ..common::config(60_000, 3)
    }
}

/// A coordinator on `store`, a client of it and a worker (`registered` or not yet): what every test here
/// drives.
async fn start(store: Store, registered: bool) -> (Server, Jobs, FakeWorker) {
    let server = Server::start(store, config()).await;
    let jobs = server.client().await;
    let work = worker(&server, registered).await;
    (server, jobs, work)
}

fn submit(node: &str, reuse: bool) -> v1::SubmitRequest {
    v1::SubmitRequest {
        space: "dag".into(),
        params_json: params(node).to_string(),
        chunks: 0,
        priority: 0,
        reuse_existing: reuse,
        replicate: 0,
        count_only: false,
        max_attempts: None,
        share: None,
        chunk_time_hint_ms: None,
    }
}

async fn all_jobs(jobs: &mut Jobs) -> BTreeMap<String, v1::JobInfo> {
    jobs.list_jobs()
        .await
        .unwrap()
        .jobs
        .into_iter()
        .map(|j| {
            let p: serde_json::Value = serde_json::from_str(&j.params_json).unwrap();
            (p["node"].as_str().unwrap_or_default().to_string(), j)
        })
        .collect()
}

async fn fetch(w: &mut FakeWorker, job: u64, digest: &str) -> Vec<u8> {
    let mut stream = w
        .work
        .fetch_artifact(v1::FetchArtifactRequest {
            worker_id: w.id.clone(),
            job_id: job,
            digest: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(piece) = stream.message().await.unwrap() {
        assert_eq!(piece.digest, digest);
        bytes.extend_from_slice(&piece.data);
    }
    assert_eq!(blake3::hash(&bytes).to_hex().as_str(), digest);
    bytes
}

/// Leases up to `max` chunks at a time, runs and reports them until the job of node `name` is done (at most
/// 500 rounds, pausing 20 ms whenever nothing was offered).
async fn run_until_done(work: &mut FakeWorker, jobs: &mut Jobs, name: &str, max: u32) {
    for _ in 0..500 {
        let reports = lease_and_run(work, jobs, max).await;
        if reports.is_empty() {
            if all_jobs(jobs).await[name].state().label() == "done" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        report(work, reports).await;
    }
    panic!("job {name} did not finish");
}

/// Leases up to `max` chunks, checks that every input of their jobs is done with the digest the lease names, and
/// runs them; returns the reports without sending them.
async fn lease_and_run(w: &mut FakeWorker, jobs: &mut Jobs, max: u32) -> Vec<v1::ChunkReport> {
    let mut resp = w.lease_response(max).await.unwrap();
    if resp.register_again {
        // A coordinator that has not heard which spaces "w" runs (new, or restarted) asks, as a worker does.
        w.register_again().await.unwrap();
        resp = w.lease_response(max).await.unwrap();
        assert!(!resp.register_again);
    }
    let leases = resp.leases;
    let mut reports = Vec::new();
    for l in leases {
        let params: serde_json::Value = serde_json::from_str(&l.params_json).unwrap();
        let mut job = build(&l.space, &params).unwrap();
        assert_eq!(l.inputs.len(), job.inputs().len(), "job {}", l.job_id);
        if l.inputs.len() == 1 {
            assert_eq!(
                (l.input_job, l.input_digest.as_str()),
                (l.inputs[0].job_id, l.inputs[0].digest.as_str())
            );
        } else {
            assert_eq!(l.input_job, 0, "older workers would bind only one input");
        }
        let mut artifacts = Vec::new();
        for (input, want) in l.inputs.iter().zip(job.inputs()) {
            let info = jobs.job_status(input.job_id).await.unwrap();
            assert_eq!(
                info.state().label(),
                "done",
                "job {} leased before its inputs",
                l.job_id
            );
            assert_eq!(info.artifact_digest, input.digest);
            assert_eq!(info.params_json, want.params.to_string());
            artifacts.push(fetch(w, input.job_id, &input.digest).await);
        }
        if !artifacts.is_empty() {
            let views: Vec<&[u8]> = artifacts.iter().map(|a| a.as_slice()).collect();
            job = job.bind_inputs(&views).unwrap();
        }
        let out = job
            .run_chunk(ChunkId::new(l.n_chunks, l.chunk), &Control::new())
            .unwrap();
        reports.push(common::report(&l, (&out).into()));
    }
    reports
}

/// The fake worker of these tests, "w", on `server`: registered, or (`registered == false`) not yet, as after
/// a coordinator restart.
async fn worker(server: &Server, registered: bool) -> FakeWorker {
    let registration = v1::RegisterRequest {
        name: "w".into(),
        threads: 1,
        spaces: common::space_names(&registry()),
        ..Default::default()
    };
    let work = server.work_as(None);
    if registered {
        FakeWorker::register_as(work, registration).await.unwrap()
    } else {
        FakeWorker::unregistered(work, "w", registration)
    }
}

/// Sends `reports` (if any); every one must be accepted.
/// Stops the coordinator once its client and worker are gone: their open connections would hold the
/// server's graceful shutdown.
async fn stop(server: Server, jobs: Jobs, work: FakeWorker) {
    drop((work, jobs));
    server.stop().await;
}

/// Job `job`'s answer, which must be the answer of job `e` solved here in one process.
async fn answer_of_e(jobs: &mut Jobs, job: u64) -> serde_json::Value {
    let got = result_json(jobs, job).await;
    assert_eq!(got, solve_here("e"));
    got
}

async fn report(w: &mut FakeWorker, reports: Vec<v1::ChunkReport>) {
    if reports.is_empty() {
        return;
    }
    for a in w.complete(reports).await.unwrap() {
        assert_eq!(a.status(), v1::AckStatus::Accepted, "{}", a.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_submitted_once_runs_inputs_first_and_survives_a_restart() {
    let (_dir, path, store) = fresh_store();
    let (server, mut jobs, mut work) = start(store, true).await;

    // One submit creates the whole DAG, each job once, inputs before their readers.
    let top = jobs.submit(submit("e", true)).await.unwrap();
    assert!(!top.existing);
    let all = all_jobs(&mut jobs).await;
    assert_eq!(
        all.keys().collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e", "quiet"]
    );
    let id = |n: &str| all[n].id;
    let top = top.job.unwrap();
    assert_eq!(top.id, id("e"));
    assert_eq!(top.input_jobs, [id("d"), id("quiet")]);
    assert_eq!(top.input_job, id("d"));
    assert_eq!(top.inputs_waiting, 2);
    assert_eq!(all["d"].input_jobs, [id("b"), id("c"), id("a")]);
    assert_eq!(all["d"].inputs_waiting, 3);
    assert_eq!(all["b"].input_jobs, [id("a")]);
    assert!(all["a"].input_jobs.is_empty());
    for (name, j) in &all {
        assert!(j.input_jobs.iter().all(|&i| i < j.id), "{name}");
    }

    // Submitting again (or a job inside the DAG) finds what exists.
    let again = jobs.submit(submit("e", true)).await.unwrap();
    assert!(again.existing);
    assert_eq!(again.job.unwrap().id, id("e"));
    let inner = jobs.submit(submit("d", true)).await.unwrap();
    assert!(inner.existing);
    assert_eq!(inner.job.unwrap().id, id("d"));

    // DAGs that cannot run are refused, naming why, and create nothing.
    for (req, needles) in [
        (
            submit("loop1", true),
            vec![
                "cycle",
                r#"dag {"node":"loop1"} -> dag {"node":"loop2"} -> dag {"node":"loop1"}"#,
            ],
        ),
        (submit("grow0", true), vec!["more than 4096 jobs"]),
        (
            v1::SubmitRequest {
                space: "broken".into(),
                params_json: "{}".into(),
                ..submit("a", true)
            },
            vec!["input 1", "node: expected a string"],
        ),
    ] {
        let err = jobs.submit(req).await.unwrap_err();
        let status = err.status().expect("the coordinator's answer");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{err:?}");
        for n in needles {
            assert!(status.message().contains(n), "{n}: {}", status.message());
        }
    }
    assert_eq!(all_jobs(&mut jobs).await.len(), 6);

    // Run until b is done and merged while two of c's chunks are leased but unreported, and restart the
    // coordinator on the same store.
    let mut held = Vec::new();
    for _ in 0..300 {
        let now = all_jobs(&mut jobs).await;
        let b_merged = now["b"].state().label() == "done" && now["b"].artifact_digest.len() == 64;
        if held.len() >= 2 {
            if b_merged {
                break;
            }
            // b's merge may take a while on a loaded machine; every lease meanwhile would be one of c's.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        // A lease hands out b's chunks first while there are any, but c's and quiet's become leasable as soon
        // as their inputs are done, and fair sharing between jobs may pick either: c's are held, the rest
        // reported.
        let (of_c, reports): (Vec<_>, Vec<_>) = lease_and_run(&mut work, &mut jobs, 1)
            .await
            .into_iter()
            .partition(|r| r.job_id == id("c"));
        held.extend(of_c);
        if reports.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        report(&mut work, reports).await;
    }
    assert_eq!(
        held.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        [id("c"), id("c")]
    );
    stop(server, jobs, work).await;

    let (server, mut jobs, mut work) = start(Store::open(&path).unwrap(), false).await;
    let restored = all_jobs(&mut jobs).await;
    assert_eq!(restored["d"].input_jobs, [id("b"), id("c"), id("a")]);
    assert_eq!(
        restored["d"].inputs_waiting, 1,
        "a and b are done and merged, c is not"
    );
    // d is not done; quiet (no inputs) may have run while a was being merged, and then has its empty artifact.
    let quiet_ready = !restored["quiet"].artifact_digest.is_empty();
    assert_eq!(
        restored["e"].inputs_waiting,
        if quiet_ready { 1 } else { 2 }
    );
    // The leases held across the restart still count (late results are accepted once).
    report(&mut work, held).await;
    run_until_done(&mut work, &mut jobs, "e", 3).await;
    let done = all_jobs(&mut jobs).await;
    for (name, j) in &done {
        assert_eq!(j.state().label(), "done", "{name}");
        assert_eq!(
            j.completions, j.chunks_total,
            "{name}: every chunk counted once"
        );
        assert_eq!(j.duplicates, 0, "{name}");
        assert_eq!(j.inputs_waiting, 0, "{name}");
    }
    // The quiet job's artifact is empty but stored, because e reads it.
    assert_eq!(
        done["quiet"].artifact_digest,
        blake3::hash(b"").to_hex().to_string()
    );
    let got = answer_of_e(&mut jobs, id("e")).await;
    // Each of e's 5 chunks read d's artifact (3 chunks of 8 bytes) and quiet's (empty).
    assert_eq!(got["input_bytes"], (5 * 3 * 8).to_string());
    stop(server, jobs, work).await;
}

/// A job whose chunks produce no artifact, already done when a reader is submitted, gets its (empty) artifact
/// then: the reader does not wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_submitted_after_its_artifactless_input_finished_still_runs() {
    let (server, mut jobs, mut work) = start(Store::in_memory(), false).await;
    jobs.submit(submit("quiet", true)).await.unwrap();
    for _ in 0..100 {
        let reports = lease_and_run(&mut work, &mut jobs, 4).await;
        if reports.is_empty() {
            break;
        }
        report(&mut work, reports).await;
    }
    // Done, and nobody reads it yet: no artifact stored.
    let quiet = all_jobs(&mut jobs).await["quiet"].clone();
    assert_eq!(quiet.state().label(), "done");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(all_jobs(&mut jobs).await["quiet"].artifact_digest, "");
    let e = jobs.submit(submit("e", true)).await.unwrap().job.unwrap();
    assert_eq!(e.input_jobs[1], quiet.id, "the finished job is reused");
    run_until_done(&mut work, &mut jobs, "e", 4).await;
    answer_of_e(&mut jobs, e.id).await;
    stop(server, jobs, work).await;
}

/// A cancelled input takes its readers with it, transitively (they could never run), and leaves the rest of
/// the DAG alone; submitted again, the top job gets new jobs for what must run again and reuses the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_a_cancelled_input_end_with_it_and_a_new_submit_runs_them_again() {
    let (server, mut jobs, mut work) = start(Store::in_memory(), false).await;
    jobs.submit(submit("e", true)).await.unwrap();
    let before = all_jobs(&mut jobs).await;
    jobs.cancel(before["b"].id).await.unwrap();
    let after = all_jobs(&mut jobs).await;
    for (name, state) in [
        ("a", "running"),
        ("b", "cancelled"),
        ("c", "running"),
        ("d", "cancelled"),
        ("quiet", "running"),
        ("e", "cancelled"),
    ] {
        assert_eq!(after[name].state().label(), state, "{name}");
    }
    let again = jobs.submit(submit("e", true)).await.unwrap();
    assert!(!again.existing, "a cancelled job is not reused");
    let now = all_jobs(&mut jobs).await;
    for name in ["a", "c", "quiet"] {
        assert_eq!(now[name].id, before[name].id, "{name} is reused");
    }
    for name in ["b", "d", "e"] {
        assert!(now[name].id > before["e"].id, "{name} is created again");
    }
    run_until_done(&mut work, &mut jobs, "e", 4).await;
    answer_of_e(&mut jobs, now["e"].id).await;
    stop(server, jobs, work).await;
}
