//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, ChunkControl, ChunkId};

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

/// The clues of a pseudo-random board of side `side`: puzzles like this one have many solutions and a search
/// tree that branches from its root.
fn loose_clues(side: usize) -> String {
    let geo = sweep_buzzled::geometry::Geometry::new(side).expect("a side");
    let board: Vec<bool> = (0..geo.n_tiles())
        .map(|t| (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61 & 1 == 1)
        .collect();
    geo.clues_of(&board)
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A line-solving chunk split into pieces, each asked to split again, adds up to the whole chunk; brute force
/// chunks do not split, and say so.
#[test]
fn a_split_chunk_adds_up_to_the_whole() {
    for side in ["4", "5"] {
        let clues = loose_clues(side.parse().expect("a number"));
        let j = job(&["--clues", &clues, "--side", side]);
        assert!(j.splits());
        for at in [ChunkId::new(1, 0), ChunkId::new(3, 1)] {
            let splits = testkit::split_adds_up(&*j, at, 9);
            assert!(splits >= 6, "side {side} {at}: {splits} splits");
        }
    }
    let clues = clues();
    let brute = job(&["--clues", &clues, "--side", "3", "--method", "brute"]);
    assert!(!brute.splits());
    assert!(brute
        .check_split(ChunkId::new(1, 0), None, "span 0 5", "span 5 10")
        .is_err());
}

#[test]
fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
    let clues = loose_clues(4);
    let j = job(&["--clues", &clues, "--side", "4"]);
    let at = ChunkId::new(2, 1);
    assert!(j
        .check_split(at, Some("span 600 700"), "span 600 650", "span 650 700")
        .is_ok());
    for (parent, kept, given) in [
        (Some("span 600 700"), "span 600 651", "span 650 700"),
        (Some("span 600 700"), "span 600 649", "span 650 700"),
        (Some("span 600 700"), "span 600 650", "span 650 701"),
        (Some("span 600 700"), "span 600 650", "650 700"),
        (None, "span 600 650", "span 650 700"),
        // Chunk 1 of 2 holds paths 512..1024.
        (Some("span 500 700"), "span 500 650", "span 650 700"),
    ] {
        assert!(
            j.check_split(at, parent, kept, given).is_err(),
            "{parent:?} into {kept} and {given}"
        );
    }
    assert!(j
        .run_chunk(at, ChunkControl::new(Some("span 0 10".into())).control())
        .is_err());
}

/// The verifier's checks hold for any piece, so a lie about a piece is caught as one about a chunk is.
#[test]
fn lies_about_a_piece_are_refused() {
    let clues = loose_clues(4);
    let j = job(&["--clues", &clues, "--side", "4"]);
    let at = ChunkId::new(1, 0);
    let part = "span 0 512";
    let piece = j
        .run_chunk(at, ChunkControl::new(Some(part.into())).control())
        .expect("runs");
    j.verify_part(at, part, &piece, true).expect("the truth");
    assert!(!piece.solutions.is_empty(), "the piece has boards");
    let mut dropped = piece.clone();
    dropped.solutions.pop();
    let mut twice = piece.clone();
    twice.solutions.push(piece.solutions[0].clone());
    *twice.counters.get_mut("solutions").expect("counted") += 1;
    let mut flipped = piece.clone();
    let first = flipped.solutions[0].clone();
    flipped.solutions[0] = first
        .chars()
        .map(|c| match c {
            '1' => '0',
            '0' => '1',
            c => c,
        })
        .collect();
    for (what, lie) in [("dropped", dropped), ("twice", twice), ("flipped", flipped)] {
        assert!(j.verify_part(at, part, &lie, true).is_err(), "{what}");
    }
    assert!(j.verify_part(at, "span 0 2000", &piece, true).is_err());
}
