//! The `exec` space itself: its parameters, the checks made when a job is built, and the `Job` that runs one chunk
//! by starting the program ([`supervise`](crate::supervise)), reading its lines ([`protocol`](crate::protocol)) and
//! giving it the shipped files ([`ship`](crate::ship)).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sweep_contain::{Limits, Sandbox, Spec};
use sweep_space::{
    Answer, ChunkId, ChunkOutput, Control, Job, Plan, SearchSpace, SpaceError,
    MAX_RESUME_STATE_BYTES, MAX_SHOWN_SOLUTIONS,
};

use crate::protocol::Line;
use crate::ship;
use crate::supervise::{self, StopReason, Stopping, WorkDir};

/// More chunks than this in one exec job is a typo, not a plan (the coordinator's own bound).
const MAX_CHUNKS: u64 = 1_000_000_000;

/// `sweep run exec [options] -- COMMAND [ARGS]`.
#[derive(clap::Args, Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// Threads one chunk's program uses (SWEEP_THREADS): a worker with T threads runs T / this many at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    #[serde(default = "one")]
    pub threads_per_chunk: u32,
    /// Stop a chunk's program after this many seconds; the attempt fails (and is retried elsewhere).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_timeout: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL when a chunk is cancelled, drained or timed out.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    #[serde(default = "ten")]
    pub grace_secs: u64,
    /// Memory for one chunk's processes together (2G, 512M): over it, the chunk fails and says so. Chunks go
    /// only to workers that have this much.
    #[arg(long, value_parser = size)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_memory: Option<u64>,
    /// Processes (and threads) one chunk may have at once: a fork bomb stops here.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4_194_304))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_pids: Option<u64>,
    /// Bytes one chunk may write in its private directory (and in any one file).
    #[arg(long, value_parser = size)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_disk: Option<u64>,
    /// Seconds of CPU time one chunk may use, all its processes together.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_cpu: Option<u64>,
    /// The program splits its chunk when asked, so idle threads take part of it (`sweep solve`): its stdin
    /// gets the line `split`, and it answers on stdout with {"split": {"kept": "K", "given": "G"}} (it goes on
    /// with K only; a run of the same chunk with SWEEP_RESUME=G does the rest, counting from zero) or
    /// {"split": null}. Without this flag its stdin is /dev/null and nothing is ever asked.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub splits: bool,
    /// The programs need the network: on a sandboxing worker (`sweep worker --sandbox`) they keep it.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// A file or directory to ship to the workers (stored once by the coordinator, cached by each worker).
    /// Replaced by its digest before the job is submitted.
    #[arg(long)]
    #[serde(skip)]
    pub ship: Option<PathBuf>,
    /// Run every chunk's program in this directory (absolute) instead of a private one; `sweep run` and
    /// `sweep solve` default to the directory they were started in, so `python3 count.py` finds its script.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// The blake3 digest of the shipped archive (set by `--ship`).
    #[arg(long, hide = true)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ship_digest: Option<String>,
    /// The command run for every chunk, after `--`: `{chunk}`, `{chunks}` and `{job}` are replaced.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn size(text: &str) -> Result<u64, sweep_contain::BytesError> {
    sweep_contain::parse_bytes(text)
}

impl ExecParams {
    /// What the box of each chunk enforces.
    pub fn limits(&self) -> Limits {
        Limits {
            memory: self.chunk_memory,
            pids: self.chunk_pids,
            cpu_secs: self.chunk_cpu,
            disk: self.chunk_disk,
        }
    }
}

fn one() -> u32 {
    1
}

fn ten() -> u64 {
    10
}

/// The registry's handle for the exec space.
pub struct Exec;

impl SearchSpace for Exec {
    const NAME: &'static str = "exec";
    const ABOUT: &'static str =
        "Any program as a search space: run once per chunk, JSON lines on stdout (see `sweep run exec --help`)";
    type Params = ExecParams;

    fn build(params: ExecParams) -> Result<impl Job, SpaceError> {
        ExecJob::new(params)
    }
}

#[derive(Clone, Debug)]
pub struct ExecJob {
    pub params: ExecParams,
    /// Where the shipped files were unpacked, once bound.
    ship_dir: Option<Arc<PathBuf>>,
}

