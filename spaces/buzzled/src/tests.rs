use super::generate::{generate, SplitMix64};
use super::propagate::solve_all;
use super::*;
use proptest::prelude::*;
/// Every chunk run, verified and merged, as the engine would.
use sweep_space::testkit::run_all as solve;

/// The original program's puzzle #52: 58 solutions.
const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";

fn job(side: usize, clues: &[u32], method: Method) -> BuzzledJob {
    BuzzledJob::new(BuzzledParams::new(side, clues, method)).unwrap()
}

fn p52(method: Method) -> BuzzledJob {
    job(4, &parse_clue_list(P52).unwrap(), method)
}

fn random_board(n: usize, seed: u64) -> Vec<bool> {
    let mut rng = SplitMix64::new(seed);
    // Vary the density too: sparse and dense boards stress different rows.
    let density = 1 + rng.below(7);
    (0..n).map(|_| rng.below(8) < density).collect()
}

#[test]
fn puzzle_52_has_58_solutions_with_both_methods() {
    let prop = solve(&p52(Method::Propagate), None);
    assert_eq!(prop.tally.counter("solutions"), 58);
    assert_eq!(prop.solutions.len(), 58);
    let brute_job = p52(Method::Brute);
    let brute = solve(&brute_job, None);
    assert_eq!(brute.solutions, prop.solutions);
    assert_eq!(brute.tally.counter("solutions"), 58);
    // Brute force tested every board with 20 yellow tiles: C(37, 20).
    assert_eq!(brute.tally.nodes, 15_905_368_710);
    let result = brute_job.result(&brute);
    assert_eq!(result["solutions"], 58);
    assert_eq!(result["boards"].as_array().unwrap().len(), 58);
    assert_eq!(result["boards"][0].as_str().unwrap().len(), 37);
}

#[test]
fn chunking_does_not_change_the_answer() {
    let brute = p52(Method::Brute);
    let one = solve(&brute, Some(1));
    for k in [7, 1000] {
        let many = solve(&brute, Some(k));
        assert_eq!(
            (&one.solutions, one.tally.nodes),
            (&many.solutions, many.tally.nodes),
            "{k}"
        );
    }
    // A side-5 puzzle split every way the path space allows.
    let board = random_board(61, 5);
    let geo = Geometry::new(5).unwrap();
    let j = job(5, &geo.clues_of(&board), Method::Propagate);
    let one = solve(&j, Some(1));
    for k in [3, 64, N_PATHS] {
        let many = solve(&j, Some(k));
        assert_eq!(one.solutions, many.solutions, "{k} chunks");
        assert_eq!(
            many.tally,
            Tally {
                chunks: k,
                ..one.tally.clone()
            },
            "{k} chunks"
        );
    }
    assert!(one.solutions.contains(&geo.encode(&board)));
}

use sweep_space::Tally;

#[test]
fn sides_five_to_seven_are_solved() {
    // Random boards (side 5: 797 solutions, side 7: 3) and generated unique puzzles of sides 6 and 7.
    let mut cases: Vec<(usize, Vec<bool>)> = [(5, 1), (7, 4)]
        .into_iter()
        .map(|(side, seed)| {
            (
                side,
                random_board(Geometry::new(side).unwrap().n_tiles(), seed),
            )
        })
        .collect();
    for side in [6, 7] {
        cases.push((side, generate(side, 11).unwrap().1));
    }
    for (side, board) in cases {
        let geo = Geometry::new(side).unwrap();
        let clues = geo.clues_of(&board);
        let sols = solve_all(&geo, &clues, None);
        assert!(sols.contains(&board), "side {side}");
        assert!(sols.iter().all(|s| geo.clues_of(s) == clues));
    }
}

