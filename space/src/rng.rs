//! splitmix64, the one small random generator of every space here.
//!
//! Why one module, and why it must never change: seeds are part of the answers. `brainball census --seed S`,
//! `brainball --random K --seed S`, a generated Buzzled board, Peg's shuffled move orders and its chunk owners
//! (`owner_hash`) are all functions of these exact bits, on every machine and in every version: a stored
//! result, a document's figure or a chunk re-run on another worker must draw the same numbers again. So the
//! constants and the order of operations below are frozen (the test pins the first outputs of a fixed seed);
//! a better generator would be a new module with a new name, never an edit of this one.
//!
//! splitmix64 (Steele, Lea and Flood, 2014): the state advances by a constant, and each output is a mix of the
//! state. That makes a jump ahead free ([`SplitMix64::at`]): a chunk draws its own samples without drawing the
//! ones before them.

/// The state's increment per draw (2^64 divided by the golden ratio, odd).
pub const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's finaliser: a bijection of u64 that spreads every input bit over the output.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The generator: its whole state is one word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The generator of `seed` after `draws` draws, without making them (the state only adds [`GAMMA`]).
    pub const fn at(seed: u64, draws: u64) -> SplitMix64 {
        SplitMix64(seed.wrapping_add(draws.wrapping_mul(GAMMA)))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// `next_u64() % n` (n = 0 is taken as 1): the draw Fisher-Yates shuffles and Buzzled boards use. Its bias,
    /// below n / 2^64, is far under anything a run could measure.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `0..bound` by multiply-shift (the high word of `next_u64() * bound`): one multiplication
    /// instead of a division, bias below bound / 2^64. Another draw than [`SplitMix64::below`]: the two are not
    /// interchangeable without changing the numbers a seed gives.
    #[inline]
    pub fn scaled(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A uniformly shuffled `0..n` (Fisher-Yates from the top, one [`SplitMix64::below`] draw per place).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frozen outputs: if this test fails, seeds no longer reproduce the numbers they gave before.
    #[test]
    fn the_first_outputs_of_seed_zero_and_one_never_change() {
        let mut r = SplitMix64::new(0);
        let first: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        // The published test vector of splitmix64 for seed 0.
        assert_eq!(
            first,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f,
                0xf88b_b8a8_724c_81ec
            ]
        );
        let mut r = SplitMix64::new(1);
        assert_eq!(r.next_u64(), 0x910a_2dec_8902_5cc1);
        assert_eq!(mix(1u64.wrapping_add(GAMMA)), 0x910a_2dec_8902_5cc1);
    }

    #[test]
    fn a_jump_lands_where_the_draws_would() {
        let mut r = SplitMix64::new(7);
        for _ in 0..25 {
            r.next_u64();
        }
        assert_eq!(r, SplitMix64::at(7, 25));
    }

    #[test]
    fn scaled_and_below_stay_in_range_and_shuffles_are_permutations() {
        let mut r = SplitMix64::new(3);
        for bound in [1u64, 2, 13, 1 << 40] {
            assert!(r.scaled(bound) < bound);
            assert!(r.below(bound) < bound);
        }
        assert_eq!(r.below(0), 0);
        let mut p = SplitMix64::new(9).permutation(20);
        p.sort_unstable();
        assert_eq!(p, (0..20).collect::<Vec<_>>());
    }
}
