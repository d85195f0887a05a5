//! The engine's fault properties, tested once, on `primes` (the engine's own test space, `docs/spaces/primes.md`):
//! real coordinator and worker processes on loopback survive SIGKILLed workers, a SIGKILLed coordinator restarted
//! on its store, SIGTERM and an interrupted `sweep run`, and still give exactly the answer of an uninterrupted
//! in-process run, with every chunk counted once (`completions == chunks_total`) and every integer examined once
//! (`nodes == N`). The job: pi(2 * 10^9) in 256 chunks, about 8 s of one core, 98,222,287 primes.
//!
//! What each puzzle adds (its own answers through the distributed path) is in `spaces.rs`; DAGs of jobs under
//! kills are in `dag.rs`; faults on separate network namespaces (partitions, a full disk) in `netns.rs`.

use std::time::Duration;

use crate::support::{resume_run, scratch_store, solve_result, spawn_run, stdout_json, Cluster};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(300);
/// pi(2 * 10^9) in 256 chunks: about 8 s of one core (as much as billiard's 9-row proof that these tests ran on
/// before), many chunks in flight at any moment, and time enough for the sleeps of the interrupted-run test.
const JOB: [&str; 5] = ["primes", "--below", "2000000000", "--chunks", "256"];
/// pi(2 * 10^9), from the published tables of pi(x).
const PI_2E9: u64 = 98_222_287;
const N: u64 = 2_000_000_000;

/// The in-process answer of [`JOB`] (`sweep solve`, no coordinator, no store), computed once for every test here
/// and checked against the published count.
fn expected() -> Value {
    static EXPECTED: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EXPECTED
        .get_or_init(|| {
            let r = solve_result(&JOB, LONG);
            assert_eq!(r["primes"], PI_2E9, "{r}");
            r
        })
        .clone()
}

fn done_chunks(s: &Value) -> u64 {
    s["chunks_done"].as_u64().unwrap_or(0)
}

fn assert_exactly_once(status: &Value) {
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["chunks_poisoned"], 0, "{status}");
    assert_eq!(status["chunks_done"], status["chunks_total"], "{status}");
    // Every chunk's result was added to the answer exactly once, however many reports arrived.
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
}

/// A cluster of `workers` workers of `threads` threads with leases of `lease_ttl_ms`, running [`JOB`] past
/// its first 10 chunks: the cluster and the job.
fn past_ten_chunks(workers: usize, threads: usize, lease_ttl_ms: u64) -> (Cluster, u64) {
    let c = Cluster::start_with_ttl(workers, threads, lease_ttl_ms);
    let job = c.submit(&JOB);
    c.wait_until(job, LONG, |s| done_chunks(s) >= 10);
    (c, job)
}

#[test]
fn killed_worker_chunks_are_reissued_and_the_answer_is_exact() {
    let expected = expected();
    let (mut c, job) = past_ten_chunks(2, 1, 1_000);
    // The victim holds leases (one running, one prefetched): they must expire and go to the survivor.
    c.workers[0].kill9();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected);
    assert_eq!(res["nodes"], N, "every integer examined once: {res}");
    let status = c.status(job);
    assert_exactly_once(&status);
    assert!(status["reissued"].as_u64().unwrap_or(0) >= 1, "{status}");
}

#[test]
fn killed_coordinator_resumes_from_its_store_and_counts_nothing_twice() {
    let args = JOB;
    let expected = expected();
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
    assert_eq!(res["nodes"], N, "{res}");
    assert_exactly_once(&c.status(job));
}

#[test]
fn an_interrupted_run_resumes_with_the_same_answer() {
    let args = JOB;
    let expected = expected();
    let (_dir, data) = scratch_store();
    let data = data.as_str();
    // A crash first (nothing runs on SIGKILL), then a polite Ctrl-C.
    let mut first = spawn_run(&args, data);
    std::thread::sleep(Duration::from_millis(1500));
    first.kill9();
    let mut second = spawn_run(&args, data);
    std::thread::sleep(Duration::from_millis(1500));
    second.signal("INT");
    let status = second
        .wait_exit(Duration::from_secs(60))
        .expect("sweep run exits after Ctrl-C");
    assert_eq!(status.code(), Some(130), "interrupted runs exit with 130");
    let out = resume_run(&args, data, LONG);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = stdout_json(&out);
    assert!(stderr.contains("resuming job 1"), "{stderr}");
    assert_eq!(v["job"], 1, "the same job was resumed, not a new one: {v}");
    assert_eq!(v["result"], expected);
    assert_eq!(v["chunks_done"], 256);
}

#[test]
fn sigterm_stops_workers_and_the_coordinator_cleanly_and_the_job_goes_on() {
    let expected = expected();
    let (mut c, job) = past_ten_chunks(2, 1, 30_000);
    // A worker asked to stop hands back what it has not started and delivers what it finished: with a
    // 30 s lease time, nothing it held may be left dangling (the job would stall on expiry otherwise).
    let status = c.workers[0].terminate();
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
    let status = c.coordinator.terminate();
    assert!(status.success(), "coordinator exit status {status}");
    c.restart_coordinator();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"], expected);
    assert_exactly_once(&c.status(job));
}

