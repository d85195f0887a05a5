//! The job contract: what one search space's job does, and what its chunks report.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// How many solutions a merged answer shows: the smallest ones, sorted. Counts stay exact beyond it, the answer
/// says the list was cut, and the whole list (when the job keeps one) is streamed from the store instead
/// (`sweep results JOB --solutions FILE`), never held whole in memory: an answer's size must not grow with the
/// number of solutions. Spaces render each shown solution as a JSON object (a star's is 26 numbers in two
/// forms, over a KB as a `serde_json::Value`), and an answer is built, sent and parsed again: at 100,000 the
/// answer alone held `sweep run star --points 13` at 640 MB; at 10,000 it is a few tens of MB.
pub const MAX_SHOWN_SOLUTIONS: usize = 10_000;

/// The most solutions one chunk's report may list (the coordinator's default `--max-report-solutions`): one
/// report is held whole in memory on its way, so a chunk with more must be split finer or run `--count-only`.
pub const MAX_REPORT_SOLUTIONS: usize = 1_000_000;

/// Everything that can go wrong inside a search space. Expected conditions (bad parameters, cancellation) are
/// variants, so callers can map them to exit codes and RPC statuses in one place.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SpaceError {
    #[error("unknown search space `{name}` (known: {known})")]
    UnknownSpace { name: String, known: String },
    /// The user asked for `--help`; the text is the space's rendered help, not an error.
    #[error("{0}")]
    Help(String),
    /// The space's command-line options did not parse; the text is clap's message.
    #[error("{0}")]
    Usage(String),
    #[error("invalid value for `{name}`: {reason}")]
    InvalidParam { name: &'static str, reason: String },
    #[error("malformed job parameters for `{space}`: {reason}")]
    BadParams { space: &'static str, reason: String },
    #[error("chunk {chunk} does not exist: the job has {n_chunks} chunks")]
    ChunkOutOfRange { chunk: u64, n_chunks: u64 },
    #[error("cancelled")]
    Cancelled,
    #[error("result failed verification: {0}")]
    Verification(String),
    /// The chunk's own program failed (an `exec` chunk: exit status, signal, bad output); the text says how,
    /// with the tail of what it wrote on stderr.
    #[error("{0}")]
    ChunkFailed(String),
    #[error("a space named `{0}` is registered twice")]
    DuplicateSpace(String),
}

/// A u128 figure (a counter, a node total) as JSON: a number while it fits in 64 bits, else its decimal string.
/// `json!` on a bare u128 above `u64::MAX` panics (serde_json has no bigger numbers), and a worker may report
/// counters that large, truthfully or not.
pub fn json_u128(v: u128) -> serde_json::Value {
    u64::try_from(v)
        .map(serde_json::Value::from)
        .unwrap_or_else(|_| serde_json::Value::String(v.to_string()))
}

/// The kernel's half of a chunk's control: progress, cancellation, the stop request and resume state as the
/// kernel sees them. The engine holds the other half, [`ChunkControl`]; a kernel is only ever lent `&Control`,
/// so it cannot cancel itself, change its threads or take its own saved state. [`Control::new`] makes a
/// control nobody cancels, for running a kernel outside the engine (tests, benches). Kernels count their nodes
/// in a [`crate::Meter`], which publishes them and polls [`Control::is_cancelled`] every few thousand steps, so the
/// cost is a relaxed atomic add between batches, never per node.
#[derive(Debug, Default)]
pub struct Control {
    nodes: AtomicU64,
    cancelled: AtomicBool,
    /// The worker is shutting down (drained, SIGTERM): see [`Control::is_stop_requested`].
    stop_requested: AtomicBool,
    /// Threads this chunk may use (0: not said, i.e. one).
    threads: AtomicU32,
    /// The coordinator's number of the job this chunk belongs to (0 outside a coordinator).
    job: AtomicU64,
    /// The job keeps counts only: see [`Control::lists_solutions`].
    count_only: AtomicBool,
    /// Where an earlier attempt of this chunk left off (see [`Control::resume_state`]).
    resume: Option<String>,
    /// The newest state the kernel saved, and whether the engine has taken it since.
    saved: Mutex<SavedState>,
}

#[derive(Debug, Default)]
struct SavedState {
    text: Option<String>,
    taken: bool,
}

/// The largest resume state a chunk may save: the coordinator keeps one per running chunk durably, so a state
/// is a cursor into the search (a prefix, a rank, a few counters), not a copy of its memory.
pub const MAX_RESUME_STATE_BYTES: usize = 64 * 1024;

impl Control {
    pub fn new() -> Self {
        Self::default()
    }

    /// A control for a chunk that an earlier attempt (on any worker) left at `resume`: the engine makes one
    /// with [`ChunkControl::new`].
    fn resuming(resume: Option<String>) -> Self {
        Control {
            resume: resume.filter(|r| !r.is_empty()),
            ..Self::default()
        }
    }

    /// The coordinator's number of this chunk's job (0 when run outside a coordinator).
    pub fn job(&self) -> u64 {
        self.job.load(Ordering::Relaxed)
    }

    /// Whether the chunk's solutions are wanted as a list. When not, a kernel should count them without
    /// building their text: the engine drops any list of such a chunk anyway, so building it only costs memory
    /// and time (a chunk of a large star holds millions). Counters must be the same either way.
    pub fn lists_solutions(&self) -> bool {
        !self.count_only.load(Ordering::Relaxed)
    }

    /// Threads this chunk may use (at least one).
    pub fn threads(&self) -> u32 {
        self.threads.load(Ordering::Relaxed).max(1)
    }

    pub fn is_stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Relaxed)
    }

    /// The state an earlier attempt of this chunk saved with [`Control::save_resume_state`], if any. A kernel
    /// that finds one continues from it; its final output must be what an uninterrupted run reports (counts
    /// carried in the state, not restarted), so an interrupted chunk is still counted exactly once.
    pub fn resume_state(&self) -> Option<&str> {
        self.resume.as_deref()
    }

    /// Saves where this chunk is, so that a later attempt can continue from here instead of from the start.
    /// Cheap: the engine sends only the newest state, at most every few seconds. A state over
    /// [`MAX_RESUME_STATE_BYTES`] is refused (the chunk goes on; it will restart from an older state).
    pub fn save_resume_state(&self, state: impl Into<String>) -> Result<(), SpaceError> {
        let state = state.into();
        if state.len() > MAX_RESUME_STATE_BYTES {
            return Err(SpaceError::InvalidParam {
                name: "resume state",
                reason: format!(
                    "{} bytes, more than the {MAX_RESUME_STATE_BYTES} a chunk may save",
                    state.len()
                ),
            });
        }
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        saved.text = Some(state);
        saved.taken = false;
        Ok(())
    }

    pub fn add_nodes(&self, n: u64) {
        self.nodes.fetch_add(n, Ordering::Relaxed);
    }

    /// Nodes reported so far by the kernel (a progress figure; the exact count is in the chunk's output).
    pub fn nodes(&self) -> u64 {
        self.nodes.load(Ordering::Relaxed)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Reports `n` more nodes and fails with [`SpaceError::Cancelled`] if the run should stop.
    pub fn checkpoint(&self, n: u64) -> Result<(), SpaceError> {
        self.add_nodes(n);
        if self.is_cancelled() {
            Err(SpaceError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// The engine's half of a chunk's [`Control`]: it owns the control the kernel sees and holds the methods only
/// the engine may call (cancel, ask to stop, say the threads, the job and whether solutions are listed, take the
/// newest resume state). A kernel is handed `&Control` and so cannot cancel itself or steal its own state; the
/// engine keeps the `ChunkControl` (shared behind an `Arc` with its heartbeat and drain tasks).
#[derive(Debug, Default)]
pub struct ChunkControl {
    control: Control,
}

impl ChunkControl {
    /// A chunk's control, continuing from `resume` when an earlier attempt (on any worker) saved one.
    pub fn new(resume: Option<String>) -> Self {
        ChunkControl {
            control: Control::resuming(resume),
        }
    }

    /// What the kernel is given.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// Tells the kernel it may use `threads` threads (set before the chunk starts).
    pub fn set_threads(&self, threads: u32) {
        self.control.threads.store(threads, Ordering::Relaxed);
    }

    /// Tells the kernel the coordinator's number of its job (for programs that name their files by it).
    pub fn set_job(&self, job: u64) {
        self.control.job.store(job, Ordering::Relaxed);
    }

    /// Tells the kernel that the job keeps counts only (`--count-only`, or a list that outgrew its cap).
    pub fn set_count_only(&self, count_only: bool) {
        self.control.count_only.store(count_only, Ordering::Relaxed);
    }

    /// Asks the chunk to stop soon because its worker is shutting down. Unlike [`ChunkControl::cancel`] it is a
    /// request: a kernel that cannot resume finishes its chunk (the worker waits a grace period); one that can
    /// (a program that saves resume states) stops, and its chunk is handed back with its newest state.
    pub fn request_stop(&self) {
        self.control.stop_requested.store(true, Ordering::Relaxed);
    }

    /// Makes the kernel's next [`Control::checkpoint`] fail with [`SpaceError::Cancelled`].
    pub fn cancel(&self) {
        self.control.cancelled.store(true, Ordering::Relaxed);
    }

    /// The newest state the kernel saved with [`Control::save_resume_state`], if it was not taken before.
    pub fn take_resume_state(&self) -> Option<String> {
        let mut saved = self.control.saved.lock().unwrap_or_else(|p| p.into_inner());
        if saved.taken {
            return None;
        }
        saved.taken = true;
        saved.text.clone()
    }

    /// Nodes reported so far by the kernel (a progress figure; the exact count is in the chunk's output).
    pub fn nodes(&self) -> u64 {
        self.control.nodes()
    }
}

/// How a job is split. Computed once when the job is submitted and stored with it; workers receive only
/// `n_chunks` and a chunk index, and the job maps the pair to its part of the space deterministically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub n_chunks: u64,
    /// Total nodes of the whole job when known in advance (brute force over a fixed space), for honest ETAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_nodes: Option<u128>,
}

impl Plan {
    /// Checks a chunk index against its plan: `chunk` must be one of `n_chunks`, and `n_chunks` a plan this job
    /// can make (at most `max`). A kernel asked for a chunk outside its plan must say so, never guess.
    pub fn check_chunk(chunk: u64, n_chunks: u64, max: u64) -> Result<(), SpaceError> {
        if chunk >= n_chunks || n_chunks > max {
            return Err(SpaceError::ChunkOutOfRange { chunk, n_chunks });
        }
        Ok(())
    }

    /// The chunk count for a job that splits into at most `max` chunks: the user's `requested` (`--chunks`),
    /// rejected when 0 or above `max`, or else `default` capped at `max`. One wording for every space.
    pub fn chunk_count(requested: Option<u64>, max: u64, default: u64) -> Result<u64, SpaceError> {
        match requested {
            Some(0) => Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: "must be at least 1".into(),
            }),
            Some(k) if k > max => Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: format!("{k} is more than this job can be split into ({max})"),
            }),
            Some(k) => Ok(k),
            None => Ok(default.clamp(1, max.max(1))),
        }
    }
}

