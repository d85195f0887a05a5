//! Every process a chunk starts, kept in a box, so that nothing it starts outlives it and no chunk takes more
//! than its limits.
//!
//! A box is a process between the worker and the chunk's program ([`spawn`] has the details):
//!
//! - **lifetime**: the box is PID 1 of a new PID namespace where the machine allows one (as root, or inside a
//!   user namespace); when the program ends, or the box is killed, the kernel ends every process in it, however
//!   it detached (setsid, double fork, a daemon, ignoring SIGTERM). Where there are no namespaces the box is a
//!   child subreaper that kills the program's group and every orphan handed to it. The box and the program
//!   have parent-death signals, so a worker that dies (SIGKILL included) takes its chunks with it;
//! - **cgroups**: where the worker can make groups (cgroup v2, and the v1 memory and pids controllers on hybrid
//!   hosts), the box joins a group per chunk ([`cgroup`]), which gives the limits, the CPU time of every process
//!   of the chunk, and a kill of everything in it;
//! - **limits** ([`Limits`]): memory, processes, CPU time and the size of the private directory, each by a cgroup
//!   where there is one and by an rlimit or a check otherwise ([`Facilities::summary`] says which, per machine);
//!   a chunk over a limit ends with a [`LimitHit`] that names it;
//! - **sandbox** ([`Sandbox`]): new user, mount, PID, IPC, UTS and (unless asked) network namespaces, the root
//!   file system read-only, the temporary directory hidden but for the chunk's own paths;
//! - **the launcher** ([`launcher`]): a small process that forks the boxes, so that a large worker is not copied
//!   for every chunk.
//!
//! This crate does I/O by nature (it starts processes) but knows nothing of jobs, networks or stores: the `exec`
//! space drives it, and the `sweep` binary starts the launcher.

pub mod cgroup;
pub mod cgroupfs;
mod clone;
pub mod facilities;
mod in_box;
pub mod launcher;
mod prepare;
pub mod resident;
pub mod size;
mod spawn;

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use cgroup::ChunkGroup;
pub use facilities::{Facilities, PidNamespace};
pub use size::{bytes, parse_bytes, BytesError};

/// How often the CPU time and the private directory's size are looked at.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// What a chunk may use. `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of memory for all the chunk's processes together (a cgroup), or each one's address space (rlimit).
    pub memory: Option<u64>,
    /// Processes (and threads) at once.
    pub pids: Option<u64>,
    /// Seconds of CPU time, all processes together (with a cgroup) and each one (rlimit).
    pub cpu_secs: Option<u64>,
    /// Bytes in the private directory.
    pub disk: Option<u64>,
}

/// The sandbox: what the program may see and write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    /// Directories the program may write (its private directory).
    pub writable: Vec<PathBuf>,
    /// Directories it may read inside hidden ones (shipped files), shown read-only. The box opens them with the
    /// worker's user, so they may lie inside a directory only that user may enter; what they hold must be
    /// readable by the program's user (`nobody` outside its user namespace when the worker is root).
    pub readable: Vec<PathBuf>,
    /// Directories replaced by an empty one (the temporary directory, where other chunks' directories are).
    pub hide: Vec<PathBuf>,
    /// Whether the program keeps the machine's network (else it has only a loopback of its own).
    pub network: bool,
}

/// A program to start in a box.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// As given: a name searched in the `PATH` of `env`, or a path (relative to `cwd`).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub limits: Limits,
    /// The directory whose size `limits.disk` bounds.
    pub private_dir: Option<PathBuf>,
    pub sandbox: Option<Sandbox>,
}

/// A limit the chunk went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitHit {
    Memory(u64),
    Pids(u64),
    Cpu(u64),
    Disk(u64),
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Memory(b) => write!(f, "over its memory limit of {}", bytes(*b)),
            LimitHit::Pids(n) => write!(f, "at its limit of {n} processes (a fork was refused)"),
            LimitHit::Cpu(s) => write!(f, "over its CPU time limit of {s} s"),
            LimitHit::Disk(b) => write!(f, "over its disk limit of {}", bytes(*b)),
        }
    }
}

