//! Primes (facts in `docs/spaces/primes.md`): count the primes below N with a segmented sieve of Eratosthenes,
//! the range `0..N` split into contiguous chunks.
//!
//! This is the engine's own test space rather than a puzzle: its answer is known in closed tables (π(10^k)), its
//! cost is tuned by N and the chunk count alone, every chunk does the same kind of work, and a chunk's count is
//! independent of every other chunk's. The end-to-end fault tests (killed workers, a killed coordinator, resumed
//! runs) run on it, so a failure there is about the engine, not about a puzzle's kernel.
//!
//! Nodes are integers examined: a chunk `lo..hi` reports exactly `hi - lo`, so the job's node total is N, which
//! proves every integer was counted in exactly one chunk.

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError, Span,
};

/// The registry's handle for the primes space.
pub struct Primes;

/// The largest N accepted: the base primes up to sqrt(N) (about a million) are sieved again by every chunk,
/// which stays a few milliseconds.
pub const MAX_BELOW: u64 = 1 << 40;

/// Published prime counts π(10^k), k = 0..=12 (OEIS A006880), shown next to the answer when N is a power of ten.
pub const PI_POWERS_OF_TEN: [u64; 13] = [
    0,
    4,
    25,
    168,
    1_229,
    9_592,
    78_498,
    664_579,
    5_761_455,
    50_847_534,
    455_052_511,
    4_118_054_813,
    37_607_912_018,
];

fn default_below() -> u64 {
    10_000_000
}

// Parameters. (A plain comment: clap would show a doc comment as the help's title.)
/// How many primes are there below N? A segmented sieve over contiguous ranges of 0..N.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct PrimesParams {
    /// Count the primes p < N (at most 2^40; 10^6, 10^7, 10^8 ... have published answers).
    #[arg(long, value_name = "N", default_value_t = default_below())]
    #[serde(default = "default_below")]
    pub below: u64,
}

impl SearchSpace for Primes {
    const NAME: &'static str = "primes";
    const ABOUT: &'static str =
        "Primes: count the primes below N by a segmented sieve (the engine's test space)";
    type Params = PrimesParams;

    fn build(params: PrimesParams) -> Result<impl Job, SpaceError> {
        Ok(PrimesJob {
            below: SpaceError::check_param_range("below", params.below, 0..=MAX_BELOW)?,
        })
    }
}

#[derive(Debug)]
pub struct PrimesJob {
    below: u64,
}

/// Integers per default chunk: about 10 ms of sieving each.
const DEFAULT_CHUNK_SPAN: u64 = 1 << 23;
/// The most chunks a default plan makes.
const MAX_DEFAULT_CHUNKS: u64 = 4096;
/// Integers sieved between two progress reports and cancellation checks (one segment of the sieve).
const SEGMENT: u64 = 1 << 18;
/// Chunks of at most this many integers are recounted exactly by `verify`; longer ones get bounds checks.
const VERIFY_RECOUNT: u64 = 1 << 16;

impl PrimesJob {
    pub fn below(&self) -> u64 {
        self.below
    }

    fn max_chunks(&self) -> u64 {
        self.below.max(1)
    }

    /// The integers `[lo, hi)` a run of chunk `at` from `state` covers: the span the state names, or the chunk.
    fn span(&self, at: ChunkId, state: Option<&str>) -> Result<(u64, u64), SpaceError> {
        let span = Span::of(at, u128::from(self.below), self.max_chunks(), state)?;
        // Inside 0..below, a u64.
        Ok((span.lo as u64, span.hi as u64))
    }

    /// What a report of the integers `[lo, hi)` must say: their count, and a prime count that is exact (recounted
    /// when the range is small) or at least possible.
    fn check_count(&self, lo: u64, hi: u64, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_counters(&["primes"])?;
        if !out.solutions.is_empty() || !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "primes reports a count only: no solutions, no artifact".into(),
            ));
        }
        out.check_nodes(u128::from(hi - lo), "integers examined")?;
        let counted = out.counters.get("primes").copied().unwrap_or(0);
        if hi - lo <= VERIFY_RECOUNT {
            let exact = count_primes(lo, hi, &Control::new())?;
            if counted != u128::from(exact) {
                return Err(SpaceError::Verification(format!(
                    "{counted} primes counted in {lo}..{hi}, there are {exact}"
                )));
            }
        } else {
            // Above 2 every prime is odd: at most one in two integers, plus the 2.
            let bound = (hi - lo).div_ceil(2) + 1;
            if counted > u128::from(bound) {
                return Err(SpaceError::Verification(format!(
                    "{counted} primes counted in {lo}..{hi}, more than its {bound} candidates"
                )));
            }
        }
        Ok(())
    }
}

/// The primes up to and including `limit`, by a plain sieve.
pub fn small_primes(limit: u64) -> Vec<u64> {
    let limit = limit as usize;
    let mut composite = vec![false; limit + 1];
    let mut primes = Vec::new();
    for i in 2..=limit {
        if !composite[i] {
            primes.push(i as u64);
            let mut j = i.saturating_mul(i);
            while j <= limit {
                composite[j] = true;
                j += i;
            }
        }
    }
    primes
}

