//! Starting a chunk's program in its box. The parent (the launcher, or the worker itself) prepares everything
//! that allocates, then clone(2)s the **box**: a process that is PID 1 of a new PID namespace where it can have
//! one (else a child subreaper in a session of its own). The parent puts the box in the chunk's cgroups and writes
//! its user namespace's maps, then lets it go on; the box applies the rlimits, makes the sandbox's mounts, forks
//! the program, passes signals on to everything in the box, and when the program ends kills whatever is left,
//! reaps it, and writes the program's wait status to the status pipe.
//!
//! Between clone and exec only async-signal-safe system calls are made: the parent may have many threads, one of
//! which may hold the allocator's lock at the moment of the clone. That is why the box forks with a raw clone
//! (glibc's fork runs handlers that take locks), takes the sandbox's user with raw set*id system calls (glibc's
//! wrappers wait for every thread of the process they think they are in), and why every string and pointer
//! array is built beforehand.

use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::facilities::{Facilities, PidNamespace};
use crate::{Sandbox, Spec};

/// The program's stack between clone and exec: a few calls and no allocation need far less.
const PROGRAM_STACK: usize = 64 * 1024;

/// The most paths a sandbox shows inside hidden directories.
const MAX_VISIBLE: usize = 16;

/// The user and group a sandboxed program runs as when the worker is root.
const NOBODY: u32 = 65534;

/// Steps of starting that can fail, as written on the exec pipe.
const STEP_RELEASE: i32 = 1;
const STEP_IDENTITY: i32 = 2;
const STEP_MOUNTS: i32 = 3;
const STEP_PROC: i32 = 4;
const STEP_RLIMIT: i32 = 5;
const STEP_FORK: i32 = 6;
const STEP_STDIO: i32 = 7;
pub(crate) const STEP_CHDIR: i32 = 8;
pub(crate) const STEP_EXEC: i32 = 9;

/// Tags of the records on the status pipe, each followed by an i32 in native byte order.
pub(crate) const TAG_PROGRAM: u8 = b'P';
pub(crate) const TAG_STATUS: u8 = b'S';

/// What the parent holds of a started box.
#[derive(Debug)]
pub(crate) struct Started {
    pub pid: i32,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub status: OwnedFd,
    /// Closes when the program has been exec'd; carries (step, errno) if it could not be.
    pub exec: OwnedFd,
    /// Whether the box is PID 1 of its own namespace (killing it kills everything in it).
    pub pid_namespace: bool,
}

/// Starts `spec` in a box whose processes join `procs` (cgroup.procs files). Returns once the box runs; the
/// program's exec is awaited with [`await_exec`].
pub(crate) fn start(spec: &Spec, procs: &[PathBuf]) -> io::Result<Started> {
    start_with_stdin(spec, procs, None)
}

