//! The task that keeps chunks leased ahead of the executors.

use std::sync::Arc;
use std::time::Duration;

use sweep_proto::deadline::CallKind;
use sweep_proto::v1;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::config::{register_request, WorkerConfig};
use crate::shared::Shared;
use crate::state::State;

/// Queued work the leaser keeps ahead of the executors, in time: while chunks are short (the last chunks of
/// star n = 12 take about a millisecond), one queued chunk per thread can run out before the next lease comes
/// back, and a lease per chunk costs the coordinator a call per chunk. With this and batched refills, star
/// n = 12 made 90 lease calls instead of 248; its run time did not change measurably on two cores.
pub const LEASE_AHEAD: Duration = Duration::from_millis(50);

/// Queued chunks per thread at most, however short the chunks: leases held here are chunks no other worker
/// can take at the end of a job.
const MAX_PREFETCH_PER_THREAD: usize = 16;

/// Finished chunks whose reports the coordinator has not acknowledged (queued or being sent) at which the
/// worker leases no more. Each is still a lease in the coordinator's memory until its report is applied, so
/// without this bound a worker whose chunks finish faster than the coordinator commits them kept leasing
/// and the coordinator's lease map and report queue grew with the backlog (21 MB of leases at 300,000 tiny
/// chunks, measured). A commit acknowledges thousands of reports at once, so this many keep the pipeline full.
pub const MAX_UNACKED_REPORTS: usize = 4_096;

impl State {
    /// Chunks the leaser should ask for now: enough to refill the queue to the threads plus the prefetch, in
    /// batches of half the prefetch while work is queued, and none while [`MAX_UNACKED_REPORTS`] reports
    /// wait for their acknowledgement.
    fn lease_want(&self, cfg: &WorkerConfig) -> usize {
        if self.outbox.len() + self.sending >= MAX_UNACKED_REPORTS {
            return 0;
        }
        let prefetch = self.prefetch(cfg);
        let want = (cfg.threads + prefetch).saturating_sub(self.queue.len() + self.running.len());
        // Refilled in batches of half the prefetch while work is queued: a lease per finished chunk woke
        // the coordinator (and preempted a search thread) once per chunk.
        if self.queue.is_empty() || want >= (prefetch / 2).max(1) {
            want
        } else {
            0
        }
    }

    /// Chunks to keep queued: the configured prefetch, or enough chunks of the recent length to cover
    /// [`LEASE_AHEAD`] on every thread when that is more.
    fn prefetch(&self, cfg: &WorkerConfig) -> usize {
        let Some(secs) = self.chunk_secs.filter(|s| *s > 0.0) else {
            return cfg.prefetch;
        };
        let threads = cfg.threads.max(1);
        let ahead = (threads as f64 * LEASE_AHEAD.as_secs_f64() / secs).ceil();
        let ahead = if ahead.is_finite() {
            (ahead as usize).min(threads * MAX_PREFETCH_PER_THREAD)
        } else {
            0
        };
        cfg.prefetch.max(ahead)
    }
}

/// How long a stopping worker waits for the answer to a lease request already sent.
const IN_FLIGHT_LEASE_GRACE: Duration = Duration::from_secs(2);

