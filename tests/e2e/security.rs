//! End-to-end: a real coordinator with token files and TLS, real `sweep` clients and a worker. The worker token
//! runs a job to its known answer; wrong, missing and under-privileged tokens get one clear line and exit code 5
//! without the token ever being printed or logged; tokens rotate (SIGHUP) while the coordinator keeps running;
//! a coordinator that requires client certificates refuses clients without one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::pki::pki as write_pki;
use crate::support::{scratch, stdout_json, sweep, Proc, SWEEP};
use sweep_testkit::process::worker_command;

const WORKER_TOKEN: &str = "e2e-worker-token-4f9c2a7d1b";
const ADMIN_TOKEN: &str = "e2e-admin-token-8e1d5b3c6a";
const NEW_ADMIN_TOKEN: &str = "e2e-admin-token-rotated-77aa";
const WRONG_TOKEN: &str = "e2e-wrong-token-0000000000";
const AUTH_EXIT: i32 = 5;
const T: Duration = Duration::from_secs(60);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// [`start_coordinator`] serving TLS only, with the test certificate: it and its https:// URL.
fn start_tls_coordinator(
    dir: &Path,
    pki: &crate::support::pki::Pki,
    extra: &[&str],
    log: &Path,
) -> (Proc, String) {
    let tls = [
        "--tls-cert",
        s(&pki.server_cert),
        "--tls-key",
        s(&pki.server_key),
    ];
    let (coord, addr) = start_coordinator(dir, &[&tls[..], extra].concat(), log);
    (coord, format!("https://{addr}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `sweep coordinator` on 127.0.0.1:0 with `extra` flags; its log (warn level) goes to `log`.
fn start_coordinator(dir: &Path, extra: &[&str], log: &Path) -> (Proc, String) {
    let child = Command::new(SWEEP)
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("store"))
        .args(["--lease-ttl-ms", "2000"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("spawn coordinator");
    let (proc, line) = crate::support::coordinator_first_line(child).expect("coordinator stdout");
    let line = line.expect("the coordinator printed its address");
    let addr = line
        .trim()
        .strip_prefix("sweep coordinator listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (proc, addr)
}

/// The one line a failed command prints, checked: exit code, a single line, no token in it.
fn refused(out: &Output, code: i32, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "`{needle}` in: {stderr}");
    for t in [WORKER_TOKEN, ADMIN_TOKEN, NEW_ADMIN_TOKEN, WRONG_TOKEN] {
        assert!(!stderr.contains(t), "a token was printed: {stderr}");
    }
    stderr
}

#[test]
fn tokens_and_tls_guard_a_real_cluster_that_still_gives_the_exact_answer() {
    let dir = scratch();
    let d = dir.path();
    let pki = write_pki(d);
    let worker_tokens = write(d, "worker.tokens", &format!("# workers\n{WORKER_TOKEN}\n"));
    let admin_tokens = write(d, "admin.tokens", &format!("{ADMIN_TOKEN}\n"));
    let worker_token = write(d, "worker.token", &format!("{WORKER_TOKEN}\n"));
    let wrong_token = write(d, "wrong.token", WRONG_TOKEN);
    let log = d.join("coordinator.log");
    let (mut coord, url) = start_tls_coordinator(
        d,
        &pki,
        &[
            "--worker-token-file",
            s(&worker_tokens),
            "--admin-token-file",
            s(&admin_tokens),
        ],
        &log,
    );
    let ca = s(&pki.ca);
    let with = |token: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("SWEEP_COORDINATOR", url.clone()),
            ("SWEEP_TLS_CA", ca.to_string()),
        ];
        env.extend(token.iter().map(|(k, v)| (*k, v.to_string())));
        env
    };
    let run = |args: &[&str], env: &[(&'static str, String)]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        sweep(args, &env, T)
    };
    let star = ["submit", "star", "--points", "6", "--json"];

    // Refusals: one line each, exit code 5, no token printed.
    let wrong = s(&wrong_token);
    refused(&run(&star, &with(&[])), AUTH_EXIT, "requires a token");
    let mut args = star.to_vec();
    args.extend(["--token-file", wrong]);
    refused(&run(&args, &with(&[])), AUTH_EXIT, "not accepted");
    refused(
        &run(&star, &with(&[("SWEEP_TOKEN", WRONG_TOKEN)])),
        AUTH_EXIT,
        "not accepted",
    );
    refused(
        &run(&star, &with(&[("SWEEP_TOKEN", WORKER_TOKEN)])),
        AUTH_EXIT,
        "admin token",
    );
    // Plain HTTP to the TLS port: unreachable, not served.
    let plain = run(
        &star,
        &[
            ("SWEEP_COORDINATOR", url.replacen("https://", "http://", 1)),
            ("SWEEP_TOKEN", ADMIN_TOKEN.to_string()),
        ],
    );
    assert!(!plain.status.success(), "plain HTTP was served");
    // A worker with a wrong token stops at once with the same code.
    let bad_worker = run(
        &["worker", "--token-file", wrong, "--threads", "1"],
        &with(&[]),
    );
    refused(&bad_worker, AUTH_EXIT, "refused");

    // The admin token submits; a worker with the worker token solves it.
    let submitted = stdout_json(&run(&star, &with(&[("SWEEP_TOKEN", ADMIN_TOKEN)])));
    let job = submitted["job"].as_u64().unwrap().to_string();
    let worker_env: Vec<(&str, String)> = with(&[]);
    let mut worker = Command::new(SWEEP);
    worker
        .args([
            "worker",
            "--threads",
            "2",
            "--name",
            "w0",
            "--token-file",
            s(&worker_token),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in &worker_env {
        worker.env(k, v);
    }
    let _worker = Proc {
        child: worker.spawn().expect("spawn worker"),
        name: "w0".into(),
    };
    // The worker token may read jobs (status and results) but not change them.
    let read = with(&[("SWEEP_TOKEN", WORKER_TOKEN)]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = stdout_json(&run(&["status", &job, "--json"], &read));
        if st["jobs"][0]["state"] == "done" {
            assert_eq!(
                st["jobs"][0]["completions"], st["jobs"][0]["chunks_total"],
                "{st}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "job not done: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let res = stdout_json(&run(&["results", &job, "--json"], &read));
    assert_eq!(res["result"]["solutions"], 960, "{res}");
    assert_eq!(res["result"]["unique"], 80, "{res}");
    refused(&run(&["cancel", &job], &read), AUTH_EXIT, "admin token");

    // Rotation: add a new admin token, SIGHUP, use it; remove the old one, SIGHUP, the old one is refused.
    std::fs::write(&admin_tokens, format!("{ADMIN_TOKEN}\n{NEW_ADMIN_TOKEN}\n")).unwrap();
    coord.signal("HUP");
    let new_admin = with(&[("SWEEP_TOKEN", NEW_ADMIN_TOKEN)]);
    let old_admin = with(&[("SWEEP_TOKEN", ADMIN_TOKEN)]);
    let wait_for = |env: &[(&'static str, String)], ok: bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = run(&["pause", &job], env);
            // A done job cannot be paused (exit 2); what matters is whether the token was accepted.
            let accepted = out.status.code() != Some(AUTH_EXIT);
            if accepted == ok {
                return;
            }
            assert!(Instant::now() < deadline, "rotation not seen: {out:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(&new_admin, true);
    std::fs::write(&admin_tokens, format!("# rotated\n{NEW_ADMIN_TOKEN}\n")).unwrap();
    coord.signal("HUP");
    wait_for(&old_admin, false);
    let again = stdout_json(&run(&["results", &job, "--json"], &new_admin));
    assert_eq!(again["result"], res["result"]);
    assert!(
        coord.child.try_wait().unwrap().is_none(),
        "SIGHUP must not stop the coordinator"
    );

    // The log names refusals and never a token.
    coord.signal("TERM");
    coord.wait_exit(Duration::from_secs(20));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("request refused"), "{text}");
    for t in [WORKER_TOKEN, ADMIN_TOKEN, NEW_ADMIN_TOKEN, WRONG_TOKEN] {
        assert!(!text.contains(t), "a token reached the log");
    }
}

#[test]
fn a_coordinator_that_requires_client_certificates_refuses_clients_without_one() {
    let dir = scratch();
    let d = dir.path();
    let pki = write_pki(d);
    let log = d.join("coordinator.log");
    let (_coord, url) = start_tls_coordinator(d, &pki, &["--tls-client-ca", s(&pki.ca)], &log);
    let base = [
        "status",
        "--json",
        "--coordinator",
        &url,
        "--tls-ca",
        s(&pki.ca),
    ];
    let without = sweep(&base, &[], T);
    assert!(
        !without.status.success(),
        "served without a client certificate"
    );
    assert_eq!(
        String::from_utf8_lossy(&without.stderr)
            .trim()
            .lines()
            .count(),
        1
    );
    let mut args = base.to_vec();
    args.extend([
        "--tls-cert",
        s(&pki.client_cert),
        "--tls-key",
        s(&pki.client_key),
    ]);
    let v = stdout_json(&sweep(&args, &[], T));
    assert!(v["jobs"].as_array().is_some(), "{v}");
}

#[test]
fn a_worker_token_rotates_mid_job_without_a_restart_or_a_lost_chunk() {
    const OLD: &str = "e2e-worker-token-old-11111111";
    const NEW: &str = "e2e-worker-token-new-22222222";
    let dir = scratch();
    let d = dir.path();
    let worker_tokens = write(d, "worker.tokens", &format!("{OLD}\n"));
    let admin_tokens = write(d, "admin.tokens", &format!("{ADMIN_TOKEN}\n"));
    let worker_token = write(d, "worker.token", &format!("{OLD}\n"));
    let log = d.join("coordinator.log");
    let (coord, addr) = start_coordinator(
        d,
        &[
            "--worker-token-file",
            s(&worker_tokens),
            "--admin-token-file",
            s(&admin_tokens),
        ],
        &log,
    );
    let url = format!("http://{addr}");
    let admin = [
        ("SWEEP_COORDINATOR", url.as_str()),
        ("SWEEP_TOKEN", ADMIN_TOKEN),
    ];
    // About 3 s of work on one thread (n = 10 took 0.2 s and could end between two polls of its status); the
    // job is paused while the token rotates so that the rotation falls in its middle however fast the machine
    // is. The worker keeps asking for leases all along.
    let submitted = stdout_json(&sweep(
        &[
            "submit", "star", "--points", "12", "--chunks", "256", "--json",
        ],
        &admin,
        T,
    ));
    let job = submitted["job"].as_u64().unwrap().to_string();
    let mut worker = Proc {
        child: worker_command(SWEEP, &url, 1, "rot")
            .args(["--token-file", s(&worker_token)])
            .spawn()
            .expect("spawn worker"),
        name: "rot".into(),
    };
    let status = || stdout_json(&sweep(&["status", &job, "--json"], &admin, T))["jobs"][0].clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while status()["chunks_done"].as_u64().unwrap_or(0) < 10 {
        assert!(Instant::now() < deadline, "the worker made no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    let paused = stdout_json(&sweep(&["pause", &job, "--json"], &admin, T));
    assert!(
        paused["chunks_done"].as_u64() < paused["chunks_total"].as_u64(),
        "{paused}"
    );
    // 1. The coordinator accepts both. 2. The worker's file gets the new token (it re-reads it within 1 s).
    // 3. The old token is removed.
    std::fs::write(&worker_tokens, format!("{OLD}\n{NEW}\n")).unwrap();
    coord.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&worker_token, format!("{NEW}\n")).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&worker_tokens, format!("# rotated\n{NEW}\n")).unwrap();
    coord.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    let mid = status();
    assert_eq!(mid["state"], "paused", "{mid}");
    // Chunks neither done nor leased: only leases granted after the rotation (with the new token) finish them.
    let n = |k: &str| mid[k].as_u64().unwrap_or(0);
    assert!(
        n("chunks_done") + n("chunks_leased") < n("chunks_total"),
        "{mid}"
    );
    stdout_json(&sweep(&["resume", &job, "--json"], &admin, T));
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let st = status();
        if st["state"] != "running" {
            break st;
        }
        assert!(Instant::now() < deadline, "job not done: {st}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["completions"], done["chunks_total"], "{done}");
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker kept running"
    );
    let res = stdout_json(&sweep(&["results", &job, "--json"], &admin, T));
    assert_eq!(res["result"]["solutions"], 9_526_320, "{res}");
    assert_eq!(res["result"]["unique"], 396_930, "{res}");
    worker.kill9();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("request refused"),
        "the worker was refused during rotation: {text}"
    );
}
