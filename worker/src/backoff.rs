//! Retry pacing for every call to a coordinator that may be restarting.

use std::time::Duration;

/// Exponential backoff with a cap, for talking to a coordinator that may be restarting.
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(Duration::from_millis(50))
    }

    /// What the next [`Backoff::wait`] sleeps.
    pub(crate) fn delay(&self) -> Duration {
        self.0
    }

    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
    }

    /// After a call that failed with `e`. A member that answered "not the leader" is alive, and a replicated
    /// coordinator elects a leader within a second or two: the call goes again after [`NOT_LEADER_PAUSE`],
    /// without growing the backoff, so a worker is back soon after the new leader serves, where a backoff
    /// doubled through the election would keep it away up to 2 s longer. Anything else backs off.
    pub(crate) async fn wait_after(&mut self, e: &tonic::Status) {
        if sweep_proto::is_not_leader(e) {
            tokio::time::sleep(NOT_LEADER_PAUSE).await;
        } else {
            self.wait().await;
        }
    }
}

/// The pause before a call answered "not the leader" is sent again (see [`Backoff::wait_after`]).
pub(crate) const NOT_LEADER_PAUSE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    /// A not-leader answer is tried again after a short fixed pause and leaves the backoff as it was; any
    /// other failure doubles it.
    #[tokio::test]
    async fn a_not_leader_answer_is_retried_soon_and_other_failures_back_off() {
        let mut b = Backoff::new();
        let not_leader = sweep_proto::not_leader(Some("http://b:7878"));
        let started = tokio::time::Instant::now();
        b.wait_after(&not_leader).await;
        assert!(started.elapsed() >= NOT_LEADER_PAUSE);
        assert_eq!(b.delay(), Duration::from_millis(50));
        b.wait_after(&tonic::Status::unavailable("connection refused"))
            .await;
        assert_eq!(b.delay(), Duration::from_millis(100));
        b.wait_after(&sweep_proto::not_leader(None)).await;
        assert_eq!(b.delay(), Duration::from_millis(100));
    }
}
