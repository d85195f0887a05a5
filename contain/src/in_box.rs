//! The box's own code, from the clone to the program's end: it waits to be released, takes the sandbox's user,
//! makes its mounts, sets the rlimits, starts the program with CLONE_VM | CLONE_VFORK, passes signals on to
//! everything in the box, and when the program ends kills whatever is left, reaps it, and writes the program's
//! wait status to the status pipe. Also what it writes on its pipes, which the parent and a resident box's
//! server read and write too.
//!
//! Between clone and exec only async-signal-safe system calls are made: the parent may have many threads, one of
//! which may hold the allocator's lock at the moment of the clone. That is why the box forks with a raw clone
//! (glibc's fork runs handlers that take locks), takes the sandbox's user with raw set*id system calls (glibc's
//! wrappers wait for every thread of the process they think they are in), and why every string and pointer
//! array is built beforehand ([`crate::prepare`]). Kept apart from the parent's side so that everything in this
//! file is held to that rule.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::prepare::{Mounts, Prepared, MAX_VISIBLE};

/// Steps of starting that can fail, as written on the exec pipe.
pub(crate) const STEP_RELEASE: i32 = 1;
pub(crate) const STEP_IDENTITY: i32 = 2;
pub(crate) const STEP_MOUNTS: i32 = 3;
pub(crate) const STEP_PROC: i32 = 4;
pub(crate) const STEP_RLIMIT: i32 = 5;
pub(crate) const STEP_FORK: i32 = 6;
pub(crate) const STEP_STDIO: i32 = 7;
pub(crate) const STEP_CHDIR: i32 = 8;
pub(crate) const STEP_EXEC: i32 = 9;

/// Tags of the records on the status pipe, each followed by an i32 in native byte order.
pub(crate) const TAG_PROGRAM: u8 = b'P';
pub(crate) const TAG_STATUS: u8 = b'S';

#[derive(Clone, Copy)]
pub(crate) struct BoxFds {
    pub(crate) sync_r: RawFd,
    pub(crate) status_w: RawFd,
    pub(crate) exec_w: RawFd,
    pub(crate) out_w: RawFd,
    pub(crate) err_w: RawFd,
    /// The program's stdin; -1: /dev/null.
    pub(crate) stdin: RawFd,
}

pub(crate) struct BoxArgs<'a> {
    pub(crate) p: &'a Prepared,
    pub(crate) fds: BoxFds,
    pub(crate) argv: &'a [*const libc::c_char],
    pub(crate) envp: &'a [*const libc::c_char],
    pub(crate) devnull: &'a CString,
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
pub(crate) unsafe fn box_main(a: &BoxArgs) -> ! {
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
    fn decimals_are_written_without_allocating() {
        let mut b = [0u8; 20];
        let n = write_decimal(&mut b, 40213);
        assert_eq!(&b[..n], b"40213");
        let n = write_decimal(&mut b, 0);
        assert_eq!(&b[..n], b"0");
    }
}
