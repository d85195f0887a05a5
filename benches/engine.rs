//! Engine benchmarks, run with `cargo bench --bench engine` (release build of the real `sweep` binary):
//!
//! 1. Overhead: `sweep run` (embedded coordinator, sled store, workers over loopback gRPC) against `sweep solve`
//!    (the same chunks on a rayon pool in-process), alternated in one invocation so machine noise hits both.
//! 2. Coordinator throughput: a standalone coordinator, several worker processes and a job of many tiny chunks;
//!    durable completions per second (every acknowledged completion was flushed to sled first).
//!
//! `SWEEP_BENCH_ROUNDS` (default 3) sets the rounds of part 1; `SWEEP_BENCH_CHUNKS` (default 100000) and
//! `SWEEP_BENCH_WORKERS` (default 4) shape part 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SWEEP: &str = env!("CARGO_BIN_EXE_sweep");

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn timed(args: &[&str]) -> f64 {
    let t = Instant::now();
    let out = Command::new(SWEEP)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run sweep");
    assert!(
        out.status.success(),
        "sweep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn overhead() {
    let rounds = env_or("SWEEP_BENCH_ROUNDS", 3);
    let space = ["star", "--points", "10", "--method", "backtrack", "--json"];
    let dir = tempfile::tempdir().expect("scratch dir");
    let (mut run, mut solve) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let data = dir.path().join(format!("d{i}"));
        let mut args = vec!["run"];
        args.extend_from_slice(&space);
        args.extend_from_slice(&["--no-progress", "--data", data.to_str().expect("utf-8")]);
        run.push(timed(&args));
        let mut args = vec!["solve"];
        args.extend_from_slice(&space);
        solve.push(timed(&args));
    }
    let (r, s) = (median(run.clone()), median(solve.clone()));
    println!("overhead: star --points 10 --method backtrack, {rounds} rounds alternated");
    println!("  sweep solve  median {s:.3} s  {solve:.3?}");
    println!("  sweep run    median {r:.3} s  {run:.3?}");
    println!("  run / solve  {:.3}", r / s);
}

fn throughput() {
    let chunks = env_or("SWEEP_BENCH_CHUNKS", 100_000);
    let workers = env_or("SWEEP_BENCH_WORKERS", 4);
    let dir = tempfile::tempdir().expect("scratch dir");
    let mut coord = Command::new(SWEEP)
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("store"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coordinator");
    let mut line = String::new();
    BufReader::new(coord.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("coordinator address");
    let url = format!(
        "http://{}",
        line.trim()
            .strip_prefix("sweep coordinator listening on ")
            .expect("address line")
    );
    let chunks_s = chunks.to_string();
    // Star n=5 by brute force: 10! permutations, so 100,000 chunks of ~36 permutations each are tiny.
    let out = Command::new(SWEEP)
        .args([
            "submit", "star", "--points", "5", "--method", "brute", "--chunks", &chunks_s,
        ])
        .args(["--coordinator", &url, "--json"])
        .output()
        .expect("submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    let mut ws: Vec<_> = (0..workers)
        .map(|i| {
            Command::new(SWEEP)
                .args([
                    "worker",
                    "--connect",
                    &url,
                    "--threads",
                    "1",
                    "--prefetch",
                    "64",
                ])
                .args(["--name", &format!("bench{i}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start worker")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(900);
    let done = loop {
        let out = Command::new(SWEEP)
            .args(["status", "1", "--json", "--coordinator", &url])
            .output()
            .expect("status");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["jobs"][0]["state"] == "done" {
            break v["jobs"][0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "throughput job did not finish: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let secs = started.elapsed().as_secs_f64();
    let rss_kb = std::fs::read_to_string(format!("/proc/{}/status", coord.id()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    for w in &mut ws {
        let _ = w.kill();
        let _ = w.wait();
    }
    let _ = coord.kill();
    let _ = coord.wait();
    assert_eq!(done["completions"], chunks, "{done}");
    println!("throughput: {chunks} chunks, {workers} workers x 1 thread on loopback");
    println!(
        "  {secs:.2} s, {:.0} durable completions/s, coordinator peak RSS {} MB",
        chunks as f64 / secs,
        rss_kb / 1024
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run only when benchmarking.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    overhead();
    throughput();
}
