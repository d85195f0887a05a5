//! The engine's contract, checked with the contract crate's kit on jobs built as the engine builds them.

use sweep_space::{testkit, Registry};

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
