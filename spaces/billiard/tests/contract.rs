//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::testkit;

fn job(args: &[&str]) -> sweep_space::SpaceJob {
    testkit::parse_args::<sweep_billiard::Billiard>(args).expect("valid billiard options")
}

#[test]
fn every_chunking_gives_the_same_answer() {
    for args in [&["--rows", "5"][..], &["--rows", "4", "--method", "brute"]] {
        let j = job(args);
        let answer = testkit::same_answer_under(&*j, &[Some(1), Some(2), Some(7), None]);
        assert!(answer.tally.counter("unique") > 0, "{args:?} has solutions");
    }
}

#[test]
fn lies_about_a_chunk_with_solutions_are_refused() {
    let j = job(&["--rows", "4"]);
    let n = j.plan(Some(3)).expect("plan").n_chunks;
    let tried = testkit::lies_refused_somewhere(&*j, n, &["unique"]);
    assert_eq!(tried, 3, "some chunk has a solution to drop");
}
