//! Brainball: the original program's method, a plain level-scan solver and the crate's, side by side on the same
//! positions.
//!
//! - original (a re-implementation of the original program's algorithm): a hash map of every position within 7
//!   twists (depth-first from solved, keeping the smallest depth seen), then for each position every twist
//!   sequence of up to 7 twists from it, probing the map at every node and keeping the shortest total. That
//!   program rebuilds the map on every run, so its cost per position is build + search.
//! - before (a plain level-scan solver, the baseline for the pruning and the pipelining): the sorted table, and a
//!   level scan that walks every sequence of exactly f twists (no immediate repeat), probing the 12 children of a
//!   node together, for f = 1, 2, ... until a level meets the table; each level is walked in full.
//! - after (`sweep_brainball::solve`): the same table, sequences pruned by the relation automaton,
//!   probes pipelined in batches, and each level stops at its first hit (proven optimal: see `solve.rs`).
//!
//! Run: `cargo bench -p sweep-brainball --bench brainball` (two to three minutes on 2 cores, mostly the original
//! method and the plain level scan).
//!
//! Past 2d (`-- deep`): the reversed ring solved in one process, then one round of the `deep` job run chunk by
//! chunk, with the time of every chunk: its balance, and the wall time 1, 2, 4 and 8 workers would take if the
//! coordinator hands the chunks out in order to whichever worker is free (simulated from the measured times), and
//! 2 threads for real. `-- census N SEED [SECONDS]`: a census job of N samples run chunk by chunk (one sample a
//! chunk, two threads), stopped after SECONDS if given (the answer is then that of the samples done, which is the
//! census of the first K samples); prints the job's answer and the time per position by distance.

use std::collections::HashMap;
use std::time::Instant;

use sweep_brainball::ball::{Ball, N_TWISTS};
use sweep_brainball::pdb::Pdb;
use sweep_brainball::{random_positions, solve, Ring, Table};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, Registry};

/// The built-in spaces, once: the bench looks jobs up by name as the command line does.
static REGISTRY: std::sync::LazyLock<Registry> =
    std::sync::LazyLock::new(|| Registry::new().with::<sweep_brainball::Brainball>());

const DEPTH: u8 = 7;
/// Original solves are ~10 s each (a full depth-7 walk), so only a few are timed.
const ORIGINAL_POSITIONS: usize = 2;
/// Positions timed per solution length 12, 13 and 14 for before vs after.
const PER_LENGTH: usize = 7;
const BATCH: usize = 100;

fn original_build(ball: Ball, depth: u8, left: u8, last: usize, map: &mut HashMap<u64, u8>) {
    // The original program walks every sequence and keeps the smallest depth per position; it does not prune
    // revisits.
    let e = map.entry(ball.0).or_insert(depth);
    *e = (*e).min(depth);
    if left == 0 {
        return;
    }
    for t in 0..N_TWISTS {
        if t != last {
            original_build(ball.twist(t), depth + 1, left - 1, t, map);
        }
    }
}

/// The original program's forward walk: every sequence of up to `left` twists, probing the map at each node.
fn original_search(
    ball: Ball,
    done: u8,
    left: u8,
    last: usize,
    map: &HashMap<u64, u8>,
    best: &mut u8,
) {
    if let Some(&d) = map.get(&ball.0) {
        *best = (*best).min(done + d);
    }
    if left == 0 {
        return;
    }
    for t in 0..N_TWISTS {
        if t != last {
            original_search(ball.twist(t), done + 1, left - 1, t, map, best);
        }
    }
}

