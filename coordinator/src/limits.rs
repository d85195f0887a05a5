//! Bounds on what one client can make the coordinator hold in memory or write to disk, beyond the per-message
//! size limits (`sweep_proto::MAX_REPORT_BYTES`) and the lease/chunk caps in the service.
//!
//! Each refusal names the limit and the flag that raises it, so an operator whose legitimate job hits one
//! knows what to change. The per-job output counters live in memory: after a restart a job may store up to
//! the limit again (the cap bounds damage per coordinator run, it is not an exact quota).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// The configurable limits; `Default` is generous enough for every space's legitimate jobs.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Solutions one chunk report may carry (`--max-report-solutions`).
    pub max_report_solutions: usize,
    /// Solutions stored for one job over all its chunks (`--max-job-solutions`).
    pub max_job_solutions: u64,
    /// Bytes of solutions and artifacts stored for one job (`--max-job-output-mb`).
    pub max_job_output_bytes: u64,
    /// Open `Watch` streams at once (`--max-watch-streams`).
    pub max_watch_streams: usize,
    /// Size of `params_json` in a `Submit` (`--max-params-bytes`).
    pub max_params_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // A merged answer keeps at most this many solutions: a chunk sending more is not useful.
            max_report_solutions: sweep_space::MAX_KEPT_SOLUTIONS,
            max_job_solutions: 20_000_000,
            max_job_output_bytes: 16 << 30,
            max_watch_streams: 256,
            max_params_bytes: 256 << 10,
        }
    }
}

/// What has been admitted so far, checked against [`Limits`].
pub struct Guards {
    limits: Limits,
    watch_slots: Arc<Semaphore>,
    /// Per job: solutions and bytes accepted in this coordinator run.
    stored: Mutex<HashMap<u64, (u64, u64)>>,
}

/// The bytes a chunk output adds to the store, roughly: its solutions and its artifact.
pub fn output_bytes(out: &sweep_space::ChunkOutput) -> u64 {
    let sols: usize = out.solutions.iter().map(String::len).sum();
    (sols + out.artifact.len()) as u64
}

impl Guards {
    pub fn new(limits: Limits) -> Guards {
        Guards {
            watch_slots: Arc::new(Semaphore::new(limits.max_watch_streams)),
            limits,
            stored: Mutex::new(HashMap::new()),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A slot for one `Watch` stream, held until the stream ends.
    pub fn watch_slot(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.watch_slots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "too many open Watch streams (limit {}, --max-watch-streams); try again later",
                self.limits.max_watch_streams
            ))
        })
    }

    pub fn check_params(&self, params_json: &str) -> Result<(), Status> {
        if params_json.len() > self.limits.max_params_bytes {
            return Err(Status::resource_exhausted(format!(
                "params_json is {} bytes, more than the limit of {} (--max-params-bytes)",
                params_json.len(),
                self.limits.max_params_bytes
            )));
        }
        Ok(())
    }

    /// Whether one chunk's output fits the per-report limit (stateless: checked before any lock).
    pub fn check_report(&self, solutions: usize) -> Result<(), String> {
        if solutions > self.limits.max_report_solutions {
            return Err(format!(
                "the report carries {solutions} solutions, more than the limit of {} per chunk \
                 (--max-report-solutions)",
                self.limits.max_report_solutions
            ));
        }
        Ok(())
    }

    /// Whether `job` may store an output of `solutions` solutions and `bytes` bytes more.
    pub fn check_job(&self, job: u64, solutions: usize, bytes: u64) -> Result<(), String> {
        let stored = self.stored.lock().unwrap_or_else(|p| p.into_inner());
        let (sols, used) = stored.get(&job).copied().unwrap_or((0, 0));
        if sols + solutions as u64 > self.limits.max_job_solutions {
            return Err(format!(
                "job {job} would store more than {} solutions (--max-job-solutions)",
                self.limits.max_job_solutions
            ));
        }
        if used + bytes > self.limits.max_job_output_bytes {
            return Err(format!(
                "job {job} would store more than {} MiB of output (--max-job-output-mb)",
                self.limits.max_job_output_bytes >> 20
            ));
        }
        Ok(())
    }

    /// Counts an accepted output against its job.
    pub fn add_job(&self, job: u64, solutions: usize, bytes: u64) {
        let mut stored = self.stored.lock().unwrap_or_else(|p| p.into_inner());
        let e = stored.entry(job).or_default();
        e.0 += solutions as u64;
        e.1 += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Guards {
        Guards::new(Limits {
            max_report_solutions: 3,
            max_job_solutions: 5,
            max_job_output_bytes: 100,
            max_watch_streams: 2,
            max_params_bytes: 10,
        })
    }

    #[test]
    fn report_and_job_caps_name_their_flags() {
        let g = small();
        assert!(g.check_report(3).is_ok());
        let e = g.check_report(4).unwrap_err();
        assert!(
            e.contains("--max-report-solutions") && e.contains('4'),
            "{e}"
        );
        assert!(g.check_job(1, 3, 10).is_ok());
        g.add_job(1, 3, 10);
        let e = g.check_job(1, 3, 10).unwrap_err();
        assert!(e.contains("--max-job-solutions"), "{e}");
        // Another job has its own budget.
        assert!(g.check_job(2, 3, 10).is_ok());
        let e = g.check_job(1, 1, 91).unwrap_err();
        assert!(e.contains("--max-job-output-mb"), "{e}");
    }

    #[test]
    fn watch_slots_come_back_when_released() {
        let g = small();
        let a = g.watch_slot().unwrap();
        let _b = g.watch_slot().unwrap();
        let e = g.watch_slot().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        drop(a);
        assert!(g.watch_slot().is_ok());
    }

    #[test]
    fn params_size_is_capped() {
        let g = small();
        assert!(g.check_params("0123456789").is_ok());
        let e = g.check_params("0123456789x").unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("--max-params-bytes"), "{e:?}");
    }
}
