//! Tests of the `count` / `positions` DAG ([`super::dag`], [`super::layers`]) through an in-process driver that
//! does what the engine does: resolve `inputs()` recursively (one job per distinct parameters), run every chunk
//! of a job only after its inputs, `verify` each output, merge the artifacts, bind them in order, and merge the
//! answer with `Answer::from_outputs`. Answers are checked against naive searches written here (no symmetry, no
//! layers), against the single-chunk methods of `count.rs` / `positions.rs`, and across shard counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::board::{Board, BoardKind};
use super::dag::{Dag, Stage};
use super::game::{Game, Goal};
use super::layers::{self, LayerReader};
use super::tests::{naive_count, naive_positions};
use super::{layer_counter, Mode, PegJob, PegParams, LAYER_FIELDS};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, JobInput, SpaceError};

type Resolver = Box<dyn Fn(&JobInput) -> Arc<dyn Job>>;

/// What the driver measured for one job.
#[derive(Debug)]
struct JobRun {
    label: String,
    chunk_nodes: Vec<u64>,
    artifact_bytes: usize,
    /// Seconds binding the inputs and running the chunks (workers' side), and merging (coordinator's side).
    run_secs: f64,
    merge_secs: f64,
}

/// The engine's job DAG, in process.
struct Driver {
    resolve: Resolver,
    runs: Vec<JobRun>,
}

fn key(job: &dyn Job) -> String {
    format!("{} {}", job.space(), job.params())
}

fn label(params: &Value) -> String {
    match (params["stage"].as_str(), params["layer"].as_u64()) {
        (Some(s), Some(k)) => format!("{s} {k} ({}->{})", params["start"], params["goal"]),
        _ => format!("{}", params["mode"]),
    }
}

impl Driver {
    fn standard() -> Driver {
        Driver {
            resolve: Box::new(|inp| {
                sweep_space::testkit::registry::<crate::Peg>()
                    .job_from_params(&inp.space, &inp.params)
                    .expect("input params rebuild a job")
                    .job()
                    .clone()
            }),
            runs: Vec::new(),
        }
    }

    /// Jobs on a board that has no name (`Board::custom`): stages are rebuilt on that board.
    fn custom(board: Board) -> Driver {
        Driver {
            resolve: Box::new(move |inp| Arc::new(custom_job(&board, &inp.params))),
            runs: Vec::new(),
        }
    }

