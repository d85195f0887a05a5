//! A cgroup per chunk that has limits (or per chunk, where there is no PID namespace): made once and reused by later chunks (making and removing directories would cost more
//! than the chunks of a trivial program take), with the chunk's limits written into it, and emptied with the
//! kernel's help when the chunk ends. The counters that say whether a limit was hit (OOM kills, forks refused)
//! are read before and after, so a reused group needs no reset.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::facilities::{Facilities, PidNamespace};
use crate::Limits;

/// How long a released group may take to empty by itself before what is left is killed.
const SETTLE: Duration = Duration::from_millis(50);

/// How long emptying a group may take before it is given up on (left behind, not reused).
const EMPTY_TIMEOUT: Duration = Duration::from_secs(5);

static POOL: Mutex<Vec<ChunkGroup>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One chunk's groups: the v2 group (kill, CPU time, and limits where its controllers are on) and, on a hybrid
/// host, v1 memory and pids groups for the limits.
#[derive(Debug)]
pub struct ChunkGroup {
    name: String,
    v2: Option<PathBuf>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    memory_limit: Option<u64>,
    pids_limit: Option<u64>,
    /// Counter values when the group was taken.
    base: Counters,
    cpu_base: Option<u64>,
    /// Whether `cgroup.kill` was ever written to it.
    killed: bool,
}

/// What the kernel counted in a group: OOM kills, and forks refused at the pids limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub oom_kills: u64,
    pub forks_refused: u64,
}

impl ChunkGroup {
    /// The group `name` at `v2` (cgroup v2's directory, when there is one), with no limits set and nothing
    /// counted yet.
    fn unlimited(name: String, v2: Option<PathBuf>) -> ChunkGroup {
        ChunkGroup {
            name,
            v2,
            memory: None,
            pids: None,
            memory_limit: None,
            pids_limit: None,
            base: Counters::default(),
            cpu_base: None,
            killed: false,
        }
    }

    /// A group for a chunk with `limits`: one from the pool or a new one; `None` where this machine has no
    /// cgroup to give and the limits need none.
    pub fn take(limits: &Limits) -> io::Result<Option<ChunkGroup>> {
        let f = Facilities::get();
        // In a PID namespace the kernel already ends everything when the box ends, so a chunk without limits
        // needs no group: making, filling and emptying one costs about a sixth of a trivial chunk. Without a
        // namespace the v2 group is how everything the chunk started is found and killed.
        let limited = limits.memory.is_some() || limits.pids.is_some() || limits.cpu_secs.is_some();
        if !limited && f.pid_namespace != PidNamespace::Unavailable {
            return Ok(None);
        }
        let want_memory = limits.memory.is_some() && f.v1_memory.is_some() && !f.v2_memory;
        let want_pids = limits.pids.is_some() && f.v1_pids.is_some() && !f.v2_pids;
        if f.v2.is_none() && !want_memory && !want_pids {
            return Ok(None);
        }
        let pooled = POOL.lock().map(|mut p| p.pop()).unwrap_or(None);
        let mut g = match pooled {
            Some(g) => g,
            None => {
                clean_stale_once();
                let name = format!(
                    "sweep-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let v2 = make(f.v2.as_deref(), &name)?;
                ChunkGroup::unlimited(name, v2)
            }
        };
        if want_memory && g.memory.is_none() {
            g.memory = make(f.v1_memory.as_deref(), &g.name)?;
        }
        if want_pids && g.pids.is_none() {
            g.pids = make(f.v1_pids.as_deref(), &g.name)?;
        }
        g.apply(limits, f)?;
        g.base = g.counters();
        g.cpu_base = g.cpu_usec();
        Ok(Some(g))
    }

    fn apply(&mut self, limits: &Limits, f: &Facilities) -> io::Result<()> {
        if self.memory_limit != limits.memory {
            if let (true, Some(v2)) = (f.v2_memory, &self.v2) {
                write(v2, "memory.max", &v2_value(limits.memory))?;
                // Swap would let a chunk go past its limit slowly instead of failing: none for limited chunks.
                let _ = write(
                    v2,
                    "memory.swap.max",
                    if limits.memory.is_some() { "0" } else { "max" },
                );
            } else if let Some(m) = &self.memory {
                let v = limits.memory.map_or("-1".to_string(), |b| b.to_string());
                // memory+swap must stay at or above memory: whichever order the change needs, one of the two
                // writes of memory succeeds.
                let first = write(m, "memory.limit_in_bytes", &v);
                let _ = write(m, "memory.memsw.limit_in_bytes", &v);
                if first.is_err() {
                    write(m, "memory.limit_in_bytes", &v)?;
                }
            }
            self.memory_limit = limits.memory;
        }
        if self.pids_limit != limits.pids {
            if let (true, Some(v2)) = (f.v2_pids, &self.v2) {
                write(v2, "pids.max", &v2_value(limits.pids))?;
            } else if let Some(p) = &self.pids {
                write(p, "pids.max", &v2_value(limits.pids))?;
            }
            self.pids_limit = limits.pids;
        }
        Ok(())
    }

    /// The `cgroup.procs` files the chunk's box joins.
    pub fn procs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = Vec::new();
        if let Some(d) = &self.v2 {
            v.push(d.join("cgroup.procs"));
        }
        if let (Some(d), Some(_)) = (&self.memory, self.memory_limit) {
            v.push(d.join("cgroup.procs"));
        }
        if let (Some(d), Some(_)) = (&self.pids, self.pids_limit) {
            v.push(d.join("cgroup.procs"));
        }
        v
    }