/// What one chunk reports. The merge of outputs is a plain sum (nodes, counters) and concatenation (solutions),
/// so spaces must report each solution in exactly one chunk (e.g. only the canonical member of a symmetry
/// class), which keeps counts exact however the space is split.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkOutput {
    /// Work done: permutations tested, positions visited, ... as the space defines it.
    pub nodes: u64,
    /// Solutions found in the space's canonical text form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub solutions: Vec<String>,
    /// Exact named counters (u128: some counts exceed 64 bits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, u128>,
    /// An optional binary artifact (a piece of a table), merged by [`Job::merge_artifacts`].
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_bytes")]
    pub artifact: Vec<u8>,
}

impl ChunkOutput {
    /// Refuses an output with a counter its space never reports: a made-up counter would be summed into the
    /// answer like a real one.
    pub fn check_counters(&self, known: &[&str]) -> Result<(), SpaceError> {
        match self.counters.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(SpaceError::Verification(format!("unknown counter `{k}`"))),
            None => Ok(()),
        }
    }

    /// A digest over every field, in a fixed binary layout: two workers that computed the same chunk produce the
    /// same digest, and a duplicate completion can be compared with the stored one without keeping both.
    pub fn digest(&self) -> [u8; 32] {
        // The same bytes as one `update` per field, fed in pieces of up to 64 KiB: blake3 hashes a long input
        // several blocks at a time (SIMD), but one short solution per call block by block, which made the
        // coordinator's digest of a 400,000-star list cost as much as writing the list's file.
        const PIECE: usize = 64 << 10;
        let mut h = blake3::Hasher::new();
        let mut buf = Vec::with_capacity(PIECE);
        let mut feed = |bytes: &[u8]| {
            if buf.len() + bytes.len() > PIECE {
                h.update(&buf);
                buf.clear();
            }
            if bytes.len() > PIECE {
                h.update(bytes);
            } else {
                buf.extend_from_slice(bytes);
            }
        };
        feed(b"sweep-chunk-output-v1");
        feed(&self.nodes.to_le_bytes());
        feed(&(self.solutions.len() as u64).to_le_bytes());
        for s in &self.solutions {
            feed(&(s.len() as u64).to_le_bytes());
            feed(s.as_bytes());
        }
        feed(&(self.counters.len() as u64).to_le_bytes());
        for (k, v) in &self.counters {
            feed(&(k.len() as u64).to_le_bytes());
            feed(k.as_bytes());
            feed(&v.to_le_bytes());
        }
        feed(&(self.artifact.len() as u64).to_le_bytes());
        feed(&self.artifact);
        h.update(&buf);
        *h.finalize().as_bytes()
    }

    /// The checks shared by spaces whose chunks report `solutions` and `unique` counters, list each unique
    /// solution they own, and carry no artifact: no other counter, one listed solution per unique count, and
    /// no fewer solutions than unique ones (a chunk may own solutions whose canonical form another chunk lists).
    pub fn check_unique_counters(&self, space: &str) -> Result<(), SpaceError> {
        self.check_unique_counts_only(space)?;
        let unique = self.counters.get("unique").copied().unwrap_or(0);
        if unique != self.solutions.len() as u128 {
            return Err(SpaceError::Verification(format!(
                "{unique} unique counted but {} reported",
                self.solutions.len()
            )));
        }
        Ok(())
    }

    /// A chunk that must have examined exactly `expected` nodes (a brute-force range, a range of integers) says
    /// so; `what` names them in the error ("permutations tested").
    pub fn check_nodes(&self, expected: u128, what: &str) -> Result<(), SpaceError> {
        if u128::from(self.nodes) != expected {
            return Err(SpaceError::Verification(format!(
                "{} {what}, the chunk holds {expected}",
                self.nodes
            )));
        }
        Ok(())
    }

    /// An output of a job that keeps counts only lists nothing: the engine drops lists before they are
    /// checked, so one left is a lie. `what` names the solutions in the error ("stars").
    pub fn check_unlisted(&self, what: &str) -> Result<(), SpaceError> {
        if self.solutions.is_empty() {
            return Ok(());
        }
        Err(SpaceError::Verification(format!(
            "{} {what} listed by a chunk of a job that keeps counts only",
            self.solutions.len()
        )))
    }

    /// What [`ChunkOutput::check_unique_counters`] can check of an output without its list (a job that keeps
    /// counts only): no other counter, no fewer solutions than unique ones, no artifact.
    pub fn check_unique_counts_only(&self, space: &str) -> Result<(), SpaceError> {
        self.check_counters(&["solutions", "unique"])?;
        let unique = self.counters.get("unique").copied().unwrap_or(0);
        let solutions = self.counters.get("solutions").copied().unwrap_or(0);
        if solutions < unique {
            return Err(SpaceError::Verification(format!(
                "{solutions} solutions < {unique} unique"
            )));
        }
        if !self.artifact.is_empty() {
            return Err(SpaceError::Verification(format!(
                "the {space} space has no artifacts"
            )));
        }
        Ok(())
    }

    pub fn count(&mut self, counter: &str, n: u128) {
        *self.counters.entry(counter.to_string()).or_default() += n;
    }
}

