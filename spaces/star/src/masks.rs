//! Sets of labels as `u64` bit masks (bit `l` for label `l`): the search, the prefix list and the check of a
//! listed star all reason about free labels, and one mask operation replaces a loop over candidates.
//!
//! Every helper is `#[inline]`: they sit in the search's inner loop, which lives in another module.

/// Values `v` with `t - v` in `set` (values are bit positions): bit `v` of the result is bit `t - v` of `set`.
/// This turns "the derived cell must get a free value" into one mask per level instead of a test per candidate.
#[inline(always)]
pub(crate) fn mirror(set: u64, t: i32) -> u64 {
    let r = set.reverse_bits();
    match t {
        i32::MIN..=-1 => 0,
        0..=63 => r >> (63 - t),
        // t < 2 * 64, so the shift stays below 64; bits pushed past 63 are values no star has.
        _ => r << (t - 63),
    }
}

/// Labels 1..=`cells` as a mask (bit `l` for label `l`): the free values of the search, the prefixes and a
/// listed star's check all start from it.
#[inline]
pub(crate) fn label_bits(cells: usize) -> u64 {
    ((1u64 << cells) - 1) << 1
}

/// The labels above `a` among 1..=`cells`: what an outer cell may take once O_0 = a (every outer label
/// exceeds O_0).
#[inline]
pub(crate) fn labels_above(cells: usize, a: i32) -> u64 {
    label_bits(cells) & !((1u64 << (a + 1)) - 1)
}

/// The bit of `t / 2` when `t` is even: a candidate `v` with `t - v == v` would use one value twice.
#[inline]
pub(crate) fn half(t: i32) -> u64 {
    if t >= 0 && t % 2 == 0 && t / 2 < 64 {
        1u64 << (t / 2)
    } else {
        0
    }
}