/// What a worker asks of every box it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Run every chunk in the sandbox ([`Sandbox`]).
    pub sandbox: bool,
}

static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();

/// Sets the process's policy, once, before the first box (a worker's `--sandbox`).
pub fn set_policy(p: Policy) {
    let _ = POLICY.set(p);
}

/// The process's policy: the default (no sandbox) unless [`set_policy`] was called.
pub fn policy() -> Policy {
    POLICY.get().copied().unwrap_or_default()
}

/// One of a program's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a boxed program ended.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    /// The limit it went over: memory (an OOM kill in the box) whatever the status, the others when it failed.
    pub limit: Option<LimitHit>,
}

/// A started program in its box. Dropping it kills everything in the box.
#[derive(Debug)]
pub struct Boxed {
    box_pid: i32,
    pidfd: Option<OwnedFd>,
    /// Started by this process (not a launcher): reap the box here.
    ours: bool,
    pid_namespace: bool,
    status: File,
    buf: Vec<u8>,
    program: Option<i32>,
    wait_status: Option<i32>,
    group: Option<ChunkGroup>,
    limits: Limits,
    private_dir: Option<PathBuf>,
    over: Option<LimitHit>,
    last_check: Instant,
    outcome: Option<Outcome>,
    /// When the box was seen to end (its streams get a moment more to close).
    ended_at: Option<Instant>,
    stdout: Option<File>,
    stderr: Option<File>,
    /// The write end of the program's stdin, when started by [`spawn_with_stdin`].
    stdin: Option<File>,
    /// Set when the program runs in its thread's resident box ([`resident`]).
    resident: Option<resident::Link>,
}

impl Facilities {
    /// One line for logs and `sweep workers`: what contains a chunk and what enforces each limit. Here, where
    /// every module is known, because it also says whether this process runs chunks in resident boxes, which
    /// are built on what the machine allows and so sit above [`facilities`].
    pub fn summary(&self) -> String {
        self.describe(resident::enabled())
    }
}

/// Becomes the launcher or a resident box's server when this process was started as one (its first argument
/// is [`launcher::ARG`] or [`resident::ARG`]), and never returns then; else returns at once. A binary that starts
/// a launcher calls this first thing in `main`: both are that binary started again.
pub fn serve_if_asked() {
    match std::env::args_os().nth(1) {
        Some(a) if a == launcher::ARG => launcher::serve(),
        Some(a) if a == resident::ARG => resident::serve(),
        _ => {}
    }
}

/// Starts `spec` in a box: the thread's resident box if the chunk has no limits or sandbox, else a box of its
/// own, through the launcher if this process has one, else forked here. The program's stdin is /dev/null.
pub fn spawn(spec: &Spec) -> io::Result<Boxed> {
    spawn_with(spec, None)
}

/// [`spawn`], with a pipe as the program's stdin: its write end is [`Boxed::take_stdin`], so the caller can
/// talk to the program while it runs (the `exec` space's split requests). The write end does not block: a
/// program that never reads makes a write fail with `WouldBlock` once the pipe is full, never hang the caller.
pub fn spawn_with_stdin(spec: &Spec) -> io::Result<Boxed> {
    let (read, write) = spawn::pipe()?;
    let write = File::from(write);
    set_nonblocking(&write, true)?;
    let mut b = spawn_with(spec, Some(read))?;
    b.stdin = Some(write);
    Ok(b)
}

