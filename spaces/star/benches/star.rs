//! Star kernels side by side on one core: `cargo bench -p sweep-star --bench star [-- MODE ...]`.
//!
//! - `brute` (default with `backtrack 10 11`): the original program's method against sweep's brute force. The
//!   baseline re-implements what that program does: walk all 12! permutations of 1..12 in lexicographic order over its field
//!   numbering (next_permutation) and test the six lines of each, stopping at the first line that fails. sweep's
//!   kernel runs the same 12! permutations (all 256 chunks, one after another, on one thread), so the ratio is per
//!   core.
//! - `backtrack N...`: a simpler backtracking kernel (rotations broken by O_0 smallest, lines filled in order,
//!   every find tested against its 2n images; copied below as `old`) against the crate's, both on one thread,
//!   in the same process, for each n: what the symmetry breaking and the pair-per-level search save. Counts must
//!   agree.
//! - `solve N`: the crate's kernel alone on one thread over the default plan, merging chunk by chunk (n = 15 lists
//!   120 million stars: only counts are kept), with CPU time and the chunk-size profile.
//! - `estimate N`: the Knuth estimate of every chunk of the default plan against the real node counts.
//! - `predict N`: the Knuth estimate of the whole default plan alone, to forecast a run.
//! - `part N I K`: `solve N` for the chunks I, I + K, I + 2K, ... only, to spread a long run over processes.
//! - `verify N`: what the coordinator spends checking a listing job's reports (`Job::verify`: every star read
//!   back, its lines summed, its canonical form checked), against the search that found them and against a
//!   plain check (labels read with a branch per digit, every one of the 2n symmetries compared with the star),
//!   copied below as `old_check`, all on one thread in one process.
//! - `answer N`: what a listing job does after its last chunk: the answer (`Job::result`) from the merged
//!   outputs, as JSON text and parsed back (what `sweep run` sends between its coordinator and its client), and
//!   the text report, each timed alone.

use std::time::Instant;

use sweep_space::{ChunkId, ChunkOutput, Control, Job, Meter, SpaceError};
use sweep_star::{Geometry, ORIGINAL_LINES_SIX};

fn next_permutation(a: &mut [u8]) -> bool {
    let Some(i) = (1..a.len()).rev().find(|&i| a[i - 1] < a[i]) else {
        return false;
    };
    let j = (i..a.len()).rev().find(|&j| a[j] > a[i - 1]).unwrap_or(i);
    a.swap(i - 1, j);
    a[i..].reverse();
    true
}

fn original_method() -> (u64, u64) {
    let mut p: Vec<u8> = (1..=12).collect();
    let (mut tested, mut found) = (0u64, 0u64);
    loop {
        tested += 1;
        if ORIGINAL_LINES_SIX
            .iter()
            .all(|l| l.iter().map(|&f| u32::from(p[f])).sum::<u32>() == 26)
        {
            found += 1;
        }
        if !next_permutation(&mut p) {
            return (tested, found);
        }
    }
}

fn brute() {
    let t = Instant::now();
    let (tested, found) = original_method();
    let original_s = t.elapsed().as_secs_f64();
    assert_eq!((tested, found), (479_001_600, 960));

    let job = sweep_space::testkit::parse_args::<sweep_star::Star>(&[
        "--points", "6", "--method", "brute",
    ])
    .expect("star job");
    let plan = job.plan(None).expect("plan");
    let ctl = Control::new();
    let t = Instant::now();
    let outputs: Vec<_> = (0..plan.n_chunks)
        .map(|c| {
            job.run_chunk(ChunkId::new(plan.n_chunks, c), &ctl)
                .expect("chunk")
        })
        .collect();
    let sweep_s = t.elapsed().as_secs_f64();
    let answer = sweep_space::Answer::from_outputs(&outputs);
    assert_eq!(answer.tally.nodes, 479_001_600);
    assert_eq!(answer.tally.counter("solutions"), 960);

    println!("star n=6 brute force, 12! = 479,001,600 permutations, one core each");
    println!(
        "  original method (next_permutation + line test): {original_s:.3} s, {:.1} M perms/s",
        tested as f64 / original_s / 1e6
    );
    println!(
        "  sweep kernel (256 chunks in sequence):         {sweep_s:.3} s, {:.1} M perms/s",
        tested as f64 / sweep_s / 1e6
    );
    println!("  speed-up per core: {:.1}x", original_s / sweep_s);
}

