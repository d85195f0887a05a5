//! The expected size of a job whose size is not known in advance (`Plan::total_nodes` is `None`): the real
//! nodes of its finished chunks plus the space's up-front estimates of the others
//! ([`sweep_space::Job::estimate_chunk_nodes`]), corrected by how far off the estimates were for the chunks
//! that finished. It feeds progress and ETAs only; no answer depends on it.
//!
//! The estimates are a pure function of the job, so they are never stored: the shell computes them off the
//! lock ([`estimate_chunks`], on the blocking pool) when a job is created or loaded, and hands them to the core.

use sweep_space::{ChunkId, SpaceJob};

/// Jobs with more chunks than this get no estimate: 8 bytes per chunk are kept while the job runs, and asking
/// a space for millions of estimates would tie up a blocking thread for long. Such jobs keep the chunk-based
/// progress they had before.
pub const MAX_ESTIMATED_CHUNKS: u64 = 1 << 20;

/// The weight, in chunks of average estimated size, of the prior belief that the estimates are right (a
/// correction of 1), against the ratio real / estimate seen in finished chunks.
///
/// Why shrink at all: the first chunks to finish are few, and they are not a fair sample. A Knuth estimate of a
/// single chunk is unbiased but heavy-tailed (64 probes leave one chunk off by 2x or more), so the ratio over a
/// handful of chunks is mostly noise; and among the chunks running at once, those that finish first are the
/// ones that were smaller than expected, so early ratios lean low. Taken raw, the first finished chunk would
/// rescale the whole job. With 16 chunks' worth of prior the correction moves halfway to what it sees once 16
/// average chunks' worth of estimate has finished (about 1.5 % of a 1024-chunk job), and follows the data from
/// there: a space whose estimates are systematically off is corrected early in the run, and an honest one is
/// not disturbed by noise.
const PRIOR_CHUNKS: f64 = 16.0;

/// The job's expected total nodes from: `real_done`, the real nodes of its finished chunks; `est_done`, the
/// estimates of those same chunks; `est_total`, the estimates of all `n_chunks` chunks. The unfinished chunks
/// count for their estimates times the correction `(real_done + w) / (est_done + w)`, where `w` is
/// [`PRIOR_CHUNKS`] average chunks' worth of estimate: 1 with nothing finished, the plain ratio real / estimate
/// of the finished chunks once they are many. Never below `real_done`; exactly `real_done` once every chunk is
/// finished.
pub fn expected_total(real_done: f64, est_done: f64, est_total: f64, n_chunks: u64) -> f64 {
    let est_rest = (est_total - est_done).max(0.0);
    let prior = PRIOR_CHUNKS * est_total / n_chunks.max(1) as f64;
    let correction = if est_done + prior > 0.0 {
        (real_done + prior) / (est_done + prior)
    } else {
        // Every estimate is zero: nothing to scale, and no ratio to learn.
        1.0
    };
    real_done + correction * est_rest
}

/// Every chunk's estimate, or `None` if the job gives none (or has too many chunks, or breaks the contract by
/// answering for some chunks only). CPU work (64 random walks a chunk for star): the shell calls it on the
/// blocking pool, never under the core's lock.
pub fn estimate_chunks(job: &SpaceJob, n_chunks: u64) -> Option<Vec<f64>> {
    if n_chunks == 0 || n_chunks > MAX_ESTIMATED_CHUNKS {
        return None;
    }
    // Chunk 0 first: most spaces have no estimate, and they should cost one call, not one per chunk.
    let first = job.estimate_chunk_nodes(ChunkId::new(n_chunks, 0))?;
    let mut per_chunk = Vec::with_capacity(n_chunks as usize);
    per_chunk.push(first);
    for chunk in 1..n_chunks {
        per_chunk.push(job.estimate_chunk_nodes(ChunkId::new(n_chunks, chunk))?);
    }
    Some(per_chunk)
}

/// A running job's per-chunk estimates and how much of them its finished chunks account for.
#[derive(Debug)]
pub(crate) struct ChunkEstimates {
    per_chunk: Vec<f64>,
    total: f64,
    /// The estimates of the chunks finished so far, kept as a running sum so a job view costs no pass over the
    /// chunks.
    done: f64,
}

