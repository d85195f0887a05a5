//! The raw clone system calls boxes are made with: fork(2) without glibc's fork handlers, with namespace flags,
//! and the same born into a cgroup; and the probe that tries one. A module of their own because both the box's
//! parent and the search for what the machine allows ([`crate::facilities`]) use them, and the box depends on
//! what that search finds.

use std::os::fd::RawFd;

/// fork(2) as a raw clone with extra namespace flags: no glibc fork handlers run in the child.
pub(crate) unsafe fn raw_clone(flags: libc::c_int) -> i32 {
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
pub(crate) unsafe fn clone_into_cgroup(flags: libc::c_int, cgroup_fd: RawFd) -> i32 {
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