/// The running, mergeable part of a job's answer: small enough to rewrite on every completion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub chunks: u64,
    pub nodes: u128,
    #[serde(default)]
    pub counters: BTreeMap<String, u128>,
}

impl Tally {
    pub fn add(&mut self, out: &ChunkOutput) {
        self.chunks += 1;
        self.nodes += u128::from(out.nodes);
        self.add_counters(&out.counters);
    }

    fn add_counters(&mut self, counters: &BTreeMap<String, u128>) {
        for (k, v) in counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
    }

    pub fn counter(&self, name: &str) -> u128 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Adds another tally, as if its outputs had been added here.
    pub fn add_tally(&mut self, other: &Tally) {
        self.chunks += other.chunks;
        self.nodes += other.nodes;
        self.add_counters(&other.counters);
    }
}

/// A job's merged answer: the tally plus the smallest solutions, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub tally: Tally,
    /// The [`MAX_SHOWN_SOLUTIONS`] smallest listed solutions (all of them when there are fewer), sorted.
    pub solutions: Vec<String>,
    /// True when more than [`MAX_SHOWN_SOLUTIONS`] solutions were listed and the list was cut.
    pub solutions_truncated: bool,
    /// How many solutions the merged outputs listed in all (0 for a job that keeps counts only).
    #[serde(default)]
    pub solutions_listed: u64,
    /// The merged artifact, if the space produces one.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_bytes")]
    pub artifact: Vec<u8>,
}

