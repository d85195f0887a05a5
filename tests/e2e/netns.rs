//! Fault injection on (simulated) separate hosts: the coordinator and each worker in its own network namespace
//! (see `tests/e2e/support/netns.rs`). Every scenario ends the same way: the distributed answer equals the in-process
//! one, every chunk's result was counted exactly once (`completions == chunks_total`, whatever `duplicates`
//! says), and no chunk is poisoned or missing.
//!
//! Needs root and iproute2 (`scripts/test` installs it); without them every test fails and says what is missing.
//! Fault schedules come from a seeded generator: `SWEEP_FAULT_SEED=<n>` replays one.
//!
//! The default scenarios take about a minute together in release on 2 cores. The long study of sled under
//! repeated SIGKILL is ignored by default:
//! `cargo test --release --test e2e -- --ignored --nocapture`

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::netns::{fault_opts, fault_opts_with, Net, NetCluster, Rng};
use crate::support::{chunks_done, field, is_running, scratch, solve_result, Cluster, Opts};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(300);

/// A job with enough chunks (256) and work (about 8 s of one core) to be interrupted many times: pi(2 * 10^9) on
/// the engine's test space, `primes` (billiard's 9-row proof, of the same cost, before).
const JOB: [&str; 5] = ["primes", "--below", "2000000000", "--chunks", "256"];

/// The uninterrupted answer: the same chunks in-process, no coordinator, no store. Computed once per binary.
fn expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| solve_result(&JOB, LONG))
}

/// The answer is the uninterrupted one and every chunk was counted exactly once; returns the final status.
fn assert_exact(c: &NetCluster, job: u64, expected: &Value, what: &str) -> Value {
    let status = c.wait_done(job, LONG);
    let res = c.results(job);
    assert_eq!(
        &res["result"], expected,
        "{what}: wrong answer; status {status}"
    );
    assert_eq!(status["state"], "done", "{what}: {status}");
    assert_eq!(
        status["chunks_done"], status["chunks_total"],
        "{what}: {status}"
    );
    assert_eq!(field(&status, "chunks_poisoned"), 0, "{what}: {status}");
    // However many reports arrived for a chunk, its result was added once.
    assert_eq!(
        status["completions"], status["chunks_total"],
        "{what}: {status}"
    );
    status
}

/// The coordinator's log without colour codes, so fields can be matched as `worker=w1`.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// A cluster on `net` with `opts` in a scratch directory, running `job`: the cluster and the job's id.
fn started(net: Net, opts: Opts, job: &[&str]) -> (NetCluster, u64) {
    let c = Cluster::start_on(net, opts, scratch());
    let job = c.submit(job);
    (c, job)
}

/// A scenario ended by its job rather than by its own count must still have done `needed` of the `faults` it
/// exists for, or it proved nothing.
fn assert_ran_enough<N: PartialOrd + std::fmt::Display>(done: N, needed: N, faults: &str) {
    assert!(
        done >= needed,
        "the job ended after {done} {faults}; the scenario needs at least {needed}"
    );
}

/// How many results of `worker` the coordinator has logged as duplicates (not counted).
fn duplicates_logged(c: &NetCluster, worker: &str) -> usize {
    let quoted = format!("worker=\"{worker}\"");
    let bare = format!("worker={worker} ");
    plain(&c.coordinator_log())
        .lines()
        .filter(|l| l.contains("duplicate result") && (l.contains(&quoted) || l.contains(&bare)))
        .count()
}

