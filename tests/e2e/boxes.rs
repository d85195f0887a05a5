//! Programs in a box, end to end: real `sweep` processes run programs that misbehave, and the process table and
//! the failure reasons are checked. Nothing a chunk starts outlives it (daemons, double forks, SIGTERM ignored,
//! a worker SIGKILLed); limits end chunks with reasons that name them; the sandbox keeps a program's hands off
//! the machine, and lets it run the files shipped with its job, on a worker run as root and on one run as
//! `nobody` (needs root, fails without it).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    processes_with, scratch, stdout_json, wait_for, wait_for_no_process, wait_for_processes,
    Cluster, SWEEP,
};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn run_exec(dir: &Path, opts: &[&str], script: &str) -> (Option<i32>, Value, String) {
    let data = dir.join(format!("data-{}", Instant::now().elapsed().as_nanos()));
    let data = data.display().to_string();
    let mut args = vec!["run", "exec", "--data", &data, "--json", "--no-progress"];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let mut cmd = Command::new(SWEEP);
    cmd.args(&args).current_dir(dir);
    let out = crate::support::run_bounded(cmd, LONG);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn token(tag: u32) -> String {
    format!(
        "{}",
        880_000_000 + tag * 100_000 + std::process::id() % 100_000
    )
}

/// A script that leaves a daemon behind (`setsid`, output detached, deaf to SIGTERM) sleeping `{t}` so that
/// [`processes_with`] finds it, then runs `then`.
fn with_daemon(t: &str, then: &str) -> String {
    format!("setsid sh -c 'trap \"\" TERM; exec sleep {t}' > /dev/null 2>&1 < /dev/null & {then}")
}

/// Polls job `job` while `pending` holds for its status (bounded by `LONG`). Worker `w` (its log in `log`)
/// is the job's only one: if it exits, as one that cannot make its sandbox does at start, this fails at once
/// with its log rather than wait for nothing.
fn wait_while_worker_lives(
    c: &mut Cluster,
    w: usize,
    log: &Path,
    job: u64,
    what: &str,
    pending: impl Fn(&Value) -> bool,
) {
    let started = Instant::now();
    loop {
        let s = c.status(job);
        if !pending(&s) {
            return;
        }
        if let Ok(Some(exit)) = c.workers[w].child.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what}: the worker exited ({exit}):\n{log}");
        }
        assert!(started.elapsed() < LONG, "{what}: not done: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn daemons_and_double_forks_end_with_their_chunk() {
    let dir = scratch();
    let (t1, t2) = (token(1), token(2));
    // One chunk daemonises a sleeper (setsid, output detached); the other double-forks one that ignores SIGTERM.
    let script = format!(
        r#"if [ "$SWEEP_CHUNK" = 0 ]; then setsid sh -c 'exec sleep {t1}' > /dev/null 2>&1 < /dev/null &
else (trap '' TERM HUP; sleep {t2} > /dev/null 2>&1 &) ; fi
sleep 0.3; echo '{{"nodes": 1}}'"#
    );
    let (code, v, err) = run_exec(dir.path(), &["--chunks", "2"], &script);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["state"], "done", "{v}");
    wait_for(
        "the daemons to end with their chunks",
        Duration::from_secs(5),
        || processes_with(&t1).is_empty() && processes_with(&t2).is_empty(),
    );
}

#[test]
fn a_killed_worker_takes_its_chunks_daemons_along() {
    let mut c = Cluster::start(0, 1);
    c.add_worker_with(&["--allow-exec"]);
    let t = token(3);
    let script = with_daemon(&t, &format!("sleep {t}"));
    let job = c.submit(&["exec", "--chunks", "1", "--", "sh", "-c", &script]);
    wait_for_processes("the program and its daemon", LONG, &t, 2);
    c.workers[0].kill9();
    wait_for_no_process(
        "everything the chunk started to die with its worker",
        Duration::from_secs(10),
        &t,
    );
    c.sweep_ok(&["cancel", &job.to_string()]);
}

