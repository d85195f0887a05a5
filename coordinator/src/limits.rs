//! What one client may make the coordinator hold or store: the plain limits and checks of the core
//! ([`sweep_core::limits`], re-exported here so the shell names them in one place), and the bound on open
//! `Watch` streams, which is a semaphore held for a stream's life and so belongs to the async shell.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use sweep_core::limits::*;

/// The open `Watch` streams, bounded: each holds a slot until it ends.
pub struct WatchSlots {
    slots: Arc<Semaphore>,
    max: usize,
}

impl WatchSlots {
    pub fn new(max: usize) -> WatchSlots {
        WatchSlots {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one `Watch` stream, held until the stream ends.
    pub fn acquire(&self) -> Result<OwnedSemaphorePermit, String> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            format!(
                "too many open Watch streams (limit {}, --max-watch-streams); try again later",
                self.max
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_slots_come_back_when_released() {
        let w = WatchSlots::new(2);
        let a = w.acquire().unwrap();
        let _b = w.acquire().unwrap();
        let e = w.acquire().unwrap_err();
        assert!(e.contains("--max-watch-streams"), "{e}");
        drop(a);
        assert!(w.acquire().is_ok());
    }
}
