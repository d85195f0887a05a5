//! How much memory this worker can give its chunks, as it tells the coordinator when it registers: the lower of
//! the machine's memory (`MemTotal` in `/proc/meminfo`) and the limit of the cgroup the worker runs in (cgroup v2
//! `memory.max`, v1 `memory.limit_in_bytes`, of its own cgroup and every parent up to the mount), since a worker
//! in a container with 4 GiB on a 256 GiB machine has 4 GiB to give. The coordinator leases chunks of a job that
//! needs more per chunk only to workers that report more. `sweep worker --memory BYTES` overrides what is found
//! (parsed by `sweep_contain::parse_bytes`).
//!
//! Every reading goes through a function that returns a file's text, so the rules are tested on files a test
//! writes, not on the machine that runs the tests.

use std::path::Path;

use sweep_contain::cgroupfs;

/// A cgroup limit this large means no limit: v1 writes one just under 2^63 bytes, and no machine has 2^62.
const NO_LIMIT: u64 = 1 << 62;

/// The memory this worker can give chunks, read from this machine; 0 when nothing can be read.
pub fn detect() -> u64 {
    usable_memory(&|path: &Path| std::fs::read_to_string(path).ok())
}

/// The lower of `MemTotal` and the worker's cgroup limits, with `read` giving a file's text (`None`: it cannot
/// be read); 0 when neither is known.
pub fn usable_memory(read: &dyn Fn(&Path) -> Option<String>) -> u64 {
    let total = read(Path::new("/proc/meminfo")).and_then(|m| mem_total(&m));
    let limit = cgroup_limit(read);
    match (total, limit) {
        (Some(t), Some(l)) => t.min(l),
        (t, l) => t.or(l).unwrap_or(0),
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// A limit file's value: bytes, or `None` for "max", a value so large it means no limit, or no number.
fn limit_value(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&n| n < NO_LIMIT)
}

/// The lowest limit in `file` of `dir` and each parent up to the mount point: a parent's limit binds its
/// children too.
fn lowest_limit(
    read: &dyn Fn(&Path) -> Option<String>,
    dir: &Path,
    point: &Path,
    file: &str,
) -> Option<u64> {
    let mut lowest: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| d.starts_with(point)) {
        if let Some(v) = read(&d.join(file)).as_deref().and_then(limit_value) {
            lowest = Some(lowest.map_or(v, |l| l.min(v)));
        }
        at = d.parent();
    }
    lowest
}

/// Where mountinfo cannot be read: the usual places of the v2 and the v1 memory hierarchies.
const USUAL_MOUNTS: &str = "\
0 0 0:0 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
0 0 0:0 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

/// The lowest memory limit of the worker's cgroups, v2 or v1; `None` when there is none (or no cgroups).
fn cgroup_limit(read: &dyn Fn(&Path) -> Option<String>) -> Option<u64> {
    let own = read(Path::new("/proc/self/cgroup"))?;
    let mounts = read(Path::new("/proc/self/mountinfo")).unwrap_or_else(|| USUAL_MOUNTS.into());
    let limit = |controller, file| {
        let (dir, h) = cgroupfs::own_dir(&mounts, &own, controller)?;
        lowest_limit(read, &dir, &h.point, file)
    };
    match (
        limit(None, "memory.max"),
        limit(Some("memory"), "memory.limit_in_bytes"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;

    const GIB: u64 = 1 << 30;

    const MEMINFO: &str = "MemTotal:       16318480 kB\nMemFree:         1000000 kB\n";

    /// A machine made of the given files.
    fn machine(files: &[(&str, &str)]) -> u64 {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        usable_memory(&|p: &Path| files.get(p).cloned())
    }

    const V2_MOUNT: &str =
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";

    #[test]
    fn without_cgroups_the_machine_s_memory_is_the_worker_s() {
        assert_eq!(machine(&[("/proc/meminfo", MEMINFO)]), 16318480 * 1024);
        assert_eq!(machine(&[]), 0, "nothing readable: unknown");
        assert_eq!(machine(&[("/proc/meminfo", "MemFree: 12 kB\n")]), 0);
    }

    #[test]
    fn a_cgroup_v2_limit_below_the_machine_s_memory_is_what_chunks_get() {
        // The worker's own cgroup says max; its parent holds the limit.
        let files = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "0::/system.slice/sweep.service\n"),
            ("/proc/self/mountinfo", V2_MOUNT),
            (
                "/sys/fs/cgroup/system.slice/sweep.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "4294967296\n"),
            ("/sys/fs/cgroup/memory.max", "garbage"),
        ];
        assert_eq!(machine(&files), 4 * GIB);
        // A limit above the machine's memory does not raise it.
        let big = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "0::/\n"),
            ("/proc/self/mountinfo", V2_MOUNT),
            ("/sys/fs/cgroup/memory.max", "68719476736\n"),
        ];
        assert_eq!(machine(&big), 16318480 * 1024);
    }

    #[test]
    fn a_container_sees_its_own_cgroup_at_the_mount_s_root() {
        // No cgroup namespace: /proc/self/cgroup names the full path, and the mount's root is that cgroup.
        let files = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "0::/docker/abc123\n"),
            (
                "/proc/self/mountinfo",
                "700 690 0:30 /docker/abc123 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n",
            ),
            ("/sys/fs/cgroup/memory.max", "2147483648\n"),
        ];
        assert_eq!(machine(&files), 2 * GIB);
    }

    #[test]
    fn a_cgroup_v1_memory_limit_counts_and_its_unlimited_value_does_not() {
        let mountinfo = "\
25 24 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";
        let cgroup =
            "12:cpu,cpuacct:/user.slice\n4:memory:/user.slice/job\n1:name=systemd:/user.slice\n";
        let limited = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", cgroup),
            ("/proc/self/mountinfo", mountinfo),
            (
                "/sys/fs/cgroup/memory/user.slice/job/memory.limit_in_bytes",
                "536870912\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ];
        assert_eq!(machine(&limited), 512 << 20);
        let unlimited = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", cgroup),
            ("/proc/self/mountinfo", mountinfo),
            (
                "/sys/fs/cgroup/memory/user.slice/job/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ];
        assert_eq!(machine(&unlimited), 16318480 * 1024);
    }
}