#[test]
fn brute_force_reaches_side_five() {
    // Random side-5 boards (797 and 555 solutions): brute force accounts for ~1e16 boards each in milliseconds
    // because whole blocks fail a row at once, and agrees with line solving.
    let geo = Geometry::new(5).unwrap();
    for seed in [1, 3] {
        let clues = geo.clues_of(&random_board(61, seed));
        let brute_job = job(5, &clues, Method::Brute);
        let brute = solve(&brute_job, Some(8));
        let prop = solve(&job(5, &clues, Method::Propagate), None);
        assert_eq!(brute.solutions, prop.solutions, "seed {seed}");
        assert_eq!(
            brute.tally.nodes,
            u128::from(brute_job.brute.as_ref().unwrap().total())
        );
    }
}

#[test]
fn unsatisfiable_clues_are_reported_before_search() {
    let mut c = parse_clue_list(P52).unwrap();
    c[0] = 8;
    let err = Buzzled::build(BuzzledParams::new(4, &c, Method::Propagate)).unwrap_err();
    assert!(
        err.to_string()
            .contains("clue 0 (column, tiles 1,5,12,19,26,33,37) asks for 8 yellow tiles but the row has only 7"),
        "{err}"
    );
    c[0] = 6;
    let err = Buzzled::build(BuzzledParams::new(4, &c, Method::Brute)).unwrap_err();
    assert!(err.to_string().contains("totals disagree"), "{err}");
    let err = Buzzled::build(BuzzledParams::new(3, &c, Method::Brute)).unwrap_err();
    assert!(err.to_string().contains("15 clues, but 21"), "{err}");
    // Consistent totals but no board: found by the search, with zero solutions.
    // One yellow tile: in column 0, on the top row, and on the up-right row of tiles 4 and 6: no tile is on all
    // three.
    let side2 = [1, 0, 1, 0, 0, 1, 0, 0, 0];
    let j = job(2, &side2, Method::Propagate);
    assert_eq!(solve(&j, None).tally.counter("solutions"), 0);
}

#[test]
fn bad_options_are_named() {
    let space = sweep_space::testkit::registry::<crate::Buzzled>()
        .lookup("buzzled")
        .unwrap();
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (a, needle) in [
        (args(&[]), "no puzzle given"),
        (args(&["--clues", "1,2,x"]), "`x` is not a yellow count"),
        (args(&["--clues", P52, "--side", "1"]), "side"),
        (
            args(&["--clues", P52, "--side", "6", "--method", "brute"]),
            "up to 64 tiles",
        ),
        (args(&["--puzzle", "p52.txt"]), "read by the sweep CLI"),
        (
            args(&["--puzzle-text", "side: 4\nclues: 1,2\n"]),
            "21 clues, but 2",
        ),
        (
            args(&["--puzzle-text", "side: 4\nclue: 1\n"]),
            "line 2: unknown key `clue`",
        ),
        (
            args(&["--puzzle-text", "side: 3\n", "--clues", "1"]),
            "no `clues",
        ),
        (
            args(&[
                "--puzzle-text",
                &format!("side: 4\nclues: {P52}"),
                "--side",
                "5",
            ]),
            "disagrees",
        ),
        (
            args(&[
                "--puzzle-text",
                &format!("side: 4\nclues: {P52}"),
                "--clues",
                P52,
            ]),
            "not both",
        ),
    ] {
        let err = space.parse_args(&a).unwrap_err().to_string();
        assert!(err.contains(needle), "{a:?}: {err}");
    }
}

#[test]
fn a_puzzle_file_becomes_canonical_params() {
    let space = sweep_space::testkit::registry::<crate::Buzzled>()
        .lookup("buzzled")
        .unwrap();
    let text = format!("# seed #52\nname: Puzzle 52\nside: 4\nclues: {P52}\n");
    let from_file = space
        .parse_args(&["--puzzle-text".to_string(), text])
        .unwrap();
    let params = from_file.params();
    assert_eq!(params["clues"], P52);
    assert_eq!(params["side"], 4);
    assert_eq!(params["name"], "Puzzle 52");
    assert!(params.get("puzzle_text").is_none() && params.get("puzzle").is_none());
    // The canonical params rebuild an equal job.
    let again = sweep_space::testkit::registry::<crate::Buzzled>()
        .job_from_params("buzzled", params)
        .unwrap();
    assert_eq!(again.params(), params);
    let from_clues = space
        .parse_args(&["--clues".to_string(), P52.replace(',', ", ")])
        .unwrap();
    assert_eq!(from_clues.params()["clues"], P52);
    assert_eq!(from_clues.params()["method"], "propagate");
}

