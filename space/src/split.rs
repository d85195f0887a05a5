//! Splitting a running chunk, so that work follows the idle threads: the vocabulary a kernel hands off with.
//!
//! A run of a chunk covers a part of it, named by a state in the resume-state vocabulary ([`Control::resume_state`]):
//! no state is the whole chunk; a state names a part (and may carry counts of what is done in it). When the
//! engine asks ([`crate::ChunkControl::request_split`]), a kernel that can split gives away part of what it has
//! not started with [`Control::hand_off`]: `given` is a state from which a new run of the same chunk searches
//! exactly that part, counting from zero, and `kept` a state from which a run searches exactly what this run
//! still answers for (what it has done and what it keeps). The one rule that makes pieces exact:
//!
//! > output(run of `parent`) = output(run of `kept`) + output(run of `given`), counter by counter, node by node,
//! > and as a set of solutions.
//!
//! So a chunk split any number of times, in any order, adds up to the unsplit chunk, and a crash after a split
//! restarts each part from its own state. [`Job::check_split`] lets whoever records a split check it without
//! running anything: both states parse and the two parts cover the parent's part exactly.
//!
//! Most kernels walk a range of items (prefixes, ranks, integers): [`Span`] is their state, and [`SpanWalk`] the
//! loop that hands off the upper half of the items not yet started when asked.
//!
//! [`Job::check_split`]: crate::Job::check_split

use crate::{ChunkId, Control, SpaceError};

/// The part `[lo, hi)` of a chunk's range of items that a run covers, written as the state `span LO HI`. A run
/// from a span counts from zero: kernels that split by spans keep what they found in memory, so a span is
/// also what a parent keeps (its own start up to where the given part begins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub lo: u128,
    pub hi: u128,
}

const SPAN_TAG: &str = "span";

impl Span {
    /// The state that names this span.
    pub fn state(self) -> String {
        format!("{SPAN_TAG} {} {}", self.lo, self.hi)
    }

    /// Reads a state written by [`Span::state`].
    pub fn parse(state: &str) -> Result<Span, SpaceError> {
        let bad = || {
            SpaceError::invalid_param("state", format!("`{state}` is not a span (`span LO HI`)"))
        };
        let mut words = state.split(' ');
        if words.next() != Some(SPAN_TAG) {
            return Err(bad());
        }
        let mut number = || {
            words
                .next()
                .and_then(|w| w.parse::<u128>().ok())
                .ok_or_else(bad)
        };
        let (lo, hi) = (number()?, number()?);
        if words.next().is_some() || lo >= hi {
            return Err(bad());
        }
        Ok(Span { lo, hi })
    }

    /// The part of chunk `at` (of `0..total`, in a plan of at most `max` chunks) that `state` names: a span
    /// inside the chunk's range; `None` is the whole chunk.
    pub fn of(at: ChunkId, total: u128, max: u64, state: Option<&str>) -> Result<Span, SpaceError> {
        let (lo, hi) = at.range(total, max)?;
        let Some(state) = state else {
            return Ok(Span { lo, hi });
        };
        let span = Span::parse(state)?;
        if span.lo < lo || span.hi > hi {
            return Err(SpaceError::invalid_param(
                "state",
                format!(
                    "span {}..{} is not inside {at}, which is {lo}..{hi}",
                    span.lo, span.hi
                ),
            ));
        }
        Ok(span)
    }

    /// The part a run of chunk `at` covers: the span its resume state names, or the whole chunk.
    pub fn of_run(at: ChunkId, total: u128, max: u64, ctl: &Control) -> Result<Span, SpaceError> {
        Span::of(at, total, max, ctl.resume_state())
    }

    /// Checks a split of chunk `at` into spans ([`crate::Job::check_split`] for a space that splits by spans):
    /// `kept` starts where `parent` starts, `given` ends where it ends, and they meet, so together they cover
    /// the parent exactly once.
    pub fn check_split(
        at: ChunkId,
        total: u128,
        max: u64,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        let parent = Span::of(at, total, max, parent)?;
        let kept = Span::of(at, total, max, Some(kept))?;
        let given = Span::of(at, total, max, Some(given))?;
        if kept.lo != parent.lo || kept.hi != given.lo || given.hi != parent.hi {
            return Err(SpaceError::Verification(format!(
                "a split of {}..{} into {}..{} and {}..{} does not cover it exactly once",
                parent.lo, parent.hi, kept.lo, kept.hi, given.lo, given.hi
            )));
        }
        Ok(())
    }

    pub fn len(self) -> u128 {
        self.hi - self.lo
    }

    pub fn is_empty(self) -> bool {
        self.hi <= self.lo
    }
}

/// The items of a span in order, for a kernel that searches one item at a time: before each item it looks
/// whether the engine asked for a split, and if at least two items are left it hands off the upper half of
/// them and goes on with the lower. The look is one relaxed atomic load per item.
#[derive(Debug)]
pub struct SpanWalk<'a> {
    ctl: &'a Control,
    lo: u128,
    next: u128,
    hi: u128,
}

