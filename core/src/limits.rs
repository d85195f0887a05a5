//! Bounds on what one client can make the coordinator hold in memory or write to disk, beyond the per-message
//! size limits (`sweep_proto::MAX_REPORT_BYTES`) and the lease/chunk caps of the core.
//!
//! Each refusal names the limit and the flag that raises it, so an operator whose legitimate job hits one
//! knows what to change. The checks are plain functions of what was stored so far ([`Usage`]); the core keeps
//! each job's usage and checks it under its lock, so concurrent reports cannot overshoot a cap together. The
//! bound on open `Watch` streams is a semaphore, so it lives with the shell (the coordinator's `limits`).

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
            max_report_solutions: sweep_space::MAX_REPORT_SOLUTIONS,
            max_job_solutions: 20_000_000,
            max_job_output_bytes: 16 << 30,
            max_watch_streams: 256,
            max_params_bytes: 256 << 10,
        }
    }
}

/// What a job's accepted outputs have stored so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub solutions: u64,
    pub bytes: u64,
}

/// The bytes a chunk output adds to the store, roughly: its solutions and its artifact.
pub fn output_bytes(out: &sweep_space::ChunkOutput) -> u64 {
    let sols: usize = out.solutions.iter().map(String::len).sum();
    (sols + out.artifact.len()) as u64
}

impl Limits {
    pub fn check_params(&self, params_json: &str) -> Result<(), String> {
        if params_json.len() > self.max_params_bytes {
            return Err(format!(
                "params_json is {} bytes, more than the limit of {} (--max-params-bytes)",
                params_json.len(),
                self.max_params_bytes
            ));
        }
        Ok(())
    }

    /// Whether one chunk's output fits the per-report limit (stateless: checked before any lock).
    pub fn check_report(&self, solutions: usize) -> Result<(), String> {
        if solutions > self.max_report_solutions {
            return Err(format!(
                "the report carries {solutions} solutions, more than the limit of {} per chunk \
                 (--max-report-solutions)",
                self.max_report_solutions
            ));
        }
        Ok(())
    }

    /// Whether `job`, having stored `used`, may store `add` more.
    pub fn check_job(&self, job: u64, used: Usage, add: Usage) -> Result<(), String> {
        if used.solutions + add.solutions > self.max_job_solutions {
            return Err(format!(
                "job {job} would store more than {} solutions (--max-job-solutions)",
                self.max_job_solutions
            ));
        }
        if used.bytes + add.bytes > self.max_job_output_bytes {
            return Err(format!(
                "job {job} would store more than {} MiB of output (--max-job-output-mb)",
                self.max_job_output_bytes >> 20
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            max_report_solutions: 3,
            max_job_solutions: 5,
            max_job_output_bytes: 100,
            max_watch_streams: 2,
            max_params_bytes: 10,
        }
    }

    fn usage(solutions: u64, bytes: u64) -> Usage {
        Usage { solutions, bytes }
    }

    #[test]
    fn report_and_job_caps_name_their_flags() {
        let l = small();
        assert!(l.check_report(3).is_ok());
        let e = l.check_report(4).unwrap_err();
        assert!(
            e.contains("--max-report-solutions") && e.contains('4'),
            "{e}"
        );
        assert!(l.check_job(1, usage(0, 0), usage(3, 10)).is_ok());
        let e = l.check_job(1, usage(3, 10), usage(3, 10)).unwrap_err();
        assert!(e.contains("--max-job-solutions"), "{e}");
        let e = l.check_job(1, usage(3, 10), usage(1, 91)).unwrap_err();
        assert!(e.contains("--max-job-output-mb"), "{e}");
    }

    #[test]
    fn params_size_is_capped() {
        let l = small();
        assert!(l.check_params("0123456789").is_ok());
        let e = l.check_params("0123456789x").unwrap_err();
        assert!(e.contains("--max-params-bytes"), "{e:?}");
    }
}
