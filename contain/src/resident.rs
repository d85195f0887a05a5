//! Resident boxes: one box per search thread that stays between chunks, for chunks without limits or sandbox.
//!
//! A box per chunk costs a PID namespace made and torn down, and a process cloned, for every chunk: on trivial
//! chunks that is a third of the time. A resident box is a box like any other (started once, by the launcher,
//! PID 1 of its namespace) whose program is this same binary serving one request at a time on a socket: it starts
//! the chunk's program (`posix_spawn`, from a small single-threaded process), waits for it, then kills every other
//! process in the namespace and reaps them all before it reports the status. So nothing a chunk starts outlives it
//! here either: when the status reaches the worker, the namespace holds the server alone.
//!
//! A chunk that is killed (cancel, a timeout's grace run out, the worker stopping) kills the whole resident box
//! (it is PID 1 of the namespace) and the thread's next chunk starts a new one. Signals reach the program as they
//! do in any box: the box passes them on to every process in its namespace; the server ignores them by a handler,
//! which (unlike SIG_IGN) the program does not inherit.
//!
//! A resident belongs to the thread that started it, and serves one chunk at a time: a thread that starts a
//! second program while its first runs gets a box of its own for it.

use std::cell::RefCell;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::facilities::{Facilities, PidNamespace};
use crate::in_box;
use crate::launcher;
use crate::prepare;
use crate::spawn::{self, Started};
use crate::{Limits, Spec};

/// The argument that makes the `sweep` binary a resident box's server.
pub const ARG: &str = "__sweep-resident";

/// Set to `0` to give every chunk a box of its own (for measuring what residents buy).
pub const VAR: &str = "SWEEP_RESIDENT";

/// The largest request a server reads: a longer command line and environment gets a box of its own.
const MAX_REQUEST: usize = 192 * 1024;

/// What the server runs: a [`Spec`] without what residents do not serve, its program already found.
#[derive(Serialize, Deserialize)]
struct Request {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

/// What a chunk's [`crate::Boxed`] shares with its thread's resident.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// Set while a chunk runs in it; cleared when that chunk's outcome is read (the server has emptied the
    /// namespace by then).
    busy: Arc<AtomicBool>,
    /// Set when the resident was killed with a chunk, or found gone: the thread starts a new one.
    dead: Arc<AtomicBool>,
}

impl Link {
    pub(crate) fn released(&self) {
        self.busy.store(false, Ordering::Release);
    }

    pub(crate) fn killed(&self) {
        self.dead.store(true, Ordering::Release);
        self.busy.store(false, Ordering::Release);
    }
}

/// The worker's side of one resident box.
struct Resident {
    channel: OwnedFd,
    /// The box itself, as started (its pid, pidfd and status): dropped, it is killed.
    boxed: crate::Boxed,
    link: Link,
}

/// Set when a resident box could not be started: this process does without.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

thread_local! {
    static RESIDENT: RefCell<Option<Resident>> = const { RefCell::new(None) };
}

/// Whether `spec` can run in a resident box: no limits and no sandbox (each of those wants a box made for the
/// chunk), a PID namespace to empty between chunks, and a launcher whose binary serves [`ARG`].
fn eligible(spec: &Spec) -> bool {
    spec.limits == Limits::default() && spec.sandbox.is_none() && enabled()
}

/// Whether this process runs chunks without limits or sandbox in resident boxes: it has a PID namespace to
/// empty between chunks and a launcher, and [`VAR`] does not say no.
pub fn enabled() -> bool {
    !UNAVAILABLE.load(Ordering::Relaxed)
        && Facilities::get().pid_namespace != PidNamespace::Unavailable
        && launcher::global().is_some()
        && std::env::var_os(VAR).is_none_or(|v| v != "0")
}

