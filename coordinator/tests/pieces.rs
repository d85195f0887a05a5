//! Pieces of split chunks, driven through the core with the coordinator's real store in memory and simulated
//! time: random leases, splits, results (current and stale), failures, heartbeats with states of old parts,
//! expiries, restarts and crashes that lose what was not committed. Whatever happens, once honest workers
//! finish the job its answer covers every item exactly once.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use sweep_space::{
    Answer, ChunkControl, ChunkId, ChunkOutput, Control, Job, Plan, SpaceError, SpaceJob, Span,
    SpanWalk,
};

use sweep_coordinator::core::*;
use sweep_coordinator::limits::Limits;
use sweep_coordinator::scheduler::{JobState, SchedulerConfig};
use sweep_coordinator::store::{split_commit, Store};

/// Items `0..items` in `chunks` chunks; an item `i` is one node and adds `i` to the counter `sum`. Chunks split
/// by spans of items, and a part's output is verified exactly.
#[derive(Debug)]
struct Ranges {
    items: u64,
    chunks: u64,
}

fn sum_of(span: Span) -> u128 {
    (span.lo..span.hi).sum()
}

impl Job for Ranges {
    fn space(&self) -> &'static str {
        "ranges"
    }

    fn params(&self) -> serde_json::Value {
        json!({ "items": self.items, "chunks": self.chunks })
    }

    fn plan(&self, _: Option<u64>) -> Result<Plan, SpaceError> {
        Ok(Plan {
            n_chunks: self.chunks,
            total_nodes: Some(u128::from(self.items)),
        })
    }

    fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        let span = Span::of_run(at, self.items.into(), self.chunks, ctl)?;
        let mut out = ChunkOutput::default();
        let mut sum = 0u128;
        for i in SpanWalk::new(span, ctl) {
            out.nodes += 1;
            sum += i;
        }
        out.counters.insert("sum".into(), sum);
        Ok(out)
    }

    fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        let span = Span::of(at, self.items.into(), self.chunks, None)?;
        self.verify_part(at, &span.state(), out, true)
    }

    fn splits(&self) -> bool {
        true
    }

    fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        Span::check_split(at, self.items.into(), self.chunks, parent, kept, given)
    }

    fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        _: bool,
    ) -> Result<(), SpaceError> {
        let span = Span::of(at, self.items.into(), self.chunks, Some(part))?;
        let right = out.nodes as u128 == span.len()
            && out.counters.get("sum").copied().unwrap_or(0) == sum_of(span);
        if right {
            Ok(())
        } else {
            Err(SpaceError::Verification(format!(
                "{at}: not the output of {part}"
            )))
        }
    }

    fn result(&self, answer: &Answer) -> serde_json::Value {
        json!({ "sum": answer.tally.counter("sum").to_string() })
    }

    fn render_text(&self, result: &serde_json::Value) -> String {
        result.to_string()
    }
}

const ITEMS: u64 = 400;
const CHUNKS: u64 = 3;
const TTL: u64 = 1_000;

fn ranges() -> SpaceJob {
    let r = Ranges {
        items: ITEMS,
        chunks: CHUNKS,
    };
    SpaceJob::new("ranges", r.params(), Arc::new(r))
}

fn open(store: &Store, now: u64) -> Core {
    // Failures and expiries are steps of the test, not faults of the chunks: none is poisoned for them.
    let cfg = SchedulerConfig {
        lease_ttl_ms: TTL,
        max_attempts: 1_000,
        ..SchedulerConfig::default()
    };
    let job_of = |space: &str, _: &serde_json::Value| match space {
        "ranges" => Ok(ranges()),
        _ => Err(format!("no space {space}")),
    };
    Core::open(store.load().unwrap(), cfg, Limits::default(), &job_of, now).unwrap()
}

fn commit(core: &mut Core, store: &Store) {
    let (ops, _) = core.take_batch();
    store.write_parts(split_commit(ops)).unwrap();
}

