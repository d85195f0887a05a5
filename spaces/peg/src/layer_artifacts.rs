//! The artifacts of the layer and on-path jobs ([`super::layers`]): their byte format, their readers and
//! writers, the coordinator's checks and the k-way merges. Apart from the kernels because they are a wire format:
//! stored artifacts must stay readable whatever the kernels become, and the checks must not trust the kernels.
//!
//! Artifacts are compact and sorted: a fixed header, then per position the gap to the previous one and the
//! weight, both as LEB128 varints (positions of a layer are dense in their range, so gaps take 2-3 bytes; the
//! weights are u128 because the number of move sequences exceeds 64 bits on the larger boards).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::game::Game;
use sweep_space::SpaceError;

/// Header of a layer artifact: magic, layer (u32 LE), entry count (u64 LE).
const LAYER_MAGIC: [u8; 4] = *b"PGL1";
const LAYER_HEADER: usize = 16;
/// Header of an on-path artifact: magic, layer (u32 LE), then reachable, reachable raw, on path, on path raw
/// (u64 LE each); the entry count is the on-path figure.
const PATH_MAGIC: [u8; 4] = *b"PGP1";
const PATH_HEADER: usize = 40;

pub(crate) fn bad(what: String) -> SpaceError {
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
