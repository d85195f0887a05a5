//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, ChunkControl, ChunkId, Control, Job, SpaceError};

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

/// A strategy chunk split into pieces, each asked to split again, adds up to the whole chunk; brute force
/// chunks do not split, and say so.
#[test]
fn a_split_chunk_adds_up_to_the_whole() {
    for rows in ["5", "6"] {
        let j = job(&["--rows", rows]);
        assert!(j.splits());
        for at in [ChunkId::new(1, 0), ChunkId::new(3, 1)] {
            let splits = testkit::split_adds_up(&*j, at, 7);
            assert!(splits >= 5, "rows {rows} {at}: {splits} splits");
        }
    }
    let brute = job(&["--rows", "4", "--method", "brute"]);
    assert!(!brute.splits());
    assert!(brute
        .check_split(ChunkId::new(1, 0), None, "span 0 5", "span 5 10")
        .is_err());
}

#[test]
fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
    let j = job(&["--rows", "5"]);
    let at = ChunkId::new(2, 0);
    let (kept, given) = ("span 0 10", "span 10 20");
    assert!(j.check_split(at, Some("span 0 20"), kept, given).is_ok());
    assert!(j.check_split(at, None, "span 0 3", "span 3 10").is_err());
    for (parent, kept, given) in [
        (Some("span 0 20"), "span 0 11", "span 10 20"),
        (Some("span 0 20"), "span 0 9", "span 10 20"),
        (Some("span 0 20"), "span 0 10", "span 10 21"),
        (Some("span 0 20"), "nonsense", "span 10 20"),
        (Some("billiard-strategy/1 garbled"), kept, given),
        // Past the end of chunk 0 of 2.
        (None, "span 0 10", "span 10 100000"),
    ] {
        assert!(
            j.check_split(at, parent, kept, given).is_err(),
            "{parent:?} into {kept} and {given}"
        );
    }
    // A run is not started from a part outside its chunk either.
    assert!(j
        .run_chunk(
            at,
            ChunkControl::new(Some("span 0 100000".into())).control()
        )
        .is_err());
}

/// The output of a run from `state` (`None`: the whole chunk), asked to stop at once: its checkpoint.
fn stopped_at(j: &dyn Job, at: ChunkId, state: Option<&str>) -> String {
    let handle = ChunkControl::new(state.map(str::to_string));
    handle.request_stop();
    assert_eq!(
        j.run_chunk(at, handle.control()),
        Err(SpaceError::Cancelled),
        "a long part stops when asked"
    );
    handle.take_resume_state().expect("it saved its cursor")
}

/// A piece's cursor names its piece: a piece stopped and resumed still counts only that piece, and a run
/// resumed from a cursor splits like any other, its kept part starting where the piece starts.
#[test]
fn a_piece_resumed_from_its_cursor_counts_only_that_piece() {
    let j = job(&["--rows", "7"]);
    let at = ChunkId::new(2, 1);
    let run = |state: &str| {
        j.run_chunk(at, ChunkControl::new(Some(state.to_string())).control())
            .expect("runs")
    };
    let chunk = j.run_chunk(at, &Control::new()).expect("runs");
    let first = stopped_at(&*j, at, None);
    assert!(first.starts_with("billiard-strategy/1 "), "{first}");
    assert!(
        !first.contains("span="),
        "the whole chunk's cursor: {first}"
    );
    // Split the chunk from its cursor: the kept part starts at the chunk's start, and with the given one adds up.
    let handle = ChunkControl::new(Some(first.clone()));
    handle.request_split();
    let kept_out = j.run_chunk(at, handle.control()).expect("runs");
    let h = handle.take_handoffs();
    assert_eq!(h.len(), 1);
    j.check_split(at, Some(&first), &h[0].kept, &h[0].given)
        .expect("a split of a resumed run is a split of its part");
    assert_eq!(run(&h[0].kept), kept_out);
    let given_out = run(&h[0].given);
    assert_eq!(
        kept_out.nodes + given_out.nodes,
        chunk.nodes,
        "{h:?} count the chunk once"
    );
    // The given piece, stopped and resumed from its own cursor.
    let cursor = stopped_at(&*j, at, Some(&h[0].given));
    let (lo, hi) = h[0].given["span ".len()..].split_once(' ').unwrap();
    assert!(cursor.contains(&format!(" span={lo}..{hi} ")), "{cursor}");
    assert_eq!(run(&cursor), given_out);
    j.verify_part(at, &cursor, &given_out, true)
        .expect("a cursor names its part");
}

/// The verifier's checks hold for any piece, so a lie about a piece is caught as one about a chunk is.
#[test]
fn lies_about_a_piece_are_refused() {
    let j = job(&["--rows", "5"]);
    let at = ChunkId::new(1, 0);
    // The first piece of eight prefixes that holds a triangle.
    let (part, piece) = (0..)
        .map(|lo| format!("span {} {}", 8 * lo, 8 * lo + 8))
        .map(|part| {
            let start = ChunkControl::new(Some(part.clone()));
            let piece = j.run_chunk(at, start.control()).expect("runs");
            (part, piece)
        })
        .find(|(_, piece)| !piece.solutions.is_empty())
        .expect("five rows have triangles");
    let part = part.as_str();
    j.verify_part(at, part, &piece, true).expect("the truth");
    let mut dropped = piece.clone();
    dropped.solutions.pop();
    let mut reordered = piece.clone();
    let balls: Vec<&str> = reordered.solutions[0].split(',').collect();
    reordered.solutions[0] = balls.iter().rev().copied().collect::<Vec<_>>().join(",");
    let mut inflated = piece.clone();
    *inflated.counters.get_mut("unique").unwrap() += 1;
    for (what, lie) in [
        ("dropped", dropped),
        ("reordered", reordered),
        ("inflated", inflated),
    ] {
        assert!(j.verify_part(at, part, &lie, true).is_err(), "{what}");
    }
    assert!(j.verify_part(at, "span 0 100000", &piece, true).is_err());
}
