//! Where this process's cgroups are: the hierarchy's mount (from `/proc/self/mountinfo`) and the process's path
//! in it (from `/proc/self/cgroup`). Functions of the files' text, so that every rule is tested on text a test
//! writes, not on the machine that runs the tests.

use std::path::{Path, PathBuf};

/// A mounted cgroup hierarchy: its mount point, and which cgroup its root is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub point: PathBuf,
    pub root: String,
}

impl Hierarchy {
    /// The directory of cgroup `path`. In a cgroup namespace or a container the mount's root is the process's
    /// own cgroup (or a parent of it), so the path is taken relative to that root; a path outside it is not
    /// visible here, and the mount point itself is the closest there is.
    pub fn dir(&self, path: &str) -> PathBuf {
        match Path::new(path).strip_prefix(&self.root) {
            Ok(rel) => self.point.join(rel),
            Err(_) => self.point.clone(),
        }
    }
}

/// The v2 hierarchy (`controller` `None`) or the v1 hierarchy with `controller`, from mountinfo's text.
pub fn mount(mountinfo: &str, controller: Option<&str>) -> Option<Hierarchy> {
    mountinfo.lines().find_map(|line| {
        // `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (root, point, fstype) = (left.get(3)?, left.get(4)?, right.first()?);
        let wanted = match controller {
            None => *fstype == "cgroup2",
            Some(c) => {
                *fstype == "cgroup" && right.get(2).is_some_and(|o| o.split(',').any(|o| o == c))
            }
        };
        wanted.then(|| Hierarchy {
            point: PathBuf::from(unescape(point)),
            root: unescape(root),
        })
    })
}

/// This process's path in the v2 hierarchy (`controller` `None`) or in the v1 one with `controller`, from the
/// text of `/proc/self/cgroup`.
pub fn own_path(cgroup: &str, controller: Option<&str>) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        wanted.then(|| path.trim().to_string())
    })
}

/// This process's directory in the v2 hierarchy or the v1 one with `controller`, with that hierarchy.
pub fn own_dir(
    mountinfo: &str,
    cgroup: &str,
    controller: Option<&str>,
) -> Option<(PathBuf, Hierarchy)> {
    let h = mount(mountinfo, controller)?;
    let path = own_path(cgroup, controller)?;
    Some((h.dir(&path), h))
}

/// mountinfo writes a space, tab, newline and backslash in a path as an octal escape (`\040`).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
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

    fn dir(controller: Option<&str>) -> Option<PathBuf> {
        own_dir(MOUNTS, OWN, controller).map(|(d, _)| d)
    }

    #[test]
    fn cgroup_directories_come_from_mountinfo_and_the_process_groups() {
        assert_eq!(dir(None), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(
            dir(Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/jobs/a1"))
        );
        assert_eq!(
            dir(Some("pids")),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(dir(Some("cpuset")), None);
    }

    #[test]
    fn a_container_s_mount_root_is_stripped_from_its_group_path() {
        let mounts = "50 40 0:40 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        let (d, _) = own_dir(mounts, "0::/kubepods/pod1/c\n", None).unwrap();
        assert_eq!(d, PathBuf::from("/sys/fs/cgroup/c"));
        // A path outside the mount's root is not visible: the mount point is the closest there is.
        let (d, _) = own_dir(mounts, "0::/elsewhere\n", None).unwrap();
        assert_eq!(d, PathBuf::from("/sys/fs/cgroup"));
    }

    #[test]
    fn mountinfo_paths_are_unescaped_and_other_filesystems_ignored() {
        let info = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    2 1 0:26 / /sys/fs/my\\040cgroups rw shared:4 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mount(info, None),
            Some(Hierarchy {
                point: "/sys/fs/my cgroups".into(),
                root: "/".into()
            })
        );
        assert_eq!(mount(info, Some("memory")), None);
        assert_eq!(unescape("a\\134b\\x"), "a\\b\\x");
    }
}
