//! Which workers a job's chunks may go to beyond the spaces they declare, and why a job waits when no live worker
//! can take it: pure functions over a job's needs and the workers' descriptions, so that the lease decision and
//! what `sweep status` says come from the same rule.

use std::fmt;

/// Whether a worker with `memory_bytes` (0: it did not say) may run chunks that each need `chunk_memory` bytes.
///
/// A worker that reported no memory (one older than the field, or one that could not read it) counts as having
/// enough: refusing it would strand every job with a limit on a cluster of such workers, and the chunk's own
/// limit, where the space enforces one, still holds on the worker.
pub fn fits(chunk_memory: Option<u64>, memory_bytes: u64) -> bool {
    match chunk_memory {
        None => true,
        Some(needs) => memory_bytes == 0 || memory_bytes >= needs,
    }
}

/// A live worker as placement sees it.
#[derive(Clone, Copy, Debug)]
pub struct LiveWorker<'a> {
    /// 0: it did not say.
    pub memory_bytes: u64,
    /// The spaces it declared; `None` until it registers with this coordinator process (it may run any).
    pub spaces: Option<&'a [String]>,
}

/// Why no live worker can take a running job's chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// None of them runs the job's space (an `exec` job needs workers started with `--allow-exec`).
    NoWorkerRunsSpace { space: String },
    /// Those that run its space all have less memory than one chunk needs.
    NeedsMemory { chunk_memory: u64, largest: u64 },
}

/// Bytes as people read memory sizes.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Waiting::NoWorkerRunsSpace { space } if space == "exec" => write!(
                f,
                "no live worker runs `exec` chunks (start workers with --allow-exec)"
            ),
            Waiting::NoWorkerRunsSpace { space } => {
                write!(f, "no live worker runs `{space}` chunks")
            }
            Waiting::NeedsMemory {
                chunk_memory,
                largest,
            } => write!(
                f,
                "needs {} per chunk; the largest live worker has {}",
                gib(*chunk_memory),
                gib(*largest)
            ),
        }
    }
}

/// Why none of the `live` workers (those heard from within a lease time and taking work) can take a chunk of
/// a job of `space` whose chunks need `chunk_memory` bytes each; `None` when one can, and when there are no
/// live workers at all (the count of live workers already says that).
pub fn why_waiting(
    space: &str,
    chunk_memory: Option<u64>,
    live: &[LiveWorker<'_>],
) -> Option<Waiting> {
    if live.is_empty() {
        return None;
    }
    let runners: Vec<&LiveWorker<'_>> = live
        .iter()
        .filter(|w| w.spaces.is_none_or(|s| s.iter().any(|n| n == space)))
        .collect();
    if runners.is_empty() {
        return Some(Waiting::NoWorkerRunsSpace {
            space: space.to_string(),
        });
    }
    if runners.iter().any(|w| fits(chunk_memory, w.memory_bytes)) {
        return None;
    }
    Some(Waiting::NeedsMemory {
        chunk_memory: chunk_memory.unwrap_or(0),
        largest: runners.iter().map(|w| w.memory_bytes).max().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn spaces(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_chunk_fits_a_worker_with_as_much_memory_or_one_that_did_not_say() {
        assert!(fits(None, 0));
        assert!(fits(None, GIB));
        assert!(fits(Some(8 * GIB), 8 * GIB));
        assert!(!fits(Some(8 * GIB), 8 * GIB - 1));
        assert!(
            fits(Some(8 * GIB), 0),
            "unknown memory is not held against a worker"
        );
    }

    #[test]
    fn a_job_waits_only_when_every_live_worker_is_too_small_or_runs_other_spaces() {
        let sums = spaces(&["sums"]);
        let others = spaces(&["star"]);
        let small = LiveWorker {
            memory_bytes: 3 * GIB + GIB * 8 / 10,
            spaces: Some(&sums),
        };
        let big = LiveWorker {
            memory_bytes: 16 * GIB,
            spaces: Some(&sums),
        };
        let huge_elsewhere = LiveWorker {
            memory_bytes: 64 * GIB,
            spaces: Some(&others),
        };
        let needs = Some(8 * GIB);
        assert_eq!(why_waiting("sums", needs, &[small, big]), None);
        let waiting = why_waiting("sums", needs, &[small, huge_elsewhere]).expect("waits");
        assert_eq!(
            waiting,
            Waiting::NeedsMemory {
                chunk_memory: 8 * GIB,
                largest: small.memory_bytes
            }
        );
        assert_eq!(
            waiting.to_string(),
            "needs 8.0 GiB per chunk; the largest live worker has 3.8 GiB"
        );
        assert_eq!(why_waiting("sums", None, &[small]), None);
        assert_eq!(
            why_waiting("sums", needs, &[]),
            None,
            "no live workers: nothing to add"
        );
        let unregistered = LiveWorker {
            memory_bytes: 0,
            spaces: None,
        };
        assert_eq!(why_waiting("sums", needs, &[small, unregistered]), None);
        let waiting = why_waiting("exec", None, &[small, big]).expect("waits");
        assert_eq!(
            waiting.to_string(),
            "no live worker runs `exec` chunks (start workers with --allow-exec)"
        );
    }
}
