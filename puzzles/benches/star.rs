//! Star brute force against the seed's method, side by side on one core: `cargo bench -p sweep-puzzles --bench
//! star`. The baseline re-implements what the seed does: walk all 12! permutations of 1..12 in lexicographic
//! order over its field numbering (next_permutation) and test the six lines of each, stopping at the first
//! line that fails. sweep's kernel runs the same 12! permutations (all 256 chunks, one after another, on one
//! thread), so the ratio is per core.

use std::time::Instant;

use sweep_puzzles::Control;

/// The seed's six lines in its field numbering.
const LINES: [[usize; 4]; 6] = [
    [0, 1, 2, 3],
    [3, 4, 5, 6],
    [6, 7, 8, 0],
    [9, 2, 4, 10],
    [10, 5, 7, 11],
    [11, 8, 1, 9],
];

fn next_permutation(a: &mut [u8]) -> bool {
    let Some(i) = (1..a.len()).rev().find(|&i| a[i - 1] < a[i]) else {
        return false;
    };
    let j = (i..a.len()).rev().find(|&j| a[j] > a[i - 1]).unwrap_or(i);
    a.swap(i - 1, j);
    a[i..].reverse();
    true
}

fn seed_method() -> (u64, u64) {
    let mut p: Vec<u8> = (1..=12).collect();
    let (mut tested, mut found) = (0u64, 0u64);
    loop {
        tested += 1;
        if LINES
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

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let t = Instant::now();
    let (tested, found) = seed_method();
    let seed_s = t.elapsed().as_secs_f64();
    assert_eq!((tested, found), (479_001_600, 960));

    let args: Vec<String> = ["--points", "6", "--method", "brute"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let job = sweep_puzzles::registry()
        .lookup("star")
        .and_then(|s| s.parse_args(&args))
        .expect("star job");
    let plan = job.plan(None).expect("plan");
    let ctl = Control::new();
    let t = Instant::now();
    let outputs: Vec<_> = (0..plan.n_chunks)
        .map(|c| job.run_chunk(plan.n_chunks, c, &ctl).expect("chunk"))
        .collect();
    let sweep_s = t.elapsed().as_secs_f64();
    let answer = sweep_puzzles::Answer::from_outputs(&outputs);
    assert_eq!(answer.tally.nodes, 479_001_600);
    assert_eq!(answer.tally.counter("solutions"), 960);

    println!("star n=6 brute force, 12! = 479,001,600 permutations, one core each");
    println!(
        "  seed's method (next_permutation + line test): {seed_s:.3} s, {:.1} M perms/s",
        tested as f64 / seed_s / 1e6
    );
    println!(
        "  sweep kernel (256 chunks in sequence):         {sweep_s:.3} s, {:.1} M perms/s",
        tested as f64 / sweep_s / 1e6
    );
    println!("  speed-up per core: {:.1}x", seed_s / sweep_s);
}