/// [`start`], with `stdin` as the program's standard input instead of /dev/null (a resident box's channel).
pub(crate) fn start_with_stdin(
    spec: &Spec,
    procs: &[PathBuf],
    stdin: Option<RawFd>,
) -> io::Result<Started> {
    let f = Facilities::get();
    let p = Prepared::new(spec, f)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let (exec_r, exec_w) = pipe()?;
    let (sync_r, sync_w) = pipe()?;
    let devnull = CString::new("/dev/null").map_err(io::Error::other)?;
    let argv: Vec<*const libc::c_char> = p
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = p
        .envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let fds = BoxFds {
        sync_r: sync_r.as_raw_fd(),
        status_w: status_w.as_raw_fd(),
        exec_w: exec_w.as_raw_fd(),
        out_w: out_w.as_raw_fd(),
        err_w: err_w.as_raw_fd(),
        stdin: stdin.unwrap_or(-1),
    };
    let args = BoxArgs {
        p: &p,
        fds,
        argv: &argv,
        envp: &envp,
        devnull: &devnull,
    };
    // Born in its v2 group (clone3's CLONE_INTO_CGROUP) rather than moved there: a move takes the cgroup
    // hierarchy's write lock, which waits for an RCU grace period, per chunk.
    let v2_root = Facilities::get().v2.as_deref();
    let into = procs
        .iter()
        .find(|f| v2_root.is_some_and(|r| f.starts_with(r)))
        .and_then(|f| f.parent())
        .and_then(|dir| open_dir(dir).ok());
    let mut joined = false;
    // SAFETY: as for raw_clone below.
    let mut pid = match &into {
        Some(dir) => unsafe { clone_into_cgroup(p.clone_flags, dir.as_raw_fd()) },
        None => -1,
    };
    if pid == 0 {
        // SAFETY: in the child; see below.
        unsafe { box_main(&args) }
    }
    if pid > 0 {
        joined = true;
    } else {
        // SAFETY: a fork-like clone (no new stack: the child runs on a copy of this one). The child runs only
        // `box_main`, which makes async-signal-safe system calls on memory prepared above and never returns.
        pid = unsafe { raw_clone(p.clone_flags) };
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child, as above.
        unsafe { box_main(&args) }
    }
    drop((out_w, err_w, status_w, exec_w, sync_r, into));
    let to_join: Vec<PathBuf> = procs
        .iter()
        .filter(|f| !(joined && v2_root.is_some_and(|r| f.starts_with(r))))
        .cloned()
        .collect();
    let released = release(pid, &to_join, &p);
    if let Err(e) = released {
        // SAFETY: the box is our child and has not been released: it is still waiting on its sync pipe.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        drop(sync_w);
        reap_if_ours(pid);
        return Err(e);
    }
    // The box goes on once it reads this byte.
    write_all(sync_w.as_raw_fd(), b"g")?;
    drop(sync_w);
    Ok(Started {
        pid,
        stdout: out_r,
        stderr: err_r,
        status: status_r,
        exec: exec_r,
        pid_namespace: p.clone_flags & libc::CLONE_NEWPID != 0,
    })
}

/// Waits until the program has been exec'd (the exec pipe closes) or reads why it was not. The caller waits,
/// not the launcher, so that one chunk's exec does not hold up the next chunk's start.
pub(crate) fn await_exec(s: &mut Started, program: &Path, cwd: &Path) -> io::Result<()> {
    let mut failure = Vec::new();
    let exec = std::mem::replace(&mut s.exec, s.status.try_clone()?);
    std::fs::File::from(exec).read_to_end(&mut failure)?;
    if failure.len() >= 8 {
        let step = i32::from_ne_bytes([failure[0], failure[1], failure[2], failure[3]]);
        let errno = i32::from_ne_bytes([failure[4], failure[5], failure[6], failure[7]]);
        return Err(start_error(step, errno, program, cwd));
    }
    Ok(())
}

/// Puts the box in its cgroups and writes its user namespace's maps: things a parent does for its child.
fn release(pid: i32, procs: &[PathBuf], p: &Prepared) -> io::Result<()> {
    for file in procs {
        std::fs::write(file, pid.to_string()).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot join {}: {e}", file.display()))
        })?;
    }
    if let Some((uid_map, gid_map)) = &p.maps {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Without privilege, gid_map may be written only once setgroups(2) is denied in the namespace.
            std::fs::write(proc.join("setgroups"), "deny")?;
        }
        std::fs::write(proc.join("uid_map"), uid_map)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot write uid_map: {e}")))?;
        std::fs::write(proc.join("gid_map"), gid_map)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot write gid_map: {e}")))?;
    }
    Ok(())
}

/// The box is the worker's own child when no launcher started it; the worker then reaps it.
pub(crate) fn reap_if_ours(pid: i32) {
    let mut st = 0;
    // SAFETY: waitpid on a specific pid; ECHILD (a launcher's child, auto-reaped) is ignored.
    unsafe { libc::waitpid(pid, &mut st, 0) };
}