/// The error of a chunk poisoned by its only attempt.
fn poisoned_error(v: &Value) -> String {
    v["poisoned_chunks"][0]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_chunk_over_a_limit_fails_with_a_reason_that_names_it() {
    let dir = scratch();
    // Memory: 400 MiB touched against 64 MiB.
    let (code, v, err) = run_exec(
        dir.path(),
        &["--chunks", "1", "--chunk-memory", "64M"],
        r#"python3 -c "b=[bytearray(16<<20) for i in range(25)]"; echo '{"nodes": 1}'"#,
    );
    assert_eq!(code, Some(4), "{v} {err}");
    let e = poisoned_error(&v);
    if sweep_contain::Facilities::get().memory_by_cgroup() {
        assert!(e.contains("over its memory limit of 64 MiB"), "{e}");
    }
    // Processes: a fork bomb held at 20.
    let t = token(4);
    let (code, v, err) = run_exec(
        dir.path(),
        &["--chunks", "1", "--chunk-pids", "20"],
        &format!("i=0; while [ $i -lt 500 ]; do sleep {t} & i=$((i+1)); done; wait"),
    );
    assert_eq!(code, Some(4), "{v} {err}");
    if sweep_contain::Facilities::get().pids_by_cgroup() {
        assert!(
            poisoned_error(&v).contains("at its limit of 20 processes"),
            "{v}"
        );
    }
    wait_for_no_process("the fork bomb's sleepers to go", Duration::from_secs(5), &t);
    // Disk: one file past 8 MiB (anywhere), then many small ones past it in the private directory ($TMPDIR;
    // `sweep run` starts programs in the current directory, which the limit does not measure), then a file
    // there stopped at the limit by a writer that dies of SIGXFSZ while the program goes on and prints its
    // final line.
    for filler in [
        "exec head -c 100000000 /dev/zero > big",
        "cd \"$TMPDIR\"; i=0; while [ $i -lt 100 ]; do head -c 1000000 /dev/zero > f$i; i=$((i+1)); sleep 0.02; done; echo '{\"nodes\": 1}'",
        "cd \"$TMPDIR\"; dd if=/dev/zero of=big bs=1M count=200 2>/dev/null; echo '{\"nodes\": 1}'",
    ] {
        let (code, v, err) = run_exec(dir.path(), &["--chunks", "1", "--chunk-disk", "8M"], filler);
        assert_eq!(code, Some(4), "{v} {err}");
        assert!(poisoned_error(&v).contains("over its disk limit of 8 MiB"), "{filler}: {v}");
    }
    // CPU time: a busy loop against one second.
    let (code, v, err) = run_exec(
        dir.path(),
        &["--chunks", "1", "--chunk-cpu", "1"],
        "while :; do :; done",
    );
    assert_eq!(code, Some(4), "{v} {err}");
    assert!(
        poisoned_error(&v).contains("over its CPU time limit of 1 s"),
        "{v}"
    );
    // Nonsense sizes are refused before anything runs.
    let (code, _, err) = run_exec(
        dir.path(),
        &["--chunks", "1", "--chunk-memory", "lots"],
        "true",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`lots` is not a size"), "{err}");
}

#[test]
fn a_sandboxed_chunk_reads_the_machine_but_writes_only_its_own_directory() {
    if sweep_contain::Facilities::get().pid_namespace == sweep_contain::PidNamespace::Unavailable {
        panic!("this machine allows no namespaces: the sandbox cannot be tested here");
    }
    let outside = scratch();
    let target = outside.path().join("written-from-a-chunk");
    // Counters say what the program could do: write its own directory, write outside it, see other processes.
    let script = format!(
        r#"w=0; o=0; touch "$HOME/mine" && w=1; touch {target} 2>/dev/null && o=1
p=$(ls /proc | grep -c '^[0-9]')
echo "{{\"nodes\": 1, \"counters\": {{\"own\": $w, \"outside\": $o, \"many_processes\": $([ $p -gt 20 ] && echo 1 || echo 0)}}}}""#,
        target = target.display()
    );
    for (flags, outside_expected) in [
        (&["--allow-exec", "--sandbox"][..], "0"),
        (&["--allow-exec"][..], "1"),
    ] {
        let _ = std::fs::remove_file(&target);
        let mut c = Cluster::start(0, 1);
        let w = c.add_worker_with(flags);
        let job = c.submit(&["exec", "--chunks", "1", "--", "sh", "-c", &script]);
        let log = c.log_path("w0");
        wait_while_worker_lives(&mut c, w, &log, job, &format!("{flags:?}"), |s| {
            s["chunks_done"] == 0
        });
        let res = c.wait_results(job, LONG);
        assert_eq!(res["state"], "done", "{flags:?}: {res}");
        let counters = &res["result"]["counters"];
        let get = |k: &str| {
            counters[k]
                .as_str()
                .map_or_else(|| counters[k].to_string(), str::to_string)
        };
        assert_eq!(get("own"), "1", "{flags:?}: {res}");
        assert_eq!(get("outside"), outside_expected, "{flags:?}: {res}");
        if flags.contains(&"--sandbox") {
            assert!(!target.exists());
            assert_eq!(get("many_processes"), "0", "its own /proc: {res}");
        }
    }
}

/// A shipped program: its chunk's count, and whether it could change its shipped copy or add a file beside it.
const SHIPPED_PROGRAM: &str = r#"#!/bin/sh
changed=0
if (echo '# changed' >> "$SWEEP_SHIP/prog.sh") 2>/dev/null; then changed=1; fi
if (: > "$SWEEP_SHIP/planted") 2>/dev/null; then changed=1; fi
echo "{\"nodes\": 1, \"counters\": {\"chunk_sum\": $1, \"changed\": $changed}}"
"#;

/// `--ship` and `--sandbox` together: the shipped program starts in the sandbox, run by name (found on PATH)
/// and by a shell that reads it from the working directory, on a worker run as root (whose programs run as
/// `nobody` outside their user namespace) and on one run as an unprivileged user; neither can change the
/// worker's copy of the shipped files.
#[test]
fn a_shipped_program_runs_in_the_sandbox_of_a_root_and_of_an_unprivileged_worker() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test runs one worker as root and one as nobody (with setpriv): run it as root"
    );
    let setpriv = [
        "/usr/bin/setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ];
    let runs = Command::new(setpriv[0])
        .args(&setpriv[1..])
        .args([SWEEP, "--version"])
        .output();
    assert!(
        runs.as_ref().is_ok_and(|o| o.status.success()),
        "nobody cannot run {SWEEP} through {} (util-linux's setpriv, and a build directory every user may \
         read, are needed): {runs:?}",
        setpriv[0]
    );
    let src = scratch();
    let prog = src.path().join("prog.sh");
    std::fs::write(&prog, SHIPPED_PROGRAM).expect("write the program");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755))
            .expect("make it executable");
    }
    let ship = prog.display().to_string();
    for (label, wrapper) in [("root", &[][..]), ("unprivileged", &setpriv[..])] {
        let mut c = Cluster::start(0, 1);
        let w = c.add_worker_through(wrapper, &["--allow-exec", "--sandbox"]);
        let log = c.log_path(&c.workers[w].name);
        for command in [&["prog.sh", "{chunk}"][..], &["sh", "prog.sh", "{chunk}"]] {
            let mut args = vec![
                "exec",
                "--chunks",
                "3",
                "--max-attempts",
                "1",
                "--ship",
                &ship,
                "--",
            ];
            args.extend_from_slice(command);
            let job = c.submit(&args);
            let what = format!("{label} {command:?}");
            wait_while_worker_lives(&mut c, w, &log, job, &what, |s| s["state"] == "running");
            let res = c.results(job);
            assert_eq!(res["state"], "done", "{label} {command:?}: {res}");
            let counters = &res["result"]["counters"];
            assert_eq!(counters["chunk_sum"], 3, "{label} {command:?}: {res}");
            assert_eq!(
                counters["changed"], 0,
                "{label} {command:?}: the program changed its shipped files: {res}"
            );
        }
    }
}

