//! Wire messages (jobs, workers, failed attempts) as the JSON and text lines the commands print.

use sweep_proto::v1;

pub fn info_json(j: &v1::JobInfo) -> serde_json::Value {
    serde_json::json!({
        "job": j.id,
        "space": j.space,
        "params": serde_json::from_str::<serde_json::Value>(&j.params_json).unwrap_or(serde_json::Value::Null),
        "state": j.state().label(),
        "priority": j.priority,
        "owner": j.owner,
        "share": j.share,
        "chunks_total": j.chunks_total,
        "chunks_done": j.chunks_done,
        "pieces": j.pieces,
        "plan_chunks": plan_chunks(j),
        "chunks_covered": chunks_covered(j),
        "chunks_leased": j.chunks_leased,
        "chunks_poisoned": j.chunks_poisoned,
        "pieces": j.pieces,
        "chunks_covered": j.chunks_covered,
        "reissued": j.reissued,
        "completions": j.completions,
        "duplicates": j.duplicates,
        "replicate": j.replicate.max(1),
        "disagreements": j.disagreements,
        // `input_job` for scripts written when a job had one input at most.
        "input_job": (j.input_job != 0).then_some(j.input_job),
        "input_jobs": if j.input_jobs.is_empty() && j.input_job != 0 { vec![j.input_job] } else { j.input_jobs.clone() },
        "inputs_waiting": j.inputs_waiting,
        "artifact_digest": (!j.artifact_digest.is_empty()).then_some(&j.artifact_digest),
        "nodes": crate::output::big(j.nodes.parse().unwrap_or(0)),
        "unverified": j.unverified,
        "checkpoints": j.checkpoints,
        "failures": failures_json(&j.failures),
        "listing": j.listing().label(),
        "solutions_stored": j.solutions_stored,
        "counters": j.counters.iter().map(|(k, v)| (k.clone(), crate::output::big(v.parse().unwrap_or(0)))).collect::<serde_json::Map<_, _>>(),
        "max_attempts": j.max_attempts,
        "chunk_memory": (j.chunk_memory != 0).then_some(j.chunk_memory),
        "waiting": (!j.waiting.is_empty()).then_some(&j.waiting),
    })
}

/// The chunks of a job's plan: its slots (`chunks_total`) less the pieces that splitting running chunks added.
pub fn plan_chunks(j: &v1::JobInfo) -> u64 {
    j.chunks_total.saturating_sub(j.pieces)
}

/// How much of the plan the done slots cover, in plan chunks: what a chunk count shows, since it never falls
/// when a chunk splits (`chunks_done` of a growing `chunks_total` would). Without pieces it is `chunks_done`
/// exactly, which is also what a message built without the field carries.
pub fn chunks_covered(j: &v1::JobInfo) -> f64 {
    if j.pieces == 0 {
        return j.chunks_done as f64;
    }
    let plan = plan_chunks(j) as f64;
    if j.chunks_covered.is_finite() {
        j.chunks_covered.clamp(0.0, plan)
    } else {
        0.0
    }
}

/// `12/64 chunks`, or for a job whose chunks split `11.5/64 chunks (3 pieces)`: the plan covered, never a
/// count of slots that grows as chunks split.
pub fn chunks_text(j: &v1::JobInfo) -> String {
    let text = format!("{}/{} chunks", covered_figure(j), plan_chunks(j));
    if j.pieces == 0 {
        text
    } else {
        let s = if j.pieces == 1 { "" } else { "s" };
        format!("{text} ({} piece{s})", j.pieces)
    }
}

/// The covered chunks as a short figure: whole when whole, else rounded down to a tenth, so a job never looks
/// done (`64/64`) before it is.
pub fn covered_figure(j: &v1::JobInfo) -> String {
    let c = chunks_covered(j);
    if c.fract() == 0.0 {
        format!("{c}")
    } else {
        format!("{:.1}", (c * 10.0).floor() / 10.0)
    }
}

/// What to tell the person who asked for `asked` attempts per chunk when the submitted job `j` got fewer: the
/// coordinator lowers a request above its own --max-attempts instead of refusing the job.
pub fn attempts_note(asked: Option<u32>, j: &v1::JobInfo) -> Option<String> {
    let asked = asked?;
    // 0: a coordinator that does not report the job's attempts; nothing to compare.
    (j.max_attempts != 0 && j.max_attempts < asked).then(|| {
        format!(
            "note: job {} gets {} attempts per chunk, not {asked}: that is the coordinator's --max-attempts",
            j.id, j.max_attempts
        )
    })
}

