//! The core's views of itself (`views`), computed under the lock: one job, every job, the workers, and the
//! dashboard's whole snapshot at once.

use std::collections::{HashMap, HashSet};

use crate::placement::{why_waiting, LiveWorker};
use crate::scheduler::{JobId, JobState, Millis, Scheduler};
use crate::state::Core;
use crate::views::{JobView, Observation, WorkerObservation, WorkerView};

impl Core {
    /// The scheduler, to be read: what it decided can be looked at from outside the core, never changed past
    /// it.
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// One job as it is at `now` (which says which workers are live, for [`JobView::waiting`]).
    pub fn job_view(&self, id: JobId, now: Millis) -> Option<JobView> {
        self.job_view_among(id, &self.live_takers(now))
    }

    /// The workers heard from within a lease time that take work (not draining, not refused).
    fn live_takers(&self, now: Millis) -> Vec<LiveWorker<'_>> {
        let horizon = now.saturating_sub(self.lease_ttl_ms());
        self.workers
            .iter()
            .filter(|(name, w)| {
                w.last_seen_ms >= horizon
                    && !self.sched.is_draining(name)
                    && !self.sched.is_banned(name)
            })
            .map(|(_, w)| LiveWorker {
                memory_bytes: w.memory_bytes,
                spaces: w.spaces.as_deref(),
            })
            .collect()
    }

    fn job_view_among(&self, id: JobId, live: &[LiveWorker<'_>]) -> Option<JobView> {
        let e = self.jobs.get(&id)?;
        let counts = self.sched.counts(id)?;
        let pending = counts
            .total
            .saturating_sub(counts.done + counts.leased + counts.poisoned);
        let inputs_waiting = self.sched.waiting_for(id).len() as u32;
        // Only a job that could be leased now waits for workers: a paused one waits for a person, one held for
        // its inputs for them.
        let waiting = (e.record.state == JobState::Running && pending > 0 && inputs_waiting == 0)
            .then(|| why_waiting(&e.record.space, e.record.chunk_memory, live))
            .flatten();
        let running_nodes: u64 = self
            .progress
            .iter()
            .filter(|(lease, _)| self.sched.lease_job_chunk(**lease).map(|(j, _)| j) == Some(id))
            .map(|(_, n)| *n)
            .sum();
        let workers: HashSet<String> = self
            .sched
            .leases_of(id)
            .into_iter()
            .map(|(_, _, w)| w)
            .collect();
        Some(JobView {
            id,
            space: e.record.space.clone(),
            params_json: e.params_json.clone(),
            state: e.record.state,
            priority: e.record.priority,
            chunks_total: counts.total,
            chunks_done: counts.done,
            chunks_leased: counts.leased,
            chunks_poisoned: counts.poisoned,
            pieces: counts.pieces,
            chunks_covered: if counts.done == counts.total {
                e.record.n_chunks as f64
            } else {
                (counts.done - e.parted_done.0) as f64 + e.parted_done.1
            },
            reissued: counts.reissued,
            nodes: e.tally.nodes,
            running_nodes,
            total_nodes: e.record.total_nodes,
            // Rounded to whole nodes: a decimal on the wire like the other counters.
            estimated_nodes: e
                .estimates
                .as_ref()
                .map(|est| est.expected_total(e.tally.nodes).round() as u128),
            created_ms: e.record.created_ms,
            finished_ms: e.record.finished_ms,
            workers: workers.len() as u32,
            completions: e.tally.chunks,
            duplicates: e.record.duplicates,
            input_jobs: e.record.input_jobs.clone(),
            inputs_waiting,
            artifact_digest: e.record.artifact_digest.clone(),
            replicate: e.record.replicate,
            disagreements: counts.disagreements,
            // Without its list a chunk's counts cannot be re-checked solution by solution.
            unverified: (!e.job.verifiable() || e.record.listing.counts_only())
                && e.record.replicate < 2,
            failures: e.failures.iter().cloned().collect(),
            checkpoints: self.checkpoints.keys().filter(|(j, _)| *j == id).count() as u64,
            listing: e.record.listing,
            solutions_stored: self.usage.get(&id).map_or(0, |u| u.solutions),
            counters: e.tally.counters.clone(),
            max_attempts: self.sched.max_attempts(id).unwrap_or_default(),
            chunk_memory: e.record.chunk_memory,
            waiting,
            owner: e.record.owner.clone(),
            share: e.record.share,
        })
    }

    /// Every job at `now`, in id order.
    pub fn job_views(&self, now: Millis) -> Vec<JobView> {
        let live = self.live_takers(now);
        self.sched
            .jobs()
            .filter_map(|id| self.job_view_among(id, &live))
            .collect()
    }

    pub fn worker_view(&self, name: &str) -> Option<WorkerView> {
        let w = self.workers.get(name)?;
        Some(WorkerView {
            name: name.to_string(),
            threads: w.threads,
            memory_bytes: w.memory_bytes,
            last_seen_ms: w.last_seen_ms,
            chunks_done: w.chunks_done,
            leases_held: self.sched.leases_held(name) as u32,
            bad_results: self.sched.bad_results(name),
            banned: self.sched.is_banned(name),
            draining: self.sched.is_draining(name),
            version: w.version.clone(),
            containment: w.containment.clone(),
        })
    }

    /// Every worker that has been heard from, by name.
    pub fn worker_views(&self) -> Vec<WorkerView> {
        let mut names: Vec<&String> = self.workers.keys().collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|n| self.worker_view(n))
            .collect()
    }

    /// One consistent snapshot of jobs and workers for the dashboard and `/metrics`.
    pub fn observe(&self, now: Millis) -> Observation {
        let mut held: HashMap<String, (u32, u64)> = HashMap::new();
        for job in self.sched.jobs() {
            for (lease, _, worker) in self.sched.leases_of(job) {
                let h = held.entry(worker).or_default();
                h.0 += 1;
                h.1 += self.progress.get(&lease).copied().unwrap_or(0);
            }
        }
        let workers = self.workers.iter().map(|(name, w)| {
            let (leases, running_nodes) = held.get(name).copied().unwrap_or_default();
            WorkerObservation {
                name: name.clone(),
                threads: w.threads,
                last_seen_ms: w.last_seen_ms,
                chunks_done: w.chunks_done,
                leases,
                running_nodes,
            }
        });
        Observation {
            now_ms: now,
            lease_ttl_ms: self.lease_ttl_ms(),
            live_workers: self.live_workers(now),
            jobs: self.job_views(now),
            workers: workers.collect(),
            identities: self.identity_views(now),
        }
    }
}
