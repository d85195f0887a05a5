//! End-to-end: a damaged store never gives a silently wrong answer. A corrupted table file is refused when the
//! answer is read, `sweep store check --deep` names it, `sweep store repair` sends the job back to run, and the
//! next run gives the original answer again.

use std::time::Duration;
use sweep_space::ChunkId;

use crate::support::{scratch, stdout_json, sweep};

const LONG: Duration = Duration::from_secs(300);

#[test]
fn a_corrupted_table_is_detected_repaired_and_recomputed() {
    let dir = scratch();
    let data = dir.path().join("store");
    let data_s = data.to_str().expect("utf-8 path");
    let run = [
        "run",
        "brainball",
        "table",
        "--depth",
        "5",
        "--data",
        data_s,
        "--json",
        "--no-progress",
    ];
    let first = sweep(&run, &[], LONG);
    assert!(first.status.success(), "{first:?}");
    let answer = stdout_json(&first)["result"].clone();
    assert!(answer.is_object(), "{answer}");

    let check = sweep(
        &["store", "check", "--deep", "--data", data_s, "--json"],
        &[],
        LONG,
    );
    assert!(check.status.success(), "{check:?}");
    assert_eq!(stdout_json(&check)["problems"], serde_json::json!([]));

    // Flip one byte of the stored table.
    let table = data.join("artifacts").join("r-1");
    let mut bytes = std::fs::read(&table).expect("the table is a file");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&table, bytes).expect("write");

    let damaged = sweep(&run, &[], LONG);
    assert!(
        !damaged.status.success(),
        "a damaged table must not be served: {damaged:?}"
    );
    let err = String::from_utf8_lossy(&damaged.stderr);
    assert!(
        err.contains("r-1") && err.contains("does not match"),
        "{err}"
    );

    let check = sweep(&["store", "check", "--deep", "--data", data_s], &[], LONG);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains("job 1") && text.contains("runs again"),
        "{text}"
    );

    let repair = sweep(&["store", "repair", "--deep", "--data", data_s], &[], LONG);
    assert!(repair.status.success(), "{repair:?}");

    let again = sweep(&run, &[], LONG);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(stdout_json(&again)["result"], answer);
    let check = sweep(
        &["store", "check", "--deep", "--data", data_s, "--json"],
        &[],
        LONG,
    );
    assert_eq!(stdout_json(&check)["problems"], serde_json::json!([]));
}

/// `sweep store chunks` lists what each stored chunk found: all of them sum to the job's answer, and a slice
/// equals the chunk of another plan whose boundaries fall on it, computed here in-process (how a long job's
/// stored results are cross-checked). Bad ranges and unknown jobs are refused by name.
#[test]
fn stored_chunks_sum_to_the_answer_and_a_slice_equals_another_plan_s_chunk() {
    let dir = scratch();
    let data = dir.path().join("store");
    let data_s = data.to_str().expect("utf-8 path");
    let run = sweep(
        &[
            "run",
            "star",
            "--points",
            "8",
            "--chunks",
            "64",
            "--data",
            data_s,
            "--json",
            "--no-progress",
        ],
        &[],
        LONG,
    );
    assert!(run.status.success(), "{run:?}");
    let answer = stdout_json(&run);

    let lines = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["store", "chunks", "--data", data_s, "--job", "1", "--json"];
        all.extend_from_slice(args);
        let out = sweep(&all, &[], LONG);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    };
    let every = lines(&[]);
    assert_eq!(every.len(), 65, "64 chunks and the sums");
    assert!(every[..64].iter().all(|c| c["state"] == "done"));
    let sums = &every[64];
    assert_eq!(sums["done"], 64);
    assert_eq!(sums["nodes"], answer["nodes"]);

    let slice = lines(&["--from", "8", "--to", "12"]);
    assert_eq!(slice.len(), 5);
    let job = sweep::builtin()
        .lookup("star")
        .and_then(|s| s.parse_args(&["--points".to_string(), "8".to_string()]))
        .expect("star job");
    // Chunk 2 of 16 covers chunks 8..12 of 64: the plans split the same prefix list at multiples of 1/64.
    let other = job
        .run_chunk(ChunkId::new(16, 2), &sweep_space::Control::new())
        .expect("chunk");
    assert_eq!(slice[4]["nodes"], other.nodes);
    for name in ["solutions", "unique"] {
        assert_eq!(
            slice[4]["counters"][name],
            sweep_space::json_u128(other.counters[name]),
            "{name}"
        );
    }

    for (args, says) in [
        (vec!["--job", "9"], "no job 9"),
        (
            vec!["--job", "1", "--from", "5", "--to", "5"],
            "must not be empty",
        ),
        (vec!["--job", "1", "--to", "65"], "chunks 0..64"),
    ] {
        let mut all = vec!["store", "chunks", "--data", data_s];
        all.extend(args);
        let out = sweep(&all, &[], LONG);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}
