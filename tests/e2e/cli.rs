//! Bad input gets a one-line error naming the problem and a non-zero exit, never a panic, and never harms a
//! store.

use std::time::Duration;

use crate::support::{scratch, stdout_json, sweep};

const T: Duration = Duration::from_secs(60);

fn fails_with(args: &[&str], code: i32, needle: &str) {
    let out = sweep(args, &[], T);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "`sweep {}`: {stderr}",
        args.join(" ")
    );
    assert!(
        stderr.contains(needle),
        "`sweep {}` should mention {needle:?}: {stderr}",
        args.join(" ")
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_options_are_named() {
    fails_with(&["run", "nope"], 2, "unknown search space `nope`");
    fails_with(&["solve", "star", "--points", "3"], 2, "points");
    fails_with(&["solve", "star", "--chunks", "0"], 2, "--chunks");
    fails_with(&["solve", "star", "--method", "magic"], 2, "magic");
    fails_with(&["solve", "star", "--threads", "zero"], 2, "--threads");
    fails_with(&["worker", "--memory", "lots"], 2, "`lots` is not a size");
    fails_with(&["worker", "--memory", "0"], 2, "give more than 0");
    fails_with(&["run", "star", "--max-attempts", "0"], 2, "at least 1");
}

#[test]
fn unreachable_coordinator_is_reported() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    fails_with(
        &["status", "--coordinator", "http://127.0.0.1:9"],
        3,
        "cannot reach the coordinator",
    );
    fails_with(
        &["status", "--coordinator", "not a url"],
        2,
        "invalid coordinator URL",
    );
}

#[test]
fn a_foreign_data_dir_is_refused_and_left_alone() {
    let dir = scratch();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "precious").unwrap();
    let data = dir.path().to_str().unwrap();
    fails_with(&["run", "star", "--data", data], 2, "not a sweep store");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "precious");
    fails_with(
        &["run", "star", "--data", notes.to_str().unwrap()],
        2,
        "not a directory",
    );
}

#[test]
fn a_finished_job_is_answered_from_the_store() {
    let dir = scratch();
    let data = dir.path().join("d");
    let data = data.to_str().unwrap();
    let args = ["run", "star", "--points", "7", "--json", "--data", data];
    let first = stdout_json(&sweep(&args, &[], T));
    let again = sweep(&args, &[], T);
    let second = stdout_json(&again);
    assert_eq!(first["result"], second["result"]);
    assert_eq!(second["job"], 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already done"));
}

/// A reader that goes away before a printing command writes (`sweep status | head -0`) ends the command quietly
/// with the shell's code for a broken pipe (141), never with a panic.
#[test]
fn a_closed_output_pipe_ends_a_printing_command_without_a_panic() {
    let c = crate::support::Cluster::start(0, 1);
    c.submit(&["primes", "--below", "1000", "--chunks", "4"]);
    for args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["workers"],
        vec!["coordinator", "members"],
    ] {
        let mut child = std::process::Command::new(crate::support::SWEEP)
            .args(&args)
            .env("SWEEP_COORDINATOR", &c.url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sweep");
        // The reading end closed before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "sweep {args:?}: {stderr}");
        assert!(
            out.status.success() || out.status.code() == Some(141),
            "sweep {args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// The flags of a replicated coordinator's membership: each mistake named, with a usage exit, before anything
/// is asked of a group.
#[test]
fn membership_flags_are_checked() {
    let dir = scratch();
    let data = dir.path().join("member");
    let data = data.to_str().unwrap();
    let base = ["coordinator", "--listen", "127.0.0.1:0", "--data", data];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--advertise", "ftp://x:1"]),
        2,
        "--advertise: `ftp://x:1` is not an http:// or https:// URL",
    );
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--advertise", "http://x"]),
        2,
        "must be http://HOST:PORT",
    );
    fails_with(
        &with(&[
            "--join",
            "http://127.0.0.1:5555",
            "--advertise",
            "http://127.0.0.1:5555",
        ]),
        2,
        "--join names no member of the running group",
    );
    fails_with(
        &with(&["--join", "http://127.0.0.1:9"]),
        3,
        "cannot reach the group to join",
    );
    assert!(
        sweep_coordinator_member_of(&dir.path().join("member")).is_none(),
        "a join that failed left no member behind"
    );
    fails_with(
        &with(&[
            "--join",
            "http://127.0.0.1:9",
            "--peers",
            "http://127.0.0.1:9",
        ]),
        2,
        "cannot be used with",
    );
    fails_with(&["coordinator", "--advertise", "http://x:1"], 2, "--join");
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--election-ms", "10"]),
        2,
        "--election-ms",
    );
    fails_with(
        &with(&["--election-ms", "500"]),
        2,
        "--election-ms is for a member of a replicated coordinator",
    );
    fails_with(&["coordinator", "remove-member", "0"], 2, "0");
    fails_with(
        &[
            "coordinator",
            "remove-member",
            "2",
            "--coordinator",
            "http://127.0.0.1:9",
        ],
        3,
        "cannot reach the coordinator",
    );
}

/// Whether `data` holds a member's consensus log (its id file).
fn sweep_coordinator_member_of(data: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(data.join("consensus").join("member")).ok()
}
