//! Brainball: the seed's method against sweep's, side by side on the same positions.
//!
//! Baseline (a re-implementation of the seed's algorithm): build a hash map of every position within 7 twists
//! (depth-first from solved, keeping the smallest depth seen), then for each position walk every twist sequence
//! of up to 7 twists from it, probing the map at every node and keeping the shortest total. The seed rebuilds the
//! map on every run, so its cost per solved position is build + search.
//!
//! sweep: the sorted table (built once, a few bytes a position) and the level scan that stops at the first depth
//! that meets the table.
//!
//! Run: `cargo bench -p sweep-puzzles --bench brainball` (about a minute on 2 cores).

use std::collections::HashMap;
use std::time::Instant;

use sweep_puzzles::brainball::ball::{Ball, N_TWISTS};
use sweep_puzzles::brainball::{random_positions, solve, Table};
use sweep_puzzles::Control;

const DEPTH: u8 = 7;
/// Baseline solves are ~10 s each (a full depth-7 walk), so only a few are timed.
const BASELINE_POSITIONS: usize = 2;
const BATCH: usize = 100;

fn seed_build(ball: Ball, depth: u8, left: u8, last: usize, map: &mut HashMap<u64, u8>) {
    // The seed walks every sequence and keeps the smallest depth per position; it does not prune revisits.
    let e = map.entry(ball.0).or_insert(depth);
    *e = (*e).min(depth);
    if left == 0 {
        return;
    }
    for t in 0..N_TWISTS {
        if t != last {
            seed_build(ball.twist(t), depth + 1, left - 1, t, map);
        }
    }
}

/// The seed's forward walk: every sequence of up to `left` twists, probing the map at each node.
fn seed_search(ball: Ball, done: u8, left: u8, last: usize, map: &HashMap<u64, u8>, best: &mut u8) {
    if let Some(&d) = map.get(&ball.0) {
        *best = (*best).min(done + d);
    }
    if left == 0 {
        return;
    }
    for t in 0..N_TWISTS {
        if t != last {
            seed_search(ball.twist(t), done + 1, left - 1, t, map, best);
        }
    }
}

fn main() {
    let positions = random_positions(BATCH, 2024);
    let ctl = Control::new();

    let t0 = Instant::now();
    let mut map = HashMap::new();
    seed_build(Ball::SOLVED, 0, DEPTH, usize::MAX, &mut map);
    let base_build = t0.elapsed().as_secs_f64();
    // hashbrown: 8-byte key + 1-byte value, padded to 16, plus a control byte, over a capacity >= len.
    let base_bytes = map.capacity() * 17;
    println!(
        "baseline build (hash map, depth {DEPTH}): {} positions, {base_build:.2} s, ~{} MB",
        map.len(),
        base_bytes >> 20
    );

    let t0 = Instant::now();
    let table = Table::build(DEPTH, &ctl).expect("depth 7 builds");
    let sweep_build = t0.elapsed().as_secs_f64();
    let bytes = table.to_bytes().len();
    println!(
        "sweep build (sorted table, depth {DEPTH}):   {} positions, {sweep_build:.2} s, {} bytes ({:.1} MB, {:.1} bytes/position)",
        table.len(),
        bytes,
        bytes as f64 / 1e6,
        bytes as f64 / table.len() as f64
    );
    assert_eq!(
        map.len(),
        table.len(),
        "both tables hold the same positions"
    );

    let mut base_solve = 0.0;
    let mut sweep_same = 0.0;
    for ring in &positions[..BASELINE_POSITIONS] {
        let t0 = Instant::now();
        let mut best = u8::MAX;
        seed_search(ring.canonical(), 0, DEPTH, usize::MAX, &map, &mut best);
        let tb = t0.elapsed().as_secs_f64();
        base_solve += tb;
        let t0 = Instant::now();
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        let ts = t0.elapsed().as_secs_f64();
        sweep_same += ts;
        assert_eq!(sol.twists as u8, best, "same optimum for {ring}");
        println!(
            "  {ring}: {best} twists; baseline {tb:.2} s, sweep {:.1} ms ({:.0}x)",
            ts * 1e3,
            tb / ts.max(1e-9)
        );
    }
    let base_per = base_solve / BASELINE_POSITIONS as f64;
    let sweep_per_same = sweep_same / BASELINE_POSITIONS as f64;

    let t0 = Instant::now();
    let mut hist = [0usize; 32];
    let mut optimal = 0;
    for ring in &positions {
        let sol = solve(&table, DEPTH, *ring, &ctl).expect("solvable");
        hist[sol.twists.min(31)] += 1;
        optimal += usize::from(sol.optimal);
    }
    let batch = t0.elapsed().as_secs_f64();
    let lengths: Vec<String> = hist
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(l, n)| format!("{l}:{n}"))
        .collect();
    println!(
        "sweep batch of {BATCH} random positions: {batch:.2} s ({:.1} ms/position), {optimal} proven optimal, lengths {}",
        batch * 1e3 / BATCH as f64,
        lengths.join(" ")
    );
    println!("--- side by side (1 thread) ---");
    println!(
        "table build:        baseline {base_build:.2} s   sweep {sweep_build:.2} s   ratio {:.2}x",
        base_build / sweep_build
    );
    println!(
        "table size:         baseline ~{} MB   sweep {:.1} MB   ratio {:.2}x",
        base_bytes >> 20,
        bytes as f64 / (1 << 20) as f64,
        base_bytes as f64 / bytes as f64
    );
    println!(
        "solve, table ready: baseline {base_per:.2} s/position   sweep {:.2} ms/position   ratio {:.0}x",
        sweep_per_same * 1e3,
        base_per / sweep_per_same.max(1e-9)
    );
    println!(
        "one position as the seed runs it (build + solve): baseline {:.2} s; sweep batch of {BATCH}: {batch:.2} s",
        base_build + base_per
    );
}