impl Answer {
    /// Merges chunk outputs in any order into the same answer (solutions are sorted at the end).
    pub fn from_outputs<'a>(outputs: impl IntoIterator<Item = &'a ChunkOutput>) -> Answer {
        let mut merge = AnswerMerge::default();
        for out in outputs {
            merge.add(out);
        }
        merge.finish()
    }
}

/// Builds an [`Answer`] from outputs seen one at a time, in memory bounded by [`MAX_SHOWN_SOLUTIONS`] whatever
/// the number of solutions: the tally is a sum, and of the list only the smallest solutions are kept (a
/// max-heap of that size), so the answer is the same in any order of outputs and equals the head of the
/// whole sorted list.
#[derive(Debug)]
pub struct AnswerMerge {
    tally: Tally,
    smallest: std::collections::BinaryHeap<String>,
    listed: u64,
    keep: usize,
}

impl Default for AnswerMerge {
    fn default() -> Self {
        AnswerMerge::keeping(MAX_SHOWN_SOLUTIONS)
    }
}

impl AnswerMerge {
    /// A merge that shows at most `keep` solutions (tests use small values; the engine uses the default).
    pub fn keeping(keep: usize) -> Self {
        AnswerMerge {
            tally: Tally::default(),
            smallest: std::collections::BinaryHeap::new(),
            listed: 0,
            keep,
        }
    }

