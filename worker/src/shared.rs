//! What the leaser, the executors, the heartbeater and the reporter hold in common.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::WorkerConfig;
use crate::link::Link;
use crate::state::State;

pub(crate) struct Shared {
    pub(crate) cfg: WorkerConfig,
    /// The member of the coordinator called now, and its clients.
    pub(crate) link: Link,
    pub(crate) worker_id: String,
    pub(crate) state: Mutex<State>,
    pub(crate) work_ready: Notify,
    pub(crate) room: Notify,
    pub(crate) outbox_ready: Notify,
    pub(crate) heartbeat: Duration,
    /// Held while a job is bound to its input artifacts (fetch, then parse): see [`Shared::job`].
    pub(crate) binding: tokio::sync::Mutex<()>,
    /// Signalled when the coordinator asks this worker to drain: it then stops as on a shutdown signal.
    pub(crate) drained: Notify,
    /// One permit per thread: a chunk takes as many as its job's threads per chunk before it starts.
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