/// The integer square root: the largest r with r * r <= n.
fn isqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r.checked_mul(r).is_none_or(|sq| sq > n) {
        r -= 1;
    }
    while (r + 1).checked_mul(r + 1).is_some_and(|sq| sq <= n) {
        r += 1;
    }
    r
}

/// Counts the primes p with `lo <= p < hi`, segment by segment, reporting each segment's integers to `ctl` (and
/// stopping with [`SpaceError::Cancelled`] when asked to).
pub fn count_primes(lo: u64, hi: u64, ctl: &Control) -> Result<u64, SpaceError> {
    count_primes_splitting(lo, hi, ctl).map(|(count, _)| count)
}

/// [`count_primes`] that gives away the upper half of the segments not started when the engine asks for a
/// split ([`Control::split_requested`]); returns the count and the end of what it counted.
fn count_primes_splitting(lo: u64, mut hi: u64, ctl: &Control) -> Result<(u64, u64), SpaceError> {
    if hi <= lo {
        return Ok((0, hi));
    }
    let base = small_primes(isqrt(hi - 1));
    let mut count = 0u64;
    let mut composite = vec![false; SEGMENT as usize];
    let mut start = lo;
    while start < hi {
        if ctl.split_requested() {
            let segments = (hi - start).div_ceil(SEGMENT);
            if segments < 2 {
                ctl.decline_split();
            } else {
                let mid = start + segments / 2 * SEGMENT;
                let span = |lo: u64, hi: u64| {
                    Span::state(Span {
                        lo: lo.into(),
                        hi: hi.into(),
                    })
                };
                if ctl.hand_off(span(lo, mid), span(mid, hi)).is_ok() {
                    hi = mid;
                }
            }
        }
        let end = hi.min(start + SEGMENT);
        let seg = &mut composite[..(end - start) as usize];
        seg.fill(false);
        for &p in &base {
            if p * p >= end {
                break;
            }
            // The first multiple of p in the segment that is not p itself.
            let first = (p * p).max(start.div_ceil(p) * p);
            let mut m = first;
            while m < end {
                seg[(m - start) as usize] = true;
                m += p;
            }
        }
        // 0 and 1 are not primes; everything else left unmarked is.
        for (i, &c) in seg.iter().enumerate() {
            if !c && start + i as u64 >= 2 {
                count += 1;
            }
        }
        ctl.checkpoint(end - start)?;
        start = end;
    }
    Ok((count, hi))
}

impl Job for PrimesJob {
    fn params(&self) -> Value {
        serde_json::to_value(PrimesParams { below: self.below }).unwrap_or(Value::Null)
    }

    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let default = self
            .below
            .div_ceil(DEFAULT_CHUNK_SPAN)
            .min(MAX_DEFAULT_CHUNKS);
        let n_chunks = Plan::chunk_count(requested, self.max_chunks(), default)?;
        Ok(Plan {
            n_chunks,
            total_nodes: Some(u128::from(self.below)),
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let (lo, hi) = self.span(at, ctl.resume_state())?;
        let (primes, hi) = count_primes_splitting(lo, hi, ctl)?;
        let mut out = ChunkOutput {
            nodes: hi - lo,
            ..ChunkOutput::default()
        };
        if primes > 0 {
            out.count("primes", u128::from(primes));
        }
        Ok(out)
    }

    // A count is all it ever reports, so a job that keeps counts only is checked in full.
    fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        self.verify(at, out)
    }

    fn splits(&self) -> bool {
        true
    }

    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        Span::check_split(
            at,
            u128::from(self.below),
            self.max_chunks(),
            parent,
            kept,
            given,
        )
    }

    // A part is checked as a chunk is, against its own range.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        _listed: bool,
    ) -> Result<(), SpaceError> {
        let (lo, hi) = self.span(at, Some(part))?;
        self.check_count(lo, hi, out)
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        let (lo, hi) = self.span(at, None)?;
        self.check_count(lo, hi, out)
    }

    fn result(&self, answer: &Answer) -> Value {
        let primes = answer.tally.counter("primes");
        let published = published(self.below);
        json!({
            "below": self.below,
            "primes": sweep_space::json_u128(primes),
            "published": published,
            "matches_published": published.map(|p| u128::from(p) == primes),
        })
    }

    fn render_text(&self, result: &Value) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "pi({}) = {}: there are {} primes below {}",
            self.below, result["primes"], result["primes"], self.below
        );
        if let Some(p) = result["published"].as_u64() {
            let agrees = if result["matches_published"] == true {
                "agrees"
            } else {
                "DISAGREES"
            };
            let _ = writeln!(text, "published value: {p} ({agrees})");
        }
        text
    }
}