fn start_error(step: i32, errno: i32, program: &Path, cwd: &Path) -> io::Error {
    let os = io::Error::from_raw_os_error(errno);
    let what = match step {
        STEP_EXEC => format!("cannot run `{}`: {os}", program.display()),
        STEP_RELEASE => format!("the box was not released by its parent: {os}"),
        STEP_IDENTITY => format!("cannot take the sandbox's user: {os}"),
        STEP_MOUNTS => format!("cannot make the sandbox's file system: {os}"),
        STEP_PROC => format!("cannot mount /proc in the sandbox: {os}"),
        STEP_RLIMIT => format!("cannot set the chunk's rlimits: {os}"),
        STEP_FORK => format!("cannot fork the program: {os}"),
        STEP_STDIO => format!("cannot connect the program's stdio: {os}"),
        STEP_CHDIR => format!("cannot enter the working directory {}: {os}", cwd.display()),
        _ => format!("cannot start the program: {os}"),
    };
    io::Error::new(os.kind(), what)
}

/// Everything the box needs, built before the clone.
struct Prepared {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    clone_flags: libc::c_int,
    /// uid_map and gid_map of the box's user namespace, when it has one.
    maps: Option<(String, String)>,
    /// Whether the box takes user 0 of its namespace (the sandbox: mapped to nobody, or to the worker's user).
    become_root: bool,
    /// Whether it also drops supplementary groups (possible only where the parent was root).
    drop_groups: bool,
    mounts: Option<Mounts>,
    lo_up: bool,
    /// The stack the program's process runs on between clone and exec.
    program_stack: Vec<u8>,
}

/// The sandbox's mounts, as C strings: hidden directories (a tmpfs over each), then every visible path
/// re-created inside them and bound from the real one, then the whole tree read-only but the writable paths.
struct Mounts {
    hide: Vec<CString>,
    /// Directories to create (parents first) inside hidden ones, for the paths bound back.
    mkdirs: Vec<CString>,
    /// Every visible path, writable first: opened by the box before hiding, then bound back from that fd.
    binds: Vec<CString>,
    writable: Vec<CString>,
    proc: CString,
    root: CString,
}

impl Prepared {
    fn new(spec: &Spec, f: &Facilities) -> io::Result<Prepared> {
        let program = resolve(&spec.program, &spec.cwd, &spec.env)?;
        let mut argv = vec![cstr(spec.program.as_os_str())?];
        for a in &spec.args {
            argv.push(cstr(OsStr::new(a))?);
        }
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| cstr(OsStr::new(&format!("{k}={v}"))))
            .collect::<io::Result<Vec<_>>>()?;
        let mut rlimits = Vec::new();
        let mut limit = |res, soft: u64, hard: u64| {
            rlimits.push((
                res,
                libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                },
            ))
        };
        let l = &spec.limits;
        if let (Some(m), false) = (l.memory, f.memory_by_cgroup()) {
            limit(libc::RLIMIT_AS, m, m);
        }
        if let (Some(n), false) = (l.pids, f.pids_by_cgroup()) {
            limit(libc::RLIMIT_NPROC, n, n);
        }
        if let Some(s) = l.cpu_secs {
            // SIGXCPU at the limit, SIGKILL a little later for a program that handles SIGXCPU and goes on.
            limit(libc::RLIMIT_CPU, s, s + 5);
        }
        if let Some(d) = l.disk {
            limit(libc::RLIMIT_FSIZE, d, d);
        }
        let mut clone_flags = match f.pid_namespace {
            PidNamespace::Direct => libc::CLONE_NEWPID,
            PidNamespace::InUserNamespace => libc::CLONE_NEWPID | libc::CLONE_NEWUSER,
            PidNamespace::Unavailable => 0,
        };
        // SAFETY: getters without preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut maps = (clone_flags & libc::CLONE_NEWUSER != 0)
            .then(|| (format!("{uid} {uid} 1\n"), format!("{gid} {gid} 1\n")));
        let mut become_root = false;
        let mut mounts = None;
        let mut lo_up = false;
        if let Some(sb) = &spec.sandbox {
            if f.pid_namespace == PidNamespace::Unavailable {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the sandbox needs PID and user namespaces, which this machine does not allow",
                ));
            }
            clone_flags |= libc::CLONE_NEWPID
                | libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS;
            if !sb.network {
                clone_flags |= libc::CLONE_NEWNET;
                lo_up = true;
            }
            let (ou, og) = if f.root { (NOBODY, NOBODY) } else { (uid, gid) };
            maps = Some((format!("0 {ou} 1\n"), format!("0 {og} 1\n")));
            become_root = true;
            if f.root {
                for w in &sb.writable {
                    chown(w, NOBODY, NOBODY)?;
                }
            }
            mounts = Some(Mounts::new(sb)?);
        }
        Ok(Prepared {
            program,
            argv,
            envp,
            cwd: cstr(spec.cwd.as_os_str())?,
            rlimits,
            clone_flags,
            maps,
            become_root,
            drop_groups: f.root,
            mounts,
            lo_up,
            program_stack: vec![0u8; PROGRAM_STACK],
        })
    }
}

