//! Engine benchmarks, run with `cargo bench --bench engine` (release build of the real `sweep` binary):
//!
//! 1. Overhead: `sweep run` (embedded coordinator, sled store, workers over loopback gRPC) against `sweep solve`
//!    (the same chunks on a rayon pool in-process), alternated in one invocation so machine noise hits both.
//! 2. Coordinator throughput: a standalone coordinator, several worker processes and a job of many tiny chunks;
//!    durable completions per second (every acknowledged completion was flushed to sled first), the
//!    coordinator's peak memory, and the time it takes to load its store and serve again after a SIGKILL half-way.
//!
//! 3. `exec`: a job of many chunks of a trivial program (chunks per second of one worker, against spawning the
//!    same program as fast as possible from a plain loop on as many threads: the floor), and a CPU-heavy program
//!    under `sweep run exec` against the same program run alone on the same chunks, two at a time.
//!
//! `SWEEP_BENCH_ROUNDS` (default 3) sets the rounds of parts 1 and 3; `SWEEP_BENCH_CHUNKS` (default 100000) and
//! `SWEEP_BENCH_WORKERS` (default 4) shape part 2, and `SWEEP_BENCH_JOBS` (default 1) keeps that many jobs alive
//! in it (the others of `SWEEP_BENCH_JOB_CHUNKS`, default 100, chunks each, submitted after the big one and all
//! waited for: the cost of a lease decision among many jobs); `SWEEP_BENCH_ONLY=overhead|throughput|exec` runs one part; `SWEEP_BENCH_EXEC_CHUNKS` (default 10000) sizes the
//! trivial exec job.
//! The million-chunk figures: `SWEEP_BENCH_ONLY=throughput SWEEP_BENCH_CHUNKS=1000000 cargo bench --bench engine`.
//!
//! 4. A large `exec` job, only with `SWEEP_BENCH_ONLY=large`: one job of `SWEEP_BENCH_LARGE_CHUNKS` (default
//!    100,000,000) chunks of `/bin/echo` its final line, run by one worker for `SWEEP_BENCH_LARGE_SECS` (default 60) seconds; the
//!    coordinator's memory once the job is submitted and while it runs, a SIGKILL, the time to load the store
//!    and serve again, the memory after, and chunks completed after the restart (none lost, none twice).
//!
//! 5. A replicated coordinator, only with `SWEEP_BENCH_ONLY=replicated`: the throughput job (part 2's sizes) on
//!    a single coordinator and on three members on this machine, alternated `SWEEP_BENCH_ROUNDS` times, each run
//!    with one SIGKILL of its coordinator (the group's leader) half-way; durable completions per second of both,
//!    their ratio, and how long clients went unserved after each kill (`SWEEP_BENCH_KILL=0`: no kill).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sweep_testkit::process::{run_ok, worker_command};

/// The binary under test: this build, or `SWEEP_BENCH_BIN` (to compare two builds side by side).
fn sweep_bin() -> String {
    std::env::var("SWEEP_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sweep").to_string())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn timed(args: &[&str]) -> f64 {
    let t = Instant::now();
    run_ok(Command::new(sweep_bin()).args(args));
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

/// Starts a coordinator on `store`, at `listen`; returns it and its URL once it is serving (after it has loaded
/// the whole store: the listening line is printed only then).
fn start_coordinator(store: &std::path::Path, listen: &str) -> (std::process::Child, String) {
    start_coordinator_with(store, listen, &[])
}

/// A coordinator on a new store in a scratch directory, on a free port: the directory (removed when dropped),
/// the store's path (to start it again), the coordinator and its URL.
fn scratch_coordinator() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::process::Child,
    String,
) {
    let dir = tempfile::tempdir().expect("scratch dir");
    let store = dir.path().join("store");
    let (coord, url) = start_coordinator(&store, "127.0.0.1:0");
    (dir, store, coord, url)
}

/// A coordinator (or, with `--peers` in `extra`, a member) on `listen`, and the URL it printed.
fn start_coordinator_with(
    store: &std::path::Path,
    listen: &str,
    extra: &[&str],
) -> (std::process::Child, String) {
    let mut coord = Command::new(sweep_bin())
        .args(["coordinator", "--listen", listen, "--data"])
        .arg(store)
        .args(extra)
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
            .unwrap_or_else(|| panic!("address line, got {line:?}"))
    );
    (coord, url)
}

fn status(url: &str) -> serde_json::Value {
    let out = Command::new(sweep_bin())
        .args(["status", "1", "--json", "--coordinator", url])
        .output()
        .expect("status");
    match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(v) => v["jobs"][0].clone(),
        Err(_) => {
            // Counted as no progress this time; said once per failure so a run that never kills says why.
            eprintln!(
                "status failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            serde_json::Value::Null
        }
    }
}