/// Starts `spec` in this thread's resident box (starting the box first if the thread has none), with `stdin` as
/// the program's stdin if given (else /dev/null); `None` when the spec is not for a resident or the thread's
/// resident is busy, and the caller makes a box for the chunk.
pub(crate) fn start(
    spec: &Spec,
    stdin: Option<RawFd>,
) -> Option<io::Result<(Started, Link, Option<OwnedFd>)>> {
    if !eligible(spec) {
        return None;
    }
    // Found here, as a box of its own would (the same errors), and sent as found.
    let program = match prepare::resolve(&spec.program, &spec.cwd, &spec.env) {
        Ok(p) => PathBuf::from(OsString::from_vec(p.into_bytes())),
        Err(e) => return Some(Err(e)),
    };
    let req = serde_json::to_vec(&Request {
        program,
        args: spec.args.clone(),
        env: spec.env.clone(),
        cwd: spec.cwd.clone(),
    })
    .ok()
    .filter(|r| r.len() <= MAX_REQUEST)?;
    RESIDENT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot
            .as_ref()
            .is_some_and(|r| r.link.dead.load(Ordering::Acquire))
        {
            *slot = None;
        }
        if slot
            .as_ref()
            .is_some_and(|r| r.link.busy.load(Ordering::Acquire))
        {
            return None;
        }
        if slot.is_none() {
            match Resident::start() {
                Ok(r) => *slot = Some(r),
                Err(e) => {
                    // Not tried again by this process: every chunk would pay for the attempt.
                    if !UNAVAILABLE.swap(true, Ordering::Relaxed) {
                        tracing::warn!("no resident boxes ({e}): each chunk gets a box of its own");
                    }
                    return None;
                }
            }
        }
        let r = slot.as_mut()?;
        match r.run(&req, stdin) {
            Ok(started) => Some(Ok((started, r.link.clone(), r.boxed.pidfd_clone()))),
            Err(e) => {
                // A server that is gone cannot take the request: the chunk gets a box of its own, and the thread
                // a new resident next time.
                tracing::debug!("the resident box is gone ({e})");
                *slot = None;
                None
            }
        }
    })
}

impl Resident {
    fn start() -> io::Result<Resident> {
        let launcher = launcher::global()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "no launcher"))?;
        let (ours, theirs) = launcher::socketpair()?;
        let spec = Spec {
            program: launcher.exe().to_path_buf(),
            args: vec![ARG.into()],
            env: Vec::new(),
            cwd: "/".into(),
            limits: Limits::default(),
            private_dir: None,
            sandbox: None,
        };
        let mut started = launcher
            .start(&spec, &[], Some(theirs.as_raw_fd()))
            .ok_or_else(|| io::Error::other("the launcher would not take the request"))??;
        drop(theirs);
        spawn::await_exec(&mut started, &spec.program, &spec.cwd)?;
        let boxed = crate::Boxed::from_started(started, &spec, None, false, None)?;
        Ok(Resident {
            channel: ours,
            boxed,
            link: Link {
                busy: Arc::new(AtomicBool::new(false)),
                dead: Arc::new(AtomicBool::new(false)),
            },
        })
    }

    /// Sends one request with fresh pipes (and the program's stdin, if given, as a fifth fd); the server holds
    /// their write ends until the chunk's namespace is empty again.
    fn run(&mut self, req: &[u8], stdin: Option<RawFd>) -> io::Result<Started> {
        let (out_r, out_w) = spawn::pipe()?;
        let (err_r, err_w) = spawn::pipe()?;
        let (status_r, status_w) = spawn::pipe()?;
        let (exec_r, exec_w) = spawn::pipe()?;
        let mut fds = vec![
            out_w.as_raw_fd(),
            err_w.as_raw_fd(),
            status_w.as_raw_fd(),
            exec_w.as_raw_fd(),
        ];
        fds.extend(stdin);
        launcher::send(self.channel.as_raw_fd(), req, &fds)?;
        self.link.busy.store(true, Ordering::Release);
        Ok(Started {
            pid: self.boxed.box_pid(),
            stdout: out_r,
            stderr: err_r,
            status: status_r,
            exec: exec_r,
            pid_namespace: true,
        })
    }
}

