//! Knuth's estimate of a backtracking chunk's size, which the engine asks for to plan and to show progress
//! before the chunks have run. It walks the same search ([`Search`]) at random instead of in full, so it counts
//! nodes exactly as the kernel does.

use sweep_space::rng::SplitMix64;
use sweep_space::ChunkId;

use crate::backtrack::Search;
use crate::geometry::Geometry;
use crate::prefixes::Prefix;

/// Random walks per chunk for the engine's estimate ([`sweep_space::Job::estimate_chunk_nodes`]): the 1024
/// chunks of n = 13 take 0.04 s of one core, and their sum is within 0.5 % of the real 651 M nodes, though single
/// chunks are off by up to 5x (`cargo bench -p sweep-star --bench star -- estimate 13`): the engine sums many
/// chunks.
pub(crate) const ESTIMATE_PROBES: u32 = 64;

/// Knuth's estimate of the nodes chunk `chunk` of `n_chunks` counts when backtracking below `prefixes`, from
/// `probes` random walks down its part of the tree: a walk through nodes with c_1, c_2, ... children stands for
/// 1 + c_1 + c_1 c_2 + ... nodes, an unbiased estimate of the subtree's size (D. E. Knuth, "Estimating the
/// efficiency of backtrack programs", 1975). Each walk starts at a prefix of the chunk drawn uniformly at
/// random. The random generator starts from (n, at), so the estimate is a pure function of them. A
/// walk costs about n steps, so 64 probes of a chunk take microseconds.
pub(crate) fn backtrack_chunk_nodes(
    geo: &Geometry,
    prefixes: &[Prefix],
    at: ChunkId,
    probes: u32,
) -> f64 {
    let (lo, hi) = at.split(prefixes.len() as u128);
    let (lo, width) = (lo as usize, (hi - lo) as u64);
    if width == 0 {
        return 0.0;
    }
    let mut rng = SplitMix64::new(
        (geo.n as u64)
            .wrapping_mul(sweep_space::rng::GAMMA)
            .wrapping_add(at.n_chunks.rotate_left(24))
            ^ at.chunk,
    );
    let mut search = Search::new(geo);
    let probes = probes.max(1);
    let mut sum = 0.0;
    for _ in 0..probes {
        let pick = lo + rng.scaled(width) as usize;
        if let Some(&p) = prefixes.get(pick) {
            sum += probe(&mut search, p, &mut rng);
        }
    }
    sum / f64::from(probes) * width as f64
}

/// One random walk from prefix `p`, counted as the kernel counts nodes (the prefix, each placed pair, each
/// closed star): the Knuth estimate of the prefix's subtree.
fn probe(search: &mut Search, p: Prefix, rng: &mut SplitMix64) -> f64 {
    let Some((mut free, mut k, mut witness)) = search.start(p) else {
        return 0.0;
    };
    let (mut nodes, mut weight) = (1.0, 1.0);
    let mut children: Vec<(i32, i32, u64)> = Vec::with_capacity(64);
    loop {
        if k + 3 == search.n {
            if search.close(free) {
                nodes += weight;
            }
            return nodes;
        }
        let (mut cand, t) = search.candidates(k, free);
        children.clear();
        while cand != 0 {
            let v = cand.trailing_zeros() as i32;
            cand &= cand - 1;
            let placed = (1u64 << v) | (1u64 << (t - v));
            let w = search.child_witness(k, free & !placed, placed, witness);
            if w != 0 {
                children.push((v, t - v, w));
            }
        }
        let Some(&(v, w, wit)) = children.get(rng.scaled(children.len() as u64) as usize) else {
            return nodes;
        };
        weight *= children.len() as f64;
        nodes += weight;
        search.j[k] = v;
        search.o[k + 1] = w;
        free &= !(1u64 << v) & !(1u64 << w);
        witness = wit;
        k += 1;
    }
}
