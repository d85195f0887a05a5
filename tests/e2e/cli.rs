//! Bad input gets a one-line error naming the problem and a non-zero exit, never a panic, and never harms a
//! store.

use std::time::Duration;

use crate::support::{scratch, scratch_store, stdout_json, sweep};

const T: Duration = Duration::from_secs(60);

fn fails_with(args: &[&str], code: i32, needle: &str) {
    let out = sweep(args, &[], T);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "`sweep {}`: {stderr}",
        args.join(" ")
    );
    assert!(
        stderr.contains(needle),
        "`sweep {}` should mention {needle:?}: {stderr}",
        args.join(" ")
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_options_are_named() {
    fails_with(&["run", "nope"], 2, "unknown search space `nope`");
    fails_with(&["solve", "star", "--points", "3"], 2, "points");
    fails_with(&["solve", "star", "--chunks", "0"], 2, "--chunks");
    fails_with(&["solve", "star", "--method", "magic"], 2, "magic");
    fails_with(&["solve", "star", "--threads", "zero"], 2, "--threads");
    fails_with(&["worker", "--memory", "lots"], 2, "`lots` is not a size");
    fails_with(&["worker", "--memory", "0"], 2, "give more than 0");
    fails_with(&["run", "star", "--max-attempts", "0"], 2, "at least 1");
}

/// `sweep run` and `sweep solve` add `--workdir` to an `exec` command for the person who typed it; when the
/// command itself is missing, the usage asks for the command alone, not for a flag they never have to give.
#[test]
fn exec_without_a_command_asks_for_the_command_alone() {
    for args in [
        &["run", "exec", "--"][..],
        &["run", "exec"],
        &["solve", "exec", "--chunks", "2", "--"],
        &["submit", "exec", "--"],
    ] {
        let out = sweep(args, &[], T);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let shown = format!("`sweep {}`: {stderr}", args.join(" "));
        assert_eq!(out.status.code(), Some(2), "{shown}");
        assert!(stderr.contains("Usage: exec -- <COMMAND>..."), "{shown}");
        assert!(!stderr.contains("--workdir"), "{shown}");
    }
}

/// Logs that go to a file or a pipe (`sweep run ... 2> log`) carry no terminal colour codes.
#[test]
fn logs_not_written_to_a_terminal_carry_no_colour_codes() {
    let (_dir, data) = scratch_store();
    let data = data.as_str();
    let out = sweep(
        &["run", "primes", "--data", data, "--no-progress"],
        &[("RUST_LOG", "info")],
        T,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("INFO"),
        "info logs were asked for: {stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "escape codes in the log: {stderr:?}"
    );
}

#[test]
fn unreachable_coordinator_is_reported() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    fails_with(
        &["status", "--coordinator", "http://127.0.0.1:9"],
        3,
        "cannot reach the coordinator",
    );
    fails_with(
        &["status", "--coordinator", "not a url"],
        2,
        "invalid coordinator URL",
    );
}

#[test]
fn a_foreign_data_dir_is_refused_and_left_alone() {
    let dir = scratch();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "precious").unwrap();
    let data = dir.path().to_str().unwrap();
    fails_with(&["run", "star", "--data", data], 2, "not a sweep store");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "precious");
    fails_with(
        &["run", "star", "--data", notes.to_str().unwrap()],
        2,
        "not a directory",
    );
}

