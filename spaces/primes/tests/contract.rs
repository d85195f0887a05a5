//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, Registry};

#[test]
fn every_chunking_counts_the_primes_below_a_million_once() {
    let j = Registry::new()
        .with::<sweep_primes::Primes>()
        .job_from_params("primes", &serde_json::json!({ "below": 1_000_000 }))
        .expect("valid primes parameters");
    let answer = testkit::same_answer_under(&*j, &[Some(1), Some(7), Some(64), None]);
    assert_eq!(answer.tally.counter("primes"), 78_498);
    // A count of primes cannot be checked without sieving again (replication checks it), and a chunk lists no
    // primes to drop: what one output shows is that it lists nothing.
    assert_eq!(testkit::lies_refused(&*j, 7, 3, &[]), 1);
}