#[test]
fn verify_rejects_lies() {
    for method in [Method::Brute, Method::Propagate] {
        let j = p52(method);
        let plan = j.plan(Some(4)).unwrap();
        let ctl = Control::new();
        let (idx, good) = sweep_space::testkit::first_chunk_with_solutions(&j, plan.n_chunks);
        // A dropped solution and a made-up one.
        assert_eq!(sweep_space::testkit::lies_refused(&j, 4, idx, &[]), 2);
        let mut wrong = good.clone();
        wrong.solutions[0] = "1".repeat(37);
        assert!(j
            .verify(ChunkId::new(4, idx), &wrong)
            .unwrap_err()
            .to_string()
            .contains("misses"));
        let mut junk = good.clone();
        junk.solutions[0] = "x".into();
        assert!(j.verify(ChunkId::new(4, idx), &junk).is_err());
        let mut twice = good.clone();
        twice.solutions.push(twice.solutions[0].clone());
        twice.count("solutions", 1);
        assert!(j.verify(ChunkId::new(4, idx), &twice).is_err());
        if method == Method::Brute {
            let mut short = good.clone();
            short.nodes -= 1;
            assert!(j.verify(ChunkId::new(4, idx), &short).is_err());
            // A real solution reported by the wrong chunk.
            let other = (idx + 1) % 4;
            let mut moved = j.run_chunk(ChunkId::new(4, other), &ctl).unwrap();
            moved.solutions.push(good.solutions[0].clone());
            moved.count("solutions", 1);
            assert!(j
                .verify(ChunkId::new(4, other), &moved)
                .unwrap_err()
                .to_string()
                .contains("rank range"));
        }
    }
}

#[test]
fn cancellation_stops_a_chunk() {
    let ctl = sweep_space::ChunkControl::default();
    ctl.cancel();
    assert_eq!(
        p52(Method::Brute).run_chunk(ChunkId::new(1, 0), ctl.control()),
        Err(SpaceError::Cancelled)
    );
    let j = p52(Method::Propagate);
    sweep_space::testkit::out_of_plan_refused(&j, N_PATHS + 1);
}

#[test]
fn text_and_pictures_show_every_board() {
    let j = p52(Method::Propagate);
    let result = j.result(&solve(&j, None));
    let text = j.render_text(&result);
    assert!(text.contains("58 solutions"), "{text}");
    assert!(text.contains("solution 58 of 58"));
    // The first solution drawn as 13 visual rows of a side-4 hexagon.
    let first = result["boards"][0].as_str().unwrap();
    let drawn = j.draw(&j.geo.decode(first).unwrap());
    assert_eq!(drawn.lines().count(), 13);
    assert_eq!(drawn.matches('Y').count(), 20);
    assert_eq!(drawn.matches('.').count(), 17);
    let pics = j.pictures(&result);
    assert_eq!(pics.len(), 58);
    assert_eq!(pics[0].0, "buzzled-s4-001.svg");
    let svg = &pics[0].1;
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polygon").count(), 37);
    assert_eq!(svg.matches("<circle").count(), 21);
    assert_eq!(svg.matches("fill=\"#f6c915\"").count(), 20);
    assert!(!svg.contains("href"), "no external resources");
}

#[test]
fn generated_puzzles_are_unique_and_reproducible() {
    for side in [2, 3, 4, 5] {
        let (p, board) = generate(side, 7).unwrap();
        let geo = Geometry::new(side).unwrap();
        assert_eq!(geo.clues_of(&board), p.clues);
        assert_eq!(
            solve_all(&geo, &p.clues, None),
            vec![board.clone()],
            "side {side}"
        );
        assert_eq!(generate(side, 7).unwrap().0, p);
    }
    assert!(generate(1, 0).is_err());
}

