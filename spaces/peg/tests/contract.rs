//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_peg::Peg;
use sweep_space::{testkit, ChunkControl, ChunkId, Control, SpaceJob};

/// A job from command-line words, its DAG inputs run and bound as the engine binds them.
fn bound(args: &[&str]) -> SpaceJob {
    let job = testkit::parse_args::<Peg>(args).expect("valid peg options");
    testkit::bind_inputs(testkit::registry::<Peg>(), job, &mut |j| {
        testkit::run_all(j, None)
    })
}

/// Triangle from hole 2,1 back to it: the count joins the middle layer with itself, hundreds of positions.
const COUNT: &[&str] = &["--board", "triangle", "--start", "2,1", "--mode", "count"];

/// A count chunk split into pieces, each asked to split again, adds up to the whole chunk, counts, classes and
/// nodes alike.
#[test]
fn a_split_count_chunk_adds_up_to_the_whole() {
    let j = bound(COUNT);
    assert!(j.splits());
    let n = j.plan(None).expect("plan").n_chunks;
    for at in [ChunkId::new(1, 0), ChunkId::new(n, 1)] {
        let splits = testkit::split_adds_up(&*j, at, 9);
        assert!(splits >= 6, "{at}: {splits} splits");
    }
    // Unbound, as a coordinator holds it, the job checks the shape of a split all the same.
    let unbound = testkit::parse_args::<Peg>(COUNT).expect("valid");
    let at = ChunkId::new(1, 0);
    assert!(unbound
        .check_split(at, Some("span 0 20"), "span 0 10", "span 10 20")
        .is_ok());
    assert!(unbound
        .check_split(at, Some("span 0 20"), "span 0 11", "span 10 20")
        .is_err());
}

/// Solve chunks and the DAG's stages, whose chunks carry artifacts, do not split, and say so.
#[test]
fn jobs_that_do_not_split_refuse_splits() {
    let solve = testkit::parse_args::<Peg>(&["--board", "triangle"]).expect("valid");
    let stage =
        testkit::parse_args::<Peg>(&["--board", "triangle", "--stage", "layer", "--layer", "0"])
            .expect("valid");
    let positions = bound(sweep_peg::positions::TRIANGLE_ARGS);
    let at = ChunkId::new(1, 0);
    for j in [solve, stage, positions] {
        assert!(!j.splits(), "{}", j.params());
        assert!(j.check_split(at, None, "span 0 5", "span 5 10").is_err());
        let out = j.run_chunk(at, &Control::new()).expect("runs");
        assert!(j.verify_part(at, "span 0 5", &out, true).is_err());
    }
}

#[test]
fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
    let j = bound(COUNT);
    let at = ChunkId::new(2, 0);
    assert!(j
        .check_split(at, Some("span 0 20"), "span 0 10", "span 10 20")
        .is_ok());
    for (parent, kept, given) in [
        (Some("span 0 20"), "span 0 11", "span 10 20"),
        (Some("span 0 20"), "span 0 9", "span 10 20"),
        (Some("span 0 20"), "span 0 10", "span 10 21"),
        (Some("span 0 20"), "span 0 10", "nonsense"),
        (None, "span 0 10", "span 10 20"),
        // Past the end of the layer.
        (None, "span 0 10", "span 10 1000000"),
    ] {
        assert!(
            j.check_split(at, parent, kept, given).is_err(),
            "{parent:?} into {kept} and {given}"
        );
    }
    assert!(j
        .run_chunk(
            at,
            ChunkControl::new(Some("span 0 1000000".into())).control()
        )
        .is_err());
}

/// What a count verifier checks holds for any piece, and a piece joins no more classes than it has positions.
#[test]
fn lies_about_a_piece_are_refused() {
    let j = bound(COUNT);
    let at = ChunkId::new(1, 0);
    let part = "span 10 30";
    let piece = j
        .run_chunk(at, ChunkControl::new(Some(part.into())).control())
        .expect("runs");
    j.verify_part(at, part, &piece, true).expect("the truth");
    j.verify_part(at, part, &piece, false).expect("the truth");
    let mut more_classes = piece.clone();
    more_classes.counters.insert("classes".into(), 21);
    let mut listed = piece.clone();
    listed.solutions.push("1,1>2,1>3,1".into());
    let mut unknown = piece.clone();
    unknown.counters.insert("solutions".into(), 1);
    for (what, lie) in [
        ("more classes than positions", more_classes),
        ("a listed solution", listed),
        ("an unknown counter", unknown),
    ] {
        assert!(j.verify_part(at, part, &lie, true).is_err(), "{what}");
    }
    assert!(j.verify_part(at, "span 10 10", &piece, true).is_err());
}
