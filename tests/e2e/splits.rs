//! Live splitting under faults: running chunks split into pieces (the idle threads of a worker split its own
//! chunks, and the coordinator asks holders to split when a lease request finds nothing) while workers are
//! SIGKILLed and replaced, the coordinator is SIGKILLed and restarted on its store, and a whole `sweep run` is
//! SIGKILLed and run again. Every kill comes right after the job's `pieces` grew, so splits are in flight: a
//! split answered but not yet durable, a piece leased to a worker that dies, a result held for its split's
//! answer. The answers must still be exactly the unsplit ones, with every slot (plan chunk or piece) counted
//! once (`completions == chunks_total`) and every item examined once (`nodes`).
//!
//! Jobs of one or two plan chunks on more threads than that, so that nearly all the parallelism comes from
//! splits: `primes` (segments), star's backtracking (prefixes) and a program of the user's own (`count.py`
//! from `docs/your-own-space.md`, which splits with `--splits`).

use std::time::Duration;

use serde_json::Value;

use crate::support::{
    field, is_running, resume_run, scratch, scratch_store, spawn_run_threads, stdout_json, sweep,
    Cluster,
};

const LONG: Duration = Duration::from_secs(240);
/// Leases short enough that a killed worker's pieces go back to the others quickly.
const TTL_MS: u64 = 1_000;
/// Time given to the job between two kills, so that it moves on and splits again rather than only restarts.
const BETWEEN_KILLS: Duration = Duration::from_millis(400);

/// pi(2 * 10^9) in two plan chunks: about 8 s of one core, so four threads run it only through pieces.
const PRIMES: [&str; 5] = ["primes", "--below", "2000000000", "--chunks", "2"];
/// pi(2 * 10^9), from the published tables of pi(x) (what `sweep solve` answers, `engine_faults.rs`).
const PI_2E9: u64 = 98_222_287;
const N: u64 = 2_000_000_000;

/// What a test kills, each time the job's pieces have grown.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL the oldest live worker and start a replacement.
    Worker,
    /// SIGKILL the coordinator and start it again on the same store and address.
    Coordinator,
}

/// Runs `kills` in order on `c` while `job` runs, each once the job has more pieces than at the previous kill
/// (a replacement worker gets `worker_args`). Fails if the job ends before every kill has happened: a test
/// whose faults came too late would pass without testing anything.
fn kill_while_splitting(c: &mut Cluster, job: u64, kills: &[Kill], worker_args: &[&str]) {
    // Indices in `c.workers` of the workers still alive, oldest first.
    let mut live: Vec<usize> = (0..c.workers.len()).collect();
    let mut pieces = 0;
    for (done, kill) in kills.iter().enumerate() {
        let s = c.wait_until(job, LONG, |s| field(s, "pieces") > pieces || !is_running(s));
        assert!(
            is_running(&s),
            "the job ended after {done} of the kills {kills:?}: {s}"
        );
        pieces = field(&s, "pieces");
        match kill {
            Kill::Worker => {
                let victim = live.remove(0);
                c.workers[victim].kill9();
                live.push(c.add_worker_with(worker_args));
            }
            Kill::Coordinator => c.restart_coordinator(),
        }
        eprintln!(
            "{kill:?} killed at {pieces} pieces, {} slots",
            s["chunks_total"]
        );
        std::thread::sleep(BETWEEN_KILLS);
    }
}

/// Every slot of a finished job counted exactly once, none poisoned, and some of them pieces.
fn assert_pieces_counted_once(status: &Value) {
    eprintln!("final status: {status}");
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["chunks_poisoned"], 0, "{status}");
    assert!(field(status, "pieces") > 0, "no chunk split: {status}");
    assert_eq!(status["chunks_done"], status["chunks_total"], "{status}");
    assert_eq!(status["completions"], status["chunks_total"], "{status}");
}

#[test]
fn split_primes_survive_killed_workers_and_a_killed_coordinator_and_count_every_integer_once() {
    let mut c = Cluster::start_with_ttl(2, 2, TTL_MS);
    let job = c.submit(&PRIMES);
    kill_while_splitting(
        &mut c,
        job,
        &[Kill::Worker, Kill::Coordinator, Kill::Worker, Kill::Worker],
        &[],
    );
    let res = c.wait_results(job, LONG);
    assert_eq!(res["result"]["primes"], PI_2E9, "{res}");
    // A piece lost or counted twice shows here as integers missing or examined twice.
    assert_eq!(res["nodes"], N, "every integer examined once: {res}");
    assert_pieces_counted_once(&c.status(job));
}

