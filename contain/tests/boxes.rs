//! Real programs that misbehave, in real boxes, checked against the process table: daemons, double forks and
//! programs that ignore SIGTERM leave nothing behind, and each limit ends the chunk with a reason that names it.
//! Every scenario runs twice: boxes forked by this process, then boxes forked by a launcher (this same binary,
//! started with the launcher's argument).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sweep_contain::{launcher, Boxed, LimitHit, Limits, Spec};

/// A named check run in a scratch directory.
type Scenario = (&'static str, fn(&Path));

fn main() {
    sweep_contain::serve_if_asked();
    // `cargo test` passes filters and flags meant for the libtest harness; this runner takes a filter only.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!(
        "containment here: {}",
        sweep_contain::Facilities::get().summary()
    );
    // Most scenarios pass with a subreaper alone, so a machine without PID namespaces would otherwise report
    // them ok while the namespace's own guarantees went untested: such a run fails here, before any scenario,
    // unless it asked for no namespace.
    pid_namespace_here("this run of every scenario");
    let scenarios: &[Scenario] = &[
        ("a_daemon_dies_with_its_chunk", a_daemon_dies_with_its_chunk),
        (
            "a_double_fork_dies_with_its_chunk",
            a_double_fork_dies_with_its_chunk,
        ),
        (
            "a_killed_chunk_takes_its_sigterm_ignoring_children",
            a_killed_chunk_takes_its_sigterm_ignoring_children,
        ),
        (
            "sigterm_reaches_every_process_in_the_box",
            sigterm_reaches_every_process_in_the_box,
        ),
        (
            "memory_over_the_limit_is_named",
            memory_over_the_limit_is_named,
        ),
        (
            "a_fork_bomb_is_held_by_the_pids_limit",
            a_fork_bomb_is_held_by_the_pids_limit,
        ),
        ("a_disk_filler_is_stopped", a_disk_filler_is_stopped),
        (
            "many_small_files_over_the_disk_limit_are_stopped",
            many_small_files_over_the_disk_limit_are_stopped,
        ),
        (
            "a_chunk_that_reached_its_disk_limit_fails_though_its_program_goes_on",
            a_chunk_that_reached_its_disk_limit_fails_though_its_program_goes_on,
        ),
        (
            "cpu_time_over_the_limit_is_named",
            cpu_time_over_the_limit_is_named,
        ),
        (
            "boxes_started_and_killed_at_once_on_many_threads_leave_the_others_whole",
            boxes_started_and_killed_at_once_on_many_threads_leave_the_others_whole,
        ),
        (
            "a_missing_program_is_an_error_before_anything_runs",
            a_missing_program_is_an_error_before_anything_runs,
        ),
        (
            "the_sandbox_reads_but_does_not_write_and_hides_other_chunks",
            the_sandbox_reads_but_does_not_write_and_hides_other_chunks,
        ),
        (
            "a_directory_shown_inside_a_private_one_is_read_and_run_but_not_written",
            a_directory_shown_inside_a_private_one_is_read_and_run_but_not_written,
        ),
        (
            "sandboxed_boxes_start_while_threads_are_being_made",
            sandboxed_boxes_start_while_threads_are_being_made,
        ),
        (
            "a_resident_box_is_emptied_between_chunks_and_replaced_when_killed",
            a_resident_box_is_emptied_between_chunks_and_replaced_when_killed,
        ),
    ];
    let mut failed = 0;
    for via in ["forked here", "through a launcher"] {
        if via == "through a launcher" {
            let exe = std::env::current_exe().expect("the test binary's path");
            launcher::start_global(&exe).expect("start the launcher");
        }
        for (name, f) in scenarios {
            if filter.as_deref().is_some_and(|flt| !name.contains(flt)) {
                continue;
            }
            let dir = tempfile::tempdir().expect("scratch dir");
            let r = std::panic::catch_unwind(|| f(dir.path()));
            match r {
                Ok(()) => println!("test {name} ({via}) ... ok"),
                Err(_) => {
                    println!("test {name} ({via}) ... FAILED");
                    failed += 1;
                }
            }
        }
    }
    sweep_contain::shutdown();
    if std::env::var_os(VARIANT).is_none() {
        failed += run_variants(filter.as_deref());
    }
    if failed > 0 {
        eprintln!("{failed} scenarios failed");
        std::process::exit(101);
    }
}

