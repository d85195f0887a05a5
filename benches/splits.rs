//! Work follows the idle threads: benchmarks of live splitting, run with `cargo bench --bench splits` (release
//! build of the real `sweep` binary; `SWEEP_BENCH_BIN` names another build to compare side by side).
//!
//! 1. One chunk against the default chunking (`SWEEP_BENCH_ONLY=chunks`): `sweep run star --points 13
//!    --count-only` and `sweep run primes --below 2000000000` with `--chunks 1` and with the space's default, on
//!    2 threads, alternated `SWEEP_BENCH_ROUNDS` (default 3) times; the wall times, their ratio, and the idle
//!    thread-seconds of each run (threads x wall time - the CPU time the process used: a thread with nothing to
//!    run shows here). `SWEEP_BENCH_STAR_POINTS` (default 13) sizes the star job.
//! 2. A heavy-tailed job (`SWEEP_BENCH_ONLY=tail`): an `exec` job of 64 chunks whose chunk 0 has 50 times the
//!    items of the others (the median), each item a 10 ms sleep, run by one worker of 64 threads with
//!    `--splits`; its wall time against the work divided over the threads (the best any schedule can do), and,
//!    with `SWEEP_BENCH_TAIL_BASELINE=1`, the same job without `--splits`, which ends with its largest chunk.
//!    `SWEEP_BENCH_TAIL_ITEMS` (default 200) is the median chunk's items.

use std::process::Command;
use std::time::Instant;

use sweep_testkit::process::assert_success;

fn sweep_bin() -> String {
    std::env::var("SWEEP_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sweep").to_string())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs `sweep args` to the end; its wall time, the CPU seconds it (and its children) used, and its JSON answer.
fn run(args: &[String]) -> (f64, f64, serde_json::Value) {
    let before = children_cpu();
    let t = Instant::now();
    let out = Command::new(sweep_bin())
        .args(args)
        .output()
        .expect("sweep runs");
    let wall = t.elapsed().as_secs_f64();
    assert_success(&out, &format!("sweep {args:?}"));
    let json = serde_json::from_slice(&out.stdout).expect("a JSON answer");
    (wall, children_cpu() - before, json)
}

/// CPU seconds (user and system) of every child waited for so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

fn chunks() {
    let rounds = env_or("SWEEP_BENCH_ROUNDS", 3);
    let points = env_or("SWEEP_BENCH_STAR_POINTS", 13).to_string();
    let jobs: [(&str, Vec<&str>, &str); 2] = [
        (
            "star",
            vec!["star", "--points", &points, "--count-only"],
            "unique",
        ),
        ("primes", vec!["primes", "--below", "2000000000"], "primes"),
    ];
    let dir = tempfile::tempdir().expect("scratch dir");
    for (name, space, answer) in jobs {
        let (mut one, mut default) = (Vec::new(), Vec::new());
        let (mut idle_one, mut idle_default) = (Vec::new(), Vec::new());
        let mut answers = Vec::new();
        for i in 0..rounds {
            for chunked in [false, true] {
                let data = dir.path().join(format!("{name}-{i}-{chunked}"));
                let mut args: Vec<String> = vec!["run".into()];
                args.extend(space.iter().map(|s| s.to_string()));
                if !chunked {
                    args.extend(["--chunks".into(), "1".into()]);
                }
                args.extend(
                    ["--threads", "2", "--json", "--no-progress", "--data"].map(String::from),
                );
                args.push(data.to_string_lossy().into_owned());
                let (wall, cpu, json) = run(&args);
                let idle = (2.0 * wall - cpu).max(0.0);
                answers.push(json["result"][answer].clone());
                if chunked {
                    default.push(wall);
                    idle_default.push(idle);
                } else {
                    one.push(wall);
                    idle_one.push(idle);
                    println!(
                        "  {name} --chunks 1: {} slots, {} pieces",
                        json["chunks_total"], json["pieces"]
                    );
                }
            }
        }
        assert!(
            answers.windows(2).all(|w| w[0] == w[1]),
            "{name}: runs disagree: {answers:?}"
        );
        let (o, d) = (median(one.clone()), median(default.clone()));
        println!(
            "{name} ({}), 2 threads, {rounds} rounds alternated",
            space.join(" ")
        );
        println!("  --chunks 1   median {o:.2} s  {one:.2?}  idle thread-s {idle_one:.2?}");
        println!("  default      median {d:.2} s  {default:.2?}  idle thread-s {idle_default:.2?}");
        println!("  one / default  {:.3}", o / d);
    }
}

