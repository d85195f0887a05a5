//! [`Meter`]: the node accounting every kernel does the same way. A kernel counts its exact nodes in the meter
//! and marks each step of its hot loop; every [`STEPS_PER_CHECK`] steps the meter publishes the nodes counted
//! since the last check to the chunk's [`Control`] (the progress bars) and fails with [`SpaceError::Cancelled`]
//! if the chunk was cancelled. Between checks a step costs a decrement and a compare, and the atomics of the
//! control are touched only at a check.

use crate::{Control, SpaceError};

/// Steps of a kernel's hot loop between two checks of its [`Control`].
///
/// One figure for every kernel: a check costs a relaxed atomic add and a load (tens of nanoseconds), which over
/// 16,384 steps of even the cheapest kernel (a few nanoseconds each: a star or billiard rank block, a table walk
/// move) is well under 1%; and the dearest steps (a buzzled propagation, a peg layer expansion with its
/// canonical forms, around a microsecond) still notice a cancellation within about 20 ms. Steps rather than
/// nodes are counted because a rank-range kernel accounts a whole block of ranks in one step: checking every so
/// many nodes would check at nearly every step where the blocks are large.
pub const STEPS_PER_CHECK: u32 = 1 << 14;

/// A kernel's node counter: exact counts for its output, progress and cancellation checks for its control.
///
/// ```
/// use sweep_space::{Control, Meter, SpaceError};
///
/// fn walk(items: &[u64], ctl: &Control) -> Result<u64, SpaceError> {
///     let mut meter = Meter::new(ctl);
///     for _ in items {
///         meter.tick()?; // one node, one step
///     }
///     Ok(meter.finish()) // the exact count, all of it published
/// }
/// assert_eq!(walk(&[1, 2, 3], &Control::new()), Ok(3));
/// ```
#[derive(Debug)]
pub struct Meter<'a> {
    /// Absent for a kernel run outside any chunk (a generator's inner solve): it counts and never stops.
    ctl: Option<&'a Control>,
    nodes: u64,
    /// How many of `nodes` the control has been told about.
    published: u64,
    /// Steps until the next check (never 0 between calls). The first step checks, so that a chunk cancelled
    /// before it started stops at once however few steps it would take.
    steps_left: u32,
}

impl<'a> Meter<'a> {
    pub fn new(ctl: &'a Control) -> Self {
        Self::with(Some(ctl))
    }

    /// A meter that only counts: for a kernel used outside any chunk, which nobody cancels or watches.
    pub fn detached() -> Self {
        Self::with(None)
    }

    fn with(ctl: Option<&'a Control>) -> Self {
        Meter {
            ctl,
            nodes: 0,
            published: 0,
            steps_left: 1,
        }
    }

    /// One node, one step: the usual call of a kernel whose steps are its nodes.
    #[inline]
    pub fn tick(&mut self) -> Result<(), SpaceError> {
        self.add(1)
    }

    /// `n` nodes in one step (a rank-range kernel accounting a whole block at once).
    #[inline]
    pub fn add(&mut self, n: u64) -> Result<(), SpaceError> {
        self.nodes += n;
        self.step()
    }

    /// Counts `n` nodes without a step: for a hot loop that marks its step once at a safe point (the end of a
    /// call) rather than at every node.
    #[inline]
    pub fn count(&mut self, n: u64) {
        self.nodes += n;
    }

    /// One step of the kernel's loop; checks the control when [`STEPS_PER_CHECK`] steps have passed.
    #[inline]
    pub fn step(&mut self) -> Result<(), SpaceError> {
        self.steps_left -= 1;
        if self.steps_left == 0 {
            self.check()
        } else {
            Ok(())
        }
    }

    #[cold]
    #[inline(never)]
    fn check(&mut self) -> Result<(), SpaceError> {
        self.steps_left = STEPS_PER_CHECK;
        self.publish();
        match self.ctl {
            Some(ctl) if ctl.is_cancelled() => Err(SpaceError::Cancelled),
            _ => Ok(()),
        }
    }

    fn publish(&mut self) {
        if let Some(ctl) = self.ctl {
            ctl.add_nodes(self.nodes - self.published);
        }
        self.published = self.nodes;
    }

    /// Publishes now and fails if the chunk was cancelled, whatever the steps: for a kernel whose checks follow a
    /// cadence of its own (one that saves resume states at them every so many nodes, where its search allows a
    /// cursor). The step count starts over.
    pub fn checkpoint(&mut self) -> Result<(), SpaceError> {
        self.check()
    }