    /// Runs `top` and everything it needs; returns its answer. Artifacts are dropped as soon as their last
    /// reader has run, as an engine's store would leave them on disk.
    fn run(&mut self, top: Arc<dyn Job>) -> Answer {
        // Discover the DAG: post-order gives an order in which every input precedes its readers.
        let mut order: Vec<String> = Vec::new();
        let mut jobs: HashMap<String, (Arc<dyn Job>, Vec<String>)> = HashMap::new();
        let mut readers: HashMap<String, usize> = HashMap::new();
        fn visit(
            d: &Driver,
            job: Arc<dyn Job>,
            order: &mut Vec<String>,
            jobs: &mut HashMap<String, (Arc<dyn Job>, Vec<String>)>,
            readers: &mut HashMap<String, usize>,
        ) -> String {
            let k = key(job.as_ref());
            if jobs.contains_key(&k) {
                return k;
            }
            let mut ins = Vec::new();
            for inp in job.inputs() {
                let child = (d.resolve)(&inp);
                assert_eq!(child.params(), inp.params, "input params are canonical");
                let ck = visit(d, child, order, jobs, readers);
                *readers.entry(ck.clone()).or_default() += 1;
                ins.push(ck);
            }
            jobs.insert(k.clone(), (job, ins));
            order.push(k.clone());
            k
        }
        let top_key = visit(self, top, &mut order, &mut jobs, &mut readers);
        let mut artifacts: HashMap<String, Vec<u8>> = HashMap::new();
        let ctl = Control::new();
        for k in &order {
            let (job, ins) = &jobs[k];
            let t = Instant::now();
            let bound: Arc<dyn Job> = if ins.is_empty() {
                job.clone()
            } else {
                let arts: Vec<&[u8]> = ins.iter().map(|i| artifacts[i].as_slice()).collect();
                job.bind_inputs(&arts).expect("inputs bind")
            };
            let n = job.plan(None).expect("plan").n_chunks;
            let outs: Vec<ChunkOutput> = (0..n)
                .map(|i| {
                    let out = bound
                        .run_chunk(ChunkId::new(n, i), &ctl)
                        .expect("chunk runs");
                    job.verify(ChunkId::new(n, i), &out)
                        .expect("chunk verifies");
                    out
                })
                .collect();
            let run_secs = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut ans = Answer::from_outputs(&outs);
            if outs.iter().any(|o| !o.artifact.is_empty()) {
                let mut it = outs.iter().map(|o| o.artifact.as_slice());
                ans.artifact = job.merge_artifacts(&mut it).expect("artifacts merge");
            }
            self.runs.push(JobRun {
                label: label(&job.params()),
                chunk_nodes: outs.iter().map(|o| o.nodes).collect(),
                artifact_bytes: ans.artifact.len(),
                run_secs,
                merge_secs: t.elapsed().as_secs_f64(),
            });
            drop(bound);
            for i in ins {
                let left = readers.get_mut(i).expect("counted reader");
                *left -= 1;
                if *left == 0 {
                    artifacts.remove(i);
                }
            }
            if *k == top_key {
                return ans;
            }
            artifacts.insert(k.clone(), std::mem::take(&mut ans.artifact));
        }
        unreachable!("the top job is last in post-order")
    }

    /// Nodes per kind of job (`layer`, `path`, or the top job's mode).
    fn nodes_by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for r in &self.runs {
            let kind = r.label.split(' ').next().unwrap_or_default().to_string();
            *m.entry(kind).or_default() += r.chunk_nodes.iter().sum::<u64>();
        }
        m
    }
}

fn custom_job(board: &Board, params: &Value) -> PegJob {
    let params: PegParams = serde_json::from_value(params.clone()).expect("params");
    let hole = |t: &Option<String>| {
        board
            .parse_hole(t.as_deref().expect("resolved"))
            .expect("hole")
    };
    let start = hole(&params.start);
    let goal = match params.goal.as_deref() {
        Some("any") => Goal::Any,
        _ => Goal::Hole(hole(&params.goal)),
    };
    let game = Game::new(board.clone(), start, goal);
    let dag = Dag::new(&params, &game).expect("valid stage");
    PegJob { params, game, dag }
}

/// A DAG job for `game` (its board may be custom) in `mode`, with `shards`.
fn dag_job(game: &Game, mode: Mode, shards: Option<u32>) -> PegJob {
    let b = &game.board;
    let params = PegParams {
        board: b.kind,
        start: Some(b.name(game.start_hole)),
        goal: Some(match game.goal {
            Goal::Hole(h) => b.name(h),
            Goal::Any => "any".into(),
        }),
        seed: 0,
        mode,
        stage: None,
        layer: None,
        shards,
    };
    custom_job(b, &serde_json::to_value(&params).expect("json"))
}

fn job(args: &[&str]) -> Result<Arc<dyn Job>, SpaceError> {
    sweep_space::testkit::parse_args::<crate::Peg>(args).map(|j| j.job().clone())
}

// ---- independent references: raw positions, no symmetry, no layers --------------------------------------------

