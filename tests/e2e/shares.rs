//! Fair share with real processes.
//!
//! A small job submitted behind a big one of the same priority gets threads as soon as the big job's running
//! chunks end, instead of after the whole big job (which is what leasing by priority, then age, used to do).
//! And two people of the same priority get half of the threads each, whether one of them has five jobs and
//! the other one.
//!
//! What is asserted is counted in chunks, which other tests running on the same cores do not change much: while
//! the small job runs, the big one completes about as many chunks as it (they share the threads), not
//! thousands; of the chunks two identities complete together, each completes about half. The times and counts
//! are printed; the README quotes them.

use std::time::{Duration, Instant};

use crate::support::{chunks_done, is_running, Cluster};

const LONG: Duration = Duration::from_secs(300);
/// Ten chunks of 10^8 integers each (a few tenths of a second of one core each).
const SMALL: [&str; 5] = ["primes", "--below", "1000000000", "--chunks", "10"];
/// Ten thousand chunks of the same size: hours of work, far longer than these tests; cancelled at their end.
const BIG: [&str; 5] = ["primes", "--below", "1000000000000", "--chunks", "10000"];

#[test]
fn a_small_job_behind_a_big_one_of_the_same_priority_gets_threads_promptly() {
    let c = Cluster::start(1, 2);
    let started = Instant::now();
    let alone = c.submit(&SMALL);
    c.wait_done(alone, LONG);
    let solo = started.elapsed();

    let big = c.submit(&BIG);
    let before = chunks_done(&c.wait_until(big, LONG, |s| chunks_done(s) >= 10));
    let started = Instant::now();
    let small = c.submit(&SMALL);
    let status = c.wait_done(small, LONG);
    let behind = started.elapsed();
    assert_eq!(status["state"], "done", "{status}");
    let big_status = c.status(big);
    let meanwhile = chunks_done(&big_status) - before;
    assert!(
        is_running(&big_status) && chunks_done(&big_status) < 10_000,
        "the big job must still be running for this to say anything: {big_status}"
    );
    eprintln!(
        "10 chunks alone: {:.2} s; behind 10,000 chunks of the same priority: {:.2} s ({:.2}x); \
         the big job completed {meanwhile} chunks meanwhile",
        solo.as_secs_f64(),
        behind.as_secs_f64(),
        behind.as_secs_f64() / solo.as_secs_f64()
    );
    // Sharing the threads, the big job completes about the small one's ten meanwhile, plus the chunks it had
    // running or queued on the worker when the small one arrived (a few per thread); leasing by age made it
    // every chunk the small one waited for, which with 10,000 queued is all of them.
    assert!(
        meanwhile <= 40,
        "the big job completed {meanwhile} chunks while the small one ran"
    );
    c.sweep_ok(&["cancel", &big.to_string()]);
}

/// Chunks B's job completes before the counts are compared: enough that a few chunks in flight at either
/// end of the window move B's fraction by a few hundredths at most.
const B_CHUNKS: u64 = 40;
/// Chunks both complete together after which the counts are compared anyway: a scheduler that gave B's one
/// job a sixth of the threads (one job in six) would take 240 to get B to 40; this ends such a run early,
/// with its fraction, instead of at the time limit.
const MAX_TOTAL: u64 = 160;

/// Identity A submits five jobs, identity B one, all of the same priority and of chunks of the same size, on a
/// worker of two threads: A's jobs together and B's one each complete about half of the chunks. Shares are
/// per identity before they are per job, so B's one job is not one job in six.
#[test]
fn two_identities_get_half_of_the_threads_each_however_many_jobs_they_have() {
    let (mut c, users) = Cluster::start_with_users(0, 2, 2);
    let (a, b) = (&users[0], &users[1]);
    let a_jobs: Vec<u64> = (0..5).map(|_| c.submit_as(a, &BIG)).collect();
    let b_job = c.submit_as(b, &BIG);
    let all = c.try_all_jobs().expect("sweep status");
    let owner = |id: u64| {
        all.iter()
            .find(|j| j["job"] == id)
            .map(|j| j["owner"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    let a_owner = owner(a_jobs[0]);
    assert!(a_owner.starts_with("token-"), "{all:?}");
    assert!(a_jobs.iter().all(|&j| owner(j) == a_owner), "{all:?}");
    assert!(
        owner(b_job).starts_with("token-") && owner(b_job) != a_owner,
        "{all:?}"
    );
    // The worker starts only now, so that both identities start from no use at all: had A's jobs run while
    // B's was being submitted, B would be owed that time and get more than half until it was made up.
    c.add_worker();

    let started = Instant::now();
    let deadline = started + LONG;
    let (a_done, b_done) = loop {
        if let Some(all) = c.try_all_jobs() {
            let done = |id: u64| all.iter().find(|j| j["job"] == id).map_or(0, chunks_done);
            let a_done: u64 = a_jobs.iter().map(|&j| done(j)).sum();
            let b_done = done(b_job);
            if b_done >= B_CHUNKS || a_done + b_done >= MAX_TOTAL {
                break (a_done, b_done);
            }
            assert!(
                Instant::now() < deadline,
                "within {LONG:?}: A's five jobs completed {a_done} chunks, B's job {b_done}"
            );
        } else {
            assert!(
                Instant::now() < deadline,
                "the coordinator did not answer within {LONG:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let fraction = b_done as f64 / (a_done + b_done) as f64;
    eprintln!(
        "two identities on one 2-thread worker, {:.1} s: A's five jobs completed {a_done} chunks, B's one job \
         {b_done}; B's fraction {fraction:.3}",
        started.elapsed().as_secs_f64()
    );
    // Each person cancels their own jobs, with their own token; B may not cancel A's.
    let refused = c.sweep_as(b, &["cancel", &a_jobs[0].to_string()]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.status.code() == Some(5) && said.contains(&format!("belongs to {a_owner}")),
        "{refused:?}"
    );
    for (token, id) in a_jobs.iter().map(|j| (a, j)).chain([(b, &b_job)]) {
        let out = c.sweep_as(token, &["cancel", &id.to_string()]);
        assert!(out.status.success(), "{out:?}");
    }
    // Half each, give or take what a loaded 2-core machine does to chunk times within the window and the
    // chunks in flight at its ends; one job in six would be 0.17.
    assert!(
        (0.35..=0.65).contains(&fraction),
        "B's one job completed {b_done} of {} chunks ({fraction:.3}), A's five jobs {a_done}",
        a_done + b_done
    );
}