fn register(core: &mut Core, name: &str, now: u64) -> String {
    core.register(
        Registration {
            name: name.into(),
            threads: 4,
            memory_bytes: 1 << 30,
            spaces: vec!["ranges".into()],
            ..Registration::default()
        },
        now,
    )
}

/// What a worker holds: a lease, the part its run covers now and that part's generation, and the parts it
/// covered before its splits (a stale result or state would name one of those).
#[derive(Clone, Debug)]
struct Held {
    worker: usize,
    lease: LeaseView,
    part: Span,
    generation: u32,
    before: Vec<(Span, u32)>,
}

fn part_of(l: &LeaseView) -> Span {
    let at = ChunkId::new(l.n_chunks, l.chunk);
    let start =
        (!l.checkpoint.as_deref().unwrap_or("").is_empty()).then_some(l.checkpoint.as_deref());
    Span::of(at, ITEMS.into(), CHUNKS, start.flatten()).unwrap()
}

/// The true output of `part` of the held lease's chunk, from the kernel.
fn run(h: &Held, part: Span) -> ChunkOutput {
    let at = ChunkId::new(h.lease.n_chunks, h.lease.chunk);
    ranges()
        .run_chunk(at, ChunkControl::new(Some(part.state())).control())
        .unwrap()
}

fn report(core: &mut Core, worker: &str, h: &Held, part: Span, generation: u32, now: u64) -> Ack {
    let target = core.report_target(h.lease.job, h.lease.slot);
    let checked = Checked::new(
        &Limits::default(),
        h.lease.lease,
        h.lease.job,
        (h.lease.slot, generation),
        Ok(run(h, part)),
        target.as_ref(),
    );
    core.apply_report(worker, checked, &(), now).unwrap()
}

#[derive(Clone, Debug)]
enum Step {
    Lease {
        worker: usize,
        max: u32,
    },
    /// Split the picked lease's part at a fraction (in 1/16) of what it covers.
    Split {
        pick: usize,
        at16: u64,
        take: bool,
    },
    Complete {
        pick: usize,
    },
    /// A result, or a state, of the part the picked lease covered before its last split.
    Stale {
        pick: usize,
        result: bool,
    },
    Fail {
        pick: usize,
        release: bool,
    },
    Heartbeat {
        pick: usize,
    },
    Expire,
    Restart,
    /// The coordinator dies: what it had not committed is lost, and so is every worker's run.
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..3, 1u32..3).prop_map(|(worker, max)| Step::Lease { worker, max }),
        4 => (any::<usize>(), 1u64..16, any::<bool>()).prop_map(|(pick, at16, take)| Step::Split { pick, at16, take }),
        3 => any::<usize>().prop_map(|pick| Step::Complete { pick }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, result)| Step::Stale { pick, result }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, release)| Step::Fail { pick, release }),
        1 => any::<usize>().prop_map(|pick| Step::Heartbeat { pick }),
        1 => Just(Step::Expire),
        1 => Just(Step::Restart),
        1 => Just(Step::Crash),
    ]
}