extern "C" fn ignore(_sig: libc::c_int) {}

/// The server: the program of a resident box, serving requests on its stdin until the worker closes it. Never
/// returns.
pub fn serve() -> ! {
    // The box passes every signal it gets on to all processes in its namespace, this one included: a handler
    // that does nothing keeps the server alive, and unlike SIG_IGN it is not inherited by the programs.
    // SAFETY: installing a handler that touches nothing.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in in_box::PASSED_ON.into_iter().chain([in_box::KILL_ALL]) {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        // Orphans of a chunk come here rather than to the box, so the server can reap them and know when the
        // namespace is empty.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    loop {
        let (n, fds) = match launcher::recv(0, &mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if n == 0 {
            break;
        }
        let mut fds = fds.into_iter();
        let (Some(out), Some(err), Some(status), Some(exec), stdin, None) = (
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
            fds.next(),
        ) else {
            break;
        };
        let Ok(req) = serde_json::from_slice::<Request>(&buf[..n]) else {
            break;
        };
        run_one(req, out, err, File::from(status), exec, stdin);
    }
    std::process::exit(0)
}

/// Runs one chunk's program, with `stdin` as its stdin if the request carried one (else /dev/null), and empties
/// the namespace after it; the status goes out last.
fn run_one(
    req: Request,
    out: OwnedFd,
    err: OwnedFd,
    status: File,
    exec: OwnedFd,
    stdin: Option<OwnedFd>,
) {
    let exec = File::from(exec);
    let fail = |step: i32, e: io::Error, otherwise: i32| {
        let mut rec = [0u8; 8];
        rec[..4].copy_from_slice(&step.to_ne_bytes());
        rec[4..].copy_from_slice(&e.raw_os_error().unwrap_or(otherwise).to_ne_bytes());
        let _ = io::Write::write_all(&mut &exec, &rec);
    };
    // The server's own directory becomes the program's: posix_spawn then needs no chdir of its own.
    if let Err(e) = std::env::set_current_dir(&req.cwd) {
        return fail(in_box::STEP_CHDIR, e, libc::ENOENT);
    }
    let mut cmd = std::process::Command::new(&req.program);
    cmd.args(&req.args)
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin.map_or_else(std::process::Stdio::null, std::process::Stdio::from))
        .stdout(out)
        .stderr(err);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(in_box::STEP_EXEC, e, libc::ENOEXEC),
    };
    // The pipes' write ends go with the Command: the program holds the only copies now.
    drop(cmd);
    let pid = child.id() as i32;
    let _ = write_record(&status, in_box::TAG_PROGRAM, pid);
    drop(exec);
    let mut st = 0;
    loop {
        let mut s = 0;
        // SAFETY: waitpid on any child, into a local.
        let r = unsafe { libc::waitpid(-1, &mut s, 0) };
        if r == pid {
            st = s;
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    empty_namespace();
    let _ = write_record(&status, in_box::TAG_STATUS, st);
}

/// Kills every process in the namespace but this one and the box, and reaps them all. Orphans come to this
/// subreaper, so once the program is reaped, no child left means no process left.
fn empty_namespace() {
    loop {
        loop {
            let mut s = 0;
            // SAFETY: waitpid on any child, into a local.
            let r = unsafe { libc::waitpid(-1, &mut s, libc::WNOHANG) };
            if r > 0 {
                continue;
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                return;
            }
            break;
        }
        // SAFETY: kill(-1) in this namespace reaches every process but PID 1 (the box) and the caller.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn write_record(f: &File, tag: u8, value: i32) -> io::Result<()> {
    let mut rec = [0u8; 5];
    rec[0] = tag;
    rec[1..].copy_from_slice(&value.to_ne_bytes());
    io::Write::write_all(&mut &*f, &rec)
}