/// A failed attempt: what happened, and the end of stderr, where a program says why.
fn failed(what: String, stderr: &[u8]) -> SpaceError {
    let tail = supervise::stderr_tail(stderr);
    if tail.is_empty() {
        SpaceError::ChunkFailed(format!("{what}; stderr was empty"))
    } else {
        SpaceError::ChunkFailed(format!("{what}; stderr tail:\n{tail}"))
    }
}

impl ExecJob {
    /// The job `params` ask for, or the first reason they cannot run.
    fn new(params: ExecParams) -> Result<ExecJob, SpaceError> {
        let Some(program) = params.command.first() else {
            return Err(SpaceError::invalid_param(
                "command",
                "name the program to run after `--`",
            ));
        };
        if program.is_empty() {
            return Err(SpaceError::invalid_param(
                "command",
                "the program's name is empty",
            ));
        }
        if params.ship.is_some() && params.ship_digest.is_some() {
            return Err(SpaceError::invalid_param(
                "ship",
                "give --ship PATH, not both it and a digest",
            ));
        }
        if let Some(w) = &params.workdir {
            if !w.is_absolute() {
                return Err(SpaceError::invalid_param(
                    "workdir",
                    format!("`{}` is not an absolute path", w.display()),
                ));
            }
        }
        if let Some(d) = &params.ship_digest {
            if !ship::is_digest(d) {
                return Err(SpaceError::invalid_param(
                    "ship_digest",
                    format!("`{d}` is not a blake3 digest in lower-case hex"),
                ));
            }
        }
        Ok(ExecJob {
            params,
            ship_dir: None,
        })
    }

    fn argv(&self, at: ChunkId, job: u64) -> Vec<String> {
        self.params
            .command
            .iter()
            .map(|a| {
                a.replace("{chunk}", &at.chunk.to_string())
                    .replace("{chunks}", &at.n_chunks.to_string())
                    .replace("{job}", &job.to_string())
            })
            .collect()
    }

