//! Tests of the peg space: replays of every solution, cross-checks of `count` and `positions` against naive
//! searches written here, chunking invariance, symmetry properties, parameter errors.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use sweep_space::{Answer, Control};

fn job(args: &[&str]) -> Result<sweep_space::SpaceJob, SpaceError> {
    sweep_space::testkit::parse_args::<crate::Peg>(args)
}

/// Runs every chunk of `job` split into `n` and merges, checking each output with `verify`.
fn run_all(job: &dyn Job, n: u64) -> Answer {
    sweep_space::testkit::run_all(job, Some(n))
}

fn solve_result(args: &[&str]) -> Value {
    let j = job(args).expect("valid job");
    let n = j.plan(None).expect("plan").n_chunks;
    j.result(&run_all(j.as_ref(), n))
}

/// Replays the JSON moves of a solve result on the job's board and returns the final position's pegs.
fn replay_json(job: &PegJob, result: &Value) -> Vec<u64> {
    let b = &job.game.board;
    let moves: Vec<(u8, u8, u8)> = result["moves"]
        .as_array()
        .expect("moves array")
        .iter()
        .map(|m| {
            let h = |k: &str| b.parse_hole(m[k].as_str().expect("name")).expect("hole");
            (h("from"), h("over"), h("to"))
        })
        .collect();
    job.game
        .replay(&moves)
        .expect("the moves replay to the goal")
}

fn peg_job(args: &[&str]) -> PegJob {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    use clap::{Args, FromArgMatches};
    let cmd = PegParams::augment_args(clap::Command::new("peg").no_binary_name(true));
    let m = cmd.try_get_matches_from(args).expect("args parse");
    PegJob::new(PegParams::from_arg_matches(&m).expect("params")).expect("job builds")
}

#[test]
fn english_solutions_replay_for_many_seeds() {
    for seed in 0..40u64 {
        let seed_text = seed.to_string();
        let j = peg_job(&["--seed", &seed_text]);
        let res = j.result(&run_all(&j, 1));
        assert_eq!(res["solved"], true, "seed {seed}");
        let boards = replay_json(&j, &res);
        assert_eq!(boards.len(), 32, "31 moves");
        assert_eq!(
            *boards.last().unwrap_or(&0),
            1u64 << 24,
            "ends on the centre"
        );
    }
}

#[test]
fn solutions_replay_on_every_board() {
    // One quick combination or more per board; wiegleb and diamond go through the beam search.
    for (board, start, goal, seeds) in [
        ("english", "centre", "centre", 0..5u64),
        ("english", "1,3", "any", 0..5),
        ("european", "2,4", "any", 0..3),
        ("european", "1,3", "any", 0..2),
        ("wiegleb", "centre", "centre", 0..2),
        ("wiegleb", "1,4", "any", 0..2),
        ("diamond", "3,5", "any", 0..2),
        ("triangle", "1,1", "any", 0..20),
        ("triangle", "1,1", "1,1", 0..20),
        ("triangle", "3,2", "any", 0..20),
    ] {
        for seed in seeds {
            let seed_text = seed.to_string();
            let j = peg_job(&[
                "--board", board, "--start", start, "--goal", goal, "--seed", &seed_text,
            ]);
            let res = j.result(&run_all(&j, 1));
            assert_eq!(
                res["solved"], true,
                "{board} {start} {goal} seed {seed}: {res}"
            );
            replay_json(&j, &res);
        }
    }
}

/// Solves `game` with `seed` and checks that the moves replay from the start to the goal.
fn solve_and_replay(game: &Game, seed: u64) -> Result<usize, String> {
    let ctl = Control::new();
    let mut solver = Solver::new(game, seed, &ctl);
    match solver.solve() {
        Ok(Outcome::Solved(moves)) => {
            game.replay_indices(&moves)?;
            Ok(moves.len())
        }
        other => Err(format!("{other:?}")),
    }
}

