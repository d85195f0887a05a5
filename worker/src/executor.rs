//! The search threads: each takes the next queued chunk, runs it and leaves its report or failure for the
//! reporter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sweep_proto::v1;
use sweep_space::{ChunkControl, ChunkId};
use tokio::sync::watch;
use tracing::warn;

use crate::inputs::PrepError;
use crate::shared::Shared;
use crate::state::Outgoing;

/// One search thread: an OS thread of its own for the worker's life, which takes the next queued chunk
/// itself when one ends. Handing each chunk from an async task to the blocking pool and back cost two thread
/// wake-ups per chunk, and on short chunks a search thread waited for a runtime thread to be scheduled (behind
/// the other search thread) while its own core stood idle. The runtime is entered only to wait: for work, for a
/// job to be built, for free threads.
pub(crate) fn executor(
    sh: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    rt: tokio::runtime::Handle,
) {
    loop {
        // Taken from the queue and marked running under one lock: in between, the leaser would count the chunk
        // nowhere and lease one too many, and the reporter could think the worker idle and stop.
        let next = {
            let mut st = sh.lock();
            if st.stopping {
                return;
            }
            st.queue.pop_front().map(|lease| {
                let resume = (!lease.checkpoint.is_empty()).then(|| lease.checkpoint.clone());
                // Running from here on, so heartbeats keep the lease while its inputs are fetched.
                let ctl = Arc::new(ChunkControl::new(resume));
                st.running.insert(lease.lease_id, ctl.clone());
                st.generations.insert(lease.lease_id, lease.generation);
                (lease, ctl)
            })
        };
        let Some((lease, ctl)) = next else {
            let gone = rt.block_on(async {
                tokio::select! {
                    _ = sh.work_ready.notified() => false,
                    // The worker's task was dropped without stopping us: nothing will ever wake this thread.
                    r = stop.changed() => r.is_err(),
                }
            });
            if gone {
                return;
            }
            continue;
        };
        let started = Instant::now();
        let mut transient = false;
        let prepared = rt.block_on(sh.job(&lease));
        // A chunk that needs k threads waits for k free ones (never more than the worker has).
        let want = prepared
            .as_ref()
            .map_or(1, |j| j.threads_per_chunk().clamp(1, sh.cfg.threads as u32));
        let Ok(_permits) = rt.block_on(sh.slots.clone().acquire_many_owned(want)) else {
            return;
        };
        if prepared.as_ref().is_ok_and(|j| j.splits()) {
            sh.lock().splits.insert(
                lease.lease_id,
                crate::state::RunSplits {
                    base: lease.generation,
                    ..Default::default()
                },
            );
        }
        ctl.set_threads(want);
        ctl.set_job(lease.job_id);
        ctl.set_count_only(lease.count_only);
        if sh.lock().stopping {
            ctl.request_stop();
        }
        let outcome = match prepared {
            Ok(job) => {
                let (n, c) = (lease.n_chunks, lease.chunk);
                // The slot reported for is the lease's (a piece of a split chunk runs its plan chunk).
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job.run_chunk(ChunkId::new(n, c), ctl.control())
                }));
                match ran {
                    Ok(r) => r.map_err(|e| {
                        (
                            matches!(e, sweep_space::SpaceError::Cancelled),
                            e.to_string(),
                        )
                    }),
                    Err(panic) => Err((
                        false,
                        format!("the search kernel panicked: {}", panic_message(&*panic)),
                    )),
                }
            }
            Err(PrepError::Fatal(e)) => Err((false, e)),
            Err(PrepError::Transient(e)) => {
                transient = true;
                // Do not spin through the queue while the coordinator is away.
                std::thread::sleep(Duration::from_millis(500));
                Err((false, e))
            }
        };
        let secs = started.elapsed().as_secs_f64();
        // Encoded here, on this thread and before the lock. A listed chunk's thousands of strings are then freed
        // by the thread that allocated them: freed by the reporter, they made it hold this thread's malloc arena
        // lock, and perf showed search threads asleep on that lock for 5-20 ms at a time. And the other search
        // threads never wait for the encoding under the lock.
        let outcome = outcome.map(|mut out| {
            // The engine's promise for a job that keeps counts only, whether or not its kernel (or program)
            // listed anything: no list crosses the network or reaches the store.
            if lease.count_only {
                out.solutions = Vec::new();
            }
            #[cfg(feature = "lie")]
            if let Some(lie) = sh.cfg.lie {
                lie.apply(&mut out);
            }
            let nodes = out.nodes;
            let report = v1::ChunkReport {
                lease_id: lease.lease_id,
                job_id: lease.job_id,
                chunk: lease.slot,
                output: Some(out.into()),
                elapsed_s: secs,
                generation: lease.generation + ctl.handoffs_made(),
            };
            let report = Outgoing {
                lease_id: lease.lease_id,
                job_id: lease.job_id,
                chunk: lease.slot,
                report: report.encode_shared(),
            };
            (nodes, report)
        });
        let mut st = sh.lock();
        st.running.remove(&lease.lease_id);
        st.state_sent.remove(&lease.lease_id);
        st.generations.remove(&lease.lease_id);
        match outcome {
            Ok((nodes, report)) => {
                st.stats.chunks_done += 1;
                st.stats.nodes += nodes;
                st.note_chunk_time(secs);
                st.finish_split_run(lease.lease_id, ctl.take_handoffs(), report, &sh.worker_id);
            }
            Err((stopped, e)) => {
                // Stopped on request (shutdown, revoked lease): not a failure of the chunk.
                let cancelled = ctl.control().is_cancelled()
                    || transient
                    || (stopped && ctl.control().is_stop_requested());
                // Parts it gave away and not recorded yet go with it: its slot runs again from its recorded
                // part, which covers them.
                st.splits.remove(&lease.lease_id);
                let state = ctl.take_resume_state_in();
                if !cancelled {
                    st.stats.chunks_failed += 1;
                    warn!(job = lease.job_id, chunk = lease.chunk, error = %e, "chunk failed");
                }
                st.failures.push(v1::FailRequest {
                    worker_id: sh.worker_id.clone(),
                    lease_id: lease.lease_id,
                    error: e,
                    // A chunk we cancelled (revoked, or shutdown) did not fail: hand it back.
                    release: cancelled,
                    // Its newest state, so the next attempt (here or elsewhere) continues from it.
                    generation: lease.generation + state.as_ref().map_or(0, |s| s.1),
                    checkpoint: state.map(|s| s.0),
                });
            }
        }
        drop(st);
        sh.outbox_ready.notify_one();
        sh.room.notify_one();
    }
}

/// What a panicking kernel said, for the failure report (panics carry a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}