    /// The program with its arguments, directory, the documented environment ([`crate::ENVIRONMENT`]), the
    /// job's limits and, on a sandboxing worker, what the program may see.
    fn spec(&self, argv: &[String], dir: &Path, at: ChunkId, ctl: &Control) -> Spec {
        let mut path =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        let home = dir.display().to_string();
        let mut env: Vec<(String, String)> = vec![
            ("SWEEP_CHUNK".into(), at.chunk.to_string()),
            ("SWEEP_CHUNKS".into(), at.n_chunks.to_string()),
            ("SWEEP_JOB".into(), ctl.job().to_string()),
            ("SWEEP_THREADS".into(), ctl.threads().to_string()),
            ("HOME".into(), home.clone()),
            ("TMPDIR".into(), home),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        if let Some(ship) = &self.ship_dir {
            path = format!("{}:{path}", ship.display());
            env.push(("SWEEP_SHIP".into(), ship.display().to_string()));
        }
        env.push(("PATH".into(), path));
        if let Some(resume) = ctl.resume_state() {
            env.push(("SWEEP_RESUME".into(), resume.to_string()));
        }
        let cwd = self
            .params
            .workdir
            .clone()
            .unwrap_or_else(|| dir.to_path_buf());
        let sandbox = sweep_contain::policy().sandbox.then(|| Sandbox {
            writable: vec![dir.to_path_buf()],
            readable: self.ship_dir.iter().map(|d| d.to_path_buf()).collect(),
            hide: vec![std::env::temp_dir()],
            network: self.params.network,
        });
        Spec {
            program: argv[0].clone().into(),
            args: argv[1..].to_vec(),
            env,
            cwd,
            limits: self.params.limits(),
            private_dir: Some(dir.to_path_buf()),
            sandbox,
        }
    }
}

impl Job for ExecJob {
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let Some(n) = requested else {
            return Err(SpaceError::invalid_param(
                "chunks",
                "an exec job needs --chunks N: the program decides what a chunk is",
            ));
        };
        Ok(Plan {
            n_chunks: Plan::chunk_count(Some(n), MAX_CHUNKS, n)?,
            total_nodes: None,
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        if self.params.ship_digest.is_some() && self.ship_dir.is_none() {
            return Err(SpaceError::ChunkFailed(
                "the job ships files but they were not fetched".into(),
            ));
        }
        let argv = self.argv(at, ctl.job());
        let Some(program) = argv.first() else {
            return Err(SpaceError::ChunkFailed("the job names no program".into()));
        };
        let dir = WorkDir::new().map_err(|e| {
            SpaceError::ChunkFailed(format!("cannot make a working directory: {e}"))
        })?;
        if let Some(ship) = &self.ship_dir {
            ship::link_into(ship, dir.path()).map_err(|e| {
                SpaceError::ChunkFailed(format!("cannot link the shipped files: {e}"))
            })?;
        }
        let spec = self.spec(&argv, dir.path(), at, ctl);
        let limits = Stopping {
            timeout: self.params.chunk_timeout.map(Duration::from_secs),
            grace: Duration::from_secs(self.params.grace_secs),
        };
        let mut last_progress = 0u64;
        let mut result: Option<ChunkOutput> = None;
        let ended = supervise::run(&spec, ctl, limits, self.params.splits, |line| match line {
            Line::Progress(n) => {
                ctl.add_nodes(n.saturating_sub(last_progress));
                last_progress = last_progress.max(n);
                Ok(())
            }
            Line::Checkpoint(text) => ctl.save_resume_state(text).map_err(|e| e.to_string()),
            Line::Final(out) => match result.replace(out) {
                Some(_) => Err("more than one final line".into()),
                None => Ok(()),
            },
            // Answers to split requests are taken by `supervise::run` itself.
            Line::Split(_) => Ok(()),
        })
        .map_err(|e| SpaceError::ChunkFailed(format!("cannot start `{program}`: {e}")))?;
        let status = supervise::describe(ended.status);
        if let Some(limit) = ended.limit {
            return Err(failed(
                format!("the chunk went {limit} ({status})"),
                &ended.stderr,
            ));
        }
        match ended.stopped {
            Some(StopReason::Cancelled | StopReason::WorkerStopping) => {
                return Err(SpaceError::Cancelled)
            }
            Some(StopReason::TimedOut) => {
                let t = self.params.chunk_timeout.unwrap_or(0);
                return Err(failed(
                    format!("timed out after {t} s ({status})"),
                    &ended.stderr,
                ));
            }
            // The malformed line is the problem, reported below.
            Some(StopReason::MalformedOutput) | None => {}
        }
        if let Some(p) = ended.problem {
            return Err(failed(format!("{p} ({status})"), &ended.stderr));
        }
        if !ended.status.success() {
            return Err(failed(status, &ended.stderr));
        }
        result.ok_or_else(|| {
            failed(
                "exit status 0 but no final {\"nodes\": ...} line on stdout".into(),
                &ended.stderr,
            )
        })
    }

    /// Only the form can be checked: the coordinator cannot re-run a program it does not have.
    fn verify(&self, _at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        if !out.artifact.is_empty() {
            return Err(SpaceError::Verification(
                "exec chunks report no artifacts".into(),
            ));
        }
        Ok(())
    }

    fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        out.check_unlisted("solutions")?;
        self.verify(at, out)
    }

    fn verifiable(&self) -> bool {
        false
    }

    fn splits(&self) -> bool {
        self.params.splits
    }

    /// Only the form of a split can be checked: its states are the program's own vocabulary, which sweep
    /// cannot read, so whether the parts cover the parent exactly once is the program's word. What is checked:
    /// the job splits, both states name a part (non-empty; an empty `SWEEP_RESUME` would be the whole chunk),
    /// they differ (the same part twice would be counted twice), and each fits in a resume state.
    fn check_split(
        &self,
        at: ChunkId,
        _parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        if !self.params.splits {
            return Err(SpaceError::Verification(
                "this exec job was not run with --splits: its chunks do not split".into(),
            ));
        }
        for (what, state) in [("kept", kept), ("given", given)] {
            if state.is_empty() {
                return Err(SpaceError::Verification(format!(
                    "a split of {at} with an empty {what} state"
                )));
            }
            if state.len() > MAX_RESUME_STATE_BYTES {
                return Err(SpaceError::Verification(format!(
                    "a split of {at} with a {what} state of {} bytes, more than {MAX_RESUME_STATE_BYTES}",
                    state.len()
                )));
            }
        }
        if kept == given {
            return Err(SpaceError::Verification(format!(
                "a split of {at} whose kept and given parts are the same state"
            )));
        }
        Ok(())
    }

    /// A part's output is checked as a whole chunk's is: for form only.
    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        if !self.params.splits {
            return Err(SpaceError::Verification(
                "this exec job was not run with --splits: its chunks have no parts".into(),
            ));
        }
        if part.is_empty() {
            return Err(SpaceError::Verification(format!(
                "a part of {at} with an empty state"
            )));
        }
        if listed {
            self.verify(at, out)
        } else {
            self.verify_counts(at, out)
        }
    }