impl ChunkEstimates {
    /// `per_chunk` for every chunk, and which of them are finished already (a job loaded at start-up, or one
    /// that ran while its estimates were computed).
    pub(crate) fn new(
        per_chunk: Vec<f64>,
        done_parts: impl IntoIterator<Item = (u64, f64)>,
    ) -> Self {
        let total = per_chunk.iter().sum();
        let mut e = ChunkEstimates {
            per_chunk,
            total,
            done: 0.0,
        };
        for (chunk, weight) in done_parts {
            e.part_done(chunk, weight);
        }
        e
    }

    pub(crate) fn n_chunks(&self) -> u64 {
        self.per_chunk.len() as u64
    }

    /// A part of chunk `chunk` worth `weight` of it is finished (a piece, or a chunk that gave pieces away).
    pub(crate) fn part_done(&mut self, chunk: u64, weight: f64) {
        self.done += weight * self.per_chunk.get(chunk as usize).copied().unwrap_or(0.0);
    }

    /// Chunk `chunk`'s estimated nodes.
    pub(crate) fn nodes(&self, chunk: u64) -> Option<f64> {
        self.per_chunk.get(chunk as usize).copied()
    }

    /// The job's expected total, given the real nodes of its finished chunks.
    pub(crate) fn expected_total(&self, real_done: u128) -> f64 {
        expected_total(real_done as f64, self.done, self.total, self.n_chunks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_total_combines_real_and_estimated_sizes() {
        // (real_done, est_done, est_total, n_chunks, expected), with 100 chunks the prior weighs 16 chunks of
        // average estimate: 16 % of est_total.
        let cases: &[(f64, f64, f64, u64, f64)] = &[
            // Nothing finished: the estimates as they are.
            (0.0, 0.0, 1000.0, 100, 1000.0),
            // Estimates that were right are kept.
            (500.0, 500.0, 1000.0, 100, 1000.0),
            // Everything finished: the real size, even when the estimates were off.
            (1000.0, 1000.0, 1000.0, 100, 1000.0),
            (1234.0, 1000.0, 1000.0, 100, 1234.0),
            // Half the estimate finished and it was 2x too low: correction (1000 + 160) / (500 + 160).
            (1000.0, 500.0, 1000.0, 100, 1000.0 + 500.0 * 1160.0 / 660.0),
            // One small chunk finished at 10x its estimate: the prior keeps it from rescaling the job.
            (100.0, 10.0, 1000.0, 100, 100.0 + 990.0 * 260.0 / 170.0),
            // Finished chunks far smaller than estimated scale the rest down.
            (50.0, 500.0, 1000.0, 100, 50.0 + 500.0 * 210.0 / 660.0),
            // All estimates zero: nothing to scale, no ratio to learn.
            (0.0, 0.0, 0.0, 10, 0.0),
            (7.0, 0.0, 0.0, 10, 7.0),
            // No chunks is no division by zero.
            (5.0, 0.0, 1000.0, 0, 5.0 + 1000.0 * 16005.0 / 16000.0),
        ];
        for (i, &(real, est_done, est_total, n, want)) in cases.iter().enumerate() {
            let got = expected_total(real, est_done, est_total, n);
            let close = (got - want).abs() <= 1e-9 * want.abs().max(1.0);
            assert!(close, "case {i}: got {got}, want {want}");
        }
    }

    #[test]
    fn the_expected_total_never_falls_below_what_is_done() {
        for real in [0.0, 1.0, 1e6, 1e18] {
            for est_done in [0.0, 1.0, 1e9] {
                for est_total in [0.0, 1.0, 1e9, 2e9] {
                    let got = expected_total(real, est_done, est_total, 64);
                    assert!(
                        got >= real && got.is_finite(),
                        "{real} {est_done} {est_total}: {got}"
                    );
                }
            }
        }
    }

    #[test]
    fn finished_chunks_move_their_estimates_from_rest_to_done() {
        let mut e = ChunkEstimates::new(vec![10.0, 20.0, 30.0, 40.0], [(1, 1.0)]);
        assert_eq!(e.n_chunks(), 4);
        assert_eq!(e.expected_total(20), 100.0);
        e.part_done(3, 1.0);
        assert_eq!(e.expected_total(60), 100.0);
        // A chunk outside the plan counts for nothing.
        e.part_done(9, 1.0);
        assert_eq!(e.expected_total(60), 100.0);
        e.part_done(0, 0.5);
        e.part_done(0, 0.5);
        e.part_done(2, 1.0);
        assert_eq!(e.expected_total(77), 77.0);
    }
}
