//! The answer of a job, as one JSON object (`--json`) or as text for people.

use std::borrow::Cow;

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sweep_space::{SpaceJob, MAX_SHOWN_SOLUTIONS};

/// JSON numbers are exact only up to 2^53 in many readers: larger counts are written as decimal strings.
pub fn big(n: u128) -> Value {
    if n <= (1u128 << 53) {
        json!(n as u64)
    } else {
        json!(n.to_string())
    }
}

/// A job's answer as a report shows it.
pub enum ReportResult {
    /// A tree: parsed from a coordinator that sent no text (or from a space that renders no text).
    Built(Value),
    /// As a coordinator sent it (or `solve` wrote it): the JSON, and the text for people of the same answer. The
    /// JSON is read only by what prints or draws it (`--json`, `--svg`), and checked there: a star answer's
    /// 10,000 stars are 1.7 MB of JSON, and parsing it only to print its text was a single-threaded tenth of a
    /// second at the end of every `sweep run` (checking it, still 8 ms).
    Sent { json: String, text: String },
}

impl ReportResult {
    /// From a coordinator's `result_json` and `result_text` (empty from coordinators that do not send it).
    pub fn sent(json: String, text: String) -> Result<ReportResult, serde_json::Error> {
        if text.is_empty() {
            return Ok(ReportResult::Built(serde_json::from_str(&json)?));
        }
        Ok(ReportResult::Sent { json, text })
    }

    /// The answer as a tree (pictures are drawn from it): parsed here if it was sent as text.
    pub fn value(&self) -> Result<Cow<'_, Value>, serde_json::Error> {
        match self {
            ReportResult::Built(v) => Ok(Cow::Borrowed(v)),
            ReportResult::Sent { json, .. } => serde_json::from_str(json).map(Cow::Owned),
        }
    }

    /// The answer as text for people.
    fn text(&self, job: &SpaceJob) -> Cow<'_, str> {
        match self {
            ReportResult::Built(v) => Cow::Owned(job.render_text(v)),
            ReportResult::Sent { text, .. } => Cow::Borrowed(text),
        }
    }
}

impl Serialize for ReportResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ReportResult::Built(v) => v.serialize(s),
            ReportResult::Sent { json, .. } => {
                // Written as it came, once checked to be one JSON value (a cut answer must not make the
                // report's JSON invalid).
                let raw: &RawValue = serde_json::from_str(json).map_err(|e| {
                    serde::ser::Error::custom(format!("the answer is not JSON: {e}"))
                })?;
                raw.serialize(s)
            }
        }
    }
}

/// The `--json` form of a [`Report`]. Fields in alphabetical order, as a `serde_json::Map` writes its keys,
/// so the output reads as it did when it was built as a `Value`.
#[derive(Serialize)]
struct JsonReport<'a> {
    chunks_done: u64,
    chunks_total: u64,
    elapsed_s: f64,
    failures: &'a [Value],
    job: Option<u64>,
    listing: &'a str,
    max_attempts: Option<u32>,
    nodes: Value,
    params: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pieces: Option<u64>,
    poisoned_chunks: &'a [Value],
    result: &'a ReportResult,
    solutions_listed: u64,
    space: &'a str,
    state: &'a str,
    unverified: bool,
}

pub struct Report {
    pub space: String,
    pub params: Value,
    pub job: Option<u64>,
    pub state: String,
    /// Slots: the plan's chunks and the pieces split off running chunks.
    pub chunks_total: u64,
    pub chunks_done: u64,
    /// Of `chunks_total`, the pieces; `None` where none are recorded (`solve`).
    pub pieces: Option<u64>,
    pub nodes: u128,
    pub elapsed_s: f64,
    pub result: ReportResult,
    pub poisoned: Vec<Value>,
    /// The coordinator cannot re-check this job's answers (a program's output) and no quorum was asked for.
    pub unverified: bool,
    /// Failed attempts, recent first: the error of each (for a program, its exit status and stderr tail).
    pub failures: Vec<Value>,
    /// What the job kept of its solutions: `all`, `count-only` or `stopped` (see `sweep.v1.Listing`).
    pub listing: String,
    /// Solutions listed in all (the answer shows at most the smallest [`MAX_SHOWN_SOLUTIONS`]).
    pub solutions_listed: u64,
    /// Attempts a chunk got before it was poisoned; `None` where nothing retries (`solve`).
    pub max_attempts: Option<u32>,
}

impl Report {
    /// The report as one JSON object, the answer written as it is (never copied into another tree). Fails
    /// only if a coordinator's answer is not JSON.
    pub fn to_json_text(&self) -> Result<String, serde_json::Error> {
        let report = JsonReport {
            chunks_done: self.chunks_done,
            chunks_total: self.chunks_total,
            elapsed_s: self.elapsed_s,
            failures: &self.failures,
            job: self.job,
            listing: &self.listing,
            max_attempts: self.max_attempts,
            nodes: big(self.nodes),
            params: &self.params,
            pieces: self.pieces,
            poisoned_chunks: &self.poisoned,
            result: &self.result,
            solutions_listed: self.solutions_listed,
            space: &self.space,
            state: &self.state,
            unverified: self.unverified,
        };
        serde_json::to_string(&report)
    }

