//! What a worker is told to be, and what it tells the coordinator about itself when it registers.

use std::time::Duration;

use sweep_client::ClientSecurity;
use sweep_proto::v1;
use sweep_space::Registry;

#[cfg(feature = "lie")]
use crate::lie::Lie;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://10.0.0.5:7878`, or its members' URLs separated by commas (the worker
    /// follows the leader; see `sweep_client::Members`).
    pub connect: String,
    /// A stable name for this worker (empty: the coordinator assigns one).
    pub name: String,
    pub threads: usize,
    /// Chunks leased beyond the running ones, so a finished chunk is replaced at once; more while chunks are
    /// short (see [`crate::LEASE_AHEAD`]).
    pub prefetch: usize,
    /// How long shutdown waits for running chunks before cancelling and handing them back.
    pub grace: Duration,
    /// Where fetched input artifacts (tables) are cached by digest, so a restarted worker does not fetch them
    /// again. `None`: memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Token and TLS settings for talking to the coordinator.
    pub security: ClientSecurity,
    /// Tests only: falsify results this way, to prove the coordinator's checks catch it. `None`: as
    /// [`crate::LIE_ENV`] says.
    #[cfg(feature = "lie")]
    pub lie: Option<Lie>,
    /// The spaces this worker runs, declared when it registers: the coordinator leases it chunks of these only.
    /// `exec` is in it only when the worker was started with `--allow-exec`.
    pub registry: Registry,
    /// A coordinator in this process to call instead of connecting to `connect` (`sweep run`; see
    /// `sweep_coordinator::in_process`).
    pub in_process: Option<sweep_proto::Transport>,
    /// Bytes of memory this worker's chunks may use, as it reports them: the coordinator leases a job that
    /// needs more per chunk ([`sweep_space::Job::chunk_memory`]) to other workers. `None`: found when it
    /// registers ([`crate::memory::detect`]: the lower of the machine's memory and its cgroup's limit).
    pub memory_bytes: Option<u64>,
    /// How this worker contains the programs it runs (free text for `sweep workers`, e.g. "cgroup v2 + PID
    /// namespace"); empty: it does not say.
    pub containment: String,
}

impl WorkerConfig {
    pub fn new(connect: impl Into<String>, threads: usize, registry: Registry) -> WorkerConfig {
        WorkerConfig {
            registry,
            connect: connect.into(),
            name: String::new(),
            threads: threads.max(1),
            prefetch: threads.max(1),
            grace: Duration::from_secs(30),
            cache_dir: None,
            security: ClientSecurity::default(),
            #[cfg(feature = "lie")]
            lie: None,
            in_process: None,
            memory_bytes: None,
            containment: String::new(),
        }
    }
}

/// What this worker tells the coordinator about itself, under `name` (empty: the coordinator picks one).
pub(crate) fn register_request(cfg: &WorkerConfig, name: &str) -> v1::RegisterRequest {
    v1::RegisterRequest {
        name: name.to_string(),
        threads: cfg.threads as u32,
        version: env!("CARGO_PKG_VERSION").to_string(),
        spaces: cfg
            .registry
            .names()
            .into_iter()
            .map(str::to_string)
            .collect(),
        memory_bytes: cfg.memory_bytes.unwrap_or_else(crate::memory::detect),
        containment: cfg.containment.clone(),
    }
}