#[test]
fn a_job_s_memory_per_chunk_goes_only_to_workers_that_have_it_and_status_says_why_it_waits() {
    let mut c = Cluster::start(0, 1);
    c.add_worker_with(&["--allow-exec", "--memory", "1G"]);
    let job = c.submit(&[
        "exec",
        "--chunks",
        "2",
        "--chunk-memory",
        "2G",
        "--",
        "sh",
        "-c",
        r#"echo '{"nodes": 1}'"#,
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let s = c.status(job);
    assert_eq!(s["chunks_done"], 0, "{s}");
    let waiting = s["waiting"].as_str().unwrap_or_default();
    assert!(
        waiting.contains("needs 2.0 GiB per chunk") && waiting.contains("1.0 GiB"),
        "{s}"
    );
    // `sweep workers` says what contains each worker's programs.
    let workers = stdout_json(&c.sweep(&["workers", "--json"]));
    let containment = workers["workers"][0]["containment"]
        .as_str()
        .unwrap_or_default();
    // The same facilities as this test process finds, and (where there are PID namespaces) the resident boxes
    // that its launcher gives a worker.
    let here = sweep_contain::Facilities::get();
    let lifetime = here.summary();
    let lifetime = lifetime.split(';').next().unwrap_or_default();
    assert!(containment.starts_with(lifetime), "{workers}");
    assert_eq!(
        containment.contains("resident PID namespace per thread"),
        here.pid_namespace != sweep_contain::PidNamespace::Unavailable,
        "{workers}"
    );
    c.add_worker_with(&["--allow-exec", "--memory", "4G"]);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
}

/// Counts to 200 in steps of 20 ms, from `SWEEP_RESUME`; on SIGTERM prints where it is as a checkpoint and
/// exits; starts a daemon that must not survive it. Logs each start, so the test sees the resume.
const CHECKPOINT_ON_SIGTERM: &str = r#"
import json, os, signal, subprocess, sys, time
log, token = sys.argv[1], sys.argv[2]
start = int(os.environ.get("SWEEP_RESUME", "0"))
with open(log, "a") as f:
    f.write("%d\n" % start)
subprocess.Popen(["setsid", "sleep", token], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
i = start
def stop(signum, frame):
    print(json.dumps({"checkpoint": str(i)}), flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
while i < 200:
    time.sleep(0.02)
    i += 1
print(json.dumps({"nodes": 200, "counters": {"steps": 200}}))
"#;

#[test]
fn a_program_s_last_checkpoint_on_sigterm_is_kept_and_resumed_and_its_daemon_ends() {
    let mut c = Cluster::start(0, 1);
    let prog = c.dir.path().join("steps.py");
    std::fs::write(&prog, CHECKPOINT_ON_SIGTERM).expect("write the program");
    let log = c.dir.path().join("starts.log");
    let t = token(6);
    c.add_worker_with(&["--allow-exec"]);
    let (prog_s, log_s) = (prog.display().to_string(), log.display().to_string());
    let job = c.submit(&[
        "exec", "--chunks", "1", "--", "python3", &prog_s, &log_s, &t,
    ]);
    wait_for_processes("the program and its daemon", LONG, &t, 1);
    std::thread::sleep(Duration::from_millis(600));
    // A preemption notice: SIGTERM to the worker, which passes it on and hands the chunk back.
    c.workers[0].terminate();
    assert!(
        processes_with(&t).is_empty(),
        "the daemon ended with its chunk"
    );
    c.add_worker_with(&["--allow-exec"]);
    let res = c.wait_results(job, LONG);
    assert_eq!(res["state"], "done", "{res}");
    let starts: Vec<u64> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(
        starts[1] > 0,
        "the second attempt resumed from the last checkpoint: {starts:?}"
    );
    wait_for_no_process("the second daemon to end", Duration::from_secs(5), &t);
}

#[test]
fn paused_and_timed_out_chunks_leave_nothing_behind() {
    let mut c = Cluster::start(0, 2);
    c.add_worker_with(&["--allow-exec"]);
    let t = token(7);
    // A pause lets running chunks finish and leases no more: their daemons end with them.
    let script = with_daemon(&t, r#"sleep 1; echo '{"nodes": 1}'"#);
    let job = c.submit(&["exec", "--chunks", "6", "--", "sh", "-c", &script]);
    wait_for_processes("two chunks' daemons", LONG, &t, 2);
    c.sweep_ok(&["pause", &job.to_string()]);
    wait_for(
        "the running chunks to end, daemons and all",
        Duration::from_secs(20),
        || processes_with(&t).is_empty() && c.status(job)["chunks_leased"] == 0,
    );
    let s = c.status(job);
    assert!(
        s["chunks_done"].as_u64().unwrap_or(0) < 6,
        "the pause held the rest back: {s}"
    );
    c.sweep_ok(&["resume", &job.to_string()]);
    assert_eq!(c.wait_results(job, LONG)["state"], "done");
    wait_for_no_process("the last daemons to end", Duration::from_secs(5), &t);

    // A chunk over its --chunk-timeout is stopped with everything it started.
    let t = token(8);
    let script = with_daemon(&t, &format!("sleep {t}"));
    let job = c.submit(&[
        "exec",
        "--chunks",
        "1",
        "--chunk-timeout",
        "1",
        "--grace-secs",
        "1",
        "--max-attempts",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let s = c.wait_until(job, LONG, |s| s["state"] != "running");
    assert_eq!(s["state"], "done-with-poisoned-chunks", "{s}");
    wait_for_no_process(
        "the timed-out chunk's processes to end",
        Duration::from_secs(10),
        &t,
    );
}