/// The plain scan of one level: every sequence of exactly `left` more twists, keeping the best total.
fn before_level(table: &Table, ball: Ball, g: u8, left: u8, last: usize, best: &mut u8) {
    if left == 1 {
        let mut children = [Ball::SOLVED; N_TWISTS];
        let mut n = 0;
        for t in (0..N_TWISTS).filter(|&t| t != last) {
            children[n] = ball.twist(t);
            n += 1;
        }
        let mut dist = [None; N_TWISTS];
        table.distance_batch(&children[..n], &mut dist[..n]);
        for d in dist[..n].iter().flatten() {
            *best = (*best).min(g + 1 + d);
        }
        return;
    }
    for t in (0..N_TWISTS).filter(|&t| t != last) {
        before_level(table, ball.twist(t), g + 1, left - 1, t, best);
    }
}

/// The plain level-scan solver: the shortest length within `DEPTH` forward levels.
fn before_solve(table: &Table, ring: Ring) -> Option<u8> {
    let ball = ring.canonical();
    if let Some(d) = table.distance(ball) {
        return Some(d);
    }
    for f in 1..=DEPTH {
        let mut best = u8::MAX;
        before_level(table, ball, 0, f, usize::MAX, &mut best);
        if best < u8::MAX {
            return Some(best);
        }
    }
    None
}

/// "before min / median / max   after min / median / max" of two sets of seconds, in milliseconds.
fn before_after_ms(before: &[f64], after: &[f64]) -> String {
    let ms = |v: &[f64]| {
        let (lo, med, hi) = stats(v);
        format!("{:.1} / {:.1} / {:.1}", lo * 1e3, med * 1e3, hi * 1e3)
    };
    format!("before {}   after {}", ms(before), ms(after))
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let med = if s.is_empty() {
        f64::NAN
    } else if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (
        s.first().copied().unwrap_or(f64::NAN),
        med,
        s.last().copied().unwrap_or(f64::NAN),
    )
}

