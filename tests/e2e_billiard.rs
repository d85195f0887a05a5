//! End-to-end: real coordinator and worker processes solve billiard triangles: 5 rows by strategy and by the
//! full 15! brute force (every permutation accounted exactly once across chunks, also across a coordinator
//! restart), and the proof that no 7-row triangle exists.

mod common;

use std::time::Duration;

use common::{solve_result, Cluster};
use serde_json::json;

const LONG: Duration = Duration::from_secs(300);

#[test]
fn two_workers_find_the_seed_triangles_and_prove_seven_rows_impossible() {
    let c = Cluster::start(2, 1);
    let strategy = c.submit(&["billiard", "--rows", "5"]);
    let brute = c.submit(&["billiard", "--rows", "5", "--method", "brute"]);
    let seven = c.submit(&["billiard", "--rows", "7"]);

    let r = c.wait_results(strategy, LONG);
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["result"]["solutions"], 2, "{r}");
    assert_eq!(r["result"]["unique"], 1, "{r}");
    assert_eq!(
        r["result"]["canonical"][0],
        json!([[6, 14, 15, 3, 13], [8, 1, 12, 10], [7, 11, 2], [4, 9], [5]]),
        "{r}"
    );
    assert_eq!(
        r["result"],
        solve_result(&["billiard", "--rows", "5"], LONG)
    );

    let b = c.wait_results(brute, LONG);
    assert_eq!(b["state"], "done", "{b}");
    // Every one of the 15! permutations was tested exactly once.
    assert_eq!(b["nodes"], 1_307_674_368_000u64, "{b}");
    assert_eq!(b["result"]["solutions"], 2, "{b}");
    assert_eq!(b["result"]["canonical"], r["result"]["canonical"], "{b}");

    let s = c.wait_results(seven, LONG);
    assert_eq!(s["result"]["exists"], false, "{s}");
    assert_eq!(s["result"]["solutions"], 0, "{s}");
    assert_eq!(
        s["result"],
        solve_result(&["billiard", "--rows", "7"], LONG),
        "{s}\n{}",
        c.status(seven)
    );
}

#[test]
fn brute_force_survives_a_coordinator_restart_and_counts_every_permutation_once() {
    let args = [
        "billiard", "--rows", "5", "--method", "brute", "--chunks", "16384",
    ];
    let mut c = Cluster::start_with_ttl(2, 1, 3_000);
    let job = c.submit(&args);
    let before = c.wait_until(job, LONG, |s| s["chunks_done"].as_u64().unwrap_or(0) >= 50);
    c.restart_coordinator();
    // Whether status-visible progress survives the kill is e2e_star's assertion (with chunks this short it has
    // been seen to drop, 409 -> 350 done): here the point is that the final count is exact either way.
    let after = c.wait_until(job, LONG, |_| true);
    if after["chunks_done"].as_u64() < before["chunks_done"].as_u64() {
        eprintln!("status progress dropped across the restart: {before} then {after}");
    }
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(res["nodes"], 1_307_674_368_000u64, "{res}");
    assert_eq!(res["result"], solve_result(&args, LONG));
    eprintln!("restarted at {} of 16384 chunks", before["chunks_done"]);
}