/// A process's peak resident memory, in MB.
fn peak_rss_mb(pid: u32) -> u64 {
    status_mb(pid, "VmHWM:")
}

/// A process's resident memory now, in MB.
fn rss_mb(pid: u32) -> u64 {
    status_mb(pid, "VmRSS:")
}

/// A memory field of `/proc/PID/status` (in kB there), in MB; 0 if it cannot be read.
fn status_mb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// Durable completions per second for a job of many tiny chunks, the coordinator's peak memory, and the time a
/// coordinator SIGKILLed half-way takes to load its store and serve again.
fn throughput() {
    let chunks = env_or("SWEEP_BENCH_CHUNKS", 100_000);
    let workers = env_or("SWEEP_BENCH_WORKERS", 4);
    let (_dir, store, mut coord, url) = scratch_coordinator();
    let jobs = env_or("SWEEP_BENCH_JOBS", 1).max(1);
    let job_chunks = env_or("SWEEP_BENCH_JOB_CHUNKS", 100);
    let total = chunks + (jobs - 1) * job_chunks;
    let mut killed_at = None;
    let mut resume_s = 0.0;
    let mut rss_before_kill = 0;
    let (secs, done) = drive(&url, chunks, workers, jobs, job_chunks, |done_chunks| {
        // Half-way: SIGKILL the coordinator and time its restart on the same store and address.
        rss_before_kill = peak_rss_mb(coord.id());
        let _ = coord.kill();
        let _ = coord.wait();
        killed_at = Some(done_chunks);
        let t = Instant::now();
        let listen = url.trim_start_matches("http://").to_string();
        let (c, _) = start_coordinator(&store, &listen);
        resume_s = t.elapsed().as_secs_f64();
        coord = c;
    });
    let rss_after = peak_rss_mb(coord.id());
    let _ = coord.kill();
    let _ = coord.wait();
    let disk_mb = dir_size(&store) / (1 << 20);
    assert_eq!(done["completions"], chunks, "{done}");
    println!("throughput: {chunks} chunks, {workers} workers x 1 thread on loopback");
    if jobs > 1 {
        println!(
            "  with {} other jobs of {job_chunks} chunks alive: {total} chunks in all",
            jobs - 1
        );
    }
    println!(
        "  {secs:.2} s including one coordinator SIGKILL + restart, {:.0} durable completions/s",
        total as f64 / secs,
    );
    println!(
        "  coordinator peak RSS {rss_before_kill} MB before the kill, {rss_after} MB after the restart; store {disk_mb} MB"
    );
    if let Some(at) = killed_at {
        println!("  SIGKILLed at {at} done chunks; restart loaded the store and served again in {resume_s:.2} s");
    }
}