impl<'a> SpanWalk<'a> {
    pub fn new(span: Span, ctl: &'a Control) -> SpanWalk<'a> {
        SpanWalk {
            ctl,
            lo: span.lo,
            next: span.lo,
            hi: span.hi,
        }
    }

    /// The items of `span` from `next` on, for a run that continues its part from a checkpoint: the items
    /// before `next` were done by an earlier attempt whose counts the run carries, so what it keeps after a
    /// split still starts at `span.lo`. `next` past the span's end is clamped to it (nothing left).
    pub fn resuming(span: Span, next: u128, ctl: &'a Control) -> SpanWalk<'a> {
        SpanWalk {
            ctl,
            lo: span.lo,
            next: next.clamp(span.lo, span.hi),
            hi: span.hi,
        }
    }

    /// What this run answers for now: its start up to where the parts it gave away begin.
    pub fn span(&self) -> Span {
        Span {
            lo: self.lo,
            hi: self.hi,
        }
    }

    /// Gives away the upper half of the items not started, if there are two or more; else declines.
    fn split(&mut self) {
        let left = self.hi - self.next;
        if left < 2 {
            self.ctl.decline_split();
            return;
        }
        let mid = self.next + left / 2;
        let kept = Span {
            lo: self.lo,
            hi: mid,
        };
        let given = Span {
            lo: mid,
            hi: self.hi,
        };
        // Spans are a few dozen bytes, far below the size limit: a refusal cannot happen, and if it did the
        // run would simply go on whole.
        if self.ctl.hand_off(kept.state(), given.state()).is_ok() {
            self.hi = mid;
        }
    }
}

impl Iterator for SpanWalk<'_> {
    type Item = u128;

    fn next(&mut self) -> Option<u128> {
        if self.ctl.split_requested() {
            self.split();
        }
        if self.next >= self.hi {
            return None;
        }
        self.next += 1;
        Some(self.next - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkControl;

    #[test]
    fn a_span_reads_back_what_it_writes_and_refuses_the_rest() {
        let s = Span { lo: 3, hi: 10 };
        assert_eq!(Span::parse(&s.state()), Ok(s));
        for bad in [
            "",
            "span",
            "span 3",
            "span 3 3",
            "span 4 3",
            "span 1 2 3",
            "spam 1 2",
            "span -1 2",
        ] {
            assert!(Span::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_span_must_lie_inside_its_chunk() {
        let at = ChunkId::new(2, 1);
        assert_eq!(Span::of(at, 10, 10, None), Ok(Span { lo: 5, hi: 10 }));
        assert_eq!(
            Span::of(at, 10, 10, Some("span 6 8")),
            Ok(Span { lo: 6, hi: 8 })
        );
        assert!(Span::of(at, 10, 10, Some("span 4 8")).is_err());
        assert!(Span::of(at, 10, 10, Some("span 6 11")).is_err());
        assert!(Span::of(ChunkId::new(2, 2), 10, 10, None).is_err());
    }

    #[test]
    fn a_split_must_cover_its_parent_exactly_once() {
        let at = ChunkId::new(1, 0);
        let ok = |parent, kept, given| Span::check_split(at, 100, 1, parent, kept, given).is_ok();
        assert!(ok(None, "span 0 40", "span 40 100"));
        assert!(ok(Some("span 0 40"), "span 0 20", "span 20 40"));
        assert!(!ok(None, "span 0 50", "span 40 100"), "overlap");
        assert!(!ok(None, "span 0 40", "span 50 100"), "gap");
        assert!(
            !ok(Some("span 0 40"), "span 0 20", "span 20 100"),
            "beyond the parent"
        );
        assert!(
            !ok(None, "span 10 40", "span 40 100"),
            "the kept part moved its start"
        );
        assert!(!ok(None, "garbage", "span 40 100"));
    }

    #[test]
    fn a_walk_hands_off_the_upper_half_of_what_is_left_when_asked() {
        let handle = ChunkControl::new(None);
        let mut walk = SpanWalk::new(Span { lo: 0, hi: 10 }, handle.control());
        assert_eq!(walk.next(), Some(0));
        assert_eq!(walk.next(), Some(1));
        handle.request_split();
        // Items 2..10 were not started: 6..10 go, 2..6 stay with 0..2.
        assert_eq!(walk.by_ref().collect::<Vec<_>>(), [2, 3, 4, 5]);
        let handoffs = handle.take_handoffs();
        assert_eq!(handoffs.len(), 1);
        assert_eq!(handoffs[0].kept, "span 0 6");
        assert_eq!(handoffs[0].given, "span 6 10");
        assert!(!handle.split_pending(), "answered");
    }

    #[test]
    fn a_resumed_walk_keeps_the_items_its_earlier_attempt_did() {
        let handle = ChunkControl::new(None);
        let mut walk = SpanWalk::resuming(Span { lo: 2, hi: 12 }, 6, handle.control());
        assert_eq!(walk.next(), Some(6));
        handle.request_split();
        // 7..12 are not started: the upper half of them, 9..12, goes, and the run still answers for 2..9.
        assert_eq!(walk.by_ref().collect::<Vec<_>>(), [7, 8]);
        let handoffs = handle.take_handoffs();
        assert_eq!(handoffs.len(), 1);
        assert_eq!(handoffs[0].kept, "span 2 9");
        assert_eq!(handoffs[0].given, "span 9 12");
        let done = SpanWalk::resuming(Span { lo: 2, hi: 12 }, 99, handle.control());
        assert_eq!(done.count(), 0);
    }

    #[test]
    fn a_walk_with_one_item_left_declines() {
        let handle = ChunkControl::new(None);
        let mut walk = SpanWalk::new(Span { lo: 0, hi: 2 }, handle.control());
        assert_eq!(walk.next(), Some(0));
        handle.request_split();
        assert_eq!(walk.next(), Some(1));
        assert_eq!(walk.next(), None);
        assert!(handle.take_handoffs().is_empty());
        assert!(!handle.split_pending(), "declined, not left hanging");
    }
}