fn main() {
    // `-- deep` and `-- census N SEED [SECONDS]` measure the search past 2d; no argument: the comparison above.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("deep") => return deep_bench(),
        Some("census") => return census_bench(&args[1..]),
        _ => {}
    }
    let ctl = Control::new();

    let t0 = Instant::now();
    let mut map = HashMap::new();
    original_build(Ball::SOLVED, 0, DEPTH, usize::MAX, &mut map);
    let original_build_s = t0.elapsed().as_secs_f64();
    // hashbrown: 8-byte key + 1-byte value, padded to 16, plus a control byte, over a capacity >= len.
    let original_bytes = map.capacity() * 17;
    println!(
        "original build (hash map, depth {DEPTH}): {} positions, {original_build_s:.2} s, ~{} MB",
        map.len(),
        original_bytes >> 20
    );

    let t0 = Instant::now();
    let table = Table::build(DEPTH, &ctl).expect("depth 7 builds");
    let sweep_build = t0.elapsed().as_secs_f64();
    let bytes = table.to_bytes().len();
    println!(
        "sweep build (sorted table, depth {DEPTH}, one thread): {} positions, {sweep_build:.2} s, {bytes} bytes ({:.1} bytes/position)",
        table.len(),
        bytes as f64 / table.len() as f64
    );
    assert_eq!(
        map.len(),
        table.len(),
        "both tables hold the same positions"
    );

    // Warm the pruning automaton so its one-off 25 ms build is not charged to the first position.
    let _ = solve(&table, DEPTH, Ball::SOLVED.ring(), &ctl);

    let positions = random_positions(400, 2024);
    let mut original_s = Vec::new();
    for ring in &positions[..ORIGINAL_POSITIONS] {
        let t0 = Instant::now();
        let mut best = u8::MAX;
        original_search(ring.canonical(), 0, DEPTH, usize::MAX, &map, &mut best);
        original_s.push(t0.elapsed().as_secs_f64());
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        assert_eq!(
            sol.twists as u8, best,
            "the original method and sweep agree on {ring}"
        );
        println!(
            "  original search {ring}: {best} twists, {:.2} s",
            original_s.last().unwrap()
        );
    }
    drop(map);

    // Pick PER_LENGTH positions of each length 12, 13, 14 from the random list drawn above, in list order.
    let mut picked: Vec<(Ring, usize)> = Vec::new();
    let mut per = [0usize; 3];
    for ring in &positions {
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        if (12..=14).contains(&sol.twists) && per[sol.twists - 12] < PER_LENGTH {
            per[sol.twists - 12] += 1;
            picked.push((*ring, sol.twists));
        }
        if per.iter().all(|&n| n == PER_LENGTH) {
            break;
        }
    }
    picked.sort_by_key(|p| p.1);
    println!("--- before vs after, per position (same table, one thread) ---");
    let mut before_t = [Vec::new(), Vec::new(), Vec::new()];
    let mut after_t = [Vec::new(), Vec::new(), Vec::new()];
    for (ring, len) in &picked {
        let t0 = Instant::now();
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        let ta = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let old = before_solve(&table, *ring);
        let tb = t0.elapsed().as_secs_f64();
        assert_eq!(old, Some(sol.twists as u8), "same optimum for {ring}");
        before_t[len - 12].push(tb);
        after_t[len - 12].push(ta);
        println!(
            "  {len} twists  before {:8.1} ms  after {:7.1} ms  ({:5.0}x, {} probes)  {ring}",
            tb * 1e3,
            ta * 1e3,
            tb / ta.max(1e-9),
            sol.probes
        );
    }
    println!("--- summary: ms per position, min / median / max ---");
    let mut all_b = Vec::new();
    let mut all_a = Vec::new();
    for len in 12..=14 {
        let (b, a) = (&before_t[len - 12], &after_t[len - 12]);
        all_b.extend(b);
        all_a.extend(a);
        println!(
            "{len} twists ({} positions): {}   median ratio {:.0}x",
            b.len(),
            before_after_ms(b, a),
            stats(b).1 / stats(a).1.max(1e-9)
        );
    }
    println!(
        "12-14 twists ({} positions): {}   total {:.2} s vs {:.2} s ({:.0}x)",
        all_b.len(),
        before_after_ms(&all_b, &all_a),
        all_b.iter().sum::<f64>(),
        all_a.iter().sum::<f64>(),
        all_b.iter().sum::<f64>() / all_a.iter().sum::<f64>().max(1e-9)
    );

    let t0 = Instant::now();
    let mut hist = [0usize; 32];
    let mut beyond = 0;
    let mut slowest = 0f64;
    for ring in &positions[..BATCH] {
        let t1 = Instant::now();
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        slowest = slowest.max(t1.elapsed().as_secs_f64());
        hist[sol.twists.min(31)] += 1;
        beyond += usize::from(sol.twists > 2 * DEPTH as usize);
    }
    let batch = t0.elapsed().as_secs_f64();
    let lengths: Vec<String> = hist
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(l, n)| format!("{l}:{n}"))
        .collect();
    let original_per = original_s.iter().sum::<f64>() / original_s.len() as f64;
    println!("--- side by side with the original program (one thread) ---");
    println!(
        "table build:  original {original_build_s:.2} s   sweep {sweep_build:.2} s   ratio {:.2}x",
        original_build_s / sweep_build
    );
    println!(
        "table size:   original ~{} MB   sweep {:.1} MB   ratio {:.2}x",
        original_bytes >> 20,
        bytes as f64 / (1 << 20) as f64,
        original_bytes as f64 / bytes as f64
    );
    println!(
        "batch of {BATCH} random positions (after): {batch:.2} s ({:.1} ms/position, slowest {:.0} ms), all optimal, {beyond} beyond 2d, lengths {}",
        batch * 1e3 / BATCH as f64,
        slowest * 1e3,
        lengths.join(" ")
    );
    println!(
        "one position as the original program runs it (build + search): {:.2} s; sweep's whole batch of {BATCH}: {batch:.2} s ({:.1}x less)",
        original_build_s + original_per,
        (original_build_s + original_per) / batch
    );
}

