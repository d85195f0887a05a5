//! Programs that split: `count.py` from `docs/your-own-space.md`, run as a real program through the contract
//! kit, so the example people copy is the one that is tested.

use sweep_exec::Exec;
use sweep_space::{testkit, ChunkControl, ChunkId, SpaceJob};

/// The `count.py` block of the guide, written into a fresh directory.
fn count_py() -> tempfile::TempDir {
    let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/your-own-space.md");
    let text = std::fs::read_to_string(guide).expect("the guide is readable");
    let start = text
        .find("```python\n# count.py\n")
        .expect("the guide has a count.py block")
        + "```python\n".len();
    let len = text[start..].find("```").expect("the block ends");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("count.py"), &text[start..start + len]).expect("written");
    dir
}

/// `count.py` as an exec job, with `--splits` when `splits`.
fn count_job(dir: &tempfile::TempDir, splits: bool) -> SpaceJob {
    let workdir = dir.path().to_str().expect("a UTF-8 path");
    let mut args = vec!["--workdir", workdir];
    if splits {
        args.push("--splits");
    }
    args.extend(["--", "python3", "count.py", "{chunk}", "{chunks}"]);
    testkit::parse_args::<Exec>(&args).expect("a valid exec job")
}

/// The sum of the cubes of `lo..hi`.
fn cubes(lo: u128, hi: u128) -> u128 {
    let below = |n: u128| (n * n.saturating_sub(1) / 2).pow(2);
    below(hi) - below(lo)
}

#[test]
fn count_py_split_again_and_again_adds_up_to_the_unsplit_chunk() {
    let dir = count_py();
    let job = count_job(&dir, true);
    assert!(job.splits());
    // Chunk 1 of 4 is 250000..500000; every run is asked to split before its first number. count.py gives
    // away half while 50000 numbers or more are left: 125000, 62500, 31250, and then declines.
    let splits = testkit::split_adds_up(&*job, ChunkId::new(4, 1), 6);
    assert_eq!(
        splits, 3,
        "count.py splits while a part is worth a new program"
    );
    // And the pieces' sum is the right one, not just the same as the whole's.
    let handle = ChunkControl::new(None);
    let whole = job
        .run_chunk(ChunkId::new(4, 1), handle.control())
        .expect("runs");
    assert_eq!(whole.nodes, 250_000);
    assert_eq!(whole.counters["cubes"], cubes(250_000, 500_000));
}

#[test]
fn count_py_declines_when_too_little_is_left() {
    let dir = count_py();
    let job = count_job(&dir, true);
    let handle = ChunkControl::new(Some("7 10 7 0 0".into()));
    handle.request_split();
    let out = job
        .run_chunk(ChunkId::new(1, 0), handle.control())
        .expect("runs");
    assert_eq!((out.nodes, out.counters["cubes"]), (3, cubes(7, 10)));
    assert!(handle.take_handoffs().is_empty());
    assert!(!handle.split_pending(), "declined, not left hanging");
}

#[test]
fn count_py_without_splits_is_never_asked_and_gives_the_same_answer() {
    let dir = count_py();
    let job = count_job(&dir, false);
    assert!(!job.splits());
    let handle = ChunkControl::new(None);
    handle.request_split();
    let out = job
        .run_chunk(ChunkId::new(8, 3), handle.control())
        .expect("runs");
    assert_eq!(out.nodes, 125_000);
    assert_eq!(out.counters["cubes"], cubes(375_000, 500_000));
    assert!(handle.take_handoffs().is_empty());
    assert!(
        handle.split_pending(),
        "nothing answered a request nobody sent on"
    );
    // The whole job: the sum of the cubes below a million, whatever the chunking.
    let answer = testkit::run_all(&*job, Some(3));
    assert_eq!(answer.tally.counters["cubes"], cubes(0, 1_000_000));
    assert_eq!(answer.tally.nodes, 1_000_000);
}
