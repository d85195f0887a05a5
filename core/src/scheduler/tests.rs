//! The scheduler driven with simulated time: leases, expiry, retries, poisoning, replication and inputs.

use super::*;

fn sched(ttl: u64, max_attempts: u32) -> Scheduler {
    Scheduler::new(
        SchedulerConfig {
            lease_ttl_ms: ttl,
            max_attempts,
            max_bad_results: 3,
            usage_half_life_ms: DEFAULT_USAGE_HALF_LIFE_MS,
        },
        1,
    )
}

#[test]
fn leases_every_chunk_once_then_nothing() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 5, JobState::Running);
    let g = s.lease(0, "w", 3);
    assert_eq!(g.iter().map(|g| g.chunk).collect::<Vec<_>>(), vec![0, 1, 2]);
    let g2 = s.lease(0, "w", 10);
    assert_eq!(g2.iter().map(|g| g.chunk).collect::<Vec<_>>(), vec![3, 4]);
    assert!(s.lease(0, "w", 10).is_empty());
    assert_eq!(s.counts(1).unwrap().leased, 5);
    let ids: Vec<LeaseId> = g.iter().chain(&g2).map(|g| g.lease).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);
}

#[test]
fn expiry_reissues_and_late_result_still_counts_once() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 1, JobState::Running);
    let first = s.lease(0, "a", 1).remove(0);
    // Heartbeats keep it alive past the original deadline.
    assert!(s.heartbeat(900, "a", &[first.lease]).is_empty());
    assert!(s.expire(1500).is_empty());
    // Silence: it expires and goes to another worker.
    let exp = s.expire(2000);
    assert_eq!(
        exp,
        vec![Expired {
            lease: first.lease,
            job: 1,
            chunk: 0,
            poisoned: false
        }]
    );
    assert_eq!(s.heartbeat(2001, "a", &[first.lease]), vec![first.lease]);
    let second = s.lease(2001, "b", 1).remove(0);
    assert_eq!(second.chunk, 0);
    assert_eq!(s.counts(1).unwrap().reissued, 1);
    // The slow first worker reports after all: accepted once, then the second report is a duplicate.
    assert_eq!(
        s.complete(1, 0, first.lease),
        Completion::Accepted {
            job_finished: Some(JobState::Done),
            outvoted: vec![]
        }
    );
    assert_eq!(s.complete(1, 0, second.lease), Completion::Duplicate);
    assert_eq!(s.counts(1).unwrap().done, 1);
    assert_eq!(s.counts(1).unwrap().leased, 0);
    assert!(s.leases_of(1).is_empty());
}

#[test]
fn a_pause_of_the_coordinator_extends_leases_instead_of_expiring_them() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 2, JobState::Running);
    let a = s.lease(0, "a", 1).remove(0);
    let b = s.lease(500, "b", 1).remove(0);
    s.take_dirty();
    // The coordinator was stopped from t = 600 to t = 5,600: 5 s that nobody could renew a lease in.
    assert_eq!(s.extend_leases(5000), 2);
    assert_eq!(
        s.take_dirty().chunks.len(),
        2,
        "the new deadlines are written"
    );
    assert!(s.expire(5600).is_empty());
    // Each lease keeps the time it had left: a's ends at 6,000, b's at 6,500, unless renewed.
    assert!(s.heartbeat(5700, "b", &[b.lease]).is_empty());
    let exp = s.expire(6001);
    assert_eq!(exp.len(), 1);
    assert_eq!(exp[0].lease, a.lease);
    assert_eq!(s.counts(1).unwrap().leased, 1);
    assert!(
        s.expire(6600).is_empty(),
        "b's heartbeat renewed it to 6,700"
    );
}

#[test]
fn retry_cap_poisons_and_job_ends_marked() {
    let mut s = sched(100, 3);
    s.add_job(7, 0, 2, JobState::Running);
    let ok = s.lease(0, "w", 2);
    assert_eq!(
        s.complete(7, ok[0].chunk, ok[0].lease),
        Completion::Accepted {
            job_finished: None,
            outvoted: vec![]
        }
    );
    let mut lease = ok[1].lease;
    assert_eq!(s.fail(lease, false), FailOutcome::Retry);
    lease = s.lease(10, "w", 1)[0].lease;
    s.expire(1000);
    lease = {
        let _ = lease;
        s.lease(1000, "w", 1)[0].lease
    };
    assert_eq!(s.fail(lease, false), FailOutcome::Poisoned);
    assert_eq!(s.job_state(7), Some(JobState::DoneWithPoisonedChunks));
    assert_eq!(s.counts(7).unwrap().poisoned, 1);
    assert_eq!(s.fail(lease, false), FailOutcome::Stale);
}