/// Starts `spec` with `stdin` (the read end of a pipe) as the program's stdin, or /dev/null. This process's copy
/// of `stdin` is closed once the box holds its own, so the program sees the end of its input when the caller
/// drops the write end.
fn spawn_with(spec: &Spec, stdin: Option<OwnedFd>) -> io::Result<Boxed> {
    let stdin_fd = stdin.as_ref().map(AsRawFd::as_raw_fd);
    if let Some(started) = resident::start(spec, stdin_fd) {
        let (mut started, link, pidfd) = started?;
        if let Err(e) = spawn::await_exec(&mut started, &spec.program, &spec.cwd) {
            // The server reported the failure and waits for the next request.
            link.released();
            return Err(e);
        }
        let mut b = Boxed::from_started(started, spec, None, false, pidfd)?;
        b.resident = Some(link);
        return Ok(b);
    }
    let group = ChunkGroup::take(&spec.limits)?;
    let procs = group.as_ref().map(ChunkGroup::procs).unwrap_or_default();
    let launched = launcher::global().and_then(|l| l.start(spec, &procs, stdin_fd));
    let ours = launched.is_none();
    let started = launched
        .unwrap_or_else(|| spawn::start_with_stdin(spec, &procs, stdin_fd))
        .and_then(
            |mut s| match spawn::await_exec(&mut s, &spec.program, &spec.cwd) {
                Ok(()) => Ok(s),
                Err(e) => {
                    if ours {
                        spawn::reap_if_ours(s.pid);
                    }
                    Err(e)
                }
            },
        );
    match started {
        Ok(s) => Boxed::from_started(s, spec, group, ours, None),
        Err(e) => {
            if let Some(g) = group {
                g.release();
            }
            Err(e)
        }
    }
}

impl Boxed {
    /// A started box, its program exec'd; `pidfd` is the box's if the caller has one already.
    fn from_started(
        started: spawn::Started,
        spec: &Spec,
        group: Option<ChunkGroup>,
        ours: bool,
        pidfd: Option<OwnedFd>,
    ) -> io::Result<Boxed> {
        let pidfd = pidfd.or_else(|| {
            // SAFETY: pidfd_open on the box's pid, which cannot have been reused: the box is not reaped before its
            // status pipe closes, and a launcher's box is reaped only once it exits, which it does only after the
            // program ends.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, started.pid, 0) };
            // SAFETY: a fresh fd from pidfd_open.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
        });
        let status = File::from(started.status);
        if let Err(e) = set_nonblocking(&status, true) {
            if let Some(g) = group {
                g.release();
            }
            return Err(e);
        }
        Ok(Boxed {
            box_pid: started.pid,
            pidfd,
            ours,
            pid_namespace: started.pid_namespace,
            status,
            buf: Vec::new(),
            program: None,
            wait_status: None,
            group,
            limits: spec.limits,
            private_dir: spec.private_dir.clone(),
            over: None,
            last_check: Instant::now(),
            outcome: None,
            ended_at: None,
            stdout: Some(File::from(started.stdout)),
            stderr: Some(File::from(started.stderr)),
            stdin: None,
            resident: None,
        })
    }

    pub(crate) fn box_pid(&self) -> i32 {
        self.box_pid
    }