/// Runs `steps`, then lets an honest worker finish, and checks the answer.
fn play(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let store = Store::in_memory();
    let mut now = 1;
    let mut core = open(&store, now);
    let node = SubmitNode {
        job: ranges(),
        plan: ranges().plan(None).unwrap(),
        inputs: Vec::new(),
    };
    let (view, _) = core
        .submit(vec![node], 0, false, JobOptions::default(), now)
        .unwrap();
    let job = view.id;
    commit(&mut core, &store);
    let mut names: Vec<String> = (0..3)
        .map(|i| register(&mut core, &format!("w{i}"), now))
        .collect();
    let mut held: Vec<Held> = Vec::new();
    for s in steps {
        now += 10;
        match s {
            Step::Lease { worker, max } => {
                if let Ok(LeaseAnswer::Chunks(ls)) = core.lease(&names[worker], max, now) {
                    for l in ls {
                        let part = part_of(&l);
                        held.push(Held {
                            worker,
                            generation: l.generation,
                            lease: l,
                            part,
                            before: Vec::new(),
                        });
                    }
                }
            }
            Step::Split { pick, at16, take } if !held.is_empty() => {
                let i = pick % held.len();
                let h = &held[i];
                let mid = h.part.lo + h.part.len() * u128::from(at16) / 16;
                if mid <= h.part.lo || mid >= h.part.hi {
                    continue;
                }
                let kept = Span {
                    lo: h.part.lo,
                    hi: mid,
                };
                let given = Span {
                    lo: mid,
                    hi: h.part.hi,
                };
                let req = SplitRequest {
                    lease: h.lease.lease,
                    generation: h.generation,
                    kept: kept.state(),
                    given: given.state(),
                    take,
                };
                let worker = h.worker;
                if let Ok(answer) = core.split(&names[worker], req, now) {
                    // Answered only once durable, as the shell does.
                    commit(&mut core, &store);
                    let h = &mut held[i];
                    h.before.push((h.part, h.generation));
                    h.part = kept;
                    h.generation += 1;
                    if let Some(l) = answer.lease {
                        prop_assert_eq!(part_of(&l), given);
                        held.push(Held {
                            worker,
                            part: given,
                            generation: l.generation,
                            lease: l,
                            before: Vec::new(),
                        });
                    }
                }
            }
            Step::Complete { pick } if !held.is_empty() => {
                let h = held.remove(pick % held.len());
                report(&mut core, &names[h.worker], &h, h.part, h.generation, now);
                commit(&mut core, &store);
            }
            Step::Stale { pick, result } if !held.is_empty() => {
                let h = held[pick % held.len()].clone();
                let Some(&(old, generation)) = h.before.last() else {
                    continue;
                };
                if result {
                    let ack = report(&mut core, &names[h.worker], &h, old, generation, now);
                    prop_assert!(
                        ack.kind != AckKind::Accepted,
                        "a result of a part before its split was accepted"
                    );
                    commit(&mut core, &store);
                } else {
                    let p = LeaseProgress {
                        lease: h.lease.lease,
                        nodes: 1,
                        checkpoint: Some(old.state()),
                        generation,
                    };
                    let _ = core.heartbeat(&names[h.worker], vec![p], now);
                }
            }
            Step::Fail { pick, release } if !held.is_empty() => {
                let h = held.remove(pick % held.len());
                let _ = core.fail(&names[h.worker], h.lease.lease, release, "test", None, now);
                commit(&mut core, &store);
            }
            Step::Heartbeat { pick } if !held.is_empty() => {
                let h = &held[pick % held.len()];
                let p = LeaseProgress {
                    lease: h.lease.lease,
                    nodes: 1,
                    checkpoint: Some(h.part.state()),
                    generation: h.generation,
                };
                let _ = core.heartbeat(&names[h.worker], vec![p], now);
            }
            Step::Expire => {
                now += 2 * TTL;
                core.expire(now);
            }
            Step::Restart => {
                commit(&mut core, &store);
                core = open(&store, now);
                names = (0..3)
                    .map(|i| register(&mut core, &format!("w{i}"), now))
                    .collect();
            }
            Step::Crash => {
                core = open(&store, now);
                names = (0..3)
                    .map(|i| register(&mut core, &format!("w{i}"), now))
                    .collect();
                held.clear();
            }
            _ => {}
        }
    }
    // An honest worker finishes what is left, after every outstanding lease expired.
    commit(&mut core, &store);
    now += 10 * TTL;
    core.expire(now);
    let honest = register(&mut core, "honest", now);
    for _ in 0..1000 {
        let Ok(LeaseAnswer::Chunks(ls)) = core.lease(&honest, 8, now) else {
            break;
        };
        if ls.is_empty() {
            break;
        }
        for l in ls {
            let part = part_of(&l);
            let h = Held {
                worker: 0,
                generation: l.generation,
                lease: l,
                part,
                before: Vec::new(),
            };
            let ack = report(&mut core, &honest, &h, part, h.generation, now);
            prop_assert_eq!(ack.kind, AckKind::Accepted, "{}", ack.message);
        }
        commit(&mut core, &store);
        now += 1;
    }
    let core = open(&store, now);
    let v = core.job_view(job, now).unwrap();
    prop_assert_eq!(v.state, JobState::Done);
    prop_assert_eq!(v.chunks_done, CHUNKS + v.pieces);
    prop_assert_eq!(v.nodes, u128::from(ITEMS));
    prop_assert_eq!(
        v.counters.get("sum").copied(),
        Some(sum_of(Span {
            lo: 0,
            hi: ITEMS.into()
        }))
    );
    prop_assert!(
        (v.chunks_covered - CHUNKS as f64).abs() < 1e-9,
        "{}",
        v.chunks_covered
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Random splits, results, stale results and states, failures, expiries, restarts and crashes: the job
    /// always ends covering every item exactly once.
    #[test]
    fn pieces_cover_the_job_exactly_once(steps in proptest::collection::vec(step(), 0..60)) {
        play(steps)?;
    }
}

/// A split is refused with a reason, and changes nothing, when it is not the holder's, when it does not cover
/// the part exactly, when its states do not parse or are too large, or when it was made from an older part.
#[test]
fn bad_splits_are_refused_and_change_nothing() {
    let store = Store::in_memory();
    let mut core = open(&store, 1);
    let node = SubmitNode {
        job: ranges(),
        plan: ranges().plan(None).unwrap(),
        inputs: Vec::new(),
    };
    let (view, _) = core
        .submit(vec![node], 0, false, JobOptions::default(), 1)
        .unwrap();
    let w = register(&mut core, "w", 1);
    let other = register(&mut core, "other", 1);
    let LeaseAnswer::Chunks(ls) = core.lease(&w, 1, 2).unwrap() else {
        panic!("no lease");
    };
    let l = &ls[0];
    let (lo, hi) = (part_of(l).lo, part_of(l).hi);
    let req = |kept: String, given: String, generation: u32| SplitRequest {
        lease: l.lease,
        generation,
        kept,
        given,
        take: false,
    };
    let span = |a: u128, b: u128| Span { lo: a, hi: b }.state();
    let mid = (lo + hi) / 2;
    let bad: Vec<(&str, String, SplitRequest)> = vec![
        (
            "someone else's lease",
            other.clone(),
            req(span(lo, mid), span(mid, hi), 0),
        ),
        (
            "overlap",
            w.clone(),
            req(span(lo, mid + 1), span(mid, hi), 0),
        ),
        ("gap", w.clone(), req(span(lo, mid - 1), span(mid, hi), 0)),
        (
            "outside",
            w.clone(),
            req(span(lo, mid), span(mid, hi + 1), 0),
        ),
        (
            "unparsable",
            w.clone(),
            req("half".into(), span(mid, hi), 0),
        ),
        (
            "too large",
            w.clone(),
            req(span(lo, mid), "x".repeat(70_000), 0),
        ),
        (
            "older part",
            w.clone(),
            req(span(lo, mid), span(mid, hi), 3),
        ),
    ];
    for (what, worker, r) in bad {
        let before = core.job_view(view.id, 3).unwrap();
        let err = core.split(&worker, r, 3).expect_err(what);
        assert!(!err.to_string().is_empty(), "{what}");
        let after = core.job_view(view.id, 3).unwrap();
        assert_eq!(
            (before.chunks_total, before.pieces),
            (after.chunks_total, after.pieces),
            "{what}"
        );
    }
    // A good one is taken, and the same split again (from the old generation) is not.
    let good = req(span(lo, mid), span(mid, hi), 0);
    let answer = core.split(&w, good.clone(), 3).unwrap();
    assert_eq!(answer.piece, CHUNKS);
    assert!(
        core.split(&w, good, 3).is_err(),
        "a split repeated from the part before it"
    );
    // A lease of a done job's chunk: the lease is gone, so is the split.
    let v = core.job_view(view.id, 3).unwrap();
    assert_eq!((v.chunks_total, v.pieces), (CHUNKS + 1, 1));
}
