//! Tests of the peg space: replays of every solution, cross-checks of `count` and `positions` against naive
//! searches written here, chunking invariance, symmetry properties, parameter errors.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::space::{Answer, Control};

fn job(args: &[&str]) -> Result<Arc<dyn Job>, SpaceError> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    crate::lookup("peg")?.parse_args(&args)
}

use std::sync::Arc;

/// Runs every chunk of `job` split into `n` and merges, checking each output with `verify`.
fn run_all(job: &dyn Job, n: u64) -> Answer {
    let ctl = Control::new();
    let outs: Vec<ChunkOutput> = (0..n)
        .map(|i| {
            let out = job.run_chunk(n, i, &ctl).expect("chunk runs");
            job.verify(n, i, &out).expect("chunk verifies");
            out
        })
        .collect();
    Answer::from_outputs(&outs)
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
    Peg::build(PegParams::from_arg_matches(&m).expect("params")).expect("job builds")
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
    // The larger boards take seconds for some seeds (see the module docs); these seeds are quick ones.
    for (board, start, goal, seeds) in [
        ("english", "centre", "centre", 0..5u64),
        ("english", "1,3", "any", 0..5),
        ("european", "2,4", "any", 0..1),
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

/// The seed's latest head searched for the goal peg one hole below the centre: check that the last peg sits on
/// exactly the hole that was asked for, for goals other than the start hole too.
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
    assert!(j.run_chunk(1, 1, &Control::new()).is_err());
}

#[test]
fn params_round_trip() {
    let j = job(&["--board", "triangle", "--goal", "any", "--mode", "count"]).expect("valid");
    let again = crate::job_from_params("peg", &j.params()).expect("rebuilds");
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

/// Every move sequence, one by one, no memo, no symmetry.
fn naive_count(game: &Game, pos: u64) -> u128 {
    if pos.count_ones() == 1 {
        return u128::from(game.is_goal(pos));
    }
    let mut n = 0;
    for m in &game.board.moves {
        if pos & m.flip == m.need {
            n += naive_count(game, pos ^ m.flip);
        }
    }
    n
}

/// Image of `pos` under a symmetry by walking its holes (independent of the byte tables).
fn image(game: &Game, g: usize, pos: u64) -> u64 {
    board::bits(pos).fold(0, |a, b| {
        a | 1u64 << game.board.symmetries[g].perm[b as usize]
    })
}

/// Per peg count: (reachable raw, up to symmetry, on a path raw, up to symmetry), from plain sets.
fn naive_positions(game: &Game) -> HashMap<u32, [u64; 4]> {
    let mut seen: HashSet<u64> = HashSet::new();
    let mut stack = vec![game.start];
    seen.insert(game.start);
    while let Some(p) = stack.pop() {
        for m in &game.board.moves {
            if p & m.flip == m.need && seen.insert(p ^ m.flip) {
                stack.push(p ^ m.flip);
            }
        }
    }
    fn wins(game: &Game, p: u64, memo: &mut HashMap<u64, bool>) -> bool {
        if p.count_ones() == 1 {
            return game.is_goal(p);
        }
        if let Some(&w) = memo.get(&p) {
            return w;
        }
        let w = game
            .board
            .moves
            .iter()
            .any(|m| p & m.flip == m.need && wins(game, p ^ m.flip, memo));
        memo.insert(p, w);
        w
    }
    let mut memo = HashMap::new();
    let canon = |p: u64| {
        game.game_group
            .iter()
            .map(|&g| image(game, g, p))
            .min()
            .unwrap_or(p)
    };
    let mut out: HashMap<u32, [u64; 4]> = HashMap::new();
    let mut classes: HashSet<u64> = HashSet::new();
    let mut good_classes: HashSet<u64> = HashSet::new();
    for &p in &seen {
        let e = out.entry(p.count_ones()).or_default();
        e[0] += 1;
        if classes.insert(canon(p)) {
            e[1] += 1;
        }
        if wins(game, p, &mut memo) {
            e[2] += 1;
            if good_classes.insert(canon(p)) {
                e[3] += 1;
            }
        }
    }
    out
}

fn custom_game(goal_any: bool) -> Game {
    // A 5x5 grid without its corners' outer cells: 4,4-ish cross with filled inner square (21 holes would be
    // too many for the naive count; this keeps 16).
    let board = Board::custom(5, |r, c| {
        let inner = (1..4).contains(&r) && (1..4).contains(&c);
        let arm = (r == 2 && (c == 0 || c == 4)) || (c == 2 && (r == 0 || r == 4));
        let extra = (r == 0 && c == 1) || (r == 3 && c == 4) || (r == 4 && c == 3);
        inner || arm || extra
    });
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
        let expect = naive_count(&game, game.start);
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
    let j = job(&["--board", "triangle", "--goal", "any", "--mode", "count"]).expect("valid");
    let ans = run_all(j.as_ref(), 1);
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
                assert_eq!(got, [e[1], e[0], e[3], e[2]], "pegs {pegs} n={n}");
            }
            let res = j.result(&ans);
            let total: u64 = expect.values().map(|e| e[0]).sum();
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
                let triples: Vec<(u8, u8, u8)> = moves
                    .iter()
                    .map(|&i| { let m = game.board.moves[i]; (m.from, m.over, m.to) })
                    .collect();
                prop_assert!(game.replay(&triples).is_ok());
            }
            other => prop_assert!(false, "triangle start {} gave {:?}", hole, other),
        }
    }
}

