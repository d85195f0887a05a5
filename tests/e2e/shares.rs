//! Fair share with real processes: a small job submitted behind a big one of the same priority gets threads as
//! soon as the big job's running chunks end, instead of after the whole big job (which is what leasing by
//! priority, then age, used to do).

use std::time::{Duration, Instant};

use crate::support::{chunks_done, is_running, Cluster};

const LONG: Duration = Duration::from_secs(300);
/// Ten chunks of 10^8 integers each (a few tenths of a second of one core each).
const SMALL: [&str; 5] = ["primes", "--below", "1000000000", "--chunks", "10"];
/// Four thousand chunks of the same size: far longer than this test; cancelled at its end.
const BIG: [&str; 5] = ["primes", "--below", "400000000000", "--chunks", "4000"];

#[test]
fn a_small_job_behind_a_big_one_of_the_same_priority_gets_threads_promptly() {
    let c = Cluster::start(1, 2);
    let started = Instant::now();
    let alone = c.submit(&SMALL);
    c.wait_done(alone, LONG);
    let solo = started.elapsed();

    let big = c.submit(&BIG);
    c.wait_until(big, LONG, |s| chunks_done(s) >= 10);
    let started = Instant::now();
    let small = c.submit(&SMALL);
    let status = c.wait_done(small, LONG);
    let behind = started.elapsed();
    assert_eq!(status["state"], "done", "{status}");
    let big_status = c.status(big);
    assert!(
        is_running(&big_status) && chunks_done(&big_status) < 4000,
        "the big job must still be running for this to say anything: {big_status}"
    );
    eprintln!(
        "10 chunks alone: {:.2} s; behind 4,000 chunks of the same priority: {:.2} s ({:.2}x)",
        solo.as_secs_f64(),
        behind.as_secs_f64(),
        behind.as_secs_f64() / solo.as_secs_f64()
    );
    // Half the threads from its first chunk on is 2x; the rest is the big job's chunks already running or
    // queued on the worker when the small one arrived.
    assert!(
        behind.as_secs_f64() <= 2.5 * solo.as_secs_f64(),
        "{behind:?} behind the big job against {solo:?} alone"
    );
    let out = c.sweep(&["cancel", &big.to_string()]);
    assert!(out.status.success(), "{out:?}");
}
