//! Billiard brute force: the original program's BilliardBruteForce (re-implemented here as the baseline: lexicographic
//! next-permutation over the 15-ball index vector, all ten groups tested per permutation with a non-short-circuit
//! `&` as in the original program's `Level1 & CheckGroup(...) & ...`) against sweep's brute kernel, on the same rank slice,
//! one core, side by side. Also times sweep's kernel over the whole 15! space and the strategy search, and the
//! strategy search with and without saving resume cursors, side by side.
//!
//! Run: `cargo bench -p sweep-billiard --bench billiard`.

use std::hint::black_box;
use std::time::Instant;

use sweep_billiard::strategy::{self, prefixes, Saves, SAVE_EVERY};
use sweep_billiard::triangle::{Geometry, ORIGINAL_GROUPS};
use sweep_billiard::{Billiard, BilliardParams, Method};
use sweep_space::perm::{rank, unrank};
use sweep_space::{ChunkId, Control, Job, SearchSpace};

/// `std::next_permutation`: false when `v` was the last permutation.
fn next_permutation(v: &mut [u8]) -> bool {
    let n = v.len();
    if n < 2 {
        return false;
    }
    let mut i = n - 1;
    while i > 0 && v[i - 1] >= v[i] {
        i -= 1;
    }
    if i == 0 {
        v.reverse();
        return false;
    }
    let mut j = n - 1;
    while v[j] <= v[i - 1] {
        j -= 1;
    }
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

#[inline(always)]
fn check_group(v: &[u8; 15], [b, l, r]: [u8; 3]) -> bool {
    let [b, l, r] = [b, l, r].map(usize::from);
    v[b] == v[l].abs_diff(v[r])
}

/// The original program's loop over `count` permutations from rank `start`: returns the solutions found.
fn seed_brute(start: u64, count: u64) -> u64 {
    let mut v = [0u8; 15];
    let first = unrank(15, start).unwrap_or_default();
    for (slot, x) in v.iter_mut().zip(first) {
        *slot = x + 1;
    }
    let mut found = 0;
    for _ in 0..count {
        let mut ok = true;
        for g in ORIGINAL_GROUPS {
            // Non-short-circuit, as the original program's `&` chain.
            ok &= check_group(&v, g);
        }
        found += u64::from(ok);
        if !next_permutation(&mut v) {
            break;
        }
    }
    found
}

fn kernel_slice(start: u64, end: u64) -> (u64, u128) {
    let job = Billiard::build(BilliardParams {
        rows: 5,
        method: Method::Brute,
        ranks: Some(format!("{start}..{end}")),
    })
    .expect("valid slice");
    let ctl = Control::new();
    let out = job.run_chunk(ChunkId::new(1, 0), &ctl).expect("chunk runs");
    (
        out.nodes,
        out.counters.get("solutions").copied().unwrap_or(0),
    )
}

/// One strategy job of `rows` rows as a single chunk, saving a cursor every `every` placements into a
/// [`Control`] as a worker would: (seconds, nodes, states saved, largest state in bytes).
fn strategy_saving(rows: u32, every: u64) -> (f64, u64, u64, usize) {
    let geo = Geometry::new(rows as usize);
    let prefixes = prefixes(geo.rows);
    let ctl = Control::new();
    let (mut saved, mut largest) = (0u64, 0usize);
    let mut sink = |state: String| {
        saved += 1;
        largest = largest.max(state.len());
        ctl.save_resume_state(state)
    };
    let saves = Saves {
        every,
        sink: &mut sink,
    };
    let t = Instant::now();
    let out = strategy::run_chunk(&geo, &prefixes, ChunkId::new(1, 0), &ctl, None, saves)
        .expect("chunk runs");
    let s = t.elapsed().as_secs_f64();
    (s, black_box(out.nodes), saved, largest)
}

/// The cost of resume cursors: the same search never saving, saving every [`SAVE_EVERY`] placements (what
/// workers do), and saving at every progress report (the most often the kernel can), interleaved and repeated
/// because the machine is shared; the fastest run of each is compared.
fn resume_overhead() {
    let rows: u32 = std::env::var("BILLIARD_RESUME_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let rounds: usize = std::env::var("BILLIARD_RESUME_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let modes = [
        ("never saving", u64::MAX),
        ("saving every 2^25 (default)", SAVE_EVERY),
        ("saving every 2^16 (each report)", 1 << 16),
    ];
    println!("strategy resume cursors, rows {rows}, one chunk, {rounds} interleaved rounds (fastest shown):");
    let mut best = [f64::INFINITY; 3];
    let mut seen = [(0u64, 0u64, 0usize); 3];
    for _ in 0..rounds {
        for (i, &(_, every)) in modes.iter().enumerate() {
            let (s, nodes, saved, largest) = strategy_saving(rows, every);
            best[i] = best[i].min(s);
            seen[i] = (nodes, saved, largest);
        }
    }
    for (i, (name, _)) in modes.iter().enumerate() {
        let (nodes, saved, largest) = seen[i];
        assert_eq!(nodes, seen[0].0, "saving does not change the search");
        println!(
            "  {name:<32} {:.3} s, {:.1} M placements/s, {saved} states (largest {largest} bytes), ratio {:.4}",
            best[i],
            nodes as f64 / best[i] / 1e6,
            best[i] / best[0]
        );
    }
}

fn main() {
    if std::env::var_os("BILLIARD_ONLY_RESUME").is_some() {
        resume_overhead();
        return;
    }
    // A slice around the original program's first solution (index vector 5,4,9,...), so both sides must find it.
    let seed_first: [u8; 15] = [5, 4, 9, 7, 11, 2, 8, 1, 12, 10, 6, 14, 15, 3, 13];
    let zero_based: Vec<u8> = seed_first.iter().map(|b| b - 1).collect();
    let r0 = rank(&zero_based).expect("a permutation");
    let half = 150_000_000u64;
    let (start, end) = (r0 - half, r0 + half);
    let count = end - start;
    println!("billiard brute, rows 5 (15! = 1,307,674,368,000 permutations), one core");
    println!("slice: ranks {start}..{end} ({count} permutations, holds the original program's first solution)");

    let t = Instant::now();
    let seed_found = black_box(seed_brute(black_box(start), black_box(count)));
    let seed_s = t.elapsed().as_secs_f64();
    let seed_rate = count as f64 / seed_s;
    println!(
        "  seed baseline (next_permutation, all groups): {seed_found} solution(s), {seed_s:.3} s, {:.1} M perms/s",
        seed_rate / 1e6
    );

    // The kernel is far too fast for one run of the slice to be timed: repeat it.
    let reps = 2000u32;
    let t = Instant::now();
    let mut kernel_found = 0;
    for _ in 0..reps {
        let (nodes, found) = black_box(kernel_slice(black_box(start), black_box(end)));
        assert_eq!(nodes, count, "every permutation of the slice is accounted");
        kernel_found = found;
    }
    let kernel_s = t.elapsed().as_secs_f64() / f64::from(reps);
    let kernel_rate = count as f64 / kernel_s;
    println!(
        "  sweep kernel (same slice, {reps} runs):          {kernel_found} solution(s), {:.3} ms per run, {:.3e} perms/s",
        kernel_s * 1e3,
        kernel_rate
    );
    assert_eq!(
        u128::from(seed_found),
        kernel_found,
        "both find the same solutions"
    );
    println!("  ratio kernel / seed: {:.0}x", kernel_rate / seed_rate);

    let t = Instant::now();
    let (nodes, found) = kernel_slice(0, sweep_space::perm::FACTORIALS[15]);
    let full_s = t.elapsed().as_secs_f64();
    println!(
        "  sweep kernel, whole 15! in one chunk: {nodes} permutations, {found} solutions, {:.3} s ({:.3e} perms/s; \
         the original program's rate needs {:.0} s)",
        full_s,
        nodes as f64 / full_s,
        nodes as f64 / seed_rate
    );

    // Larger triangles on request: `BILLIARD_STRATEGY_ROWS=10 cargo bench -p sweep-billiard --bench billiard`.
    let max_rows: u32 = std::env::var("BILLIARD_STRATEGY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    println!("strategy (one core, all chunks in sequence):");
    for rows in 5..=max_rows {
        let job = Billiard::build(BilliardParams {
            rows,
            method: Method::Strategy,
            ranks: None,
        })
        .expect("valid rows");
        let t = Instant::now();
        let plan = job.plan(None).expect("plan");
        let ctl = Control::new();
        let mut nodes = 0u64;
        let mut solutions = 0u128;
        for i in 0..plan.n_chunks {
            let out = job
                .run_chunk(ChunkId::new(plan.n_chunks, i), &ctl)
                .expect("chunk runs");
            nodes += out.nodes;
            solutions += out.counters.get("solutions").copied().unwrap_or(0);
        }
        let s = t.elapsed().as_secs_f64();
        println!("  rows {rows}: {solutions} solutions, {nodes} placements, {s:.3} s");
    }
    resume_overhead();
}
