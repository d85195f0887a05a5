//! Fair share with real processes: a small job submitted behind a big one of the same priority gets threads as
//! soon as the big job's running chunks end, instead of after the whole big job (which is what leasing by
//! priority, then age, used to do).
//!
//! What is asserted is counted in chunks, which other tests running on the same cores do not change: while the
//! small job runs, the big one completes about as many chunks as it (they share the threads), not thousands.
//! The times are printed; on a quiet machine they are the README's figure (2.18-2.27x the time alone).

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
    let before = chunks_done(&c.wait_until(big, LONG, |s| chunks_done(s) >= 10));
    let started = Instant::now();
    let small = c.submit(&SMALL);
    let status = c.wait_done(small, LONG);
    let behind = started.elapsed();
    assert_eq!(status["state"], "done", "{status}");
    let big_status = c.status(big);
    let meanwhile = chunks_done(&big_status) - before;
    assert!(
        is_running(&big_status) && chunks_done(&big_status) < 4000,
        "the big job must still be running for this to say anything: {big_status}"
    );
    eprintln!(
        "10 chunks alone: {:.2} s; behind 4,000 chunks of the same priority: {:.2} s ({:.2}x); \
         the big job completed {meanwhile} chunks meanwhile",
        solo.as_secs_f64(),
        behind.as_secs_f64(),
        behind.as_secs_f64() / solo.as_secs_f64()
    );
    // Sharing the threads, the big job completes about the small one's ten meanwhile, plus the chunks it had
    // running or queued on the worker when the small one arrived (a few per thread); leasing by age made it
    // thousands.
    assert!(
        meanwhile <= 40,
        "the big job completed {meanwhile} chunks while the small one ran"
    );
    let out = c.sweep(&["cancel", &big.to_string()]);
    assert!(out.status.success(), "{out:?}");
}