pub(crate) async fn leaser(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new();
    // A request whose answer never arrived is asked again under its id, so that the chunks it was granted come
    // back instead of staying leased to this worker, unknown to it, until they expire.
    let mut request_id: u64 = 1;
    loop {
        if *stop.borrow() {
            return;
        }
        let want = sh.lock().lease_want(&sh.cfg);
        if want == 0 {
            tokio::select! {
                _ = sh.room.notified() => continue,
                _ = stop.changed() => return,
            }
        }
        // Registers first with a member the worker just moved to; failing that, backs off as a lease would.
        let ready = tokio::select! {
            r = sh.link.ready(&sh.cfg, &sh.worker_id) => r,
            _ = stop.changed() => return,
        };
        let mut clients = match ready {
            Ok(c) => c,
            Err(e) => {
                if sweep_client::is_refusal(&e) {
                    warn!(error = %e.message(), "the coordinator refused the registration");
                }
                backoff.wait_after(&e).await;
                continue;
            }
        };
        let req = v1::LeaseRequest {
            worker_id: sh.worker_id.clone(),
            max_chunks: want as u32,
            request_id,
        };
        let answer = {
            let call = sh
                .link
                .call(clients.generation, CallKind::Quick, clients.work.lease(req));
            tokio::pin!(call);
            tokio::select! {
                r = &mut call => r,
                _ = stop.changed() => {
                    // Over a network, dropping the call now could leave chunks the coordinator already granted
                    // leased to a stopped worker until they expire: the answer may be on its way. It is awaited
                    // briefly (a request that found no work is held up to 200 ms), and its chunks join the
                    // queue, which is handed back on the way out. In process the coordinator's handler runs
                    // inside this call's future and answers in the same poll that grants, so nothing granted
                    // can be dropped unanswered, and `sweep run` does not wait out the hold at its end.
                    if sh.cfg.in_process.is_none() {
                        if let Ok(Ok(resp)) = tokio::time::timeout(IN_FLIGHT_LEASE_GRACE, call).await {
                            let leases = resp.leases;
                            for l in &leases {
                                sh.link.saw_term(l.term);
                            }
                            sh.lock().queue.extend(leases);
                        }
                    }
                    return;
                }
            }
        };
        match &answer {
            Err(e) if sweep_proto::deadline::is_lost(e) => {}
            _ => request_id += 1,
        }
        let pause = match answer {
            Ok(resp) => {
                backoff = Backoff::new();
                if resp.register_again {
                    // The coordinator restarted and lost who we are: tell it again, under our name.
                    sh.link.forget_term();
                    let req = register_request(&sh.cfg, &sh.worker_id);
                    let call = clients.work.register(req);
                    if let Err(e) = sh
                        .link
                        .call(clients.generation, CallKind::Quick, call)
                        .await
                    {
                        debug!(error = %e, "register again failed");
                        sh.link.failed(clients.generation, &e);
                    } else {
                        info!("registered again with a restarted coordinator");
                    }
                    continue;
                }
                if resp.drain {
                    sh.drained.notify_one();
                    return;
                }
                if resp.leases.is_empty() {
                    Some(Duration::from_millis(resp.retry_after_ms.clamp(20, 5000)))
                } else {
                    let n = resp.leases.len();
                    for l in &resp.leases {
                        sh.link.saw_term(l.term);
                    }
                    sh.lock().queue.extend(resp.leases);
                    for _ in 0..n {
                        sh.work_ready.notify_one();
                    }
                    None
                }
            }
            Err(e) => {
                // Refused mid-run (a token rotated away): keep trying, the token file may be updated.
                if sweep_client::is_refusal(&e) {
                    warn!(error = %e.message(), "the coordinator refused the lease request");
                }
                debug!(error = %e, "lease failed; backing off");
                sh.link.failed(clients.generation, &e);
                if sweep_proto::is_not_leader(&e) {
                    Some(crate::backoff::NOT_LEADER_PAUSE)
                } else {
                    Some(backoff.delay())
                }
            }
        };
        if let Some(p) = pause {
            if p == backoff.delay() {
                backoff.wait().await;
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(p) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use sweep_space::Registry;

    use super::*;

    #[test]
    fn short_chunks_are_leased_further_ahead_within_a_bound() {
        let cfg = WorkerConfig::new("http://127.0.0.1:1", 2, Registry::new());
        let mut st = State::default();
        assert_eq!(
            st.prefetch(&cfg),
            2,
            "nothing measured yet: the configured prefetch"
        );
        st.note_chunk_time(1.0);
        assert_eq!(st.prefetch(&cfg), 2, "long chunks: the configured prefetch");
        let mut st = State::default();
        st.note_chunk_time(0.010);
        assert_eq!(st.prefetch(&cfg), 10, "50 ms ahead on each of 2 threads");
        for _ in 0..50 {
            st.note_chunk_time(0.0005);
        }
        assert_eq!(st.prefetch(&cfg), 2 * MAX_PREFETCH_PER_THREAD, "bounded");
        st.note_chunk_time(0.0);
        assert!(st.prefetch(&cfg) <= 2 * MAX_PREFETCH_PER_THREAD);
        let mut st = State::default();
        st.note_chunk_time(0.0);
        assert_eq!(st.prefetch(&cfg), 2, "a zero time says nothing");
    }

    /// Reports the coordinator has not acknowledged stop the leasing, whether queued or being sent.
    #[test]
    fn unacknowledged_reports_stop_leasing() {
        let cfg = WorkerConfig::new("http://127.0.0.1:1", 2, Registry::new());
        let mut st = State::default();
        assert_eq!(st.lease_want(&cfg), 4, "two threads and a prefetch of two");
        st.sending = MAX_UNACKED_REPORTS - 1;
        assert_eq!(st.lease_want(&cfg), 4);
        st.sending = MAX_UNACKED_REPORTS;
        assert_eq!(st.lease_want(&cfg), 0);
        st.sending = 10;
        st.outbox = (0..MAX_UNACKED_REPORTS as u64 - 10)
            .map(|i| crate::state::Outgoing {
                lease_id: i,
                job_id: 1,
                chunk: i,
                report: Default::default(),
            })
            .collect();
        assert_eq!(st.lease_want(&cfg), 0);
        st.outbox.pop();
        assert_eq!(st.lease_want(&cfg), 4, "one acknowledged: room again");
    }
}