/// Set in a run of this binary for a weaker containment than the machine's best.
const VARIANT: &str = "SWEEP_BOXES_VARIANT";

/// Runs the scenarios again as the machine would contain them with less: without cgroups, without namespaces,
/// and (when this runs as root) as an unprivileged user, whose PID namespace comes inside a user namespace.
fn run_variants(filter: Option<&str>) -> usize {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut failed = 0;
    let mut variants: Vec<(&str, Vec<String>)> = vec![("namespace", vec![]), ("subreaper", vec![])];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && Path::new("/usr/bin/setpriv").exists() {
        variants.push((
            "auto",
            [
                "/usr/bin/setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from)
            .to_vec(),
        ));
    }
    for (containment, wrapper) in variants {
        let mut argv: Vec<String> = wrapper.clone();
        argv.push(exe.display().to_string());
        argv.extend(filter.map(String::from));
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env(VARIANT, containment)
            .env(sweep_contain::facilities::CONTAINMENT_VAR, containment)
            // An unprivileged user needs a temporary directory of its own.
            .env("TMPDIR", "/tmp");
        let label = if wrapper.is_empty() {
            containment.to_string()
        } else {
            "unprivileged".to_string()
        };
        match status_within(cmd, Duration::from_secs(300)) {
            Ok(s) if s.success() => println!("variant {label} ... ok"),
            other => {
                println!("variant {label} ... FAILED ({other:?})");
                failed += 1;
            }
        }
    }
    failed
}

/// Runs `cmd`, killing it if it takes longer than `limit`.
fn status_within(
    mut cmd: std::process::Command,
    limit: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "still running after {limit:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spec(dir: &Path, script: &str) -> Spec {
    Spec {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), dir.display().to_string()),
        ],
        cwd: dir.to_path_buf(),
        limits: Limits::default(),
        private_dir: Some(dir.to_path_buf()),
        sandbox: None,
    }
}

/// Whether boxes here have a PID namespace. A run that asked for less (`SWEEP_CONTAINMENT=subreaper`, one of
/// the variants) has none, and its scenarios check what holds without one. On a machine that allows none (not
/// as root, not inside a user namespace), a scenario that needs one fails naming what is missing: a run that
/// could not test it must not say ok.
fn pid_namespace_here(needed_by: &str) -> bool {
    if sweep_contain::Facilities::get().pid_namespace != sweep_contain::PidNamespace::Unavailable {
        return true;
    }
    let asked =
        std::env::var(sweep_contain::facilities::CONTAINMENT_VAR).is_ok_and(|v| v == "subreaper");
    assert!(
        asked,
        "{needed_by} needs a PID namespace, which this machine allows neither to this user nor inside a user \
         namespace: run as root, or allow unprivileged user namespaces"
    );
    false
}

/// Where boxes have no PID namespace because this run asked for none, a sandboxed `spec` must be refused as
/// unsupported (checked here), and there is nothing more to run: true then.
fn sandbox_refused_here(spec: &Spec) -> bool {
    if pid_namespace_here("the sandbox") {
        return false;
    }
    let err = sweep_contain::spawn(spec).expect_err("no sandbox without namespaces");
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported, "{err}");
    true
}

fn run(spec: &Spec) -> (sweep_contain::Outcome, String, String) {
    let mut b = sweep_contain::spawn(spec).expect("start the program");
    let (out, err) = drain(&mut b);
    let o = b.wait().expect("wait for the box");
    (
        o,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

type Reader = std::thread::JoinHandle<String>;

fn drain(b: &mut Boxed) -> (Reader, Reader) {
    let read = |f: Option<std::fs::File>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut f) = f {
                let _ = f.read_to_string(&mut s);
            }
            s
        })
    };
    (read(b.take_stdout()), read(b.take_stderr()))
}

/// Processes whose command line has `marker` as an argument.
fn survivors(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if cmd.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
                found.push(pid);
            }
        }
    }
    found
}

