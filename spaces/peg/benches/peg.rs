//! Peg solitaire: the original program's solver against sweep's `solve` on the English centre game, same seeds, same
//! run; a simpler DFS `solve` against the crate's on the larger boards (wiegleb, diamond, european); then the
//! exhaustive modes (`count`, `positions`) on the triangle, and on the English board when `PEG_BENCH_ENGLISH=1`
//! (minutes), and the diamond's proofs of impossibility when `PEG_BENCH_PROOFS=1` (minutes).
//!
//! Run: `cargo bench -p sweep-peg --bench peg`; `-- probe` times `solve` alone on the big boards, three seeds each.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sweep_peg::board::{bits, Board, BoardKind, Move};
use sweep_peg::game::{Game, Goal};
use sweep_peg::solve::{ChildOrder, Outcome, Solver, SplitMix};
use sweep_space::{Answer, ChunkId, Control, Registry, Space, SpaceError};

/// Every position reachable on the triangle, apex empty at the start: the DAG both the scaling and the
/// whole-job timings run.
const TRIANGLE_POSITIONS: &[&str] = sweep_peg::positions::TRIANGLE_ARGS;

static REGISTRY: std::sync::LazyLock<Registry> =
    std::sync::LazyLock::new(|| Registry::new().with::<sweep_peg::Peg>());

fn lookup(space: &str) -> Result<&'static dyn Space, SpaceError> {
    REGISTRY.lookup(space)
}

fn job_from_params(
    space: &str,
    params: &serde_json::Value,
) -> Result<sweep_space::SpaceJob, SpaceError> {
    REGISTRY.job_from_params(space, params)
}

/// The original program's algorithm, re-implemented: start from the goal board, undo moves (a reverse move needs
/// the landing hole filled and the two others empty), remember every board seen in a set, stop at the start
/// board. The move list is shuffled once from the random seed, as that program's random move order.
struct OriginalSolver<'a> {
    moves: Vec<Move>,
    start: u64,
    seen: HashSet<u64>,
    path: Vec<Move>,
    board: &'a Board,
}

impl OriginalSolver<'_> {
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

fn original_solve(game: &Game, seed: u64) -> (usize, usize) {
    let order = SplitMix::new(seed).permutation(game.board.moves.len());
    let moves = order.iter().map(|&i| game.board.moves[i]).collect();
    let goal = match game.goal {
        Goal::Hole(h) => 1u64 << h,
        Goal::Any => 1u64 << game.start_hole,
    };
    let mut s = OriginalSolver {
        moves,
        start: game.start,
        seen: HashSet::new(),
        path: Vec::new(),
        board: &game.board,
    };
    s.seen.insert(goal);
    let found = s.search(goal);
    assert!(found, "the original search finds the centre game");
    // The path runs goal -> start; replay it forwards to check it.
    let forward: Vec<(u8, u8, u8)> = s
        .path
        .iter()
        .rev()
        .map(|m| (m.from, m.over, m.to))
        .collect();
    assert!(
        game.replay(&forward).is_ok(),
        "the original search's solution replays"
    );
    (s.path.len(), s.seen.len())
}

