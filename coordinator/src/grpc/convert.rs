//! Domain views to wire messages and back: the edge where `v1` types meet the core's.

use sweep_proto::v1;

use crate::auth::Caller;
use crate::core::{
    Ack, AckKind, Actor, FailedAttempt, JobView, LeaseView, Listing, PoisonedChunk, WorkerView,
};
use crate::scheduler::{IdentityUse, JobState};

pub fn job_state(s: JobState) -> v1::JobState {
    match s {
        JobState::Running => v1::JobState::Running,
        JobState::Paused => v1::JobState::Paused,
        JobState::Cancelled => v1::JobState::Cancelled,
        JobState::Done => v1::JobState::Done,
        JobState::DoneWithPoisonedChunks => v1::JobState::DoneWithPoisonedChunks,
    }
}

pub fn job_info(j: JobView) -> v1::JobInfo {
    v1::JobInfo {
        id: j.id,
        space: j.space,
        params_json: j.params_json,
        state: job_state(j.state) as i32,
        priority: j.priority,
        chunks_total: j.chunks_total,
        chunks_done: j.chunks_done,
        chunks_leased: j.chunks_leased,
        chunks_poisoned: j.chunks_poisoned,
        reissued: j.reissued,
        nodes: j.nodes.to_string(),
        running_nodes: j.running_nodes,
        total_nodes: j.total_nodes.map(|n| n.to_string()).unwrap_or_default(),
        estimated_nodes: j.estimated_nodes.map(|n| n.to_string()).unwrap_or_default(),
        created_unix_ms: j.created_ms,
        finished_unix_ms: j.finished_ms,
        workers: j.workers,
        completions: j.completions,
        duplicates: j.duplicates,
        input_job: j.input_jobs.first().copied().unwrap_or(0),
        input_jobs: j.input_jobs,
        inputs_waiting: j.inputs_waiting,
        artifact_digest: j.artifact_digest.unwrap_or_default(),
        replicate: j.replicate,
        disagreements: j.disagreements,
        unverified: j.unverified,
        failures: j.failures.into_iter().map(failed_attempt).collect(),
        checkpoints: j.checkpoints,
        listing: listing(j.listing) as i32,
        solutions_stored: j.solutions_stored,
        counters: j
            .counters
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect(),
        max_attempts: j.max_attempts,
        chunk_memory: j.chunk_memory.unwrap_or(0),
        waiting: j.waiting.map(|w| w.to_string()).unwrap_or_default(),
        owner: j.owner,
        share: j.share,
        pieces: j.pieces,
        chunks_covered: j.chunks_covered,
    }
}

fn listing(l: Listing) -> v1::Listing {
    match l {
        Listing::All => v1::Listing::All,
        Listing::CountOnly => v1::Listing::CountOnly,
        Listing::Stopped => v1::Listing::Stopped,
    }
}

fn failed_attempt(f: FailedAttempt) -> v1::FailedAttempt {
    v1::FailedAttempt {
        chunk: f.chunk,
        worker: f.worker,
        error: f.error,
        unix_ms: f.unix_ms,
    }
}

pub fn poisoned_chunk(p: PoisonedChunk) -> v1::PoisonedChunk {
    v1::PoisonedChunk {
        chunk: p.chunk,
        attempts: p.attempts,
        last_error: p.last_error,
    }
}

pub fn worker_status(w: WorkerView) -> v1::WorkerStatus {
    v1::WorkerStatus {
        name: w.name,
        threads: w.threads,
        memory_bytes: w.memory_bytes,
        last_seen_unix_ms: w.last_seen_ms,
        chunks_done: w.chunks_done,
        leases_held: w.leases_held,
        bad_results: w.bad_results,
        banned: w.banned,
        draining: w.draining,
        version: w.version,
        containment: w.containment,
    }
}

pub fn chunk_lease(l: LeaseView) -> v1::ChunkLease {
    let inputs: Vec<v1::InputArtifact> = l
        .inputs
        .into_iter()
        .map(|(job_id, digest)| v1::InputArtifact { job_id, digest })
        .collect();
    // Workers older than `inputs` understand a single input.
    let (input_job, input_digest) = match inputs.as_slice() {
        [one] => (one.job_id, one.digest.clone()),
        _ => (0, String::new()),
    };
    v1::ChunkLease {
        lease_id: l.lease,
        job_id: l.job,
        space: l.space,
        params_json: l.params_json,
        n_chunks: l.n_chunks,
        chunk: l.chunk,
        slot: l.slot,
        generation: l.generation,
        deadline_unix_ms: l.deadline_ms,
        input_job,
        input_digest,
        inputs,
        checkpoint: l.checkpoint.unwrap_or_default(),
        shipped: l.shipped,
        count_only: l.count_only,
        // The caller sets the term it leads in.
        term: 0,
    }
}

pub fn ack_status(k: AckKind) -> v1::AckStatus {
    match k {
        AckKind::Accepted => v1::AckStatus::Accepted,
        AckKind::Duplicate => v1::AckStatus::Duplicate,
        AckKind::Rejected => v1::AckStatus::Rejected,
        AckKind::Voted => v1::AckStatus::Voted,
    }
}

pub fn report_ack(a: Ack) -> v1::ReportAck {
    v1::ReportAck {
        lease_id: a.lease,
        status: ack_status(a.kind) as i32,
        message: a.message,
    }
}

pub fn identity_info(u: IdentityUse) -> v1::IdentityInfo {
    v1::IdentityInfo {
        identity: u.identity,
        share: u.share,
        running_threads: u.running_threads,
        decayed_thread_seconds: u.decayed_thread_secs,
    }
}

/// Whether the caller holds an admin token: true without tokens (the coordinator then serves anyone as
/// admin, see `auth.rs`).
pub fn is_admin<T>(req: &tonic::Request<T>) -> bool {
    req.extensions()
        .get::<Caller>()
        .is_none_or(|c| c.role == crate::auth::Role::Admin)
}

/// Who is asking to cancel, pause or resume a job: an admin without tokens (the coordinator then serves anyone
/// as admin, see `auth.rs`), else by the token's role. A worker token never gets this far (the layer asks for
/// a user token), and would be held to its own jobs, of which it has none.
pub fn actor<T>(req: &tonic::Request<T>) -> Actor {
    match req.extensions().get::<Caller>() {
        None => Actor::Admin,
        Some(c) if c.role == crate::auth::Role::Admin => Actor::Admin,
        Some(c) => Actor::User(c.identity.clone()),
    }
}

/// The caller's identity as the auth layer proved it (its token), if tokens are on.
pub fn identity<T>(req: &tonic::Request<T>) -> Option<String> {
    req.extensions().get::<Caller>().map(|c| c.identity.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_keeps_its_label_on_the_wire() {
        for s in JobState::ALL {
            assert_eq!(job_state(s).label(), s.as_str());
            assert_eq!(job_state(s).is_finished(), s.is_finished());
        }
    }
}
