//! Answers of any size: memory that does not grow with the number of solutions (measured, not assumed), jobs
//! that keep counts only (`--count-only`) counting exactly what a full run counts, for every registered space
//! and for a program, and the whole list streamed from the store (`--solutions FILE`).

use std::process::Command;
use std::time::Duration;

use crate::support::{run_measuring_memory, scratch, stdout_json, sweep, Cluster, SWEEP};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(600);

/// Lists 20,000 solutions of 60 bytes per chunk: a program's answer can be far larger than anything worth
/// holding in memory.
const MANY: &str = r#"
import json, sys
chunk, chunks = int(sys.argv[1]), int(sys.argv[2])
n = 20000
sols = ["%09d-%s" % (chunk * n + i, "x" * 50) for i in range(n)]
print(json.dumps({"nodes": n, "counters": {"found": n}, "solutions": sols}))
"#;
const PER_CHUNK: u64 = 20_000;
const LINE_BYTES: u64 = 61;

/// `sweep run exec` of [`MANY`] over `chunks` chunks with every solution streamed into a file: its peak
/// resident memory in KiB, checked to have written every solution.
fn run_many(chunks: u64) -> u64 {
    let dir = scratch();
    std::fs::write(dir.path().join("many.py"), MANY).unwrap();
    let (data, list) = (dir.path().join("data"), dir.path().join("all.txt"));
    let mut cmd = Command::new(SWEEP);
    cmd.current_dir(dir.path()).args([
        "run",
        "exec",
        "--chunks",
        &chunks.to_string(),
        "--threads",
        "2",
        "--json",
        "--data",
        &data.display().to_string(),
        "--solutions",
        &list.display().to_string(),
        "--",
        "python3",
        "many.py",
        "{chunk}",
        "{chunks}",
    ]);
    let (out, peak_kib) = run_measuring_memory(cmd, LONG);
    let v = stdout_json(&out);
    assert_eq!(v["state"], "done", "{v}");
    let listed = chunks * PER_CHUNK;
    assert_eq!(v["solutions_listed"], listed, "{v}");
    assert_eq!(v["result"]["solutions_listed"], listed, "{v}");
    assert_eq!(v["result"]["solutions_truncated"], true, "{v}");
    // The answer itself shows only the smallest: the first chunk's, in order.
    let shown = v["result"]["solutions"].as_array().unwrap();
    assert_eq!(shown.len(), sweep_space::MAX_SHOWN_SOLUTIONS, "{v}");
    assert!(shown[0].as_str().unwrap().starts_with("000000000-"), "{v}");
    let file = std::fs::metadata(&list).unwrap().len();
    assert_eq!(file, listed * LINE_BYTES, "every solution, one per line");
    peak_kib
}

/// The memory bound, measured: four times the solutions (58 MB of them, then 234 MB) leave the peak of the
/// whole `sweep run` (coordinator, worker and client in one process) about where it was, and far below the
/// list. What remains is fixed: sled's 64 MB page cache and the few chunk reports in flight. The build before
/// lists were streamed held 807 MB for 130 MB of solutions.
#[test]
fn a_large_answer_runs_in_memory_that_does_not_grow_with_it() {
    let small = run_many(48);
    let large = run_many(192);
    let large_list_kib = 192 * PER_CHUNK * LINE_BYTES / 1024;
    eprintln!("peak RSS: {small} KiB for 48 chunks, {large} KiB for 192 ({large_list_kib} KiB of solutions)");
    assert!(
        large < small + 64 * 1024,
        "four times the solutions raised the peak from {small} to {large} KiB"
    );
    assert!(
        large < large_list_kib * 2 / 3,
        "peak {large} KiB against {large_list_kib} KiB of solutions"
    );
}

/// A small instance of every space: the same as `spaces.rs`'s table (kept apart so each test reads alone).
const SMALL: &[&[&str]] = &[
    &["star", "--points", "8"],
    &["billiard", "--rows", "5"],
    &["brainball", "table", "--depth", "4"],
    &["buzzled", "--clues", crate::spaces::P52, "--chunks", "4"],
    &[
        "peg", "--board", "triangle", "--goal", "any", "--mode", "count",
    ],
    &["primes", "--below", "10000000"],
];

