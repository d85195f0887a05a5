//! A job run in this process: every chunk on a rayon pool, merged as it finishes, and a DAG's inputs built
//! first. This is `sweep solve`, the quick path without a coordinator and the baseline the engine's overhead
//! is measured against.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sweep_space::{
    Answer, AnswerMerge, ChunkControl, ChunkId, ChunkOutput, Handoff, SpaceError, SpaceJob,
};

use crate::inputs::{label, DagNode};

/// Why a local run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("a chunk failed: {0}")]
    Chunk(#[source] SpaceError),
    #[error("merging artifacts: {0}")]
    Artifacts(#[source] SpaceError),
    #[error("input job {job}: {source}")]
    Plan { job: String, source: SpaceError },
    #[error("loading the inputs of {job}: {source}")]
    Bind { job: String, source: SpaceError },
    #[error("an input of {0} was not built")]
    MissingInput(String),
    #[error("the job's input DAG is empty")]
    EmptyDag,
}

/// How often [`run_chunks`] tells its caller how far it is.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Runs every chunk of `job` split into `n` on `pool` and merges the outputs as they finish: each chunk's list
/// goes into its thread's bounded merge at once, so memory does not grow with the solutions. While it runs,
/// `progress(chunks done, nodes so far)` is called every [`PROGRESS_EVERY`] from a thread of its own.
///
/// Every thread takes the next chunk in plan order from one counter, as workers take leases from a coordinator:
/// plans put their big chunks first (star's subtrees shrink with the chunk index), so the job ends on small
/// chunks. When none is left and the job splits ([`sweep_space::Job::splits`]), a thread that would idle asks
/// a running chunk to give away half of what it has not started and runs that piece: work follows the idle
/// threads, so the job does not end at the speed of its largest chunk, whatever `n` is. Merges are per thread
/// and combined once at the end, so no thread waits on another's list. With `count_only` the kernels are told
/// not to build lists and any list is dropped, as a coordinator would.
pub fn run_chunks(
    pool: &rayon::ThreadPool,
    job: &SpaceJob,
    n: u64,
    count_only: bool,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Answer, RunError> {
    let work = Work::new(n, job.splits());
    let finished = AtomicBool::new(false);
    type ThreadPart = Result<(Vec<(u64, ChunkOutput)>, AnswerMerge), SpaceError>;
    let parts: Vec<ThreadPart> = std::thread::scope(|s| {
        let (work, finished) = (&work, &finished);
        // Parked between reports rather than asleep, so the run ends as soon as its last chunk does instead of
        // waiting out the ticker's interval.
        let ticker = s.spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                progress(work.done.load(Ordering::Relaxed), work.nodes());
                std::thread::park_timeout(PROGRESS_EVERY);
            }
        });
        let parts = pool.broadcast(|_| -> ThreadPart {
            let mut outputs = Vec::new();
            let mut merge = AnswerMerge::default();
            while let Some((at, start)) = work.next() {
                let run = work.start(at, start);
                run.control.set_count_only(count_only);
                let result = job.run_chunk(at, run.control.control());
                work.end(&run);
                let mut out = match result {
                    Ok(out) => out,
                    Err(e) => {
                        work.failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                };
                let listed = std::mem::take(&mut out.solutions);
                if !count_only {
                    merge.add_solutions(listed.iter().map(String::as_str));
                }
                outputs.push((at.chunk, out));
            }
            Ok((outputs, merge))
        });
        finished.store(true, Ordering::Relaxed);
        ticker.thread().unpark();
        parts
    });
    let mut merge = AnswerMerge::default();
    let mut outputs = Vec::new();
    for part in parts {
        let (outs, m) = part.map_err(RunError::Chunk)?;
        merge.absorb(m);
        outputs.extend(outs);
    }
    // Artifacts are merged in chunk order (a job with artifacts has one output per chunk: see `Work`).
    outputs.sort_by_key(|(i, _)| *i);
    let outputs: Vec<ChunkOutput> = outputs.into_iter().map(|(_, o)| o).collect();
    for out in &outputs {
        merge.add_tally(out);
    }
    let mut answer = merge.finish();
    if outputs.iter().any(|o| !o.artifact.is_empty()) {
        let mut it = outputs.iter().map(|o| o.artifact.as_slice());
        answer.artifact = job.merge_artifacts(&mut it).map_err(RunError::Artifacts)?;
    }
    Ok(answer)
}

/// How long a thread with nothing to run waits between looks for a piece a running chunk gave away.
const IDLE_POLL: Duration = Duration::from_millis(1);

