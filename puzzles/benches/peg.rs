//! Peg solitaire: the seed's solver against sweep's `solve` on the English centre game, same seeds, same run;
//! then the exhaustive modes (`count`, `positions`) on the triangle, and on the English board when
//! `PEG_BENCH_ENGLISH=1` (minutes).
//!
//! Run: `cargo bench -p sweep-puzzles --bench peg`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use sweep_puzzles::peg::board::{Board, BoardKind, Move};
use sweep_puzzles::peg::game::{Game, Goal};
use sweep_puzzles::peg::solve::{Outcome, Solver, SplitMix};
use sweep_puzzles::{lookup, Control};

/// The seed's algorithm, re-implemented: start from the goal board, undo moves (a reverse move needs the landing
/// hole filled and the two others empty), remember every board seen in a set, stop at the start board. The move
/// list is shuffled once by the seed, as the seed's random move order.
struct SeedSolver<'a> {
    moves: Vec<Move>,
    start: u64,
    seen: HashSet<u64>,
    path: Vec<Move>,
    board: &'a Board,
}

impl SeedSolver<'_> {
    fn search(&mut self, pos: u64) -> bool {
        if pos == self.start {
            return true;
        }
        for i in 0..self.moves.len() {
            let m = self.moves[i];
            let two = m.need; // from | over must be empty
            let one = 1u64 << m.to; // to must hold a peg
            if pos & two == 0 && pos & one != 0 {
                let prev = pos ^ m.flip;
                if prev & !self.board.holes != 0 || !self.seen.insert(prev) {
                    continue;
                }
                self.path.push(m);
                if self.search(prev) {
                    return true;
                }
                self.path.pop();
            }
        }
        false
    }
}

fn seed_solve(game: &Game, seed: u64) -> (usize, usize) {
    let order = SplitMix::new(seed).permutation(game.board.moves.len());
    let moves = order.iter().map(|&i| game.board.moves[i]).collect();
    let goal = match game.goal {
        Goal::Hole(h) => 1u64 << h,
        Goal::Any => 1u64 << game.start_hole,
    };
    let mut s = SeedSolver {
        moves,
        start: game.start,
        seen: HashSet::new(),
        path: Vec::new(),
        board: &game.board,
    };
    s.seen.insert(goal);
    let found = s.search(goal);
    assert!(found, "the seed's search finds the centre game");
    // The path runs goal -> start; replay it forwards to check it.
    let forward: Vec<(u8, u8, u8)> = s
        .path
        .iter()
        .rev()
        .map(|m| (m.from, m.over, m.to))
        .collect();
    assert!(game.replay(&forward).is_ok(), "seed solution replays");
    (s.path.len(), s.seen.len())
}

fn sweep_solve(game: &Game, seed: u64) -> u64 {
    let ctl = Control::new();
    let mut solver = Solver::new(game, seed, &ctl);
    match solver.solve() {
        Ok(Outcome::Solved(moves)) => {
            let triples: Vec<(u8, u8, u8)> = moves
                .iter()
                .map(|&i| {
                    let m = game.board.moves[i];
                    (m.from, m.over, m.to)
                })
                .collect();
            assert!(game.replay(&triples).is_ok(), "sweep solution replays");
        }
        other => panic!("sweep did not solve: {other:?}"),
    }
    solver.nodes
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let total: Duration = v.iter().sum();
    (v[v.len() / 2], v[v.len() - 1], total / v.len() as u32)
}

fn run_job(args: &[&str]) -> (Duration, String) {
    let (el, summary, _) = run_job_split(args, None);
    (el, summary)
}

/// Runs every chunk of the job split `chunks` ways (the job's default when `None`) one after the other; returns the
/// time, a summary and the total nodes of all chunks (their sum over the nodes of one chunk is the redundancy).
fn run_job_split(args: &[&str], chunks: Option<u64>) -> (Duration, String, u128) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let job = lookup("peg")
        .and_then(|s| s.parse_args(&args))
        .expect("valid job");
    let n = job.plan(chunks).expect("plan").n_chunks;
    let ctl = Control::new();
    let t = Instant::now();
    let outs: Vec<_> = (0..n)
        .map(|i| job.run_chunk(n, i, &ctl).expect("chunk"))
        .collect();
    let el = t.elapsed();
    let answer = sweep_puzzles::Answer::from_outputs(&outs);
    let res = job.result(&answer);
    let summary = if let Some(c) = res.get("count") {
        format!("count {c}")
    } else {
        format!("positions totals {}", res["positions"]["totals"])
    };
    (el, summary, answer.tally.nodes)
}