#[test]
fn a_finished_job_is_answered_from_the_store() {
    let (_dir, data) = scratch_store();
    let data = data.as_str();
    let args = ["run", "star", "--points", "7", "--json", "--data", data];
    let first = stdout_json(&sweep(&args, &[], T));
    let again = sweep(&args, &[], T);
    let second = stdout_json(&again);
    assert_eq!(first["result"], second["result"]);
    assert_eq!(second["job"], 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already done"));
}

/// A reader that goes away before a printing command writes (`sweep status | head -0`) ends the command quietly
/// with the shell's code for a broken pipe (141), never with a panic.
#[test]
fn a_closed_output_pipe_ends_a_printing_command_without_a_panic() {
    let c = crate::support::Cluster::start(0, 1);
    c.submit(&["primes", "--below", "1000", "--chunks", "4"]);
    for args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["workers"],
        vec!["coordinator", "members"],
    ] {
        let mut child = std::process::Command::new(crate::support::SWEEP)
            .args(&args)
            .env("SWEEP_COORDINATOR", &c.url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sweep");
        // The reading end closed before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "sweep {args:?}: {stderr}");
        assert!(
            out.status.success() || out.status.code() == Some(141),
            "sweep {args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// The flags of a replicated coordinator's membership: each mistake named, with a usage exit, before anything
/// is asked of a group.
#[test]
fn membership_flags_are_checked() {
    let (dir, data) = scratch_store();
    let data = data.as_str();
    let base = ["coordinator", "--listen", "127.0.0.1:0", "--data", data];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--advertise", "ftp://x:1"]),
        2,
        "--advertise: `ftp://x:1` is not an http:// or https:// URL",
    );
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--advertise", "http://x"]),
        2,
        "must be http://HOST:PORT",
    );
    fails_with(
        &with(&[
            "--join",
            "http://127.0.0.1:5555",
            "--advertise",
            "http://127.0.0.1:5555",
        ]),
        2,
        "--join names no member of the running group",
    );
    fails_with(
        &with(&["--join", "http://127.0.0.1:9"]),
        3,
        "cannot reach the group to join",
    );
    assert!(
        sweep_coordinator_member_of(&dir.path().join("member")).is_none(),
        "a join that failed left no member behind"
    );
    fails_with(
        &with(&[
            "--join",
            "http://127.0.0.1:9",
            "--peers",
            "http://127.0.0.1:9",
        ]),
        2,
        "cannot be used with",
    );
    fails_with(&["coordinator", "--advertise", "http://x:1"], 2, "--join");
    fails_with(
        &with(&["--join", "http://127.0.0.1:9", "--election-ms", "10"]),
        2,
        "--election-ms",
    );
    fails_with(
        &with(&["--election-ms", "500"]),
        2,
        "--election-ms is for a member of a replicated coordinator",
    );
    fails_with(&["coordinator", "remove-member", "0"], 2, "0");
    fails_with(
        &[
            "coordinator",
            "remove-member",
            "2",
            "--coordinator",
            "http://127.0.0.1:9",
        ],
        3,
        "cannot reach the coordinator",
    );
}

/// The TLS flags of a replicated coordinator's members: URLs whose scheme does not match --tls-cert, a missing
/// CA for the other members, and missing or garbled certificate files are each named with a usage exit before
/// anything listens or is asked of a group; a join over TLS gets as far as calling the group.
#[test]
fn member_tls_flags_are_checked() {
    let dir = scratch();
    let pki = crate::support::pki::pki(dir.path());
    let data = dir.path().join("member");
    let data = data.to_str().unwrap();
    let (cert, key, ca) = (
        pki.server_cert.to_str().unwrap(),
        pki.server_key.to_str().unwrap(),
        pki.ca.to_str().unwrap(),
    );
    let garbled = dir.path().join("garbled.pem");
    std::fs::write(&garbled, "this is not a certificate\n").unwrap();
    let garbled = garbled.to_str().unwrap();
    let truncated = dir.path().join("truncated.pem");
    let ca_text = std::fs::read_to_string(&pki.ca).unwrap();
    std::fs::write(&truncated, &ca_text[..ca_text.len() / 2]).unwrap();
    let truncated = truncated.to_str().unwrap();
    let base = ["coordinator", "--listen", "127.0.0.1:0", "--data", data];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|a| a.to_string()).collect()
    };
    let check = |extra: &[&str], code: i32, needle: &str| {
        let args = with(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, code, needle);
    };
    let plain = "http://127.0.0.1:5001,http://127.0.0.1:5002,http://127.0.0.1:5003";
    let tls = "https://127.0.0.1:5001,https://127.0.0.1:5002,https://127.0.0.1:5003";
    let serve = ["--tls-cert", cert, "--tls-key", key];

    let mut args = vec!["--peers", plain, "--id", "1", "--peer-tls-ca", ca];
    args.extend(serve);
    check(
        &args,
        2,
        "--peers: `http://127.0.0.1:5001` is http://, but with --tls-cert the members serve TLS only",
    );
    check(
        &["--peers", tls, "--id", "1"],
        2,
        "--peers: `https://127.0.0.1:5001` is https://: give --tls-cert and --tls-key",
    );
    let mut args = vec!["--peers", tls, "--id", "1"];
    args.extend(serve);
    check(&args, 2, "give --peer-tls-ca FILE");
    for (flag, file, needle) in [
        (
            "--peer-tls-ca",
            "/nonexistent/ca.pem",
            "/nonexistent/ca.pem",
        ),
        ("--peer-tls-ca", garbled, "is not a PEM CA certificate"),
        ("--peer-tls-ca", truncated, "is not a PEM CA certificate"),
        ("--tls-client-ca", garbled, "is not a PEM CA certificate"),
    ] {
        let mut args = vec!["--peers", tls, "--id", "1", flag, file];
        args.extend(serve);
        check(&args, 2, &format!("{flag}: "));
        check(&args, 2, needle);
        if file != "/nonexistent/ca.pem" {
            check(&args, 2, file);
        }
    }
    // The member's own certificate is its client identity too: a garbled one is named before it serves.
    let mut args = vec!["--peers", tls, "--id", "1", "--peer-tls-ca", ca];
    args.extend(["--tls-cert", garbled, "--tls-key", key]);
    check(&args, 2, garbled);
    check(
        &["--join", "https://127.0.0.1:9"],
        2,
        "--join: `https://127.0.0.1:9` is https://: give --tls-cert",
    );
    let mut args = vec!["--join", "http://127.0.0.1:9", "--peer-tls-ca", ca];
    args.extend(serve);
    check(&args, 2, "--join: `http://127.0.0.1:9` is http://");
    let mut args = vec![
        "--join",
        "https://127.0.0.1:9",
        "--advertise",
        "http://127.0.0.1:5555",
        "--peer-tls-ca",
        ca,
    ];
    args.extend(serve);
    check(&args, 2, "--advertise: `http://127.0.0.1:5555` is http://");
    // Everything in order, the join is tried over TLS and fails only because nobody listens.
    let mut args = vec!["--join", "https://127.0.0.1:9", "--peer-tls-ca", ca];
    args.extend(serve);
    check(&args, 3, "cannot reach the group to join");
    assert!(
        sweep_coordinator_member_of(&dir.path().join("member")).is_none(),
        "a join that failed left no member behind"
    );
    // A group keeps the scheme it was founded with: a member founded at http:// URLs and restarted with
    // --tls-cert on its directory is refused, naming the URL its log holds.
    let founded = dir.path().join("founded");
    let child = std::process::Command::new(crate::support::SWEEP)
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
        .arg(&founded)
        .args(["--peers", plain, "--id", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn a member");
    let (mut member, line) = crate::support::coordinator_first_line(child).expect("its stdout");
    assert!(
        line.is_some_and(|l| l.starts_with("sweep coordinator listening on")),
        "the member did not start"
    );
    member.kill9();
    let founded = founded.to_str().unwrap();
    let mut args = vec!["coordinator", "--listen", "127.0.0.1:0", "--data", founded];
    args.extend(["--peers", tls, "--id", "1", "--peer-tls-ca", ca]);
    args.extend(serve);
    fails_with(
        &args,
        2,
        "the group's log names member 1 at `http://127.0.0.1:5001`, but this member was started with --tls-cert",
    );
    // --peer-tls-ca is a member's, and needs --tls-cert.
    let mut args = vec!["--peer-tls-ca", ca];
    args.extend(serve);
    check(
        &args,
        2,
        "--peer-tls-ca is for a member of a replicated coordinator",
    );
    check(
        &["--peers", tls, "--id", "1", "--peer-tls-ca", ca],
        2,
        "--tls-cert",
    );
}

/// Whether `data` holds a member's consensus log (its id file).
fn sweep_coordinator_member_of(data: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(data.join("consensus").join("member")).ok()
}
