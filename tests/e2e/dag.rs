//! End-to-end: a job whose inputs form a DAG of jobs (peg's layered `count` on the 15-hole triangle: one job per
//! layer of the search, each reading the previous layer's merged artifact, and the count job reading the last)
//! through real coordinator and worker processes. One submit materialises the whole DAG; the coordinator and a
//! worker are SIGKILLed in the middle of it; the answer must equal `sweep solve`'s, with every chunk of every
//! job counted exactly once and no job created twice.

use std::time::{Duration, Instant};

use crate::support::{
    resume_run, scratch_store, solve_result, spawn_run, stdout_json, sweep, Cluster,
};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(600);
const COUNT: [&str; 7] = [
    "peg", "--board", "triangle", "--goal", "any", "--mode", "count",
];

fn assert_exactly_once(j: &Value) {
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["chunks_done"], j["chunks_total"], "{j}");
    assert_eq!(j["chunks_poisoned"], 0, "{j}");
    // Every chunk's result was added to its job's answer exactly once, however many reports arrived.
    assert_eq!(j["completions"], j["chunks_total"], "{j}");
    assert_eq!(j["inputs_waiting"], 0, "{j}");
}

#[test]
fn a_peg_count_dag_survives_a_killed_coordinator_and_worker() {
    let expected = solve_result(&COUNT, LONG);
    assert_eq!(expected["count"], "29760", "{expected}");
    let mut c = Cluster::start_with_ttl(2, 1, 1_000);
    let top = c.submit(&COUNT);
    let dag = c.dag_jobs(top);
    assert!(
        dag.len() >= 10,
        "one job per layer of the triangle's search: {dag:?}"
    );
    assert_eq!(
        c.try_all_jobs().map(|a| a.len()),
        Some(dag.len()),
        "the one submit created the whole DAG and nothing else"
    );
    // Every input is an older job: inputs are created before the jobs that read them.
    for j in &dag {
        let id = j["job"].as_u64().unwrap();
        for i in j["input_jobs"].as_array().unwrap() {
            assert!(i.as_u64().unwrap() < id, "{j}");
        }
    }
    let deadline = Instant::now() + LONG;
    let done_before = loop {
        let done = c
            .dag_jobs(top)
            .iter()
            .filter(|j| j["state"] == "done")
            .count();
        if done >= 3 {
            break done;
        }
        assert!(Instant::now() < deadline, "the DAG made no progress");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        done_before < dag.len(),
        "killed in the middle of the DAG ({done_before} of {} done)",
        dag.len()
    );
    c.workers[0].kill9();
    c.restart_coordinator();
    let res = c.wait_results(top, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(res["result"], expected);
    let after = c.dag_jobs(top);
    assert_eq!(after.len(), dag.len(), "{after:?}");
    for j in &after {
        assert_exactly_once(j);
    }
    assert_eq!(
        c.try_all_jobs().map(|a| a.len()),
        Some(dag.len()),
        "the restart created no job"
    );
    // Submitted again, every job of the DAG is found, none created: the new top job reads the same layers.
    let again = c.submit(&COUNT);
    let again_dag = c.dag_jobs(again);
    let ids = |d: &[Value]| -> Vec<u64> {
        d.iter()
            .filter_map(|j| j["job"].as_u64())
            .filter(|&id| id != top && id != again)
            .collect()
    };
    assert_eq!(ids(&again_dag), ids(&after));
}

/// `sweep run` of the DAG, SIGKILLed in the middle and run again on the same `--data`: it resumes the same top
/// job, reuses every layer already in the store, creates no job twice, and gives the in-process number.
#[test]
fn an_interrupted_dag_run_resumes_the_same_jobs() {
    let expected = solve_result(&COUNT, LONG);
    let (_dir, data) = scratch_store();
    let data = data.as_str();
    let mut first = spawn_run(&COUNT, data);
    // The DAG takes a few seconds (a layer at a time); this is part of the way through.
    std::thread::sleep(Duration::from_millis(1200));
    first.kill9();
    let out = resume_run(&COUNT, data, LONG);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = stdout_json(&out);
    assert_eq!(v["result"], expected, "{stderr}");
    let top = v["job"].as_u64().expect("a job id");
    // Ids are handed out in order and the DAG was created in one batch, its top job last: a resume that
    // created anything would have a top job or a store with more jobs.
    let check = sweep(&["store", "check", "--data", data], &[], LONG);
    let report = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(
        report.contains(&format!(": {top} jobs,")) && report.contains("no problems found"),
        "{report}"
    );
    // The same answer in process from the stored layers, none built again.
    let solve = sweep(
        &[
            "solve", "peg", "--board", "triangle", "--goal", "any", "--mode", "count", "--data",
            data,
        ],
        &[],
        LONG,
    );
    let solve_err = String::from_utf8_lossy(&solve.stderr).to_string();
    assert!(!solve_err.contains("building input"), "{solve_err}");
    assert!(
        String::from_utf8_lossy(&solve.stdout).contains("29760"),
        "{}",
        String::from_utf8_lossy(&solve.stdout)
    );
}