fn sweep_solve(game: &Game, seed: u64) -> u64 {
    let ctl = Control::new();
    let mut solver = Solver::new(game, seed, &ctl);
    match solver.solve() {
        Ok(Outcome::Solved(moves)) => {
            assert!(
                game.replay_indices(&moves).is_ok(),
                "sweep solution replays"
            );
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

/// Runs the job and every job of its input DAG in this process, inputs first, each chunk one after the other
/// (`chunks` overrides the top job's chunk count); returns the time, a summary and the nodes of every chunk of
/// every job in the DAG. The layered `count` and `positions` expand each position once, so the node total must
/// not depend on the number of shards.
fn run_job_split(args: &[&str], chunks: Option<u64>) -> (Duration, String, u128) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let job = lookup("peg")
        .and_then(|s| s.parse_args(&args))
        .expect("valid job");
    let ctl = Control::new();
    let t = Instant::now();
    let mut done: HashMap<String, Vec<u8>> = HashMap::new();
    let mut nodes = 0u128;
    let answer = run_dag(&job, chunks, &ctl, &mut done, &mut nodes);
    let el = t.elapsed();
    let res = job.result(&answer);
    let summary = if let Some(c) = res.get("count") {
        format!("count {c}")
    } else {
        format!("positions totals {}", res["positions"]["totals"])
    };
    (el, summary, nodes)
}

/// One job of a DAG: its inputs first (memoised by canonical params, as the coordinator does), then its chunks;
/// returns its answer, with the merged artifact inside.
fn run_dag(
    job: &sweep_space::SpaceJob,
    chunks: Option<u64>,
    ctl: &Control,
    done: &mut HashMap<String, Vec<u8>>,
    nodes: &mut u128,
) -> Answer {
    let mut arts = Vec::new();
    for inp in job.inputs() {
        let key = format!("{} {}", inp.space, inp.params);
        if !done.contains_key(&key) {
            let input = job_from_params(&inp.space, &inp.params).expect("input job");
            let ans = run_dag(&input, None, ctl, done, nodes);
            done.insert(key.clone(), ans.artifact);
        }
        arts.push(key);
    }
    let bound = if arts.is_empty() {
        job.clone()
    } else {
        let slices: Vec<&[u8]> = arts.iter().map(|k| done[k].as_slice()).collect();
        job.bind_inputs(&slices).expect("inputs bind")
    };
    let n = bound.plan(chunks).expect("plan").n_chunks;
    let outs: Vec<_> = (0..n)
        .map(|i| bound.run_chunk(ChunkId::new(n, i), ctl).expect("chunk"))
        .collect();
    *nodes += outs.iter().map(|o| u128::from(o.nodes)).sum::<u128>();
    let mut answer = Answer::from_outputs(&outs);
    answer.artifact = bound
        .merge_artifacts(&mut outs.iter().map(|o| o.artifact.as_slice()))
        .expect("merge");
    answer
}

/// A simpler `solve` (without the beam search and the linear program's pagodas), re-implemented as the baseline for
/// the larger boards, to show what those two add: a forward DFS in a seeded move order with children sorted by
/// (isolated pegs, distance from the goal), the game's generic pagoda functions, a failed set canonical under the
/// goal's symmetries, restarts with doubling node budgets, and the exact endgame table once the first budget is
/// spent. It gives up at `deadline` (the big boards could otherwise run for minutes).
struct OldSolver<'a> {
    game: &'a Game,
    order: Vec<usize>,
    failed: HashSet<u64>,
    children: ChildOrder,
    endgame: Vec<HashSet<u64>>,
    budget: u64,
    nodes: u64,
    jitter: Option<SplitMix>,
    deadline: Instant,
}

enum OldStop {
    Budget,
    Deadline,
}

impl OldSolver<'_> {
    fn new(game: &Game, seed: u64, limit: Duration) -> OldSolver<'_> {
        OldSolver {
            game,
            order: SplitMix::new(seed).permutation(game.board.moves.len()),
            failed: HashSet::new(),
            children: ChildOrder::new(game),
            endgame: Vec::new(),
            budget: 1 << 17,
            nodes: 0,
            jitter: None,
            deadline: Instant::now() + limit,
        }
    }

    fn build_endgame(&mut self) {
        let g = self.game;
        let mut layer: HashSet<u64> = match g.goal {
            Goal::Hole(h) => [1u64 << h].into_iter().collect(),
            Goal::Any => bits(g.board.holes)
                .map(|h| g.canon(&g.goal_group, 1u64 << h))
                .collect(),
        };
        let mut total = layer.len();
        let last = g.start.count_ones() as usize;
        while self.endgame.len() + 1 < last && total <= 1 << 15 {
            let mut next = HashSet::new();
            for &pos in &layer {
                for m in &g.board.moves {
                    if pos & m.flip == 1u64 << m.to {
                        next.insert(g.canon(&g.goal_group, pos ^ m.flip));
                    }
                }
            }
            total += next.len();
            self.endgame.push(std::mem::replace(&mut layer, next));
        }
        self.endgame.push(layer);
    }

    /// `Some(true)` solved (checked by replay), `Some(false)` proved impossible, `None` out of time.
    fn solve(&mut self, seed: u64) -> Option<bool> {
        let mut attempt = 0u64;
        loop {
            let mut path = Vec::new();
            match self.dfs(self.game.start, self.game.start.count_ones(), &mut path) {
                Ok(found) => {
                    if found {
                        assert!(
                            self.game.replay_indices(&path).is_ok(),
                            "old solution replays"
                        );
                    }
                    return Some(found);
                }
                Err(OldStop::Deadline) => return None,
                Err(OldStop::Budget) => {
                    attempt += 1;
                    if attempt == 1 {
                        self.build_endgame();
                    }
                    self.budget = (1u64 << 17) << attempt.min(40);
                    let mut rng = SplitMix::new(seed ^ attempt.wrapping_mul(0xA076_1D64_78BD_642F));
                    self.order = rng.permutation(self.game.board.moves.len());
                    self.jitter = Some(rng);
                }
            }
        }
    }

    fn score(&mut self, pos: u64) -> u32 {
        let noise = self
            .jitter
            .as_mut()
            .map_or(0, |r| (r.next_u64() % 4) as u32);
        self.children.score(pos) + noise
    }

    fn dfs(&mut self, pos: u64, pegs: u32, path: &mut Vec<usize>) -> Result<bool, OldStop> {
        let g = self.game;
        if pegs == 1 {
            return Ok(g.is_goal(pos));
        }
        if let Some(table) = self.endgame.get(pegs as usize - 1) {
            if !table.contains(&g.canon(&g.goal_group, pos)) {
                return Ok(false);
            }
        } else if g.pagoda_dead(pos) {
            return Ok(false);
        }
        if self.budget == 0 {
            return Err(OldStop::Budget);
        }
        self.budget -= 1;
        self.nodes += 1;
        if self.nodes.is_multiple_of(1 << 14) && Instant::now() > self.deadline {
            return Err(OldStop::Deadline);
        }
        let key = g.canon(&g.goal_group, pos);
        if self.failed.contains(&key) {
            return Ok(false);
        }
        let order = std::mem::take(&mut self.order);
        let mut children: Vec<(u32, usize)> = Vec::new();
        for &mi in &order {
            let m = g.board.moves[mi];
            if m.applies(pos) {
                children.push((self.score(pos ^ m.flip), mi));
            }
        }
        self.order = order;
        children.sort_by_key(|c| c.0);
        for (_, mi) in children {
            path.push(mi);
            if self.dfs(pos ^ g.board.moves[mi].flip, pegs - 1, path)? {
                return Ok(true);
            }
            path.pop();
        }
        self.failed.insert(key);
        Ok(false)
    }
}

