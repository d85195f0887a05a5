//! What each built-in space adds to the engine: its own answers through the distributed path (a real coordinator
//! and real workers on loopback), equal to the in-process run (`sweep solve`) and to the published figures.
//! First one table-driven test over every registered space, then each puzzle's own checks (exact node totals of
//! brute force, pictures, puzzle files, DAG inputs reused). The engine's fault properties (killed workers and
//! coordinators) are tested once, on `primes`, in `engine_faults.rs`.

use std::time::{Duration, Instant};

use crate::support::{scratch, solve_result, stdout_json, sweep, Cluster};
use serde_json::{json, Value};
use sweep_brainball::{solve::replay, Ball, Move, Ring};

const LONG: Duration = Duration::from_secs(600);

/// A small instance of every space `sweep spaces` lists. Its whole `result` object (counts, solutions, digests
/// of tables, published-value checks) must be the same distributed and in process: every field of it is a
/// function of the job, none depends on how or where the chunks ran.
const SMALL: &[(&str, &[&str])] = &[
    ("star", &["star", "--points", "7"]),
    ("billiard", &["billiard", "--rows", "5"]),
    ("brainball", &["brainball", "table", "--depth", "4"]),
    ("buzzled", &["buzzled", "--clues", P52, "--chunks", "4"]),
    (
        "peg",
        &[
            "peg", "--board", "triangle", "--goal", "any", "--mode", "count",
        ],
    ),
    ("primes", &["primes", "--below", "100000000"]),
];

/// Every registered space gives the same answer through a coordinator and two worker processes as in process.
/// A space added to the registry without a row in [`SMALL`] fails here (`exec` runs user programs and has its
/// own distributed tests in `exec.rs`).
#[test]
fn every_space_gives_the_same_answer_distributed_and_in_process() {
    let listed = String::from_utf8_lossy(&sweep(&["spaces"], &[], LONG).stdout).to_string();
    let mut names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "exec")
        .collect();
    names.sort_unstable();
    let mut covered: Vec<&str> = SMALL.iter().map(|(n, _)| *n).collect();
    covered.sort_unstable();
    assert_eq!(
        names, covered,
        "every registered space needs a small instance here: {listed}"
    );

    let c = Cluster::start(2, 1);
    let jobs: Vec<u64> = SMALL.iter().map(|(_, args)| c.submit(args)).collect();
    for ((name, args), &job) in SMALL.iter().zip(&jobs) {
        let distributed = c.wait_results(job, LONG);
        assert_eq!(distributed["state"], "done", "{name}: {distributed}");
        let status = c.status(job);
        assert_eq!(
            status["completions"], status["chunks_total"],
            "{name}: every chunk counted once: {status}"
        );
        assert_eq!(distributed["result"], solve_result(args, LONG), "{name}");
    }
    // The published figure, distributed: pi(10^8) = 5,761,455 from 12 chunk counts.
    let at = SMALL.iter().position(|(n, _)| *n == "primes").unwrap();
    let primes = c.wait_results(jobs[at], LONG);
    assert_eq!(primes["result"]["primes"], 5_761_455, "{primes}");
    assert_eq!(primes["result"]["matches_published"], true, "{primes}");
}

// ---- star ----

fn assert_exactly_once(status: &Value) {
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["chunks_done"], status["chunks_total"], "{status}");
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
}

/// `r`, a job's results, is done with `solutions` solutions, `unique` of them up to symmetry.
fn assert_done_with(r: &Value, solutions: u64, unique: u64) {
    assert_eq!(r["state"], "done", "{r}");
    assert_eq!(r["result"]["solutions"], solutions, "{r}");
    assert_eq!(r["result"]["unique"], unique, "{r}");
}

#[test]
fn two_workers_solve_six_and_seven_points() {
    let c = Cluster::start(2, 1);
    let six = c.submit(&["star", "--points", "6", "--method", "brute"]);
    let seven = c.submit(&["star", "--points", "7"]);
    let r6 = c.wait_results(six, LONG);
    assert_done_with(&r6, 960, 80);
    // Every permutation of 1..12 was tested exactly once.
    assert_eq!(r6["nodes"], 479_001_600u64, "{r6}");
    let r7 = c.wait_results(seven, LONG);
    assert_done_with(&r7, 1008, 72);
    assert_eq!(r7["result"], solve_result(&["star", "--points", "7"], LONG));
    assert_exactly_once(&c.status(six));
    assert_exactly_once(&c.status(seven));
}

// ---- billiard ----

#[test]
fn two_workers_find_the_seed_triangles_and_prove_seven_rows_impossible() {
    let c = Cluster::start(2, 1);
    let strategy = c.submit(&["billiard", "--rows", "5"]);
    let brute = c.submit(&["billiard", "--rows", "5", "--method", "brute"]);
    let seven = c.submit(&["billiard", "--rows", "7"]);

    let r = c.wait_results(strategy, LONG);
    assert_done_with(&r, 2, 1);
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

// ---- peg ----

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

/// The English count as a layered DAG (17 layer jobs of 16 shards and the count job) through two workers: every
/// job's chunks are completed exactly once and the count is the published one. (A DAG under a SIGKILLed
/// coordinator and worker is `dag.rs`; these kills were also run here before the engine's faults were tested
/// once.)
#[test]
fn english_count_through_workers_is_the_published_number() {
    let args = ["peg", "--mode", "count"];
    let t0 = Instant::now();
    let c = Cluster::start(2, 1);
    let top = c.submit(&args);
    let r = c.wait_results(top, LONG);
    assert_eq!(r["state"], "done", "{r}");
    // Bell (2009) and Durango Bill: 40,861,647,040,079,968 solutions of the central game.
    assert_eq!(r["result"]["count"], "40861647040079968", "{r}");
    let dag = c.dag_jobs(top);
    assert!(dag.len() >= 17, "one job per layer: {dag:?}");
    for j in dag {
        assert_eq!(j["completions"], j["chunks_total"], "{j}");
    }
    eprintln!(
        "FIGURES english count DAG: exact answer in {:.1} s wall",
        t0.elapsed().as_secs_f64()
    );
}

// ---- brainball ----

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
fn solve_batch_through_workers_gives_the_in_process_solutions() {
    let args = [
        "brainball",
        "solve",
        "--depth",
        "4",
        "--position",
        HEADLINE,
        "--random",
        "3",
        "--seed",
        "3",
        "--chunks",
        "4",
    ];
    let expected = solve_result(&args, LONG);
    let c = Cluster::start(2, 1);
    let job = c.submit(&args);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(res["result"], expected);
    let sols = res["result"]["solutions"].as_array().unwrap();
    assert_eq!(sols.len(), 4);
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
        "1",
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

// ---- buzzled ----

pub(crate) const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";

#[test]
fn workers_solve_puzzle_52_by_brute_force_from_a_file() {
    let dir = scratch();
    let file = dir.path().join("p52.txt");
    std::fs::write(
        &file,
        format!("# the original program's puzzle #52\nname: Puzzle 52\nside: 4\nclues: {P52}\n"),
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