    /// Adds one output's counts and solutions.
    pub fn add(&mut self, out: &ChunkOutput) {
        self.tally.add(out);
        self.add_solutions(out.solutions.iter().map(String::as_str));
    }

    /// Adds listed solutions only (their chunk's counts are added apart, e.g. by [`Tally::add`]).
    pub fn add_solutions<'a>(&mut self, solutions: impl IntoIterator<Item = &'a str>) {
        for s in solutions {
            self.listed += 1;
            if self.smallest.len() < self.keep {
                self.smallest.push(s.to_string());
            } else if self.smallest.peek().is_some_and(|top| s < top.as_str()) {
                // Replace the largest kept one: the heap never holds more than `keep`.
                if let Some(mut top) = self.smallest.peek_mut() {
                    s.clone_into(&mut top);
                }
            }
        }
    }

    /// Adds counts only (an output whose solutions were taken apart, or that keeps none).
    pub fn add_tally(&mut self, out: &ChunkOutput) {
        self.tally.add(out);
    }

    /// Folds another merge into this one, as if its outputs had been added here: threads merge apart, without
    /// a shared lock, and are combined once at the end.
    pub fn absorb(&mut self, other: AnswerMerge) {
        self.tally.add_tally(&other.tally);
        let listed = self.listed + other.listed;
        self.add_solutions(other.smallest.iter().map(String::as_str));
        self.listed = listed;
    }

    pub fn finish(self) -> Answer {
        let listed = self.listed;
        Answer {
            tally: self.tally,
            solutions: self.smallest.into_sorted_vec(),
            solutions_truncated: listed > self.keep as u64,
            solutions_listed: listed,
            artifact: Vec::new(),
        }
    }
}