fn small_games() -> Vec<Game> {
    let tri = Board::new(BoardKind::Triangle);
    let mut games: Vec<Game> = [
        (0u8, Goal::Any),
        (0, Goal::Hole(0)),
        (6, Goal::Any),
        (6, Goal::Hole(6)),
        (12, Goal::Hole(20)),
        (0, Goal::Hole(12)),
    ]
    .into_iter()
    .map(|(s, g)| Game::new(tri.clone(), s, g))
    .collect();
    // A 16-hole board on a 5x5 grid with only one mirror symmetry: classes of size 1 and 2 side by side.
    let custom = Board::custom(5, |r, c| {
        let inner = (1..4).contains(&r) && (1..4).contains(&c);
        let arm = (r == 2 && (c == 0 || c == 4)) || (c == 2 && (r == 0 || r == 4));
        let extra = (r == 0 && c == 1) || (r == 3 && c == 4) || (r == 4 && c == 3);
        inner || arm || extra
    });
    let centre = custom.bit_at[12].expect("centre");
    let other = custom.bit_at[2 * 5 + 1].expect("hole 3,2");
    for (s, g) in [
        (centre, Goal::Hole(centre)),
        (centre, Goal::Any),
        (other, Goal::Hole(centre)),
    ] {
        games.push(Game::new(custom.clone(), s, g));
    }
    // A plus of 21 holes (arms 1 wide on 7x7 plus a 3x3 centre): all 8 symmetries.
    let plus = Board::custom(7, |r, c| {
        (r == 3 && (1..6).contains(&c))
            || (c == 3 && (1..6).contains(&r))
            || (r.abs_diff(3) <= 1 && c.abs_diff(3) <= 1)
    });
    let pc = plus.bit_at[24].expect("centre");
    games.push(Game::new(plus.clone(), pc, Goal::Hole(pc)));
    games.push(Game::new(plus, pc, Goal::Any));
    games
}

fn driver_for(game: &Game) -> Driver {
    if game.board.kind == BoardKind::Triangle {
        Driver::standard()
    } else {
        Driver::custom(game.board.clone())
    }
}

#[test]
fn dag_count_matches_naive_and_single_chunk_counts() {
    for game in small_games() {
        let expect = naive_count(&game, game.start, &mut HashMap::new());
        let ctl = Control::new();
        let single = super::count::Counter::new(&game, &ctl)
            .wins(game.start)
            .expect("counts");
        assert_eq!(single, expect, "{:?}", game.goal);
        for shards in [1, 3] {
            let j = dag_job(&game, Mode::Count, Some(shards));
            let mut d = driver_for(&game);
            let ans = d.run(Arc::new(j.clone()));
            assert_eq!(
                ans.tally.counter("count"),
                expect,
                "{:?} S={shards}",
                game.goal
            );
            assert_eq!(j.result(&ans)["count"], expect.to_string());
        }
        // The forward chain alone gives the same number: the goal's class weight in the one-peg layer.
        let mut d = driver_for(&game);
        let last = dag_stage(&game, Stage::Layer, game.depth(), None);
        let ans = d.run(Arc::new(last));
        let at_goal: u128 = LayerReader::new(&ans.artifact, game.depth())
            .expect("layer")
            .map(|e| e.expect("entry"))
            .filter(|&(p, _)| game.is_goal(p))
            .map(|(_, w)| w)
            .sum();
        assert_eq!(at_goal, expect, "{:?}", game.goal);
    }
}

fn dag_stage(game: &Game, stage: Stage, layer: u32, shards: Option<u32>) -> PegJob {
    let mut p = dag_job(game, Mode::Solve, shards).params;
    p.stage = Some(stage);
    p.layer = Some(layer);
    custom_job(&game.board, &serde_json::to_value(&p).expect("json"))
}

#[test]
fn triangle_count_is_29760_through_the_dag() {
    let j = job(&["--board", "triangle", "--goal", "any", "--mode", "count"]).expect("valid");
    let ans = Driver::standard().run(j.clone());
    assert_eq!(ans.tally.counter("count"), 29760);
    assert_eq!(j.result(&ans)["count"], "29760");
}

