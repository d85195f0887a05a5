//! End-to-end: a damaged store never gives a silently wrong answer. A corrupted table file is refused when the
//! answer is read, `sweep store check --deep` names it, `sweep store repair` sends the job back to run, and the
//! next run gives the original answer again.

use std::time::Duration;

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