/// A program whose chunk 0 has 50 times the items of the others, each item a 10 ms wait, that splits as the
/// guide's `count.py` does (the upper half of what is left, while 8 items are left). In bash, whose start costs
/// a few ms of CPU: a simulated cluster of 64 threads on 2 cores must not be measuring interpreter starts. The
/// wait is `read -t`, which also notices a split request at once; without `--splits` stdin is empty and the
/// wait is `sleep`.
const TAIL_SH: &str = r#"
chunk=$1 chunks=$2 median=$3
items=$median
if [ "$chunk" = 0 ]; then items=$((50 * median)); fi
read lo hi x n <<< "${SWEEP_RESUME:-0 $items 0 0}"
while [ "$x" -lt "$hi" ]; do
  read -t 0.01 line
  got=$?
  if [ "$got" = 0 ]; then
    if [ "$line" = split ] && [ $((hi - x)) -ge 8 ]; then
      mid=$((x + (hi - x) / 2))
      printf '{"split": {"kept": "%s %s %s %s", "given": "%s %s %s 0"}}\n' "$lo" "$mid" "$x" "$n" "$mid" "$hi" "$mid"
      hi=$mid
    else
      printf '{"split": null}\n'
    fi
  elif [ "$got" -lt 128 ]; then
    sleep 0.01
  fi
  x=$((x + 1))
  n=$((n + 1))
done
printf '{"nodes": %s, "counters": {"items": %s}, "solutions": []}\n' "$n" "$n"
"#;

fn tail() {
    let median_items = env_or("SWEEP_BENCH_TAIL_ITEMS", 200);
    let threads = 64u64;
    let chunks = 64u64;
    let dir = tempfile::tempdir().expect("scratch dir");
    let program = dir.path().join("tail.sh");
    std::fs::write(&program, TAIL_SH).expect("write the program");
    let total_items = (chunks - 1 + 50) * median_items;
    let ideal = total_items as f64 * 0.01 / threads as f64;
    let mut modes = vec![true];
    if env_or("SWEEP_BENCH_TAIL_BASELINE", 0) != 0 {
        modes.push(false);
    }
    println!(
        "heavy tail: exec, {chunks} chunks of {median_items} items (chunk 0: {}), 10 ms each, 1 worker x {threads} threads",
        50 * median_items
    );
    println!("  work / threads  {ideal:.2} s");
    for splits in modes {
        let data = dir.path().join(format!("d-{splits}"));
        let mut args: Vec<String> = ["run", "exec", "--chunks", &chunks.to_string()]
            .map(String::from)
            .to_vec();
        args.extend(["--threads".into(), threads.to_string()]);
        if splits {
            args.push("--splits".into());
        }
        args.extend(["--json", "--no-progress", "--data"].map(String::from));
        args.push(data.to_string_lossy().into_owned());
        args.extend(["--", "/bin/bash"].map(String::from));
        args.push(program.to_string_lossy().into_owned());
        args.extend(["{chunk}", "{chunks}"].map(String::from));
        args.push(median_items.to_string());
        let (wall, _, json) = run(&args);
        assert_eq!(
            json["result"]["counters"]["items"]
                .to_string()
                .trim_matches('"'),
            total_items.to_string(),
            "every item once: {json}"
        );
        let what = if splits { "--splits" } else { "no splits" };
        println!(
            "  {what:<10} {wall:.2} s = {:.2} x work/threads  ({} pieces)",
            wall / ideal,
            json["pieces"]
        );
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let only = std::env::var("SWEEP_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "chunks" {
        chunks();
    }
    if only.is_empty() || only == "tail" {
        tail();
    }
}