/// The process table has no `marker` within a second (the kernel's kill of a namespace is quick but not
/// instantaneous to observe from outside).
fn assert_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = survivors(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running with {marker}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn marker(tag: u32) -> String {
    format!("{}", 7_000_000 + tag * 1000 + std::process::id() % 1000)
}

fn a_daemon_dies_with_its_chunk(dir: &Path) {
    let m = marker(1);
    let (o, _, _) = run(&spec(
        dir,
        &format!("setsid sh -c 'sleep {m}' > /dev/null 2>&1 & sleep 0.2; echo done"),
    ));
    assert!(o.status.success(), "{o:?}");
    assert_gone(&m);
}

fn a_double_fork_dies_with_its_chunk(dir: &Path) {
    let m = marker(2);
    let (o, out, _) = run(&spec(
        dir,
        &format!(
            "(sh -c 'trap \"\" TERM HUP; exec sleep {m}' > /dev/null 2>&1 &) ; sleep 0.2; echo $$"
        ),
    ));
    assert!(o.status.success(), "{o:?}");
    assert!(!out.is_empty());
    assert_gone(&m);
}

fn a_killed_chunk_takes_its_sigterm_ignoring_children(dir: &Path) {
    let m = marker(3);
    let mut b = sweep_contain::spawn(&spec(
        dir,
        &format!("trap '' TERM; setsid sh -c \"trap '' TERM; sleep {m}\" & sleep {m}"),
    ))
    .expect("start");
    let (_o, _e) = drain(&mut b);
    let deadline = Instant::now() + Duration::from_secs(5);
    while survivors(&m).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the program never started its children"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    b.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(survivors(&m).len(), 2, "SIGTERM is ignored by all of them");
    b.kill();
    let o = b.wait().expect("wait");
    assert!(!o.status.success());
    assert_gone(&m);
}

fn sigterm_reaches_every_process_in_the_box(dir: &Path) {
    if !pid_namespace_here("passing SIGTERM to every process in a box") {
        // Without a namespace, SIGTERM reaches the program's group; a setsid child is reached only by the kill.
        return;
    }
    let m = marker(4);
    let mut b = sweep_contain::spawn(&spec(
        dir,
        // The program waits for its detached child, which writes when SIGTERM reaches it.
        &format!(
            "trap true TERM; setsid sh -c 'trap \"echo got >> {}/term; exit 0\" TERM; sleep {m} & wait' & \
             c=$!; sleep {m} & wait $c; wait $c; exit 7",
            dir.display()
        ),
    ))
    .expect("start");
    let (_o, _e) = drain(&mut b);
    let deadline = Instant::now() + Duration::from_secs(5);
    while survivors(&m).len() < 2 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    b.signal(libc::SIGTERM);
    let o = b.wait().expect("wait");
    assert_eq!(o.status.signal_or_code(), Some(7), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("term")).unwrap_or_default(),
        "got\n"
    );
    assert_gone(&m);
}

trait SignalOrCode {
    fn signal_or_code(&self) -> Option<i32>;
}

impl SignalOrCode for std::process::ExitStatus {
    fn signal_or_code(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.signal().or(self.code())
    }
}

fn python() -> Option<PathBuf> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| which("python3"))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.exists())
    })
}

fn memory_over_the_limit_is_named(dir: &Path) {
    let py = python().expect("python3 (the tests' allocating program)");
    let mut s = spec(dir, "");
    s.program = py;
    // Touch every page of 400 MiB, in 16 MiB steps, against a limit of 64 MiB.
    s.args = vec![
        "-c".into(),
        "b=[]\nfor i in range(25): b.append(bytearray(16<<20))\nprint('survived')".into(),
    ];
    s.limits.memory = Some(64 << 20);
    let (o, out, err) = run(&s);
    assert!(!o.status.success(), "{o:?} {out} {err}");
    assert!(!out.contains("survived"));
    if sweep_contain::Facilities::get().memory_by_cgroup() {
        assert_eq!(o.limit, Some(LimitHit::Memory(64 << 20)), "{o:?} {err}");
        assert_eq!(
            o.limit.map(|l| l.to_string()).as_deref(),
            Some("over its memory limit of 64 MiB")
        );
    } else {
        assert!(err.contains("MemoryError"), "{err}");
    }
}