pub fn failures_json(failures: &[v1::FailedAttempt]) -> Vec<serde_json::Value> {
    failures
        .iter()
        .map(|f| serde_json::json!({"chunk": f.chunk, "worker": f.worker, "error": f.error, "unix_ms": f.unix_ms}))
        .collect()
}

/// The lines that tell a person what a job needs or why its answer needs care: no live worker can take it, it
/// cannot be re-verified, or attempts failed.
pub fn caveats(j: &v1::JobInfo) -> Vec<String> {
    let mut lines = Vec::new();
    if !j.waiting.is_empty() {
        lines.push(format!("job {}: waiting: {}", j.id, j.waiting));
    }
    if j.unverified {
        lines.push(format!(
            "job {}: unverified: the coordinator cannot re-check the answers of `{}` chunks; submit with \
             --replicate 2 or more to have distinct workers agree",
            j.id, j.space
        ));
    }
    for f in &j.failures {
        lines.push(format!(
            "job {} chunk {} failed on {}: {}",
            j.id, f.chunk, f.worker, f.error
        ));
    }
    lines
}

pub fn poisoned_list(r: &v1::ResultsResponse) -> Vec<serde_json::Value> {
    r.poisoned
        .iter()
        .map(|p| serde_json::json!({"chunk": p.chunk, "attempts": p.attempts, "last_error": p.last_error}))
        .collect()
}

/// Bytes as people read memory sizes: `3.8 GiB`.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

pub fn worker_json(w: &v1::WorkerStatus) -> serde_json::Value {
    serde_json::json!({
        "name": w.name,
        "threads": w.threads,
        "memory_bytes": w.memory_bytes,
        // null: the worker does not say (an empty string would read as a containment named "").
        "containment": (!w.containment.is_empty()).then_some(&w.containment),
        "last_seen_unix_ms": w.last_seen_unix_ms,
        "chunks_done": w.chunks_done,
        "leases_held": w.leases_held,
        "bad_results": w.bad_results,
        "banned": w.banned,
        "draining": w.draining,
        "version": w.version,
    })
}

/// The forms of an answer a command needs from the coordinator: the JSON to print it as JSON or to draw its
/// pictures, the text to print it for people.
pub fn answer_form(json: bool, pictures: bool) -> v1::AnswerForm {
    match (json, pictures) {
        (true, _) => v1::AnswerForm::Json,
        (false, true) => v1::AnswerForm::Both,
        (false, false) => v1::AnswerForm::Text,
    }
}

/// The report of a coordinator's answer: `results` for the job `info` (of `space` with `params`), asked for in
/// `form`, `elapsed_s` as the command measures it. Fails only if the text is needed, came without it (an older
/// coordinator, a space that writes none) and the answer is not JSON.
pub fn results_report(
    results: v1::ResultsResponse,
    info: &v1::JobInfo,
    (space, params): (String, serde_json::Value),
    elapsed_s: f64,
    form: v1::AnswerForm,
) -> Result<crate::output::Report, serde_json::Error> {
    let poisoned = poisoned_list(&results);
    Ok(crate::output::Report {
        space,
        params,
        job: Some(info.id),
        state: info.state().label().to_string(),
        chunks_total: info.chunks_total,
        chunks_done: info.chunks_done,
        pieces: Some(info.pieces),
        nodes: info.nodes.parse().unwrap_or(0),
        elapsed_s,
        result: if form == v1::AnswerForm::Json {
            // Printed as JSON: the text is never read, and the JSON is written as it came.
            crate::output::ReportResult::Sent {
                json: results.result_json,
                text: results.result_text,
            }
        } else {
            crate::output::ReportResult::sent(results.result_json, results.result_text)?
        },
        poisoned,
        unverified: info.unverified,
        failures: failures_json(&info.failures),
        listing: info.listing().label().into(),
        solutions_listed: info.solutions_stored,
        max_attempts: (info.max_attempts != 0).then_some(info.max_attempts),
    })
}

