//! Census: the distance distribution of uniformly random positions, each solved optimally.
//!
//! A chunk solves a contiguous range of sample indices; sample j is drawn from (seed, j) alone
//! ([`crate::random::random_position_at`]), so no chunk needs the others' draws and any machine redraws the same
//! positions. A chunk reports one exact counter per distance (`d15` = positions at 15 twists), which the engine
//! sums, and lists its hardest positions with their solutions (the verifier replays them). The merged answer is
//! the histogram, a 95 % interval for the share of every distance (Wilson's score interval: it stays inside
//! [0, 1] and is honest for the rare distances that matter here), and the hardest positions found: a proven lower
//! bound on the diameter. By the rule of three, fewer than 3/N of all positions are farther than the hardest of N
//! samples (95 % confidence), whatever the distribution.

use serde_json::{json, Value};

use crate::pdb::Pdb;
use crate::random::random_position_at;
use crate::report::{check_solution, decode_solution, encode_solution, move_names};
use crate::solve::{solve_against, Patterns};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, SpaceError};

use super::table::Table;

/// Positions of the puzzle: 12! * 2^12.
pub const POSITIONS: u64 = 1_961_990_553_600;
/// Samples a census accepts: a hundred million optimal solves is weeks of cluster time already.
pub const MAX_SAMPLES: u64 = 100_000_000;
/// Hardest positions a chunk lists (all of its farthest, up to this many; the counters stay exact).
pub const HARDEST_PER_CHUNK: usize = 8;

/// The counter of positions at `twists`.
pub fn counter(twists: usize) -> String {
    format!("d{twists:02}")
}

fn distance_of(counter: &str) -> Option<usize> {
    let d = counter.strip_prefix('d')?;
    (d.len() == 2).then(|| d.parse().ok()).flatten()
}

/// Solves the samples of chunk `chunk` of `n_chunks`.
#[allow(clippy::too_many_arguments)]
pub fn run_chunk(
    table: &Table,
    pdb: &Pdb,
    seed: u64,
    samples: u64,
    at: ChunkId,
    ctl: &Control,
) -> Result<ChunkOutput, SpaceError> {
    let (lo, hi) = at.split(u128::from(samples));
    let mut out = ChunkOutput::default();
    let mut hardest = Vec::new();
    let mut max = 0;
    for j in lo as u64..hi as u64 {
        let sol = solve_against(
            table,
            Patterns::Bound(pdb),
            table.depth(),
            random_position_at(seed, j),
            ctl,
        )?;
        out.nodes += sol.probes;
        out.count(&counter(sol.twists), 1);
        if sol.twists > max {
            max = sol.twists;
            hardest.clear();
        }
        if sol.twists == max && hardest.len() < HARDEST_PER_CHUNK {
            hardest.push(encode_solution(j as usize, &sol));
        }
    }
    out.solutions = hardest;
    Ok(out)
}

/// Checks a census chunk: distance counters adding up to the chunk's samples, and its listed hardest positions
/// are its samples, solved (replayed) in the number of twists of its farthest counter.
pub fn verify(seed: u64, samples: u64, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
    let bad = |why: String| Err(SpaceError::Verification(format!("census {at}: {why}")));
    let (lo, hi) = at.split(u128::from(samples));
    let mut total = 0u128;
    let mut max = None;
    for (k, v) in &out.counters {
        let Some(d) = distance_of(k) else {
            return bad(format!("unknown counter `{k}`"));
        };
        total += v;
        if *v > 0 {
            max = max.max(Some(d));
        }
    }
    if total != hi - lo {
        return bad(format!("{total} distances for {} samples", hi - lo));
    }
    if !out.artifact.is_empty() {
        return bad("a census chunk has no artifact".into());
    }
    if out.solutions.is_empty() != (hi == lo) || out.solutions.len() > HARDEST_PER_CHUNK {
        return bad(format!("{} hardest positions listed", out.solutions.len()));
    }
    let mut prev = None;
    for line in &out.solutions {
        let (idx, v) = decode_solution(line)?;
        if !(lo..hi).contains(&(idx as u128)) || prev.is_some_and(|p| p >= idx) {
            return bad(format!("sample {idx} is not in order in {lo}..{hi}"));
        }
        prev = Some(idx);
        check_solution(random_position_at(seed, idx as u64), &v)?;
        if v["twists"].as_u64().map(|t| t as usize) != max {
            return bad(format!("sample {idx} is listed but not among the farthest"));
        }
    }
    Ok(())
}