impl Mounts {
    fn new(sb: &Sandbox) -> io::Result<Mounts> {
        let mut binds = Vec::new();
        let mut mkdirs: Vec<CString> = Vec::new();
        let visible: Vec<&PathBuf> = sb.writable.iter().chain(&sb.readable).collect();
        if visible.len() > MAX_VISIBLE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a sandbox shows at most {MAX_VISIBLE} paths, not {}",
                    visible.len()
                ),
            ));
        }
        for path in visible {
            if !path.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{} is not a directory to show in the sandbox",
                        path.display()
                    ),
                ));
            }
            binds.push(cstr(path.as_os_str())?);
            // Inside a hidden directory the path must be made again before it can be bound.
            if let Some(h) = sb.hide.iter().find(|h| path.starts_with(h)) {
                let mut dir = h.clone();
                for part in path.strip_prefix(h).map_err(io::Error::other)?.components() {
                    dir.push(part);
                    let c = cstr(dir.as_os_str())?;
                    if !mkdirs.contains(&c) {
                        mkdirs.push(c);
                    }
                }
            }
        }
        Ok(Mounts {
            hide: sb
                .hide
                .iter()
                .map(|h| cstr(h.as_os_str()))
                .collect::<io::Result<_>>()?,
            mkdirs,
            binds,
            writable: sb
                .writable
                .iter()
                .map(|w| cstr(w.as_os_str()))
                .collect::<io::Result<_>>()?,
            proc: cstr(OsStr::new("/proc"))?,
            root: cstr(OsStr::new("/"))?,
        })
    }
}

/// Finds the program as execvp would, in the chunk's PATH, so that a missing program is an error before any
/// process exists and the box calls plain execve.
pub(crate) fn resolve(program: &Path, cwd: &Path, env: &[(String, String)]) -> io::Result<CString> {
    let runnable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.as_os_str().as_bytes().contains(&b'/') {
        // Relative to the working directory, which the box enters before execve.
        return if runnable(&cwd.join(program)) {
            cstr(program.as_os_str())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "cannot run `{}`: no executable file there (working directory {})",
                    program.display(),
                    cwd.display()
                ),
            ))
        };
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    for dir in path.split(':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let candidate = cwd.join(dir).join(program);
        if runnable(&candidate) {
            return cstr(candidate.as_os_str());
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "cannot run `{}`: not found in PATH ({path})",
            program.display()
        ),
    ))
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

fn chown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot give {} to the sandbox: {e}", path.display()),
        )
    })
}

pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn write_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: write(2) from a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// fork(2) as a raw clone with extra namespace flags: no glibc fork handlers run in the child.
unsafe fn raw_clone(flags: libc::c_int) -> i32 {
    libc::syscall(
        libc::SYS_clone,
        (flags | libc::SIGCHLD) as libc::c_ulong,
        0usize,
        0usize,
        0usize,
        0usize,
    ) as i32
}