fn a_fork_bomb_is_held_by_the_pids_limit(dir: &Path) {
    let m = marker(5);
    // Each sleeper lasts about a second (GNU sleep adds its arguments), so that where nothing holds the bomb
    // (no pids controller, and root ignores RLIMIT_NPROC) it still ends.
    let mut s = spec(
        dir,
        &format!("i=0; while [ $i -lt 200 ]; do sleep 1 0.{m} & i=$((i+1)); done; wait"),
    );
    s.limits.pids = Some(16);
    let (o, _, err) = run(&s);
    let f = sweep_contain::Facilities::get();
    if f.pids_by_cgroup() {
        assert!(!o.status.success(), "{o:?} {err}");
        assert_eq!(o.limit, Some(LimitHit::Pids(16)), "{o:?} {err}");
    }
    assert_gone(&format!("0.{m}"));
}

fn a_disk_filler_is_stopped(dir: &Path) {
    let mut s = spec(dir, "exec head -c 100000000 /dev/zero > big");
    s.limits.disk = Some(10 << 20);
    let (o, _, _) = run(&s);
    assert_eq!(o.limit, Some(LimitHit::Disk(10 << 20)), "{o:?}");
    assert!(std::fs::metadata(dir.join("big")).map_or(0, |m| m.len()) <= 10 << 20);
}

fn many_small_files_over_the_disk_limit_are_stopped(dir: &Path) {
    let mut s = spec(dir, "i=0; while [ $i -lt 200 ]; do head -c 1000000 /dev/zero > f$i; i=$((i+1)); sleep 0.01; done; echo wrote");
    s.limits.disk = Some(20 << 20);
    let (o, out, _) = run(&s);
    assert!(!out.contains("wrote"), "{o:?}");
    assert_eq!(o.limit, Some(LimitHit::Disk(20 << 20)), "{o:?}");
}

