//! End-to-end: sweep as a library. `examples/queens` is a crate outside this workspace that depends on sweep by
//! path, as a user's crate would, and adds an N-Queens space to the whole `sweep` command in a few lines of
//! `main.rs`. This test builds it with cargo, then runs its coordinator and two of its workers as real
//! processes, and checks the published counts (OEIS A000170) for n = 1..14 together with a worker SIGKILLed
//! mid-job.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{stdout_json, Cluster};
use sweep_testkit::process::run_ok;

const PUBLISHED: [u64; 14] = [
    1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596,
];

/// Builds the example in release mode, in its own directory under this build's target directory, and returns
/// its binary. Not in the target directory itself: a separate workspace resolves features its own way, and the
/// two builds would keep invalidating each other's artifacts.
fn build_queens() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // .../target/release/sweep -> .../target
    let target = Path::new(crate::support::SWEEP)
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.join("target"))
        .join("examples-queens");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo)
            .args(["build", "--release", "--manifest-path"])
            .arg(root.join("examples/queens/Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .stdin(Stdio::null()),
    );
    target.join("release/sweep-queens")
}

#[test]
#[ignore = "builds examples/queens and all of its dependencies again (minutes): \
            cargo test --release --test e2e queens -- --ignored"]
fn a_users_crate_adds_queens_and_a_real_cluster_counts_them() {
    let bin = build_queens();
    let mut c = Cluster::start_bin(&bin, 2, 1, 1_000);
    let jobs: Vec<(u32, u64)> = (1..=14u32)
        .map(|n| (n, c.submit(&["queens", "--n", &n.to_string()])))
        .collect();
    // n = 14 is the longest: kill one worker while it runs, start another.
    let last = jobs[13].1;
    c.wait_until(last, Duration::from_secs(300), |s| {
        s["chunks_done"].as_u64().unwrap_or(0) >= 1
    });
    c.workers[0].kill9();
    c.add_worker();
    for (n, job) in jobs {
        let r = c.wait_results(job, Duration::from_secs(300));
        assert_eq!(r["state"], "done", "n = {n}: {r}");
        let got = r["result"]["solutions"].as_str().unwrap_or("");
        assert_eq!(got, PUBLISHED[n as usize - 1].to_string(), "n = {n}: {r}");
        let s = c.status(job);
        assert_eq!(
            s["completions"], s["chunks_total"],
            "n = {n}: each chunk counted once: {s}"
        );
    }
    // The user's build still has every built-in space, and its coordinator plans them.
    let listed = String::from_utf8_lossy(&c.sweep(&["spaces"]).stdout).to_string();
    for space in ["star", "peg", "exec", "queens"] {
        assert!(listed.contains(space), "{space} missing from: {listed}");
    }
    let star = c.submit(&["star", "--points", "6"]);
    assert_eq!(
        c.wait_results(star, Duration::from_secs(120))["state"],
        "done"
    );
    // This repository's own `sweep` does not know the user's space, and says so.
    let out = crate::support::sweep(
        &["solve", "queens", "--n", "4"],
        &[],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("queens"));
    // In process, the user's binary gives the same count.
    let v = stdout_json(&crate::support::sweep_bin(
        &bin,
        &["solve", "queens", "--n", "10", "--json"],
        &[],
        Duration::from_secs(60),
    ));
    assert_eq!(v["result"]["solutions"], "724");
}
