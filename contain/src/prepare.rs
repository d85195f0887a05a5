//! Everything a box needs, built by the parent before the clone: the program found in the chunk's PATH, its
//! argv and environment as C strings, the rlimits, the clone flags and user namespace maps, the sandbox's mounts
//! and the program's stack. Apart from the clone and the box because this is the only part that allocates and
//! may fail in ordinary ways (a missing program, a path with a NUL byte), and it is what the box reads.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::facilities::{Facilities, PidNamespace};
use crate::{Sandbox, Spec};

/// The program's stack between clone and exec: a few calls and no allocation need far less.
const PROGRAM_STACK: usize = 64 * 1024;

/// The most paths a sandbox shows inside hidden directories.
pub(crate) const MAX_VISIBLE: usize = 16;

/// The user and group a sandboxed program runs as when the worker is root.
const NOBODY: u32 = 65534;

/// Everything the box needs, built before the clone.
pub(crate) struct Prepared {
    pub(crate) program: CString,
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    pub(crate) cwd: CString,
    pub(crate) rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    pub(crate) clone_flags: libc::c_int,
    /// uid_map and gid_map of the box's user namespace, when it has one.
    pub(crate) maps: Option<(String, String)>,
    /// Whether the box takes user 0 of its namespace (the sandbox: mapped to nobody, or to the worker's user).
    pub(crate) become_root: bool,
    /// Whether it also drops supplementary groups (possible only where the parent was root).
    pub(crate) drop_groups: bool,
    pub(crate) mounts: Option<Mounts>,
    pub(crate) lo_up: bool,
    /// The stack the program's process runs on between clone and exec.
    pub(crate) program_stack: Vec<u8>,
}

/// The sandbox's mounts, as C strings: hidden directories (a tmpfs over each), then every visible path
/// re-created inside them and bound from the real one, then the whole tree read-only but the writable paths.
pub(crate) struct Mounts {
    pub(crate) hide: Vec<CString>,
    /// Directories to create (parents first) inside hidden ones, for the paths bound back.
    pub(crate) mkdirs: Vec<CString>,
    /// Every visible path, writable first: opened by the box before hiding, then bound back from that fd.
    pub(crate) binds: Vec<CString>,
    pub(crate) writable: Vec<CString>,
    pub(crate) proc: CString,
    pub(crate) root: CString,
}

impl Prepared {
    pub(crate) fn new(spec: &Spec, f: &Facilities) -> io::Result<Prepared> {
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

pub(crate) fn cstr(s: &OsStr) -> io::Result<CString> {
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
}