/// The program carries on and exits 0 after what it started hit the limit: a writer killed by SIGXFSZ at the
/// per-file limit, or files that take the directory past it before the first look at its size.
fn a_chunk_that_reached_its_disk_limit_fails_though_its_program_goes_on(dir: &Path) {
    for script in [
        "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; echo carried on",
        "head -c 6000000 /dev/zero > a; head -c 6000000 /dev/zero > b; echo carried on",
    ] {
        for f in ["big", "a", "b"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let mut s = spec(dir, script);
        s.limits.disk = Some(10 << 20);
        let (o, out, err) = run(&s);
        assert!(out.contains("carried on"), "{script}: {o:?} {out} {err}");
        assert_eq!(
            o.limit,
            Some(LimitHit::Disk(10 << 20)),
            "{script}: {o:?} {err}"
        );
        assert_eq!(
            o.limit.map(|l| l.to_string()).as_deref(),
            Some("over its disk limit of 10 MiB")
        );
    }
}

fn cpu_time_over_the_limit_is_named(dir: &Path) {
    let mut s = spec(dir, "while :; do :; done");
    s.limits.cpu_secs = Some(1);
    let started = Instant::now();
    let (o, _, _) = run(&s);
    assert_eq!(o.limit, Some(LimitHit::Cpu(1)), "{o:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

fn a_missing_program_is_an_error_before_anything_runs(dir: &Path) {
    let mut s = spec(dir, "");
    s.program = "no-such-program-sweep".into();
    let err = sweep_contain::spawn(&s).expect_err("nothing to run");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("no-such-program-sweep"), "{err}");
    s.program = "./not-there".into();
    assert!(sweep_contain::spawn(&s).is_err());
}

fn the_sandbox_reads_but_does_not_write_and_hides_other_chunks(dir: &Path) {
    let tmp = std::env::temp_dir();
    let mine = tempfile::Builder::new()
        .prefix("sweep-sandbox-mine")
        .tempdir_in(&tmp)
        .expect("dir");
    let other = tempfile::Builder::new()
        .prefix("sweep-sandbox-other")
        .tempdir_in(&tmp)
        .expect("dir");
    std::fs::write(other.path().join("secret"), "x").expect("write");
    let mut s = spec(
        mine.path(),
        &format!(
            "echo ok > {mine}/w && echo wrote-mine; \
         touch /etc/sweep-sandbox-test 2>/dev/null && echo wrote-etc; \
         ls {other} 2>/dev/null && echo saw-other; \
         cat /etc/hostname > /dev/null && echo read-etc; \
         ls /proc | grep -c '^[0-9]' ",
            mine = mine.path().display(),
            other = other.path().display()
        ),
    );
    s.sandbox = Some(sweep_contain::Sandbox {
        writable: vec![mine.path().to_path_buf()],
        readable: vec![],
        hide: vec![tmp.clone()],
        network: false,
    });
    if sandbox_refused_here(&s) {
        return;
    }
    let _ = dir;
    let (o, out, err) = run(&s);
    assert!(o.status.success(), "{o:?} {out} {err}");
    assert!(out.contains("wrote-mine"), "{out} {err}");
    assert!(!out.contains("wrote-etc"), "{out}");
    assert!(!out.contains("saw-other"), "{out}");
    assert!(
        out.contains("read-etc") || !Path::new("/etc/hostname").exists(),
        "{out}"
    );
    // Its own /proc: the box, the shell and the few commands of the pipeline.
    let procs: u32 = out
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(999);
    assert!(procs < 10, "{out}");
    assert!(!Path::new("/etc/sweep-sandbox-test").exists());
}

/// A directory the sandbox shows (`readable`) inside one that only this user may enter, as a worker keeps
/// shipped files: the program, which runs as `nobody` outside its user namespace when this process is root,
/// runs and reads what the shown directory holds (readable by all) and can change none of it.
fn a_directory_shown_inside_a_private_one_is_read_and_run_but_not_written(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = dir;
    let tmp = std::env::temp_dir();
    let private = tempfile::Builder::new()
        .prefix("sweep-sandbox-private")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&tmp)
        .expect("dir");
    let shown = private.path().join("shown");
    std::fs::create_dir(&shown).expect("dir");
    std::fs::set_permissions(&shown, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let prog = shown.join("prog.sh");
    std::fs::write(&prog, "#!/bin/sh\necho ran\n").expect("write");
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let mine = tempfile::Builder::new()
        .prefix("sweep-sandbox-mine")
        .tempdir_in(&tmp)
        .expect("dir");
    let mut s = spec(
        mine.path(),
        &format!(
            "{prog} && cat {prog} > /dev/null && echo read; \
             (echo '# changed' >> {prog}) 2>/dev/null && echo changed; \
             (: > {shown}/planted) 2>/dev/null && echo planted; true",
            prog = prog.display(),
            shown = shown.display()
        ),
    );
    s.sandbox = Some(sweep_contain::Sandbox {
        writable: vec![mine.path().to_path_buf()],
        readable: vec![shown.clone()],
        hide: vec![tmp],
        network: false,
    });
    if sandbox_refused_here(&s) {
        return;
    }
    let (o, out, err) = run(&s);
    assert!(o.status.success(), "{o:?} {out} {err}");
    assert!(out.contains("ran\nread"), "{out} {err}");
    assert!(
        !out.contains("changed") && !out.contains("planted"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&prog).expect("read"),
        "#!/bin/sh\necho ran\n"
    );
    assert!(!shown.join("planted").exists());
}

/// The sandbox's box takes its user (setgroups, setresgid, setresuid) in a copy of a process whose other threads
/// may be anywhere, among them in the middle of making a thread: the box must take it for itself alone, since
/// glibc's wrappers first wait for every thread of the process they think they are in, and in the box that wait
/// never ends. Boxes started while another thread makes threads without a pause all run.
fn sandboxed_boxes_start_while_threads_are_being_made(dir: &Path) {
    let _ = dir;
    let tmp = std::env::temp_dir();
    let mine = tempfile::Builder::new()
        .prefix("sweep-sandbox-mine")
        .tempdir_in(&tmp)
        .expect("dir");
    let mut s = spec(mine.path(), "exit 0");
    s.sandbox = Some(sweep_contain::Sandbox {
        writable: vec![mine.path().to_path_buf()],
        readable: vec![],
        hide: vec![tmp],
        network: false,
    });
    if sandbox_refused_here(&s) {
        return;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for _ in 0..1_000_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let _ = std::thread::spawn(|| {}).join();
            }
        })
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let starter = std::thread::spawn(move || {
        for i in 0..50 {
            let o = sweep_contain::spawn(&s).and_then(|mut b| b.wait());
            if tx.send((i, o.map(|o| o.status))).is_err() {
                return;
            }
        }
    });
    let mut started = 0;
    let result = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok((_, Ok(status))) if status.success() => started += 1,
            Ok((i, other)) => break Err(format!("box {i}: {other:?}")),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                break Err(format!("box {started} has not run in 20 s"))
            }
        }
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = churn.join();
    if result.is_ok() {
        let _ = starter.join();
    }
    assert_eq!(result, Ok(()));
    assert_eq!(started, 50);
}

