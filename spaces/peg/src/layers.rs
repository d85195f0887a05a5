//! The layered kernels behind the distributed `count` and `positions` (wired into jobs by [`super::dag`]).
//!
//! A layer is the set of positions after `k` jumps, canonical under the game's symmetry group G (the board
//! symmetries that keep start and goal), each with a weight. Three kernels work on layers:
//! - [`expand`]: the next layer from the part of the current one a chunk owns (owner = [`owner_hash`] mod the
//!   chunk count). Every position of the whole DAG is expanded by exactly one chunk of one job, so the total
//!   work does not depend on the number of chunks; only the merge sees positions reached from two owners.
//! - [`mark_on_path`]: the positions of a layer (those a chunk owns) with a successor in the next layer's
//!   on-path set (or, in the one-peg layer, that are the goal), plus the layer's figures.
//! - [`join_count`]: the number of winning sequences through a middle layer, from a forward layer and the
//!   matching layer of the dual game (below).
//!
//! Weights are class weights: W(C) = |C| * f(c), the number of move sequences from the start to any member of
//! the class C (rep c, f the per-position count, equal on the class because G keeps the start). Counting the
//! move pairs between two classes both ways gives |C| * m(c, C') = |C'| * #{p in C : p -> c'}, where m(c, C')
//! is the number of moves from c into C', so f(c') = sum over moves c -> s with canon(s) = c' of f(c) |C|/|C'|,
//! that is W(C') = sum of W(C) over the same moves: the rep's successors carry its class weight unchanged, no
//! orbit sizes and no divisions in the hot loop.
//!
//! The dual game: a jump p -> q flips three holes of a line, and so does the jump ~q -> ~p on the complements
//! (the pegs of one are the holes of the other). So the sequences from p to a one-peg goal g are the sequences
//! from ~g (the board full but for g: the start position of the game started at g) to ~p, and
//! b(p) = f'(~p) with f' the forward count of the game (start g, goal start hole). Both games have the same
//! group G, complements commute with it, and |class(~c)| = |C|, so the number of winning sequences is, at any
//! middle depth m, sum over classes C of W(C)/|C| * W'(class of ~c). With start = goal the dual game is the
//! game itself, so its layers are the same jobs and a count needs only the layers up to half the depth.
//!
//! The artifacts they read and write, and their merges, are in [`super::layer_artifacts`]; the items are
//! re-exported here so that callers name one module.

use super::game::{owner_hash, Game};
use super::layer_artifacts::bad;
pub use super::layer_artifacts::{
    check_layer, layer_header, merge_layers, merge_paths, pegs_at, read_path, write_path, Figures,
    LayerReader, LayerWriter,
};
use sweep_space::{ChunkId, Control, Meter, SpaceError, Span, SpanWalk};

/// Successors with weights in a vector that is sorted and folded (equal positions summed) whenever it has
/// doubled since the last fold: sequential memory traffic instead of a hash table's random probes (2.5x faster
/// on the English middle layers), and memory bounded by about twice the distinct positions.
#[derive(Default)]
struct Folding {
    /// (position, weight low, weight high): 24 bytes where `(u64, u128)` takes 32, so sorting moves less.
    entries: Vec<(u64, u64, u64)>,
    folded: usize,
}

fn split(w: u128) -> (u64, u64) {
    (w as u64, (w >> 64) as u64)
}

fn join(lo: u64, hi: u64) -> u128 {
    u128::from(hi) << 64 | u128::from(lo)
}

impl Folding {
    /// Entries held before the first fold: small enough for a chunk of a small layer to fold once at the end.
    const FIRST_FOLD: usize = 1 << 20;

    #[inline]
    fn push(&mut self, pos: u64, weight: u128) -> Result<(), SpaceError> {
        let (lo, hi) = split(weight);
        self.entries.push((pos, lo, hi));
        if self.entries.len() >= (2 * self.folded).max(Self::FIRST_FOLD) {
            self.fold()?;
        }
        Ok(())
    }

    fn fold(&mut self) -> Result<(), SpaceError> {
        let v = &mut self.entries;
        v.sort_unstable_by_key(|e| e.0);
        let mut kept = 0usize;
        for i in 0..v.len() {
            let (p, lo, hi) = v[i];
            if kept > 0 && v[kept - 1].0 == p {
                let (_, klo, khi) = v[kept - 1];
                let sum = join(klo, khi)
                    .checked_add(join(lo, hi))
                    .ok_or_else(|| bad("a weight exceeds 128 bits".into()))?;
                let (slo, shi) = split(sum);
                v[kept - 1] = (p, slo, shi);
            } else {
                v[kept] = (p, lo, hi);
                kept += 1;
            }
        }
        v.truncate(kept);
        self.folded = kept;
        Ok(())
    }
}