/// clone3(2) with fork semantics into the cgroup open at `cgroup_fd`; -1 (errno set) where the kernel cannot.
unsafe fn clone_into_cgroup(flags: libc::c_int, cgroup_fd: RawFd) -> i32 {
    /// `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
    #[repr(C)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let args = CloneArgs {
        flags: flags as u64 | CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup_fd as u64,
    };
    libc::syscall(
        libc::SYS_clone3,
        &args as *const CloneArgs,
        std::mem::size_of::<CloneArgs>(),
    ) as i32
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let c = cstr(dir.as_os_str())?;
    // SAFETY: open(2) with a valid C string; the fd is owned by the returned OwnedFd.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether a child can be cloned with `flags`: it exits at once, and is reaped.
pub(crate) fn try_clone_exit(flags: libc::c_int) -> bool {
    // SAFETY: the child only calls _exit.
    let pid = unsafe { raw_clone(flags) };
    if pid == 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) }
    }
    if pid < 0 {
        return false;
    }
    let mut st = 0;
    // SAFETY: waiting for the child just made.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    true
}

#[derive(Clone, Copy)]
struct BoxFds {
    sync_r: RawFd,
    status_w: RawFd,
    exec_w: RawFd,
    out_w: RawFd,
    err_w: RawFd,
    /// The program's stdin; -1: /dev/null.
    stdin: RawFd,
}

struct BoxArgs<'a> {
    p: &'a Prepared,
    fds: BoxFds,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    devnull: &'a CString,
}

/// The program's process group (its pid outside a namespace), for passing signals on.
static PROGRAM: AtomicI32 = AtomicI32::new(0);
/// Whether the box is PID 1 of a namespace, where kill(-1) reaches exactly the box's processes.
static IN_NAMESPACE: AtomicBool = AtomicBool::new(false);

/// Set by [`KILL_ALL`]: the worker wants everything in the box dead now.
static KILL_REQUESTED: AtomicBool = AtomicBool::new(false);

/// The signal that asks a box outside a PID namespace to kill everything in it (SIGKILL to the box itself would
/// leave the orphans it was holding as subreaper). Inside a namespace SIGKILL to the box does this by itself.
pub(crate) const KILL_ALL: libc::c_int = libc::SIGALRM;

/// The signals a box passes on to every process in it (what a worker sends to stop a chunk, and what a person
/// may send one); whatever else runs in a box between its programs (a resident box's server) must survive them.
pub(crate) const PASSED_ON: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn kill_all(_sig: libc::c_int) {
    KILL_REQUESTED.store(true, Ordering::Relaxed);
    let p = PROGRAM.load(Ordering::Relaxed);
    if p > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(-p, libc::SIGKILL) };
    }
}

extern "C" fn pass_on(sig: libc::c_int) {
    // SAFETY: kill(2) is async-signal-safe; the statics are atomics.
    unsafe {
        if IN_NAMESPACE.load(Ordering::Relaxed) {
            libc::kill(-1, sig);
        } else {
            let p = PROGRAM.load(Ordering::Relaxed);
            if p > 0 {
                libc::kill(-p, sig);
            }
        }
    }
}

/// Writes (step, errno) to the exec pipe and exits.
unsafe fn fail(fd: RawFd, step: i32) -> ! {
    let errno = *libc::__errno_location();
    let mut rec = [0u8; 8];
    rec[..4].copy_from_slice(&step.to_ne_bytes());
    rec[4..].copy_from_slice(&errno.to_ne_bytes());
    libc::write(fd, rec.as_ptr().cast(), 8);
    libc::_exit(127)
}

unsafe fn record(fd: RawFd, tag: u8, value: i32) {
    let mut rec = [0u8; 5];
    rec[0] = tag;
    rec[1..].copy_from_slice(&value.to_ne_bytes());
    libc::write(fd, rec.as_ptr().cast(), 5);
}

