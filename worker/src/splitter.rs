//! The task that splits running chunks when this worker's threads would idle, and delivers every split to the
//! coordinator before the split chunk's result.
//!
//! A kernel asked to split ([`ChunkControl::request_split`]) gives part of its unsearched work away; the part
//! becomes a piece of the job only once the coordinator has recorded it durably (the `Split` call). Until every
//! split of a run is answered, the run's result is held here, not reported: a result names the generation of
//! the part it covers, and the coordinator takes it only once that part is the slot's. A split the coordinator
//! refuses (the lease ended, the job stopped, the states do not check) voids the run: what it kept is no longer
//! a part anyone recorded, so the run is cancelled and its lease handed back, and the chunk runs again from its
//! last recorded state. Nothing is lost and nothing is counted twice either way.
//!
//! Splits are asked for in two ways: by the coordinator in a heartbeat's answer (threads elsewhere are idle),
//! and here, when one of this worker's threads has found nothing to run for [`IDLE_BEFORE_SPLIT`]: then the
//! oldest running chunk that can split is asked, and its piece is taken by this worker at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sweep_proto::deadline::CallKind;
use sweep_proto::v1;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::shared::Shared;
use crate::state::{void_release, RunSplits};

/// How often running chunks are looked at for parts given away and idle threads: one pass over the running
/// chunks under the lock.
const POLL: Duration = Duration::from_millis(5);
/// How long a thread must have had nothing to run before a running chunk is split for it: a lease on its way
/// is cheaper than a split.
pub(crate) const IDLE_BEFORE_SPLIT: Duration = Duration::from_millis(20);

/// Whether the coordinator's refusal of a split is final: the lease, job or states are wrong, and asking
/// again cannot change that (anything else, such as a coordinator restarting, is retried).
fn is_final(status: &tonic::Status) -> bool {
    use tonic::Code::*;
    matches!(
        status.code(),
        FailedPrecondition
            | InvalidArgument
            | NotFound
            | OutOfRange
            | ResourceExhausted
            | PermissionDenied
            | Unauthenticated
    )
}

pub(crate) async fn splitter(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut idle_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.changed() => {}
        }
        let next = {
            let mut st = sh.lock();
            let st = &mut *st;
            for (lease, rs) in st.splits.iter_mut() {
                if let Some(ctl) = st.running.get(lease) {
                    rs.queue.extend(ctl.take_handoffs());
                }
            }
            // A thread with nothing to run, for a while, while a running chunk could give work away.
            let idle = !st.stopping && st.queue.is_empty() && sh.slots.available_permits() > 0;
            idle_since = if idle {
                idle_since.or(Some(Instant::now()))
            } else {
                None
            };
            if idle_since.is_some_and(|t| t.elapsed() >= IDLE_BEFORE_SPLIT) {
                // As many asks out as idle threads, one per run, oldest runs first: a chunk split in two is
                // two runs that can be asked next time, so k idle threads are fed in about log2(k) rounds.
                let pending = |l: &u64, rs: &RunSplits| {
                    !rs.queue.is_empty() || st.running.get(l).is_some_and(|c| c.split_pending())
                };
                let asked = st.splits.iter().filter(|(l, rs)| pending(l, rs)).count();
                let mut free: Vec<u64> = st
                    .splits
                    .iter()
                    .filter(|(l, rs)| {
                        !rs.finished && !rs.void && st.running.contains_key(*l) && !pending(l, rs)
                    })
                    .map(|(l, _)| *l)
                    .collect();
                free.sort_unstable();
                let want = sh.slots.available_permits().saturating_sub(asked);
                for l in free.into_iter().take(want) {
                    if let Some(ctl) = st.running.get(&l) {
                        ctl.request_split();
                    }
                }
            }
            if st.stopping && st.running.is_empty() && !st.splits_unsettled() && *stop.borrow() {
                return;
            }
            let take = sh.slots.available_permits() > 0 && st.queue.is_empty() && !st.stopping;
            st.splits
                .iter_mut()
                .filter(|(_, rs)| !rs.sending && !rs.void)
                .find_map(|(lease, rs)| {
                    let h = rs.queue.front()?.clone();
                    rs.sending = true;
                    Some(v1::SplitRequest {
                        worker_id: sh.worker_id.clone(),
                        lease_id: *lease,
                        generation: rs.base + rs.acked,
                        kept: h.kept,
                        given: h.given,
                        take,
                    })
                })
        };
        let Some(req) = next else {
            continue;
        };
        let lease = req.lease_id;
        let answer = send(&sh, req).await;
        if settle(&sh, lease, answer) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Applies the coordinator's answer to a split of `lease`; true when it should be sent again after a pause.
fn settle(sh: &Shared, lease: u64, answer: Result<v1::SplitResponse, tonic::Status>) -> bool {
    let mut st = sh.lock();
    let st = &mut *st;
    let Some(rs) = st.splits.get_mut(&lease) else {
        return false;
    };
    rs.sending = false;
    match answer {
        Ok(resp) => {
            rs.queue.pop_front();
            rs.acked += 1;
            debug!(lease, piece = resp.piece, "split recorded");
            if let Some(l) = resp.lease {
                // Taken at once: a thread of ours is idle.
                st.queue.push_front(l);
                sh.work_ready.notify_one();
            }
            if rs.queue.is_empty() {
                if let Some(report) = rs.held.take() {
                    st.splits.remove(&lease);
                    st.outbox.push(report);
                    sh.outbox_ready.notify_one();
                }
            }
        }
        Err(e) if is_final(&e) => {
            warn!(lease, error = %e.message(), "split refused; the chunk is handed back to run again");
            rs.void = true;
            rs.queue.clear();
            if let Some(ctl) = st.running.get(&lease) {
                ctl.cancel();
            }
            if rs.held.take().is_some() || rs.finished {
                st.splits.remove(&lease);
                st.failures.push(void_release(&sh.worker_id, lease));
                sh.outbox_ready.notify_one();
            }
        }
        Err(e) => {
            info!(lease, error = %e.message(), "split not delivered; trying again");
            return true;
        }
    }
    false
}

async fn send(sh: &Shared, req: v1::SplitRequest) -> Result<v1::SplitResponse, tonic::Status> {
    let mut clients = sh.link.ready(&sh.cfg, &sh.worker_id).await?;
    let call = clients.work.split(sh.link.stamped(req));
    let r = sh
        .link
        .call(clients.generation, CallKind::Quick, call)
        .await;
    if let Err(e) = &r {
        sh.link.failed(clients.generation, e);
    }
    r
}
