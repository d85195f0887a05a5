//! A job's chunks held compactly: one bit per chunk for "done", and a record only for a chunk that is leased,
//! poisoned, or pending after an attempt. Every other chunk is pending and untouched, which is what nearly
//! every chunk of a large job is, or done, which is what it becomes: a job of 100,000,000 chunks costs 12.5 MB
//! here, where a slot per chunk cost 1.6 GB.

use std::collections::HashMap;

use super::Slot;

/// A set of chunk numbers, one bit each. The store keeps a job's done chunks in the same shape (see the
/// store's summaries), so start-up hands them over without a record per chunk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkBits {
    words: Vec<u64>,
    len: u64,
}

impl ChunkBits {
    pub fn new() -> ChunkBits {
        ChunkBits::default()
    }

    /// An empty set that holds chunks below `n` without growing.
    pub fn with_capacity(n: u64) -> ChunkBits {
        ChunkBits {
            words: Vec::with_capacity(n.div_ceil(64) as usize),
            len: 0,
        }
    }

    pub fn contains(&self, chunk: u64) -> bool {
        self.words
            .get((chunk / 64) as usize)
            .is_some_and(|w| w & (1 << (chunk % 64)) != 0)
    }

    /// Adds `chunk`; false if it was there.
    pub fn insert(&mut self, chunk: u64) -> bool {
        let i = (chunk / 64) as usize;
        if i >= self.words.len() {
            self.words.resize(i + 1, 0);
        }
        let bit = 1 << (chunk % 64);
        let new = self.words[i] & bit == 0;
        self.words[i] |= bit;
        self.len += u64::from(new);
        new
    }

    /// Removes `chunk`; false if it was not there.
    pub fn remove(&mut self, chunk: u64) -> bool {
        let Some(w) = self.words.get_mut((chunk / 64) as usize) else {
            return false;
        };
        let bit = 1 << (chunk % 64);
        let was = *w & bit != 0;
        *w &= !bit;
        self.len -= u64::from(was);
        was
    }

    /// Adds the chunks set in `bits`, which stands for chunks `64 * word ..= 64 * word + 63`.
    pub fn insert_word(&mut self, word: u64, bits: u64) {
        if bits == 0 {
            return;
        }
        let i = word as usize;
        if i >= self.words.len() {
            self.words.resize(i + 1, 0);
        }
        self.len += u64::from((bits & !self.words[i]).count_ones());
        self.words[i] |= bits;
    }

    /// The 64 chunks from `64 * word` as bits (bit k: chunk `64 * word + k`).
    pub fn word(&self, word: u64) -> u64 {
        self.words.get(word as usize).copied().unwrap_or(0)
    }

    /// How many chunks are in the set.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many chunks below `end` are in the set.
    pub fn count_below(&self, end: u64) -> u64 {
        let full = ((end / 64) as usize).min(self.words.len());
        let mut n: u64 = self.words[..full]
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum();
        if !end.is_multiple_of(64) {
            n += u64::from((self.word(end / 64) & ((1 << (end % 64)) - 1)).count_ones());
        }
        n
    }

    /// Drops every chunk at or above `end`, and any room kept for more.
    pub fn truncate(&mut self, end: u64) {
        let keep = self.count_below(end);
        self.words.truncate(end.div_ceil(64) as usize);
        if !end.is_multiple_of(64) {
            if let Some(last) = self.words.get_mut((end / 64) as usize) {
                *last &= (1 << (end % 64)) - 1;
            }
        }
        self.words.shrink_to_fit();
        self.len = keep;
    }

    /// The chunks in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut rest = w;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some(i as u64 * 64 + u64::from(bit))
            })
        })
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

/// Every chunk of one job: done ones as bits, the few that are neither done nor untouched as records.
#[derive(Debug)]
pub(super) struct ChunkMap {
    total: u64,
    done: ChunkBits,
    /// Leased, poisoned, and pending after an attempt (or a release): never a done or untouched chunk.
    other: HashMap<u64, Slot>,
}

impl ChunkMap {
    pub(super) fn new(total: u64) -> ChunkMap {
        ChunkMap {
            total,
            done: ChunkBits::with_capacity(total),
            other: HashMap::new(),
        }
    }

    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Adds one pending slot after the others (a piece split off a running chunk) and returns its number.
    pub(super) fn grow(&mut self) -> u64 {
        self.total += 1;
        self.total - 1
    }

    /// The chunk's state; `None` beyond the job's chunks.
    pub(super) fn get(&self, chunk: u64) -> Option<Slot> {
        if chunk >= self.total {
            return None;
        }
        if self.done.contains(chunk) {
            return Some(Slot::Done);
        }
        Some(
            self.other
                .get(&chunk)
                .copied()
                .unwrap_or(Slot::Pending { attempts: 0 }),
        )
    }