/// sweep's solve with a time limit (a watcher thread cancels it): (time, nodes, outcome).
fn sweep_solve_limited(game: &Game, seed: u64, limit: Duration) -> (Duration, u64, String) {
    let ctl = Arc::new(sweep_space::ChunkControl::default());
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (ctl, done) = (ctl.clone(), done.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < limit {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            ctl.cancel();
        })
    };
    let t = Instant::now();
    let mut solver = Solver::new(game, seed, ctl.control());
    let out = solver.solve();
    let el = t.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let what = match out {
        Ok(Outcome::Solved(moves)) => {
            assert!(
                game.replay_indices(&moves).is_ok(),
                "sweep solution replays"
            );
            "solved".to_string()
        }
        Ok(Outcome::ImpossibleByClass(_)) => "impossible (class)".into(),
        Ok(Outcome::ImpossibleByPagoda(_)) => "impossible (pagoda)".into(),
        Ok(Outcome::ImpossibleBySearch) => "impossible (search)".into(),
        Err(_) => format!("did not finish within {limit:?}"),
    };
    (el, solver.nodes + solver.table_nodes, what)
}

/// The larger boards: the simpler solver against the crate's, same seeds, same run; the simpler one is stopped
/// after `PEG_BENCH_LIMIT_S` seconds (default 10).
fn big_boards() {
    let limit = Duration::from_secs_f64(
        std::env::var("PEG_BENCH_LIMIT_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10.0),
    );
    println!(
        "
larger boards: simple solve (DFS + generic pagodas + failed set + endgame table) vs sweep solve"
    );
    println!("(beam search + linear-program pagodas), seeds 0..2, each stopped after {limit:?}:");
    for (kind, start, goal) in [
        (BoardKind::Wiegleb, "5,5", Some("5,5")),
        (BoardKind::Wiegleb, "1,4", None),
        (BoardKind::Diamond, "2,4", None),
        (BoardKind::Diamond, "3,5", None),
        (BoardKind::European, "1,3", None),
    ] {
        let board = Board::new(kind);
        let Ok(s) = board.parse_hole(start) else {
            continue;
        };
        let goal = match goal.map(|g| board.parse_hole(g)) {
            Some(Ok(h)) => Goal::Hole(h),
            _ => Goal::Any,
        };
        let game = Game::new(board, s, goal);
        let goal_name = match goal {
            Goal::Hole(h) => game.board.name(h),
            Goal::Any => "any".into(),
        };
        for seed in 0..2u64 {
            let t = Instant::now();
            let mut old = OldSolver::new(&game, seed, limit);
            let old_out = old.solve(seed);
            let old_el = t.elapsed();
            let old_text = match old_out {
                Some(true) => format!("solved in {old_el:.2?} ({} nodes)", old.nodes),
                Some(false) => format!("impossible in {old_el:.2?}"),
                None => format!("did not finish within {limit:?} ({} nodes)", old.nodes),
            };
            let (el, nodes, what) = sweep_solve_limited(&game, seed, limit);
            let ratio = if old_out.is_some() && what == "solved" {
                format!("  ratio {:.1}x", old_el.as_secs_f64() / el.as_secs_f64())
            } else if old_out.is_none() && what == "solved" {
                format!("  ratio > {:.0}x", limit.as_secs_f64() / el.as_secs_f64())
            } else {
                String::new()
            };
            println!(
                "  {kind:?} {start} -> {goal_name} seed {seed}: simple {old_text}; sweep {what} in {el:.2?} ({nodes} nodes){ratio}"
            );
        }
    }
}

/// The diamond games that no single function rules out and no beam solves: the simpler solver (stopped after
/// `PEG_BENCH_LIMIT_S`) against sweep's solve, whose complete search is breadth first with learned functions and
/// runs to the end (minutes; opt in with `PEG_BENCH_PROOFS=1`).
fn proofs(limit: Duration) {
    println!("\ndiamond proofs of impossibility: previous solve (stopped after {limit:?}) vs sweep solve (no limit):");
    for (start, goal) in [
        ("1,5", Some("3,5")),
        ("1,5", Some("9,5")),
        ("1,5", None),
        ("4,5", None),
    ] {
        let board = Board::new(BoardKind::Diamond);
        let (Ok(s), goal) = (
            board.parse_hole(start),
            match goal.map(|g| board.parse_hole(g)) {
                Some(Ok(h)) => Goal::Hole(h),
                _ => Goal::Any,
            },
        ) else {
            continue;
        };
        let game = Game::new(board, s, goal);
        let goal_name = match goal {
            Goal::Hole(h) => game.board.name(h),
            Goal::Any => "any".into(),
        };
        let t = Instant::now();
        let mut old = OldSolver::new(&game, 0, limit);
        let old_out = old.solve(0);
        let old_el = t.elapsed();
        let old_text = match old_out {
            Some(true) => format!("solved in {old_el:.2?}"),
            Some(false) => format!("impossible in {old_el:.2?}"),
            None => format!("did not finish within {limit:?} ({} nodes)", old.nodes),
        };
        let (el, nodes, what) = sweep_solve_limited(&game, 0, Duration::from_secs(24 * 3600));
        let ratio = match old_out {
            Some(_) => format!("  ratio {:.1}x", old_el.as_secs_f64() / el.as_secs_f64()),
            None if el < limit => {
                format!("  ratio > {:.1}x", limit.as_secs_f64() / el.as_secs_f64())
            }
            None => String::new(),
        };
        println!("  diamond {start} -> {goal_name}: previous {old_text}; sweep {what} in {el:.2?} ({nodes} nodes){ratio}");
    }
}

/// Total nodes of the exhaustive modes' whole DAG for 1..16 shards, against one shard: how much work more
/// workers add (1.00 = none; the previous split repeated 2.17x at 4 chunks for the triangle count, 16x at 16
/// for positions).
fn scaling() {
    println!("\nshard scaling (every job of the DAG run here one chunk after the other; nodes summed over all):");
    for args in [
        &["--board", "triangle", "--goal", "any", "--mode", "count"][..],
        &["--board", "triangle", "--start", "2,1", "--mode", "count"][..],
        TRIANGLE_POSITIONS,
    ] {
        let with = |n: u64| {
            let mut a: Vec<&str> = args.to_vec();
            let n = n.to_string();
            a.extend(["--shards", n.as_str()]);
            run_job_split(&a, None)
        };
        let (_, _, one) = with(1);
        for n in [1u64, 2, 4, 16] {
            let (el, summary, nodes) = with(n);
            println!(
                "  {} shards {n:2}: {el:?}, {nodes} nodes, redundancy {:.2} ({summary})",
                args.join(" "),
                nodes as f64 / one.max(1) as f64
            );
        }
    }
}

/// `-- probe`: how long `solve` takes on the big boards, three seeds each, every chunk verified (the move list
/// replayed to the goal) as the coordinator would; one line per game, nothing compared.
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
            let args: Vec<String> = [
                "--board", board, "--start", start, "--goal", goal, "--seed", &seed_text,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let t = Instant::now();
            let job = lookup("peg")
                .and_then(|s| s.parse_args(&args))
                .expect("valid job");
            let ctl = Control::new();
            let out = job.run_chunk(ChunkId::new(1, 0), &ctl).expect("chunk runs");
            job.verify(ChunkId::new(1, 0), &out)
                .expect("chunk verifies");
            let ans = Answer::from_outputs(&[out]);
            let res = job.result(&ans);
            println!(
                "{board} {start} {goal} seed {seed}: {:?} nodes {} solved={} {}",
                t.elapsed(),
                ans.tally.nodes,
                res["solved"],
                res["impossible"]
            );
        }
    }
}

fn main() {
    if std::env::args().skip(1).any(|a| a == "probe") {
        probe_big_boards();
        return;
    }
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let seeds: Vec<u64> = (0..8).collect();
    println!("English centre game, seeds {seeds:?}");
    let mut base = Vec::new();
    let mut base_seen = 0;
    for &s in &seeds {
        let t = Instant::now();
        let (len, seen) = original_solve(&game, s);
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
        "baseline (original backward search, all boards remembered): median {bm:?}  max {bx:?}  mean {ba:?}  ({} boards/run)",
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

    // The solve comparison first: the exhaustive modes below may take minutes.
    big_boards();
    if std::env::var("PEG_BENCH_PROOFS").as_deref() == Ok("1") {
        proofs(Duration::from_secs_f64(
            std::env::var("PEG_BENCH_LIMIT_S")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(60.0),
        ));
    } else {
        println!("(set PEG_BENCH_PROOFS=1 for the diamond proofs of impossibility, minutes each)");
    }

    for args in [
        &["--board", "triangle", "--goal", "any", "--mode", "count"][..],
        TRIANGLE_POSITIONS,
    ] {
        let (el, summary) = run_job(args);
        println!("{}: {summary} in {el:?}", args.join(" "));
    }
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