/// The box. Async-signal-safe system calls only, on memory prepared by the parent; never returns.
unsafe fn box_main(a: &BoxArgs) -> ! {
    let f = a.fds;
    let p = a.p;
    // Keep only the fds the box needs (and stdio): another thread of the parent may have been between making a
    // pipe and closing its end when the clone happened, and a box holding that end would keep it open.
    close_except(&[f.sync_r, f.status_w, f.exec_w, f.out_w, f.err_w, f.stdin]);
    let mut b = [0u8; 1];
    if libc::read(f.sync_r, b.as_mut_ptr().cast(), 1) != 1 {
        fail(f.exec_w, STEP_RELEASE);
    }
    libc::close(f.sync_r);
    let in_ns = p.clone_flags & libc::CLONE_NEWPID != 0;
    // When its parent dies the box goes too: in a namespace SIGKILL suffices (the kernel ends the rest); as a
    // subreaper it must first kill the orphans it holds, which KILL_ALL's handler sets going.
    let on_parent_death = if in_ns { libc::SIGKILL } else { KILL_ALL };
    libc::prctl(
        libc::PR_SET_PDEATHSIG,
        on_parent_death as libc::c_ulong,
        0,
        0,
        0,
    );
    libc::setsid();
    // A launcher ignores SIGCHLD to have its boxes reaped for it; the box must wait for its own children.
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    IN_NAMESPACE.store(in_ns, Ordering::Relaxed);
    if !in_ns {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // The sandbox's visible paths are opened while the box still has the worker's user: they may lie inside a
    // directory that user alone may enter (the private parent of the shipped files), which the sandbox's user,
    // `nobody` outside the namespace when the worker is root, may not pass through.
    let mut visible = [-1 as RawFd; MAX_VISIBLE];
    if let Some(m) = &p.mounts {
        open_visible(m, &mut visible, f.exec_w);
    }
    // A root worker's box drops its supplementary groups (an unprivileged one had them denied with setgroups).
    // Raw system calls, for this thread alone: glibc's setgroups, setresgid and setresuid make every thread of
    // the process change too, and first wait for each thread they know of; the box is a copy of one thread of
    // a process whose other threads it does not have, and one that was being made at the clone is waited for
    // forever.
    if p.become_root
        && ((p.drop_groups
            && libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0)
            || libc::syscall(libc::SYS_setresgid, 0, 0, 0) != 0
            || libc::syscall(libc::SYS_setresuid, 0, 0, 0) != 0)
    {
        fail(f.exec_w, STEP_IDENTITY);
    }
    if let Some(m) = &p.mounts {
        sandbox_mounts(m, &visible, f.exec_w);
    }
    if p.lo_up {
        loopback_up();
    }
    for (res, lim) in &p.rlimits {
        if libc::setrlimit(*res, lim) != 0 {
            fail(f.exec_w, STEP_RLIMIT);
        }
    }
    let mut sa: libc::sigaction = std::mem::zeroed();
    sa.sa_sigaction = pass_on as extern "C" fn(libc::c_int) as usize;
    libc::sigemptyset(&mut sa.sa_mask);
    for sig in PASSED_ON {
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
    sa.sa_sigaction = kill_all as extern "C" fn(libc::c_int) as usize;
    libc::sigaction(KILL_ALL, &sa, std::ptr::null_mut());
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    // The program's process shares the box's memory until it execs (CLONE_VM | CLONE_VFORK, as posix_spawn
    // does): no page tables to copy, no copy-on-write faults, no address space to tear down at exec. It runs on
    // a stack of its own, prepared by the parent; the box waits, suspended, until the exec.
    let stack = p.program_stack.as_ptr() as usize + p.program_stack.len();
    let stack = (stack & !15) as *mut libc::c_void;
    let pid = libc::clone(
        program_entry,
        stack,
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        a as *const BoxArgs as *mut libc::c_void,
    );
    if pid < 0 {
        fail(f.exec_w, STEP_FORK);
    }
    PROGRAM.store(pid, Ordering::Relaxed);
    libc::close(f.exec_w);
    libc::close(f.out_w);
    libc::close(f.err_w);
    if f.stdin >= 0 {
        libc::close(f.stdin);
    }
    record(f.status_w, TAG_PROGRAM, pid);
    let mut status = 0;
    loop {
        let mut st = 0;
        let r = libc::waitpid(-1, &mut st, 0);
        if r == pid {
            status = st;
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            break;
        }
        if KILL_REQUESTED.load(Ordering::Relaxed) && !in_ns {
            kill_children();
        }
    }
    // Whatever the program left behind goes now: in a namespace kill(-1) reaches every other process in it;
    // as a subreaper, the program's group and then every orphan that was handed to the box.
    if in_ns {
        libc::kill(-1, libc::SIGKILL);
    } else {
        libc::kill(-pid, libc::SIGKILL);
    }
    loop {
        let mut st = 0;
        let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if r > 0 {
            continue;
        }
        if r < 0 && *libc::__errno_location() == libc::ECHILD {
            break;
        }
        if !in_ns {
            kill_children();
        } else {
            libc::kill(-1, libc::SIGKILL);
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        libc::nanosleep(&ts, std::ptr::null_mut());
    }
    record(f.status_w, TAG_STATUS, status);
    libc::_exit(0)
}

extern "C" fn program_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the box's BoxArgs, alive (the box is suspended) until this process execs or exits.
    unsafe { program_main(&*(arg as *const BoxArgs)) }
}

/// The program's side: its own process group, stdio, directory, then execve.
unsafe fn program_main(a: &BoxArgs) -> ! {
    let f = a.fds;
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    for sig in PASSED_ON.into_iter().chain([KILL_ALL]) {
        libc::signal(sig, libc::SIG_DFL);
    }
    libc::setpgid(0, 0);
    libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    );
    libc::close(f.status_w);
    let input = if f.stdin >= 0 {
        f.stdin
    } else {
        libc::open(a.devnull.as_ptr(), libc::O_RDONLY)
    };
    if input < 0
        || libc::dup2(input, 0) < 0
        || libc::dup2(f.out_w, 1) < 0
        || libc::dup2(f.err_w, 2) < 0
    {
        fail(f.exec_w, STEP_STDIO);
    }
    if libc::chdir(a.p.cwd.as_ptr()) != 0 {
        fail(f.exec_w, STEP_CHDIR);
    }
    libc::execve(a.p.program.as_ptr(), a.argv.as_ptr(), a.envp.as_ptr());
    fail(f.exec_w, STEP_EXEC)
}

/// Closes every fd above stderr but `keep` (where a negative fd stands for none).
unsafe fn close_except(keep: &[RawFd]) {
    let mut all = [0 as RawFd; 8];
    let n = keep.len().min(all.len());
    all[..n].copy_from_slice(&keep[..n]);
    let kept = &mut all[..n];
    kept.sort_unstable();
    let mut from: u32 = 3;
    for &fd in kept.iter().filter(|fd| **fd >= 0) {
        let fd = fd as u32;
        if fd > from {
            close_range(from, fd - 1);
        }
        from = from.max(fd + 1);
    }
    close_range(from, u32::MAX);
}

unsafe fn close_range(first: u32, last: u32) {
    if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
        // Before Linux 5.9: close one by one up to a bound that covers any fd a worker opens.
        let mut fd = first;
        while fd <= last && fd < 65536 {
            libc::close(fd as RawFd);
            fd += 1;
        }
    }
}

