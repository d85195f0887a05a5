//! A chunk's control: the kernel's half ([`Control`]) and the engine's ([`ChunkControl`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::SpaceError;

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
    /// The engine asked this run to give away part of its work (see [`Control::split_requested`]).
    split_requested: AtomicBool,
    /// Parts given away and not yet taken by the engine, oldest first.
    handoffs: Mutex<Vec<Handoff>>,
}

/// A part of a running chunk's work given away ([`Control::hand_off`]): see the [`crate::split`] module for the
/// rule the two states keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    /// What the run still answers for, as a state a new run could start from.
    pub kept: String,
    /// The part given away, as a state a new run of the same chunk starts from, counting from zero.
    pub given: String,
}

#[derive(Debug, Default)]
struct SavedState {
    text: Option<String>,
    taken: bool,
    /// Parts given away so far: under the same lock as the state, so a state taken is known to be of the part
    /// before or after each split (see [`ChunkControl::take_resume_state_in`]).
    handoffs: u32,
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
        check_state_size("resume state", "the state", &state)?;
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        saved.text = Some(state);
        saved.taken = false;
        Ok(())
    }

    /// Whether the engine asks this run to give away part of the work it has not started (because a thread
    /// is idle). A kernel that can split looks now and then (between prefixes, segments, items: see
    /// [`crate::SpanWalk`]) and answers with [`Control::hand_off`], or [`Control::decline_split`] when it has
    /// too little left. One relaxed load.
    pub fn split_requested(&self) -> bool {
        self.split_requested.load(Ordering::Relaxed)
    }

    /// Gives away part of this run's work: from now on the run answers only for `kept`, and a new run of the
    /// same chunk started from `given` does the rest. The caller must already have narrowed its own work to
    /// `kept`. A state saved before and not yet taken is dropped, since it names the part before the split.
    /// States over [`MAX_RESUME_STATE_BYTES`] are refused, and then nothing is given away.
    pub fn hand_off(&self, kept: String, given: String) -> Result<(), SpaceError> {
        check_state_size("split state", "the kept part", &kept)?;
        check_state_size("split state", "the given part", &given)?;
        {
            let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
            saved.text = None;
            saved.taken = true;
            saved.handoffs += 1;
        }
        self.handoffs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Handoff { kept, given });
        self.split_requested.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Answers a split request with "not now" (too little left to give away): the engine may ask again later.
    pub fn decline_split(&self) {
        self.split_requested.store(false, Ordering::Relaxed);
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

/// Refuses a state over [`MAX_RESUME_STATE_BYTES`]: the coordinator keeps states durably, one per running chunk
/// and piece.
fn check_state_size(name: &'static str, what: &str, state: &str) -> Result<(), SpaceError> {
    if state.len() > MAX_RESUME_STATE_BYTES {
        return Err(SpaceError::InvalidParam {
            name,
            reason: format!(
                "{what} is {} bytes, more than the {MAX_RESUME_STATE_BYTES} a state may have",
                state.len()
            ),
        });
    }
    Ok(())
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
        self.take_resume_state_in().map(|(state, _)| state)
    }

    /// [`ChunkControl::take_resume_state`] with the number of parts the run had given away when the state was
    /// saved: whoever keeps states of split runs must tell a state of the part before a split from one after.
    pub fn take_resume_state_in(&self) -> Option<(String, u32)> {
        let mut saved = self.control.saved.lock().unwrap_or_else(|p| p.into_inner());
        if saved.taken {
            return None;
        }
        saved.taken = true;
        saved.text.clone().map(|t| (t, saved.handoffs))
    }

    /// How many parts the run has given away ([`Control::hand_off`]) so far, taken or not.
    pub fn handoffs_made(&self) -> u32 {
        self.control
            .saved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .handoffs
    }

    /// Nodes reported so far by the kernel (a progress figure; the exact count is in the chunk's output).
    pub fn nodes(&self) -> u64 {
        self.control.nodes()
    }

    /// Asks the kernel to give away part of its work ([`Control::split_requested`]). A kernel that cannot
    /// split never looks, so the request stays pending and costs nothing.
    pub fn request_split(&self) {
        self.control.split_requested.store(true, Ordering::Relaxed);
    }

    /// Whether a split was asked for and not answered yet.
    pub fn split_pending(&self) -> bool {
        self.control.split_requested()
    }

    /// The parts the kernel gave away since the last call, oldest first.
    pub fn take_handoffs(&self) -> Vec<Handoff> {
        std::mem::take(
            &mut *self
                .control
                .handoffs
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_checkpoint_reports_cancellation() {
        let handle = ChunkControl::new(None);
        let ctl = handle.control();
        assert!(ctl.checkpoint(10).is_ok());
        handle.cancel();
        assert_eq!(ctl.checkpoint(5), Err(SpaceError::Cancelled));
        assert_eq!(handle.nodes(), 15);
    }

    #[test]
    fn a_hand_off_answers_the_request_and_drops_the_older_saved_state() {
        let handle = ChunkControl::new(None);
        let ctl = handle.control();
        ctl.save_resume_state("before the split").unwrap();
        handle.request_split();
        assert!(ctl.split_requested());
        ctl.hand_off("kept".into(), "given".into()).unwrap();
        assert!(!handle.split_pending());
        assert_eq!(
            handle.take_resume_state(),
            None,
            "it named the part before the split"
        );
        let taken = handle.take_handoffs();
        assert_eq!(
            taken,
            [Handoff {
                kept: "kept".into(),
                given: "given".into()
            }]
        );
        assert!(handle.take_handoffs().is_empty(), "taken once");
        let big = "x".repeat(MAX_RESUME_STATE_BYTES + 1);
        assert!(ctl.hand_off("kept".into(), big).is_err());
        assert!(
            handle.take_handoffs().is_empty(),
            "a refused hand-off gives nothing away"
        );
    }

    #[test]
    fn resume_state_is_bounded_and_taken_once() {
        let handle = ChunkControl::new(Some("at 5".into()));
        let ctl = handle.control();
        assert_eq!(ctl.resume_state(), Some("at 5"));
        assert_eq!(handle.take_resume_state(), None);
        ctl.save_resume_state("at 7").unwrap();
        assert_eq!(handle.take_resume_state().as_deref(), Some("at 7"));
        assert_eq!(handle.take_resume_state(), None, "nothing new");
        let big = "x".repeat(MAX_RESUME_STATE_BYTES + 1);
        assert!(ctl.save_resume_state(big).is_err());
        let empty = ChunkControl::new(Some(String::new()));
        assert_eq!(empty.control().resume_state(), None);
    }
}
