//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_brainball::Brainball;
use sweep_space::{testkit, ChunkControl, ChunkId, SpaceJob};

/// A job from command-line words, its inputs (the table) run and bound as the engine binds them.
fn bound(args: &[&str]) -> SpaceJob {
    let job = testkit::parse_args::<Brainball>(args).expect("valid brainball options");
    testkit::bind_inputs(testkit::registry::<Brainball>(), job, &mut |j| {
        testkit::run_all(j, None)
    })
}

/// A batch of random positions solved against the depth-3 table.
const SOLVE: &[&str] = &["--depth", "3", "--random", "8", "--seed", "9"];

/// A solve chunk split into pieces, each asked to split again, adds up to the whole chunk, its solutions
/// included.
#[test]
fn a_split_solve_chunk_adds_up_to_the_whole() {
    let j = bound(SOLVE);
    assert!(j.splits());
    // Every run gives away half of what it has not started: 8 positions split 3 times, 4 twice.
    for (at, least) in [(ChunkId::new(1, 0), 3), (ChunkId::new(2, 1), 2)] {
        let splits = testkit::split_adds_up(&*j, at, 7);
        assert!(splits >= least, "{at}: {splits} splits");
    }
}

/// Tables, pattern databases, census and deep chunks do not split, and say so.
#[test]
fn jobs_that_do_not_split_refuse_splits() {
    for args in [
        &["table", "--depth", "3"][..],
        &["census", "--depth", "3", "--samples", "4"],
        &[
            "deep",
            "--depth",
            "3",
            "--position",
            "2 3 4 5 6 7 8 9 10 11 12 13 1",
            "--max-twists",
            "8",
        ],
        &["pattern", "--pattern-tiles", "4"],
    ] {
        let j = testkit::parse_args::<Brainball>(args).expect("valid");
        assert!(!j.splits(), "{args:?}");
        let err = j
            .check_split(ChunkId::new(1, 0), None, "span 0 1", "span 1 2")
            .expect_err("refused");
        assert!(err.to_string().contains("do not split"), "{args:?}: {err}");
    }
}

#[test]
fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
    let j = testkit::parse_args::<Brainball>(SOLVE).expect("valid");
    let at = ChunkId::new(2, 1);
    assert!(j.check_split(at, None, "span 4 6", "span 6 8").is_ok());
    for (parent, kept, given) in [
        (None, "span 4 7", "span 6 8"),
        (None, "span 4 5", "span 6 8"),
        (None, "span 5 6", "span 6 8"),
        (Some("span 4 7"), "span 4 6", "span 6 8"),
        (None, "span 4 6", "span 6 9"),
        (None, "span 4 6", "span six 8"),
        // Chunk 1 of 2 holds positions 4..8.
        (Some("span 2 8"), "span 2 6", "span 6 8"),
    ] {
        assert!(
            j.check_split(at, parent, kept, given).is_err(),
            "{parent:?} into {kept} and {given}"
        );
    }
}

/// A piece's solutions are checked against the positions of the piece, as a chunk's against its own.
#[test]
fn lies_about_a_piece_are_refused() {
    let j = bound(SOLVE);
    let at = ChunkId::new(1, 0);
    let part = "span 2 5";
    let piece = j
        .run_chunk(at, ChunkControl::new(Some(part.into())).control())
        .expect("runs");
    j.verify_part(at, part, &piece, true).expect("the truth");
    let mut counts = piece.clone();
    counts.solutions.clear();
    j.verify_part(at, part, &counts, false).expect("the truth");
    let mut dropped = piece.clone();
    dropped.solutions.pop();
    let mut swapped = piece.clone();
    swapped.solutions.swap(0, 1);
    for (what, lie) in [("dropped", dropped), ("swapped", swapped)] {
        assert!(j.verify_part(at, part, &lie, true).is_err(), "{what}");
    }
    // The same solutions are not those of another part.
    assert!(j.verify_part(at, "span 3 6", &piece, true).is_err());
    assert!(j.verify_part(at, "span 2 9", &piece, true).is_err());
}
