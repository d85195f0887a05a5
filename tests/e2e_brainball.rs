//! End-to-end: a brainball table job and a solve batch through a real coordinator and worker processes, with a
//! worker SIGKILLed mid-job; the answers must equal the in-process run (`sweep solve`) exactly, and every solution
//! must replay to solved.

mod common;

use std::time::Duration;

use common::{solve_result, stdout_json, Cluster};
use serde_json::Value;
use sweep_puzzles::brainball::{solve::replay, Ball, Move, Ring};

const LONG: Duration = Duration::from_secs(300);
const HEADLINE: &str = "1 -2 3 -4 5 -6 7 -8 9 -10 11 -12 13";

fn assert_replays(result: &Value) {
    for sol in result["solutions"].as_array().expect("solutions") {
        let start = Ring::parse(sol["position"].as_str().unwrap()).unwrap();
        let moves: Vec<Move> = sol["moves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Move::parse(m.as_str().unwrap()).unwrap())
            .collect();
        let (end, twists) = replay(start, &moves);
        assert_eq!(end.canonical(), Ball::SOLVED, "{sol}");
        assert_eq!(sol["twists"], twists, "{sol}");
    }
}

#[test]
fn table_job_survives_a_killed_worker_and_matches_the_in_process_table() {
    let args = ["brainball", "table", "--depth", "5"];
    let expected = solve_result(&args, LONG);
    assert_eq!(expected["positions"], 195_131u64, "{expected}");
    let mut c = Cluster::start_with_ttl(2, 1, 1_000);
    let job = c.submit(&args);
    c.wait_until(job, LONG, |s| {
        s["chunks_done"].as_u64().unwrap_or(0) >= 10 || s["state"] != "running"
    });
    c.workers[0].kill9();
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    // Same positions, same distances, same bytes: the digest covers the whole table.
    assert_eq!(res["result"], expected);
}

#[test]
fn solve_batch_through_workers_gives_the_in_process_solutions() {
    let args = [
        "brainball",
        "solve",
        "--depth",
        "4",
        "--position",
        HEADLINE,
        "--random",
        "8",
        "--seed",
        "3",
        "--chunks",
        "9",
    ];
    let expected = solve_result(&args, LONG);
    let c = Cluster::start(2, 1);
    let job = c.submit(&args);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(res["result"], expected);
    let sols = res["result"]["solutions"].as_array().unwrap();
    assert_eq!(sols.len(), 9);
    assert_eq!(sols[0]["position"], HEADLINE);
    assert_eq!(sols[0]["twists"], 10);
    // The cluster built the depth-4 table once, as its own job, and served it to the workers; a second batch
    // of the same depth reuses the stored table instead of building another.
    let table_job = c.status(job)["input_job"]
        .as_u64()
        .expect("a solve job names its table job");
    let table = c.status(table_job);
    assert_eq!(table["state"], "done", "{table}");
    assert!(table["artifact_digest"].is_string(), "{table}");
    let again = c.submit(&[
        "brainball",
        "solve",
        "--depth",
        "4",
        "--random",
        "3",
        "--seed",
        "4",
    ]);
    c.wait_results(again, LONG);
    assert_eq!(c.status(again)["input_job"], table_job);
    let all = stdout_json(&c.sweep(&["status", "--json"]));
    let tables = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["params"]["mode"] == "table")
        .count();
    assert_eq!(tables, 1, "{all}");
    assert_eq!(sols[0]["optimal"], true);
    assert_replays(&res["result"]);
}
