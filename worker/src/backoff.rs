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
}