    /// Counts since the group was taken.
    pub fn hits(&self) -> Counters {
        let now = self.counters();
        Counters {
            oom_kills: now.oom_kills.saturating_sub(self.base.oom_kills),
            forks_refused: now.forks_refused.saturating_sub(self.base.forks_refused),
        }
    }

    fn counters(&self) -> Counters {
        let f = Facilities::get();
        let memory_file = match (&self.v2, &self.memory) {
            (Some(v2), _) if f.v2_memory => Some(v2.join("memory.events")),
            (_, Some(m)) => Some(m.join("memory.oom_control")),
            _ => None,
        };
        let pids_file = match (&self.v2, &self.pids) {
            (Some(v2), _) if f.v2_pids => Some(v2.join("pids.events")),
            (_, Some(p)) => Some(p.join("pids.events")),
            _ => None,
        };
        Counters {
            oom_kills: memory_file.map_or(0, |p| keyed(&p, "oom_kill")),
            forks_refused: pids_file.map_or(0, |p| keyed(&p, "max")),
        }
    }

    /// CPU time used by every process of the chunk so far (cgroup v2's `cpu.stat`, present without the cpu
    /// controller).
    pub fn cpu_used(&self) -> Option<Duration> {
        let now = self.cpu_usec()?;
        Some(Duration::from_micros(
            now.saturating_sub(self.cpu_base.unwrap_or(0)),
        ))
    }

    fn cpu_usec(&self) -> Option<u64> {
        let v2 = self.v2.as_ref()?;
        std::fs::read_to_string(v2.join("cpu.stat"))
            .ok()
            .and_then(|s| keyed_in(&s, "usage_usec"))
    }

    fn is_empty(&self) -> bool {
        [&self.v2, &self.memory, &self.pids]
            .into_iter()
            .flatten()
            .all(|d| {
                std::fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
            })
    }