#[test]
fn a_job_s_own_attempts_poison_its_chunks_while_another_job_keeps_the_coordinator_s() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 1, JobState::Running);
    s.add_job(2, 0, 1, JobState::Running);
    s.set_max_attempts(1, Some(1));
    assert_eq!((s.max_attempts(1), s.max_attempts(2)), (Some(1), Some(3)));
    let leases = s.lease(0, "w", 2);
    assert_eq!(leases.len(), 2);
    assert_eq!(s.fail(leases[0].lease, false), FailOutcome::Poisoned);
    assert_eq!(s.job_state(1), Some(JobState::DoneWithPoisonedChunks));
    assert_eq!(
        s.chunk_record(1, 0),
        Some(ChunkRecord::Poisoned {
            attempts: 1,
            last_error: String::new()
        })
    );
    // The other job's chunk fails twice and is retried; the third failure poisons it.
    let mut lease = leases[1].lease;
    for _ in 0..2 {
        assert_eq!(s.fail(lease, false), FailOutcome::Retry);
        let again = s.lease(1, "w", 2);
        assert_eq!(again.len(), 1, "only job 2's chunk is left: {again:?}");
        lease = again[0].lease;
    }
    assert_eq!(s.fail(lease, false), FailOutcome::Poisoned);
    assert_eq!(
        s.chunk_record(2, 0),
        Some(ChunkRecord::Poisoned {
            attempts: 3,
            last_error: String::new()
        })
    );
}

#[test]
fn the_coordinator_s_attempts_are_the_most_a_job_gets() {
    let mut s = sched(100, 2);
    s.add_job(1, 0, 1, JobState::Running);
    s.set_max_attempts(1, Some(10));
    assert_eq!(s.max_attempts(1), Some(2));
    let l = s.lease(0, "w", 1).remove(0);
    assert_eq!(s.fail(l.lease, false), FailOutcome::Retry);
    let l = s.lease(1, "w", 1).remove(0);
    assert_eq!(s.fail(l.lease, false), FailOutcome::Poisoned);
    // An expiry is an attempt too, under the same limit.
    s.add_job(2, 0, 1, JobState::Running);
    s.set_max_attempts(2, Some(1));
    s.lease(2, "w", 1);
    assert!(s.expire(1_000).iter().all(|e| e.poisoned));
    assert_eq!(s.job_state(2), Some(JobState::DoneWithPoisonedChunks));
}

#[test]
fn release_does_not_use_an_attempt() {
    let mut s = sched(100, 1);
    s.add_job(1, 0, 1, JobState::Running);
    for _ in 0..5 {
        let g = s.lease(0, "w", 1).remove(0);
        assert_eq!(s.fail(g.lease, true), FailOutcome::Retry);
    }
    assert_eq!(s.job_state(1), Some(JobState::Running));
}

#[test]
fn priority_first_then_jobs_of_one_priority_take_turns() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 2, JobState::Running);
    s.add_job(2, 5, 2, JobState::Running);
    s.add_job(3, 5, 2, JobState::Running);
    // Before fair share, job 3 waited for all of job 2; now equal shares alternate request by request (one
    // request takes a run of one job's chunks), and priority 0 comes last.
    let jobs: Vec<JobId> = (0..4).map(|_| s.lease(0, "w", 1)[0].job).collect();
    assert_eq!(jobs, vec![2, 3, 2, 3]);
    let rest: Vec<JobId> = s.lease(0, "w", 6).iter().map(|g| g.job).collect();
    assert_eq!(rest, vec![1, 1]);
}