/// CPU time of this thread in seconds (Linux), so that the other engineer's builds on the same cores do not count
/// against either kernel; wall time where that file is missing.
fn cpu_s(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ns| ns / 1e9)
        .unwrap_or_else(|| wall.elapsed().as_secs_f64())
}

fn star_job(points: u32) -> sweep_space::SpaceJob {
    sweep_space::testkit::parse_args::<sweep_star::Star>(&["--points", &points.to_string()])
        .expect("star job")
}

/// The crate's kernel over the default plan on this thread: (nodes, solutions, unique, CPU s, nodes per chunk).
fn run_new(points: u32) -> (u128, u128, u128, f64, Vec<u64>) {
    run_part(points, 0, 1)
}

/// Like [`run_new`], but only the chunks `part`, `part + parts`, ...: a long job spread over processes, each
/// getting big and small chunks alike.
fn run_part(points: u32, part: u64, parts: u64) -> (u128, u128, u128, f64, Vec<u64>) {
    let job = star_job(points);
    let plan = job.plan(None).expect("plan");
    let ctl = Control::new();
    let wall = Instant::now();
    let t0 = cpu_s(wall);
    let mut tally = sweep_space::Tally::default();
    let mut per_chunk = Vec::with_capacity(plan.n_chunks as usize);
    let mine: Vec<u64> = (part..plan.n_chunks)
        .step_by(parts.max(1) as usize)
        .collect();
    // A long run says how far it got, so that a run cut short still reports something.
    let every = (mine.len() / 32).max(1);
    for (i, &c) in mine.iter().enumerate() {
        let out = job
            .run_chunk(ChunkId::new(plan.n_chunks, c), &ctl)
            .expect("chunk");
        per_chunk.push(out.nodes);
        tally.add(&out);
        if parts > 1 && (i + 1) % every == 0 {
            eprintln!(
                "  n={points} part {part} of {parts}: {}/{} chunks, {} unique, {} nodes, {:.1} s CPU",
                i + 1,
                mine.len(),
                tally.counter("unique"),
                tally.nodes,
                cpu_s(wall) - t0
            );
        }
    }
    let cpu = cpu_s(wall) - t0;
    (
        tally.nodes,
        tally.counter("solutions"),
        tally.counter("unique"),
        cpu,
        per_chunk,
    )
}

fn run_one(points: u32, chunks: u64, chunk: u64) {
    let job = star_job(points);
    let plan = job.plan(Some(chunks)).expect("plan");
    let wall = Instant::now();
    let t0 = cpu_s(wall);
    let out = job
        .run_chunk(ChunkId::new(plan.n_chunks, chunk), &Control::new())
        .expect("chunk");
    println!(
        "star n={points} chunk {chunk} of {}: nodes={} solutions={} unique={}, {:.1} s CPU on one thread",
        plan.n_chunks,
        out.nodes,
        out.counters.get("solutions").copied().unwrap_or(0),
        out.counters.get("unique").copied().unwrap_or(0),
        cpu_s(wall) - t0
    );
}

fn backtrack(points: &[u32]) {
    println!(
        "star backtracking, the simple kernel (old) against the crate's (new), one thread, CPU seconds"
    );
    for &n in points {
        let (new_nodes, new_sol, new_uni, new_s, _) = run_new(n);
        let wall = Instant::now();
        let t0 = cpu_s(wall);
        let (old_nodes, old_sol, old_uni) = old::solve(n as usize);
        let old_s = cpu_s(wall) - t0;
        assert_eq!(
            (old_sol, old_uni),
            (new_sol, new_uni),
            "n={n}: kernels disagree"
        );
        println!(
            "  n={n:2}: {new_uni} unique, {new_sol} solutions; old {old_s:8.3} s {old_nodes:>13} nodes, \
             new {new_s:8.3} s {new_nodes:>13} nodes: {:.1}x less CPU",
            old_s / new_s.max(1e-9)
        );
    }
}

fn solve(n: u32) {
    let (nodes, sol, uni, cpu, per_chunk) = run_new(n);
    println!(
        "star n={n}: {uni} unique, {sol} solutions, {nodes} nodes, {cpu:.1} s CPU on one thread"
    );
    profile(&per_chunk);
}

