//! The checks every space makes the same way, written once so that they read and fail alike everywhere: a
//! parameter outside its bounds, and a chunk index turned into that chunk's part of a range.

use std::fmt::Display;
use std::ops::RangeInclusive;

use crate::perm::split_range;
use crate::{ChunkId, SpaceError};

impl SpaceError {
    /// A bad parameter `name`, and why: what a space's `build` returns for a value it cannot search.
    pub fn invalid_param(name: &'static str, reason: impl Into<String>) -> SpaceError {
        SpaceError::InvalidParam {
            name,
            reason: reason.into(),
        }
    }

    /// Chunk `at` lies outside every plan the job can make.
    pub fn out_of_plan(at: ChunkId) -> SpaceError {
        SpaceError::ChunkOutOfRange {
            chunk: at.chunk,
            n_chunks: at.n_chunks,
        }
    }

    /// Checks a numeric parameter against its bounds, with one wording for every space ("13 is out of range:
    /// rows must be 1..=12"); returns the value, so a check can stand where the value is used. Parameters are
    /// checked in `build` even where clap bounds them too: a submitted job's parameters arrive as JSON.
    pub fn check_param_range<T: PartialOrd + Display>(
        name: &'static str,
        value: T,
        bounds: RangeInclusive<T>,
    ) -> Result<T, SpaceError> {
        if bounds.contains(&value) {
            return Ok(value);
        }
        Err(SpaceError::invalid_param(
            name,
            format!(
                "{value} is out of range: {name} must be {}..={}",
                bounds.start(),
                bounds.end()
            ),
        ))
    }
}

impl ChunkId {
    /// This chunk's part `[lo, hi)` of `0..total`, once it is checked against a plan of at most `max` chunks
    /// ([`ChunkId::check`]): how a space that cuts a range (ranks, prefixes, integers) finds its chunk, in
    /// `run_chunk` and again in `verify`, the same way on the worker and the coordinator.
    pub fn range(self, total: u128, max: u64) -> Result<(u128, u128), SpaceError> {
        self.check(max)?;
        Ok(self.split(total))
    }

    /// This chunk's part of `0..total` without a check: for a job's own code, once the chunk is known to be in
    /// its plan.
    pub fn split(self, total: u128) -> (u128, u128) {
        split_range(total, self.n_chunks, self.chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_inside_its_bounds_passes_through() {
        assert_eq!(SpaceError::check_param_range("rows", 1u32, 1..=12), Ok(1));
        assert_eq!(SpaceError::check_param_range("rows", 12u32, 1..=12), Ok(12));
    }

    #[test]
    fn a_parameter_outside_its_bounds_names_itself_and_its_bounds() {
        for bad in [0u32, 13] {
            let err = SpaceError::check_param_range("rows", bad, 1..=12).unwrap_err();
            assert_eq!(
                err,
                SpaceError::InvalidParam {
                    name: "rows",
                    reason: format!("{bad} is out of range: rows must be 1..=12"),
                }
            );
        }
    }

    #[test]
    fn a_chunk_range_is_the_split_of_a_chunk_inside_its_plan() {
        let at = |chunk, n_chunks| ChunkId::new(n_chunks, chunk);
        assert_eq!(at(0, 3).range(10, 10), Ok((0, 3)));
        assert_eq!(at(2, 3).range(10, 10), Ok((6, 10)));
        let ranges: Vec<_> = ChunkId::all(4)
            .map(|c| c.range(7, 7).expect("in the plan"))
            .collect();
        assert_eq!(ranges, [(0, 1), (1, 3), (3, 5), (5, 7)]);
    }

    #[test]
    fn a_chunk_outside_its_plan_has_no_range() {
        let out = |chunk, n_chunks| SpaceError::ChunkOutOfRange { chunk, n_chunks };
        let at = |chunk, n_chunks| ChunkId::new(n_chunks, chunk);
        assert_eq!(at(3, 3).range(10, 10), Err(out(3, 3)));
        assert_eq!(
            at(0, 11).range(10, 10),
            Err(out(0, 11)),
            "a plan of more chunks than the job can make"
        );
    }
}