#[test]
fn rank_and_unrank_enumerate_in_order() {
    let geo = Geometry::new(2).unwrap();
    let b = Brute::new(&geo, &[0; 9], 3);
    assert_eq!(b.total(), 35);
    let boards: Vec<u64> = (0..35).map(|r| b.unrank(r).unwrap()).collect();
    for (r, &board) in boards.iter().enumerate() {
        assert_eq!(board.count_ones(), 3);
        assert_eq!(b.rank(board), Some(r as u64));
    }
    let mut distinct = boards.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 35);
    assert_eq!(b.unrank(35), None);
    assert_eq!(b.rank(0b1), None);
    // A tile outside the board.
    assert_eq!(b.rank(1 << 8 | 0b11), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rank_unrank_roundtrip(side in 2usize..=5, y in 0usize..=61, r in any::<u64>()) {
        let geo = Geometry::new(side).unwrap();
        let y = y % (geo.n_tiles() + 1);
        let b = Brute::new(&geo, &vec![0; geo.n_lines()], y as u32);
        let r = r % b.total();
        let board = b.unrank(r).unwrap();
        prop_assert_eq!(board.count_ones() as usize, y);
        prop_assert_eq!(b.rank(board), Some(r));
        if r + 1 < b.total() {
            // Rank order is the decision order, black before yellow: the next board differs at a later
            // decision in its first differing position.
            let next = b.unrank(r + 1).unwrap();
            let first = b.order.iter().position(|&t| (board ^ next) >> t & 1 == 1).unwrap();
            prop_assert_eq!(next >> b.order[first] & 1, 1);
        }
    }

    #[test]
    fn a_boards_clues_are_solved_back_to_it(side in 2usize..=6, seed in any::<u64>()) {
        let geo = Geometry::new(side).unwrap();
        let board = random_board(geo.n_tiles(), seed);
        let clues = geo.clues_of(&board);
        prop_assert!(check_clues(&geo, &clues).is_ok());
        let sols = solve_all(&geo, &clues, Some(20_000));
        prop_assert!(sols.len() == 20_000 || sols.contains(&board));
        for s in &sols {
            prop_assert_eq!(&geo.clues_of(s), &clues);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn brute_chunk_borders_skip_and_repeat_nothing(seed in any::<u64>(), k in 1u64..=200) {
        let geo = Geometry::new(3).unwrap();
        let clues = geo.clues_of(&random_board(19, seed));
        let j = job(3, &clues, Method::Brute);
        let total = j.brute.as_ref().unwrap().total();
        let one = solve(&j, Some(1));
        let many = solve(&j, Some(k.min(total)));
        // `solve` verifies each chunk: its nodes equal its rank range and its boards lie inside it.
        prop_assert_eq!(many.tally.nodes, u128::from(total));
        prop_assert_eq!(many.solutions, one.solutions);
    }
}

proptest! {
    // Brute force on side 4 costs up to ~0.1 s per puzzle: a few cases keep the default run short.
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn brute_and_propagate_agree(side in 3usize..=4, seed in any::<u64>()) {
        let geo = Geometry::new(side).unwrap();
        let board = random_board(geo.n_tiles(), seed);
        let clues = geo.clues_of(&board);
        let brute_job = job(side, &clues, Method::Brute);
        // An all-black or all-yellow board leaves a single board to test: one chunk.
        let chunks = brute_job.brute.as_ref().map_or(1, |b| b.total().min(5));
        let brute = solve(&brute_job, Some(chunks));
        let prop = solve(&job(side, &clues, Method::Propagate), None);
        prop_assert_eq!(&brute.solutions, &prop.solutions);
        prop_assert_eq!(brute.tally.counter("solutions"), prop.tally.counter("solutions"));
        prop_assert!(prop.solutions.contains(&geo.encode(&board)));
    }
}
