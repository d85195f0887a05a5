//! Uniformly random positions, drawn from a seed so that any machine redraws the same ones: `solve --random`
//! and every census chunk draw them, each chunk only its own.

use sweep_space::rng::SplitMix64;

use crate::ball::Ring;

/// `k` uniformly random positions (every one of the 12! * 2^12 is equally likely), drawn from `seed`, each
/// written with 13 in the last place.
pub fn random_positions(k: usize, seed: u64) -> Vec<Ring> {
    (0..k as u64).map(|j| random_position_at(seed, j)).collect()
}

/// Draws of the generator per position: 11 swaps and one word of colours.
const DRAWS_PER_POSITION: u64 = 12;

/// Position `index` of [`random_positions`] for `seed`, drawn without the ones before it (splitmix64's state
/// only advances by a constant per draw), so a chunk of a census draws just its own samples.
pub fn random_position_at(seed: u64, index: u64) -> Ring {
    // splitmix64 (see `sweep_space::rng`): small, fast, the same on every machine, and free to jump ahead.
    let mut rng = SplitMix64::at(seed, index.wrapping_mul(DRAWS_PER_POSITION));
    let mut tiles: [i8; 13] = std::array::from_fn(|i| i as i8 + 1);
    for i in (1..12).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        tiles.swap(i, j);
    }
    let colours = rng.next_u64();
    for (i, t) in tiles[..12].iter_mut().enumerate() {
        if colours >> i & 1 == 1 {
            *t = -*t;
        }
    }
    Ring(tiles)
}
