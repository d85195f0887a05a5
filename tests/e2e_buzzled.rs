//! End-to-end: real coordinator and worker processes solve the seed's Buzzled puzzle #52 by brute force (every
//! board with 20 yellow tiles accounted for exactly once across chunks) from a puzzle file, `sweep results --svg`
//! draws the 58 solutions, and a generated side-6 puzzle round-trips through `sweep buzzled generate` and
//! `sweep solve --puzzle`.

mod common;

use std::time::Duration;

use common::{scratch, stdout_json, sweep, Cluster};

const LONG: Duration = Duration::from_secs(300);
const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";

#[test]
fn workers_solve_puzzle_52_by_brute_force_from_a_file() {
    let dir = scratch();
    let file = dir.path().join("p52.txt");
    std::fs::write(
        &file,
        format!("# the seed's puzzle #52\nname: Puzzle 52\nside: 4\nclues: {P52}\n"),
    )
    .unwrap();
    let c = Cluster::start(2, 1);
    let path = file.display().to_string();
    let job = c.submit(&[
        "buzzled", "--puzzle", &path, "--method", "brute", "--chunks", "16",
    ]);
    let r = c.wait_results(job, LONG);
    assert_eq!(r["state"], "done", "{r}");
    // The job stores the clues, not the path.
    assert_eq!(r["params"]["clues"], P52, "{r}");
    assert!(r["params"].get("puzzle").is_none(), "{r}");
    // C(37, 20): every board with 20 yellow tiles was tested exactly once.
    assert_eq!(r["nodes"], 15_905_368_710u64, "{r}");
    assert_eq!(r["result"]["solutions"], 58, "{r}");
    let boards = r["result"]["boards"].as_array().unwrap();
    assert_eq!(boards.len(), 58);
    assert!(boards.iter().all(|b| b.as_str().unwrap().len() == 37));

    // The in-process line solver agrees.
    let reference = stdout_json(&sweep(
        &["solve", "buzzled", "--clues", P52, "--json"],
        &[],
        LONG,
    ));
    assert_eq!(reference["result"]["boards"], r["result"]["boards"]);

    // One picture per solution.
    let pics = dir.path().join("pics");
    let out = c.sweep(&["results", &job.to_string(), "--svg", pics.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svgs: Vec<_> = std::fs::read_dir(&pics).unwrap().collect();
    assert_eq!(svgs.len(), 58);
    let first = std::fs::read_to_string(pics.join("buzzled-s4-001.svg")).unwrap();
    assert!(first.starts_with("<svg") && first.contains("Puzzle 52"));
}

#[test]
fn a_generated_side_six_puzzle_has_one_solution() {
    let dir = scratch();
    let gen = sweep(
        &["buzzled", "generate", "--side", "6", "--seed", "42"],
        &[],
        LONG,
    );
    assert!(gen.status.success());
    let file = dir.path().join("g6.txt");
    std::fs::write(&file, &gen.stdout).unwrap();
    let r = stdout_json(&sweep(
        &[
            "solve",
            "buzzled",
            "--puzzle",
            file.to_str().unwrap(),
            "--json",
        ],
        &[],
        LONG,
    ));
    assert_eq!(r["result"]["side"], 6);
    assert_eq!(r["result"]["solutions"], 1, "{r}");
    let json = stdout_json(&sweep(
        &[
            "buzzled", "generate", "--side", "6", "--seed", "42", "--json",
        ],
        &[],
        LONG,
    ));
    assert_eq!(r["result"]["boards"][0], json["solution"]);
}