/// The work of one local run: the plan's chunks in order, then pieces that running chunks gave away.
struct Work {
    n: u64,
    splits: bool,
    next_chunk: AtomicU64,
    /// Pieces given away and not started yet: the chunk and the state a run of the piece starts from.
    pieces: Mutex<Vec<(ChunkId, String)>>,
    /// Every run going on, oldest first, so that a thread with nothing to do can ask one of them to split.
    running: Mutex<Vec<Run>>,
    next_run: AtomicU64,
    /// Per chunk that has split, its runs not finished yet (its first run and its pieces): the chunk is done
    /// when the last one ends, so the count of done chunks never overtakes the work.
    open_parts: Mutex<HashMap<u64, u64>>,
    /// Chunks whose every part has finished.
    done: AtomicU64,
    /// Nodes of finished runs.
    finished_nodes: AtomicU64,
    failed: AtomicBool,
}

impl Work {
    fn new(n: u64, splits: bool) -> Work {
        Work {
            n,
            splits,
            next_chunk: AtomicU64::new(0),
            pieces: Mutex::default(),
            running: Mutex::default(),
            next_run: AtomicU64::new(0),
            open_parts: Mutex::default(),
            done: AtomicU64::new(0),
            finished_nodes: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// The next thing to run: a chunk of the plan, else a piece; when there is neither, and something still
    /// runs, it asks a running chunk to split and waits for the piece. `None` when all is done or a run failed.
    fn next(&self) -> Option<(ChunkId, Option<String>)> {
        loop {
            if self.failed.load(Ordering::Relaxed) {
                return None;
            }
            let i = self.next_chunk.fetch_add(1, Ordering::Relaxed);
            if i < self.n {
                return Some((ChunkId::new(self.n, i), None));
            }
            if let Some((at, state)) = lock(&self.pieces).pop() {
                return Some((at, Some(state)));
            }
            if !self.splits {
                return None;
            }
            let victim = {
                let running = lock(&self.running);
                if running.is_empty() {
                    return None;
                }
                // The oldest run still going has had the longest to grow; one not already asked.
                running
                    .iter()
                    .find(|r| !r.control.split_pending())
                    .map(|r| r.control.clone())
            };
            if let Some(victim) = victim {
                victim.request_split();
            }
            std::thread::sleep(IDLE_POLL);
            self.collect_handoffs();
        }
    }

    /// Moves what running chunks gave away into the queue of pieces.
    fn collect_handoffs(&self) {
        let running: Vec<Run> = lock(&self.running).clone();
        for r in running {
            self.queue(r.at, r.control.take_handoffs());
        }
    }

    fn queue(&self, at: ChunkId, handoffs: Vec<Handoff>) {
        if handoffs.is_empty() {
            return;
        }
        *lock(&self.open_parts).entry(at.chunk).or_insert(1) += handoffs.len() as u64;
        lock(&self.pieces).extend(handoffs.into_iter().map(|h| (at, h.given)));
    }

    /// A run of chunk `at` from `start` (a piece's state, or the whole chunk), registered as running.
    fn start(&self, at: ChunkId, start: Option<String>) -> Run {
        let run = Run {
            id: self.next_run.fetch_add(1, Ordering::Relaxed),
            at,
            control: Arc::new(ChunkControl::new(start)),
        };
        lock(&self.running).push(run.clone());
        run
    }

    /// Run `run` ended: what it gave away and nobody collected yet is queued, and its chunk is done when this
    /// was its last part.
    fn end(&self, run: &Run) {
        lock(&self.running).retain(|r| r.id != run.id);
        self.queue(run.at, run.control.take_handoffs());
        self.finished_nodes
            .fetch_add(run.control.nodes(), Ordering::Relaxed);
        let last = {
            let mut open = lock(&self.open_parts);
            match open.get_mut(&run.at.chunk) {
                None => true,
                Some(left) => {
                    *left -= 1;
                    let last = *left == 0;
                    if last {
                        open.remove(&run.at.chunk);
                    }
                    last
                }
            }
        };
        if last {
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Nodes so far: finished runs' and the running ones' published counts.
    fn nodes(&self) -> u64 {
        let running: u64 = lock(&self.running).iter().map(|r| r.control.nodes()).sum();
        self.finished_nodes.load(Ordering::Relaxed) + running
    }
}

/// One run of a chunk or piece: its chunk and its control, shared with threads that may ask it to split.
#[derive(Clone)]
struct Run {
    id: u64,
    at: ChunkId,
    control: Arc<ChunkControl>,
}

/// A lock that a panicked holder does not poison for the others: every value behind these locks stays valid
/// between statements.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What [`bind_dag`] needs from its caller.
pub struct DagSources<'a> {
    /// The merged artifact of a finished job kept somewhere (a coordinator's store), if there is one. Asked
    /// for every input it may need before the first input is built, so a caller may let go of where it reads
    /// them from once `building` is first called.
    pub stored: &'a dyn Fn(&SpaceJob) -> Option<Vec<u8>>,
    /// Called before input `built` of `to_build` is run here, with its label and its number of chunks.
    pub building: &'a dyn Fn(usize, usize, &str, u64),
    /// Progress of the input being run, as for [`run_chunks`].
    pub progress: &'a (dyn Fn(u64, u64) + Sync),
}

/// The last job of `dag` bound to its inputs, every input built here first (in dependency order, each once) or
/// taken from `sources.stored`. An input found stored needs none of its own inputs, so only what is missing
/// runs; an artifact is dropped as soon as the last job that reads it is bound.
pub fn bind_dag(
    pool: &rayon::ThreadPool,
    dag: Vec<DagNode>,
    sources: &DagSources<'_>,
) -> Result<SpaceJob, RunError> {
    let n = dag.len();
    if n == 0 {
        return Err(RunError::EmptyDag);
    }
    let mut artifacts: Vec<Option<Vec<u8>>> = vec![None; n];
    // From the root down: a job is needed if a needed job reads it and that reader is not stored itself.
    let mut needed = vec![false; n];
    let mut stored = vec![false; n];
    needed[n - 1] = true;
    for i in (0..n).rev() {
        if !needed[i] {
            continue;
        }
        if i + 1 < n {
            if let Some(bytes) = (sources.stored)(&dag[i].job) {
                artifacts[i] = Some(bytes);
                stored[i] = true;
                continue;
            }
        }
        for &k in &dag[i].inputs {
            needed[k] = true;
        }
    }
    let mut last_reader = vec![None; n];
    for (i, node) in dag.iter().enumerate() {
        if needed[i] && !stored[i] {
            for &k in &node.inputs {
                last_reader[k] = Some(i);
            }
        }
    }
    let to_build = (0..n - 1).filter(|&i| needed[i] && !stored[i]).count();
    let mut built = 0;
    for (i, node) in dag.into_iter().enumerate() {
        if !needed[i] || stored[i] {
            continue;
        }
        let job = if node.inputs.is_empty() {
            node.job
        } else {
            let views = node
                .inputs
                .iter()
                .map(|&k| artifacts[k].as_deref())
                .collect::<Option<Vec<&[u8]>>>()
                .ok_or_else(|| RunError::MissingInput(label(&node.job)))?;
            let bound = node
                .job
                .bind_inputs(&views)
                .map_err(|source| RunError::Bind {
                    job: label(&node.job),
                    source,
                })?;
            for &k in &node.inputs {
                if last_reader[k] == Some(i) {
                    artifacts[k] = None;
                }
            }
            bound
        };
        if i + 1 == n {
            return Ok(job);
        }
        built += 1;
        let plan = job.plan(None).map_err(|source| RunError::Plan {
            job: label(&job),
            source,
        })?;
        (sources.building)(built, to_build, &label(&job), plan.n_chunks);
        let answer = run_chunks(pool, &job, plan.n_chunks, false, sources.progress)?;
        artifacts[i] = Some(answer.artifact);
    }
    Err(RunError::EmptyDag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use sweep_space::{Job, Registry};

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool")
    }

    fn primes(below: u64) -> SpaceJob {
        Registry::new()
            .with::<sweep_primes::Primes>()
            .job_from_params("primes", &serde_json::json!({ "below": below }))
            .expect("valid parameters")
    }

    #[test]
    fn a_local_run_equals_the_contract_kit_and_reports_progress() {
        let job = primes(2_000_000);
        let want = sweep_space::testkit::run_all(&*job, Some(37));
        let seen = AtomicU64::new(0);
        let progress = |done: u64, _nodes: u64| {
            seen.fetch_max(done, Ordering::Relaxed);
        };
        for threads in [1, 3] {
            let got = run_chunks(&pool(threads), &job, 37, false, &progress).expect("runs");
            assert_eq!(got.tally.counters, want.tally.counters, "{threads} threads");
            assert_eq!(got.tally.nodes, want.tally.nodes, "{threads} threads");
        }
        assert!(seen.load(Ordering::Relaxed) <= 37);
    }

    /// A job run as one chunk still keeps every thread busy: idle threads take pieces the chunk gives away,
    /// and the pieces count every integer once.
    #[test]
    fn one_chunk_splits_across_the_idle_threads_and_counts_once() {
        let job = primes(30_000_000);
        let most_done = AtomicU64::new(0);
        let progress = |done: u64, _nodes: u64| {
            most_done.fetch_max(done, Ordering::Relaxed);
        };
        let got = run_chunks(&pool(3), &job, 1, true, &progress).expect("runs");
        assert_eq!(got.tally.counter("primes"), 1_857_859, "pi(3 * 10^7)");
        assert_eq!(got.tally.nodes, 30_000_000, "every integer once");
        assert!(
            got.tally.chunks > 1,
            "the chunk was split: {} runs",
            got.tally.chunks
        );
        assert!(
            most_done.load(Ordering::Relaxed) <= 1,
            "a split chunk is done once"
        );
    }

    /// A program that adds up 0..60, 5 ms a number, and splits when asked on its stdin (the `exec` protocol).
    const SPLITTING_PROGRAM: &str = r#"
import json, os, select, sys, time
lo, hi, x, n, total = map(int, os.environ.get("SWEEP_RESUME", "0 60 0 0 0").split())
while x < hi:
    if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "split":
        if hi - x >= 2:
            mid = x + (hi - x) // 2
            kept, given = f"{lo} {mid} {x} {n} {total}", f"{mid} {hi} {mid} 0 0"
            print(json.dumps({"split": {"kept": kept, "given": given}}), flush=True)
            hi = mid
        else:
            print(json.dumps({"split": None}), flush=True)
    time.sleep(0.005)
    n, total, x = n + 1, total + x, x + 1
print(json.dumps({"nodes": n, "counters": {"sum": total}}))
"#;

    /// A program's chunk splits as a kernel's does: run as one chunk on two threads, the idle thread takes
    /// pieces the running program gives away, and the pieces add up to what one thread gets unsplit.
    #[test]
    fn one_exec_chunk_splits_across_two_threads_and_counts_once() {
        let job = Registry::new()
            .with::<sweep_exec::Exec>()
            .job_from_params(
                "exec",
                &serde_json::json!({
                    "command": ["python3", "-c", SPLITTING_PROGRAM],
                    "splits": true,
                }),
            )
            .expect("valid parameters");
        assert!(job.splits());
        let unsplit = run_chunks(&pool(1), &job, 1, false, &|_, _| {}).expect("runs");
        assert_eq!(unsplit.tally.chunks, 1, "one thread: nobody to split for");
        assert_eq!(
            (unsplit.tally.nodes, unsplit.tally.counter("sum")),
            (60, 1770)
        );
        let split = run_chunks(&pool(2), &job, 1, false, &|_, _| {}).expect("runs");
        assert!(
            split.tally.chunks > 1,
            "the idle thread ran pieces: {} runs",
            split.tally.chunks
        );
        assert_eq!(split.tally.nodes, unsplit.tally.nodes);
        assert_eq!(split.tally.counters, unsplit.tally.counters);
    }

    /// A job whose chunk `self.0` fails, the others finding nothing.
    #[derive(Debug)]
    struct FailsAt(u64);

    impl Job for FailsAt {
        fn plan(&self, _: Option<u64>) -> Result<sweep_space::Plan, SpaceError> {
            Ok(sweep_space::Plan {
                n_chunks: 16,
                total_nodes: None,
            })
        }
        fn run_chunk(
            &self,
            at: ChunkId,
            _: &sweep_space::Control,
        ) -> Result<ChunkOutput, SpaceError> {
            if at.chunk == self.0 {
                return Err(SpaceError::Verification(format!("{at} breaks")));
            }
            Ok(ChunkOutput::default())
        }
        fn verify(&self, _at: ChunkId, _: &ChunkOutput) -> Result<(), SpaceError> {
            Ok(())
        }
        fn result(&self, _: &Answer) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn render_text(&self, _: &serde_json::Value) -> String {
            String::new()
        }
    }

    #[test]
    fn a_failing_chunk_stops_the_run_with_its_error() {
        let fails_at_5 = SpaceJob::new("fails", serde_json::Value::Null, Arc::new(FailsAt(5)));
        let err = run_chunks(&pool(2), &fails_at_5, 16, false, &|_, _| {});
        match err {
            Err(RunError::Chunk(SpaceError::Verification(why))) => assert!(why.contains("chunk 5")),
            other => panic!("expected chunk 5's error, got {other:?}"),
        }
    }

    #[test]
    fn a_dag_of_one_job_is_that_job_and_an_empty_one_is_refused() {
        let job = primes(1_000);
        let sources = DagSources {
            stored: &|_| None,
            building: &|_, _, _, _| {},
            progress: &|_, _| {},
        };
        let dag = crate::inputs::resolve(job.clone(), &|s: &str, p: &serde_json::Value| {
            Registry::new()
                .with::<sweep_primes::Primes>()
                .job_from_params(s, p)
        })
        .expect("no inputs");
        let bound = bind_dag(&pool(1), dag, &sources).expect("binds");
        assert_eq!(bound.params(), job.params());
        assert!(matches!(
            bind_dag(&pool(1), Vec::new(), &sources),
            Err(RunError::EmptyDag)
        ));
    }
}
