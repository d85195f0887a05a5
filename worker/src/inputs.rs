//! A lease's job: built once per job and bound to its input artifacts, which come from memory, the disk cache
//! or the coordinator.

use std::sync::Arc;

use sweep_proto::deadline::{within, CallKind};
use sweep_proto::v1;
use sweep_space::SpaceJob;
use tonic::Status;
use tracing::{info, warn};

use crate::shared::Shared;

/// Why a lease's job could not be prepared.
pub(crate) enum PrepError {
    /// The job cannot run here (bad parameters, a bad input): the chunk fails, which counts as an attempt.
    Fatal(String),
    /// Fetching the input failed (the coordinator is restarting, say): the chunk is handed back unused.
    Transient(String),
}

/// The (input job, artifact digest) pairs a lease's job must be bound to, in order: the list, or the single
/// input a coordinator older than the list sends.
/// Shipped files follow as (0, digest).
fn lease_inputs(lease: &v1::ChunkLease) -> Vec<(u64, String)> {
    let mut inputs: Vec<(u64, String)> = if !lease.inputs.is_empty() {
        lease
            .inputs
            .iter()
            .map(|i| (i.job_id, i.digest.clone()))
            .collect()
    } else if lease.input_job != 0 {
        vec![(lease.input_job, lease.input_digest.clone())]
    } else {
        Vec::new()
    };
    inputs.extend(lease.shipped.iter().map(|d| (0, d.clone())));
    inputs
}