    /// Nodes counted since the last publication: what such a kernel's cadence is measured in.
    #[inline]
    pub fn unpublished(&self) -> u64 {
        self.nodes - self.published
    }

    /// Takes up the count a chunk had reached when it saved the resume state it continues from: counted in the
    /// output, as an uninterrupted run counts them, but not published, since the attempt that did that work
    /// published it.
    pub fn resume_at(&mut self, nodes: u64) {
        self.nodes = nodes;
        self.published = nodes;
    }

    /// The exact nodes counted so far.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// Publishes the nodes not yet published and returns the exact count. A kernel calls it once it is done (a
    /// second call publishes nothing more); a cancelled kernel need not, its progress no longer matters.
    pub fn finish(&mut self) -> u64 {
        self.publish();
        self.nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkControl;

    #[test]
    fn a_cancellation_is_noticed_within_one_interval_of_steps() {
        let handle = ChunkControl::new(None);
        let mut meter = Meter::new(handle.control());
        for _ in 0..1000 {
            meter.tick().expect("not cancelled yet");
        }
        handle.cancel();
        let mut steps = 0u64;
        while meter.tick().is_ok() {
            steps += 1;
            assert!(steps < u64::from(STEPS_PER_CHECK), "still running");
        }
        assert_eq!(meter.tick(), Ok(()), "an error is reported once per check");
        assert!(steps < u64::from(STEPS_PER_CHECK));
    }

    #[test]
    fn a_chunk_cancelled_before_it_starts_stops_at_its_first_step() {
        let handle = ChunkControl::new(None);
        handle.cancel();
        let mut meter = Meter::new(handle.control());
        assert_eq!(meter.step(), Err(SpaceError::Cancelled));
        assert_eq!(meter.nodes(), 0);
    }

    #[test]
    fn the_published_count_is_exact_at_the_end() {
        let handle = ChunkControl::new(None);
        let mut meter = Meter::new(handle.control());
        let mut expected = 0u64;
        for i in 0..3 * u64::from(STEPS_PER_CHECK) + 17 {
            meter.add(i % 5).expect("never cancelled");
            meter.count(2);
            expected += i % 5 + 2;
        }
        assert!(handle.nodes() > 0, "checks along the way publish");
        assert!(
            handle.nodes() < expected,
            "but not what came after the last one"
        );
        assert_eq!(meter.finish(), expected);
        assert_eq!(handle.nodes(), expected);
        assert_eq!(meter.finish(), expected);
        assert_eq!(
            handle.nodes(),
            expected,
            "a second finish publishes nothing twice"
        );
    }

    #[test]
    fn progress_is_published_at_every_check() {
        let handle = ChunkControl::new(None);
        let mut meter = Meter::new(handle.control());
        meter.add(3).expect("never cancelled");
        assert_eq!(handle.nodes(), 3, "the first step checks");
        for _ in 0..STEPS_PER_CHECK - 1 {
            meter.add(3).expect("never cancelled");
        }
        assert_eq!(handle.nodes(), 3);
        meter.add(3).expect("never cancelled");
        assert_eq!(handle.nodes(), 3 * (u64::from(STEPS_PER_CHECK) + 1));
    }

    #[test]
    fn a_checkpoint_publishes_and_checks_at_once() {
        let handle = ChunkControl::new(None);
        let mut meter = Meter::new(handle.control());
        meter.tick().expect("not cancelled");
        meter.count(41);
        assert_eq!(meter.unpublished(), 41);
        meter.checkpoint().expect("not cancelled");
        assert_eq!((handle.nodes(), meter.unpublished()), (42, 0));
        handle.cancel();
        assert_eq!(meter.checkpoint(), Err(SpaceError::Cancelled));
    }

    #[test]
    fn a_resumed_count_is_in_the_output_but_not_published_again() {
        let handle = ChunkControl::new(None);
        let mut meter = Meter::new(handle.control());
        meter.resume_at(1000);
        assert_eq!(meter.unpublished(), 0);
        meter.count(5);
        assert_eq!(meter.finish(), 1005);
        assert_eq!(handle.nodes(), 5, "only this attempt's work is progress");
    }

    #[test]
    fn a_detached_meter_counts_and_never_stops() {
        let mut meter = Meter::detached();
        for _ in 0..2 * STEPS_PER_CHECK {
            meter.tick().expect("nobody cancels a detached meter");
        }
        assert_eq!(meter.finish(), 2 * u64::from(STEPS_PER_CHECK));
    }
}
