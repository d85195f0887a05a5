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
//! Artifacts are compact and sorted: a fixed header, then per position the gap to the previous one and the
//! weight, both as LEB128 varints (positions of a layer are dense in their range, so gaps take 2-3 bytes; the
//! weights are u128 because the number of move sequences exceeds 64 bits on the larger boards).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::game::{owner_hash, Game};
use sweep_space::{Control, SpaceError};

/// Header of a layer artifact: magic, layer (u32 LE), entry count (u64 LE).
const LAYER_MAGIC: [u8; 4] = *b"PGL1";
const LAYER_HEADER: usize = 16;
/// Header of an on-path artifact: magic, layer (u32 LE), then reachable, reachable raw, on path, on path raw
/// (u64 LE each); the entry count is the on-path figure.
const PATH_MAGIC: [u8; 4] = *b"PGP1";
const PATH_HEADER: usize = 40;

/// Positions between progress reports and cancellation checks.
const CHECK_EVERY: u64 = 1 << 14;

fn bad(what: String) -> SpaceError {
    SpaceError::Verification(what)
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u128, SpaceError> {
    // Gaps and most weights fit in 63 bits (nine bytes): those are read in u64, without the overflow test.
    let mut small = 0u64;
    let mut shift = 0u32;
    while shift < 63 {
        let Some(&b) = bytes.get(*at) else {
            return Err(bad("artifact ends inside a number".into()));
        };
        *at += 1;
        small |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(u128::from(small));
        }
        shift += 7;
    }
    let mut v = u128::from(small);
    loop {
        let Some(&b) = bytes.get(*at) else {
            return Err(bad("artifact ends inside a number".into()));
        };
        *at += 1;
        let low = u128::from(b & 0x7f);
        if shift >= 128 || (shift > 0 && low >> (128 - shift) != 0) {
            return Err(bad("artifact holds a number above 128 bits".into()));
        }
        v |= low << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Writes sorted (position, weight) entries; positions must strictly increase.
pub struct LayerWriter {
    out: Vec<u8>,
    n: u64,
    last: Option<u64>,
}

impl LayerWriter {
    pub fn new(layer: u32) -> LayerWriter {
        let mut out = Vec::with_capacity(LAYER_HEADER);
        out.extend_from_slice(&LAYER_MAGIC);
        out.extend_from_slice(&layer.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        LayerWriter {
            out,
            n: 0,
            last: None,
        }
    }

    pub fn push(&mut self, pos: u64, weight: u128) -> Result<(), SpaceError> {
        let gap = match self.last {
            Some(l) if pos <= l => {
                return Err(bad(format!(
                    "positions out of order: {pos:#x} after {l:#x}"
                )))
            }
            Some(l) => pos - l,
            None => pos,
        };
        put_varint(&mut self.out, u128::from(gap));
        put_varint(&mut self.out, weight);
        self.last = Some(pos);
        self.n += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out[8..16].copy_from_slice(&self.n.to_le_bytes());
        self.out
    }
}

/// A layer artifact's header, checked: the layer number and the entry count.
pub fn layer_header(bytes: &[u8]) -> Result<(u32, u64), SpaceError> {
    if bytes.len() < LAYER_HEADER || bytes[..4] != LAYER_MAGIC {
        return Err(bad("not a peg layer artifact".into()));
    }
    Ok((u32_at(bytes, 4), u64_at(bytes, 8)))
}

/// Reads a layer artifact entry by entry, checking its structure as it goes (order, gaps, count, no trailing
/// bytes). Board-level checks (peg counts, canonical forms) are the caller's.
pub struct LayerReader<'a> {
    bytes: &'a [u8],
    at: usize,
    left: u64,
    last: Option<u64>,
    failed: bool,
}

impl<'a> LayerReader<'a> {
    pub fn new(bytes: &'a [u8], expect_layer: u32) -> Result<LayerReader<'a>, SpaceError> {
        let (layer, n) = layer_header(bytes)?;
        if layer != expect_layer {
            return Err(bad(format!(
                "artifact of layer {layer} where layer {expect_layer} was expected"
            )));
        }
        Ok(LayerReader {
            bytes,
            at: LAYER_HEADER,
            left: n,
            last: None,
            failed: false,
        })
    }

    /// Entries not read yet.
    pub fn remaining(&self) -> u64 {
        self.left
    }

    fn step(&mut self) -> Result<(u64, u128), SpaceError> {
        let gap = get_varint(self.bytes, &mut self.at)?;
        let weight = get_varint(self.bytes, &mut self.at)?;
        let pos = match self.last {
            None => u64::try_from(gap).ok(),
            Some(_) if gap == 0 => None,
            Some(l) => u64::try_from(gap).ok().and_then(|g| l.checked_add(g)),
        }
        .ok_or_else(|| bad("positions out of order or beyond 64 bits".into()))?;
        if weight == 0 {
            return Err(bad(format!("position {pos:#x} has weight 0")));
        }
        self.last = Some(pos);
        Ok((pos, weight))
    }
}

impl Iterator for LayerReader<'_> {
    type Item = Result<(u64, u128), SpaceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.at != self.bytes.len() {
                self.failed = true;
                return Some(Err(bad("bytes after the last entry".into())));
            }
            return None;
        }
        self.left -= 1;
        let r = self.step();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Checks a chunk's layer artifact against the game: structure, and every position a canonical set of holes
/// with the layer's peg count. (Bound inputs skip the canonical-form test, the costliest part: their chunks
/// passed this check when they were accepted; see [`Lookup::read`].) Returns the entry count.
pub fn check_layer(game: &Game, layer: u32, bytes: &[u8]) -> Result<u64, SpaceError> {
    let pegs = pegs_at(game, layer);
    let mut n = 0;
    for e in LayerReader::new(bytes, layer)? {
        let (pos, _) = e?;
        if pos & !game.board.holes != 0 || pos.count_ones() != pegs {
            return Err(bad(format!(
                "position {pos:#x} is not a set of {pegs} holes of the board"
            )));
        }
        if game.canon(&game.game_group, pos) != pos {
            return Err(bad(format!("position {pos:#x} is not canonical")));
        }
        n += 1;
    }
    Ok(n)
}

/// Pegs after `layer` jumps.
pub fn pegs_at(game: &Game, layer: u32) -> u32 {
    game.start.count_ones().saturating_sub(layer)
}

/// Merges layer artifacts of one layer (chunk outputs in any order): a k-way merge that sums the weights of a
/// position reached from several chunks. Memory: the inputs and the output, nothing per position.
pub fn merge_layers(layer: u32, parts: &[&[u8]]) -> Result<Vec<u8>, SpaceError> {
    let mut readers = parts
        .iter()
        .map(|p| LayerReader::new(p, layer))
        .collect::<Result<Vec<_>, _>>()?;
    let mut heads: Vec<u128> = vec![0; readers.len()];
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(e) = r.next() {
            let (pos, w) = e?;
            heads[i] = w;
            heap.push(Reverse((pos, i)));
        }
    }
    let mut out = LayerWriter::new(layer);
    let mut cur: Option<(u64, u128)> = None;
    while let Some(Reverse((pos, i))) = heap.pop() {
        let w = heads[i];
        cur = match cur {
            Some((p, acc)) if p == pos => Some((
                p,
                acc.checked_add(w)
                    .ok_or_else(|| bad("a weight exceeds 128 bits".into()))?,
            )),
            Some((p, acc)) => {
                out.push(p, acc)?;
                Some((pos, w))
            }
            None => Some((pos, w)),
        };
        if let Some(e) = readers[i].next() {
            let (p, w) = e?;
            heads[i] = w;
            heap.push(Reverse((p, i)));
        }
    }
    if let Some((p, acc)) = cur {
        out.push(p, acc)?;
    }
    Ok(out.finish())
}

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
    n_chunks: u64,
    chunk: u64,
    ctl: &Control,
) -> Result<Expanded, SpaceError> {
    let group = &game.game_group;
    let mut next = Folding::default();
    let mut nodes = 0u64;
    for (&pos, &w) in prev.positions.keys().iter().zip(&prev.weights) {
        if owner_hash(pos) % n_chunks != chunk {
            continue;
        }
        for m in &game.board.moves {
            if m.applies(pos) {
                next.push(game.canon(group, pos ^ m.flip), w)?;
            }
        }
        nodes += 1;
        if nodes.is_multiple_of(CHECK_EVERY) {
            ctl.checkpoint(CHECK_EVERY)?;
        }
    }
    ctl.add_nodes(nodes % CHECK_EVERY);
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

/// The figures of one layer: reachable positions (canonical and raw) and those on a path to the goal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub reachable: u64,
    pub reachable_raw: u64,
    pub on_path: u64,
    pub on_path_raw: u64,
}

