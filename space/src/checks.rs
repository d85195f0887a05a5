//! The checks every space makes the same way, written once so that they read and fail alike everywhere: a
//! parameter outside its bounds, and a chunk index turned into that chunk's part of a range.

use std::fmt::Display;
use std::ops::RangeInclusive;

use crate::perm::split_range;
use crate::{Plan, SpaceError};

impl SpaceError {
    /// A bad parameter `name`, and why: what a space's `build` returns for a value it cannot search.
    pub fn invalid_param(name: &'static str, reason: impl Into<String>) -> SpaceError {
        SpaceError::InvalidParam {
            name,
            reason: reason.into(),
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

impl Plan {
    /// Chunk `chunk`'s part `[lo, hi)` of `0..total`, once the index is checked against a plan of at most `max`
    /// chunks ([`Plan::check_chunk`]): how a space that cuts a range (ranks, prefixes, integers) finds its chunk,
    /// in `run_chunk` and again in `verify`, the same way on the worker and the coordinator.
    pub fn chunk_range(
        total: u128,
        n_chunks: u64,
        chunk: u64,
        max: u64,
    ) -> Result<(u128, u128), SpaceError> {
        Plan::check_chunk(chunk, n_chunks, max)?;
        Ok(split_range(total, n_chunks, chunk))
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
        assert_eq!(Plan::chunk_range(10, 3, 0, 10), Ok((0, 3)));
        assert_eq!(Plan::chunk_range(10, 3, 2, 10), Ok((6, 10)));
        let ranges: Vec<_> = (0..4)
            .map(|c| Plan::chunk_range(7, 4, c, 7).expect("in the plan"))
            .collect();
        assert_eq!(ranges, [(0, 1), (1, 3), (3, 5), (5, 7)]);
    }

    #[test]
    fn a_chunk_outside_its_plan_has_no_range() {
        let out = |chunk, n_chunks| SpaceError::ChunkOutOfRange { chunk, n_chunks };
        assert_eq!(Plan::chunk_range(10, 3, 3, 10), Err(out(3, 3)));
        assert_eq!(
            Plan::chunk_range(10, 11, 0, 10),
            Err(out(0, 11)),
            "a plan of more chunks than the job can make"
        );
    }
}
