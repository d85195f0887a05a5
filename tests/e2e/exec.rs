//! End-to-end: any program as a search space (`exec`). Real `sweep` processes run real programs (Python, `sh`):
//! exact counters past 64 bits, a failing chunk reported with its stderr and exit 4, a worker SIGKILLed in the
//! middle of a checkpointing chunk whose chunk resumes on another worker from the coordinator's copy of the
//! checkpoint, files shipped through the coordinator, cancelled and drained programs that leave no process
//! behind, and workers that never run a program unless started with `--allow-exec`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    processes_with, scratch, stdout_json, wait_for_no_process, wait_for_processes, Cluster, SWEEP,
};
use serde_json::Value;
use sweep_testkit::process::run_ok;

const LONG: Duration = Duration::from_secs(240);

/// Counts x^3 over its share of 0..N: the exact total (about 2.5e23 for N = 10^6) does not fit in 64 bits.
const CUBES: &str = r#"
import json, sys
chunk, chunks = int(sys.argv[1]), int(sys.argv[2])
n, total = 0, 0
for x in range(chunk, 1000000, chunks):
    n += 1
    total += x * x * x
    if n % 50000 == 0:
        print(json.dumps({"progress": 50000}), flush=True)
sols = ["chunk %d" % chunk] if chunk % 3 == 0 else []
print(json.dumps({"nodes": n, "counters": {"cubes": str(total), "count": n}, "solutions": sols}))
"#;

/// A counter of a result as text: small ones are JSON numbers, those past 2^53 decimal strings.
fn counter(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

fn cubes_total() -> u128 {
    (0..1_000_000u128).map(|x| x * x * x).sum()
}

/// `sweep ARGS` in `dir`, bounded by `timeout`.
/// `v`, a job's results, is done and counted every cube of the test program, past 64 bits.
fn assert_every_cube_counted(v: &Value) {
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(
        counter(&v["result"]["counters"]["cubes"]),
        cubes_total().to_string(),
        "{v}"
    );
}

fn sweep_in(dir: &Path, args: &[&str], timeout: Duration) -> std::process::Output {
    let mut cmd = Command::new(SWEEP);
    cmd.args(args).current_dir(dir);
    crate::support::run_bounded(cmd, timeout)
}

#[test]
fn a_python_program_counts_exactly_past_64_bits() {
    let dir = scratch();
    std::fs::write(dir.path().join("cubes.py"), CUBES).unwrap();
    let data = dir.path().join("data").display().to_string();
    let out = sweep_in(
        dir.path(),
        &[
            "run", "exec", "--chunks", "7", "--data", &data, "--json", "--", "python3", "cubes.py",
            "{chunk}", "{chunks}",
        ],
        LONG,
    );
    let v = stdout_json(&out);
    assert_every_cube_counted(&v);
    assert_eq!(counter(&v["result"]["counters"]["count"]), "1000000", "{v}");
    assert_eq!(v["nodes"], 1_000_000, "{v}");
    // Chunks 0, 3 and 6 each report one solution, in chunk order.
    assert_eq!(
        v["result"]["solutions"],
        serde_json::json!(["chunk 0", "chunk 3", "chunk 6"]),
        "{v}"
    );
    assert_eq!(v["unverified"], true, "{v}");

    // The same job again answers from the store: every chunk was counted once.
    let again = stdout_json(&sweep_in(
        dir.path(),
        &[
            "run", "exec", "--chunks", "7", "--data", &data, "--json", "--", "python3", "cubes.py",
            "{chunk}", "{chunks}",
        ],
        LONG,
    ));
    assert_eq!(again["result"], v["result"]);
}

/// A compiled program: the same sum of cubes in Rust, built here with the toolchain that builds sweep.
const CUBES_RS: &str = r#"
fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let (chunk, chunks) = (args[0], args[1]);
    let (mut n, mut total) = (0u64, 0u128);
    let mut x = chunk;
    while x < 1_000_000 {
        n += 1;
        total += (x as u128).pow(3);
        x += chunks;
    }
    println!("{{\"nodes\": {n}, \"counters\": {{\"cubes\": \"{total}\"}}}}");
}
"#;

#[test]
fn a_compiled_program_shipped_through_the_embedded_coordinator_counts_exactly() {
    let dir = scratch();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let src = dir.path().join("cubes.rs");
    std::fs::write(&src, CUBES_RS).unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    run_ok(
        Command::new(rustc)
            .args(["-O", "-o"])
            .arg(bin_dir.join("cubes"))
            .arg(&src),
    );
    let data = dir.path().join("data").display().to_string();
    let ship = bin_dir.display().to_string();
    // Run from another directory: the program is found only because it was shipped.
    let elsewhere = scratch();
    let v = stdout_json(&sweep_in(
        elsewhere.path(),
        &[
            "run", "exec", "--chunks", "6", "--ship", &ship, "--data", &data, "--json", "--",
            "./cubes", "{chunk}", "{chunks}",
        ],
        LONG,
    ));
    assert_every_cube_counted(&v);
    assert!(
        v["params"]["ship_digest"]
            .as_str()
            .is_some_and(|d| d.len() == 64),
        "{v}"
    );
}

