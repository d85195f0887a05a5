//! The checks every space must pass, as a kit its tests call: what the engine relies on, tested the way the
//! engine uses a job.
//!
//! The engine runs a job's chunks on any workers in any order, re-verifies every reported output, merges them
//! into one answer and may restart a chunk from a saved resume state. A space is correct for the engine when:
//! - every chunking gives the same answer ([`run_all`], [`same_answer_under`]): chunk borders neither skip nor
//!   repeat part of the space, and the merge does not depend on how the space was cut;
//! - every output passes the space's own verifier, and the lies a faulty worker tells are refused
//!   ([`lies_refused`], [`lies_refused_somewhere`]);
//! - a chunk count or a chunk outside what the job can plan is refused, never guessed at
//!   ([`out_of_plan_refused`]);
//! - a chunk stopped after saving a resume state and resumed from it reports what an uninterrupted run reports
//!   ([`resumed_equals_uninterrupted`]).
//!
//! - a job that reads other jobs' artifacts can be run once they are bound ([`bind_inputs`]), as the engine
//!   binds a DAG's jobs.
//!
//! The kit runs jobs through whatever [`Job`] it is given; pass one built by a [`crate::Registry`] to also test
//! what the framework adds (names, canonical parameters, chunk-range checks). Failures panic with a message that
//! names the chunking and chunk, as test assertions do.

use std::time::{Duration, Instant};

use crate::{
    Answer, ChunkControl, ChunkId, ChunkOutput, Control, Job, Registry, SearchSpace, SpaceError,
    SpaceJob,
};

/// A registry holding the space `S` alone, as the engine registers it, built once per space and kept for the
/// test process's life: what a space's own tests look names up in and rebuild jobs from parameters with.
pub fn registry<S: SearchSpace>() -> &'static Registry {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static REGISTRIES: OnceLock<Mutex<HashMap<TypeId, &'static Registry>>> = OnceLock::new();
    let mut all = REGISTRIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    all.entry(TypeId::of::<S>())
        .or_insert_with(|| Box::leak(Box::new(Registry::new().with::<S>())))
}

/// The job that `sweep run S ARGS...` would run: the space's own command-line words parsed by the framework,
/// through [`registry`], so tests and benches build jobs as the engine does.
pub fn parse_args<S: SearchSpace>(args: &[&str]) -> Result<SpaceJob, SpaceError> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    registry::<S>().lookup(S::NAME)?.parse_args(&args)
}

/// Runs every chunk of `job` under its plan for `requested` chunks, checks each output with the job's
/// verifier, and merges them in chunk order, artifacts too (with the job's own merge, as the coordinator does).
///
/// # Panics
/// If the plan, a chunk or a verification fails.
pub fn run_all(job: &dyn Job, requested: Option<u64>) -> Answer {
    let plan = job
        .plan(requested)
        .unwrap_or_else(|e| panic!("{}: plan for {requested:?} chunks: {e}", job.space()));
    let outputs: Vec<ChunkOutput> = (0..plan.n_chunks)
        .map(|chunk| run_verified(job, plan.n_chunks, chunk))
        .collect();
    let mut answer = Answer::from_outputs(&outputs);
    if outputs.iter().any(|o| !o.artifact.is_empty()) {
        let mut artifacts = outputs.iter().map(|o| o.artifact.as_slice());
        answer.artifact = job
            .merge_artifacts(&mut artifacts)
            .unwrap_or_else(|e| panic!("{}: artifacts do not merge: {e}", job.space()));
    }
    answer
}

/// Runs one chunk and checks its output with the job's verifier (and the counts-only verifier).
///
/// # Panics
/// If the chunk fails or its own output does not verify.
pub fn run_verified(job: &dyn Job, n_chunks: u64, chunk: u64) -> ChunkOutput {
    let name = job.space();
    let out = job
        .run_chunk(ChunkId::new(n_chunks, chunk), &Control::new())
        .unwrap_or_else(|e| panic!("{name}: chunk {chunk} of {n_chunks} fails: {e}"));
    if let Err(e) = job.verify(ChunkId::new(n_chunks, chunk), &out) {
        panic!("{name}: chunk {chunk} of {n_chunks}: its own output does not verify: {e}");
    }
    let mut counts_only = out.clone();
    counts_only.solutions.clear();
    if let Err(e) = job.verify_counts(ChunkId::new(n_chunks, chunk), &counts_only) {
        panic!("{name}: chunk {chunk} of {n_chunks}: its counts do not verify: {e}");
    }
    out
}