/// Combinations that every seed must solve quickly, one or two per board (wiegleb and diamond by the beam).
const QUICK_GAMES: [(BoardKind, &str, &str); 7] = [
    (BoardKind::English, "4,4", "4,4"),
    (BoardKind::English, "3,4", "any"),
    (BoardKind::European, "1,3", "any"),
    (BoardKind::Wiegleb, "4,5", "any"),
    (BoardKind::Wiegleb, "5,5", "5,5"),
    (BoardKind::Diamond, "2,4", "any"),
    (BoardKind::Triangle, "3,1", "any"),
];

fn quick_game(i: usize) -> Game {
    let (kind, start, goal) = QUICK_GAMES[i % QUICK_GAMES.len()];
    let board = Board::new(kind);
    let start = board.parse_hole(start).expect("hole");
    let goal = if goal == "any" {
        Goal::Any
    } else {
        Goal::Hole(board.parse_hole(goal).expect("hole"))
    };
    Game::new(board, start, goal)
}

/// An off-by-one in the goal's hole would still end on one peg: check that the last peg sits on exactly the hole
/// that was asked for, for goals other than the start hole too.
#[test]
fn regression_goal_is_the_requested_hole() {
    let b = Board::new(BoardKind::English);
    let start = 24u8;
    let start_class = b.class(b.holes & !(1u64 << start));
    let mut tried = 0;
    for goal in board::bits(b.holes) {
        if b.class(1u64 << goal) != start_class {
            continue;
        }
        let goal_name = b.name(goal);
        let j = peg_job(&["--start", "4,4", "--goal", &goal_name, "--seed", "7"]);
        let res = j.result(&run_all(&j, 1));
        assert_eq!(res["goal"], goal_name.as_str());
        assert_eq!(res["solved"], true, "goal {goal_name}");
        let boards = replay_json(&j, &res);
        assert_eq!(
            boards.last().copied(),
            Some(1u64 << goal),
            "goal {goal_name}"
        );
        tried += 1;
    }
    // The centre's class holds 5 holes on the English board: 4,4 and the four at distance 3.
    assert_eq!(tried, 5);
}

#[test]
fn european_centre_game_is_impossible_by_class() {
    let res = solve_result(&["--board", "european"]);
    assert_eq!(res["solved"], false);
    let why = res["impossible"].as_str().expect("a reason");
    assert!(why.contains("position class"), "{why}");
    // A class-compatible impossible pair is found by exhaustive search on a small board.
    let res = solve_result(&["--board", "triangle", "--start", "1,1", "--goal", "3,3"]);
    assert_eq!(res["solved"], false, "{res}");
    assert!(res["impossible"].as_str().is_some());
}

#[test]
fn diamond_centre_start_is_impossible_by_class_for_every_goal() {
    for goal in ["centre", "any"] {
        let res = solve_result(&["--board", "diamond", "--goal", goal]);
        assert_eq!(res["solved"], false, "{res}");
        let why = res["impossible"].as_str().expect("a reason");
        assert!(why.starts_with("position class"), "{why}");
    }
    // Wiegleb's centre game is not ruled out by the classes (it is solvable).
    let wiegleb = peg_job(&["--board", "wiegleb"]);
    assert_eq!(wiegleb.game.class_obstruction(), None);
}

#[test]
fn bad_parameters_are_typed_errors() {
    for (args, name) in [
        (&["--start", "1,1"][..], "start"),
        (&["--goal", "0,4"][..], "goal"),
        (&["--start", "nowhere"][..], "start"),
        (&["--board", "triangle", "--start", "1,2"][..], "start"),
        (&["--goal", "8,8"][..], "goal"),
    ] {
        match job(args) {
            Err(SpaceError::InvalidParam { name: n, .. }) => assert_eq!(n, name, "{args:?}"),
            other => panic!("{args:?} gave {other:?}"),
        }
    }
    let j = job(&["--mode", "solve"]).expect("valid");
    assert!(j.plan(Some(2)).is_err());
    assert!(j.plan(Some(0)).is_err());
    assert!(j.run_chunk(ChunkId::new(1, 1), &Control::new()).is_err());
}

