//! What this machine lets a worker do to contain a chunk, found once by trying it: a PID namespace (as root, or
//! inside a new user namespace), a cgroup v2 directory the worker may make groups in, the v1 memory and pids
//! controllers of a hybrid host, and the namespaces and mount calls of the sandbox.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that limits containment to less than the machine allows: `namespace` (no cgroups)
/// or `subreaper` (neither cgroups nor namespaces). Unset or `auto`: everything that works.
pub const CONTAINMENT_VAR: &str = "SWEEP_CONTAINMENT";

/// How a chunk's processes get a PID namespace of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidNamespace {
    /// The worker may create one directly (it has CAP_SYS_ADMIN).
    Direct,
    /// Inside a new user namespace that maps the worker's own user (unprivileged user namespaces).
    InUserNamespace,
    /// Neither works here: the box is a child subreaper instead.
    Unavailable,
}

/// The containment a worker has, found by trying each piece once.
#[derive(Clone, Debug)]
pub struct Facilities {
    pub pid_namespace: PidNamespace,
    /// The cgroup v2 directory in which a group per chunk is made (for killing, CPU time, and memory or pids
    /// limits where those controllers are enabled).
    pub v2: Option<PathBuf>,
    pub v2_memory: bool,
    pub v2_pids: bool,
    /// The v1 memory controller's directory of this process, where a group per chunk can be made.
    pub v1_memory: Option<PathBuf>,
    /// The v1 pids controller's directory of this process.
    pub v1_pids: Option<PathBuf>,
    pub root: bool,
}

impl Facilities {
    /// Found once per process, on first use.
    pub fn get() -> &'static Facilities {
        static FOUND: OnceLock<Facilities> = OnceLock::new();
        FOUND.get_or_init(Facilities::probe)
    }

    fn probe() -> Facilities {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        // An operator (or a test) may ask for less than the machine allows: `namespace` leaves cgroups alone,
        // `subreaper` uses neither cgroups nor namespaces.
        let asked = std::env::var(CONTAINMENT_VAR).unwrap_or_default();
        if asked == "subreaper" || asked == "namespace" {
            return Facilities {
                pid_namespace: if asked == "subreaper" {
                    PidNamespace::Unavailable
                } else {
                    probe_pid_namespace(root)
                },
                v2: None,
                v2_memory: false,
                v2_pids: false,
                v1_memory: None,
                v1_pids: None,
                root,
            };
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let v2 = v2_dir(&mounts, &own).filter(|d| can_make_groups(d));
        let (v2_memory, v2_pids) = v2.as_deref().map_or((false, false), enable_v2_controllers);
        let v1 =
            |controller: &str| v1_dir(&mounts, &own, controller).filter(|d| can_make_groups(d));
        Facilities {
            pid_namespace: probe_pid_namespace(root),
            v1_memory: if v2_memory { None } else { v1("memory") },
            v1_pids: if v2_pids { None } else { v1("pids") },
            v2,
            v2_memory,
            v2_pids,
            root,
        }
    }

    /// Whether a memory limit is enforced by a cgroup (else by an address-space rlimit).
    pub fn memory_by_cgroup(&self) -> bool {
        self.v2_memory || self.v1_memory.is_some()
    }

    /// Whether a process limit is enforced by a cgroup (else by RLIMIT_NPROC, which counts per user namespace).
    pub fn pids_by_cgroup(&self) -> bool {
        self.v2_pids || self.v1_pids.is_some()
    }

    /// One line for logs and `sweep workers`: what contains a chunk and what enforces each limit.
    pub fn summary(&self) -> String {
        let lifetime = match (self.pid_namespace, &self.v2) {
            (PidNamespace::Direct, Some(_)) => {
                "PID namespace per chunk (+ cgroup v2 for chunks with limits)"
            }
            (PidNamespace::Direct, None) => "PID namespace per chunk",
            (PidNamespace::InUserNamespace, Some(_)) => {
                "PID namespace (in a user namespace) per chunk (+ cgroup v2 for chunks with limits)"
            }
            (PidNamespace::InUserNamespace, None) => {
                "PID namespace (in a user namespace) per chunk"
            }
            (PidNamespace::Unavailable, Some(_)) => "cgroup v2 per chunk + subreaper",
            (PidNamespace::Unavailable, None) => "subreaper per chunk",
        };
        let memory = if self.v2_memory {
            "cgroup v2"
        } else if self.v1_memory.is_some() {
            "cgroup v1"
        } else {
            "rlimit (address space)"
        };
        let pids = if self.v2_pids {
            "cgroup v2"
        } else if self.v1_pids.is_some() {
            "cgroup v1"
        } else if self.root {
            "none (root ignores RLIMIT_NPROC)"
        } else {
            "rlimit"
        };
        let cpu = if self.v2.is_some() {
            "cgroup total + rlimit per process"
        } else {
            "rlimit per process"
        };
        format!("{lifetime}; limits: memory {memory}, pids {pids}, cpu {cpu}, disk polled + rlimit per file")
    }
}