/// sweep's solve on the larger boards, per seed: (time, nodes, outcome).
fn big_boards() {
    println!("\nlarger boards, sweep solve (pagodas + canonical failed set + endgame table), seeds 0..3:");
    for (board, start, goal) in [
        ("european", "1,3", "any"),
        ("european", "2,4", "any"),
        ("european", "4,4", "4,4"),
        ("diamond", "5,5", "any"),
    ] {
        for seed in 0..3u64 {
            let seed_text = seed.to_string();
            let args = [
                "--board", board, "--start", start, "--goal", goal, "--seed", &seed_text,
            ];
            let (el, _, nodes) = run_job_split(&args, None);
            println!("  {board} start {start} goal {goal} seed {seed}: {el:?} ({nodes} nodes)");
        }
    }
}

/// Total nodes of the exhaustive modes for 1..16 chunks, against one chunk: how much work the split repeats.
fn scaling() {
    println!(
        "\nchunk scaling (all chunks run here one after the other; nodes summed over chunks):"
    );
    for args in [
        &["--board", "triangle", "--goal", "any", "--mode", "count"][..],
        &["--board", "triangle", "--start", "2,1", "--mode", "count"][..],
        &[
            "--board",
            "triangle",
            "--goal",
            "any",
            "--mode",
            "positions",
        ][..],
    ] {
        let (_, _, one) = run_job_split(args, Some(1));
        for n in [1u64, 2, 4, 16] {
            let (el, summary, nodes) = run_job_split(args, Some(n));
            println!(
                "  {} chunks {n:2}: {el:?}, {nodes} nodes, redundancy {:.2} ({summary})",
                args.join(" "),
                nodes as f64 / one.max(1) as f64
            );
        }
    }
}

fn main() {
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let seeds: Vec<u64> = (0..8).collect();
    println!("English centre game, seeds {seeds:?}");
    let mut base = Vec::new();
    let mut base_seen = 0;
    for &s in &seeds {
        let t = Instant::now();
        let (len, seen) = seed_solve(&game, s);
        base.push(t.elapsed());
        base_seen += seen;
        assert_eq!(len, 31);
    }
    let mut ours = Vec::new();
    let mut our_nodes = 0;
    for &s in &seeds {
        let t = Instant::now();
        our_nodes += sweep_solve(&game, s);
        ours.push(t.elapsed());
    }
    let (bm, bx, ba) = stats(base);
    let (om, ox, oa) = stats(ours);
    println!(
        "baseline (seed's backward search, all boards remembered): median {bm:?}  max {bx:?}  mean {ba:?}  ({} boards/run)",
        base_seen / seeds.len()
    );
    println!(
        "sweep solve (forward DFS, canonical failed set, restarts):  median {om:?}  max {ox:?}  mean {oa:?}  ({} nodes/run)",
        our_nodes / seeds.len() as u64
    );
    println!(
        "ratio baseline/sweep: median {:.0}x  mean {:.0}x",
        bm.as_secs_f64() / om.as_secs_f64(),
        ba.as_secs_f64() / oa.as_secs_f64()
    );

    for args in [
        &["--board", "triangle", "--goal", "any", "--mode", "count"][..],
        &[
            "--board",
            "triangle",
            "--goal",
            "any",
            "--mode",
            "positions",
        ][..],
    ] {
        let (el, summary) = run_job(args);
        println!("{}: {summary} in {el:?}", args.join(" "));
    }
    big_boards();
    scaling();
    if std::env::var("PEG_BENCH_ENGLISH").as_deref() == Ok("1") {
        for args in [&["--mode", "count"][..], &["--mode", "positions"][..]] {
            let (el, summary) = run_job(args);
            println!(
                "english {}: {summary} in {el:?} (one thread)",
                args.join(" ")
            );
        }
    } else {
        println!("(set PEG_BENCH_ENGLISH=1 for the English count and positions, minutes each)");
    }
}