#[test]
fn sigkilled_workers_at_random_moments_are_replaced_and_the_answer_is_exact() {
    let net = Net::new();
    let expected = expected();
    let t0 = Instant::now();
    let mut rng = Rng::from_env("worker kills", 0x5EED_000A);
    let opts = fault_opts_with(3, 1_000);
    let (mut c, job) = started(net, opts, &JOB);
    let mut live: Vec<usize> = (0..c.workers.len()).collect();
    const MAX_KILLS: usize = 8;
    let mut kills = 0;
    while kills < MAX_KILLS {
        std::thread::sleep(rng.millis(100, 800));
        if !is_running(&c.status(job)) {
            break;
        }
        // Any worker, at any moment: mid-chunk, mid-report, or between leases.
        let slot = rng.range(0, live.len() as u64) as usize;
        live[slot] = c.replace_worker(live[slot]);
        kills += 1;
    }
    let status = assert_exact(&c, job, expected, "after worker kills");
    eprintln!(
        "FIGURES worker kills: {kills} SIGKILLs (each replaced) in one job; reissued {} chunks, {} duplicate \
         reports not counted; {:.1} s wall",
        field(&status, "reissued"),
        field(&status, "duplicates"),
        t0.elapsed().as_secs_f64()
    );
    assert_ran_enough(kills, 3, "kills mid-job");
    assert!(
        field(&status, "reissued") >= 1,
        "killed workers' leases were re-issued: {status}"
    );
}

