//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::testkit;

fn job(args: &[&str]) -> sweep_space::SpaceJob {
    testkit::parse_args::<sweep_buzzled::Buzzled>(args).expect("valid buzzled options")
}

/// A side-3 puzzle with exactly one solution, from the generator's fixed seed.
fn clues() -> String {
    let (p, _) = sweep_buzzled::generate::generate(3, 7).expect("a side-3 puzzle");
    p.clues
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_chunking_gives_the_same_answer() {
    let clues = clues();
    for method in ["propagate", "brute"] {
        let j = job(&["--clues", &clues, "--side", "3", "--method", method]);
        let answer = testkit::same_answer_under(&*j, &[Some(1), Some(3), None]);
        assert_eq!(
            answer.tally.counter("solutions"),
            1,
            "{method}: the puzzle has one solution"
        );
    }
}

#[test]
fn lies_about_the_chunk_with_the_solution_are_refused() {
    let clues = clues();
    let j = job(&["--clues", &clues, "--side", "3"]);
    let n = j.plan(Some(4)).expect("plan").n_chunks;
    let tried = testkit::lies_refused_somewhere(&*j, n, &["solutions"]);
    assert_eq!(tried, 3, "some chunk has the solution to drop");
}
