//! End-to-end: peg solitaire jobs through a real coordinator and real workers give the in-process answers, and a
//! `count` job whose coordinator is killed and whose worker dies still ends with the same number.

mod common;

use std::time::{Duration, Instant};

use common::{solve_result, Cluster};

const LONG: Duration = Duration::from_secs(900);

#[test]
fn triangle_count_and_positions_through_workers_match_in_process() {
    let c = Cluster::start(2, 1);
    let count_args = [
        "peg", "--board", "triangle", "--goal", "any", "--mode", "count", "--chunks", "40",
    ];
    let count = c.submit(&count_args);
    let pos_args = [
        "peg",
        "--board",
        "triangle",
        "--goal",
        "any",
        "--mode",
        "positions",
        "--chunks",
        "7",
    ];
    let positions = c.submit(&pos_args);
    let solve = c.submit(&["peg", "--seed", "11"]);
    let r = c.wait_results(count, LONG);
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["result"]["count"], "29760", "{r}");
    assert_eq!(
        r["result"],
        solve_result(&count_args[..count_args.len() - 2], LONG)
    );
    let r = c.wait_results(positions, LONG);
    assert_eq!(
        r["result"],
        solve_result(&pos_args[..pos_args.len() - 2], LONG),
        "{r}"
    );
    assert_eq!(
        r["result"]["positions"]["totals"]["reachable_raw"], 3016,
        "{r}"
    );
    let r = c.wait_results(solve, LONG);
    let moves = r["result"]["moves"].as_array().map(Vec::len);
    assert_eq!(moves, Some(31), "{r}");
    assert_eq!(r["result"]["moves"][30]["to"], "4,4", "{r}");
}

/// A count job through a coordinator that is SIGKILLed and restarted mid-job, and a worker that dies, still gives
/// the in-process number. The triangle's count is milliseconds per chunk, so a `positions` job of 1024 chunks
/// is submitted first (its layer and path inputs run first, then 1024 small summary chunks): it keeps the worker
/// busy for a few seconds, so the count job is still queued or half done when the coordinator dies. The layered
/// DAG itself under kills is `tests/e2e_dag.rs`.
#[test]
fn triangle_count_survives_a_killed_coordinator_and_worker() {
    let count_args = [
        "peg", "--board", "triangle", "--goal", "any", "--mode", "count", "--chunks", "60",
    ];
    let pos_args = [
        "peg",
        "--board",
        "triangle",
        "--start",
        "2,1",
        "--mode",
        "positions",
        "--chunks",
        "1024",
    ];
    let mut c = Cluster::start_with_ttl(1, 1, 2_000);
    let positions = c.submit(&pos_args);
    let count = c.submit(&count_args);
    // As soon as the summary chunks start: under load a status poll can take longer than many tiny chunks.
    let before = c.wait_until(positions, LONG, |s| {
        s["chunks_done"].as_u64().unwrap_or(0) >= 1
    });
    c.restart_coordinator();
    c.workers[0].kill9();
    c.add_worker();
    let r = c.wait_results(count, LONG);
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["result"]["count"], "29760", "{r}");
    assert_eq!(
        r["result"],
        solve_result(&count_args[..count_args.len() - 2], LONG)
    );
    let r = c.wait_results(positions, LONG);
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(
        r["result"],
        solve_result(&pos_args[..pos_args.len() - 2], LONG),
        "{r}"
    );
    // The restart really happened mid-job.
    assert!(
        before["chunks_done"].as_u64().unwrap_or(0) < 1024,
        "{before}"
    );
}

/// The English count as a layered DAG (17 layer jobs of 16 shards and the count job) through a coordinator that is
/// SIGKILLed and restarted while the largest layers run, with a worker SIGKILLed too: every job's chunks are
/// completed exactly once and the count is the published one. 14 s wall on two cores (it was an ignored test of
/// several minutes before the layered DAG).
#[test]
fn english_count_survives_a_killed_coordinator_and_worker() {
    let args = ["peg", "--mode", "count"];
    let t0 = Instant::now();
    let mut c = Cluster::start_with_ttl(2, 1, 3_000);
    let top = c.submit(&args);
    let dag = c.dag_jobs(top);
    // Killed once the first half of the layers is done: the big layers (millions of positions) are running.
    let deadline = Instant::now() + LONG;
    let done_before = loop {
        let done = c
            .dag_jobs(top)
            .iter()
            .filter(|j| j["state"] == "done")
            .count();
        if done >= dag.len() / 2 {
            break done;
        }
        assert!(Instant::now() < deadline, "the DAG made no progress");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(done_before < dag.len(), "killed mid-DAG");
    c.restart_coordinator();
    c.workers[0].kill9();
    c.add_worker();
    let r = c.wait_results(top, LONG);
    assert_eq!(r["state"], "done", "{r}");
    // Bell (2009) and Durango Bill: 40,861,647,040,079,968 solutions of the central game.
    assert_eq!(r["result"]["count"], "40861647040079968", "{r}");
    for j in c.dag_jobs(top) {
        assert_eq!(j["completions"], j["chunks_total"], "{j}");
    }
    eprintln!(
        "FIGURES english count DAG: {} jobs, coordinator SIGKILLed after {done_before} were done, one worker \
         SIGKILLed; exact answer in {:.1} s wall",
        dag.len(),
        t0.elapsed().as_secs_f64()
    );
}