    fn threads_per_chunk(&self) -> u32 {
        self.params.threads_per_chunk
    }

    fn chunk_memory(&self) -> Option<u64> {
        self.params.chunk_memory
    }

    fn shipped(&self) -> Vec<String> {
        self.params.ship_digest.iter().cloned().collect()
    }

    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        let ([archive], Some(digest)) = (artifacts, &self.params.ship_digest) else {
            return Err(SpaceError::BadParams {
                space: "exec",
                reason: format!("expected one shipped archive, got {}", artifacts.len()),
            });
        };
        let dir = ship::unpack_once(digest, archive).map_err(|e| {
            SpaceError::ChunkFailed(format!("cannot unpack the shipped files: {e}"))
        })?;
        Ok(Arc::new(ExecJob {
            params: self.params.clone(),
            ship_dir: Some(Arc::new(dir)),
        }))
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> = answer
            .tally
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), sweep_space::json_u128(*v)))
            .collect();
        serde_json::json!({
            "command": self.params.command,
            "chunks": answer.tally.chunks,
            "nodes": sweep_space::json_u128(answer.tally.nodes),
            "counters": counters,
            "solutions": answer.solutions,
            "solutions_truncated": answer.solutions_truncated,
            "solutions_listed": answer.solutions_listed,
        })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        let mut text = format!(
            "exec `{}`: {} chunks, {} nodes\n",
            self.params.command.join(" "),
            result["chunks"],
            result["nodes"]
                .as_str()
                .map_or_else(|| result["nodes"].to_string(), str::to_string)
        );
        if let Some(counters) = result["counters"].as_object() {
            for (k, v) in counters {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                text.push_str(&format!("  {k} = {v}\n"));
            }
        }
        if let Some(sols) = result["solutions"].as_array() {
            if !sols.is_empty() {
                let listed = result["solutions_listed"]
                    .as_u64()
                    .unwrap_or(sols.len() as u64);
                text.push_str(&format!("  {listed} solutions"));
                if result["solutions_truncated"] == serde_json::json!(true) {
                    text.push_str(&format!(" (the {MAX_SHOWN_SOLUTIONS} smallest shown)"));
                }
                text.push('\n');
                for s in sols.iter().take(20) {
                    text.push_str(&format!("  {}\n", s.as_str().unwrap_or_default()));
                }
                if sols.len() > 20 {
                    text.push_str("  ...\n");
                }
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn job(cmd: &[&str]) -> ExecJob {
        ExecJob::new(ExecParams {
            threads_per_chunk: 1,
            chunk_timeout: None,
            grace_secs: 1,
            chunk_memory: None,
            chunk_pids: None,
            chunk_disk: None,
            chunk_cpu: None,
            network: false,
            splits: false,
            ship: None,
            workdir: None,
            ship_digest: None,
            command: cmd.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn a_chunk_runs_with_placeholders_and_its_environment() {
        let j = job(&[
            "sh",
            "-c",
            r#"echo '{"progress": 2}'; echo "{\"nodes\": $SWEEP_CHUNK, \"counters\": {\"c{chunk}of{chunks}\": $SWEEP_CHUNKS}, \"solutions\": [\"$SWEEP_THREADS $HOME\"]}""#,
        ]);
        let ctl = Control::new();
        let out = j.run_chunk(ChunkId::new(7, 3), &ctl).unwrap();
        assert_eq!(out.nodes, 3);
        assert_eq!(out.counters["c3of7"], 7);
        assert!(out.solutions[0].starts_with("1 /"), "{:?}", out.solutions);
        assert_eq!(ctl.nodes(), 2);
    }

    /// Why the only chunk of `cmd`'s job fails.
    fn failure(cmd: &[&str]) -> String {
        job(cmd)
            .run_chunk(ChunkId::new(1, 0), &Control::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn failures_carry_the_status_and_stderr_tail() {
        let err = failure(&["sh", "-c", "echo boom >&2; exit 3"]);
        assert!(
            err.contains("exit status 3") && err.contains("boom"),
            "{err}"
        );
        let err = failure(&["sh", "-c", "echo ok"]);
        assert!(err.contains("not JSON"), "{err}");
        let err = failure(&["true"]);
        assert!(err.contains("no final"), "{err}");
        let err = failure(&["sh", "-c", r#"echo '{"nodes":1}'; echo '{"nodes":1}'"#]);
        assert!(err.contains("more than one"), "{err}");
        let err = failure(&["/no/such/program"]);
        assert!(err.contains("cannot start"), "{err}");
    }

    #[test]
    fn cancelling_stops_the_whole_group() {
        let j = job(&["sh", "-c", "sleep 30 & sleep 30; wait"]);
        let ctl = Arc::new(sweep_space::ChunkControl::default());
        let c2 = ctl.clone();
        let t = std::thread::spawn(move || j.run_chunk(ChunkId::new(1, 0), c2.control()));
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        ctl.cancel();
        assert_eq!(t.join().unwrap(), Err(SpaceError::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn checkpoints_are_saved_and_resume_is_passed_on() {
        let j = job(&[
            "sh",
            "-c",
            r#"echo "{\"checkpoint\": \"after ${SWEEP_RESUME:-start}\"}"; echo '{"nodes": 1}'"#,
        ]);
        let ctl = sweep_space::ChunkControl::new(Some("x".into()));
        j.run_chunk(ChunkId::new(1, 0), ctl.control()).unwrap();
        assert_eq!(ctl.take_resume_state().as_deref(), Some("after x"));
    }

    #[test]
    fn a_split_is_checked_for_form_only_and_only_in_a_job_that_splits() {
        let at = ChunkId::new(2, 1);
        let mut j = job(&["true"]);
        assert!(!j.splits());
        let refused = j.check_split(at, None, "a", "b").unwrap_err();
        assert!(
            refused.to_string().contains("not run with --splits"),
            "{refused}"
        );
        assert!(j
            .verify_part(at, "a", &ChunkOutput::default(), true)
            .is_err());
        j.params.splits = true;
        assert!(j.splits());
        assert_eq!(j.check_split(at, None, "a", "b"), Ok(()));
        assert_eq!(j.check_split(at, Some("anything"), "a", "b"), Ok(()));
        let big = "x".repeat(MAX_RESUME_STATE_BYTES + 1);
        for (kept, given, why) in [
            ("", "b", "empty kept"),
            ("a", "", "empty given"),
            ("a", "a", "the same state"),
            ("a", big.as_str(), "given state of 65537 bytes"),
        ] {
            let e = j
                .check_split(at, None, kept, given)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{kept:.9} {given:.9}: {e}");
        }
        let out = ChunkOutput {
            nodes: 3,
            solutions: vec!["s".into()],
            ..ChunkOutput::default()
        };
        assert_eq!(j.verify_part(at, "a", &out, true), Ok(()));
        assert!(
            j.verify_part(at, "a", &out, false).is_err(),
            "listed in a count-only job"
        );
        assert!(j.verify_part(at, "", &out, true).is_err());
    }

    #[test]
    fn a_timeout_fails_the_attempt() {
        let mut j = job(&["sleep", "30"]);
        j.params.chunk_timeout = Some(1);
        j.params.grace_secs = 0;
        let err = j
            .run_chunk(ChunkId::new(1, 0), &Control::new())
            .unwrap_err();
        assert!(err.to_string().contains("timed out after 1 s"), "{err}");
    }

    #[test]
    fn a_bad_digest_or_a_relative_workdir_is_refused_when_built() {
        let mut params = job(&["true"]).params;
        params.ship_digest = Some("ABC".into());
        assert!(Exec::build(params.clone())
            .unwrap_err()
            .to_string()
            .contains("not a blake3 digest"));
        params.ship_digest = None;
        params.workdir = Some("rel".into());
        assert!(Exec::build(params)
            .unwrap_err()
            .to_string()
            .contains("not an absolute path"));
    }

    #[test]
    fn packing_is_deterministic_and_unpacks_runnable_files() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog.sh");
        std::fs::write(&prog, "#!/bin/sh\necho '{\"nodes\": 42}'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let a = ship::pack(&prog).unwrap();
        assert_eq!(a, ship::pack(&prog).unwrap());
        // The shipped program by its bare name and by a path from the unpacked directory.
        for program in ["prog.sh", "./prog.sh"] {
            let mut j = job(&[program]);
            j.params.ship_digest = Some(ship::digest(&a));
            let bound = j.bind_inputs(&[&a]).unwrap();
            let out = bound.run_chunk(ChunkId::new(1, 0), &Control::new());
            assert_eq!(out.unwrap().nodes, 42, "{program}");
        }
    }
}