/// The English centre game's published figures (Bell 2009; Durango Bill): about a minute of CPU each.
/// Run with `cargo test -p sweep-puzzles --release peg::tests::english_ -- --ignored`.
#[test]
#[ignore]
fn english_count_is_the_published_figure() {
    let j = job(&["--mode", "count"]).expect("valid");
    let ans = run_all(j.as_ref(), 2);
    assert_eq!(ans.tally.counter("count"), 40_861_647_040_079_968);
}

/// See [`english_count_is_the_published_figure`] for the command.
#[test]
#[ignore]
fn english_positions_are_the_published_figures() {
    let j = job(&["--mode", "positions"]).expect("valid");
    let res = j.result(&run_all(j.as_ref(), 1));
    let t = &res["positions"]["totals"];
    assert_eq!(t["reachable"], 23_475_688u64, "{res}");
    assert_eq!(t["on_path"], 1_679_072u64, "{res}");
    assert_eq!(t["reachable_raw"], 187_636_299u64, "{res}");
    assert_eq!(t["on_path_raw"], 13_428_122u64, "{res}");
}

/// Timing probe for the big boards (prints; asserts every answer replays).
/// `cargo test -p sweep-puzzles --release peg::tests::probe_big_boards -- --ignored --nocapture`
#[test]
#[ignore]
fn probe_big_boards() {
    for (board, start, goal) in [
        ("english", "centre", "centre"),
        ("european", "1,3", "any"),
        ("european", "1,4", "7,4"),
        ("european", "2,4", "any"),
        ("diamond", "1,5", "any"),
        ("wiegleb", "1,4", "any"),
        ("wiegleb", "centre", "centre"),
    ] {
        for seed in 0..3u64 {
            let seed_text = seed.to_string();
            let t = std::time::Instant::now();
            let j = peg_job(&[
                "--board", board, "--start", start, "--goal", goal, "--seed", &seed_text,
            ]);
            let ans = run_all(&j, 1);
            let res = j.result(&ans);
            println!(
                "{board} {start} {goal} seed {seed}: {:?} nodes {} solved={} {}",
                t.elapsed(),
                ans.tally.nodes,
                res["solved"],
                res["impossible"]
            );
            if res["solved"] == true {
                replay_json(&j, &res);
            }
        }
    }
}

#[test]
fn generated_pagodas_are_pagodas_on_every_board_and_goal() {
    for kind in [
        BoardKind::English,
        BoardKind::European,
        BoardKind::Wiegleb,
        BoardKind::Diamond,
        BoardKind::Triangle,
    ] {
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
        let mut seen: HashSet<u64> = HashSet::new();
        let mut stack = vec![game.start];
        seen.insert(game.start);
        while let Some(p) = stack.pop() {
            for m in &game.board.moves {
                if m.applies(p) && seen.insert(p ^ m.flip) {
                    stack.push(p ^ m.flip);
                }
            }
        }
        let mut pruned = 0;
        for &p in &seen {
            if game.pagoda_dead(p) {
                assert_eq!(naive_count(&game, p), 0, "pagoda pruned a winning position");
                pruned += 1;
            }
        }
        // The functions do prune something on these games (otherwise this test would check nothing).
        if matches!(game.goal, Goal::Hole(_)) {
            assert!(pruned > 0, "{:?}", game.goal);
        }
    }
}
