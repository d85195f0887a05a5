//! Permutations in lexicographic order: factorials, rank and unrank. Brute-force spaces are split into ranges of
//! permutation ranks, so a chunk is two integers and chunk borders never skip or repeat a permutation.

/// The largest n whose n! fits in a u64 (20! = 2,432,902,008,176,640,000).
pub const MAX_N: usize = 20;

/// `n!` for n <= [`MAX_N`].
pub const fn factorial(n: usize) -> u64 {
    let mut f = 1u64;
    let mut i = 2;
    while i <= n {
        f *= i as u64;
        i += 1;
    }
    f
}

/// `FACTORIALS[i] = i!`.
pub const FACTORIALS: [u64; MAX_N + 1] = {
    let mut t = [1u64; MAX_N + 1];
    let mut i = 1;
    while i <= MAX_N {
        t[i] = factorial(i);
        i += 1;
    }
    t
};

/// The lexicographic rank of `perm`, a permutation of `0..perm.len()`. Returns `None` if it is not one.
pub fn rank(perm: &[u8]) -> Option<u64> {
    let n = perm.len();
    if n > MAX_N {
        return None;
    }
    let mut seen = 0u32;
    let mut r = 0u64;
    for (i, &p) in perm.iter().enumerate() {
        if usize::from(p) >= n || seen & (1 << p) != 0 {
            return None;
        }
        // How many unused values are smaller than p: that many whole blocks of (n-1-i)! come before.
        let smaller_unused = (p as u32) - (seen & ((1u32 << p) - 1)).count_ones();
        r += u64::from(smaller_unused) * FACTORIALS[n - 1 - i];
        seen |= 1 << p;
    }
    Some(r)
}

/// The permutation of `0..n` with lexicographic rank `r`, or `None` if `n > MAX_N` or `r >= n!`.
pub fn unrank(n: usize, mut r: u64) -> Option<Vec<u8>> {
    if n > MAX_N || r >= FACTORIALS[n] {
        return None;
    }
    let mut unused: Vec<u8> = (0..n as u8).collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let block = FACTORIALS[n - 1 - i];
        let idx = (r / block) as usize;
        r %= block;
        out.push(unused.remove(idx));
    }
    Some(out)
}

/// Splits `0..total` into `n_chunks` contiguous ranges whose sizes differ by at most one; returns chunk `i`.
pub fn split_range(total: u128, n_chunks: u64, i: u64) -> (u128, u128) {
    let k = u128::from(n_chunks.max(1));
    let i = u128::from(i);
    (total * i / k, total * (i + 1) / k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn factorials() {
        assert_eq!(FACTORIALS[0], 1);
        assert_eq!(FACTORIALS[12], 479_001_600);
        assert_eq!(FACTORIALS[15], 1_307_674_368_000);
        assert_eq!(FACTORIALS[20], 2_432_902_008_176_640_000);
    }

    #[test]
    fn small_ranks_follow_lexicographic_order() {
        let all: Vec<Vec<u8>> = (0..24).map(|r| unrank(4, r).unwrap()).collect();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert_eq!(all[0], vec![0, 1, 2, 3]);
        assert_eq!(all[23], vec![3, 2, 1, 0]);
        assert_eq!(unrank(4, 24), None);
    }

    #[test]
    fn rank_rejects_non_permutations() {
        assert_eq!(rank(&[0, 0]), None);
        assert_eq!(rank(&[0, 2]), None);
        assert_eq!(rank(&[]), Some(0));
    }

    #[test]
    fn split_range_covers_everything_once() {
        for &(total, k) in &[(10u128, 3u64), (479_001_600, 240), (5, 7), (0, 4)] {
            let mut next = 0;
            for i in 0..k {
                let (lo, hi) = split_range(total, k, i);
                assert_eq!(lo, next);
                assert!(hi >= lo);
                next = hi;
            }
            assert_eq!(next, total);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn rank_unrank_roundtrip(n in 0usize..=MAX_N, seed in any::<u64>()) {
            let r = seed % FACTORIALS[n];
            let p = unrank(n, r).unwrap();
            prop_assert_eq!(rank(&p), Some(r));
        }

        #[test]
        fn rank_is_monotone(n in 1usize..=12, a in any::<u64>(), b in any::<u64>()) {
            let (a, b) = (a % FACTORIALS[n], b % FACTORIALS[n]);
            let (pa, pb) = (unrank(n, a).unwrap(), unrank(n, b).unwrap());
            prop_assert_eq!(a.cmp(&b), pa.cmp(&pb));
        }
    }
}
