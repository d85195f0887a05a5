//! Buzzled on the original program's puzzle #52 (58 solutions): the original program's brute force (re-implemented here as the baseline:
//! every 37-bit board with the right number of yellow tiles in increasing numeric order, via the next-combination
//! bit trick, each tested row by row with a popcount over the row's mask until a row fails; the range split
//! between threads as the original program does) against sweep's `brute` kernel (the same boards and verdicts, over
//! combination ranks, rejecting a whole block of boards as soon as a row can no longer be met) and sweep's
//! `propagate` kernel (line solving + backtracking). Baseline and brute run on the same 2 threads.
//!
//! Run: `cargo bench -p sweep-buzzled --bench buzzled`. The baseline tests all 15.9e9 boards (~10-20 s on 2
//! cores); `BUZZLED_BASELINE_SLICE=N` times only 1/N of them and extrapolates (said so in the output).

use std::hint::black_box;
use std::time::Instant;

use sweep_buzzled::geometry::Geometry;
use sweep_buzzled::puzzle::parse_clue_list;
use sweep_buzzled::{Buzzled, BuzzledParams, Method};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, SearchSpace};

const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";
const THREADS: u64 = 2;

fn binom(n: u64, k: u64) -> u64 {
    if k > n {
        return 0;
    }
    (0..k).fold(1u64, |acc, i| acc * (n - i) / (i + 1))
}

/// The `r`-th number with `k` one bits, in increasing order (the combinatorial number system).
fn nth_with_ones(mut r: u64, mut k: u64, n: u64) -> u64 {
    let mut x = 0u64;
    for pos in (0..n).rev() {
        if k == 0 {
            break;
        }
        let below = binom(pos, k);
        if r >= below {
            r -= below;
            x |= 1 << pos;
            k -= 1;
        }
    }
    x
}

/// The original program's loop, compiled with the POPCNT instruction as the original program's C++20 `std::popcount` is meant to be.
fn seed_brute(start: u64, count: u64, masks: &[(u64, u32)]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT, checked just above.
        return unsafe { seed_brute_popcnt(start, count, masks) };
    }
    seed_brute_loop(start, count, masks)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn seed_brute_popcnt(start: u64, count: u64, masks: &[(u64, u32)]) -> u64 {
    seed_brute_loop(start, count, masks)
}

/// The original program's loop over `count` boards starting at `start`: next board with the same number of one bits, each
/// tested against the rows in clue order with popcounts, stopping at the first failing row.
#[inline(always)]
fn seed_brute_loop(start: u64, count: u64, masks: &[(u64, u32)]) -> u64 {
    let mut x = start;
    let mut found = 0u64;
    for _ in 0..count {
        if masks.iter().all(|&(m, c)| (x & m).count_ones() == c) {
            found += 1;
        }
        // Next larger number with the same popcount.
        let c = x & x.wrapping_neg();
        let r = x + c;
        x = (((r ^ x) >> 2) / c) | r;
    }
    found
}

fn run_job(job: &dyn Job, n_chunks: u64, threads: u64) -> Answer {
    let ctl = Control::new();
    let outs: Vec<ChunkOutput> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let ctl = &ctl;
                s.spawn(move || {
                    (t..n_chunks)
                        .step_by(threads as usize)
                        .map(|i| {
                            job.run_chunk(ChunkId::new(n_chunks, i), ctl)
                                .expect("chunk")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    Answer::from_outputs(&outs)
}

fn main() {
    let geo = Geometry::new(4).expect("side 4");
    let clues = parse_clue_list(P52).expect("clues");
    let masks: Vec<(u64, u32)> = geo
        .lines
        .iter()
        .zip(&clues)
        .map(|(l, &c)| (l.tiles.iter().fold(0u64, |m, &t| m | 1 << t), c))
        .collect();
    let yellow: u64 = clues[..4]
        .iter()
        .chain(&clues[18..])
        .map(|&c| u64::from(c))
        .sum();
    let total = binom(37, yellow);
    let slice: u64 = std::env::var("BUZZLED_BASELINE_SLICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let tested = total / slice;
    println!("puzzle #52: {yellow} yellow tiles, C(37,{yellow}) = {total} boards");

    // Baseline: the original program's loop, its range split between 2 threads.
    let t0 = Instant::now();
    let found: u64 = std::thread::scope(|s| {
        let masks = &masks;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let lo = tested * t / THREADS;
                let hi = tested * (t + 1) / THREADS;
                s.spawn(move || seed_brute(nth_with_ones(lo, yellow, 37), hi - lo, masks))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    let base_s = t0.elapsed().as_secs_f64() * slice as f64;
    let note = if slice > 1 {
        format!(" (1/{slice} of the boards timed, {found} solutions among them; time extrapolated)")
    } else {
        format!(" ({found} solutions)")
    };
    println!("seed brute force (baseline), 2 threads: {base_s:9.3} s{note}");

    // sweep brute: same boards, same verdicts, block rejection; 64 rank-range chunks on 2 threads.
    let brute = Buzzled::build(BuzzledParams::new(4, &clues, Method::Brute)).expect("job");
    let plan = brute.plan(None).expect("plan");
    let reps = 20;
    let t0 = Instant::now();
    let mut ans = Answer::default();
    for _ in 0..reps {
        ans = black_box(run_job(&brute, plan.n_chunks, THREADS));
    }
    let brute_s = t0.elapsed().as_secs_f64() / f64::from(reps);
    assert_eq!(
        ans.tally.nodes,
        u128::from(total),
        "every board accounted for"
    );
    println!(
        "sweep brute, 2 threads, {} chunks:     {brute_s:9.6} s ({} solutions, {} boards tested)  ratio {:.0}x",
        plan.n_chunks,
        ans.tally.counter("solutions"),
        ans.tally.nodes,
        base_s / brute_s
    );

    // sweep propagate: one chunk, one thread.
    let prop = Buzzled::build(BuzzledParams::new(4, &clues, Method::Propagate)).expect("job");
    let reps = 2000;
    let t0 = Instant::now();
    let mut pans = Answer::default();
    for _ in 0..reps {
        pans = black_box(run_job(&prop, 1, 1));
    }
    let prop_s = t0.elapsed().as_secs_f64() / f64::from(reps);
    assert_eq!(pans.solutions, ans.solutions, "the methods agree");
    println!(
        "sweep propagate, 1 thread, 1 chunk:    {prop_s:9.6} s ({} solutions, {} nodes)  ratio {:.0}x",
        pans.tally.counter("solutions"),
        pans.tally.nodes,
        base_s / prop_s
    );
}
