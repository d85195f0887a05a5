//! What a worker is told to be, and what it tells the coordinator about itself when it registers.

use std::time::Duration;

use sweep_client::ClientSecurity;
use sweep_proto::v1;
use sweep_space::Registry;

#[cfg(feature = "lie")]
use crate::lie::Lie;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://10.0.0.5:7878`.
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
        }
    }
}

/// This machine's memory in bytes, as the coordinator shows it (0 where it cannot be read).
fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
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
        memory_bytes: memory_bytes(),
    }
}