/// How the work spreads over the chunks: the biggest, the share of the last tenth, the largest chunk's index.
fn profile(per_chunk: &[u64]) {
    let total: u64 = per_chunk.iter().sum();
    let (imax, max) = per_chunk
        .iter()
        .enumerate()
        .max_by_key(|(_, v)| **v)
        .map(|(i, v)| (i, *v))
        .unwrap_or_default();
    let tail: u64 = per_chunk[per_chunk.len() * 9 / 10..].iter().sum();
    println!(
        "  {} chunks; largest #{imax} with {:.3}% of the nodes; last tenth of the chunks: {:.3}% of the nodes",
        per_chunk.len(),
        100.0 * max as f64 / total.max(1) as f64,
        100.0 * tail as f64 / total.max(1) as f64
    );
}

fn verify(n: u32) {
    let job = star_job(n);
    let plan = job.plan(None).expect("plan");
    let ctl = Control::new();
    let wall = Instant::now();
    let t0 = cpu_s(wall);
    let outs: Vec<ChunkOutput> = (0..plan.n_chunks)
        .map(|c| {
            job.run_chunk(ChunkId::new(plan.n_chunks, c), &ctl)
                .expect("chunk")
        })
        .collect();
    let search_s = cpu_s(wall) - t0;
    let stars: usize = outs.iter().map(|o| o.solutions.len()).sum();
    let geo = Geometry::new(n as usize);
    let sources = old_check::sources(&geo);
    const ROUNDS: u32 = 5;
    let (mut new_s, mut old_s) = (0.0, 0.0);
    // Alternated rounds, so both see the same machine.
    for _ in 0..ROUNDS {
        let t0 = cpu_s(wall);
        for (c, out) in outs.iter().enumerate() {
            job.verify(ChunkId::new(plan.n_chunks, c as u64), out)
                .expect("a found star passes");
        }
        new_s += cpu_s(wall) - t0;
        let t0 = cpu_s(wall);
        for out in &outs {
            for star in &out.solutions {
                assert!(old_check::star_holds(&geo, &sources, star), "{star}");
            }
        }
        old_s += cpu_s(wall) - t0;
    }
    let per_star = |s: f64| s / f64::from(ROUNDS) / stars.max(1) as f64 * 1e9;
    println!(
        "star n={n}: {stars} listed stars found in {search_s:.2} s CPU; checking them: {:.0} ns a star \
         ({:.2}% of the search), the plain check {:.0} ns ({:.2}x the crate's)",
        per_star(new_s),
        100.0 * new_s / f64::from(ROUNDS) / search_s,
        per_star(old_s),
        old_s / new_s
    );
}

/// A plain check of one listed star, the baseline of `verify N`: labels read a label at a time with a branch on
/// each digit, the same line sums as the crate's, then all 2n symmetries compared with the star cell by cell.
mod old_check {
    use super::Geometry;

    fn parse_plain(s: &str, buf: &mut [u8; 64]) -> Option<usize> {
        let digit = |b: Option<&u8>| b.map(|b| b.wrapping_sub(b'0')).filter(|d| *d <= 9);
        let bytes = s.as_bytes();
        let (mut i, mut len) = (0, 0);
        loop {
            let mut value = u32::from(digit(bytes.get(i))?);
            i += 1;
            for _ in 0..2 {
                let Some(d) = digit(bytes.get(i)) else { break };
                value = value * 10 + u32::from(d);
                i += 1;
            }
            *buf.get_mut(len)? = u8::try_from(value).ok()?;
            len += 1;
            match bytes.get(i) {
                None => return Some(len),
                Some(b',') => i += 1,
                Some(_) => return None,
            }
        }
    }

    /// The inverses of the symmetries, built once as `Geometry` held them.
    pub fn sources(geo: &Geometry) -> Vec<Vec<u8>> {
        geo.symmetries
            .iter()
            .map(|g| {
                let mut src = vec![0u8; g.len()];
                for (c, &d) in g.iter().enumerate() {
                    src[d as usize] = c as u8;
                }
                src
            })
            .collect()
    }

    pub fn star_holds(geo: &Geometry, sources: &[Vec<u8>], s: &str) -> bool {
        let mut buf = [0; 64];
        let cells = 2 * geo.n;
        if parse_plain(s, &mut buf) != Some(cells) {
            return false;
        }
        let labels = &buf[..cells];
        let (mut seen, mut small) = (0u64, true);
        for &l in labels {
            small &= l < 64;
            seen |= 1 << (l & 63);
        }
        if !small || seen != ((1u64 << (cells + 1)) - 2) || !geo.all_lines_hold(labels) {
            return false;
        }
        sources.iter().all(|src| {
            for (d, &c) in src.iter().enumerate() {
                let (image, own) = (labels[c as usize], labels[d]);
                if image != own {
                    return image > own;
                }
            }
            true
        })
    }
}

