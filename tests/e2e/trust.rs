//! End-to-end: workers that lie are caught. A result that fails the space's verifier is refused, its chunk goes to
//! another worker, and a worker with repeated bad results gets no more work; a lie no verifier can see (an
//! inflated count) is outvoted under `--replicate 2`. Also: a drained worker finishes and stops by itself. In
//! every case the answer equals the uninterrupted in-process one.

use std::time::Duration;

use crate::support::{solve_result, stdout_json, Cluster};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(300);

fn workers(c: &Cluster) -> Vec<Value> {
    let v = stdout_json(&c.sweep(&["workers", "--json"]));
    v["workers"].as_array().cloned().unwrap_or_default()
}

fn worker(c: &Cluster, name: &str) -> Value {
    workers(c)
        .into_iter()
        .find(|w| w["name"] == name)
        .unwrap_or(Value::Null)
}

/// Polls `sweep workers` until `pred` holds for worker `name` (bounded).
fn wait_worker(c: &Cluster, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let w = worker(c, name);
        if pred(&w) {
            return w;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "worker {name} never got there: {w}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node total of the uninterrupted in-process run.
fn solve_nodes(space_args: &[&str]) -> Value {
    let mut args = vec!["solve"];
    args.extend_from_slice(space_args);
    args.push("--json");
    stdout_json(&crate::support::sweep(&args, &[], LONG))["nodes"].clone()
}

fn assert_exactly_once(status: &Value) {
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
}

/// A cluster whose one worker, w0, lies as `lie` says (`SWEEP_TEST_LIE`); the honest ones are added later.
fn with_a_liar(lie: &str) -> Cluster {
    let mut c = Cluster::start(0, 1);
    c.add_worker_env(&[], &[("SWEEP_TEST_LIE", lie)]);
    c
}

#[test]
fn bogus_solutions_fail_verification_and_the_liar_is_refused() {
    let args = ["star", "--points", "7", "--chunks", "24"];
    let expected = solve_result(&args, LONG);
    let mut c = with_a_liar("bogus-solution");
    let job = c.submit(&args);
    // Alone, the liar gets chunk after chunk refused until it is refused work altogether; it cannot use up
    // any chunk's attempts, because a refused chunk never goes back to it.
    let liar = wait_worker(&c, "w0", |w| w["banned"] == true);
    assert!(liar["bad_results"].as_u64().unwrap_or(0) >= 3, "{liar}");
    c.add_worker();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected, "{res}");
    assert_eq!(res["poisoned_chunks"], Value::Array(vec![]), "{res}");
    assert_exactly_once(&c.status(job));
    assert_eq!(worker(&c, "w1")["banned"], false);
}

#[test]
fn replication_outvotes_an_inflated_count() {
    let args = ["star", "--points", "7", "--chunks", "16"];
    let expected = solve_result(&args, LONG);
    let mut c = with_a_liar("inflate-count");
    c.add_worker();
    let mut submit = args.to_vec();
    submit.extend(["--replicate", "2"]);
    let job = c.submit(&submit);
    // With one liar and one honest worker no chunk can reach a quorum; the disagreement shows.
    c.wait_until(job, LONG, |s| s["disagreements"].as_u64().unwrap_or(0) >= 1);
    assert_eq!(c.status(job)["chunks_done"], 0);
    c.add_worker();
    let res = c.wait_results(job, LONG);
    // The inflated node counts passed every verifier, and still did not reach the answer: the job's node total
    // is the honest one.
    assert_eq!(res["nodes"], solve_nodes(&args), "{res}");
    assert_eq!(res["result"], expected, "{res}");
    let status = c.status(job);
    assert_exactly_once(&status);
    assert_eq!(status["replicate"], 2, "{status}");
    let liar = worker(&c, "w0");
    assert!(liar["bad_results"].as_u64().unwrap_or(0) >= 1, "{liar}");
    assert_eq!(worker(&c, "w1")["bad_results"], 0);
    assert_eq!(worker(&c, "w2")["bad_results"], 0);
}

#[test]
fn a_drained_worker_finishes_its_chunks_and_stops() {
    let args = ["primes", "--below", "1000000000", "--chunks", "256"];
    let expected = solve_result(&args, LONG);
    let mut c = Cluster::start(2, 1);
    let job = c.submit(&args);
    c.wait_until(job, LONG, |s| s["chunks_done"].as_u64().unwrap_or(0) >= 5);
    let out = c.sweep_ok(&["drain", "w0", "--json"]);
    assert_eq!(stdout_json(&out)["draining"], true);
    let exit = c.workers[0]
        .wait_exit(Duration::from_secs(120))
        .expect("the drained worker stops by itself");
    assert!(exit.success(), "{exit:?}");
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected, "{res}");
    assert_exactly_once(&c.status(job));
    // Draining a worker nobody knows is an error that names it.
    let out = c.sweep(&["drain", "nobody"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nobody"),
        "{out:?}"
    );
}