fn build_job(args: &[&str]) -> sweep_space::SpaceJob {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    REGISTRY
        .lookup("brainball")
        .and_then(|s| s.parse_args(&args))
        .expect("valid job")
}

/// Binds every input as the engine would, inputs first; each input job's chunks run in order on this thread.
fn bind_all(job: sweep_space::SpaceJob) -> sweep_space::SpaceJob {
    sweep_space::testkit::bind_inputs(&REGISTRY, job, &mut |input| {
        let n = input.plan(None).expect("plan").n_chunks;
        run_chunks(input, n, 1, None).0
    })
}

/// Runs chunks 0.. of `n` on `threads` threads, each taking the next chunk in order (as workers lease them),
/// stopping after `limit` seconds; returns the answer of the chunks done (a prefix) and each chunk's seconds.
fn run_chunks(job: &dyn Job, n: u64, threads: usize, limit: Option<f64>) -> (Answer, Vec<f64>) {
    let (answer, done) = run_chunks_keep(job, n, threads, limit);
    (answer, done.into_iter().map(|d| d.1).collect())
}

/// [`run_chunks`], keeping every chunk's output beside its time.
fn run_chunks_keep(
    job: &dyn Job,
    n: u64,
    threads: usize,
    limit: Option<f64>,
) -> (Answer, Vec<(ChunkOutput, f64)>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    let next = AtomicU64::new(0);
    let done: Mutex<Vec<(u64, ChunkOutput, f64)>> = Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let ctl = Control::new();
                loop {
                    if limit.is_some_and(|l| t0.elapsed().as_secs_f64() > l) {
                        break;
                    }
                    let c = next.fetch_add(1, Ordering::SeqCst);
                    if c >= n {
                        break;
                    }
                    let t = Instant::now();
                    let out = job.run_chunk(ChunkId::new(n, c), &ctl).expect("chunk runs");
                    let secs = t.elapsed().as_secs_f64();
                    job.verify(ChunkId::new(n, c), &out)
                        .expect("chunk verifies");
                    let mut d = done.lock().expect("no panics while held");
                    d.push((c, out, secs));
                    if d.len().is_multiple_of(500) {
                        eprintln!("  {} chunks, {:.0} s", d.len(), t0.elapsed().as_secs_f64());
                    }
                }
            });
        }
    });
    let mut done = done.into_inner().expect("threads joined");
    done.sort_by_key(|d| d.0);
    let outs: Vec<&ChunkOutput> = done.iter().map(|d| &d.1).collect();
    let mut answer = Answer::from_outputs(outs.iter().copied());
    let mut arts = outs.iter().map(|o| o.artifact.as_slice());
    answer.artifact = job.merge_artifacts(&mut arts).expect("merge");
    (answer, done.into_iter().map(|d| (d.1, d.2)).collect())
}

/// Wall time of `workers` that each take the next chunk in order when free.
fn makespan(times: &[f64], workers: usize) -> f64 {
    let mut free = vec![0f64; workers];
    for &t in times {
        let w = (0..workers)
            .min_by(|&a, &b| free[a].total_cmp(&free[b]))
            .unwrap_or(0);
        free[w] += t;
    }
    free.iter().copied().fold(0.0, f64::max)
}