#[test]
fn dag_positions_match_naive_sets_and_the_single_chunk_method() {
    for game in small_games() {
        let expect = naive_positions(&game);
        let (single, _) =
            super::positions::run(&game, ChunkId::new(1, 0), &Control::new()).expect("runs");
        for shards in [1, 5] {
            let j = dag_job(&game, Mode::Positions, Some(shards));
            let ans = driver_for(&game).run(Arc::new(j.clone()));
            let mut total_raw = 0;
            for pegs in 0..=game.board.n_holes {
                let got = LAYER_FIELDS
                    .map(|w| ans.tally.counter(&layer_counter(pegs as usize, w)) as u64);
                let want = expect.get(&pegs).copied().unwrap_or_default();
                assert_eq!(got, want, "{:?} pegs {pegs} S={shards}", game.goal);
                let s = single[pegs as usize];
                assert_eq!(
                    got,
                    [s.reachable, s.reachable_raw, s.on_path, s.on_path_raw]
                );
                total_raw += want[1];
            }
            let res = j.result(&ans);
            assert_eq!(res["positions"]["totals"]["reachable_raw"], total_raw);
        }
    }
    // The classic figure: 3016 positions reachable from the triangle with its apex empty.
    let j = job(super::positions::TRIANGLE_ARGS).expect("valid");
    let res = j.result(&Driver::standard().run(j.clone()));
    assert_eq!(res["positions"]["totals"]["reachable_raw"], 3016, "{res}");
}

/// Every position is expanded by one chunk of one job: the node totals do not depend on the shard count, and
/// neither does any answer or merged artifact.
#[test]
fn work_is_conserved_across_shard_counts() {
    for game in small_games().into_iter().filter(|g| g.board.n_holes >= 16) {
        let mut results = Vec::new();
        for shards in [1, 7] {
            for mode in [Mode::Count, Mode::Positions] {
                let mut d = driver_for(&game);
                let ans = d.run(Arc::new(dag_job(&game, mode, Some(shards))));
                let nodes = d.nodes_by_kind();
                let bytes: Vec<usize> = d.runs.iter().map(|r| r.artifact_bytes).collect();
                results.push((mode, shards, ans.tally.counters.clone(), nodes, bytes));
            }
        }
        let (s1, s7) = results.split_at(2);
        for (a, b) in s1.iter().zip(s7) {
            assert_eq!(a.2, b.2, "answers differ");
            assert_eq!(a.3, b.3, "{:?}: nodes S=1 {:?} vs S=7 {:?}", a.0, a.3, b.3);
            assert_eq!(a.4, b.4, "merged artifacts have the same sizes");
        }
        // Layer jobs do expand something (the check above is not vacuous).
        assert!(
            s1[1].3.get("layer").copied().unwrap_or(0) > 1000,
            "{:?}",
            s1[1].3
        );
    }
}

#[test]
fn dag_inputs_are_canonical_and_shared_between_count_and_positions() {
    let count = job(&["--mode", "count"]).expect("valid");
    let positions = job(&["--mode", "positions"]).expect("valid");
    let ins = count.inputs();
    // English centre game: the middle layer 15 and the dual layer 16, which is the game's own layer 16.
    assert_eq!(ins.len(), 2);
    assert_eq!(ins[0].params["layer"], 15);
    assert_eq!(ins[1].params["layer"], 16);
    assert_eq!(ins[1].params["start"], "4,4");
    for inp in ins.iter().chain(positions.inputs().iter()) {
        let j = sweep_space::testkit::registry::<crate::Peg>()
            .job_from_params(&inp.space, &inp.params)
            .expect("rebuilds");
        assert_eq!(j.params(), &inp.params);
        for deeper in j.inputs() {
            let d = sweep_space::testkit::registry::<crate::Peg>()
                .job_from_params(&deeper.space, &deeper.params)
                .expect("rebuilds");
            assert_eq!(d.params(), &deeper.params);
        }
    }
    // Path k reads layer k, which the count's chain holds too: one job for both users.
    let p15 = sweep_space::testkit::registry::<crate::Peg>()
        .job_from_params("peg", &positions.inputs()[15].params)
        .expect("path 15");
    assert_eq!(p15.inputs()[0], ins[0]);
    // A game whose goal differs from its start reads the dual game's layer (start and goal swapped).
    let j = job(&[
        "--board", "triangle", "--start", "1,1", "--goal", "4,1", "--mode", "count",
    ])
    .expect("valid");
    let ins = j.inputs();
    assert_eq!(
        (
            ins[1].params["start"].as_str(),
            ins[1].params["goal"].as_str()
        ),
        (Some("4,1"), Some("1,1"))
    );
}