#[test]
fn coordinator_sigkilled_and_restarted_twenty_times_in_one_job_loses_nothing() {
    let net = Net::new();
    // Twice the chunks of the shared job, of the same size. Workers go on computing while the coordinator is
    // down and report what they finished in one batch when it is back, so a cycle acknowledges about ten
    // chunks, not STEP: 256 chunks once ran out after 19 cycles. 512 leave room for about 50.
    const JOB: [&str; 5] = ["primes", "--below", "4000000000", "--chunks", "512"];
    let expected = &solve_result(&JOB, LONG);
    let t0 = Instant::now();
    let mut rng = Rng::from_env("coordinator restarts", 0x5EED_000B);
    let (mut c, job) = started(net, fault_opts(), &JOB);
    // A restart every few acknowledged chunks, at most MAX_RESTARTS of them.
    const STEP: u64 = 3;
    const MAX_RESTARTS: u32 = 24;
    let mut restarts = 0;
    let mut last_done = 0;
    let mut max_down = Duration::ZERO;
    while restarts < MAX_RESTARTS {
        let before = c.wait_until(job, LONG, |s| {
            !is_running(s) || chunks_done(s) >= last_done + STEP
        });
        if !is_running(&before) {
            break;
        }
        // A little jitter, so kills land in different phases of a group commit.
        std::thread::sleep(rng.millis(0, 60));
        let down = Instant::now();
        c.restart_coordinator();
        restarts += 1;
        // Status answers are read from what is flushed: what one said before the kill must still be there.
        let after = c.wait_until(job, Duration::from_secs(60), |_| true);
        max_down = max_down.max(down.elapsed());
        assert!(
            chunks_done(&after) >= chunks_done(&before),
            "restart {restarts} lost acknowledged progress: before {before}, after {after}"
        );
        last_done = chunks_done(&after);
    }
    let status = assert_exact(&c, job, expected, "after coordinator restarts");
    eprintln!(
        "FIGURES coordinator restarts: {restarts} SIGKILL+restart cycles in one job (same --data and address), \
         the last at {last_done} of {} chunks done; reissued {} chunks, {} duplicate reports not counted; \
         longest outage until status answered {:.2} s; {:.1} s wall",
        field(&status, "chunks_total"),
        field(&status, "reissued"),
        field(&status, "duplicates"),
        max_down.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    assert_ran_enough(restarts, 20, "restarts");
}

#[test]
fn partitioned_workers_late_results_are_duplicates_and_never_counted_twice() {
    let net = Net::new();
    // Each partition lasts a lease time and more: this needs a longer job than the others (about 26 s of CPU).
    const JOB: [&str; 5] = ["billiard", "--rows", "10", "--chunks", "256"];
    let expected = &solve_result(&JOB, LONG);
    let t0 = Instant::now();
    let ttl = 1_000;
    let opts = fault_opts_with(2, ttl);
    let (c, job) = started(net, opts, &JOB);
    c.wait_until(job, LONG, |s| chunks_done(s) >= 8);
    const MAX_PARTITIONS: usize = 3;
    let mut partitions = 0;
    for p in 0..MAX_PARTITIONS {
        let s0 = c.status(job);
        // Near the end a worker may hold no lease at all; a partition then proves nothing.
        if !is_running(&s0) || chunks_done(&s0) + 40 > field(&s0, "chunks_total") {
            break;
        }
        // The two workers take turns: each time one is cut off, the other carries the job.
        let victim = p % 2;
        let node = c.worker_host(victim).clone();
        let name = c.workers[victim].name.clone();
        let late_before = duplicates_logged(&c, &name);
        c.net.cut(&node);
        let cut_at = Instant::now();
        // The victim holds a running and a prefetched chunk; it finishes them behind the cut, but cannot
        // heartbeat or report: its leases expire and the chunks go to the other worker.
        let s1 = c.wait_until(job, Duration::from_secs(30), |s| {
            field(s, "reissued") > field(&s0, "reissued")
        });
        // Long enough for the survivor to finish the re-issued chunks first (they are leased before new ones).
        std::thread::sleep(Duration::from_millis(1_500));
        c.net.restore(&node);
        let cut_for = cut_at.elapsed();
        partitions += 1;
        // After the link returns, TCP retransmits and the victim's reporter delivers its late results: the
        // coordinator must answer them DUPLICATE (the chunks are done elsewhere) and count nothing.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut late = duplicates_logged(&c, &name);
        while late == late_before {
            assert!(
                Instant::now() < deadline,
                "partition {partitions}: no late result of {name} was reported as a duplicate within 60 s \
                 of the link's return; coordinator log: {}",
                plain(&c.coordinator_log())
            );
            std::thread::sleep(Duration::from_millis(50));
            late = duplicates_logged(&c, &name);
        }
        let s2 = c.status(job);
        assert_eq!(
            s2["completions"], s2["chunks_done"],
            "partition {partitions}: a late result was counted: {s2}"
        );
        eprintln!(
            "partition {partitions}: {name} cut for {:.1} s; reissued {} -> {}; duplicates {} -> {}, {} of them \
             late results of {name}",
            cut_for.as_secs_f64(),
            field(&s0, "reissued"),
            field(&s1, "reissued"),
            field(&s0, "duplicates"),
            field(&s2, "duplicates"),
            late - late_before,
        );
    }
    let status = assert_exact(&c, job, expected, "after partitions");
    eprintln!(
        "FIGURES partitions: {partitions} link cuts (each > {ttl} ms lease time) in one job; reissued {} chunks; \
         {} late results reported as duplicates and not counted; {:.1} s wall",
        field(&status, "reissued"),
        field(&status, "duplicates"),
        t0.elapsed().as_secs_f64()
    );
    assert_ran_enough(partitions, 2, "partitions mid-job");
}

/// Fills `dir`'s file system with one file until it refuses more; returns the file and its size.
fn fill(dir: &std::path::Path) -> (std::path::PathBuf, u64) {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("create the filler");
    let block = vec![0xA5u8; 64 << 10];
    let mut written = 0u64;
    // Bounded: the tmpfs is far smaller than this.
    while written < (1 << 30) {
        match f.write(&block) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n as u64,
        }
    }
    let _ = f.sync_all();
    (path, written)
}