    /// Prints the report; fails, printing nothing, only if `as_json` and a coordinator's answer is not JSON.
    pub fn print(&self, job: &SpaceJob, as_json: bool) -> Result<(), serde_json::Error> {
        emit(&self.render(job, as_json)?);
        Ok(())
    }

    fn render(&self, job: &SpaceJob, as_json: bool) -> Result<String, serde_json::Error> {
        use std::fmt::Write;
        if as_json {
            return Ok(format!("{}\n", self.to_json_text()?));
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
        text.push_str(&self.result.text(job));
        Ok(text)
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
    job: &SpaceJob,
    result: &ReportResult,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some(dir) = dir else { return Ok(()) };
    let result = result.value().context("the answer is not JSON")?;
    let pictures = job.pictures(&result);
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

    fn star() -> sweep_space::SpaceJob {
        crate::builtin()
            .job_from_params("star", &json!({"points": 6, "method": "backtrack"}))
            .unwrap()
    }

    fn report(result: ReportResult) -> Report {
        Report {
            space: "star".into(),
            params: json!({"points": 6, "method": "backtrack"}),
            job: Some(3),
            state: "done".into(),
            chunks_total: 2,
            chunks_done: 2,
            pieces: None,
            nodes: (1 << 53) + 1,
            elapsed_s: 0.5,
            result,
            poisoned: vec![json!({"chunk": 1})],
            unverified: false,
            failures: Vec::new(),
            listing: "all".into(),
            solutions_listed: 80,
            max_attempts: Some(3),
        }
    }

    /// A report reads the same, as JSON and as text, whether its answer was built here or sent by a
    /// coordinator as JSON with its text; and a coordinator that sends no text gets its JSON rendered here.
    #[test]
    fn a_sent_answer_reports_as_one_built_here() {
        let job = star();
        let answer = json!({"points": 6, "magic_sum": 26, "solutions": 960, "unique": 80,
            "seed_numbering": ["1, 2, 3", "4, 5, 6"], "canonical_truncated": false});
        let built = report(ReportResult::Built(answer.clone()));
        let sent = ReportResult::sent(answer.to_string(), job.render_text(&answer)).unwrap();
        assert!(matches!(sent, ReportResult::Sent { .. }));
        let sent = report(sent);
        let old = ReportResult::sent(answer.to_string(), String::new()).unwrap();
        assert!(matches!(old, ReportResult::Built(_)));
        let old = report(old);
        for r in [&sent, &old] {
            assert_eq!(
                r.render(&job, true).unwrap(),
                built.render(&job, true).unwrap()
            );
            assert_eq!(
                r.render(&job, false).unwrap(),
                built.render(&job, false).unwrap()
            );
            assert_eq!(r.result.value().unwrap().as_ref(), &answer);
        }
        // What the JSON form was when the report was a `json!` tree: keys sorted, big counts as strings.
        let as_tree = json!({
            "space": "star", "params": {"points": 6, "method": "backtrack"}, "job": 3, "state": "done",
            "chunks_total": 2, "chunks_done": 2, "nodes": "9007199254740993", "elapsed_s": 0.5,
            "result": answer, "poisoned_chunks": [{"chunk": 1}], "unverified": false, "failures": [],
            "listing": "all", "solutions_listed": 80, "max_attempts": 3,
        });
        assert_eq!(sent.render(&job, true).unwrap(), format!("{as_tree}\n"));
        assert!(built
            .render(&job, false)
            .unwrap()
            .contains("unique solutions in the original program's field numbering"));
        // Cut JSON with its text: the text prints (the JSON is never read), `--json` and pictures refuse it;
        // without a text there is nothing to print, so it is refused at once.
        let cut = report(ReportResult::sent("{\"points\": 6,".into(), "the text".into()).unwrap());
        assert!(cut.render(&job, false).unwrap().contains("the text"));
        let err = cut.render(&job, true).unwrap_err().to_string();
        assert!(err.contains("the answer is not JSON"), "{err}");
        assert!(cut.result.value().is_err());
        let err = ReportResult::sent("{\"points\": 6,".into(), String::new()).err();
        assert!(err.is_some(), "cut JSON without a text is refused");
    }

    #[test]
    fn big_counts_become_strings() {
        assert_eq!(big(5), json!(5));
        assert_eq!(big(1 << 53), json!(9007199254740992u64));
        assert_eq!(big((1 << 53) + 1), json!("9007199254740993"));
        assert_eq!(human(1_234_567.0), "1.23 M");
    }
}