/// π(N) from the published table when N is a power of ten up to 10^12.
pub fn published(n: u64) -> Option<u64> {
    let mut p = 1u64;
    for &pi in &PI_POWERS_OF_TEN {
        if p == n {
            return Some(pi);
        }
        p = p.checked_mul(10)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The space registered as the engine registers it, so tests go through the framework's wrapper.
    fn job_from_params(
        space: &str,
        params: &serde_json::Value,
    ) -> Result<sweep_space::SpaceJob, SpaceError> {
        sweep_space::Registry::new()
            .with::<Primes>()
            .job_from_params(space, params)
    }
    use sweep_space::Answer;

    fn naive_count(lo: u64, hi: u64) -> u64 {
        (lo..hi)
            .filter(|&n| n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0))
            .count() as u64
    }

    fn job(below: u64) -> sweep_space::SpaceJob {
        job_from_params("primes", &json!({ "below": below })).expect("job")
    }

    fn solve(job: &dyn Job, n_chunks: u64) -> Answer {
        sweep_space::testkit::run_all(job, Some(n_chunks))
    }

    #[test]
    fn segments_agree_with_trial_division() {
        for (lo, hi) in [
            (0, 0),
            (0, 1),
            (0, 3),
            (0, 2000),
            (1000, 1100),
            (7919, 7920),
            (99_000, 101_000),
        ] {
            assert_eq!(
                count_primes(lo, hi, &Control::new()).unwrap(),
                naive_count(lo, hi),
                "{lo}..{hi}"
            );
        }
        // Across a segment boundary, with base primes near the square root.
        let (lo, hi) = (SEGMENT - 500, SEGMENT + 500);
        assert_eq!(
            count_primes(lo, hi, &Control::new()).unwrap(),
            naive_count(lo, hi)
        );
    }

    #[test]
    fn any_split_gives_the_naive_count_and_every_integer_once() {
        let j = job(30_000);
        let naive = naive_count(0, 30_000);
        for n_chunks in [1, 2, 7, 64, 1000] {
            let a = solve(j.as_ref(), n_chunks);
            assert_eq!(a.tally.counter("primes"), u128::from(naive), "{n_chunks}");
            assert_eq!(a.tally.nodes, 30_000, "{n_chunks}");
        }
    }

    #[test]
    fn published_powers_of_ten() {
        for k in 0..=6u32 {
            let n = 10u64.pow(k);
            let a = solve(job(n).as_ref(), 3.min(n));
            assert_eq!(
                a.tally.counter("primes"),
                u128::from(PI_POWERS_OF_TEN[k as usize])
            );
            assert_eq!(job(n).result(&a)["matches_published"], true);
        }
        assert_eq!(published(10_000_000), Some(664_579));
        assert_eq!(published(12_345), None);
    }

    #[test]
    fn verify_refuses_wrong_counts_and_node_totals() {
        let j = job(100_000);
        let good = j.run_chunk(ChunkId::new(4, 1), &Control::new()).unwrap();
        let mut inflated = good.clone();
        inflated.count("primes", 1);
        let mut short = good.clone();
        short.nodes -= 1;
        let mut odd = good.clone();
        odd.count("twins", 1);
        j.verify(ChunkId::new(4, 1), &good).unwrap();
        for bad in [inflated, short, odd] {
            assert!(
                matches!(
                    j.verify(ChunkId::new(4, 1), &bad),
                    Err(SpaceError::Verification(_))
                ),
                "{bad:?}"
            );
        }
        // A long chunk is bounded: more primes than odd numbers is refused.
        let big = job(10_000_000);
        let mut absurd = big.run_chunk(ChunkId::new(2, 0), &Control::new()).unwrap();
        absurd.counters.insert("primes".into(), 3_000_000);
        assert!(big.verify(ChunkId::new(2, 0), &absurd).is_err());
    }

    #[test]
    fn a_cancelled_chunk_stops_with_cancelled() {
        let j = job(100_000_000);
        let ctl = sweep_space::ChunkControl::default();
        ctl.cancel();
        assert_eq!(
            j.run_chunk(ChunkId::new(1, 0), ctl.control()),
            Err(SpaceError::Cancelled)
        );
        let ctl = Control::new();
        j.run_chunk(ChunkId::new(100, 3), &ctl).unwrap();
        assert_eq!(
            ctl.nodes(),
            1_000_000,
            "progress is every integer of the chunk"
        );
    }

    #[test]
    fn parameters_round_trip_and_limits() {
        let j = job(1_000_000);
        assert_eq!(j.params(), &json!({ "below": 1_000_000 }));
        assert_eq!(j.plan(None).unwrap().n_chunks, 1);
        assert_eq!(job(100_000_000).plan(None).unwrap().n_chunks, 12);
        assert!(j.plan(Some(0)).is_err());
        assert!(job(10).plan(Some(11)).is_err());
        assert!(job_from_params("primes", &json!({ "below": MAX_BELOW + 1 })).is_err());
        assert!(job_from_params("primes", &json!({ "below": 5, "x": 1 })).is_err());
        // Default N.
        assert_eq!(
            job_from_params("primes", &json!({})).unwrap().params(),
            &json!({ "below": 10_000_000 })
        );
    }
}