#[test]
fn a_split_star_count_under_kills_equals_the_unsplit_count() {
    let args = ["star", "--points", "12", "--count-only", "--chunks", "1"];
    // One thread: `sweep solve` splits only for idle threads, so this is the chunk run whole.
    let solve = [&["solve"][..], &args, &["--threads", "1", "--json"]].concat();
    let unsplit = stdout_json(&sweep(&solve, &[], LONG));
    assert_eq!(unsplit["result"]["unique"], 396_930, "{unsplit}");
    let mut c = Cluster::start_with_ttl(2, 2, TTL_MS);
    let job = c.submit(&args);
    kill_while_splitting(
        &mut c,
        job,
        &[Kill::Worker, Kill::Coordinator, Kill::Worker],
        &[],
    );
    let res = c.wait_results(job, LONG);
    assert_eq!(
        res["result"]["unique"], unsplit["result"]["unique"],
        "{res}"
    );
    assert_eq!(
        res["result"]["solutions"], unsplit["result"]["solutions"],
        "{res}"
    );
    assert_eq!(res["result"], unsplit["result"], "{res}");
    assert_eq!(res["nodes"], unsplit["nodes"], "{res}");
    assert_pieces_counted_once(&c.status(job));
}

#[test]
fn a_sweep_run_killed_while_pieces_exist_resumes_with_the_exact_answer() {
    // One plan chunk on two threads: the idle thread splits it from the start.
    let args = ["primes", "--below", "500000000", "--chunks", "1"];
    let (_dir, data) = scratch_store();
    let data = data.as_str();
    // Killed once its store holds a piece's record (more records than the plan's one chunk); each try runs
    // longer, and a run killed before its first split is simply resumed by the next.
    let mut records = 0;
    for wait_ms in [700, 1_000, 1_500] {
        let mut run = spawn_run_threads(&args, data, 2);
        std::thread::sleep(Duration::from_millis(wait_ms));
        run.kill9();
        let check = stdout_json(&sweep(
            &["store", "check", "--json", "--data", data],
            &[],
            LONG,
        ));
        assert_eq!(check["problems"], Value::Array(vec![]), "{check}");
        records = field(&check, "chunk_records");
        if records > 1 {
            break;
        }
    }
    assert!(records > 1, "no piece recorded before the kills");
    // The killed run's leases keep their stored deadlines, as a worker that outlived its coordinator would
    // need; `sweep run`'s 30 s lease time passes before the chunk and its pieces run again.
    let out = resume_run(&args, data, LONG);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = stdout_json(&out);
    assert!(stderr.contains("resuming job 1"), "{stderr}");
    assert_eq!(v["job"], 1, "the same job was resumed, not a new one: {v}");
    // pi(5 * 10^8), published.
    assert_eq!(v["result"]["primes"], 26_355_867, "{v}");
    assert_eq!(
        v["nodes"], 500_000_000u64,
        "every integer examined once: {v}"
    );
    assert!(field(&v, "chunks_total") > 1, "the pieces are slots: {v}");
    assert_eq!(v["chunks_done"], v["chunks_total"], "{v}");
    assert_eq!(v["poisoned_chunks"], Value::Array(vec![]), "{v}");
}

/// The `count.py` block of `docs/your-own-space.md`, written into `dir`: the example people copy is the one
/// run here (as `spaces/exec/tests/split.rs` runs it through the contract kit).
fn write_count_py(dir: &std::path::Path) -> std::path::PathBuf {
    let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/your-own-space.md");
    let text = std::fs::read_to_string(guide).expect("the guide is readable");
    let start = text
        .find("```python\n# count.py\n")
        .expect("the guide has a count.py block")
        + "```python\n".len();
    let len = text[start..].find("```").expect("the block ends");
    let path = dir.join("count.py");
    std::fs::write(&path, &text[start..start + len]).expect("count.py written");
    path
}

#[test]
fn a_program_that_splits_survives_a_killed_worker_with_the_exact_answer() {
    let src = scratch();
    let prog = write_count_py(src.path());
    let prog = prog.to_str().expect("a UTF-8 path");
    let mut c = Cluster::start_with_ttl(0, 2, TTL_MS);
    c.add_worker_with(&["--allow-exec"]);
    let job = c.submit(&[
        "exec", "--chunks", "1", "--splits", "--", "python3", prog, "{chunk}", "{chunks}",
    ]);
    kill_while_splitting(&mut c, job, &[Kill::Worker], &["--allow-exec"]);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    // count.py sums x^3 over 0..10^6: (sum of 0..10^6)^2, past 64 bits.
    let sum: u128 = (0..1_000_000u128).sum();
    let cubes = res["result"]["counters"]["cubes"].clone();
    let cubes = cubes
        .as_str()
        .map_or_else(|| cubes.to_string(), str::to_string);
    assert_eq!(cubes, (sum * sum).to_string(), "{res}");
    assert_eq!(res["nodes"], 1_000_000, "every number counted once: {res}");
    assert_pieces_counted_once(&c.status(job));
}