/// Eight threads start boxes at once; half of them kill each box as soon as it runs, as cancelled chunks are.
/// The others' programs all end by themselves, with their output: reused cgroups, the launcher's channels and
/// the kills of neighbours never reach them.
fn boxes_started_and_killed_at_once_on_many_threads_leave_the_others_whole(dir: &Path) {
    let harmed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..8 {
            let harmed = &harmed;
            s.spawn(move || {
                for _ in 0..40 {
                    // A limit, so that every box has a cgroup (reused from the pool, killed by half of them).
                    let mut s = spec(dir, "echo hi");
                    s.limits.cpu_secs = Some(60);
                    let mut b = sweep_contain::spawn(&s).expect("start");
                    if t % 2 == 1 {
                        b.kill();
                        let _ = b.wait();
                        continue;
                    }
                    let (out, _) = drain(&mut b);
                    let o = b.wait().expect("wait");
                    if !o.status.success() || out.join().unwrap_or_default() != "hi\n" {
                        harmed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(harmed.into_inner(), 0, "boxes harmed by their neighbours");
}

/// The pid a chunk's program had, as it printed it (a line of its own).
fn pid_of(out: &str) -> i32 {
    out.lines()
        .find_map(|l| l.strip_prefix("pid ")?.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out:?}"))
}

/// Chunks without limits on one thread share its resident box (where there is one): each chunk's leftovers are
/// gone before the next starts, a start error leaves the box serving, a killed chunk takes the box with it and
/// the next chunk gets a new one, and a second program while the first runs gets a box of its own. In a box of
/// its own a program is PID 2 of the namespace (the box is 1); in a resident box the server is 2, and each
/// chunk's program comes after the last one.
fn a_resident_box_is_emptied_between_chunks_and_replaced_when_killed(dir: &Path) {
    let resident = sweep_contain::resident::enabled();
    let namespaced = pid_namespace_here("numbering a box's programs from PID 2");
    let m = marker(9);
    let pid = "echo pid $$";
    let (o, out, _) = run(&spec(
        dir,
        &format!("setsid sh -c 'trap \"\" TERM; sleep {m}' > /dev/null 2>&1 & sleep 0.1; {pid}"),
    ));
    assert!(o.status.success(), "{o:?}");
    let first = pid_of(&out);
    assert_gone(&m);

    let mut nowhere = spec(dir, pid);
    nowhere.cwd = dir.join("no-such-directory");
    let err = sweep_contain::spawn(&nowhere).expect_err("no working directory");
    assert!(err.to_string().contains("working directory"), "{err}");

    let (o, out, _) = run(&spec(dir, &format!("{pid}; exit 3")));
    assert_eq!(o.status.signal_or_code(), Some(3), "{o:?}");
    let second = pid_of(&out);
    if resident {
        assert!(second > first, "the same box: {first} then {second}");
    } else if namespaced {
        assert_eq!((first, second), (2, 2));
    }

    let mut b = sweep_contain::spawn(&spec(dir, &format!("sleep {m}"))).expect("start");
    let (_o, _e) = drain(&mut b);
    // A second program on this thread while the first runs: a box of its own.
    let (o, out, _) = run(&spec(dir, pid));
    assert!(o.status.success(), "{o:?}");
    if namespaced {
        assert_eq!(pid_of(&out), 2);
    }
    b.kill();
    assert!(!b.wait().expect("wait").status.success());
    assert_gone(&m);

    let (o, out, _) = run(&spec(dir, pid));
    assert!(o.status.success(), "{o:?}");
    if resident {
        assert_eq!(
            pid_of(&out),
            3,
            "a killed resident box is replaced by a new one"
        );
    }
}