#[test]
fn a_full_disk_refuses_changes_cleanly_and_the_job_recovers_when_space_returns() {
    let mut net = Net::new();
    let expected = expected();
    let t0 = Instant::now();
    let dir = scratch();
    let mount = net.mount_point(dir.path(), "storefs");
    // Room for the whole job (its outputs, about 10 MB in sled) plus sled's own slack: only the filler fills it.
    net.mount_tmpfs(&mount, 64 << 20);
    let data = mount.join("store");
    let opts = Opts {
        store: Some(data),
        ..fault_opts()
    };
    let mut c = Cluster::start_on(net, opts, dir);
    let job = c.submit(&JOB);
    let before = c.wait_until(job, LONG, |s| chunks_done(s) >= 20);
    let (filler, filled) = fill(&mount);
    // Workers keep reporting, so a group commit soon needs a page the file system no longer has.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !plain(&c.coordinator_log()).contains("store write failed") {
        assert!(
            Instant::now() < deadline,
            "no store write failed within 30 s of filling the disk"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The next group commit cannot be written. New work is refused with a clear, one-line error (exit 3:
    // the coordinator is unavailable for changes), and the process stays up.
    let probe = ["submit", "star", "--points", "5", "--json"];
    let refused = c.sweep(&probe);
    let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
    assert_eq!(
        refused.status.code(),
        Some(3),
        "submit on a full disk: {stderr}"
    );
    assert!(
        stderr.contains("No space left on device") && stderr.lines().count() == 1,
        "the refusal names the cause in one line: {stderr:?}"
    );
    let coordinator = &mut c.coordinator;
    assert!(
        coordinator
            .child
            .try_wait()
            .expect("poll the coordinator")
            .is_none(),
        "the coordinator exited on a full disk"
    );
    // Workers' reports are refused too: nothing is acknowledged that is not stored.
    std::thread::sleep(Duration::from_secs(2));

    // Space returns. The coordinator notices (it probes the store's file system once a second), and replaces
    // itself with a fresh start on the same store, pid and address: memory may have been ahead of disk, so
    // the store is the only state to resume from. No operator, no service manager.
    let pid = c.coordinator.child.id();
    let claimed = c.try_status(job).map(|s| chunks_done(&s));
    std::fs::remove_file(&filler).expect("remove the filler");
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(30);
    let accepted = loop {
        let out = c.sweep(&probe);
        if out.status.success() {
            break freed.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "full disk: 30 s after space returned, submit is still refused: {}; the coordinator logged:\n{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            plain(&c.coordinator_log())
                .lines()
                .rev()
                .take(80)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let coordinator = &mut c.coordinator;
    assert_eq!(coordinator.child.id(), pid, "the same process serves again");
    assert!(
        coordinator
            .child
            .try_wait()
            .expect("poll the coordinator")
            .is_none(),
        "the coordinator exited instead of restarting in place"
    );
    let log = plain(&c.coordinator_log());
    assert!(!log.contains("panicked"), "the coordinator panicked: {log}");
    assert!(
        log.contains("space returned: restarting from the store"),
        "the restart is logged: {log}"
    );
    let after = c.wait_until(job, Duration::from_secs(60), |_| true);
    assert!(
        chunks_done(&after) >= chunks_done(&before),
        "stored progress lost on a full disk: before {before}, after {after}"
    );
    eprintln!(
        "full disk: status claimed {} chunks done while refusing; the store had {} after the restart in place",
        claimed.map_or("nothing (it refused)".to_string(), |n| n.to_string()),
        chunks_done(&after)
    );
    let small = c.submit(&["star", "--points", "5"]);
    let status = assert_exact(&c, job, expected, "after a full disk");
    let small_expected = solve_result(&["star", "--points", "5"], LONG);
    assert_exact(&c, small, &small_expected, "a job submitted after recovery");
    eprintln!(
        "FIGURES full disk: 64 MiB tmpfs filled with {filled} bytes at {} chunks done; refused with exit 3; \
         accepting again {:.1} s after space returned (restart in place) with {} chunks kept; {} duplicate \
         reports not counted; {:.1} s wall",
        chunks_done(&before),
        accepted.as_secs_f64(),
        chunks_done(&after),
        field(&status, "duplicates"),
        t0.elapsed().as_secs_f64()
    );
}

/// sled under repeated SIGKILL during heavy completion traffic (its tracker has open reports of corruption after
/// kill). Each cycle: the durable status, then SIGKILL at a random moment, then a restart on the same store,
/// which must open, keep every completion the status reported, and finish every job with the exact answer.
///
/// `cargo test --release --test e2e -- --ignored --nocapture sled` (SWEEP_SLED_KILLS=N, default 60).
#[test]
#[ignore = "several minutes: cargo test --release --test e2e -- --ignored --nocapture sled"]
fn sled_store_survives_repeated_sigkill_during_heavy_completion_traffic() {
    let net = Net::new();
    let kills_wanted: u32 = std::env::var("SWEEP_SLED_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    // Tiny chunks: each completion is a durable write, so the coordinator spends its time in sled.
    let job_args = [
        "billiard", "--rows", "5", "--method", "brute", "--chunks", "50000",
    ];
    let expected = solve_result(&job_args, LONG);
    let t0 = Instant::now();
    let mut rng = Rng::from_env("sled kills", 0x5EED_000D);
    let opts = Opts {
        workers: 2,
        prefetch: Some(64),
        lease_ttl_ms: 2_000,
        ..fault_opts()
    };
    let mut c = Cluster::start_on(net, opts, scratch());
    let mut jobs = vec![c.submit(&job_args)];
    let mut kills = 0;
    let mut finished = 0;
    let mut max_open = Duration::ZERO;
    let mut acked_at_kills = 0u64;
    let mut losses: Vec<(u32, u64)> = Vec::new();
    while kills < kills_wanted {
        let current = *jobs.last().expect("a job");
        std::thread::sleep(rng.millis(50, 700));
        let Some(before) = c.try_status(current) else {
            panic!("kill {kills}: the coordinator does not answer");
        };
        if !is_running(&before) {
            assert_exact(&c, current, &expected, &format!("job {current}"));
            finished += 1;
            jobs.push(c.submit(&job_args));
            continue;
        }
        acked_at_kills += chunks_done(&before);
        c.kill_coordinator();
        kills += 1;
        let open = Instant::now();
        if let Err(e) = c.try_start_coordinator() {
            // Keep the damaged store for a post-mortem; the scratch directory is removed on return.
            let keep =
                std::env::temp_dir().join(format!("sweep-damaged-store-{}", std::process::id()));
            let _ = std::process::Command::new("cp")
                .args(["-a", &c.store().to_string_lossy(), &keep.to_string_lossy()])
                .status();
            panic!(
                "after SIGKILL {kills} the store did not open (copy kept in {}): {e}",
                keep.display()
            );
        }
        max_open = max_open.max(open.elapsed());
        let after = c.wait_until(current, Duration::from_secs(60), |_| true);
        // Recorded, not asserted at once: whether the answers stay exact after a loss is part of the study.
        if chunks_done(&after) < chunks_done(&before) {
            let lost = chunks_done(&before) - chunks_done(&after);
            eprintln!(
                "SIGKILL {kills}: durable status said {} chunks done, the restarted store has {} ({lost} \
                 acknowledged completions lost)",
                chunks_done(&before),
                chunks_done(&after)
            );
            losses.push((kills, lost));
        }
    }
    for &job in &jobs {
        assert_exact(&c, job, &expected, &format!("job {job}"));
    }
    let lost: u64 = losses.iter().map(|(_, n)| n).sum();
    eprintln!(
        "FIGURES sled: {kills} SIGKILLs during completion traffic; every restart opened the store (slowest start \
         to listening {:.2} s); {} of them lost acknowledged completions ({lost} in all, of {acked_at_kills} \
         reported done at kill time); {} jobs of 50,000 chunks, every answer exact and every chunk counted \
         once ({finished} finished mid-run); {:.1} s wall",
        max_open.as_secs_f64(),
        losses.len(),
        jobs.len(),
        t0.elapsed().as_secs_f64()
    );
    // A durable acknowledgement must survive a crash. This study once reported losses here; they were the
    // status handler's, not sled's: it read memory *after* waiting for the commit, so it counted results
    // staged during the wait that were not durable yet (fixed by `durable_read`). With that fixed, 50 kills
    // lost nothing with sled 0.34.7 flushed per group commit.
    assert!(
        losses.is_empty(),
        "acknowledged completions lost after SIGKILL (kill number, completions lost): {losses:?}"
    );
}

/// A nemesis against a replicated coordinator: three members and two workers, each on a host of its own; a
/// seeded schedule of faults, each one of: SIGKILL the leader (restarted on its directory once another
/// leads), cut the leader off from everyone (it must stop serving, the other two elect a leader; then healed),
/// SIGSTOP a member for a while (then SIGCONT), lose a member with its disk (SIGKILL, its directory deleted,
/// removed from the group, and a new empty member joined on its host under a new id). The first four faults
/// are the four kinds in a seeded order, so even a short run has each. Around every fault, what the group
/// reported done (a durable read: committed by a majority) must still be done; jobs are submitted one after
/// another while faults remain, and every one ends exact, each chunk counted once.
///
/// In `.ci/run`: 6 faults. The long run: `SWEEP_NEMESIS_FAULTS=60 cargo test --release --test e2e -- --ignored
/// --nocapture nemesis`.
fn nemesis(faults: u32, seed: u64) {
    use crate::support::group::Group;

    let net = Net::new();
    let expected = expected();
    let t0 = Instant::now();
    let mut rng = Rng::from_env("replicated coordinator nemesis", seed);
    let opts = fault_opts_with(2, 3_000);
    let mut g = Group::start_on(net, 3, opts, scratch());
    g.wait_leader(None, Duration::from_secs(30));
    let mut jobs = vec![g.submit(&JOB)];
    let (mut kills, mut cuts, mut pauses, mut replaced, mut drops) = (0u32, 0u32, 0u32, 0u32, 0u32);
    const KINDS: u64 = 5;
    let mut first_kinds: Vec<u64> = (0..KINDS).collect();
    for i in (1..first_kinds.len()).rev() {
        let j = rng.range(0, i as u64 + 1) as usize;
        first_kinds.swap(i, j);
    }
    let mut changes: Vec<Duration> = Vec::new();
    let mut acknowledged = 0u64;
    let mut done_faults = 0;
    while done_faults < faults {
        let current = *jobs.last().expect("a job");
        std::thread::sleep(rng.millis(200, 1_500));
        let before = g.wait_until(current, LONG, |_| true);
        if !is_running(&before) {
            assert_exact_group(&g, current, expected);
            jobs.push(g.submit(&JOB));
            continue;
        }
        acknowledged += chunks_done(&before);
        let leader = g.wait_leader(None, Duration::from_secs(30));
        let kind = match first_kinds.get(done_faults as usize) {
            Some(&k) => k,
            None => rng.range(0, KINDS),
        };
        match kind {
            0 => {
                g.kill(leader);
                let at = Instant::now();
                g.wait_leader(Some(leader), Duration::from_secs(30));
                changes.push(at.elapsed());
                g.start_member(leader);
                kills += 1;
            }
            1 => {
                let host = g.host(leader).clone();
                g.net.cut(&host);
                let at = Instant::now();
                g.wait_leader(Some(leader), Duration::from_secs(30));
                changes.push(at.elapsed());
                // The old leader, alone, must have stopped serving: it cannot commit, so it acknowledges
                // nothing, and it says so.
                wait_for_state(
                    &g,
                    leader,
                    |s| s != "leader",
                    "the cut-off leader to step down",
                );
                g.net.restore(&host);
                wait_for_state(
                    &g,
                    leader,
                    |s| s == "follower",
                    "the healed member to follow",
                );
                cuts += 1;
            }
            2 => {
                let victim = rng.range(0, 3) as usize;
                let proc = g.members[victim]
                    .as_ref()
                    .expect("every member runs between faults");
                proc.signal("STOP");
                std::thread::sleep(rng.millis(500, 3_000));
                proc.signal("CONT");
                pauses += 1;
            }
            4 => {
                // A gray partition: the leader's packets dropped, nothing refused. The others elect a leader
                // and the workers, whose calls to the old one run out of time, complete chunks there.
                let host = g.host(leader).clone();
                let others = g.others(leader);
                let done_before = g
                    .status_from(&others, current)
                    .map_or(0, |s| chunks_done(&s));
                g.net.drop_packets(&host);
                let at = Instant::now();
                g.wait_leader(Some(leader), Duration::from_secs(30));
                changes.push(at.elapsed());
                let hold = rng.millis(8_000, 12_000);
                std::thread::sleep(hold.saturating_sub(at.elapsed()));
                let progressed = g
                    .status_from(&others, current)
                    .is_some_and(|s| chunks_done(&s) > done_before || !is_running(&s));
                g.net.pass(&host);
                assert!(
                    progressed,
                    "no chunk completed in {hold:?} while the leader's packets were dropped"
                );
                wait_for_state(
                    &g,
                    leader,
                    |s| s == "follower",
                    "the leader whose packets were dropped to follow",
                );
                drops += 1;
            }
            _ => {
                let victim = rng.range(0, 3) as usize;
                let at = Instant::now();
                let old = g.ids[victim];
                let new = g.replace(victim);
                assert!(
                    new > old,
                    "member {old} replaced by {new}: ids are never reused"
                );
                if victim == leader {
                    changes.push(at.elapsed());
                }
                replaced += 1;
            }
        }
        done_faults += 1;
        let after = g.wait_until(current, Duration::from_secs(60), |_| true);
        assert!(
            chunks_done(&after) >= chunks_done(&before),
            "fault {done_faults} lost acknowledged progress: before {before}, after {after}"
        );
    }
    for &job in &jobs {
        assert_exact_group(&g, job, expected);
    }
    g.assert_one_leader();
    let slowest = changes.iter().max().copied().unwrap_or_default();
    eprintln!(
        "FIGURES nemesis: {done_faults} faults on three members ({kills} leader SIGKILLs, {cuts} leader \
         partitions, {drops} leaders dropping packets, {pauses} SIGSTOPs, {replaced} members lost with their disks and replaced, ids now {:?}); {} jobs of {} chunks, every answer exact and every chunk counted once; \
         {acknowledged} chunks reported done before faults, none lost; leader changes {:?} (slowest {:.2} s); \
         {:.1} s wall",
        g.ids,
        jobs.len(),
        JOB[4],
        changes,
        slowest.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The job ends exact under a group: the uninterrupted answer, every chunk counted once.
fn assert_exact_group(g: &crate::support::group::Group<Net>, job: u64, expected: &Value) {
    let status = g.wait_until(job, LONG, |s| !is_running(s));
    let res = g.results(job);
    assert_eq!(&res["result"], expected, "job {job}: {status}");
    assert_eq!(status["state"], "done", "job {job}: {status}");
    assert_eq!(field(&status, "chunks_poisoned"), 0, "job {job}: {status}");
    assert_eq!(
        status["completions"], status["chunks_total"],
        "job {job}: {status}"
    );
}

/// Waits (at most 30 s) until member `i`'s own view of its state satisfies `pred`.
pub(crate) fn wait_for_state(
    g: &crate::support::group::Group<Net>,
    i: usize,
    pred: impl Fn(&str) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = g.own_view(i);
        if let Some(state) = view.as_ref().and_then(|v| v["state"].as_str()) {
            if pred(state) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: member {} says {view:?}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn replicated_coordinator_nemesis_six_faults() {
    nemesis(6, 0x5EED_0034);
}

#[test]
#[ignore = "several minutes: SWEEP_NEMESIS_FAULTS=60 cargo test --release --test e2e -- --ignored --nocapture nemesis"]
fn replicated_coordinator_nemesis_long() {
    let faults = std::env::var("SWEEP_NEMESIS_FAULTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    nemesis(faults, 0x5EED_0035);
}