#[test]
fn a_job_waits_for_its_input() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 1, JobState::Running);
    s.add_job(2, 9, 2, JobState::Running);
    s.wait_for_input(2, 1);
    // Job 2 has the higher priority but cannot start: only the input's chunk goes out.
    let g = s.lease(0, "w", 5);
    assert_eq!(g.iter().map(|g| g.job).collect::<Vec<_>>(), vec![1]);
    s.complete(1, 0, g[0].lease);
    assert!(
        s.lease(0, "w", 5).is_empty(),
        "the artifact is not stored yet"
    );
    assert_eq!(s.waiting_for(2), vec![1]);
    s.input_ready(1);
    assert_eq!(s.lease(0, "w", 5).len(), 2);
}

#[test]
fn a_job_waits_for_every_one_of_its_inputs() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 1, JobState::Running);
    s.add_job(2, 0, 1, JobState::Running);
    s.add_job(3, 9, 2, JobState::Running);
    s.wait_for_input(3, 2);
    s.wait_for_input(3, 1);
    s.wait_for_input(3, 1);
    assert_eq!(s.waiting_for(3), vec![1, 2]);
    let g = s.lease(0, "w", 5);
    assert_eq!(g.iter().map(|g| g.job).collect::<Vec<_>>(), vec![1, 2]);
    for g in &g {
        s.complete(g.job, g.chunk, g.lease);
    }
    s.input_ready(1);
    assert!(s.lease(0, "w", 5).is_empty(), "input 2 is not stored yet");
    assert_eq!(s.waiting_for(3), vec![2]);
    // A job nobody waits for changes nothing.
    s.input_ready(7);
    assert_eq!(s.waiting_for(3), vec![2]);
    s.input_ready(2);
    assert!(s.waiting_for(3).is_empty());
    assert_eq!(s.lease(0, "w", 5).len(), 2);
}

/// A DAG of jobs (a chain, a job without inputs, joins of two and of three) through random leases,
/// failures, expiries, late merges and two restarts from the durable records, in simulated time: no chunk
/// is leased before every input of its job is done and merged, and every chunk is accepted exactly once.
#[test]
fn a_dag_of_jobs_runs_in_dependency_order_through_chaos_and_restarts() {
    let inputs: BTreeMap<JobId, Vec<JobId>> = [
        (1, vec![]),
        (2, vec![1]),
        (3, vec![2]),
        (4, vec![]),
        (5, vec![3, 4]),
        (6, vec![5, 1, 4]),
    ]
    .into_iter()
    .collect();
    let chunks = |job: JobId| 3 + job % 4;
    let mut accepted: BTreeMap<(JobId, u64), u32> = BTreeMap::new();
    // What the coordinator would have stored: non-done chunk records, done chunks, merged jobs.
    let mut records: BTreeMap<(JobId, u64), ChunkRecord> = BTreeMap::new();
    let mut merged: BTreeSet<JobId> = BTreeSet::new();
    let mut to_merge: Vec<JobId> = Vec::new();
    let build = |merged: &BTreeSet<JobId>, records: &BTreeMap<(JobId, u64), ChunkRecord>| {
        let mut s = sched(50, 1000);
        for (&job, ins) in &inputs {
            let done = (0..chunks(job))
                .all(|c| matches!(records.get(&(job, c)), Some(ChunkRecord::Done { .. })));
            let state = if done {
                JobState::Done
            } else {
                JobState::Running
            };
            s.add_job(job, (job % 3) as i32, chunks(job), state);
            for &i in ins {
                if !merged.contains(&i) {
                    s.wait_for_input(job, i);
                }
            }
        }
        for ((job, chunk), rec) in records {
            s.restore_chunk(*job, *chunk, rec);
        }
        s.finish_restore();
        s
    };
    let mut s = build(&merged, &records);
    let mut next = xorshift(0x2545f4914f6cdd1du64);
    let mut held: Vec<Grant> = Vec::new();
    let mut now = 0;
    let mut merged_at_restarts = Vec::new();
    for _ in 0..40_000 {
        if merged.len() == inputs.len() {
            break;
        }
        now += next() % 7;
        // Restarts in the middle of the DAG: after the second and the fourth merge.
        if [2, 4].contains(&merged.len()) && !merged_at_restarts.contains(&merged.len()) {
            // Killed and restarted: what was leased restores as leased (and expires), merges not yet
            // durable are redone.
            let finished: Vec<JobId> = inputs
                .keys()
                .copied()
                .filter(|j| s.job_state(*j) == Some(JobState::Done) && !merged.contains(j))
                .collect();
            s = build(&merged, &records);
            to_merge = finished;
            merged_at_restarts.push(merged.len());
            continue;
        }
        match next() % 8 {
            0..=2 => {
                for g in s.lease(now, "w", (next() % 4) as usize) {
                    for i in &inputs[&g.job] {
                        assert!(
                            merged.contains(i),
                            "job {} leased before its input {i} was merged",
                            g.job
                        );
                    }
                    held.push(g);
                }
            }
            3 | 4 if !held.is_empty() => {
                let g = held.swap_remove((next() % held.len() as u64) as usize);
                if let Completion::Accepted { job_finished, .. } =
                    s.complete(g.job, g.chunk, g.lease)
                {
                    *accepted.entry((g.job, g.chunk)).or_default() += 1;
                    // The caller writes the done record, with the result.
                    records.insert(
                        (g.job, g.chunk),
                        ChunkRecord::Done {
                            digest: "d".into(),
                            worker: "w".into(),
                        },
                    );
                    if job_finished == Some(JobState::Done) {
                        to_merge.push(g.job);
                    }
                }
            }
            5 if !held.is_empty() => {
                let g = held.swap_remove((next() % held.len() as u64) as usize);
                s.fail(g.lease, next().is_multiple_of(2));
            }
            6 if !to_merge.is_empty() => {
                let job = to_merge.remove(0);
                merged.insert(job);
                s.input_ready(job);
            }
            _ => {
                s.expire(now);
            }
        }
        let dirty = s.take_dirty();
        for (job, chunk) in dirty.chunks {
            if let Some(rec) = s.chunk_record(job, chunk) {
                records.insert((job, chunk), rec);
            }
        }
    }
    assert_eq!(merged.len(), inputs.len(), "every job finished and merged");
    assert!(
        merged_at_restarts
            .iter()
            .any(|&m| m > 0 && m < inputs.len()),
        "a restart in the middle of the DAG: {merged_at_restarts:?}"
    );
    for &job in inputs.keys() {
        assert_eq!(s.job_state(job), Some(JobState::Done));
        for chunk in 0..chunks(job) {
            assert_eq!(
                accepted.get(&(job, chunk)),
                Some(&1),
                "job {job} chunk {chunk}"
            );
        }
    }
}

