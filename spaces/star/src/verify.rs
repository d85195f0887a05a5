//! What the coordinator checks of a chunk's report before it counts: the counters agree with each other and
//! with the method, and every listed star is read back, summed line by line and found canonical. A worker's
//! report is not trusted, so this is apart from the kernels that produce it and shares nothing with them but
//! the geometry and the text format.

use sweep_space::{ChunkId, ChunkOutput, SpaceError};

use crate::brute::total_perms;
use crate::geometry::Geometry;
use crate::labels::parse_solution_into;
use crate::params::Method;

/// What a chunk's counters must say whether or not it lists its stars: a brute-force chunk tests every
/// permutation of its range once; a backtracking one finds each star in canonical form, standing for 2n.
pub(crate) fn check_counts(
    geo: &Geometry,
    method: Method,
    at: ChunkId,
    out: &ChunkOutput,
) -> Result<(), SpaceError> {
    at.check(u64::MAX)?;
    let solutions = out.counters.get("solutions").copied().unwrap_or(0);
    if method == Method::Brute {
        let (lo, hi) = at.split(total_perms(geo));
        out.check_nodes(hi - lo, "permutations tested")?;
    } else {
        let unique = out.counters.get("unique").copied().unwrap_or(0);
        if solutions != 2 * geo.n as u128 * unique {
            return Err(SpaceError::Verification(format!(
                "{solutions} solutions for {unique} unique stars, expected 2n = {} times as many",
                2 * geo.n
            )));
        }
    }
    Ok(())
}

/// Every listed star is a magic labelling in canonical form.
pub(crate) fn check_listed(geo: &Geometry, out: &ChunkOutput) -> Result<(), SpaceError> {
    let mut buf = [0; 64];
    for s in &out.solutions {
        let labels = parse_solution_into(s, 2 * geo.n, &mut buf)?;
        if !geo.all_lines_hold(labels) {
            return Err(SpaceError::Verification(format!(
                "solution `{s}`: a line misses {}",
                geo.magic
            )));
        }
        if !geo.is_canonical(labels) {
            return Err(SpaceError::Verification(format!(
                "solution `{s}` is not in canonical form"
            )));
        }
    }
    Ok(())
}
