//! Running a command a test depends on (a compiler, a linter, `sweep` itself) to its end.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `cmd` to its end and returns what it printed. A command that cannot start, or that exits with a
/// failure, fails the test with both of its streams: tools differ in which one they explain themselves on.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert_success(&out, &format!("{cmd:?}"));
    out
}

/// Fails the test unless `out` is that of a command that succeeded, naming it `what` and showing what it
/// printed on both streams.
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `BIN worker --connect URL --threads THREADS --name NAME`, reading nothing and its output discarded: a worker
/// of a coordinator the caller started itself. More flags may follow.
pub fn worker_command(bin: impl AsRef<Path>, url: &str, threads: u32, name: &str) -> Command {
    let mut cmd = Command::new(bin.as_ref());
    cmd.args(["worker", "--connect", url, "--threads"])
        .arg(threads.to_string())
        .args(["--name", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// What `out` printed on its standard output, as text.
pub fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