/// What a chunk of a layer job did.
pub struct Expanded {
    pub artifact: Vec<u8>,
    pub entries: u64,
    /// Positions of the previous layer this chunk expanded.
    pub nodes: u64,
}

/// Layer `layer` (>= 1) from the previous layer `prev`: chunk `chunk` of `n_chunks` expands the positions it
/// owns and returns their canonical successors with the summed class weights.
pub fn expand(
    game: &Game,
    layer: u32,
    prev: &Lookup,
    at: ChunkId,
    ctl: &Control,
) -> Result<Expanded, SpaceError> {
    let group = &game.game_group;
    let mut next = Folding::default();
    let mut meter = Meter::new(ctl);
    for (&pos, &w) in prev.positions.keys().iter().zip(&prev.weights) {
        if owner_hash(pos) % at.n_chunks != at.chunk {
            continue;
        }
        for m in &game.board.moves {
            if m.applies(pos) {
                next.push(game.canon(group, pos ^ m.flip), w)?;
            }
        }
        meter.tick()?;
    }
    let nodes = meter.finish();
    next.fold()?;
    let entries = next.entries;
    let mut out = LayerWriter::new(layer);
    for &(p, lo, hi) in &entries {
        out.push(p, join(lo, hi))?;
    }
    Ok(Expanded {
        artifact: out.finish(),
        entries: entries.len() as u64,
        nodes,
    })
}

/// The start layer: the start position with weight 1, reported by chunk 0 only.
pub fn start_layer(game: &Game, chunk: u64) -> Result<Expanded, SpaceError> {
    let mut out = LayerWriter::new(0);
    let mut entries = 0;
    if chunk == 0 {
        out.push(game.canon(&game.game_group, game.start), 1)?;
        entries = 1;
    }
    Ok(Expanded {
        artifact: out.finish(),
        entries,
        nodes: entries,
    })
}

/// What a chunk of an on-path job found.
pub struct Marked {
    pub figures: Figures,
    pub artifact: Vec<u8>,
    pub nodes: u64,
}

/// The positions of layer `layer` owned by chunk `chunk` that lie on a path to the goal: in the last layer
/// (one peg) the goal positions, before it those with a move into `next_on_path` (the sorted on-path set of
/// the next layer). On-path sets are closed under G, so testing the representative decides for its class.
pub fn mark_on_path(
    game: &Game,
    layer: u32,
    positions: &[u64],
    next_on_path: Option<&SortedSet>,
    at: ChunkId,
    ctl: &Control,
) -> Result<Marked, SpaceError> {
    let group = &game.game_group;
    let mut fig = Figures::default();
    let mut on_path = Vec::new();
    let mut meter = Meter::new(ctl);
    for &pos in positions {
        if owner_hash(pos) % at.n_chunks != at.chunk {
            continue;
        }
        let orbit = game.orbit_size(group, pos);
        fig.reachable += 1;
        fig.reachable_raw += orbit;
        let on =
            match next_on_path {
                None => game.is_goal(pos),
                Some(next) => {
                    !next.keys().is_empty()
                        && game.board.moves.iter().any(|m| {
                            m.applies(pos) && next.contains(game.canon(group, pos ^ m.flip))
                        })
                }
            };
        if on {
            fig.on_path += 1;
            fig.on_path_raw += orbit;
            on_path.push(pos);
        }
        meter.tick()?;
    }
    let nodes = meter.finish();
    Ok(Marked {
        artifact: write_path(layer, &fig, &on_path),
        figures: fig,
        nodes,
    })
}

/// Sorted positions with a bucket index on their top bits, so a lookup is a binary search among the few
/// positions of one bucket: a plain binary search over millions of positions misses the cache at every one of
/// its last dozen steps, and the count join and the on-path marks do one lookup per successor.
#[derive(Debug, Default)]
pub struct SortedSet {
    keys: Vec<u64>,
    shift: u32,
    /// `starts[b]..starts[b + 1]`: the keys whose top bits are `b`.
    starts: Vec<usize>,
}

impl SortedSet {
    /// Buckets: about one per 16 keys, at most 2^21.
    pub fn new(keys: Vec<u64>) -> SortedSet {
        let bits_wanted = (keys.len() / 16).max(1).ilog2().min(20) + 1;
        let top = keys.last().map_or(0, |&k| 64 - k.leading_zeros());
        let shift = top.saturating_sub(bits_wanted);
        let n_buckets = keys.last().map_or(0, |&k| (k >> shift) as usize) + 1;
        let mut starts = vec![0usize; n_buckets + 1];
        for &k in &keys {
            starts[(k >> shift) as usize + 1] += 1;
        }
        for b in 0..n_buckets {
            starts[b + 1] += starts[b];
        }
        SortedSet {
            keys,
            shift,
            starts,
        }
    }

    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    pub fn into_keys(self) -> Vec<u64> {
        self.keys
    }

    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        let b = (key >> self.shift) as usize;
        let (&lo, &hi) = (self.starts.get(b)?, self.starts.get(b + 1)?);
        self.keys[lo..hi].binary_search(&key).ok().map(|i| lo + i)
    }

    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }
}