/// A job: one search space with fixed, validated parameters. Object safe, so the registry, the coordinator and
/// the workers handle every space alike.
///
/// A job built through a [`crate::Registry`] is wrapped by the framework: its space name and canonical
/// parameters come from the registration (a space may still override [`Job::params`] to canonicalise them), and
/// chunk indices are checked against `n_chunks` before [`Job::run_chunk`] or [`Job::verify`] is called.
pub trait Job: Send + Sync + Debug {
    /// The space's name. Registered jobs get it from the registry; only jobs built by hand need it.
    fn space(&self) -> &'static str {
        ""
    }

    /// Canonical parameters; `registry.job_from_params(space, params)` rebuilds an equal job. Registered jobs
    /// default to their parsed parameters as JSON; `Null` means "use that default".
    fn params(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Splits the job. `requested` is the user's `--chunks`; `None` picks the space's default.
    fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError>;

    /// Runs chunk `chunk` of `n_chunks`. Deterministic: the same chunk gives the same output on every machine.
    /// A long chunk may save where it is with [`Control::save_resume_state`] and continue from
    /// [`Control::resume_state`] when it is run again after an interruption.
    fn run_chunk(
        &self,
        n_chunks: u64,
        chunk: u64,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError>;

    /// Cheap checks of a reported output: every solution is a real, canonical solution of this job.
    fn verify(&self, n_chunks: u64, chunk: u64, out: &ChunkOutput) -> Result<(), SpaceError>;

    /// Checks an output of a job that keeps counts only (`--count-only`): the engine has dropped any list of
    /// solutions, so only what the counters say on their own can be checked. The default checks that no list
    /// is left; spaces override it to check their counters' names and relations (e.g. `solutions >= unique`).
    /// Such a job's counts are not re-verified solution by solution, so it is shown as unverified unless it is
    /// replicated.
    fn verify_counts(
        &self,
        _n_chunks: u64,
        _chunk: u64,
        out: &ChunkOutput,
    ) -> Result<(), SpaceError> {
        out.check_unlisted("solutions")
    }

    /// Whether [`Job::verify`] really checks the answer. A job that runs a program the coordinator cannot
    /// re-run (`exec`) says no, and is shown as unverified unless it is replicated.
    fn verifiable(&self) -> bool {
        true
    }

    /// How many threads one chunk uses: a worker with T threads runs at most T / this many chunks at once.
    fn threads_per_chunk(&self) -> u32 {
        1
    }

    /// Bytes of memory one chunk may use, when the job sets a limit; the coordinator leases its chunks only to
    /// workers that have this much. `None` (the default): no limit, any worker will do.
    fn chunk_memory(&self) -> Option<u64> {
        None
    }

    /// Combines the artifacts of all chunks (in chunk order) into the job's artifact. Spaces without artifacts
    /// keep the default.
    fn merge_artifacts(
        &self,
        _artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        Ok(Vec::new())
    }

    /// The space-specific `result` object of the merged answer.
    fn result(&self, answer: &Answer) -> serde_json::Value;

    /// The merged answer for people: what the original programs printed, and more.
    fn render_text(&self, result: &serde_json::Value) -> String;

    /// The answer as compact JSON and as text for people: exactly `result` written out and `render_text` of it.
    /// A space whose answer shows many solutions may write both without building the tree (which is what a
    /// job's single-threaded end spends its time on); the default builds it.
    fn result_texts(&self, answer: &Answer) -> (String, String) {
        let value = self.result(answer);
        (value.to_string(), self.render_text(&value))
    }

    /// Every job whose merged artifact this job's chunks need (a distance table, the previous layer), in
    /// order, as (space, canonical params). The engine finds or creates each of them (recursively: an input may
    /// have inputs of its own, so a space can describe a chain or a DAG of jobs), runs none of this job's
    /// chunks before all of them are done, and hands their artifacts, in this order, to [`Job::bind_inputs`].
    /// The default: no inputs.
    fn inputs(&self) -> Vec<JobInput> {
        Vec::new()
    }

    /// Files this job ships to workers (a program and its data, uploaded once by the client), as blake3
    /// digests in hex. Their bytes follow the inputs' artifacts in [`Job::bind_inputs`].
    fn shipped(&self) -> Vec<String> {
        Vec::new()
    }

    /// This job with its input artifacts loaded, in the order of [`Job::inputs`] followed by the files of
    /// [`Job::shipped`]; parsed and checked once, then shared by every chunk the process runs. Only called
    /// for jobs that have inputs or shipped files.
    fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        Err(SpaceError::BadParams {
            space: self.space(),
            reason: format!(
                "this job takes no input artifacts, {} were given",
                artifacts.len()
            ),
        })
    }

    /// An estimate of the nodes [`Job::run_chunk`] will count for chunk `chunk` of `n_chunks`, made without
    /// running it; `None` (the default) when the space has no honest estimate. It exists for jobs whose size
    /// is not known in advance ([`Plan::total_nodes`] is `None`, e.g. a backtracking search): without it the
    /// engine can only extrapolate from finished chunks, which misleads when chunks differ in size. The
    /// engine combines the estimates with the real sizes of finished chunks into the job's expected size, for
    /// progress and ETAs only; nothing else depends on it.
    ///
    /// Contract: pure and deterministic (a function of the job, `n_chunks` and `chunk` alone, so any process
    /// gets the same figure and nothing needs storing), cheap (the engine asks for every chunk of a job when
    /// the job is created or loaded, off its lock: think microseconds, not a run of the chunk), and either
    /// `Some` for every chunk of a plan or for none (the engine asks chunk 0 first and stops at a `None`).
    /// Finite and non-negative; an unbiased estimate (e.g. Knuth's random probes of a backtracking tree) is
    /// worth more than a precise-looking biased one, since the engine corrects only for a bias it sees in
    /// finished chunks.
    fn estimate_chunk_nodes(&self, _n_chunks: u64, _chunk: u64) -> Option<f64> {
        None
    }

    /// Pictures of the merged answer as (file name, SVG text) pairs, written by the CLI's `--svg DIR`. Pure: the
    /// space only draws, the CLI writes. Spaces without pictures keep the default (none).
    fn pictures(&self, _result: &serde_json::Value) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The job whose artifact another job needs: see [`Job::inputs`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInput {
    pub space: String,
    pub params: serde_json::Value,
}

/// The typed side of a search space: parameters with clap (for `sweep run SPACE ...`) and serde (for storage and
/// the wire), and a constructor that validates them.
pub trait SearchSpace: Send + Sync + 'static {
    const NAME: &'static str;
    const ABOUT: &'static str;
    type Params: clap::Args + Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static;
    type Job: Job + 'static;
    /// Options whose value names a file: the command line reads it (a space never does I/O) and passes its
    /// text on as another option. Most spaces have none.
    const FILE_OPTIONS: &'static [FileOption] = &[];

    fn build(params: Self::Params) -> Result<Self::Job, SpaceError>;
}

/// An option that names a file ([`SearchSpace::FILE_OPTIONS`]): `flag FILE` on the command line becomes
/// `into TEXT`, where TEXT is the file's content as `read` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOption {
    pub flag: &'static str,
    pub into: &'static str,
    pub read: FileRead,
}