#[test]
fn paused_jobs_hand_out_nothing_and_resume() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 3, JobState::Running);
    s.pause(1).unwrap();
    assert!(s.lease(0, "w", 3).is_empty());
    assert!(s.pause(1).is_err());
    s.resume(1).unwrap();
    assert_eq!(s.lease(0, "w", 3).len(), 3);
}

#[test]
fn cancel_revokes_leases_and_rejects_results() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 2, JobState::Running);
    let g = s.lease(0, "w", 2);
    s.cancel(1).unwrap();
    assert_eq!(s.heartbeat(1, "w", &[g[0].lease]), vec![g[0].lease]);
    assert!(matches!(
        s.complete(1, 0, g[0].lease),
        Completion::Rejected(_)
    ));
    assert!(s.lease(0, "w", 2).is_empty());
    assert!(s.cancel(1).is_err());
    assert!(matches!(s.complete(9, 0, 1), Completion::Rejected(_)));
    assert!(matches!(s.complete(1, 99, 1), Completion::Rejected(_)));
}

#[test]
fn heartbeat_of_someone_elses_lease_is_revoked() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 1, JobState::Running);
    let g = s.lease(0, "a", 1).remove(0);
    assert_eq!(s.heartbeat(50, "b", &[g.lease]), vec![g.lease]);
    // And did not extend it.
    assert_eq!(s.expire(101).len(), 1);
}

#[test]
fn restore_resumes_where_it_stopped() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 4, JobState::Running);
    s.restore_chunk(
        1,
        0,
        &ChunkRecord::Done {
            digest: "d".into(),
            worker: "w".into(),
        },
    );
    s.restore_chunk(
        1,
        1,
        &ChunkRecord::Leased {
            lease: 41,
            worker: "w".into(),
            deadline: 5000,
            attempts: 0,
        },
    );
    s.restore_chunk(1, 2, &ChunkRecord::Pending { attempts: 1 });
    s.finish_restore();
    assert_eq!(s.next_lease_id(), 42);
    // The surviving worker's lease is still honoured.
    assert!(s.heartbeat(100, "w", &[41]).is_empty());
    let chunks: Vec<u64> = s.lease(100, "x", 10).iter().map(|g| g.chunk).collect();
    assert_eq!(chunks, vec![2, 3]);
    assert_eq!(
        s.complete(1, 1, 41),
        Completion::Accepted {
            job_finished: None,
            outvoted: vec![]
        }
    );
    assert_eq!(s.complete(1, 0, 7), Completion::Duplicate);
}

