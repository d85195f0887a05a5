//! The answer of a job, as one JSON object (`--json`) or as text for people.

use serde_json::{json, Value};
use sweep_puzzles::{Job, MAX_SHOWN_SOLUTIONS};

/// JSON numbers are exact only up to 2^53 in many readers: larger counts are written as decimal strings.
pub fn big(n: u128) -> Value {
    if n <= (1u128 << 53) {
        json!(n as u64)
    } else {
        json!(n.to_string())
    }
}

pub struct Report {
    pub space: String,
    pub params: Value,
    pub job: Option<u64>,
    pub state: String,
    pub chunks_total: u64,
    pub chunks_done: u64,
    pub nodes: u128,
    pub elapsed_s: f64,
    pub result: Value,
    pub poisoned: Vec<Value>,
    /// The coordinator cannot re-check this job's answers (a program's output) and no quorum was asked for.
    pub unverified: bool,
    /// Failed attempts, recent first: the error of each (for a program, its exit status and stderr tail).
    pub failures: Vec<Value>,
    /// What the job kept of its solutions: `all`, `count-only` or `stopped` (see `sweep.v1.Listing`).
    pub listing: String,
    /// Solutions listed in all (the answer shows at most the smallest [`MAX_SHOWN_SOLUTIONS`]).
    pub solutions_listed: u64,
}

impl Report {
    pub fn to_json(&self) -> Value {
        json!({
            "space": self.space,
            "params": self.params,
            "job": self.job,
            "state": self.state,
            "chunks_total": self.chunks_total,
            "chunks_done": self.chunks_done,
            "nodes": big(self.nodes),
            "elapsed_s": self.elapsed_s,
            "result": self.result,
            "poisoned_chunks": self.poisoned,
            "unverified": self.unverified,
            "failures": self.failures,
            "listing": self.listing,
            "solutions_listed": self.solutions_listed,
        })
    }

    pub fn print(&self, job: &dyn Job, as_json: bool) {
        emit(&self.render(job, as_json));
    }

    fn render(&self, job: &dyn Job, as_json: bool) -> String {
        use std::fmt::Write;
        if as_json {
            return format!("{}\n", self.to_json());
        }
        let mut text = String::new();
        let rate = if self.elapsed_s > 0.0 {
            self.nodes as f64 / self.elapsed_s
        } else {
            0.0
        };
        let job_text = self.job.map(|j| format!("job {j} ")).unwrap_or_default();
        let _ = writeln!(
            text,
            "{}: {}{}, {}/{} chunks, {} nodes in {:.2} s ({}/s)",
            self.space,
            job_text,
            self.state,
            self.chunks_done,
            self.chunks_total,
            self.nodes,
            self.elapsed_s,
            human(rate)
        );
        if !self.poisoned.is_empty() {
            let _ = writeln!(
                text,
                "WARNING: {} chunks were poisoned; the answer below is incomplete:",
                self.poisoned.len()
            );
            for p in &self.poisoned {
                let _ = writeln!(
                    text,
                    "  chunk {} after {} attempts: {}",
                    p["chunk"],
                    p["attempts"],
                    p["last_error"].as_str().unwrap_or("")
                );
            }
        }
        if self.unverified {
            let _ = writeln!(
                text,
                "NOTE: unverified: nothing re-checked these chunks' answers (run with --replicate 2 or more)"
            );
        }
        match self.listing.as_str() {
            "count-only" => {
                let _ = writeln!(
                    text,
                    "NOTE: counts only (--count-only): no list of solutions was kept"
                );
            }
            "stopped" => {
                let _ = writeln!(
                    text,
                    "NOTE: the list of solutions outgrew the coordinator's --max-job-solutions (or \
                     --max-job-output-mb) and was stopped after {} of them; the counts are exact",
                    self.solutions_listed
                );
            }
            _ if self.solutions_listed > MAX_SHOWN_SOLUTIONS as u64 => {
                let how = match self.job {
                    Some(j) => format!("sweep results {j} --solutions FILE"),
                    None => "run it with `sweep run ... --solutions FILE`".to_string(),
                };
                let _ = writeln!(
                    text,
                    "NOTE: the answer shows the {MAX_SHOWN_SOLUTIONS} smallest of {} solutions; all of them: {how}",
                    self.solutions_listed
                );
            }
            _ => {}
        }
        // Poisoned chunks already show their last error; otherwise the failed attempts that were retried.
        if self.poisoned.is_empty() && !self.failures.is_empty() {
            const SHOWN: usize = 5;
            let _ = writeln!(
                text,
                "{} failed attempts were retried{}:",
                self.failures.len(),
                if self.failures.len() > SHOWN {
                    format!(" (the last {SHOWN})")
                } else {
                    String::new()
                }
            );
            for f in self.failures.iter().rev().take(SHOWN).rev() {
                let _ = writeln!(
                    text,
                    "  chunk {} on {}: {}",
                    f["chunk"],
                    f["worker"].as_str().unwrap_or("?"),
                    f["error"].as_str().unwrap_or("").replace('\n', "\n    ")
                );
            }
        }
        text.push_str(&job.render_text(&self.result));
        text
    }
}

/// Writes to stdout; a reader that went away (`sweep ... | head`) is not an error worth a panic.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Writes the job's pictures of `result` into `dir` (created if missing); nothing when `dir` is None. Says on
/// stderr how many were written, so `--json` output stays one object.
pub fn write_pictures(
    job: &dyn Job,
    result: &Value,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some(dir) = dir else { return Ok(()) };
    let pictures = job.pictures(result);
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the --svg directory {}", dir.display()))?;
    for (name, svg) in &pictures {
        let path = dir.join(name);
        std::fs::write(&path, svg)
            .with_context(|| format!("cannot write the picture {}", path.display()))?;
    }
    eprintln!("{} pictures written to {}", pictures.len(), dir.display());
    Ok(())
}

/// 1234567.0 -> "1.23 M".
pub fn human(x: f64) -> String {
    let units = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, unit) in units {
        if x >= scale {
            return format!("{:.2} {unit}", x / scale);
        }
    }
    format!("{x:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_counts_become_strings() {
        assert_eq!(big(5), json!(5));
        assert_eq!(big(1 << 53), json!(9007199254740992u64));
        assert_eq!(big((1 << 53) + 1), json!("9007199254740993"));
        assert_eq!(human(1_234_567.0), "1.23 M");
    }
}
