//! What this machine lets a worker do to contain a chunk, found once by trying it: a PID namespace (as root, or
//! inside a new user namespace), a cgroup v2 directory the worker may make groups in, the v1 memory and pids
//! controllers of a hybrid host, and the namespaces and mount calls of the sandbox.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::cgroupfs;
use crate::clone::try_clone_exit;

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
        let dir =
            |controller: Option<&str>| cgroupfs::own_dir(&mounts, &own, controller).map(|(d, _)| d);
        let v2 = dir(None).filter(|d| can_make_groups(d));
        let (v2_memory, v2_pids) = v2.as_deref().map_or((false, false), enable_v2_controllers);
        let v1 = |controller: &str| dir(Some(controller)).filter(|d| can_make_groups(d));
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

    /// One line for logs and `sweep workers`: what contains a chunk and what enforces each limit, saying
    /// whether chunks without limits or sandbox run in resident boxes (which this process knows, not the machine:
    /// [`Facilities::summary`] asks it).
    pub(crate) fn describe(&self, resident: bool) -> String {
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
        let resident = if resident {
            "; chunks without limits or sandbox in a resident PID namespace per thread, emptied between chunks"
        } else {
            ""
        };
        format!(
            "{lifetime}{resident}; limits: memory {memory}, pids {pids}, cpu {cpu}, disk polled + rlimit per file"
        )
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
    if try_clone_exit(libc::CLONE_NEWPID) {
        PidNamespace::Direct
    } else if !root && try_clone_exit(libc::CLONE_NEWPID | libc::CLONE_NEWUSER) {
        PidNamespace::InUserNamespace
    } else {
        PidNamespace::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_every_limit_and_the_resident_boxes_when_there_are() {
        let f = Facilities::get();
        for resident in [false, true] {
            let s = f.describe(resident);
            for word in ["memory", "pids", "cpu", "disk"] {
                assert!(s.contains(word), "{s}");
            }
            assert_eq!(s.contains("resident"), resident, "{s}");
        }
    }
}