/// Thousands of chunks of a few milliseconds each, with the coordinator SIGKILLed mid-job: completions arrive
/// faster than anywhere else, and the node total still shows every integer examined exactly once.
#[test]
fn many_short_chunks_across_a_coordinator_restart_count_every_integer_once() {
    let args = ["primes", "--below", "2000000000", "--chunks", "16384"];
    let mut c = Cluster::start_with_ttl(2, 1, 3_000);
    let job = c.submit(&args);
    let before = c.wait_until(job, LONG, |s| done_chunks(s) >= 50);
    c.restart_coordinator();
    // With chunks this short, status-visible progress has been seen to drop across a kill (409 -> 350 done,
    // acknowledged completions still queued for the store): the point here is that the final count is exact.
    let after = c.wait_until(job, LONG, |_| true);
    if done_chunks(&after) < done_chunks(&before) {
        eprintln!("status progress dropped across the restart: {before} then {after}");
    }
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(res["nodes"], N, "{res}");
    assert_eq!(res["result"], expected(), "{res}");
    assert_exactly_once(&c.status(job));
    eprintln!("restarted at {} of 16384 chunks", before["chunks_done"]);
}

/// A job still queued behind another when the coordinator is SIGKILLed, its only worker SIGKILLed too and a new
/// worker started: both jobs finish, exact. (The queued job was stored at submit, not only held in memory.)
#[test]
fn a_queued_job_survives_a_killed_coordinator_and_its_only_worker() {
    let small = ["primes", "--below", "10000000", "--chunks", "60"];
    let mut c = Cluster::start_with_ttl(1, 1, 2_000);
    let first = c.submit(&JOB);
    let queued = c.submit(&small);
    let before = c.wait_until(first, LONG, |s| done_chunks(s) >= 1);
    assert!(done_chunks(&before) < 256, "killed mid-job: {before}");
    c.restart_coordinator();
    c.workers[0].kill9();
    c.add_worker();
    let r = c.wait_results(queued, LONG);
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["result"]["primes"], 664_579, "{r}");
    assert_eq!(r["result"], solve_result(&small, LONG));
    assert_exactly_once(&c.status(queued));
    let r = c.wait_results(first, LONG);
    assert_eq!(r["result"], expected(), "{r}");
    assert_exactly_once(&c.status(first));
}

/// A job whose chunks report artifacts (pieces of a table) that are merged in chunk order: with a worker
/// SIGKILLed mid-job, the merged table is byte for byte the in-process one. `primes` has no artifacts, so this
/// one runs on brainball's depth-5 distance table.
#[test]
fn an_artifact_job_survives_a_killed_worker_and_merges_the_same_bytes() {
    let args = ["brainball", "table", "--depth", "5"];
    let expected = solve_result(&args, LONG);
    assert_eq!(expected["positions"], 195_131u64, "{expected}");
    let mut c = Cluster::start_with_ttl(2, 1, 1_000);
    let job = c.submit(&args);
    c.wait_until(job, LONG, |s| {
        done_chunks(s) >= 10 || s["state"] != "running"
    });
    c.workers[0].kill9();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    // Same positions, same distances, same bytes: the digest covers the whole table.
    assert_eq!(res["result"], expected);
    assert_exactly_once(&c.status(job));
}

/// Regression: a worker whose threads were all busy when the coordinator was SIGKILLed and restarted asks for
/// no lease for a while, and `sweep workers` showed it with 0 threads and no memory until it did. Its next
/// heartbeat now tells it to register again.
#[test]
fn a_busy_worker_describes_itself_again_to_a_restarted_coordinator() {
    // Two long chunks for one worker of one thread: it holds both (one running, one prefetched) and asks for
    // nothing more, so only its heartbeats reach the restarted coordinator.
    let mut c = Cluster::start_with_ttl(1, 1, 2_000);
    let job = c.submit(&["primes", "--below", "8000000000", "--chunks", "2"]);
    c.wait_until(job, LONG, |s| s["chunks_leased"].as_u64() == Some(2));
    c.restart_coordinator();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let described = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never described itself again"
        );
        let out = c.sweep(&["workers", "--json"]);
        if out.status.success() {
            let list = stdout_json(&out);
            let w = &list["workers"][0];
            if w["threads"] == 1 && w["memory_bytes"].as_u64().unwrap_or(0) > 0 {
                break w.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(described["name"], "w0", "{described}");
    // Described before either long chunk ended: the heartbeat did it, not a new lease.
    assert_eq!(done_chunks(&c.status(job)), 0, "{described}");
    c.sweep_ok(&["cancel", &job.to_string()]);
}

#[test]
fn a_suspended_machine_loses_no_running_chunk_to_lease_expiry() {
    let expected = expected();
    let (c, job) = past_ten_chunks(1, 2, 2_000);
    // As a laptop's lid closed: coordinator and worker stopped for well over the 2 s lease time. Nobody could
    // renew a lease meanwhile, so the coordinator adds the time to every lease instead of expiring them (which
    // would cancel the worker's running chunks and start them again).
    c.coordinator.signal("STOP");
    c.workers[0].signal("STOP");
    std::thread::sleep(Duration::from_secs(5));
    c.coordinator.signal("CONT");
    c.workers[0].signal("CONT");
    let r = c.wait_results(job, LONG);
    assert_eq!(r["result"], expected);
    let st = c.status(job);
    assert_eq!(st["state"], "done", "{st}");
    assert_eq!(st["reissued"], 0, "no lease expired: {st}");
}
