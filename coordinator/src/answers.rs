//! Answer assembly: a job's answer, its merged artifact and its stream of solutions, built from the store on the
//! blocking pool, never under the core's lock. It exists apart from the shell because it is the one place where a
//! job's size shows: every function here reads the stored outputs one at a time, so its memory is bounded by the
//! answer the space keeps (the tally and the smallest solutions), never by the job.
//!
//! Each function blocks; the shell runs them with `spawn_blocking` once everything staged is durable, with what
//! the core handed out under the lock.

use std::sync::Arc;

use sweep_space::{AnswerMerge, ChunkOutput, SpaceJob};
use tokio::sync::{mpsc, watch};

use crate::core::{CoreError, KeptAnswer, PoisonedChunk, SlotOrder};
use crate::scheduler::{ChunkRecord, JobId};
use crate::store::{Store, StoreError};

/// The most solutions one piece of the solutions stream carries.
pub const SOLUTIONS_PIECE: usize = 16_384;

/// A job's stream of solutions: pieces of one chunk's list, in chunk order, or why the stream ended early.
pub type SolutionPieces = mpsc::Receiver<Result<(u64, Vec<String>), CoreError>>;

/// Job `id`'s answer over its stored outputs, and its poisoned chunks. `cached` is the answer a finished job
/// kept (only the poisoned chunks are read then); `merged` the answer the core merged as results were accepted,
/// when it covers every stored output; without either, the answer is merged from the store.
pub fn answer(
    store: &Store,
    id: JobId,
    job: &SpaceJob,
    (n_chunks, order): (u64, &SlotOrder),
    cached: Option<KeptAnswer>,
    merged: Option<AnswerMerge>,
) -> Result<(KeptAnswer, Vec<PoisonedChunk>), CoreError> {
    let poisoned = store
        .chunks(id)?
        .into_iter()
        .filter_map(|(chunk, rec)| match rec {
            ChunkRecord::Poisoned {
                attempts,
                last_error,
            } => Some(PoisonedChunk {
                chunk,
                attempts,
                last_error,
            }),
            _ => None,
        })
        .collect();
    if let Some(r) = cached {
        return Ok((r, poisoned));
    }
    let merge = match merged {
        // Merged as the results were accepted: no pass over the stored lists at the end of a job.
        Some(m) => m,
        None => {
            // One output at a time: the answer keeps the tally and the smallest solutions, so its memory does
            // not grow with the number of solutions stored.
            let mut merge = AnswerMerge::default();
            store.for_each_output(id, n_chunks, &mut |_, out| {
                merge.add(&out);
                Ok::<(), CoreError>(())
            })?;
            merge
        }
    };
    let mut answer = merge.finish();
    answer.artifact = match store.artifact(id)? {
        Some(merged) => merged,
        None if store.has_chunk_artifacts(id)? => merge_outputs(job, store.outputs(id)?, order)
            .map_err(|e| CoreError::Internal(format!("merging artifacts: {e}")))?,
        None => Vec::new(),
    };
    // The texts are what every caller sends or keeps; a space may write them without a tree.
    let (json, text) = job.result_texts(&answer);
    drop(answer);
    release_freed_memory();
    let result = KeptAnswer {
        json: Arc::from(json),
        text: Arc::from(text),
    };
    Ok((result, poisoned))
}

/// A finished job's chunk artifacts merged into one, in chunk order; `None` when its chunks produced none.
pub fn merged_artifact(
    store: &Store,
    id: JobId,
    job: &SpaceJob,
    order: &SlotOrder,
) -> Result<Option<Vec<u8>>, CoreError> {
    // Most jobs have no artifacts: do not read a million outputs to find that out.
    if !store.has_chunk_artifacts(id)? {
        return Ok(None);
    }
    let outputs = store.outputs(id)?;
    if outputs.iter().all(|(_, o)| o.artifact.is_empty()) {
        return Ok(None);
    }
    merge_outputs(job, outputs, order)
        .map(Some)
        .map_err(|e| CoreError::Internal(format!("merging artifacts: {e}")))
}

/// Sends every solution job `id` stored, in chunk order, as pieces of at most [`SOLUTIONS_PIECE`] solutions (or
/// about a MB), as the store is read: the channel is small, so the reader's pace bounds the memory, never the
/// job's size. Stops when the reader goes away or the coordinator is `stopping`.
pub fn send_solutions(
    store: &Store,
    id: JobId,
    n_chunks: u64,
    tx: &mpsc::Sender<Result<(u64, Vec<String>), CoreError>>,
    stopping: &watch::Receiver<bool>,
) {
    let walked = store.for_each_output(id, n_chunks, &mut |chunk, out| {
        let mut piece = Vec::new();
        let mut bytes = 0;
        for s in out.solutions {
            bytes += s.len();
            piece.push(s);
            if piece.len() >= SOLUTIONS_PIECE || bytes >= 1 << 20 {
                bytes = 0;
                send_piece(tx, stopping, chunk, std::mem::take(&mut piece))?;
            }
        }
        if !piece.is_empty() {
            send_piece(tx, stopping, chunk, piece)?;
        }
        Ok(())
    });
    // The reader went away or the coordinator is stopping: nobody to tell.
    if let Err(StreamStop(Some(e))) = walked {
        let _ = tx.blocking_send(Err(e));
    }
}

/// Why a solutions stream ended early: the store failed (`Some`), or nobody reads it any more (`None`).
struct StreamStop(Option<CoreError>);

impl From<StoreError> for StreamStop {
    fn from(e: StoreError) -> Self {
        StreamStop(Some(e.into()))
    }
}

fn send_piece(
    tx: &mpsc::Sender<Result<(u64, Vec<String>), CoreError>>,
    stopping: &watch::Receiver<bool>,
    chunk: u64,
    piece: Vec<String>,
) -> Result<(), StreamStop> {
    if *stopping.borrow() {
        return Err(StreamStop(None));
    }
    tx.blocking_send(Ok((chunk, piece)))
        .map_err(|_| StreamStop(None))
}

/// The job's merged artifact from its slots' outputs, in the order of the plan's items (a split chunk's
/// pieces where their parts lie in it).
fn merge_outputs(
    job: &SpaceJob,
    mut outputs: Vec<(u64, ChunkOutput)>,
    order: &SlotOrder,
) -> Result<Vec<u8>, sweep_space::SpaceError> {
    if outputs.iter().all(|(_, o)| o.artifact.is_empty()) {
        return Ok(Vec::new());
    }
    outputs.sort_by(|a, b| order.key(a.0).cmp(&order.key(b.0)));
    let mut it = outputs.iter().map(|(_, o)| o.artifact.as_slice());
    job.merge_artifacts(&mut it)
}

/// Hands the pages of memory just freed back to the system. A large answer (its shown solutions, and the result
/// tree of a space that writes its texts from one: 15 MB for 10,000 stars, before the star space wrote them
/// directly) is freed in this blocking thread's malloc arena, where glibc keeps it: the next
/// large allocations (the answer's texts sent, and in `sweep run` received, by other threads of the same
/// process) take fresh pages from other arenas, and the process's peak grows by the whole tree. Freeing the
/// tree only after the texts were sent raised a listing `sweep run star --points 12` from 46 to 57 MB.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the system; it touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