/// The throughput job against `url` (one URL or members' URLs): the star job of `chunks` tiny chunks and
/// `jobs - 1` others of `job_chunks`, `workers` worker processes of one thread, `kill` called once when half
/// the chunks are done. Returns the seconds from the workers' start until every job is done, and the big
/// job's final status (its completions checked: every chunk counted once).
fn drive(
    url: &str,
    chunks: u64,
    workers: u64,
    jobs: u64,
    job_chunks: u64,
    mut kill: impl FnMut(u64),
) -> (f64, serde_json::Value) {
    let submit = |n: u64| {
        let n = n.to_string();
        run_ok(
            Command::new(sweep_bin())
                .args([
                    "submit", "star", "--points", "5", "--method", "brute", "--chunks", &n,
                ])
                .args(["--coordinator", url, "--json"]),
        );
    };
    submit(chunks);
    for _ in 1..jobs {
        submit(job_chunks);
    }
    let started = Instant::now();
    let mut ws: Vec<_> = (0..workers)
        .map(|i| {
            worker_command(sweep_bin(), url, 1, &format!("bench{i}"))
                .args(["--prefetch", "64"])
                .spawn()
                .expect("start worker")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut killed = false;
    let done = loop {
        let st = status(url);
        if st["state"] == "done" {
            break st;
        }
        let done_chunks = st["chunks_done"].as_u64().unwrap_or(0);
        if !killed && done_chunks >= chunks / 2 {
            killed = true;
            kill(done_chunks);
        }
        assert!(
            Instant::now() < deadline,
            "throughput job did not finish: {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // Every other job too: which of them ends first is the scheduler's choice, the total is not.
    while jobs > 1 && !all_done(url, jobs) {
        assert!(Instant::now() < deadline, "the other jobs did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    let secs = started.elapsed().as_secs_f64();
    for w in &mut ws {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert_eq!(done["completions"], chunks, "{done}");
    (secs, done)
}

/// Whether all `jobs` jobs are done (`sweep status --json`; a failed status counts as not yet).
fn all_done(url: &str, jobs: u64) -> bool {
    let Ok(out) = Command::new(sweep_bin())
        .args(["status", "--json", "--coordinator", url])
        .output()
    else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return false;
    };
    let list = v["jobs"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    list.len() as u64 == jobs && list.iter().all(|j| j["state"] == "done")
}

fn dir_size(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|d| {
            d.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run only when benchmarking.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // SWEEP_BENCH_ONLY=overhead|throughput runs one part.
    let only = std::env::var("SWEEP_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "overhead" {
        overhead();
    }
    if only.is_empty() || only == "throughput" {
        throughput();
    }
    if only.is_empty() || only == "exec" {
        exec();
    }
    if only == "large" {
        large();
    }
    if only == "replicated" {
        replicated();
    }
}

/// Part 5 (see the module doc): the throughput job on a single coordinator and on three members on this
/// machine, alternated `SWEEP_BENCH_ROUNDS` times; each run SIGKILLs its coordinator (the single one is
/// restarted; the group's leader is replaced by an election, then restarted as a follower) half-way.
fn replicated() {
    let rounds = env_or("SWEEP_BENCH_ROUNDS", 3);
    let chunks = env_or("SWEEP_BENCH_CHUNKS", 100_000);
    let workers = env_or("SWEEP_BENCH_WORKERS", 4);
    // SWEEP_BENCH_KILL=0: no kill, the steady state alone.
    let kill = env_or("SWEEP_BENCH_KILL", 1) != 0;
    let mut single = Vec::new();
    let mut group = Vec::new();
    let mut outages = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (_dir, store, mut coord, url) = scratch_coordinator();
        let mut outage = 0.0;
        let (secs, _) = drive(&url, chunks, workers, 1, 0, |_| {
            if !kill {
                return;
            }
            let _ = coord.kill();
            let _ = coord.wait();
            let t = Instant::now();
            let (c, _) = start_coordinator(&store, url.trim_start_matches("http://"));
            coord = c;
            wait_serving(&url);
            outage = t.elapsed().as_secs_f64();
        });
        let _ = coord.kill();
        let _ = coord.wait();
        single.push(chunks as f64 / secs);
        outages.0.push(outage);

        let dir = tempfile::tempdir().expect("scratch dir");
        let listens: Vec<String> = (0..3)
            .map(|_| {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free port")
                    .port();
                format!("127.0.0.1:{port}")
            })
            .collect();
        let list = listens
            .iter()
            .map(|l| format!("http://{l}"))
            .collect::<Vec<_>>()
            .join(",");
        let start = |i: usize| {
            let data = dir.path().join(format!("member{}", i + 1));
            let id = (i + 1).to_string();
            start_coordinator_with(&data, &listens[i], &["--peers", &list, "--id", &id]).0
        };
        let mut members: Vec<std::process::Child> = (0..3).map(start).collect();
        wait_serving(&list);
        let mut outage = 0.0;
        let (secs, _) = drive(&list, chunks, workers, 1, 0, |_| {
            if !kill {
                return;
            }
            let Some(leader) = leader_of(&list) else {
                eprintln!("no leader to kill");
                return;
            };
            let _ = members[leader].kill();
            let _ = members[leader].wait();
            let t = Instant::now();
            wait_serving(&list);
            outage = t.elapsed().as_secs_f64();
            members[leader] = start(leader);
        });
        for m in &mut members {
            let _ = m.kill();
            let _ = m.wait();
        }
        group.push(chunks as f64 / secs);
        outages.1.push(outage);
        println!(
            "replicated round {}: single {:.0}/s (restart outage {:.2} s), three members {:.0}/s (leader change \
             outage {:.2} s): ratio {:.2}",
            round + 1,
            single[round as usize],
            outages.0[round as usize],
            group[round as usize],
            outages.1[round as usize],
            group[round as usize] / single[round as usize]
        );
    }
    println!(
        "replicated: {chunks} chunks, {workers} workers x 1 thread, {} each run; durable completions/s \
         single {:.0}, three members {:.0} (medians), ratio {:.2}",
        if kill { "one SIGKILL" } else { "no kill" },
        median(single.clone()),
        median(group.clone()),
        median(group) / median(single)
    );
}

/// Waits (at most 60 s) until `sweep status` answers through `url` (one URL or a list).
fn wait_serving(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ok = Command::new(sweep_bin())
            .args(["status", "--json", "--coordinator", url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{url} did not serve within 60 s");
}

/// The index of the member that leads, from `sweep coordinator members --json`.
fn leader_of(list: &str) -> Option<usize> {
    let out = Command::new(sweep_bin())
        .args(["coordinator", "members", "--json", "--coordinator", list])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let id = v.as_array()?.iter().find(|m| m["state"] == "leader")?["id"].as_u64()?;
    Some(id as usize - 1)
}

/// Part 4 (see the module doc): a coordinator holding one job of a hundred million chunks.
fn large() {
    let chunks = env_or("SWEEP_BENCH_LARGE_CHUNKS", 100_000_000);
    let secs = env_or("SWEEP_BENCH_LARGE_SECS", 60);
    let (_dir, store, mut coord, url) = scratch_coordinator();
    let idle_mb = rss_mb(coord.id());
    let t = Instant::now();
    run_ok(
        Command::new(sweep_bin())
            .args(["submit", "exec", "--chunks", &chunks.to_string()])
            .args([
                "--coordinator",
                &url,
                "--json",
                "--",
                "/bin/echo",
                r#"{"nodes": 1}"#,
            ]),
    );
    let submit_s = t.elapsed().as_secs_f64();
    let submitted_mb = rss_mb(coord.id());
    let worker = || {
        worker_command(sweep_bin(), &url, 2, "large")
            .arg("--allow-exec")
            .spawn()
            .expect("start worker")
    };
    let mut w = worker();
    let run_for = |secs: u64| -> u64 {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(500));
        }
        status(&url)["chunks_done"].as_u64().unwrap_or(0)
    };
    let done_before = run_for(secs);
    let running_mb = rss_mb(coord.id());
    let peak_before = peak_rss_mb(coord.id());
    let _ = coord.kill();
    let _ = coord.wait();
    let t = Instant::now();
    let listen = url.trim_start_matches("http://").to_string();
    let (c, _) = start_coordinator(&store, &listen);
    let restart_s = t.elapsed().as_secs_f64();
    coord = c;
    let restarted_mb = rss_mb(coord.id());
    let done_after = run_for(secs / 2);
    let peak_after = peak_rss_mb(coord.id());
    let st = status(&url);
    let _ = w.kill();
    let _ = w.wait();
    let _ = coord.kill();
    let _ = coord.wait();
    let disk_mb = dir_size(&store) / (1 << 20);
    // Completions are counted once: the tally's count is what the done chunks say, checked at every start.
    assert_eq!(st["completions"], st["chunks_done"], "{st}");
    assert!(done_after >= done_before, "{done_before} -> {done_after}");
    println!(
        "large: one exec job of {chunks} chunks of `/bin/echo`, one worker x 2 threads on loopback"
    );
    println!("  submitted in {submit_s:.2} s; coordinator RSS {idle_mb} MB idle, {submitted_mb} MB with the job");
    println!(
        "  after {secs} s: {done_before} chunks done, RSS {running_mb} MB (peak {peak_before} MB); store {disk_mb} MB at the end"
    );
    println!(
        "  SIGKILL, then the store loaded and served again in {restart_s:.2} s at {restarted_mb} MB; \
         {done_after} chunks done {} s later (peak {peak_after} MB)",
        secs / 2
    );
}

/// Runs `argv` for every chunk in `0..chunks` on `threads` threads, as a shell loop or `xargs -P` would: the
/// same program without sweep. Returns the seconds it took.
fn solo(argv: &[String], chunks: u64, threads: u64) -> f64 {
    let next = std::sync::atomic::AtomicU64::new(0);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let chunk = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if chunk >= chunks {
                    break;
                }
                let args: Vec<String> = argv[1..]
                    .iter()
                    .map(|a| {
                        a.replace("{chunk}", &chunk.to_string())
                            .replace("{chunks}", &chunks.to_string())
                    })
                    .collect();
                let out = Command::new(&argv[0])
                    .args(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .output()
                    .expect("run the program");
                assert!(out.status.success(), "{argv:?} failed");
            });
        }
    });
    t.elapsed().as_secs_f64()
}

/// `seq 0 N-1 | RUNNER JOBS_FLAG THREADS -I{chunk} PROGRAM ARGS...`: the same program started by another tool,
/// `xargs -P` or GNU `parallel -j`, which read the chunk numbers from stdin.
fn by_tool(
    runner: &std::path::Path,
    jobs_flag: &str,
    argv: &[String],
    chunks: u64,
    threads: u64,
) -> f64 {
    let mut cmd = Command::new(runner);
    cmd.arg(jobs_flag)
        .arg(threads.to_string())
        .arg("-I{chunk}")
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    feed(cmd, chunks)
}

/// Runs `cmd` with the chunk numbers on its stdin, one per line; returns the seconds it took.
fn feed(mut cmd: Command, chunks: u64) -> f64 {
    use std::io::Write;
    let numbers: String = (0..chunks).map(|c| format!("{c}\n")).collect();
    let t = Instant::now();
    let mut child = cmd.spawn().expect("start the comparison");
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(numbers.as_bytes())
            .expect("feed the chunk numbers");
    }
    let status = child.wait().expect("wait for the comparison");
    assert!(status.success(), "{cmd:?} failed");
    t.elapsed().as_secs_f64()
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}

fn exec() {
    let rounds = env_or("SWEEP_BENCH_ROUNDS", 3);
    let chunks = env_or("SWEEP_BENCH_EXEC_CHUNKS", 10_000);
    let threads = 2u64;
    let dir = tempfile::tempdir().expect("scratch dir");
    let run_exec = |tag: &str, n: u64, cmd: &[String]| {
        let data = dir.path().join(tag);
        let mut args: Vec<String> = [
            "run",
            "exec",
            "--no-progress",
            "--json",
            "--threads",
            "2",
            "--chunks",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(n.to_string());
        args.push("--data".into());
        args.push(data.display().to_string());
        args.push("--".into());
        args.extend(cmd.iter().cloned());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        timed(&refs)
    };
    // The cheapest valid chunk: one process that prints its final line.
    let trivial: Vec<String> = ["/bin/echo", r#"{"nodes": 1, "counters": {"chunks": 1}}"#]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // About a quarter of a second of arithmetic per chunk, the same work alone and under sweep. The interpreter
    // itself, as it names itself: `python3` in PATH may be a version manager's shim, a shell script that runs a
    // dozen processes before Python starts, which makes the chunk a spawning test rather than a CPU-bound one.
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into());
    let heavy: Vec<String> = [
        python.as_str(),
        "-c",
        "import json,sys\nc=int(sys.argv[1]); t=0\nfor i in range(1500000): t=(t*31+i+c)%1000003\nprint(json.dumps({'nodes':1500000,'counters':{'t':t}}))",
        "{chunk}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Enough chunks that the run's start and its last, lone chunk weigh little against its throughput.
    let heavy_chunks = 48;
    let parallel = which("parallel");
    let (mut t_sweep, mut t_floor, mut t_xargs, mut t_parallel, mut h_sweep, mut h_solo) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for i in 0..rounds {
        t_sweep.push(run_exec(&format!("t{i}"), chunks, &trivial));
        t_floor.push(solo(&trivial, chunks, threads));
        t_xargs.push(by_tool(
            std::path::Path::new("xargs"),
            "-P",
            &trivial,
            chunks,
            threads,
        ));
        if let Some(p) = &parallel {
            t_parallel.push(by_tool(p, "-j", &trivial, chunks, threads));
        }
        h_sweep.push(run_exec(&format!("h{i}"), heavy_chunks, &heavy));
        h_solo.push(solo(&heavy, heavy_chunks, threads));
    }
    let (ts, tf, tx, hs, ho) = (
        median(t_sweep),
        median(t_floor),
        median(t_xargs),
        median(h_sweep),
        median(h_solo),
    );
    println!(
        "exec, trivial program, {chunks} chunks, one worker of {threads} threads (median of {rounds}): \
         sweep run {:.2} s = {:.0} chunks/s; xargs -P{threads} {:.2} s = {:.0}/s; a plain spawn loop {:.2} s = \
         {:.0}/s; sweep/xargs {:.2}, sweep/loop {:.2}",
        ts,
        chunks as f64 / ts,
        tx,
        chunks as f64 / tx,
        tf,
        chunks as f64 / tf,
        tx / ts,
        tf / ts
    );
    if !t_parallel.is_empty() {
        let tp = median(t_parallel);
        println!(
            "  GNU parallel -j{threads} {:.2} s = {:.0}/s; sweep/parallel {:.2}",
            tp,
            chunks as f64 / tp,
            tp / ts
        );
    }
    println!(
        "  containment: {}",
        sweep_contain::Facilities::get().summary()
    );
    println!(
        "exec, CPU-heavy program, {heavy_chunks} chunks, {threads} at a time (median of {rounds}): \
         sweep run {:.2} s, alone {:.2} s; throughput under sweep / alone {:.3}",
        hs,
        ho,
        ho / hs
    );
}