/// Runs the whole job under each chunking in `chunkings` (`None`: the space's default) and checks that they all
/// give the same tally, the same solutions and the same result; returns that answer.
///
/// # Panics
/// If any chunking's answer differs from the first one's, or a chunk fails or does not verify.
pub fn same_answer_under(job: &dyn Job, chunkings: &[Option<u64>]) -> Answer {
    let name = job.space();
    let mut first: Option<(Option<u64>, Answer, serde_json::Value)> = None;
    for &requested in chunkings {
        let mut answer = run_all(job, requested);
        answer.solutions.sort();
        let result = job.result(&answer);
        match &first {
            None => first = Some((requested, answer, result)),
            Some((base, want, want_result)) => {
                // Counters, not nodes: nodes measure work, which may depend on where the borders fall.
                assert_eq!(
                    answer.tally.counters, want.tally.counters,
                    "{name}: {requested:?} chunks count differently from {base:?} chunks"
                );
                assert_eq!(
                    answer.solutions, want.solutions,
                    "{name}: {requested:?} chunks list other solutions than {base:?} chunks"
                );
                assert_eq!(
                    &result, want_result,
                    "{name}: {requested:?} chunks give another result than {base:?} chunks"
                );
            }
        }
    }
    match first {
        Some((_, answer, _)) => answer,
        None => panic!("{name}: same_answer_under needs at least one chunking"),
    }
}

/// Checks that `job` refuses what lies outside its plans: a plan of no chunks (with a message about chunks) or
/// of `too_many`, more than it can be split into; and, under its default plan of `n` chunks, chunk `n`, and
/// chunk 0 of a plan of `too_many` chunks, which no plan of the job has.
///
/// # Panics
/// If any of them is accepted.
pub fn out_of_plan_refused(job: &dyn Job, too_many: u64) {
    let name = job.space();
    match job.plan(Some(0)) {
        Err(e) if e.to_string().contains("chunks") => {}
        other => panic!("{name}: a plan of 0 chunks gives {other:?}"),
    }
    assert!(
        job.plan(Some(too_many)).is_err(),
        "{name}: a plan of {too_many} chunks is accepted"
    );
    let n = job
        .plan(None)
        .unwrap_or_else(|e| panic!("{name}: default plan: {e}"))
        .n_chunks;
    for (n_chunks, chunk) in [(n, n), (too_many, 0)] {
        assert_eq!(
            job.run_chunk(ChunkId::new(n_chunks, chunk), &Control::new()),
            Err(SpaceError::ChunkOutOfRange { chunk, n_chunks }),
            "{name}: chunk {chunk} of {n_chunks} runs"
        );
    }
}

/// Checks that the job's verifier refuses the lies a faulty or dishonest worker tells about chunk `chunk`
/// of `n_chunks`: each of the `checked` counters one higher, a dropped solution and a made-up one. `checked`
/// names the counters the space's verifier vouches for from one chunk's output alone (a count of the listed
/// solutions, a brute-force range's size); a counter that only adds up across chunks, such as all solutions
/// of a symmetric space whose canonical one another chunk lists, cannot be, and nodes that measure work are
/// not either. Lies that do not apply (no solution to drop, a job that does not verify) are skipped; returns
/// how many were tried, so a test can insist that the chunk it chose exercises them.
///
/// # Panics
/// If the job claims to verify (`Job::verifiable`) and accepts a lie.
pub fn lies_refused(job: &dyn Job, n_chunks: u64, chunk: u64, checked: &[&str]) -> usize {
    let name = job.space();
    let honest = run_verified(job, n_chunks, chunk);
    if !job.verifiable() {
        return 0;
    }
    // What each lie is, for the message: a counter's name stands for that counter one higher.
    let mut lies: Vec<(&str, ChunkOutput)> = Vec::new();
    for counter in checked {
        let mut inflated = honest.clone();
        *inflated.counters.entry((*counter).to_string()).or_insert(0) += 1;
        lies.push((counter, inflated));
    }
    if !honest.solutions.is_empty() {
        let mut dropped = honest.clone();
        dropped.solutions.pop();
        lies.push(("one solution dropped", dropped));
    }
    let mut bogus = honest.clone();
    bogus.solutions.push("not a solution".into());
    lies.push(("a made-up solution", bogus));
    for (what, lie) in &lies {
        assert!(
            job.verify(ChunkId::new(n_chunks, chunk), lie).is_err(),
            "{name}: chunk {chunk} of {n_chunks}: the verifier accepts {what}"
        );
    }
    lies.len()
}