#[test]
fn dirty_lists_what_must_be_written() {
    let mut s = sched(100, 3);
    s.add_job(1, 0, 2, JobState::Running);
    let g = s.lease(0, "w", 1).remove(0);
    let d = s.take_dirty();
    assert_eq!(d.chunks, vec![(1, 0)]);
    assert_eq!(
        s.chunk_record(1, 0),
        Some(ChunkRecord::Leased {
            lease: g.lease,
            worker: "w".into(),
            deadline: 100,
            attempts: 0
        })
    );
    s.pause(1).unwrap();
    assert_eq!(s.take_dirty().jobs, vec![1]);
    assert!(s.take_dirty().chunks.is_empty());
}

/// Many workers, random failures and expiries in simulated time: every chunk ends done exactly once.
#[test]
fn simulated_chaos_completes_every_chunk_exactly_once() {
    let mut s = sched(50, 1000);
    let n = 500u64;
    s.add_job(1, 0, n, JobState::Running);
    let mut accepted = vec![0u32; n as usize];
    let mut next = xorshift(0x9e3779b97f4a7c15u64);
    let mut held: Vec<Grant> = Vec::new();
    let mut now = 0;
    for _ in 0..20_000 {
        now += next() % 7;
        match next() % 6 {
            0 | 1 => held.extend(s.lease(now, "w", (next() % 4) as usize)),
            2 | 3 if !held.is_empty() => {
                let g = held.swap_remove((next() % held.len() as u64) as usize);
                if let Completion::Accepted { .. } = s.complete(g.job, g.chunk, g.lease) {
                    accepted[g.chunk as usize] += 1;
                }
            }
            4 if !held.is_empty() => {
                let g = held.swap_remove((next() % held.len() as u64) as usize);
                s.fail(g.lease, next().is_multiple_of(2));
            }
            _ => {
                s.expire(now);
            }
        }
        if s.job_state(1) == Some(JobState::Done) {
            break;
        }
    }
    // Drain what is left without chaos.
    for _ in 0..(2 * n) {
        for g in held.drain(..) {
            if let Completion::Accepted { .. } = s.complete(g.job, g.chunk, g.lease) {
                accepted[g.chunk as usize] += 1;
            }
        }
        held.extend(s.lease(now, "w", 8));
        if held.is_empty() {
            break;
        }
    }
    assert_eq!(s.job_state(1), Some(JobState::Done));
    assert!(accepted.iter().all(|&a| a == 1), "{accepted:?}");
}

#[test]
fn replicated_chunk_needs_agreeing_votes_from_distinct_workers() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 1, JobState::Running);
    s.set_replication(1, 2);
    let a = s.lease(0, "a", 1).remove(0);
    assert_eq!(
        s.complete_vote(1, 0, a.lease, "a", "good"),
        Completion::Voted {
            agreeing: 1,
            needed: 2,
            disagreement: false,
            poisoned: false
        }
    );
    // The same worker never gets its own replica; another one does.
    assert!(s.lease(1, "a", 5).is_empty());
    let b = s.lease(1, "b", 1).remove(0);
    assert_eq!(b.chunk, 0);
    // A liar disagrees: the chunk runs again, on a third worker.
    assert!(matches!(
        s.complete_vote(1, 0, b.lease, "b", "bad"),
        Completion::Voted {
            disagreement: true,
            ..
        }
    ));
    assert_eq!(s.counts(1).unwrap().disagreements, 1);
    assert!(s.lease(2, "b", 1).is_empty());
    let c = s.lease(2, "c", 1).remove(0);
    assert_eq!(
        s.complete_vote(1, 0, c.lease, "c", "good"),
        Completion::Accepted {
            job_finished: Some(JobState::Done),
            outvoted: vec!["b".to_string()]
        }
    );
    assert_eq!(s.bad_results("b"), 1);
    assert_eq!(s.counts(1).unwrap().done, 1);
    // Late replicas of a done chunk count nothing.
    assert_eq!(
        s.complete_vote(1, 0, b.lease, "d", "good"),
        Completion::Duplicate
    );
}