/// Wilson's 95 % score interval for a share of `k` in `n`.
pub fn wilson(k: u128, n: u128) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let z = 1.959_963_984_540_054_f64;
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The census part of the job's result.
pub fn result(depth: u8, seed: u64, samples: u64, answer: &Answer) -> Value {
    let mut hist: Vec<(usize, u128)> = answer
        .tally
        .counters
        .iter()
        .filter_map(|(k, v)| distance_of(k).map(|d| (d, *v)))
        .collect();
    hist.sort_unstable();
    let solved: u128 = hist.iter().map(|h| h.1).sum();
    let sum: u128 = hist.iter().map(|(d, n)| *d as u128 * n).sum();
    let max = hist.iter().filter(|h| h.1 > 0).map(|h| h.0).max();
    let shares: Vec<Value> = hist
        .iter()
        .map(|&(d, n)| {
            let (lo, hi) = wilson(n, solved);
            json!({
                "twists": d,
                "count": sweep_space::json_u128(n),
                "share": n as f64 / solved.max(1) as f64,
                "low95": lo,
                "high95": hi,
                "positions_low95": (lo * POSITIONS as f64).floor(),
                "positions_high95": (hi * POSITIONS as f64).ceil(),
            })
        })
        .collect();
    let mut hardest: Vec<Value> = Vec::new();
    for line in &answer.solutions {
        if let Ok((idx, v)) = decode_solution(line) {
            if v["twists"].as_u64().map(|t| t as usize) == max {
                hardest.push(
                    json!({"sample": idx, "position": v["position"], "twists": v["twists"],
                    "moves": v["moves"], "proof": v["proof"]}),
                );
            }
        }
    }
    json!({
        "mode": "census",
        "depth": depth,
        "seed": seed,
        "samples": samples,
        "solved": sweep_space::json_u128(solved),
        "mean": sum as f64 / solved.max(1) as f64,
        "histogram": shares,
        "diameter_at_least": max,
        "beyond_hardest_below95": if solved > 0 { 3.0 / solved as f64 } else { 1.0 },
        "hardest": hardest,
    })
}

pub fn render(result: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "census of {} uniformly random positions (seed {}), each solved optimally; mean {:.3} twists",
        result["solved"],
        result["seed"],
        result["mean"].as_f64().unwrap_or(0.0)
    );
    let _ = writeln!(
        s,
        "  twists      count     share   95% interval (Wilson)       positions (95%, of {POSITIONS})"
    );
    let empty = Vec::new();
    for h in result["histogram"].as_array().unwrap_or(&empty) {
        let f = |k: &str| h[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "  {:>6} {:>10} {:>8.4}%   {:>8.4}% .. {:>8.4}%   {:.3e} .. {:.3e}",
            h["twists"].as_u64().unwrap_or(0),
            h["count"].to_string(),
            100.0 * f("share"),
            100.0 * f("low95"),
            100.0 * f("high95"),
            f("positions_low95"),
            f("positions_high95"),
        );
    }
    let _ = writeln!(
        s,
        "diameter at least {} (proven by the positions below); fewer than {:.2e} of all positions lie farther (95%, rule of three)",
        result["diameter_at_least"],
        result["beyond_hardest_below95"].as_f64().unwrap_or(1.0)
    );
    for h in result["hardest"].as_array().unwrap_or(&empty) {
        let moves = move_names(&h["moves"]);
        let _ = writeln!(
            s,
            "  sample {}: {}  {} twists: {}",
            h["sample"],
            h["position"].as_str().unwrap_or(""),
            h["twists"],
            moves.join(" ")
        );
    }
    s
}