#[test]
fn old_job_params_still_parse() {
    let old = serde_json::json!({"board": "english", "start": "4,4", "goal": "4,4", "seed": 0, "mode": "count"});
    let j = sweep_space::testkit::registry::<crate::Peg>()
        .job_from_params("peg", &old)
        .expect("old params parse");
    assert_eq!(
        j.params(),
        &old,
        "no new fields appear in a top job's params"
    );
    assert_eq!(j.inputs().len(), 2);
}

#[test]
fn bad_dag_parameters_are_typed_errors() {
    for (args, name) in [
        (
            &["--stage", "layer", "--layer", "14", "--board", "triangle"][..],
            "layer",
        ),
        (&["--stage", "path", "--layer", "99"][..], "layer"),
        (&["--stage", "layer"][..], "layer"),
        (&["--layer", "3"][..], "layer"),
        (&["--mode", "count", "--shards", "0"][..], "shards"),
        (&["--mode", "count", "--shards", "5000"][..], "shards"),
        (&["--shards", "4"][..], "shards"),
    ] {
        match job(args) {
            Err(SpaceError::InvalidParam { name: n, .. }) => assert_eq!(n, name, "{args:?}"),
            other => panic!("{args:?} gave {other:?}"),
        }
    }
    // The last layer of the triangle (13 jumps) is fine; 14 is not (above).
    assert!(job(&["--stage", "layer", "--layer", "13", "--board", "triangle"]).is_ok());
    let bad_json =
        serde_json::json!({"board": "triangle", "mode": "solve", "stage": "layer", "layer": -1});
    assert!(matches!(
        sweep_space::testkit::registry::<crate::Peg>().job_from_params("peg", &bad_json),
        Err(SpaceError::BadParams { .. })
    ));

    let ctl = Control::new();
    // Unbound jobs and wrong artifacts are errors, never panics.
    let l3 = job(&["--stage", "layer", "--layer", "3", "--board", "triangle"]).expect("valid");
    assert!(matches!(
        l3.run_chunk(ChunkId::new(1, 0), &ctl),
        Err(SpaceError::BadParams { .. })
    ));
    assert!(l3.run_chunk(ChunkId::new(2, 2), &ctl).is_err());
    assert!(l3.plan(Some(0)).is_err());
    assert!(l3.bind_inputs(&[]).is_err());
    assert!(l3.bind_inputs(&[b"junk"]).is_err());
    let l0 = job(&["--stage", "layer", "--layer", "0", "--board", "triangle"]).expect("valid");
    let start = l0.run_chunk(ChunkId::new(1, 0), &ctl).expect("start layer");
    assert!(
        l3.bind_inputs(&[&start.artifact]).is_err(),
        "layer 0 is not layer 2"
    );
    let count = job(&["--board", "triangle", "--mode", "count"]).expect("valid");
    assert!(
        count.bind_inputs(&[&start.artifact]).is_err(),
        "one artifact for two inputs"
    );
    assert!(count.run_chunk(ChunkId::new(1, 0), &ctl).is_err());
    assert!(count.plan(Some(2000)).is_err());
    assert!(job(&["--mode", "solve"])
        .expect("valid")
        .bind_inputs(&[])
        .is_err());
}