fn deep_bench() {
    let ctl = Control::new();
    let t0 = Instant::now();
    let pdb = Pdb::for_tiles(6).expect("six tiles");
    println!(
        "pattern database (6 tiles): {} patterns, max {}, built in {:.1} s; histogram {:?}",
        pdb.len(),
        pdb.max(),
        t0.elapsed().as_secs_f64(),
        pdb.histogram()
    );
    let t0 = Instant::now();
    let table = Table::build(DEPTH, &ctl).expect("depth 7 builds");
    println!("table (depth {DEPTH}): {:.1} s", t0.elapsed().as_secs_f64());
    let reversed = "13 12 11 10 9 8 7 6 5 4 3 2 1";
    let t0 = Instant::now();
    let sol = solve(&table, DEPTH, Ring::parse(reversed).expect("valid"), &ctl).expect("solves");
    println!(
        "{reversed}: {} twists in {:.2} s ({} probes); proof: {}",
        sol.twists,
        t0.elapsed().as_secs_f64(),
        sol.probes,
        sol.proof
    );
    for (split, max) in [(2u8, 14u8), (2, 16), (3, 16)] {
        let job = build_job(&[
            "deep",
            "--position",
            reversed,
            "--max-twists",
            &max.to_string(),
            "--split",
            &split.to_string(),
        ]);
        let t0 = Instant::now();
        let bound = bind_all(job.clone());
        let before = t0.elapsed().as_secs_f64();
        let n = bound.plan(None).expect("plan").n_chunks;
        let t0 = Instant::now();
        let (answer, times) = run_chunks(&*bound, n, 1, None);
        let one = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let (answer2, _) = run_chunks(&*bound, n, 2, None);
        let two = t0.elapsed().as_secs_f64();
        assert_eq!(
            answer.artifact, answer2.artifact,
            "same merge on 1 and 2 threads"
        );
        let r = job.result(&answer);
        let total: f64 = times.iter().sum();
        let mut sorted = times.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        println!(
            "deep round for {max} twists, split {split}: {n} chunks; earlier rounds {before:.2} s; found {} ({} twists)",
            r["found"], r["twists"]
        );
        println!(
            "  chunk seconds: sum {total:.2}, mean {:.4}, median {:.4}, max {:.4} (max/mean {:.1})",
            total / n as f64,
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            sorted[sorted.len() - 1] / (total / n as f64)
        );
        let m1 = makespan(&times, 1);
        let sims: Vec<String> = [1usize, 2, 4, 8]
            .iter()
            .map(|&w| {
                let m = makespan(&times, w);
                format!("{w}: {m:.2} s ({:.2}x)", m1 / m)
            })
            .collect();
        println!(
            "  simulated workers (in-order hand-out): {}",
            sims.join(", ")
        );
        println!(
            "  measured: 1 thread {one:.2} s, 2 threads {two:.2} s ({:.2}x; the machine is shared)",
            one / two
        );
    }
}

fn census_bench(args: &[String]) {
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let seed: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let limit: Option<f64> = args.get(2).and_then(|a| a.parse().ok());
    let samples = n.to_string();
    let seed_s = seed.to_string();
    let job = build_job(&["census", "--samples", &samples, "--seed", &seed_s]);
    let t0 = Instant::now();
    let bound = bind_all(job.clone());
    // Build the pattern database before the clock starts: it is built once per worker process.
    let _ = Pdb::for_tiles(6).expect("six tiles");
    println!(
        "table and pattern database: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    let (answer, done) = run_chunks_keep(&*bound, n, 2, limit);
    let wall = t0.elapsed().as_secs_f64();
    let k = done.len() as u64;
    // The first k chunks of an n-sample, n-chunk census are exactly the k-sample, k-chunk census.
    let done_job = build_job(&["census", "--samples", &k.to_string(), "--seed", &seed_s]);
    let r = done_job.result(&answer);
    print!("{}", done_job.render_text(&r));
    println!(
        "{k} samples in {wall:.1} s on 2 threads ({:.1} ms of one thread per sample)",
        done.iter().map(|d| d.1).sum::<f64>() * 1e3 / k.max(1) as f64
    );
    // Seconds per position by distance: a chunk is one sample, its one counter is its distance.
    let mut by: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (out, t) in &done {
        if let Some(d) = out.counters.keys().next() {
            by.entry(d.clone()).or_default().push(*t);
        }
    }
    for (d, ts) in &by {
        let (lo, med, hi) = stats(ts);
        println!(
            "  {d}: {} samples, seconds min {lo:.4} median {med:.4} max {hi:.4}",
            ts.len()
        );
    }
}
