//! Starting a chunk's program in its box, the parent's side. The parent (the launcher, or the worker itself)
//! prepares everything that allocates ([`crate::prepare`]), then clone(2)s the **box**: a process that is PID 1
//! of a new PID namespace where it can have one (else a child subreaper in a session of its own). The parent
//! puts the box in the chunk's cgroups and writes its user namespace's maps, then lets it go on; what the box
//! does from there ([`crate::in_box`]) ends with the program's wait status on the status pipe.
//!
//! Three files make a box, by who runs the code and when: `prepare` (the parent, before the clone: every
//! allocation), this one (the parent, around the clone: pipes, cgroups, maps, the release, reading why a start
//! failed) and `in_box` (the box, between the clone and the program's exec: async-signal-safe calls only).

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::clone::{clone_into_cgroup, raw_clone};
use crate::facilities::Facilities;
use crate::in_box::{
    box_main, BoxArgs, BoxFds, STEP_CHDIR, STEP_EXEC, STEP_FORK, STEP_IDENTITY, STEP_MOUNTS,
    STEP_PROC, STEP_RELEASE, STEP_RLIMIT, STEP_STDIO,
};
use crate::prepare::{cstr, Prepared};
use crate::Spec;

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
/// `strings` as C's `execve` takes a list: pointers to each, then a null. They point into `strings`, which
/// must outlive the list.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

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
    let argv = null_terminated(&p.argv);
    let envp = null_terminated(&p.envp);
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
