//! Records and store directories the store's unit tests share, so that each test module next to its code
//! builds them the same way.

use std::path::{Path, PathBuf};

use sweep_space::ChunkOutput;

use super::handle::Store;
use super::StoreError;
use crate::core::JobRecord;
use crate::scheduler::{ChunkRecord, JobId};

pub(super) fn done_record(chunk: u64) -> ChunkRecord {
    ChunkRecord::Done {
        digest: format!("{chunk:064x}"),
        worker: format!("w{}", chunk % 3),
    }
}

pub(super) fn record(id: JobId) -> JobRecord {
    JobRecord {
        total_nodes: Some(10),
        ..JobRecord::new(id, "star", serde_json::json!({"points": 6}), 3, 1)
    }
}

/// Every output of job `job` (of `n_chunks` chunks) as [`Store::for_each_output`] streams them, in its order.
pub(super) fn streamed_outputs(
    store: &Store,
    job: JobId,
    n_chunks: u64,
) -> Vec<(u64, ChunkOutput)> {
    let mut streamed = Vec::new();
    store
        .for_each_output(job, n_chunks, &mut |chunk, out| {
            streamed.push((chunk, out));
            Ok::<(), StoreError>(())
        })
        .unwrap();
    streamed
}

/// Opens the store at `dir`, waiting for a handle just dropped in this process to let go of sled's file
/// lock (sled's background flusher releases it a moment after the last `Db` is dropped).
pub(super) fn reopen(dir: &Path) -> Store {
    retry_open(dir, Store::open)
}

/// The sled database under a store at `dir`, for tests that write or read it as an older version would;
/// waits for a handle just dropped, like [`reopen`].
pub(super) fn reopen_sled(dir: &Path) -> sled::Db {
    retry_open(dir, |d| sled::open(d))
}

fn retry_open<T, E: std::fmt::Display>(dir: &Path, open: impl Fn(&Path) -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open(dir) {
            Ok(opened) => return opened,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("cannot reopen {}: {e}", dir.display()),
        }
    }
}

pub(super) fn temp_store_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sweep-store-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