fn answer(n: u32) {
    let job = star_job(n);
    let plan = job.plan(None).expect("plan");
    let ctl = Control::new();
    let mut merge = sweep_space::AnswerMerge::default();
    for c in 0..plan.n_chunks {
        merge.add(
            &job.run_chunk(ChunkId::new(plan.n_chunks, c), &ctl)
                .expect("chunk"),
        );
    }
    let answer = merge.finish();
    const ROUNDS: u32 = 20;
    let time = |what: &str, f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            f();
        }
        println!(
            "  {what}: {:.2} ms",
            t.elapsed().as_secs_f64() * 1e3 / f64::from(ROUNDS)
        );
    };
    println!(
        "star n={n}: the answer of {} listed stars, {} shown, each step the mean of {ROUNDS}",
        answer.solutions_listed,
        answer.solutions.len()
    );
    // The first call alone, as a job's end makes it: on memory the process has not used for such a tree yet.
    // What a job's end runs now: both texts written without the tree.
    let t = Instant::now();
    let (mut json, mut text) = job.result_texts(&answer);
    println!(
        "  Job::result_texts, first call: {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    time("Job::result_texts", &mut || {
        (json, text) = job.result_texts(&answer)
    });
    println!("  ({} bytes of JSON, {} of text)", json.len(), text.len());
    // The tree it replaced, step by step.
    let t = Instant::now();
    let mut value = job.result(&answer);
    println!(
        "  Job::result, first call: {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    time("Job::result", &mut || value = job.result(&answer));
    time("to JSON text", &mut || {
        text = serde_json::to_string(&value).expect("JSON")
    });
    time("parsed back", &mut || {
        value = serde_json::from_str(&text).expect("JSON")
    });
    let mut report = String::new();
    time("text report", &mut || report = job.render_text(&value));
    println!("  ({} bytes of JSON, {} of text)", text.len(), report.len());
}

/// The backtracking job for `n` points and its default plan, which the estimates walk chunk by chunk.
fn backtrack_job(n: u32) -> (sweep_star::StarJob, sweep_space::Plan) {
    use sweep_star::{Method, StarJob, StarParams};
    let job = StarJob::new(StarParams {
        points: n,
        method: Method::Backtrack,
    })
    .expect("star job");
    let plan = job.plan(None).expect("plan");
    (job, plan)
}

fn estimate(n: u32) {
    let (job, plan) = backtrack_job(n);
    let ctl = Control::new();
    let (mut est_total, mut real_total, mut worst) = (0.0, 0u64, 1.0f64);
    let wall = Instant::now();
    let mut est_s = 0.0;
    for c in 0..plan.n_chunks {
        let t0 = cpu_s(wall);
        let est = job
            .estimate_nodes(ChunkId::new(plan.n_chunks, c), 64)
            .expect("estimate");
        est_s += cpu_s(wall) - t0;
        let real = job
            .run_chunk(ChunkId::new(plan.n_chunks, c), &ctl)
            .expect("chunk")
            .nodes;
        est_total += est;
        real_total += real;
        if real > 0 && est > 0.0 {
            let r = est / real as f64;
            worst = worst.max(r.max(1.0 / r));
        }
    }
    println!(
        "star n={n}: Knuth estimate (64 probes per chunk) {est_total:.4e} nodes, real {real_total} \
         (ratio {:.3}); worst chunk off by {worst:.2}x; estimating took {est_s:.3} s CPU",
        est_total / real_total.max(1) as f64
    );
}