impl Figures {
    pub fn as_array(&self) -> [u64; 4] {
        [
            self.reachable,
            self.reachable_raw,
            self.on_path,
            self.on_path_raw,
        ]
    }

    fn add(&mut self, o: &Figures) -> Result<(), SpaceError> {
        let sum = |a: u64, b: u64| {
            a.checked_add(b)
                .ok_or_else(|| bad("a figure exceeds 64 bits".into()))
        };
        self.reachable = sum(self.reachable, o.reachable)?;
        self.reachable_raw = sum(self.reachable_raw, o.reachable_raw)?;
        self.on_path = sum(self.on_path, o.on_path)?;
        self.on_path_raw = sum(self.on_path_raw, o.on_path_raw)?;
        Ok(())
    }
}

/// An on-path artifact: the figures, then the sorted on-path positions as gaps.
pub fn write_path(layer: u32, fig: &Figures, on_path: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PATH_HEADER + 3 * on_path.len());
    out.extend_from_slice(&PATH_MAGIC);
    out.extend_from_slice(&layer.to_le_bytes());
    for v in fig.as_array() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut last = 0;
    for &p in on_path {
        put_varint(&mut out, u128::from(p - last));
        last = p;
    }
    out
}

/// Reads an on-path artifact of layer `expect_layer`: its figures and its positions (checked strictly
/// increasing and as many as the on-path figure).
pub fn read_path(bytes: &[u8], expect_layer: u32) -> Result<(Figures, Vec<u64>), SpaceError> {
    if bytes.len() < PATH_HEADER || bytes[..4] != PATH_MAGIC {
        return Err(bad("not a peg on-path artifact".into()));
    }
    let layer = u32_at(bytes, 4);
    if layer != expect_layer {
        return Err(bad(format!(
            "on-path artifact of layer {layer} where layer {expect_layer} was expected"
        )));
    }
    let fig = Figures {
        reachable: u64_at(bytes, 8),
        reachable_raw: u64_at(bytes, 16),
        on_path: u64_at(bytes, 24),
        on_path_raw: u64_at(bytes, 32),
    };
    let mut at = PATH_HEADER;
    let mut positions = Vec::with_capacity(fig.on_path.min(bytes.len() as u64) as usize);
    let mut last: Option<u64> = None;
    while at < bytes.len() {
        let gap = get_varint(bytes, &mut at)?;
        let pos = match last {
            None => u64::try_from(gap).ok(),
            Some(_) if gap == 0 => None,
            Some(l) => u64::try_from(gap).ok().and_then(|g| l.checked_add(g)),
        }
        .ok_or_else(|| bad("on-path positions out of order or beyond 64 bits".into()))?;
        positions.push(pos);
        last = Some(pos);
    }
    if positions.len() as u64 != fig.on_path {
        return Err(bad(format!(
            "{} on-path positions listed, {} counted",
            positions.len(),
            fig.on_path
        )));
    }
    Ok((fig, positions))
}

