//! Workers as the core knows them: who registered with which spaces, when each was last heard from, and the
//! drain requests. A worker's standing (bad results, refusal) is the scheduler's; here it is only bound to the
//! worker's token identity when it registers.

use tracing::info;

use crate::error::CoreError;
use crate::scheduler::Millis;
use crate::state::{Core, WorkerInfo};
use crate::views::WorkerView;

/// What a worker says about itself when it registers.
#[derive(Clone, Debug, Default)]
pub struct Registration {
    /// The name it asks for; empty: the coordinator picks one.
    pub name: String,
    /// The identity its token proves, when tokens are on: its standing is kept under this, not its name.
    pub identity: Option<String>,
    pub threads: u32,
    /// Bytes its chunks may use; 0: it did not say.
    pub memory_bytes: u64,
    pub version: String,
    pub spaces: Vec<String>,
    /// How it contains the programs it runs, in words for people; empty: it did not say.
    pub containment: String,
}

impl Core {
    pub(crate) fn touch_worker(&mut self, worker: &str, now: Millis) {
        self.workers
            .entry(worker.to_string())
            .and_modify(|w| w.last_seen_ms = now)
            .or_insert(WorkerInfo {
                last_seen_ms: now,
                threads: 0,
                chunks_done: 0,
                memory_bytes: 0,
                version: String::new(),
                spaces: None,
                containment: String::new(),
                last_lease: None,
            });
    }

    /// A worker (re)registers: it is described, and when tokens are on its standing is bound to its identity.
    /// Returns the name it is known by.
    pub fn register(&mut self, reg: Registration, now: Millis) -> String {
        let worker_id = if reg.name.trim().is_empty() {
            self.worker_seq += 1;
            format!("worker-{}", self.worker_seq)
        } else {
            reg.name.trim().to_string()
        };
        self.touch_worker(&worker_id, now);
        if let Some(w) = self.workers.get_mut(&worker_id) {
            // A registration starts the worker's request ids afresh (it may be a new process under the old name).
            w.last_lease = None;
            w.threads = reg.threads;
            w.memory_bytes = reg.memory_bytes;
            w.version = reg.version.chars().take(64).collect();
            w.containment = reg.containment.chars().take(256).collect();
            w.spaces = Some(
                reg.spaces
                    .iter()
                    .take(1024)
                    .map(|s| s.chars().take(64).collect())
                    .collect(),
            );
        }
        if let Some(identity) = reg.identity {
            self.sched.bind_identity(&worker_id, &identity);
        }
        info!(
            worker = %worker_id,
            threads = reg.threads,
            memory_bytes = reg.memory_bytes,
            version = %reg.version,
            "worker registered"
        );
        worker_id
    }

    pub fn live_workers(&self, now: Millis) -> u32 {
        let horizon = now.saturating_sub(self.lease_ttl_ms());
        self.workers
            .values()
            .filter(|w| w.last_seen_ms >= horizon)
            .count() as u32
    }

    /// Asks a worker to finish what it holds and take nothing new.
    pub fn drain(&mut self, name: &str) -> Result<WorkerView, CoreError> {
        if !self.workers.contains_key(name) {
            return Err(CoreError::UnknownWorker(name.to_string()));
        }
        self.sched.drain(name);
        info!(worker = %name, "worker asked to drain");
        self.worker_view(name)
            .ok_or_else(|| CoreError::UnknownWorker(name.to_string()))
    }

    pub fn lease_ttl_ms(&self) -> u64 {
        self.sched.config().lease_ttl_ms
    }

    /// Workers by name with when they were last heard from (for the liveness gauges).
    pub fn last_seen(&self) -> impl Iterator<Item = (&str, u64)> {
        self.workers
            .iter()
            .map(|(n, w)| (n.as_str(), w.last_seen_ms))
    }
}