#[test]
fn verify_refuses_tampered_stage_outputs() {
    let game = Game::new(Board::new(BoardKind::Triangle), 0, Goal::Any);
    let mut d = Driver::standard();
    let l2 = d.run(Arc::new(dag_stage(&game, Stage::Layer, 2, None)));
    let l3 = dag_stage(&game, Stage::Layer, 3, None);
    let bound = l3.bind_inputs(&[&l2.artifact]).expect("binds");
    let ctl = Control::new();
    let out = bound.run_chunk(ChunkId::new(1, 0), &ctl).expect("runs");
    l3.verify(ChunkId::new(1, 0), &out)
        .expect("honest output verifies");
    let entries: Vec<(u64, u128)> = LayerReader::new(&out.artifact, 3)
        .expect("layer")
        .map(|e| e.expect("entry"))
        .collect();
    let rewrite = |f: &dyn Fn(u64) -> u64| {
        let mut v: Vec<(u64, u128)> = entries.iter().map(|&(p, w)| (f(p), w)).collect();
        v.sort_unstable();
        let mut w = layers::LayerWriter::new(3);
        for (p, x) in v {
            w.push(p, x).expect("sorted");
        }
        ChunkOutput {
            artifact: w.finish(),
            ..out.clone()
        }
    };
    // A non-canonical image of a position, a position with a peg too many, a wrong counter, a wrong layer.
    let mirror = &game.board.symmetries[game.game_group[1]];
    let (first, image) = entries
        .iter()
        .map(|&(p, _)| (p, mirror.apply(p)))
        .find(|&(p, img)| img != p)
        .expect("an asymmetric position");
    let non_canonical = rewrite(&|p| if p == first { image } else { p });
    assert!(l3.verify(ChunkId::new(1, 0), &non_canonical).is_err());
    let lowest_hole = |p: u64| (game.board.holes & !p) & (game.board.holes & !p).wrapping_neg();
    let extra_peg = rewrite(&|p| if p == first { p | lowest_hole(p) } else { p });
    assert!(l3.verify(ChunkId::new(1, 0), &extra_peg).is_err());
    let mut wrong_counter = out.clone();
    wrong_counter.count("positions", 1);
    assert!(l3.verify(ChunkId::new(1, 0), &wrong_counter).is_err());
    assert!(dag_stage(&game, Stage::Layer, 4, None)
        .verify(ChunkId::new(1, 0), &out)
        .is_err());
    // A path chunk may only list positions its own chunk owns.
    let p3 = dag_stage(&game, Stage::Path, 3, None);
    let p4 = d.run(Arc::new(dag_stage(&game, Stage::Path, 4, None)));
    let l3_merged = d.run(Arc::new(l3.clone()));
    let bound = p3
        .bind_inputs(&[&l3_merged.artifact, &p4.artifact])
        .expect("binds");
    let whole = bound.run_chunk(ChunkId::new(1, 0), &ctl).expect("runs");
    p3.verify(ChunkId::new(1, 0), &whole).expect("verifies");
    assert!(whole.counters["on_path"] > 1, "{:?}", whole.counters);
    assert!(
        p3.verify(ChunkId::new(2, 0), &whole).is_err()
            || p3.verify(ChunkId::new(2, 1), &whole).is_err()
    );
}

// ---- the English figures, and the measurements of the distributed modes ----------------------------------------

