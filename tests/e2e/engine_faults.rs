//! End-to-end: real coordinator and worker processes on loopback solve the star space, survive SIGKILLed
//! workers and a SIGKILLed coordinator, and give exactly the answer of an uninterrupted in-process run. The fault
//! tests need a job of a few seconds with a small answer: billiard's proof that no 9-row triangle exists (256
//! chunks, about 4 s of CPU, 207,963,591 placements counted exactly); the star kernel got too fast for that.

mod common;

use std::time::Duration;

use common::{scratch, solve_result, stdout_json, sweep, Cluster, Proc};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(300);

fn done_chunks(s: &Value) -> u64 {
    s["chunks_done"].as_u64().unwrap_or(0)
}

fn assert_exactly_once(status: &Value) {
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["chunks_done"], status["chunks_total"], "{status}");
    // Every chunk's result was added to the answer exactly once, however many reports arrived.
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
}

#[test]
fn two_workers_solve_six_and_seven_points() {
    let c = Cluster::start(2, 1);
    let six = c.submit(&["star", "--points", "6", "--method", "brute"]);
    let seven = c.submit(&["star", "--points", "7"]);
    let r6 = c.wait_results(six, LONG);
    assert_eq!(r6["state"], "done", "{r6}");
    assert_eq!(r6["result"]["solutions"], 960, "{r6}");
    assert_eq!(r6["result"]["unique"], 80, "{r6}");
    // Every permutation of 1..12 was tested exactly once.
    assert_eq!(r6["nodes"], 479_001_600u64, "{r6}");
    let r7 = c.wait_results(seven, LONG);
    assert_eq!(r7["result"]["solutions"], 1008, "{r7}");
    assert_eq!(r7["result"]["unique"], 72, "{r7}");
    assert_eq!(r7["result"], solve_result(&["star", "--points", "7"], LONG));
    assert_exactly_once(&c.status(six));
    assert_exactly_once(&c.status(seven));
}

#[test]
fn killed_worker_chunks_are_reissued_and_the_answer_is_exact() {
    let args = ["billiard", "--rows", "9", "--chunks", "256"];
    let expected = solve_result(&args, LONG);
    let mut c = Cluster::start_with_ttl(2, 1, 1_000);
    let job = c.submit(&args);
    c.wait_until(job, LONG, |s| done_chunks(s) >= 10);
    // The victim holds leases (one running, one prefetched): they must expire and go to the survivor.
    c.workers[0].kill9();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected);
    let status = c.status(job);
    assert_exactly_once(&status);
    assert!(status["reissued"].as_u64().unwrap_or(0) >= 1, "{status}");
}

#[test]
fn killed_coordinator_resumes_from_its_store_and_counts_nothing_twice() {
    let args = ["billiard", "--rows", "9", "--chunks", "256"];
    let expected = solve_result(&args, LONG);
    let mut c = Cluster::start_with_ttl(2, 1, 3_000);
    let job = c.submit(&args);
    let mut restarts = 0;
    for target in [20, 80, 150] {
        let before = c.wait_until(job, LONG, |s| done_chunks(s) >= target);
        c.restart_coordinator();
        restarts += 1;
        // What was acknowledged before the kill is still there.
        let after = c.wait_until(job, LONG, |_| true);
        assert!(
            done_chunks(&after) >= done_chunks(&before),
            "lost progress: {before} then {after}"
        );
    }
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected, "after {restarts} restarts");
    assert_exactly_once(&c.status(job));
}

#[test]
fn an_interrupted_run_resumes_with_the_same_answer() {
    let args = ["billiard", "--rows", "9", "--chunks", "256"];
    let expected = solve_result(&args, LONG);
    let dir = scratch();
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let spawn = || {
        let child = std::process::Command::new(common::SWEEP)
            .args(["run"])
            .args(args)
            .args(["--threads", "1", "--json", "--data", data])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sweep run");
        Proc {
            child,
            name: "sweep run".into(),
        }
    };
    // A crash first (nothing runs on SIGKILL), then a polite Ctrl-C.
    let mut first = spawn();
    std::thread::sleep(Duration::from_millis(1500));
    first.kill9();
    let mut second = spawn();
    std::thread::sleep(Duration::from_millis(1500));
    second.signal("INT");
    let status = second
        .wait_exit(Duration::from_secs(60))
        .expect("sweep run exits after Ctrl-C");
    assert_eq!(status.code(), Some(130), "interrupted runs exit with 130");
    let out = sweep(
        &[
            "run",
            args[0],
            args[1],
            args[2],
            args[3],
            args[4],
            "--threads",
            "2",
            "--json",
            "--data",
            data,
        ],
        &[],
        LONG,
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = stdout_json(&out);
    assert!(stderr.contains("resuming job 1"), "{stderr}");
    assert_eq!(v["job"], 1, "the same job was resumed, not a new one: {v}");
    assert_eq!(v["result"], expected);
    assert_eq!(v["chunks_done"], 256);
}

#[test]
fn sigterm_stops_workers_and_the_coordinator_cleanly_and_the_job_goes_on() {
    let args = ["billiard", "--rows", "9", "--chunks", "256"];
    let expected = solve_result(&args, LONG);
    let mut c = Cluster::start_with_ttl(2, 1, 30_000);
    let job = c.submit(&args);
    c.wait_until(job, LONG, |s| done_chunks(s) >= 10);
    // A worker asked to stop hands back what it has not started and delivers what it finished: with a
    // 30 s lease time, nothing it held may be left dangling (the job would stall on expiry otherwise).
    c.workers[0].signal("TERM");
    let status = c.workers[0]
        .wait_exit(Duration::from_secs(30))
        .expect("worker exits after SIGTERM");
    assert!(status.success(), "worker exit status {status}");
    // Asked of the stopped worker itself: the job's lease count also holds the survivor's chunks that are
    // finished but not yet acknowledged, which under load can briefly exceed threads + prefetch.
    let workers = stdout_json(&c.sweep(&["workers", "--json"]));
    let stopped = workers["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["name"] == "w0"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        stopped["leases_held"], 0,
        "the stopped worker left no lease behind: {workers}"
    );
    // The coordinator on SIGTERM writes what is queued and exits 0, even with a worker connected.
    c.coordinator.signal("TERM");
    let status = c
        .coordinator
        .wait_exit(Duration::from_secs(30))
        .expect("coordinator exits after SIGTERM");
    assert!(status.success(), "coordinator exit status {status}");
    c.restart_coordinator();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected);
    assert_exactly_once(&c.status(job));
}