#[test]
fn endless_disagreement_poisons_instead_of_looping() {
    let mut s = sched(1000, 2);
    s.add_job(1, 0, 1, JobState::Running);
    s.set_replication(1, 2);
    let mut last = None;
    for (i, w) in ["a", "b", "c", "d"].iter().enumerate() {
        let g = s.lease(i as u64, w, 1);
        assert_eq!(g.len(), 1, "worker {w} gets the chunk");
        last = Some(s.complete_vote(1, 0, g[0].lease, w, &format!("digest-{w}")));
    }
    assert!(matches!(
        last,
        Some(Completion::Voted { poisoned: true, .. })
    ));
    assert_eq!(s.job_state(1), Some(JobState::DoneWithPoisonedChunks));
    assert!(s.lease(10, "e", 1).is_empty());
}

#[test]
fn bad_workers_are_refused_and_drained_workers_take_nothing() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 4, JobState::Running);
    assert!(!s.record_bad_result("liar"));
    assert!(!s.record_bad_result("liar"));
    assert!(s.record_bad_result("liar"));
    assert!(s.is_banned("liar"));
    assert!(s.lease(0, "liar", 4).is_empty());
    let held = s.lease(0, "w", 1);
    s.drain("w");
    assert!(s.lease(0, "w", 4).is_empty());
    assert_eq!(s.leases_held("w"), 1);
    // What it holds still completes normally.
    assert!(matches!(
        s.complete(1, held[0].chunk, held[0].lease),
        Completion::Accepted { .. }
    ));
    assert_eq!(s.lease(0, "x", 4).len(), 3);
}

#[test]
fn replication_survives_random_lies_and_expiries() {
    // Three honest workers and one liar race over many chunks with expiries: every chunk ends done with
    // the honest digest, never accepted on the liar's word.
    let mut s = sched(50, 10);
    s.add_job(1, 0, 40, JobState::Running);
    s.set_replication(1, 2);
    let workers = ["h1", "h2", "h3", "liar"];
    let mut accepted = std::collections::HashMap::new();
    let mut rng = 12345u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as usize
    };
    for t in 0..20_000u64 {
        if s.job_state(1) != Some(JobState::Running) {
            break;
        }
        let w = workers[next() % workers.len()];
        for g in s.lease(t, w, 1) {
            match next() % 5 {
                0 => {} // lost: expires later
                _ => {
                    let d = if w == "liar" { "lie" } else { "truth" };
                    if let Completion::Accepted { .. } = s.complete_vote(1, g.chunk, g.lease, w, d)
                    {
                        assert!(
                            accepted.insert(g.chunk, d).is_none(),
                            "chunk {} accepted twice",
                            g.chunk
                        );
                    }
                }
            }
        }
        s.expire(t);
    }
    assert_eq!(s.job_state(1), Some(JobState::Done));
    assert_eq!(accepted.len(), 40);
    assert!(accepted.values().all(|d| *d == "truth"));
}

#[test]
fn a_refused_result_sends_the_chunk_to_someone_else() {
    let mut s = sched(1000, 3);
    s.add_job(1, 0, 2, JobState::Running);
    let g = s.lease(0, "liar", 1).remove(0);
    assert!(!s.reject_result(1, g.chunk, g.lease, "liar"));
    // The liar never gets that chunk back, so it cannot burn the chunk's attempts alone.
    let next = s.lease(1, "liar", 5);
    assert!(next.iter().all(|n| n.chunk != g.chunk), "{next:?}");
    let honest = s.lease(1, "honest", 5);
    assert_eq!(
        honest.iter().map(|h| h.chunk).collect::<Vec<_>>(),
        vec![g.chunk]
    );
    assert_eq!(s.counts(1).unwrap().poisoned, 0);
    assert!(!s.reject_result(1, next[0].chunk, next[0].lease, "liar"));
    assert!(
        s.reject_result(1, 99, 12345, "liar"),
        "third bad result: refused"
    );
    assert!(s.lease(2, "liar", 5).is_empty());
}

/// A xorshift64 stream: the chaos tests' only randomness, seeded so that every failure reproduces.
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