/// A dual layer, decoded for lookups: sorted positions and their class weights side by side.
#[derive(Debug, Default)]
pub struct Lookup {
    pub positions: SortedSet,
    pub weights: Vec<u128>,
}

impl Lookup {
    /// Decodes layer `layer` of a game on `holes` whose positions have `pegs` pegs, checking both (the canonical
    /// forms were checked when the chunks that made the artifact were accepted).
    pub fn read(bytes: &[u8], layer: u32, holes: u64, pegs: u32) -> Result<Lookup, SpaceError> {
        let reader = LayerReader::new(bytes, layer)?;
        let n = reader.remaining().min(bytes.len() as u64) as usize;
        let mut positions = Vec::with_capacity(n);
        let mut weights = Vec::with_capacity(n);
        for e in reader {
            let (p, w) = e?;
            if p & !holes != 0 || p.count_ones() != pegs {
                return Err(bad(format!(
                    "position {p:#x} of layer {layer} is not a set of {pegs} holes of the board"
                )));
            }
            positions.push(p);
            weights.push(w);
        }
        Ok(Lookup {
            positions: SortedSet::new(positions),
            weights,
        })
    }

    fn get(&self, pos: u64) -> Option<u128> {
        self.positions.find(pos).map(|i| self.weights[i])
    }
}

/// What a chunk of the count join found.
pub struct Joined {
    pub count: u128,
    pub classes: u64,
    pub nodes: u64,
}

impl Lookup {
    /// Positions in the layer.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
}

/// Winning sequences through the owned classes of the forward layer `layer` (`forward`): each class C meets the
/// dual class of its complement (`dual`, a layer of the game started at the goal hole), and contributes
/// W(C)/|C| * W'(dual class). Without `dual` (goal `any`, `forward` is the one-peg layer), every class is a
/// goal and contributes its weight.
///
/// The chunk walks `part`, a span of the forward layer's indices (all of them for a whole chunk), and when
/// asked to split gives away the upper half of the indices it has not reached ([`SpanWalk`]): the classes it
/// owns there are joined by the piece, so counts, classes and nodes add up.
pub fn join_count(
    game: &Game,
    forward: &Lookup,
    dual: Option<&Lookup>,
    part: Span,
    at: ChunkId,
    ctl: &Control,
) -> Result<Joined, SpaceError> {
    let group = &game.game_group;
    let holes = game.board.holes;
    let overflow = || bad("the count exceeds 128 bits".into());
    let mut j = Joined {
        count: 0,
        classes: 0,
        nodes: 0,
    };
    let mut meter = Meter::new(ctl);
    let keys = forward.positions.keys();
    for i in SpanWalk::new(part, ctl) {
        // The part lies inside the layer (checked by the caller), whose indices are usizes.
        let (pos, w) = (keys[i as usize], forward.weights[i as usize]);
        if owner_hash(pos) % at.n_chunks != at.chunk {
            continue;
        }
        j.classes += 1;
        let ways = match dual {
            None => {
                if game.is_goal(pos) {
                    w
                } else {
                    0
                }
            }
            Some(d) => {
                let orbit = u128::from(game.orbit_size(group, pos));
                if w % orbit != 0 {
                    return Err(bad(format!(
                        "class weight {w} of {pos:#x} is not a multiple of its size {orbit}"
                    )));
                }
                match d.get(game.canon(group, holes & !pos)) {
                    Some(wd) => (w / orbit).checked_mul(wd).ok_or_else(overflow)?,
                    None => 0,
                }
            }
        };
        j.count = j.count.checked_add(ways).ok_or_else(overflow)?;
        meter.tick()?;
    }
    j.nodes = meter.finish();
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sorted_set_finds_exactly_its_keys(
            keys in proptest::collection::btree_set(any::<u64>(), 0..300),
            probes in proptest::collection::vec(any::<u64>(), 0..50),
            shift in 0u32..64,
        ) {
            // Keys spread over the whole range and keys packed in a narrow one.
            for keys in [keys.iter().copied().collect::<Vec<_>>(), keys.iter().map(|k| k >> shift).collect()] {
                let mut sorted = keys.clone();
                sorted.dedup();
                let set = SortedSet::new(sorted.clone());
                for (i, &k) in sorted.iter().enumerate() {
                    prop_assert_eq!(set.find(k), Some(i));
                }
                for &p in &probes {
                    prop_assert_eq!(set.contains(p), sorted.binary_search(&p).is_ok());
                }
            }
        }
    }
}