/// The Knuth estimate of the whole default plan, without searching: to forecast a job too long to just run.
fn predict(n: u32) {
    let (job, plan) = backtrack_job(n);
    let wall = Instant::now();
    let t0 = cpu_s(wall);
    let mut total = 0.0;
    for c in 0..plan.n_chunks {
        total += job
            .estimate_nodes(ChunkId::new(plan.n_chunks, c), 64)
            .expect("estimate");
    }
    println!(
        "star n={n}: Knuth estimate {total:.4e} nodes over {} chunks (64 probes each, {:.2} s CPU)",
        plan.n_chunks,
        cpu_s(wall) - t0
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let numbers =
        |from: usize| -> Vec<u32> { words[from..].iter().map_while(|w| w.parse().ok()).collect() };
    if words.is_empty() {
        brute();
        backtrack(&[10, 11]);
        return;
    }
    for (i, w) in words.iter().enumerate() {
        match *w {
            "brute" => brute(),
            "backtrack" => backtrack(&numbers(i + 1)),
            "solve" => numbers(i + 1).into_iter().for_each(solve),
            "estimate" => numbers(i + 1).into_iter().for_each(estimate),
            "predict" => numbers(i + 1).into_iter().for_each(predict),
            "answer" => numbers(i + 1).into_iter().for_each(answer),
            "verify" => numbers(i + 1).into_iter().for_each(verify),
            // `chunk N CHUNKS K...`: chunk K of the plan with CHUNKS chunks, alone, for checking a slice of a
            // long job against the chunks it stored (`sweep store chunks`) under another plan whose boundaries
            // fall on these (65,536 chunks = 64 per chunk of a 1024-chunk plan).
            "chunk" => {
                if let [n, chunks, ref ks @ ..] = numbers(i + 1)[..] {
                    ks.iter().for_each(|&k| run_one(n, chunks.into(), k.into()));
                }
            }
            "part" => {
                if let [n, part, parts] = numbers(i + 1)[..] {
                    let (nodes, sol, uni, cpu, _) = run_part(n, part.into(), parts.into());
                    println!(
                        "star n={n} part {part} of {parts}: {uni} unique, {sol} solutions, {nodes} nodes, \
                         {cpu:.1} s CPU on one thread"
                    );
                }
            }
            _ => {}
        }
    }
}

/// A simpler backtracking kernel (rotations broken by O_0 smallest, lines filled in order, every find tested
/// against its 2n images): the baseline the crate's kernel is measured against.
mod old {
    use super::{ChunkOutput, Control, Geometry, Meter, SpaceError};

    fn encode(labels: &[u8]) -> String {
        labels
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn backtrack_prefixes(geo: &Geometry) -> Vec<[u8; 3]> {
        let cells = 2 * geo.n as u32;
        let mut out = Vec::new();
        for o0 in 1..=geo.n as u32 + 1 {
            for j0 in 1..=cells {
                for j1 in 1..=cells {
                    if j0 == o0 || j1 == o0 || j1 == j0 {
                        continue;
                    }
                    let Some(o2) = geo.magic.checked_sub(o0 + j0 + j1) else {
                        continue;
                    };
                    if o2 > o0 && o2 <= cells && o2 != j0 && o2 != j1 {
                        out.push([o0 as u8, j0 as u8, j1 as u8]);
                    }
                }
            }
        }
        out
    }

    /// All prefixes on this thread: (nodes, solutions, unique).
    pub fn solve(n: usize) -> (u128, u128, u128) {
        let geo = Geometry::new(n);
        let ctl = Control::new();
        let mut out = ChunkOutput::default();
        let mut bt = Backtrack::new(&geo, &ctl, &mut out);
        for p in backtrack_prefixes(&geo) {
            bt.run_prefix(p).expect("not cancelled");
        }
        bt.flush();
        let count = |k: &str| out.counters.get(k).copied().unwrap_or(0);
        (u128::from(out.nodes), count("solutions"), count("unique"))
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// Try every free value in this cell. If `then_derive` names a line, the next step derives that line's last
        /// cell, which bounds the values worth trying.
        Choose { cell: u8, then_derive: Option<u8> },
        /// The only unset cell of the line: its value is forced by the sum.
        Derive { cell: u8, line: u8 },
        /// A line whose cells are all set already.
        Check { line: u8 },
    }

    /// Line-by-line backtracking after a first-line prefix.
    struct Backtrack<'a> {
        geo: &'a Geometry,
        out: &'a mut ChunkOutput,
        steps: Vec<Step>,
        labels: Vec<u8>,
        /// Accounts as the crate's kernel does, so that the comparison is of the searches alone.
        meter: Meter<'a>,
    }

    impl<'a> Backtrack<'a> {
        fn new(geo: &'a Geometry, ctl: &'a Control, out: &'a mut ChunkOutput) -> Self {
            let n = geo.n;
            let mut set = vec![false; 2 * n];
            // The prefix sets O_0, J_0, J_1 and derives O_2.
            for c in [0, n, n + 1, 2 % n] {
                set[c] = true;
            }
            let mut steps = Vec::new();
            for (i, line) in geo.lines.iter().enumerate().skip(1) {
                let unset: Vec<u8> = line.iter().copied().filter(|&c| !set[c as usize]).collect();
                match unset.split_last() {
                    None => steps.push(Step::Check { line: i as u8 }),
                    Some((&last, chosen)) => {
                        for (k, &c) in chosen.iter().enumerate() {
                            let then_derive = (k + 1 == chosen.len()).then_some(i as u8);
                            steps.push(Step::Choose {
                                cell: c,
                                then_derive,
                            });
                        }
                        steps.push(Step::Derive {
                            cell: last,
                            line: i as u8,
                        });
                    }
                }
                for &c in &unset {
                    set[c as usize] = true;
                }
            }
            Backtrack {
                geo,
                out,
                steps,
                labels: vec![0; 2 * n],
                meter: Meter::new(ctl),
            }
        }

        fn run_prefix(&mut self, [o0, j0, j1]: [u8; 3]) -> Result<(), SpaceError> {
            let n = self.geo.n;
            let o2 = (self.geo.magic - u32::from(o0) - u32::from(j0) - u32::from(j1)) as u8;
            self.labels.iter_mut().for_each(|l| *l = 0);
            self.labels[0] = o0;
            self.labels[n] = j0;
            self.labels[n + 1] = j1;
            self.labels[2 % n] = o2;
            let used = (1u64 << o0) | (1u64 << j0) | (1u64 << j1) | (1u64 << o2);
            let all = (1u64 << (2 * n + 1)) - 2;
            // Outer labels must exceed O_0 (rotation breaking): mask of values allowed in outer cells.
            let outer_ok = all & !((1u64 << (o0 + 1)) - 1);
            self.meter.count(4);
            self.dfs(0, all & !used, outer_ok)?;
            self.meter.step()
        }

        fn flush(&mut self) {
            self.out.nodes = self.meter.finish();
        }

        fn line_sum_without(&self, line: u8, skip: u8) -> u32 {
            self.geo.lines[line as usize]
                .iter()
                .filter(|&&c| c != skip)
                .map(|&c| u32::from(self.labels[c as usize]))
                .sum()
        }

        fn dfs(&mut self, k: usize, free: u64, outer_ok: u64) -> Result<(), SpaceError> {
            let Some(&step) = self.steps.get(k) else {
                self.found();
                return Ok(());
            };
            let n = self.geo.n;
            match step {
                Step::Check { line } => {
                    if self.line_sum_without(line, u8::MAX) == self.geo.magic {
                        self.dfs(k + 1, free, outer_ok)?;
                    }
                }
                Step::Derive { cell, line } => {
                    let rest = self.line_sum_without(line, cell);
                    let Some(v) = self.geo.magic.checked_sub(rest) else {
                        return Ok(());
                    };
                    if v >= 64 {
                        return Ok(());
                    }
                    let bit = 1u64 << v;
                    let allowed = if usize::from(cell) < n {
                        free & outer_ok
                    } else {
                        free
                    };
                    if allowed & bit != 0 {
                        self.meter.count(1);
                        self.labels[cell as usize] = v as u8;
                        self.dfs(k + 1, free & !bit, outer_ok)?;
                        self.labels[cell as usize] = 0;
                    }
                }
                Step::Choose { cell, then_derive } => {
                    let mut candidates = if usize::from(cell) < n {
                        free & outer_ok
                    } else {
                        free
                    };
                    if let Some(line) = then_derive {
                        // The derived cell gets magic - rest - v, which must lie in 1..=2n.
                        let rest = self.line_sum_without(line, cell) as i64; // the derived cell is still 0
                        let lo = (i64::from(self.geo.magic) - rest - 2 * n as i64).max(1);
                        let hi = (i64::from(self.geo.magic) - rest - 1).min(2 * n as i64);
                        if lo > hi {
                            return Ok(());
                        }
                        let range = ((1u64 << (hi + 1)) - 1) & !((1u64 << lo) - 1);
                        candidates &= range;
                    }
                    while candidates != 0 {
                        let v = candidates.trailing_zeros();
                        candidates &= candidates - 1;
                        self.meter.count(1);
                        self.labels[cell as usize] = v as u8;
                        self.dfs(k + 1, free & !(1u64 << v), outer_ok)?;
                    }
                    self.labels[cell as usize] = 0;
                    self.meter.step()?;
                }
            }
            Ok(())
        }

        fn found(&mut self) {
            self.out.count("solutions", self.geo.n as u128);
            if self.geo.canonical(&self.labels) == self.labels {
                self.out.count("unique", 1);
                self.out.solutions.push(encode(&self.labels));
            }
        }
    }
}