/// This process's cgroup v2 directory, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn v2_dir(mounts: &str, own: &str) -> Option<PathBuf> {
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim()
        .to_string();
    let (mount_root, point) = mounts.lines().find_map(|l| {
        let m = Mount::parse(l)?;
        (m.fstype == "cgroup2").then(|| (m.root.to_string(), m.point.to_string()))
    })?;
    Some(join_cgroup(&point, &mount_root, &path))
}

/// This process's directory in the v1 hierarchy that has `controller`.
fn v1_dir(mounts: &str, own: &str, controller: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls
            .split(',')
            .any(|c| c == controller)
            .then(|| path.trim().to_string())
    })?;
    let (mount_root, point) = mounts.lines().find_map(|l| {
        let m = Mount::parse(l)?;
        (m.fstype == "cgroup" && m.superopts.split(',').any(|o| o == controller))
            .then(|| (m.root.to_string(), m.point.to_string()))
    })?;
    Some(join_cgroup(&point, &mount_root, &path))
}

/// Inside a container the mount's root is the container's own group: paths in `/proc/self/cgroup` start with it.
fn join_cgroup(point: &str, mount_root: &str, path: &str) -> PathBuf {
    let rel = path.strip_prefix(mount_root).unwrap_or(path);
    let mut dir = PathBuf::from(point);
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
    }
    dir
}

struct Mount<'a> {
    root: &'a str,
    point: &'a str,
    fstype: &'a str,
    superopts: &'a str,
}

impl<'a> Mount<'a> {
    /// One line of mountinfo: `id parent dev root point opts [optional fields] - fstype source superopts`.
    fn parse(line: &'a str) -> Option<Mount<'a>> {
        let (left, right) = line.split_once(" - ")?;
        let mut l = left.split(' ');
        let root = l.nth(3)?;
        let point = l.next()?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let superopts = r.nth(1).unwrap_or("");
        Some(Mount {
            root,
            point,
            fstype,
            superopts,
        })
    }
}

fn can_make_groups(dir: &Path) -> bool {
    let probe = dir.join(format!("sweep-probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => std::fs::remove_dir(&probe).is_ok(),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_dir(&probe).is_ok()
        }
        Err(_) => false,
    }
}

/// Turns on the memory and pids controllers for groups made in `dir`, where the hierarchy offers them. A
/// non-root group that holds processes cannot pass controllers down (the "no internal processes" rule), so this
/// works in the root group, in a delegated group the worker has to itself, or not at all.
fn enable_v2_controllers(dir: &Path) -> (bool, bool) {
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let on = |c: &str| {
        offered.split_whitespace().any(|o| o == c)
            && (std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .is_ok_and(|s| s.split_whitespace().any(|o| o == c))
                || std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")).is_ok())
    };
    (on("memory"), on("pids"))
}

/// Tries a PID namespace: a child made by clone(2) in one exits at once.
fn probe_pid_namespace(root: bool) -> PidNamespace {
    if crate::spawn::try_clone_exit(libc::CLONE_NEWPID) {
        PidNamespace::Direct
    } else if !root && crate::spawn::try_clone_exit(libc::CLONE_NEWPID | libc::CLONE_NEWUSER) {
        PidNamespace::InUserNamespace
    } else {
        PidNamespace::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:5 - cgroup cgroup rw,pids
42 31 0:39 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const OWN: &str = "8:pids:/\n4:memory:/jobs/a1\n0::/\n";

    #[test]
    fn cgroup_directories_come_from_mountinfo_and_the_process_groups() {
        assert_eq!(
            v2_dir(MOUNTS, OWN),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            v1_dir(MOUNTS, OWN, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/jobs/a1"))
        );
        assert_eq!(
            v1_dir(MOUNTS, OWN, "pids"),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(v1_dir(MOUNTS, OWN, "cpuset"), None);
    }

    #[test]
    fn a_container_s_mount_root_is_stripped_from_its_group_path() {
        let mounts = "50 40 0:40 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_dir(mounts, "0::/kubepods/pod1/c\n"),
            Some(PathBuf::from("/sys/fs/cgroup/c"))
        );
    }

    #[test]
    fn the_summary_names_every_limit() {
        let f = Facilities::get();
        let s = f.summary();
        for word in ["memory", "pids", "cpu", "disk"] {
            assert!(s.contains(word), "{s}");
        }
    }
}