/// The first chunk of `n_chunks` whose verified output lists a solution, with that output: the chunk a test
/// tells its own space-specific lies about.
///
/// # Panics
/// If a chunk fails or does not verify, or no chunk lists a solution.
pub fn first_chunk_with_solutions(job: &dyn Job, n_chunks: u64) -> (u64, ChunkOutput) {
    (0..n_chunks)
        .map(|chunk| (chunk, run_verified(job, n_chunks, chunk)))
        .find(|(_, out)| !out.solutions.is_empty())
        .unwrap_or_else(|| panic!("{}: no chunk of {n_chunks} lists a solution", job.space()))
}

/// [`lies_refused`] on every chunk of `n_chunks`; returns the most lies any one chunk was told, so a test can
/// insist that some chunk (one with a solution, say) exercises them all without knowing which.
///
/// # Panics
/// If the job claims to verify and accepts a lie about any chunk.
pub fn lies_refused_somewhere(job: &dyn Job, n_chunks: u64, checked: &[&str]) -> usize {
    (0..n_chunks)
        .map(|chunk| lies_refused(job, n_chunks, chunk, checked))
        .max()
        .unwrap_or(0)
}

/// Runs chunk `chunk` of `n_chunks` once uninterrupted, then again stopped as soon as it saved a resume state,
/// and once more resumed from that state; checks that the resumed run reports exactly what the uninterrupted
/// one did. Returns `false` when the chunk finished without saving a state within `wait` (nothing to resume;
/// a test that means to exercise resumption asserts `true`).
///
/// # Panics
/// If a run fails, or the resumed output differs from the uninterrupted one.
pub fn resumed_equals_uninterrupted(
    job: &dyn Job,
    n_chunks: u64,
    chunk: u64,
    wait: Duration,
) -> bool {
    let name = job.space();
    let whole = run_verified(job, n_chunks, chunk);
    let handle = ChunkControl::new(None);
    let saved = std::thread::scope(|s| {
        let run = s.spawn(|| job.run_chunk(ChunkId::new(n_chunks, chunk), handle.control()));
        let deadline = Instant::now() + wait;
        let mut saved = None;
        while !run.is_finished() && Instant::now() < deadline {
            if let Some(state) = handle.take_resume_state() {
                saved = Some(state);
                handle.cancel();
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // A kernel that finished before it was cancelled may still have saved a state on the way.
        let first = run.join();
        saved.or_else(|| first.is_ok().then(|| handle.take_resume_state()).flatten())
    });
    let Some(state) = saved else {
        return false;
    };
    let resumed = ChunkControl::new(Some(state.clone()));
    let again = job
        .run_chunk(ChunkId::new(n_chunks, chunk), resumed.control())
        .unwrap_or_else(|e| panic!("{name}: chunk {chunk} resumed from {state:?} fails: {e}"));
    assert_eq!(
        again, whole,
        "{name}: chunk {chunk} of {n_chunks} resumed from {state:?} reports other than an uninterrupted run"
    );
    true
}

/// `job` with every input bound, as the engine binds a job of a DAG: each input job is rebuilt from its
/// parameters in `registry`, its own inputs bound first, then run by `run` (which returns the input's merged
/// answer: [`run_all`] in tests, a timed harness in benches), and the artifacts are handed over in the order of
/// [`Job::inputs`]. A job without inputs is returned as it is.
///
/// # Panics
/// If an input job cannot be rebuilt or the artifacts do not bind.
pub fn bind_inputs(
    registry: &Registry,
    job: SpaceJob,
    run: &mut dyn FnMut(&dyn Job) -> Answer,
) -> SpaceJob {
    let inputs = job.inputs();
    if inputs.is_empty() {
        return job;
    }
    let artifacts: Vec<Vec<u8>> = inputs
        .iter()
        .map(|input| {
            let rebuilt = registry
                .job_from_params(&input.space, &input.params)
                .unwrap_or_else(|e| panic!("{}: input job {}: {e}", job.space(), input.space));
            let bound = bind_inputs(registry, rebuilt, run);
            run(bound.as_ref()).artifact
        })
        .collect();
    let refs: Vec<&[u8]> = artifacts.iter().map(Vec::as_slice).collect();
    job.bind_inputs(&refs)
        .unwrap_or_else(|e| panic!("{}: inputs do not bind: {e}", job.space()))
}

/// Checks the split rule ([`crate::split`]) on chunk `at` of a job that splits: the chunk is run whole, then
/// again as pieces, every run asked to split before its first item (so each gives away half of its work) until
/// `max_splits` splits were made. Every split must pass [`Job::check_split`], every piece's output
/// [`Job::verify_part`], a run restarted from what a split kept must report what the split run reported, and the
/// pieces together must report exactly what the whole chunk did: nodes, counters and solutions. Returns the
/// number of splits made.
///
/// # Panics
/// If the job does not split when asked, or any of the above fails.
pub fn split_adds_up(job: &dyn Job, at: ChunkId, max_splits: usize) -> usize {
    let name = job.space();
    let whole = job
        .run_chunk(at, &Control::new())
        .unwrap_or_else(|e| panic!("{name}: {at} fails: {e}"));
    let mut pending: Vec<Option<String>> = vec![None];
    let mut pieces = Vec::new();
    let mut splits = 0;
    while let Some(start) = pending.pop() {
        let handle = ChunkControl::new(start.clone());
        if splits < max_splits {
            handle.request_split();
        }
        let out = job
            .run_chunk(at, handle.control())
            .unwrap_or_else(|e| panic!("{name}: {at} from {start:?} fails: {e}"));
        let mut part = start;
        for h in handle.take_handoffs() {
            if let Err(e) = job.check_split(at, part.as_deref(), &h.kept, &h.given) {
                panic!("{name}: {at}: its own split of {part:?} into {h:?} is refused: {e}");
            }
            splits += 1;
            pending.push(Some(h.given));
            part = Some(h.kept);
        }
        let verified = match &part {
            Some(state) => {
                let again = job
                    .run_chunk(at, ChunkControl::new(Some(state.clone())).control())
                    .unwrap_or_else(|e| panic!("{name}: {at} from {state:?} fails: {e}"));
                assert_eq!(
                    again, out,
                    "{name}: {at}: a restart from {state:?} reports otherwise"
                );
                job.verify_part(at, state, &out, true)
            }
            None => job.verify(at, &out),
        };
        if let Err(e) = verified {
            panic!("{name}: {at}: the output of part {part:?} does not verify: {e}");
        }
        pieces.push(out);
    }
    assert!(splits > 0, "{name}: {at} did not split when asked");
    let mut sum = Answer::from_outputs(&pieces);
    let mut want = Answer::from_outputs([&whole]);
    sum.solutions.sort();
    want.solutions.sort();
    assert_eq!(
        (sum.tally.nodes, &sum.tally.counters),
        (want.tally.nodes, &want.tally.counters),
        "{name}: {at}: {splits} splits count otherwise than the whole"
    );
    assert_eq!(
        sum.solutions, want.solutions,
        "{name}: {at}: {splits} splits list otherwise"
    );
    splits
}
