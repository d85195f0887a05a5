//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, ChunkControl, ChunkId, Registry, SpaceJob};

fn primes(below: u64) -> SpaceJob {
    Registry::new()
        .with::<sweep_primes::Primes>()
        .job_from_params("primes", &serde_json::json!({ "below": below }))
        .expect("valid primes parameters")
}

#[test]
fn every_chunking_counts_the_primes_below_a_million_once() {
    let j = primes(1_000_000);
    let answer = testkit::same_answer_under(&*j, &[Some(1), Some(7), Some(64), None]);
    assert_eq!(answer.tally.counter("primes"), 78_498);
    // A count of primes cannot be checked without sieving again (replication checks it), and a chunk lists no
    // primes to drop: what one output shows is that it lists nothing.
    assert_eq!(testkit::lies_refused(&*j, 7, 3, &[]), 1);
}

/// A chunk split into pieces at segment borders, and each piece split again, counts its primes once; a lie
/// about a piece's range is refused as a lie about a chunk's is.
#[test]
fn a_split_chunk_adds_up_to_the_whole() {
    let j = primes(3_000_000);
    assert!(j.splits());
    let at = ChunkId::new(2, 1);
    assert!(testkit::split_adds_up(&*j, at, 5) >= 3);
    let part = "span 1500000 1500100";
    let piece = j
        .run_chunk(at, ChunkControl::new(Some(part.into())).control())
        .expect("the part runs");
    assert_eq!(piece.nodes, 100);
    j.verify_part(at, part, &piece, false)
        .expect("an honest part verifies");
    let mut lie = piece.clone();
    lie.count("primes", 1);
    assert!(
        j.verify_part(at, part, &lie, false).is_err(),
        "a prime too many"
    );
    assert!(
        j.verify_part(at, "span 1500000 1500101", &piece, false)
            .is_err(),
        "nodes other than the part's size"
    );
    assert!(
        j.verify_part(at, "span 0 100", &piece, false).is_err(),
        "a part of another chunk"
    );
}