/// Kills every child of the box (orphans handed to it as subreaper), read from /proc.
unsafe fn kill_children() {
    // /proc/self/task/<pid>/children, built without allocating.
    let mut path = [0u8; 64];
    let prefix = b"/proc/self/task/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    n += write_decimal(&mut path[n..], libc::getpid() as u64);
    let suffix = b"/children\0";
    path[n..n + suffix.len()].copy_from_slice(suffix);
    let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    let len = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    libc::close(fd);
    if len <= 0 {
        return;
    }
    let mut pid: i32 = 0;
    for &c in &buf[..len as usize] {
        if c.is_ascii_digit() {
            pid = pid * 10 + (c - b'0') as i32;
        } else {
            if pid > 0 {
                libc::kill(pid, libc::SIGKILL);
            }
            pid = 0;
        }
    }
    if pid > 0 {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn write_decimal(out: &mut [u8], mut v: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = digits[n - 1 - i];
    }
    n
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

unsafe fn mount_setattr(path: &CString, set: u64, clr: u64) -> bool {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        path.as_ptr(),
        AT_RECURSIVE,
        &attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    ) == 0
}

/// Opens every visible path (`O_PATH`) into `fds`, in the box's mount namespace (a bind mount's source must be a
/// mount of the caller's own namespace) and before anything hides them.
unsafe fn open_visible(m: &Mounts, fds: &mut [RawFd; MAX_VISIBLE], exec_w: RawFd) {
    for (i, path) in m.binds.iter().enumerate() {
        fds[i] = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fds[i] < 0 {
            fail(exec_w, STEP_MOUNTS);
        }
    }
}

/// The sandbox's file system: nothing propagates out; hidden directories are empty tmpfs with the visible paths
/// (opened beforehand into `fds` by [`open_visible`]) bound back; everything read-only but the writable paths;
/// a /proc of the box's own PID namespace.
unsafe fn sandbox_mounts(m: &Mounts, fds: &[RawFd; MAX_VISIBLE], exec_w: RawFd) {
    let null = std::ptr::null::<libc::c_char>();
    if libc::mount(
        null,
        m.root.as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        null.cast(),
    ) != 0
    {
        fail(exec_w, STEP_MOUNTS);
    }
    let tmpfs = c"tmpfs";
    let opts = c"mode=0755,size=1m";
    for h in &m.hide {
        if libc::mount(
            tmpfs.as_ptr(),
            h.as_ptr(),
            tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        ) != 0
        {
            fail(exec_w, STEP_MOUNTS);
        }
    }
    for d in &m.mkdirs {
        if libc::mkdir(d.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
            fail(exec_w, STEP_MOUNTS);
        }
    }
    // /proc/self/fd/N names the directory opened before it was hidden.
    for (path, &fd) in m.binds.iter().zip(fds.iter()) {
        let mut src = [0u8; 40];
        let prefix = b"/proc/self/fd/";
        src[..prefix.len()].copy_from_slice(prefix);
        let n = prefix.len() + write_decimal(&mut src[prefix.len()..], fd as u64);
        src[n] = 0;
        if libc::mount(
            src.as_ptr().cast(),
            path.as_ptr(),
            null,
            libc::MS_BIND | libc::MS_REC,
            null.cast(),
        ) != 0
        {
            fail(exec_w, STEP_MOUNTS);
        }
        libc::close(fd);
    }
    if !mount_setattr(&m.root, MOUNT_ATTR_RDONLY, 0) {
        fail(exec_w, STEP_MOUNTS);
    }
    for w in &m.writable {
        if !mount_setattr(w, 0, MOUNT_ATTR_RDONLY) {
            fail(exec_w, STEP_MOUNTS);
        }
    }
    let proc = c"proc";
    if libc::mount(
        proc.as_ptr(),
        m.proc.as_ptr(),
        proc.as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        null.cast(),
    ) != 0
    {
        fail(exec_w, STEP_PROC);
    }
}

/// A new network namespace starts with its loopback down; programs that talk to themselves expect it up.
unsafe fn loopback_up() {
    let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if s < 0 {
        return;
    }
    let mut req: libc::ifreq = std::mem::zeroed();
    for (i, c) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *c as libc::c_char;
    }
    if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) == 0 {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
    }
    libc::close(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_would() {
        let env = vec![("PATH".to_string(), "/nonexistent:/bin:/usr/bin".to_string())];
        let sh = resolve(Path::new("sh"), Path::new("/"), &env).unwrap();
        assert!(sh.to_bytes().ends_with(b"/sh"), "{sh:?}");
        let err = resolve(Path::new("no-such-program-x"), Path::new("/"), &env).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("not found in PATH"), "{err}");
        let err = resolve(Path::new("./nope"), Path::new("/"), &env).unwrap_err();
        assert!(err.to_string().contains("no executable file"), "{err}");
    }

    #[test]
    fn decimals_are_written_without_allocating() {
        let mut b = [0u8; 20];
        let n = write_decimal(&mut b, 40213);
        assert_eq!(&b[..n], b"40213");
        let n = write_decimal(&mut b, 0);
        assert_eq!(&b[..n], b"0");
    }
}