/// `--count-only` is the engine's, not a space's: every registered space (and a program) counts exactly the
/// same with and without its list, stores no list, and says so.
#[test]
fn every_space_counts_the_same_with_count_only() {
    let listed = String::from_utf8_lossy(&sweep(&["spaces"], &[], LONG).stdout).to_string();
    for name in listed.lines().filter_map(|l| l.split_whitespace().next()) {
        assert!(
            name == "exec" || SMALL.iter().any(|a| a[0] == name),
            "{name} needs a row here: {listed}"
        );
    }
    let c = Cluster::start(2, 1);
    let pairs: Vec<(u64, u64)> = SMALL
        .iter()
        .map(|args| {
            let mut counted = args.to_vec();
            counted.push("--count-only");
            (c.submit(args), c.submit(&counted))
        })
        .collect();
    for (args, &(full, counted)) in SMALL.iter().zip(&pairs) {
        let (full_r, counted_r) = (c.wait_results(full, LONG), c.wait_results(counted, LONG));
        assert_eq!(full_r["state"], "done", "{args:?}: {full_r}");
        assert_eq!(counted_r["state"], "done", "{args:?}: {counted_r}");
        let (f, k) = (c.status(full), c.status(counted));
        assert_eq!(k["counters"], f["counters"], "{args:?}: {f} vs {k}");
        assert_eq!(k["nodes"], f["nodes"], "{args:?}");
        assert_eq!(k["listing"], "count-only", "{k}");
        assert_eq!(k["solutions_stored"], 0, "{k}");
        assert_eq!(f["listing"], "all", "{f}");
        // Without its list a chunk cannot be re-checked solution by solution.
        assert_eq!(k["unverified"], true, "{k}");
        let out = c.sweep(&["results", &counted.to_string(), "--solutions", "/dev/null"]);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--count-only"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let star = c.status(pairs[0].0);
    assert_eq!(star["counters"]["unique"], 112, "{star}");
}

/// A program's counts with and without `--count-only`, and its whole list streamed into a file in chunk order.
#[test]
fn a_program_counts_the_same_with_count_only_and_streams_its_list() {
    let dir = scratch();
    std::fs::write(
        dir.path().join("few.py"),
        "import json, sys\nc = int(sys.argv[1])\nprint(json.dumps({\"nodes\": c + 1, \"counters\": {\"found\": c}, \
         \"solutions\": [\"c%d-%d\" % (c, i) for i in range(c)]}))\n",
    )
    .unwrap();
    let run = |extra: &[&str]| -> Value {
        let data = dir.path().join(format!("data{}", extra.len()));
        let mut args = vec!["run", "exec", "--chunks", "5", "--json", "--data"];
        let data = data.display().to_string();
        args.push(&data);
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "python3", "few.py", "{chunk}"]);
        let mut cmd = Command::new(SWEEP);
        cmd.current_dir(dir.path()).args(&args);
        stdout_json(&crate::support::run_bounded(cmd, LONG))
    };
    let list = dir.path().join("list.txt").display().to_string();
    let full = run(&["--solutions", &list]);
    let counted = run(&["--count-only"]);
    assert_eq!(full["result"]["counters"]["found"], 10, "{full}");
    assert_eq!(counted["result"]["counters"], full["result"]["counters"]);
    assert_eq!(counted["nodes"], full["nodes"]);
    assert_eq!(
        counted["result"]["solutions"],
        serde_json::json!([]),
        "{counted}"
    );
    assert_eq!(counted["listing"], "count-only", "{counted}");
    let text = std::fs::read_to_string(dir.path().join("list.txt")).unwrap();
    let want: Vec<String> = (0..5)
        .flat_map(|c| (0..c).map(move |i| format!("c{c}-{i}")))
        .collect();
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}