/// How a [`FileOption`]'s file becomes an option value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileRead {
    /// The whole text, as it is.
    Whole,
    /// The non-empty lines that are not `#` comments, joined with `sep`; appended to a value of `into` given
    /// on the command line, so files and inline values add up to one list.
    Lines { sep: &'static str },
}

/// Artifacts are binary; in JSON (job records, `--json`) they travel as hex so the text stays readable.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(&text).map_err(|e| serde::de::Error::custom(format!("artifact hex: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's own copy of this rule once planned `default.min(max)` chunks: zero when either was zero, a plan
    /// with no chunk to run. The contract never plans fewer than one.
    #[test]
    fn a_default_or_cap_of_zero_still_plans_one_chunk() {
        assert_eq!(Plan::chunk_count(None, 0, 5), Ok(1));
        assert_eq!(Plan::chunk_count(None, 8, 0), Ok(1));
        assert_eq!(Plan::chunk_count(None, 8, 5), Ok(5));
        assert_eq!(Plan::chunk_count(None, 3, 5), Ok(3));
        assert_eq!(Plan::chunk_count(Some(3), 3, 5), Ok(3));
        for bad in [Some(0), Some(4)] {
            assert!(matches!(
                Plan::chunk_count(bad, 3, 5),
                Err(SpaceError::InvalidParam { name: "chunks", .. })
            ));
        }
    }

    #[test]
    fn digest_changes_with_every_field() {
        let base = ChunkOutput {
            nodes: 5,
            solutions: vec!["a".into()],
            ..Default::default()
        };
        let mut counted = base.clone();
        counted.count("solutions", 1);
        let mut more_nodes = base.clone();
        more_nodes.nodes += 1;
        let mut with_artifact = base.clone();
        with_artifact.artifact = vec![1];
        let digests = [
            base.digest(),
            counted.digest(),
            more_nodes.digest(),
            with_artifact.digest(),
        ];
        for i in 0..digests.len() {
            for j in i + 1..digests.len() {
                assert_ne!(digests[i], digests[j], "{i} vs {j}");
            }
        }
        assert_eq!(base.digest(), base.clone().digest());
    }

    /// The digest as first written, one `update` per field: digests are stored and compared with those of
    /// later reports (a duplicate, a replica, another version's worker), so the value may never change.
    fn digest_field_by_field(out: &ChunkOutput) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(b"sweep-chunk-output-v1");
        h.update(&out.nodes.to_le_bytes());
        h.update(&(out.solutions.len() as u64).to_le_bytes());
        for s in &out.solutions {
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        h.update(&(out.counters.len() as u64).to_le_bytes());
        for (k, v) in &out.counters {
            h.update(&(k.len() as u64).to_le_bytes());
            h.update(k.as_bytes());
            h.update(&v.to_le_bytes());
        }
        h.update(&(out.artifact.len() as u64).to_le_bytes());
        h.update(&out.artifact);
        *h.finalize().as_bytes()
    }

    #[test]
    fn digest_is_the_field_by_field_hash_whatever_the_sizes() {
        let mut outputs = vec![ChunkOutput::default()];
        // Solutions that fill many pieces, one longer than a piece, and artifacts on both sides of a piece.
        for (n, long, artifact) in [
            (3, 0, 0),
            (100_000, 0, 10),
            (10, 200_000, 70_000),
            (0, 0, 1 << 20),
        ] {
            let mut out = ChunkOutput {
                nodes: n as u64 * 7 + 1,
                solutions: (0..n).map(|i| format!("{i},{}", i * 31 % 97)).collect(),
                artifact: (0..artifact).map(|i| (i * 13 % 251) as u8).collect(),
                ..Default::default()
            };
            if long > 0 {
                out.solutions.push("x".repeat(long));
            }
            out.count("solutions", n as u128 * 3);
            out.count("unique", n as u128);
            outputs.push(out);
        }
        for out in &outputs {
            assert_eq!(out.digest(), digest_field_by_field(out));
        }
    }

    #[test]
    fn answer_is_independent_of_merge_order() {
        let a = ChunkOutput {
            nodes: 3,
            solutions: vec!["b".into()],
            ..Default::default()
        };
        let mut b = ChunkOutput {
            nodes: 4,
            solutions: vec!["a".into()],
            ..Default::default()
        };
        b.count("x", u128::from(u64::MAX) + 7);
        let ab = Answer::from_outputs([&a, &b]);
        let ba = Answer::from_outputs([&b, &a]);
        assert_eq!(ab, ba);
        assert_eq!(ab.tally.nodes, 7);
        assert_eq!(ab.tally.counter("x"), u128::from(u64::MAX) + 7);
        assert_eq!(ab.solutions, vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn an_answer_keeps_the_smallest_solutions_in_any_order() {
        let outputs: Vec<ChunkOutput> = (0..7u64)
            .map(|c| ChunkOutput {
                nodes: c,
                // Interleaved across chunks, so no chunk holds a contiguous run of the smallest.
                solutions: (0..9).map(|i| format!("s{:03}", i * 7 + c)).collect(),
                ..Default::default()
            })
            .collect();
        let mut all: Vec<String> = outputs.iter().flat_map(|o| o.solutions.clone()).collect();
        all.sort();
        for keep in [0, 1, 5, 62, 63, 100] {
            let merge = |order: &mut dyn Iterator<Item = &ChunkOutput>| {
                let mut m = AnswerMerge::keeping(keep);
                order.for_each(|o| m.add(o));
                m.finish()
            };
            let forward = merge(&mut outputs.iter());
            let backward = merge(&mut outputs.iter().rev());
            assert_eq!(forward, backward, "keep {keep}");
            // Merged apart (as threads do) and absorbed: the same answer.
            let (mut odd, mut even) = (AnswerMerge::keeping(keep), AnswerMerge::keeping(keep));
            for (i, o) in outputs.iter().enumerate() {
                if i % 2 == 1 {
                    odd.add(o)
                } else {
                    even.add(o)
                }
            }
            even.absorb(odd);
            assert_eq!(even.finish(), forward, "keep {keep}");
            assert_eq!(forward.solutions, all[..keep.min(63)], "keep {keep}");
            assert_eq!(forward.solutions_listed, 63);
            assert_eq!(forward.solutions_truncated, keep < 63, "keep {keep}");
            assert_eq!(forward.tally.nodes, 21);
        }
    }

    #[test]
    fn artifact_survives_json() {
        let out = ChunkOutput {
            artifact: vec![0, 1, 254, 255],
            ..Default::default()
        };
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains("0001feff"), "{text}");
        assert_eq!(serde_json::from_str::<ChunkOutput>(&text).unwrap(), out);
        assert!(serde_json::from_str::<ChunkOutput>(r#"{"nodes":1,"artifact":"0g"}"#).is_err());
    }

    #[test]
    fn control_checkpoint_reports_cancellation() {
        let handle = ChunkControl::new(None);
        let ctl = handle.control();
        assert!(ctl.checkpoint(10).is_ok());
        handle.cancel();
        assert_eq!(ctl.checkpoint(5), Err(SpaceError::Cancelled));
        assert_eq!(handle.nodes(), 15);
    }
}