/// Every mode plans by the contract's rule ([`Plan::chunk_count`]), which peg once re-wrote: at least one chunk,
/// and the contract's words for a count it refuses.
#[test]
fn every_mode_plans_by_the_contracts_rule() {
    for mode in ["solve", "count", "positions"] {
        let j = job(&["--board", "triangle", "--goal", "any", "--mode", mode]).expect("valid");
        assert!(j.plan(None).expect("plan").n_chunks >= 1, "{mode}");
        let zero = Plan::chunk_count(Some(0), 1, 1).expect_err("zero chunks");
        assert_eq!(j.plan(Some(0)), Err(zero), "{mode}");
        match j.plan(Some(u64::MAX)) {
            Err(SpaceError::InvalidParam {
                name: "chunks",
                reason,
            }) => {
                assert!(
                    reason.contains("more than this job can be split into"),
                    "{mode}: {reason}"
                )
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}

#[test]
fn params_round_trip() {
    let j = job(&["--board", "triangle", "--goal", "any", "--mode", "count"]).expect("valid");
    let again = sweep_space::testkit::registry::<crate::Peg>()
        .job_from_params("peg", j.params())
        .expect("rebuilds");
    assert_eq!(j.params(), again.params());
    assert_eq!(j.params()["start"], "1,1");
}

#[test]
fn solve_output_is_drawn_like_the_seed() {
    let j = peg_job(&["--seed", "3"]);
    let res = j.result(&run_all(&j, 1));
    let text = j.render_text(&res);
    assert!(text.contains("31 moves"), "{text}");
    // Two blocks of boards (16 + 16): the first board's top row is `  XXX` and the centre row `XXX0XXX`.
    assert!(text.contains("XXX0XXX"), "{text}");
    let block_rows: Vec<&str> = text.lines().filter(|l| l.starts_with("  XXX")).collect();
    assert!(!block_rows.is_empty());
}

// ---- naive cross-checks -------------------------------------------------------------------------------------

/// Every move sequence from `pos` to the goal, counted without symmetry (memoised by position only).
pub(super) fn naive_count(game: &Game, pos: u64, memo: &mut HashMap<u64, u128>) -> u128 {
    if pos.count_ones() == 1 {
        return u128::from(game.is_goal(pos));
    }
    if let Some(&c) = memo.get(&pos) {
        return c;
    }
    let c = game
        .board
        .moves
        .iter()
        .filter(|m| pos & m.flip == m.need)
        .map(|m| naive_count(game, pos ^ m.flip, memo))
        .sum();
    memo.insert(pos, c);
    c
}

/// Image of `pos` under a symmetry by walking its holes (independent of the byte tables).
fn image(game: &Game, g: usize, pos: u64) -> u64 {
    board::bits(pos).fold(0, |a, b| {
        a | 1u64 << game.board.symmetries[g].perm[b as usize]
    })
}

/// Every position reachable from the game's start, by a plain depth-first walk (no symmetry).
fn naive_reachable(game: &Game) -> HashSet<u64> {
    let mut seen: HashSet<u64> = HashSet::from([game.start]);
    let mut stack = vec![game.start];
    while let Some(p) = stack.pop() {
        for m in &game.board.moves {
            if m.applies(p) && seen.insert(p ^ m.flip) {
                stack.push(p ^ m.flip);
            }
        }
    }
    seen
}

/// Per peg count, in the order of [`LAYER_FIELDS`]: [reachable up to symmetry, raw, on a path up to symmetry,
/// raw], from plain sets.
pub(super) fn naive_positions(game: &Game) -> BTreeMap<u32, [u64; 4]> {
    let seen = naive_reachable(game);
    let mut memo = HashMap::new();
    let canon = |p: u64| {
        game.game_group
            .iter()
            .map(|&g| image(game, g, p))
            .min()
            .unwrap_or(p)
    };
    let mut out: BTreeMap<u32, [u64; 4]> = BTreeMap::new();
    let (mut classes, mut good) = (HashSet::new(), HashSet::new());
    for &p in &seen {
        let e = out.entry(p.count_ones()).or_default();
        e[1] += 1;
        if classes.insert(canon(p)) {
            e[0] += 1;
        }
        if naive_count(game, p, &mut memo) > 0 {
            e[3] += 1;
            if good.insert(canon(p)) {
                e[2] += 1;
            }
        }
    }
    out
}

/// A 5x5 grid without its corners' outer cells: 4,4-ish cross with filled inner square and three extra holes
/// that break most symmetries (21 holes would be too many for the naive count; this keeps 16).
pub(super) fn custom_board() -> Board {
    Board::custom(5, |r, c| {
        let inner = (1..4).contains(&r) && (1..4).contains(&c);
        let arm = (r == 2 && (c == 0 || c == 4)) || (c == 2 && (r == 0 || r == 4));
        let extra = (r == 0 && c == 1) || (r == 3 && c == 4) || (r == 4 && c == 3);
        inner || arm || extra
    })
}

fn custom_game(goal_any: bool) -> Game {
    let board = custom_board();
    let start = board.bit_at[2 * 5 + 2].expect("centre hole");
    let goal = if goal_any {
        Goal::Any
    } else {
        Goal::Hole(start)
    };
    Game::new(board, start, goal)
}

fn games_for_cross_checks() -> Vec<Game> {
    let tri = Board::new(BoardKind::Triangle);
    let mut games = Vec::new();
    for (start, goal) in [
        (0u8, Goal::Any),
        (0, Goal::Hole(0)),
        (5 + 1, Goal::Any),
        (10 + 2, Goal::Hole(5 * 4)),
    ] {
        games.push(Game::new(tri.clone(), start, goal));
    }
    games.push(custom_game(true));
    games.push(custom_game(false));
    games
}

#[test]
fn count_matches_naive_enumeration_for_every_split() {
    for game in games_for_cross_checks() {
        let expect = naive_count(&game, game.start, &mut HashMap::new());
        let j = PegJob::from_game(game, Mode::Count, 0);
        let max = j.count_chunks_max();
        for n in [1, 2, 3, 7, max] {
            if n > max {
                continue;
            }
            let ans = run_all(&j, n);
            assert_eq!(
                ans.tally.counter("count"),
                expect,
                "{:?} n={n}",
                j.game.goal
            );
            let res = j.result(&ans);
            assert_eq!(res["count"], expect.to_string());
        }
    }
}

#[test]
fn triangle_count_is_the_known_figure() {
    // The 15-hole triangle with the apex empty: 29760 winning sequences ending anywhere (a classic figure).
    // The single-chunk method; the jobs of `--mode count` run it as a DAG (`dag_tests.rs`).
    let tri = Game::new(Board::new(BoardKind::Triangle), 0, Goal::Any);
    let ans = run_all(&PegJob::from_game(tri, Mode::Count, 0), 1);
    assert_eq!(ans.tally.counter("count"), 29760);
}

#[test]
fn positions_match_naive_sets_for_every_split() {
    for game in games_for_cross_checks() {
        let expect = naive_positions(&game);
        let j = PegJob::from_game(game, Mode::Positions, 0);
        for n in [1, 2, 5, 16] {
            let ans = run_all(&j, n);
            for (&pegs, e) in &expect {
                let got = LAYER_FIELDS
                    .map(|w| ans.tally.counter(&layer_counter(pegs as usize, w)) as u64);
                assert_eq!(got, *e, "pegs {pegs} n={n}");
            }
            let res = j.result(&ans);
            let total: u64 = expect.values().map(|e| e[1]).sum();
            assert_eq!(res["positions"]["totals"]["reachable_raw"], total);
        }
    }
}

#[test]
fn every_board_has_the_same_class_basis_size_as_its_group_of_classes() {
    // Square boards: Conway's 16 classes; the triangle's lines leave 2 free parities.
    for kind in [
        BoardKind::English,
        BoardKind::European,
        BoardKind::Wiegleb,
        BoardKind::Diamond,
    ] {
        assert_eq!(Board::new(kind).class_basis.len(), 4, "{kind:?}");
    }
}

proptest! {
    // Each case is one solve of up to a few hundred milliseconds on the big boards: a dozen cases.
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn any_seed_solves_every_board_and_replays(seed in any::<u64>(), game in 0usize..QUICK_GAMES.len()) {
        let g = quick_game(game);
        let moves = solve_and_replay(&g, seed);
        prop_assert!(moves.is_ok(), "{:?} seed {}: {:?}", QUICK_GAMES[game], seed, moves);
        prop_assert_eq!(moves.unwrap_or(0) as u32, g.depth());
    }
}

proptest! {
    #[test]
    fn canonical_form_is_shared_by_every_image(raw in any::<u64>(), kind in 0usize..5) {
        let kinds = [BoardKind::English, BoardKind::European, BoardKind::Wiegleb, BoardKind::Diamond, BoardKind::Triangle];
        let board = Board::new(kinds[kind]);
        let pos = raw & board.holes;
        let game = Game::new(board, 0, Goal::Any);
        let all: Vec<usize> = (0..game.board.symmetries.len()).collect();
        let c = game.canon(&all, pos);
        for g in 0..all.len() {
            let img = game.board.symmetries[g].apply(pos);
            prop_assert_eq!(img, image(&game, g, pos));
            prop_assert_eq!(img.count_ones(), pos.count_ones());
            prop_assert_eq!(game.canon(&all, img), c);
        }
        prop_assert_eq!(all.len() as u64 % game.orbit_size(&all, pos), 0);
    }

    #[test]
    fn any_seed_solves_the_triangle_and_replays(seed in any::<u64>(), start in 0usize..15) {
        let board = Board::new(BoardKind::Triangle);
        let hole = board::bits(board.holes).nth(start).unwrap_or(0);
        let game = Game::new(board, hole, Goal::Any);
        let ctl = Control::new();
        let mut solver = Solver::new(&game, seed, &ctl);
        match solver.solve() {
            Ok(Outcome::Solved(moves)) => {
                prop_assert!(game.replay_indices(&moves).is_ok());
            }
            other => prop_assert!(false, "triangle start {} gave {:?}", hole, other),
        }
    }
}

/// The English centre game's published figures (Bell 2009; Durango Bill): about a minute of CPU each.
/// Run with `cargo test -p sweep-peg --release tests::english_ -- --ignored`.
#[test]
#[ignore]
fn english_count_is_the_published_figure() {
    // The single-chunk methods (`--mode count` runs the DAG of `dag_tests.rs`).
    let english = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let j = PegJob::from_game(english, Mode::Count, 0);
    let ans = run_all(&j, 2);
    assert_eq!(ans.tally.counter("count"), 40_861_647_040_079_968);
}

/// See [`english_count_is_the_published_figure`] for the command.
#[test]
#[ignore]
fn english_positions_are_the_published_figures() {
    let english = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let j = PegJob::from_game(english, Mode::Positions, 0);
    let res = j.result(&run_all(&j, 1));
    assert_english_position_totals(&res);
}

/// The English board's published position counts, as a positions job's result reports them.
pub(super) fn assert_english_position_totals(res: &Value) {
    let t = &res["positions"]["totals"];
    assert_eq!(t["reachable"], 23_475_688u64, "{res}");
    assert_eq!(t["on_path"], 1_679_072u64, "{res}");
    assert_eq!(t["reachable_raw"], 187_636_299u64, "{res}");
    assert_eq!(t["on_path_raw"], 13_428_122u64, "{res}");
}

#[test]
fn generated_pagodas_are_pagodas_on_every_board_and_goal() {
    for kind in BoardKind::ALL {
        let b = Board::new(kind);
        let mut total = 0;
        for g in board::bits(b.holes) {
            for p in pagoda::for_goal(&b, g) {
                let w = pagoda::weights(&p);
                assert!(pagoda::is_pagoda(&b, &w), "{kind:?} goal {}", b.name(g));
                assert_eq!(p.threshold, w[g as usize]);
                assert!(p.threshold > 0);
                // No move raises the value, checked directly on the move's three holes.
                for m in &b.moves {
                    assert!(p.value(1u64 << m.to) <= p.value(m.need), "{kind:?}");
                }
                total += 1;
            }
        }
        assert!(total > 0, "{kind:?} has pagodas");
    }
}

/// A pagoda may only rule out positions that really cannot reach the goal: checked against the naive winning set
/// on the small games, for every reachable position.
#[test]
fn pagodas_never_prune_a_winning_position() {
    for game in games_for_cross_checks() {
        let seen = naive_reachable(&game);
        let mut pruned = 0;
        for &p in &seen {
            if game.pagoda_dead(p) {
                assert_eq!(
                    naive_count(&game, p, &mut HashMap::new()),
                    0,
                    "pagoda pruned a winning position"
                );
                pruned += 1;
            }
        }
        // The functions do prune something on these games (otherwise this test would check nothing).
        if matches!(game.goal, Goal::Hole(_)) {
            assert!(pruned > 0, "{:?}", game.goal);
        }
    }
}

// ---- solve: impossibility proofs, the linear program's pagodas, the English fast path -----------------------

/// Class-compatible pairs that a signed pagoda from the linear program proves impossible: reported with the
/// function's figures, and accepted by `verify`, which recomputes the proof.
#[test]
fn diamond_pairs_are_impossible_by_a_signed_pagoda() {
    for (start, goal) in [("3,5", "4,5"), ("4,5", "3,5"), ("4,5", "6,5")] {
        let j = peg_job(&["--board", "diamond", "--start", start, "--goal", goal]);
        assert_eq!(j.game.class_obstruction(), None, "{start} {goal}");
        let ans = run_all(&j, 1);
        assert_eq!(ans.tally.counter("impossible_pagoda"), 1, "{start} {goal}");
        let res = j.result(&ans);
        assert_eq!(res["solved"], false);
        let why = res["impossible"].as_str().expect("a reason");
        assert!(why.contains("linear program"), "{why}");
        assert!(why.contains(goal), "{why}");
    }
}

/// `verify` rejects a pagoda claim that no function backs (a solvable game).
#[test]
fn verify_rejects_an_unfounded_pagoda_claim() {
    let j = peg_job(&["--board", "wiegleb"]);
    let mut out = ChunkOutput::default();
    out.count("impossible_pagoda", 1);
    assert!(j.verify(ChunkId::new(1, 0), &out).is_err());
}

/// The size of a search proof travels with an impossible-by-search outcome only, and shows in its reason.
#[test]
fn search_proof_figures_go_with_the_search_outcome_only() {
    let j = peg_job(&["--board", "diamond", "--start", "1,5", "--goal", "9,5"]);
    let mut proof = ChunkOutput::default();
    proof.count("impossible_search", 1);
    proof.count("search_positions", 78_557_648);
    proof.count("search_emptied_after", 31);
    proof.count("search_functions", 275);
    j.verify(ChunkId::new(1, 0), &proof)
        .expect("a proof's figures are accepted");
    let answer = Answer::from_outputs([&proof]);
    let why = j.result(&answer)["impossible"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        why.contains("78557648") && why.contains("31 jumps"),
        "{why}"
    );

    let mut stray = ChunkOutput::default();
    stray.count("impossible_class", 1);
    stray.count("search_positions", 5);
    assert!(j.verify(ChunkId::new(1, 0), &stray).is_err());
    let mut two = proof.clone();
    two.count("solved", 1);
    assert!(j.verify(ChunkId::new(1, 0), &two).is_err());
}

/// Every function the linear program yields satisfies the pagoda inequality on every jump of the board,
/// checked exactly in integers on the move's three holes, for every board and a spread of start/goal pairs.
#[test]
fn linear_program_pagodas_hold_on_every_jump() {
    for kind in BoardKind::ALL {
        let b = Board::new(kind);
        let holes: Vec<u8> = board::bits(b.holes).collect();
        let mut found = 0;
        for (i, &start) in holes.iter().enumerate().step_by(5) {
            let pos = b.holes & !(1u64 << start);
            for &goal in holes.iter().skip(i % 3).step_by(7) {
                let Some(p) = pagoda::tightest_for(&b, goal, pos, "test") else {
                    continue;
                };
                found += 1;
                let w = pagoda::weights(&p);
                assert!(pagoda::is_pagoda(&b, &w), "{kind:?}");
                assert_eq!(p.threshold, w[goal as usize]);
                for m in &b.moves {
                    assert!(
                        p.value(1u64 << m.to) <= p.value(m.need),
                        "{kind:?} goal {}: jump {}>{}>{}",
                        b.name(goal),
                        b.name(m.from),
                        b.name(m.over),
                        b.name(m.to)
                    );
                }
            }
        }
        assert!(found > 0, "{kind:?}");
    }
}

/// The solver's pruning (generic functions plus the linear program's for this start) never rules out a
/// position that can still win, checked against the naive winning set on the small games.
#[test]
fn strong_pruning_never_prunes_a_winning_position() {
    for game in games_for_cross_checks() {
        let prune = solve::strong_pruner(&game);
        let seen = naive_reachable(&game);
        let mut memo = HashMap::new();
        for &p in &seen {
            if prune.dead(p) {
                assert!(
                    naive_count(&game, p, &mut memo) == 0,
                    "pruned a winning position"
                );
            }
        }
    }
}

/// The English board is solved by the first, budgeted depth-first attempt for every seed: the endgame table
/// (and the beam) are never needed, which is what keeps it far under 50 ms.
#[test]
fn english_needs_only_the_first_attempt_for_seeds_0_to_100() {
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    for seed in 0..100u64 {
        let ctl = Control::new();
        let mut solver = Solver::new(&game, seed, &ctl);
        assert!(
            matches!(solver.solve(), Ok(Outcome::Solved(_))),
            "seed {seed}"
        );
        assert_eq!(
            solver.table_nodes, 0,
            "seed {seed} needed the endgame table"
        );
    }
}

/// The endgame table's walk ends on the goal from every member of its top layer (here the triangle's, small
/// enough to build completely).
#[test]
fn endgame_walk_reaches_the_goal_from_members() {
    let board = Board::new(BoardKind::Triangle);
    let game = Game::new(board, 0, Goal::Hole(0));
    let ctl = Control::new();
    let mut nodes = 0;
    let table = endgame::Endgame::build(&game, 1 << 12, &ctl, &mut nodes).expect("builds");
    let mut checked = 0;
    for pegs in 2..=game.start.count_ones() {
        if !table.covers(pegs) {
            break;
        }
        // Members reached forward from the start: walk each to the goal.
        let mut layer = vec![game.start];
        for _ in 0..game.start.count_ones() - pegs {
            let mut next = Vec::new();
            for &p in &layer {
                for m in &game.board.moves {
                    if m.applies(p) && !next.contains(&(p ^ m.flip)) {
                        next.push(p ^ m.flip);
                    }
                }
            }
            layer = next;
        }
        for &p in layer.iter().filter(|&&p| table.contains(&game, p)) {
            let mut pos = p;
            for mi in table.walk(&game, p, &(0..game.board.moves.len()).collect::<Vec<_>>()) {
                let m = game.board.moves[mi];
                assert!(m.applies(pos));
                pos ^= m.flip;
            }
            assert!(game.is_goal(pos));
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// `--seed` changes the solution deterministically on the beam-solved boards too: the same seed gives the same
/// moves, different seeds give different ones.
#[test]
fn seeds_vary_beam_solutions_reproducibly() {
    let game = quick_game(5); // diamond 2,4 -> any
    let solve = |seed: u64| {
        let ctl = Control::new();
        match Solver::new(&game, seed, &ctl).solve() {
            Ok(Outcome::Solved(m)) => m,
            other => panic!("seed {seed}: {other:?}"),
        }
    };
    let first = solve(0);
    assert_eq!(first, solve(0));
    let distinct: HashSet<Vec<usize>> = (0..4).map(solve).collect();
    assert!(distinct.len() > 1, "every seed gave the same moves");
}