/// `sweep run exec ARGS --json` with its store in `dir`, which must end with poisoned chunks (exit code 4):
/// its report.
fn run_with_poisoned_chunks(dir: &Path, args: &[&str]) -> Value {
    let data = dir.join("data").display().to_string();
    let run = [&["run", "exec", "--data", &data, "--json"][..], args].concat();
    let out = sweep_in(dir, &run, LONG);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["state"], "done-with-poisoned-chunks", "{v}");
    v
}

#[test]
fn a_failing_chunk_is_retried_then_poisoned_with_its_stderr_and_exit_4() {
    let dir = scratch();
    let script = r#"if [ "$SWEEP_CHUNK" = 2 ]; then echo "chunk two is cursed" >&2; exit 3; fi
echo "{\"nodes\": 1, \"counters\": {\"ok\": 1}}""#;
    let v = run_with_poisoned_chunks(dir.path(), &["--chunks", "4", "--", "sh", "-c", script]);
    assert_eq!(counter(&v["result"]["counters"]["ok"]), "3", "{v}");
    let poisoned = v["poisoned_chunks"].as_array().expect("a list");
    assert_eq!(poisoned.len(), 1, "{v}");
    assert_eq!(poisoned[0]["chunk"], 2);
    let error = poisoned[0]["last_error"].as_str().unwrap_or("");
    assert!(
        error.contains("exit status 3") && error.contains("chunk two is cursed"),
        "{error}"
    );
    // Every attempt is on record, each with its error.
    let failures = v["failures"].as_array().expect("a list");
    assert!(failures.len() >= 3, "{v}");
    assert!(failures.iter().all(|f| f["chunk"] == 2), "{v}");

    // Malformed output is a failure too, named as such.
    let v = run_with_poisoned_chunks(
        dir.path(),
        &[
            "--chunks",
            "1",
            "--",
            "sh",
            "-c",
            "echo '{\"nodes\": \"many\"}'",
        ],
    );
    let error = v["poisoned_chunks"][0]["last_error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(error.contains("line") || error.contains("final"), "{error}");
}

/// Steps 0..STEPS of 50 ms each; a checkpoint after every step; starts from SWEEP_RESUME when given and logs
/// where it started, so the test sees that a resumed chunk did not start over.
const STEPPER: &str = r#"
import json, os, sys, time
chunk, log, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = 120
start = int(os.environ.get("SWEEP_RESUME", "0"))
with open(log, "a") as f:
    f.write("%d %d\n" % (chunk, start))
total = 0
for i in range(start, steps):
    time.sleep(0.05)
    total += 1
    print(json.dumps({"progress": 1}), flush=True)
    print(json.dumps({"checkpoint": str(i + 1)}), flush=True)
# The sum over the steps does not depend on where the chunk resumed.
print(json.dumps({"nodes": steps, "counters": {"steps": steps, "weight": str(sum(range(steps)) * (chunk + 1))}}))
"#;

#[test]
fn a_killed_worker_s_chunk_resumes_elsewhere_from_its_checkpoint_and_leaves_no_orphan() {
    let mut c = Cluster::start_with_ttl(0, 1, 1_000);
    let prog = c.dir.path().join("stepper.py");
    std::fs::write(&prog, STEPPER).unwrap();
    let log = c.dir.path().join("starts.log");
    let token = format!(
        "tok{}x{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    let prog_s = prog.display().to_string();
    let log_s = log.display().to_string();
    c.add_worker_with(&["--allow-exec"]);
    let job = c.submit(&[
        "exec", "--chunks", "1", "--", "python3", &prog_s, "{chunk}", &log_s, &token,
    ]);
    // Wait until the coordinator holds a checkpoint past the start, then kill the worker as a crash would.
    c.wait_until(job, LONG, |s| s["checkpoints"].as_u64().unwrap_or(0) >= 1);
    assert!(!processes_with(&token).is_empty(), "the program runs");
    c.workers[0].kill9();
    // The program dies with its worker (parent-death signal): no orphan keeps computing.
    wait_for_no_process(
        "the program to die with its worker",
        Duration::from_secs(10),
        &token,
    );
    c.add_worker_with(&["--allow-exec"]);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    assert_eq!(counter(&res["result"]["counters"]["steps"]), "120", "{res}");
    assert_eq!(
        counter(&res["result"]["counters"]["weight"]),
        (0..120).sum::<u64>().to_string(),
        "{res}"
    );
    let starts = std::fs::read_to_string(&log).unwrap();
    let starts: Vec<u64> = starts
        .lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(starts.len(), 2, "one start, one resume: {starts:?}");
    assert_eq!(starts[0], 0);
    assert!(
        starts[1] > 0,
        "the second attempt resumed from a checkpoint: {starts:?}"
    );
    let status = c.status(job);
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
    assert_eq!(
        status["checkpoints"], 0,
        "a done chunk's checkpoint is dropped: {status}"
    );
}

#[test]
fn only_workers_with_allow_exec_run_programs_and_shipped_files_reach_them() {
    let mut c = Cluster::start(0, 2);
    // Without --allow-exec the worker never gets an exec chunk, however long it waits.
    c.add_worker_with(&["--memory", "3G"]);
    let src = scratch();
    std::fs::write(src.path().join("cubes.py"), CUBES).unwrap();
    let ship = src.path().display().to_string();
    let job = c.submit(&[
        "exec", "--chunks", "5", "--ship", &ship, "--", "python3", "cubes.py", "{chunk}",
        "{chunks}",
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let s = c.status(job);
    assert_eq!(
        (s["chunks_done"].as_u64(), s["chunks_leased"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(s["unverified"], true, "{s}");
    // Status says why the job waits, and the worker shows the memory it was given and that it runs no programs.
    assert!(
        s["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("no live worker runs `exec` chunks")),
        "{s}"
    );
    let workers = stdout_json(&c.sweep(&["workers", "--json"]));
    assert_eq!(
        workers["workers"][0]["memory_bytes"],
        3u64 << 30,
        "{workers}"
    );
    assert_eq!(
        workers["workers"][0]["containment"], "no programs (no --allow-exec)",
        "{workers}"
    );
    let text = String::from_utf8_lossy(&c.sweep(&["workers"]).stdout).to_string();
    assert!(text.contains("3.0 GiB"), "{text}");
    // The files travel through the coordinator: the original may be gone by the time a worker runs them.
    drop(src);
    let cache = c.dir.path().join("cache");
    let cache_s = cache.display().to_string();
    c.add_worker_with(&["--allow-exec", "--cache", &cache_s]);
    let res = c.wait_results(job, LONG);
    assert_every_cube_counted(&res);
    assert!(
        std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0) >= 1,
        "the shipped archive is cached by digest"
    );
    // `sweep status` says why the answer needs care.
    let text = c.sweep(&["status"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("unverified"));
}

/// Submits an `exec` job of `chunks` chunks, each `sh -c script`, given 1 s to stop when asked to.
fn submit_script(c: &Cluster, chunks: &str, script: &str) -> u64 {
    c.submit(&[
        "exec",
        "--chunks",
        chunks,
        "--grace-secs",
        "1",
        "--",
        "sh",
        "-c",
        script,
    ])
}

#[test]
fn cancelled_and_drained_programs_leave_no_process_behind() {
    let mut c = Cluster::start(0, 2);
    c.add_worker_with(&["--allow-exec"]);
    let token = format!(
        "77{}.{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() % 1000
    );
    // The program starts a grandchild: cancelling must reach the whole group, not just the direct child.
    let script = format!("sleep {token} & sleep {token}; wait");
    let job = submit_script(&c, "4", &script);
    wait_for_processes("two programs and their grandchildren", LONG, &token, 4);
    c.sweep_ok(&["cancel", &job.to_string()]);
    wait_for_no_process(
        "the cancelled programs to stop",
        Duration::from_secs(20),
        &token,
    );

    // Draining (SIGTERM to the worker) stops the running programs and hands their chunks back.
    let job = submit_script(&c, "2", &script);
    wait_for_processes("the programs of the second job", LONG, &token, 4);
    c.workers[0].terminate();
    assert!(
        processes_with(&token).is_empty(),
        "no program outlives its worker"
    );
    let s = c.status(job);
    assert_eq!(s["chunks_done"], 0, "{s}");
    assert_eq!(
        s["state"], "running",
        "the chunks went back, not failed: {s}"
    );
}

/// A program that saves a checkpoint at once and then runs on: the coordinator must hold that state well
/// before the next regular heartbeat (a quarter of the 30 s lease), so that a crash loses at most a few
/// seconds of its work, as `docs/your-own-space.md` promises.
#[test]
fn a_checkpoint_reaches_the_coordinator_within_seconds_with_the_default_lease() {
    let mut c = Cluster::start_with_ttl(0, 1, 30_000);
    c.add_worker_with(&["--allow-exec"]);
    let job = c.submit(&[
        "exec",
        "--chunks",
        "1",
        "--",
        "sh",
        "-c",
        r#"echo '{"checkpoint": "early"}'; sleep 20; echo '{"nodes": 1}'"#,
    ]);
    let running = c.wait_until(job, LONG, |s| s["chunks_leased"].as_u64().unwrap_or(0) >= 1);
    let started = Instant::now();
    // The worker sends a new state at most every RESUME_STATE_INTERVAL (3 s); 7.5 s would be the heartbeat.
    c.wait_until(job, Duration::from_secs(6), |s| {
        s["checkpoints"].as_u64().unwrap_or(0) >= 1
    });
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the checkpoint took {:?} (status when running: {running})",
        started.elapsed()
    );
    c.sweep_ok(&["cancel", &job.to_string()]);
}

/// `--max-attempts 1` on the job: each failing chunk is poisoned at its first failure, not after the
/// coordinator's three, and the report says how many attempts the job had.
#[test]
fn a_job_with_one_attempt_per_chunk_fails_after_one_attempt_each() {
    let dir = scratch();
    let v = run_with_poisoned_chunks(
        dir.path(),
        &[
            "--max-attempts",
            "1",
            "--chunks",
            "2",
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
    );
    assert_eq!(v["max_attempts"], 1, "{v}");
    let poisoned = v["poisoned_chunks"].as_array().expect("a list");
    assert_eq!(poisoned.len(), 2, "{v}");
    assert!(poisoned.iter().all(|p| p["attempts"] == 1), "{v}");
    let failures = v["failures"].as_array().expect("a list");
    let mut chunks: Vec<u64> = failures
        .iter()
        .filter_map(|f| f["chunk"].as_u64())
        .collect();
    chunks.sort_unstable();
    assert_eq!(chunks, vec![0, 1], "one failed attempt per chunk: {v}");

    // Zero attempts is refused before anything runs.
    let out = sweep_in(
        dir.path(),
        &[
            "run",
            "exec",
            "--max-attempts",
            "0",
            "--chunks",
            "1",
            "--",
            "true",
        ],
        LONG,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `sweep ARGS` in `dir`; returns its exit code, its stderr and how long it took.
fn timed(dir: &Path, args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = sweep_in(dir, args, LONG);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stderr, took)
}

/// A program that cannot start is refused at once, with exit code 2 and why, instead of failing every attempt
/// of every chunk: nothing is stored, submitted or run.
#[test]
fn a_program_that_cannot_start_is_refused_before_any_chunk_runs() {
    let dir = scratch();
    let data = dir.path().join("data");
    let data_s = data.display().to_string();
    let (code, stderr, took) = timed(
        dir.path(),
        &[
            "run",
            "exec",
            "--chunks",
            "1000",
            "--data",
            &data_s,
            "--",
            "/no/such/program",
            "{chunk}",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot start the program `/no/such/program`")
            && stderr.contains("does not exist"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(!data.exists(), "no store was made");

    // A file without its executable bit, from the directory `run` was started in; a name not on PATH.
    std::fs::write(dir.path().join("notes.sh"), "echo hi\n").unwrap();
    let (code, stderr, _) = timed(
        dir.path(),
        &[
            "run",
            "exec",
            "--chunks",
            "3",
            "--data",
            &data_s,
            "--",
            "./notes.sh",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not executable"), "{stderr}");
    let (code, stderr, _) = timed(
        dir.path(),
        &[
            "solve",
            "exec",
            "--chunks",
            "5",
            "--",
            "no-such-program-anywhere",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("`no-such-program-anywhere`") && stderr.contains("not found on PATH"),
        "{stderr}"
    );

    // `submit`: the program may exist on the workers only, so this machine only warns (and then cannot reach
    // the coordinator on the discard port); a shipped file decides it everywhere, so that one is refused.
    let nowhere = "http://127.0.0.1:9";
    let (code, stderr, _) = timed(
        dir.path(),
        &[
            "submit",
            "exec",
            "--chunks",
            "1000",
            "--coordinator",
            nowhere,
            "--",
            "/no/such/program",
        ],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("warning: the program `/no/such/program` cannot start on this machine"),
        "{stderr}"
    );
    let notes = dir.path().join("notes.sh").display().to_string();
    let (code, stderr, _) = timed(
        dir.path(),
        &[
            "submit",
            "exec",
            "--chunks",
            "2",
            "--ship",
            &notes,
            "--coordinator",
            nowhere,
            "--",
            "./notes.sh",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not executable"), "{stderr}");
}