    /// Sets the chunk's state (nothing beyond the job's chunks).
    pub(super) fn set(&mut self, chunk: u64, slot: Slot) {
        if chunk >= self.total {
            return;
        }
        match slot {
            Slot::Done => {
                self.other.remove(&chunk);
                self.done.insert(chunk);
            }
            Slot::Pending { attempts: 0 } => {
                self.other.remove(&chunk);
                self.done.remove(chunk);
            }
            slot => {
                self.done.remove(chunk);
                self.other.insert(chunk, slot);
            }
        }
    }

    /// Replaces the done chunks with `done` (start-up), dropping any beyond the job's chunks.
    pub(super) fn restore_done(&mut self, mut done: ChunkBits) {
        done.truncate(self.total);
        for chunk in done.iter() {
            self.other.remove(&chunk);
        }
        self.done = done;
    }

    pub(super) fn done(&self) -> &ChunkBits {
        &self.done
    }

    /// Heap bytes held, roughly (a hash map entry counted as its key, value and control byte).
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.done.heap_bytes() + self.other.capacity() * (8 + std::mem::size_of::<Slot>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The bits behave as a set of numbers, whatever the order of inserts and removes.
        #[test]
        fn bits_behave_as_a_set(ops in proptest::collection::vec((any::<bool>(), 0u64..700), 0..300), end in 0u64..800) {
            let mut bits = ChunkBits::new();
            let mut want = std::collections::BTreeSet::new();
            for (add, c) in ops {
                if add {
                    prop_assert_eq!(bits.insert(c), want.insert(c));
                } else {
                    prop_assert_eq!(bits.remove(c), want.remove(&c));
                }
                prop_assert_eq!(bits.len(), want.len() as u64);
            }
            prop_assert_eq!(bits.iter().collect::<Vec<_>>(), want.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(bits.count_below(end), want.range(..end).count() as u64);
            let mut rebuilt = ChunkBits::new();
            for w in 0..12 {
                rebuilt.insert_word(w, bits.word(w));
            }
            prop_assert_eq!(&rebuilt.iter().collect::<Vec<_>>(), &bits.iter().collect::<Vec<_>>());
            prop_assert_eq!(rebuilt.len(), bits.len());
            bits.truncate(end);
            prop_assert_eq!(bits.iter().collect::<Vec<_>>(), want.range(..end).copied().collect::<Vec<_>>());
            prop_assert_eq!(bits.len(), want.range(..end).count() as u64);
        }

        /// A chunk map answers what was set last, for every chunk, and keeps records only for the chunks that
        /// are neither done nor untouched.
        #[test]
        fn a_chunk_map_answers_what_was_set(ops in proptest::collection::vec((0u64..300, 0u8..5, 0u32..3), 0..400)) {
            let mut map = ChunkMap::new(256);
            let mut want = vec![Slot::Pending { attempts: 0 }; 256];
            for (chunk, kind, attempts) in ops {
                let slot = match kind {
                    0 => Slot::Done,
                    1 => Slot::Pending { attempts },
                    2 => Slot::Leased { lease: chunk + 1, attempts },
                    3 => Slot::Poisoned { attempts },
                    _ => Slot::Pending { attempts: 0 },
                };
                map.set(chunk, slot);
                if let Some(w) = want.get_mut(chunk as usize) {
                    *w = slot;
                }
            }
            for (chunk, w) in want.iter().enumerate() {
                prop_assert_eq!(map.get(chunk as u64), Some(*w));
            }
            prop_assert_eq!(map.get(256), None);
            let special = want.iter().filter(|s| !matches!(s, Slot::Done | Slot::Pending { attempts: 0 })).count();
            prop_assert_eq!(map.other.len(), special);
            prop_assert_eq!(map.done().len(), want.iter().filter(|s| **s == Slot::Done).count() as u64);
        }
    }

    /// A hundred million chunks, all done, cost their bits: 12.5 MB.
    #[test]
    fn a_hundred_million_done_chunks_cost_a_bit_each() {
        let mut map = ChunkMap::new(100_000_000);
        let mut done = ChunkBits::with_capacity(100_000_000);
        for w in 0..100_000_000 / 64 {
            done.insert_word(w, u64::MAX);
        }
        map.restore_done(done);
        assert_eq!(map.done().len(), 100_000_000);
        assert_eq!(map.get(99_999_999), Some(Slot::Done));
        assert!(map.heap_bytes() <= 12_500_000 + 64, "{}", map.heap_bytes());
    }
}