fn english_report(mode: Mode, shards: u32) -> (Answer, Driver, f64) {
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let j = dag_job(&game, mode, Some(shards));
    let mut d = Driver::standard();
    let t = Instant::now();
    let ans = d.run(Arc::new(j));
    let secs = t.elapsed().as_secs_f64();
    let (mut all, mut critical) = (0u64, 0u64);
    let (mut run, mut merge) = (0.0, 0.0);
    for r in &d.runs {
        let total: u64 = r.chunk_nodes.iter().sum();
        let max = r.chunk_nodes.iter().copied().max().unwrap_or(0);
        let mean = total as f64 / r.chunk_nodes.len().max(1) as f64;
        all += total;
        critical += max;
        run += r.run_secs;
        merge += r.merge_secs;
        println!(
            "{:28} chunks {:3} nodes {:10} max/mean {:5.3} artifact {:10} bytes, run {:6.2} s, merge {:5.2} s",
            r.label,
            r.chunk_nodes.len(),
            total,
            if mean > 0.0 { max as f64 / mean } else { 0.0 },
            r.artifact_bytes,
            r.run_secs,
            r.merge_secs
        );
    }
    // With one worker per shard, each job takes as long as its largest chunk: the speed-up bound of the split.
    println!(
        "{mode:?} S={shards}: {secs:.1} s ({run:.1} s chunks, {merge:.1} s merges), {} jobs, nodes by kind {:?}, \
         nodes / largest-chunk nodes summed over jobs = {:.2}",
        d.runs.len(),
        d.nodes_by_kind(),
        all as f64 / critical.max(1) as f64
    );
    (ans, d, secs)
}

/// English count through the DAG (16 shards). Minutes of CPU:
/// `cargo test -p sweep-peg --release dag_tests::english_dag_count -- --ignored --nocapture`
#[test]
#[ignore]
fn english_dag_count() {
    let (ans, _, _) = english_report(Mode::Count, 16);
    assert_eq!(ans.tally.counter("count"), 40_861_647_040_079_968);
}

/// English positions through the DAG (16 shards):
/// `cargo test -p sweep-peg --release dag_tests::english_dag_positions -- --ignored --nocapture`
#[test]
#[ignore]
fn english_dag_positions() {
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let (ans, _, _) = english_report(Mode::Positions, 16);
    let res = dag_job(&game, Mode::Positions, Some(16)).result(&ans);
    super::tests::assert_english_position_totals(&res);
}

/// Work conservation on the English board: node totals with 1 and 16 shards (count DAG, twice the layers).
/// `cargo test -p sweep-peg --release dag_tests::english_dag_shards_conserve_work -- --ignored --nocapture`
#[test]
#[ignore]
fn english_dag_shards_conserve_work() {
    let (a1, d1, t1) = english_report(Mode::Count, 1);
    let (a16, d16, t16) = english_report(Mode::Count, 16);
    println!("S=1 {t1:.1} s, S=16 {t16:.1} s");
    assert_eq!(a1.tally.counter("count"), a16.tally.counter("count"));
    assert_eq!(
        d1.nodes_by_kind().get("layer"),
        d16.nodes_by_kind().get("layer")
    );
}

/// The single-chunk methods of `count.rs` and `positions.rs`, for side-by-side measurements:
/// `cargo test -p sweep-peg --release dag_tests::english_single_chunk_ -- --ignored --nocapture --test-threads 1`
#[test]
#[ignore]
fn english_single_chunk_count() {
    let j = PegJob::from_game(
        Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24)),
        Mode::Count,
        0,
    );
    let t = Instant::now();
    let out = j
        .run_chunk(ChunkId::new(1, 0), &Control::new())
        .expect("runs");
    println!(
        "single-chunk count: {:.1} s, {} nodes",
        t.elapsed().as_secs_f64(),
        out.nodes
    );
    assert_eq!(out.counters["count"], 40_861_647_040_079_968);
}

/// See [`english_single_chunk_count`].
#[test]
#[ignore]
fn english_single_chunk_positions() {
    let game = Game::new(Board::new(BoardKind::English), 24, Goal::Hole(24));
    let t = Instant::now();
    let (layers, nodes) =
        super::positions::run(&game, ChunkId::new(1, 0), &Control::new()).expect("runs");
    println!(
        "single-chunk positions: {:.1} s, {nodes} nodes",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(layers.iter().map(|l| l.reachable).sum::<u64>(), 23_475_688);
}
