//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, ChunkId, Registry};

fn job(points: u32, method: &str) -> sweep_space::SpaceJob {
    Registry::new()
        .with::<sweep_star::Star>()
        .job_from_params(
            "star",
            &serde_json::json!({ "points": points, "method": method }),
        )
        .expect("valid star parameters")
}

#[test]
fn every_chunking_gives_the_same_answer() {
    for (points, method) in [(8, "backtrack"), (7, "brute")] {
        let j = job(points, method);
        let answer = testkit::same_answer_under(&*j, &[Some(1), Some(5), Some(64), None]);
        assert!(
            answer.tally.counter("unique") > 0,
            "{points} points have stars"
        );
    }
}

#[test]
fn lies_about_a_chunk_with_stars_are_refused() {
    let j = job(8, "backtrack");
    let n = j.plan(Some(6)).expect("plan").n_chunks;
    let tried = testkit::lies_refused_somewhere(&*j, n, &["unique"]);
    assert_eq!(tried, 3, "some chunk has a star to drop");
}

/// A backtracking chunk split into pieces, each asked to split again, adds up to the whole chunk; brute force
/// chunks do not split, and say so.
#[test]
fn a_split_chunk_adds_up_to_the_whole() {
    let j = job(8, "backtrack");
    assert!(j.splits());
    for at in [ChunkId::new(1, 0), ChunkId::new(3, 1)] {
        assert!(testkit::split_adds_up(&*j, at, 7) >= 3, "{at} split");
    }
    let brute = job(7, "brute");
    assert!(!brute.splits());
    assert!(brute
        .check_split(ChunkId::new(1, 0), None, "span 0 5", "span 5 10")
        .is_err());
}

#[test]
fn splits_that_do_not_cover_their_parent_exactly_are_refused() {
    let j = job(8, "backtrack");
    let at = ChunkId::new(1, 0);
    let n = j.plan(Some(1)).expect("plan").n_chunks;
    assert_eq!(n, 1);
    let (kept, given) = ("span 0 10", "span 10 20");
    assert!(j.check_split(at, Some("span 0 20"), kept, given).is_ok());
    for (parent, kept, given) in [
        (Some("span 0 20"), "span 0 11", "span 10 20"),
        (Some("span 0 20"), "span 0 9", "span 10 20"),
        (Some("span 0 20"), "span 0 10", "span 10 21"),
        (Some("span 0 20"), "nonsense", "span 10 20"),
        (None, "span 0 10", "span 10 20"),
    ] {
        assert!(
            j.check_split(at, parent, kept, given).is_err(),
            "{parent:?} into {kept} and {given}"
        );
    }
}