/// One identity's part of the cluster, as `sweep status --json` and `sweep share set --json` show it.
pub fn identity_json(u: &v1::IdentityInfo) -> serde_json::Value {
    serde_json::json!({
        "identity": u.identity,
        "share": u.share,
        "running_threads": u.running_threads,
        "decayed_thread_seconds": u.decayed_thread_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::ReportResult;

    #[test]
    fn a_split_jobs_json_keeps_its_slot_counts_and_adds_the_plan_covered() {
        let j = v1::JobInfo {
            chunks_total: 67,
            pieces: 3,
            chunks_done: 20,
            chunks_covered: 18.25,
            ..Default::default()
        };
        let json = info_json(&j);
        assert_eq!(json["chunks_total"], 67);
        assert_eq!(json["chunks_done"], 20);
        assert_eq!(json["pieces"], 3);
        assert_eq!(json["plan_chunks"], 64);
        assert_eq!(json["chunks_covered"], 18.25);
        assert_eq!(chunks_text(&j), "18.2/64 chunks (3 pieces)");
        // A covered figure past the plan (a wire lie) is held at the plan; without pieces it is the done count.
        let over = v1::JobInfo {
            chunks_covered: 99.0,
            ..j.clone()
        };
        assert_eq!(chunks_covered(&over), 64.0);
        let unsplit = v1::JobInfo {
            pieces: 0,
            chunks_total: 64,
            chunks_covered: 0.0,
            ..j
        };
        assert_eq!(chunks_text(&unsplit), "20/64 chunks");
    }

    fn report(
        json: &str,
        text: &str,
        form: v1::AnswerForm,
    ) -> Result<ReportResult, serde_json::Error> {
        let results = v1::ResultsResponse {
            result_json: json.into(),
            result_text: text.into(),
            ..Default::default()
        };
        let info = v1::JobInfo::default();
        results_report(
            results,
            &info,
            ("star".into(), serde_json::Value::Null),
            0.0,
            form,
        )
        .map(|r| r.result)
    }

    #[test]
    fn a_job_given_fewer_attempts_than_asked_for_says_so() {
        let job = |max_attempts| v1::JobInfo {
            id: 4,
            max_attempts,
            ..Default::default()
        };
        let note = attempts_note(Some(10), &job(3)).expect("lowered");
        assert!(
            note.contains("job 4 gets 3 attempts per chunk, not 10"),
            "{note}"
        );
        assert_eq!(attempts_note(Some(3), &job(3)), None);
        assert_eq!(attempts_note(None, &job(3)), None);
        assert_eq!(
            attempts_note(Some(10), &job(0)),
            None,
            "a coordinator that does not say"
        );
    }

    /// The caveat reads the same whatever the space is called: no article that fits one name and not another
    /// ("a exec chunk").
    #[test]
    fn the_unverified_caveat_reads_right_for_any_space_name() {
        for space in ["exec", "star", "union"] {
            let job = v1::JobInfo {
                id: 1,
                space: space.into(),
                unverified: true,
                ..Default::default()
            };
            let lines = caveats(&job);
            assert_eq!(
                lines,
                [format!(
                    "job 1: unverified: the coordinator cannot re-check the answers of `{space}` chunks; submit \
                     with --replicate 2 or more to have distinct workers agree"
                )]
            );
        }
    }

    #[test]
    fn a_command_asks_for_the_forms_it_prints_or_draws() {
        assert_eq!(answer_form(true, false), v1::AnswerForm::Json);
        assert_eq!(answer_form(true, true), v1::AnswerForm::Json);
        assert_eq!(answer_form(false, true), v1::AnswerForm::Both);
        assert_eq!(answer_form(false, false), v1::AnswerForm::Text);
    }

    /// The JSON is parsed into a tree only when text is needed and none came (an older coordinator).
    #[test]
    fn an_answer_is_parsed_only_for_text_that_did_not_come() {
        let json = r#"{"points": 6}"#;
        assert!(matches!(
            report(json, "", v1::AnswerForm::Json),
            Ok(ReportResult::Sent { .. })
        ));
        assert!(matches!(
            report(json, "", v1::AnswerForm::Both),
            Ok(ReportResult::Built(_))
        ));
        assert!(matches!(
            report("", "the text", v1::AnswerForm::Text),
            Ok(ReportResult::Sent { .. })
        ));
        assert!(
            report("{cut", "", v1::AnswerForm::Text).is_err(),
            "no text and no JSON to render it from"
        );
    }
}
