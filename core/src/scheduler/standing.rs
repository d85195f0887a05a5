//! A worker's standing: the identity it is judged under, its bad results and refusal, draining. Apart because
//! leasing and completion both consult it, and it holds nothing of a chunk's own state.

use super::Scheduler;

impl Scheduler {
    /// From now on `worker`'s standing (bad results, refusal, chunks it may not get again) is kept under
    /// `identity`, which the caller has authenticated (a token): every name that identity registers shares it,
    /// so a liar cannot start afresh under a new name.
    pub fn bind_identity(&mut self, worker: &str, identity: &str) {
        self.identities
            .insert(worker.to_string(), identity.to_string());
    }

    /// The key `worker`'s standing is kept under: its identity if one is bound, else its name.
    pub(super) fn standing<'a>(&'a self, worker: &'a str) -> &'a str {
        self.identities.get(worker).map_or(worker, String::as_str)
    }

    /// Counts one bad result (failed verification, outvoted) against `worker`; true once it is refused work.
    pub fn record_bad_result(&mut self, worker: &str) -> bool {
        let key = self.standing(worker).to_string();
        let n = self.bad_results.entry(key).or_insert(0);
        *n += 1;
        *n >= self.cfg.max_bad_results
    }

    pub fn bad_results(&self, worker: &str) -> u32 {
        self.bad_results
            .get(self.standing(worker))
            .copied()
            .unwrap_or(0)
    }

    /// Refused work for too many bad results.
    pub fn is_banned(&self, worker: &str) -> bool {
        self.bad_results(worker) >= self.cfg.max_bad_results
    }

    /// `worker` finishes the chunks it holds and gets no new ones.
    pub fn drain(&mut self, worker: &str) {
        self.draining.insert(worker.to_string());
    }

    pub fn is_draining(&self, worker: &str) -> bool {
        self.draining.contains(worker)
    }

    /// Outstanding leases held by `worker`.
    pub fn leases_held(&self, worker: &str) -> usize {
        self.leases.values().filter(|l| l.worker == worker).count()
    }
}