/// Merges the on-path artifacts of one layer's chunks: figures summed, positions merged (chunks own disjoint
/// sets, so a position listed twice is an error, not a duplicate to drop).
pub fn merge_paths(layer: u32, parts: &[&[u8]]) -> Result<Vec<u8>, SpaceError> {
    let mut fig = Figures::default();
    let mut lists = Vec::with_capacity(parts.len());
    for p in parts {
        let (f, list) = read_path(p, layer)?;
        fig.add(&f)?;
        lists.push(list);
    }
    let mut all: Vec<u64> = lists.concat();
    all.sort_unstable();
    if all.windows(2).any(|w| w[0] == w[1]) {
        return Err(bad(format!(
            "layer {layer}: a position is on the list of two chunks"
        )));
    }
    Ok(write_path(layer, &fig, &all))
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
    n_chunks: u64,
    chunk: u64,
    ctl: &Control,
) -> Result<Marked, SpaceError> {
    let group = &game.game_group;
    let mut fig = Figures::default();
    let mut on_path = Vec::new();
    let mut nodes = 0u64;
    for &pos in positions {
        if owner_hash(pos) % n_chunks != chunk {
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
        nodes += 1;
        if nodes.is_multiple_of(CHECK_EVERY) {
            ctl.checkpoint(CHECK_EVERY)?;
        }
    }
    ctl.add_nodes(nodes % CHECK_EVERY);
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

/// Winning sequences through the owned classes of the forward layer `layer` (`forward`): each class C meets the
/// dual class of its complement (`dual`, a layer of the game started at the goal hole), and contributes
/// W(C)/|C| * W'(dual class). Without `dual` (goal `any`, `forward` is the one-peg layer), every class is a
/// goal and contributes its weight.
pub fn join_count(
    game: &Game,
    forward: &Lookup,
    dual: Option<&Lookup>,
    n_chunks: u64,
    chunk: u64,
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
    for (&pos, &w) in forward.positions.keys().iter().zip(&forward.weights) {
        if owner_hash(pos) % n_chunks != chunk {
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
        j.nodes += 1;
        if j.nodes.is_multiple_of(CHECK_EVERY) {
            ctl.checkpoint(CHECK_EVERY)?;
        }
    }
    ctl.add_nodes(j.nodes % CHECK_EVERY);
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v in any::<u128>(), small in any::<u16>()) {
            for x in [v, u128::from(small), 0, u128::MAX] {
                let mut out = Vec::new();
                put_varint(&mut out, x);
                let mut at = 0;
                prop_assert_eq!(get_varint(&out, &mut at).ok(), Some(x));
                prop_assert_eq!(at, out.len());
            }
        }

        #[test]
        fn merged_layers_sum_weights_of_shared_positions(
            parts in proptest::collection::vec(
                proptest::collection::btree_map(1u64..5000, 1u128..1_000_000_000_000_000_000_000u128, 0..50),
                1..6,
            )
        ) {
            let mut expect: std::collections::BTreeMap<u64, u128> = Default::default();
            let mut arts = Vec::new();
            for p in &parts {
                let mut w = LayerWriter::new(3);
                for (&k, &v) in p {
                    w.push(k, v).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    *expect.entry(k).or_default() += v;
                }
                arts.push(w.finish());
            }
            let refs: Vec<&[u8]> = arts.iter().map(Vec::as_slice).collect();
            let merged = merge_layers(3, &refs).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let got: Vec<(u64, u128)> = LayerReader::new(&merged, 3)
                .map_err(|e| TestCaseError::fail(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got, expect.into_iter().collect::<Vec<_>>());
        }

        /// No byte string makes the readers panic; they either decode or say why not.
        #[test]
        fn readers_reject_garbage_without_panicking(mut bytes in proptest::collection::vec(any::<u8>(), 0..80), magic in 0u8..3) {
            if magic == 1 && bytes.len() >= LAYER_HEADER {
                bytes[..4].copy_from_slice(&LAYER_MAGIC);
                bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
            }
            if magic == 2 && bytes.len() >= PATH_HEADER {
                bytes[..4].copy_from_slice(&PATH_MAGIC);
                bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
            }
            if let Ok(r) = LayerReader::new(&bytes, 0) {
                let _ = r.collect::<Result<Vec<_>, _>>();
            }
            let _ = read_path(&bytes, 0);
            let _ = merge_layers(0, &[&bytes, &bytes]);
        }
    }

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

    #[test]
    fn layer_readers_refuse_bad_order_trailing_bytes_and_wrong_layers() {
        let mut w = LayerWriter::new(2);
        w.push(5, 1).expect("first");
        assert!(w.push(5, 1).is_err(), "equal positions");
        assert!(w.push(4, 1).is_err(), "decreasing positions");
        w.push(9, 7).expect("increasing");
        let art = w.finish();
        assert!(LayerReader::new(&art, 3).is_err());
        let all: Vec<_> = LayerReader::new(&art, 2)
            .expect("header")
            .collect::<Result<_, _>>()
            .expect("entries");
        assert_eq!(all, vec![(5, 1), (9, 7)]);
        let mut longer = art.clone();
        longer.push(0);
        let r: Result<Vec<_>, _> = LayerReader::new(&longer, 2).expect("header").collect();
        assert!(r.is_err(), "trailing byte");
        let r: Result<Vec<_>, _> = LayerReader::new(&art[..art.len() - 1], 2)
            .expect("header")
            .collect();
        assert!(r.is_err(), "truncated");
        // A path artifact that lists a position twice across chunks cannot be merged.
        let fig = Figures {
            reachable: 1,
            reachable_raw: 1,
            on_path: 1,
            on_path_raw: 1,
        };
        let a = write_path(4, &fig, &[7]);
        assert!(merge_paths(4, &[&a, &a]).is_err());
        let merged = merge_paths(4, &[&a, &write_path(4, &fig, &[3])]).expect("merges");
        let (f, list) = read_path(&merged, 4).expect("reads");
        assert_eq!(list, vec![3, 7]);
        assert_eq!(f.as_array(), [2, 2, 2, 2]);
    }
}