impl Shared {
    /// The job a lease belongs to, built once per job and, if it needs input artifacts, bound to them.
    pub(crate) async fn job(&self, lease: &v1::ChunkLease) -> Result<SpaceJob, PrepError> {
        let key = (lease.job_id, lease.params_json.clone());
        if let Some(j) = self.lock().cached_job(&key) {
            return Ok(j);
        }
        let params: serde_json::Value = serde_json::from_str(&lease.params_json)
            .map_err(|e| PrepError::Fatal(format!("the lease's params are not JSON: {e}")))?;
        let mut job = self
            .cfg
            .registry
            .job_from_params(&lease.space, &params)
            .map_err(|e| PrepError::Fatal(format!("cannot build the job: {e}")))?;
        let inputs = lease_inputs(lease);
        if !inputs.is_empty() {
            // One binding at a time: executors that start on the same job together wait here and then find
            // it bound, instead of each parsing the same large tables.
            let _one_at_a_time = self.binding.lock().await;
            if let Some(j) = self.lock().cached_job(&key) {
                return Ok(j);
            }
            let mut artifacts = Vec::with_capacity(inputs.len());
            for (input, digest) in &inputs {
                artifacts.push(
                    self.input_artifact(*input, digest)
                        .await
                        .map_err(PrepError::Transient)?,
                );
            }
            let names = inputs
                .iter()
                .map(|(i, _)| i.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            // Binding parses and checks every artifact: CPU work, kept off the async runtime.
            job = tokio::task::spawn_blocking(move || {
                let views: Vec<&[u8]> = artifacts.iter().map(|a| a.as_slice()).collect();
                job.bind_inputs(&views)
            })
            .await
            .map_err(|e| {
                PrepError::Fatal(format!("binding the inputs of jobs {names} crashed: {e}"))
            })?
            .map_err(|e| {
                PrepError::Fatal(format!("cannot load the inputs of jobs {names}: {e}"))
            })?;
        }
        self.lock().cache_job(key, job.clone(), inputs);
        Ok(job)
    }

    /// The artifact of job `input` with blake3 `digest`: from memory, the disk cache, or the coordinator.
    /// Called only under the `binding` lock, so one artifact is never fetched twice at once.
    async fn input_artifact(&self, input: u64, digest: &str) -> Result<Arc<Vec<u8>>, String> {
        if let Some(a) = self.lock().artifacts.get(digest) {
            return Ok(a.clone());
        }
        let cached = self.cache_path(digest);
        let from_disk = match &cached {
            Some(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read(path))
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            None => None,
        };
        let bytes = match from_disk.filter(|b| blake3::hash(b).to_hex().as_str() == digest) {
            Some(b) => {
                info!(
                    job = input,
                    bytes = b.len(),
                    "input artifact from the disk cache"
                );
                b
            }
            None => {
                let b = self.fetch_artifact(input, digest).await?;
                if let Some(path) = cached {
                    let data = b.clone();
                    // A cache is an optimisation: failing to write it is logged, not fatal.
                    let written =
                        tokio::task::spawn_blocking(move || write_atomically(&path, &data)).await;
                    if let Ok(Err(e)) = written {
                        warn!(error = %e, "cannot cache the artifact on disk");
                    }
                }
                b
            }
        };
        let bytes = Arc::new(bytes);
        self.lock()
            .artifacts
            .insert(digest.to_string(), bytes.clone());
        Ok(bytes)
    }

    fn cache_path(&self, digest: &str) -> Option<std::path::PathBuf> {
        // The digest names the file: only hex digits reach the file system.
        if digest.is_empty() || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        Some(
            self.cfg
                .cache_dir
                .as_ref()?
                .join(format!("{digest}.artifact")),
        )
    }

    /// Streams the artifact in pieces, checks offsets, size and digest.
    async fn fetch_artifact(&self, input: u64, digest: &str) -> Result<Vec<u8>, String> {
        let fetching = |e: Status| format!("fetching job {input}'s artifact: {}", e.message());
        let mut clients = self
            .link
            .ready(&self.cfg, &self.worker_id)
            .await
            .map_err(fetching)?;
        let req = v1::FetchArtifactRequest {
            worker_id: self.worker_id.clone(),
            job_id: input,
            // Job 0: a shipped file, named by its digest.
            digest: digest.to_string(),
        };
        let call = clients.work.fetch_artifact(req);
        let mut stream = match self
            .link
            .call(clients.generation, CallKind::Quick, call)
            .await
        {
            Ok(stream) => stream,
            Err(e) => {
                self.link.failed(clients.generation, &e);
                return Err(fetching(e));
            }
        };
        let mut bytes: Vec<u8> = Vec::new();
        let mut total = None;
        // Each piece within the deadline of a small call, and the whole within that of its size once the first
        // piece says it: a member that goes silent mid-transfer does not hold the chunk forever.
        let started = tokio::time::Instant::now();
        let mut whole = CallKind::Quick.deadline();
        loop {
            let left = whole.saturating_sub(started.elapsed());
            let next = within(left.min(CallKind::Quick.deadline()), stream.message()).await;
            let Some(piece) = next.map_err(|e| {
                self.link.failed(clients.generation, &e);
                fetching(e)
            })?
            else {
                break;
            };
            if piece.offset != bytes.len() as u64 || piece.digest != digest {
                return Err(format!(
                    "job {input}'s artifact arrived out of order or with another digest"
                ));
            }
            if total.is_none() {
                let t =
                    usize::try_from(piece.total).map_err(|_| "artifact too large".to_string())?;
                bytes.reserve_exact(t);
                total = Some(t);
                whole = CallKind::Transfer { bytes: piece.total }.deadline();
            }
            bytes.extend_from_slice(&piece.data);
        }
        if Some(bytes.len()) != total || blake3::hash(&bytes).to_hex().as_str() != digest {
            return Err(format!(
                "job {input}'s artifact is incomplete or does not match its digest"
            ));
        }
        info!(job = input, bytes = bytes.len(), "input artifact fetched");
        Ok(bytes)
    }
}

fn write_atomically(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}
#[cfg(test)]
mod tests {
    use super::*;

    fn lease(input_job: u64, inputs: &[(u64, &str)]) -> v1::ChunkLease {
        v1::ChunkLease {
            input_job,
            input_digest: if input_job != 0 {
                "old".into()
            } else {
                String::new()
            },
            inputs: inputs
                .iter()
                .map(|(j, d)| v1::InputArtifact {
                    job_id: *j,
                    digest: d.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_names_its_inputs_in_order_or_the_single_one_of_older_coordinators() {
        assert!(lease_inputs(&lease(0, &[])).is_empty());
        assert_eq!(lease_inputs(&lease(4, &[])), [(4, "old".to_string())]);
        assert_eq!(
            lease_inputs(&lease(0, &[(7, "b"), (3, "a"), (7, "b")])),
            [
                (7, "b".to_string()),
                (3, "a".to_string()),
                (7, "b".to_string())
            ]
        );
        // The list wins when both are there.
        assert_eq!(lease_inputs(&lease(4, &[(5, "x")])), [(5, "x".to_string())]);
    }
}
