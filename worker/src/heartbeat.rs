//! The task that keeps running leases alive, sends their resume states and cancels revoked ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sweep_proto::deadline::CallKind;
use sweep_proto::v1;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::config::register_request;
use crate::shared::Shared;

/// How often a running chunk's resume state is sent at most: the coordinator writes each one durably, so a
/// program that saves its state every millisecond still costs one write per chunk every few seconds.
pub const RESUME_STATE_INTERVAL: Duration = Duration::from_secs(3);

pub(crate) async fn heartbeater(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // The heartbeat interval is a quarter of the lease time (7.5 s by default): waking only then would hold a
    // saved resume state back that long. So the task wakes at least every RESUME_STATE_INTERVAL and beats early
    // when a running chunk has a new state to send; otherwise it beats at the coordinator's interval.
    let mut tick = tokio::time::interval(sh.heartbeat.min(RESUME_STATE_INTERVAL));
    let mut last_beat: Option<Instant> = None;
    loop {
        // A stop (drain, SIGTERM) is told to the coordinator at once, as every beat is.
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.changed() => true,
        };
        let (progress, done, has_state) = {
            let mut st = sh.lock();
            let st = &mut *st;
            let now = Instant::now();
            let mut p: Vec<v1::LeaseProgress> = Vec::with_capacity(st.running.len());
            for (id, c) in &st.running {
                let due = st
                    .state_sent
                    .get(id)
                    .is_none_or(|t| now.duration_since(*t) >= RESUME_STATE_INTERVAL);
                let checkpoint = if due { c.take_resume_state_in() } else { None };
                if checkpoint.is_some() {
                    st.state_sent.insert(*id, now);
                }
                let base = st.generations.get(id).copied().unwrap_or(0);
                let (checkpoint, generation) = match checkpoint {
                    Some((state, splits)) => (Some(state), base + splits),
                    None => (None, base),
                };
                p.push(v1::LeaseProgress {
                    lease_id: *id,
                    nodes: c.nodes(),
                    checkpoint,
                    generation,
                });
            }
            p.extend(st.queue.iter().map(|l| v1::LeaseProgress {
                lease_id: l.lease_id,
                nodes: 0,
                checkpoint: None,
                generation: l.generation,
            }));
            let has_state = p.iter().any(|l| l.checkpoint.is_some());
            (
                p,
                st.stopping && st.running.is_empty() && st.outbox.is_empty(),
                has_state,
            )
        };
        if done {
            return;
        }
        if progress.is_empty() {
            continue;
        }
        let beat_due = stopping || last_beat.is_none_or(|t| t.elapsed() >= sh.heartbeat);
        if !beat_due && !has_state {
            continue;
        }
        last_beat = Some(Instant::now());
        let req = v1::HeartbeatRequest {
            worker_id: sh.worker_id.clone(),
            progress,
        };
        let mut clients = match sh.link.ready(&sh.cfg, &sh.worker_id).await {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "heartbeat not sent: registering with the member failed");
                continue;
            }
        };
        let beat = CallKind::Heartbeat {
            interval: sh.heartbeat,
        };
        let call = clients.work.heartbeat(sh.link.stamped(req));
        match sh.link.call(clients.generation, beat, call).await {
            Ok(resp) => {
                if resp.register_again {
                    // The coordinator restarted while every thread was busy (so no lease asked): describe this
                    // worker again, or `sweep workers` shows it with no threads until its next lease.
                    sh.link.forget_term();
                    let req = register_request(&sh.cfg, &sh.worker_id);
                    let call = clients.work.register(req);
                    match sh
                        .link
                        .call(clients.generation, CallKind::Quick, call)
                        .await
                    {
                        Ok(_) => info!("registered again with a restarted coordinator"),
                        Err(e) => {
                            debug!(error = %e, "register again failed");
                            sh.link.failed(clients.generation, &e);
                        }
                    }
                }
                if !resp.split.is_empty() {
                    let st = sh.lock();
                    for id in &resp.split {
                        if let (Some(c), true) = (st.running.get(id), st.splits.contains_key(id)) {
                            debug!(lease = id, "the coordinator asks this chunk to split");
                            c.request_split();
                        }
                    }
                }
                let revoked = resp.revoked;
                if !revoked.is_empty() {
                    let mut st = sh.lock();
                    st.queue.retain(|l| !revoked.contains(&l.lease_id));
                    for id in &revoked {
                        if let Some(c) = st.running.get(id) {
                            info!(lease = id, "lease revoked by the coordinator; cancelling");
                            c.cancel();
                        }
                    }
                    drop(st);
                    sh.room.notify_one();
                }
            }
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                sh.link.failed(clients.generation, &e);
            }
        }
    }
}