    /// Kills everything in the group and waits until it is empty. A group killed with `cgroup.kill` is not
    /// reused (see [`ChunkGroup::release`]).
    pub fn kill_all(&mut self) -> bool {
        let deadline = Instant::now() + EMPTY_TIMEOUT;
        let dirs: Vec<PathBuf> = [&self.v2, &self.memory, &self.pids]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        loop {
            let mut empty = true;
            for d in &dirs {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                if procs.trim().is_empty() {
                    continue;
                }
                empty = false;
                if d.join("cgroup.kill").exists() {
                    self.killed = true;
                    let _ = write(d, "cgroup.kill", "1");
                } else {
                    for pid in procs
                        .split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok())
                    {
                        // SAFETY: kill(2) with a pid read from the group; a pid that is gone gives ESRCH.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
            if empty {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Empties the group and keeps it for the next chunk; a group that will not empty is left and logged.
    pub fn release(mut self) {
        // The box has ended when this is called, and with it (in a PID namespace) everything it held; the group
        // empties by itself as those exits finish. A kill is for what is left after that: a kill written while a
        // dying process is still listed can reach the next chunk's box if the group is reused at once.
        let settle = Instant::now() + SETTLE;
        while !self.is_empty() && Instant::now() < settle {
            std::thread::sleep(Duration::from_micros(100));
        }
        let empty = self.is_empty() || self.kill_all();
        if empty && self.killed {
            // A box cloned into a group that was once killed (CLONE_INTO_CGROUP) is itself killed by some
            // kernels: such a group is removed, and a new one made when needed.
            for d in [&self.v2, &self.memory, &self.pids].into_iter().flatten() {
                let _ = std::fs::remove_dir(d);
            }
        } else if empty {
            if let Ok(mut pool) = POOL.lock() {
                pool.push(self);
            }
        } else {
            tracing::warn!(group = %self.name, "a chunk's cgroup did not empty within {EMPTY_TIMEOUT:?}; left behind");
        }
    }
}

/// Removes every pooled group (at the end of a worker), after emptying it.
pub fn remove_pooled() {
    let groups = POOL
        .lock()
        .map(|mut p| std::mem::take(&mut *p))
        .unwrap_or_default();
    for mut g in groups {
        g.kill_all();
        for d in [&g.v2, &g.memory, &g.pids].into_iter().flatten() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn v2_value(v: Option<u64>) -> String {
    v.map_or("max".to_string(), |b| b.to_string())
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(file).display())))
}

/// `name N` from a flat keyed file such as `memory.events`.
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| keyed_in(&s, key))
        .unwrap_or(0)
}

fn keyed_in(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Makes the group directory `name` under `parent` (`None` when there is no such hierarchy).
fn make(parent: Option<&Path>, name: &str) -> io::Result<Option<PathBuf>> {
    let Some(parent) = parent else {
        return Ok(None);
    };
    let dir = parent.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(Some(dir)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Some(dir)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot make the cgroup {}: {e}", dir.display()),
        )),
    }
}

/// Groups left by a worker that was killed before it could remove them (`sweep-PID-N` whose PID is gone):
/// emptied and removed, once per process.
fn clean_stale_once() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let f = Facilities::get();
        for parent in [&f.v2, &f.v1_memory, &f.v1_pids].into_iter().flatten() {
            let Ok(entries) = std::fs::read_dir(parent) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(pid) = name
                    .strip_prefix("sweep-")
                    .and_then(|r| r.split('-').next())
                    .and_then(|p| p.parse::<i32>().ok())
                else {
                    continue;
                };
                // SAFETY: kill with signal 0 only checks whether the process exists.
                let alive = unsafe { libc::kill(pid, 0) } == 0
                    || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
                if alive {
                    continue;
                }
                let mut g = ChunkGroup::unlimited(name.clone(), Some(e.path()));
                g.kill_all();
                if std::fs::remove_dir(e.path()).is_ok() {
                    tracing::info!(group = %e.path().display(), "removed a cgroup a dead worker left");
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files_are_read_by_name() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n";
        assert_eq!(keyed_in(events, "oom_kill"), Some(2));
        assert_eq!(keyed_in(events, "max"), Some(3));
        assert_eq!(keyed_in(events, "nothing"), None);
    }
}