    /// A copy of the box's pidfd, for the chunks a resident box runs.
    pub(crate) fn pidfd_clone(&self) -> Option<OwnedFd> {
        self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok())
    }

    pub fn take_stdout(&mut self) -> Option<File> {
        self.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<File> {
        self.stderr.take()
    }

    /// The write end of the program's stdin (non-blocking), if it was started by [`spawn_with_stdin`].
    pub fn take_stdin(&mut self) -> Option<File> {
        self.stdin.take()
    }

    /// Sends `sig` to the box, which passes it on to every process in it.
    pub fn signal(&self, sig: i32) {
        if self.outcome.is_some() {
            return;
        }
        match &self.pidfd {
            // SAFETY: pidfd_send_signal on our own pidfd.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            },
            // SAFETY: kill(2) on the box's pid (see `spawn` for why it is still ours).
            None => unsafe {
                libc::kill(self.box_pid, sig);
            },
        }
    }

    /// Asks every process in the box to stop (SIGTERM, passed on by the box): the start of a graceful stop.
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Kills every process in the box now.
    pub fn kill(&mut self) {
        if self.outcome.is_some() {
            return;
        }
        if let Some(link) = &self.resident {
            // A resident box goes with its chunk (the thread starts another): what runs in it cannot be told
            // apart from the server's own children, and SIGKILL to PID 1 ends them all at once.
            link.killed();
        }
        if self.pid_namespace {
            // The box is PID 1 of its namespace: when it dies, the kernel kills everything in it.
            self.signal(libc::SIGKILL);
        } else {
            // Outside a namespace the box kills the program's group and every orphan it holds, then ends.
            self.signal(in_box::KILL_ALL);
            if let Some(p) = self.program {
                // SAFETY: the program's group, in case the box has not run yet.
                unsafe { libc::kill(-p, libc::SIGKILL) };
            }
        }
        if let Some(g) = &mut self.group {
            g.kill_all();
        }
    }

    /// Checks the limits the kernel does not enforce by itself (CPU time of the whole chunk, the directory's
    /// size); a chunk over one is killed, and its outcome names the limit. Cheap to call often.
    pub fn enforce(&mut self) {
        if self.over.is_some() || self.outcome.is_some() || self.last_check.elapsed() < CHECK_EVERY
        {
            return;
        }
        self.last_check = Instant::now();
        if let (Some(limit), Some(used)) = (
            self.limits.cpu_secs,
            self.group.as_ref().and_then(ChunkGroup::cpu_used),
        ) {
            if used > Duration::from_secs(limit) {
                self.over = Some(LimitHit::Cpu(limit));
            }
        }
        if self.over.is_none() {
            self.over = self.disk_limit_reached();
        }
        if self.over.is_some() {
            self.kill();
        }
    }

    /// The disk limit, if the private directory reached it: a file as long as the limit (the rlimit on the size
    /// of any one file stops writes there, so a file that long was most likely cut short), or the directory's
    /// files together over it.
    fn disk_limit_reached(&self) -> Option<LimitHit> {
        let (Some(limit), Some(dir)) = (self.limits.disk, &self.private_dir) else {
            return None;
        };
        disk_limit_reached(dir, limit).then_some(LimitHit::Disk(limit))
    }

    /// The outcome once the box has ended (its status pipe closed), else `None`.
    pub fn try_wait(&mut self) -> io::Result<Option<Outcome>> {
        if let Some(o) = self.outcome {
            return Ok(Some(o));
        }
        let mut chunk = [0u8; 64];
        loop {
            match self.status.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.parse();
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.parse();
        Ok(Some(self.finish()))
    }

    /// Reads whatever the program has written and the box's status, waiting up to `timeout` for any of them:
    /// output goes to `on_output` as it comes, in one thread, without a reader thread per stream. Returns the
    /// outcome once the box has ended and both streams are closed (or have stayed open a second past the end,
    /// held by nothing this box contains). Checks the limits as it goes.
    pub fn pump(
        &mut self,
        timeout: Duration,
        mut on_output: impl FnMut(Stream, &[u8]),
    ) -> io::Result<Option<Outcome>> {
        self.enforce();
        let status_open = self.outcome.is_none();
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(3);
        let mut which: Vec<Option<Stream>> = Vec::with_capacity(3);
        for (stream, file) in [
            (Stream::Stdout, &self.stdout),
            (Stream::Stderr, &self.stderr),
        ] {
            if let Some(f) = file {
                fds.push(libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                which.push(Some(stream));
            }
        }
        if status_open {
            fds.push(libc::pollfd {
                fd: self.status.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            which.push(None);
        }
        let ms = if status_open {
            timeout.min(CHECK_EVERY)
        } else {
            // Ended: the streams close at once unless something outside the box holds them.
            timeout.min(Duration::from_millis(20))
        }
        .as_millis() as libc::c_int;
        // SAFETY: poll on fds owned by self, in a vector that outlives the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        // Zeroed on every call: large enough for a pipe's usual burst, small enough that zeroing costs nothing.
        let mut buf = [0u8; 16384];
        for (pfd, stream) in fds.iter().zip(&which) {
            if pfd.revents == 0 {
                continue;
            }
            let Some(stream) = stream else { continue };
            let slot = match stream {
                Stream::Stdout => &mut self.stdout,
                Stream::Stderr => &mut self.stderr,
            };
            let Some(f) = slot else { continue };
            match f.read(&mut buf) {
                Ok(0) => *slot = None,
                Ok(n) => on_output(*stream, &buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) => {}
                Err(_) => *slot = None,
            }
        }
        if self.outcome.is_none() {
            self.try_wait()?;
            if self.outcome.is_some() {
                self.ended_at = Some(Instant::now());
            }
        }
        let streams_open = self.stdout.is_some() || self.stderr.is_some();
        let lingering = self
            .ended_at
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1));
        if lingering {
            self.stdout = None;
            self.stderr = None;
        }
        Ok(self.outcome.filter(|_| !streams_open || lingering))
    }

    /// Waits up to `timeout` for the end (woken by the status pipe, not by polling), checking limits.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<Outcome>> {
        if let Some(o) = self.try_wait()? {
            return Ok(Some(o));
        }
        self.enforce();
        let mut pfd = libc::pollfd {
            fd: self.status.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.min(CHECK_EVERY).as_millis() as libc::c_int;
        // SAFETY: poll on one fd we own; an interrupted or failed poll just leads to another look.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        self.try_wait()
    }

    /// Waits for the end, checking limits meanwhile.
    pub fn wait(&mut self) -> io::Result<Outcome> {
        loop {
            if let Some(o) = self.wait_timeout(CHECK_EVERY)? {
                return Ok(o);
            }
        }
    }

    fn parse(&mut self) {
        while self.buf.len() >= 5 {
            let v = i32::from_ne_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
            match self.buf[0] {
                in_box::TAG_PROGRAM => self.program = Some(v),
                in_box::TAG_STATUS => self.wait_status = Some(v),
                _ => {}
            }
            self.buf.drain(..5);
        }
    }

    fn finish(&mut self) -> Outcome {
        if self.ours {
            spawn::reap_if_ours(self.box_pid);
        }
        // A box that wrote no status was killed (by the worker's kill, or from outside).
        let status = ExitStatus::from_raw(self.wait_status.unwrap_or(libc::SIGKILL));
        let mut limit = self.over;
        if let (None, Some(g)) = (limit, &self.group) {
            let hits = g.hits();
            // An OOM kill anywhere in the box fails the chunk even if the program carried on: what it reports
            // may lack the killed process's part. A refused fork is the program's to handle (it saw EAGAIN), so
            // it names the limit only when the chunk failed.
            if hits.oom_kills > 0 {
                limit = self.limits.memory.map(LimitHit::Memory);
            } else if hits.forks_refused > 0 && !status.success() {
                limit = self.limits.pids.map(LimitHit::Pids);
            }
        }
        if limit.is_none() && !status.success() {
            limit = match status.signal() {
                Some(libc::SIGXCPU) => self.limits.cpu_secs.map(LimitHit::Cpu),
                Some(libc::SIGXFSZ) => self.limits.disk.map(LimitHit::Disk),
                _ => None,
            };
        }
        if limit.is_none() {
            // One more look, whatever the status: a program may end, successfully, before the next periodic
            // check, or go on after a process it started died of SIGXFSZ (or saw EFBIG) at the per-file limit,
            // and what it reports then lacks what could not be written.
            limit = self.disk_limit_reached();
        }
        if let Some(g) = self.group.take() {
            g.release();
        }
        if let Some(link) = &self.resident {
            // A status means the server emptied the namespace and waits for the next chunk; none, that it is gone.
            if self.wait_status.is_some() {
                link.released();
            } else {
                link.killed();
            }
        }
        let o = Outcome { status, limit };
        self.outcome = Some(o);
        o
    }
}

impl Drop for Boxed {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            self.kill();
            // The status pipe closes once the box is gone; wait for it so the group is empty when released.
            let _ = set_nonblocking(&self.status, false);
            let mut rest = Vec::new();
            let _ = self.status.read_to_end(&mut rest);
            self.buf.extend_from_slice(&rest);
            self.parse();
            self.finish();
        }
    }
}

/// Sets or clears O_NONBLOCK on `f`.
fn set_nonblocking(f: &File, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if flags < 0 || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether the files under `dir` reached `limit`: one of them as long as the limit (the size at which the file
/// size rlimit refuses more), or all of them together using more, counted by allocated blocks (a sparse file
/// counts what it uses). The walk stops at the first answer yes.
fn disk_limit_reached(dir: &Path, limit: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                total = total.saturating_add(m.blocks().saturating_mul(512));
                if m.len() >= limit || total > limit {
                    return true;
                }
            }
        }
    }
    false
}

/// Removes the cgroups this process keeps for reuse: call when a worker stops.
pub fn shutdown() {
    cgroup::remove_pooled();
}
