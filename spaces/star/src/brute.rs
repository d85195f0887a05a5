//! The `brute` kernel: every permutation of a rank range, tested line by line in the original program's field
//! order. It exists to reproduce that program's work exactly (its verdicts and its count of permutations
//! tested), as the reference the backtracking search is checked against.

use sweep_space::perm::FACTORIALS;
use sweep_space::{ChunkOutput, Control, Meter, SpaceError};

use crate::geometry::Geometry;
use crate::labels::encode;
use crate::masks::label_bits;

/// How many permutations a brute force job of `geo`'s n walks: (2n)!.
pub(crate) fn total_perms(geo: &Geometry) -> u128 {
    u128::from(FACTORIALS[2 * geo.n])
}

/// Rank-range brute force over permutations in field order.
pub(crate) struct Brute<'a> {
    geo: &'a Geometry,
    lo: u64,
    hi: u64,
    out: &'a mut ChunkOutput,
    /// `labels[cell]`.
    labels: Vec<u8>,
    /// Lines that become complete when field `d` is placed.
    completes_at: Vec<Vec<usize>>,
    /// One step per permutation tested or block of ranks failed at once.
    meter: Meter<'a>,
    /// Whether the job wants the stars' text.
    list: bool,
}

impl<'a> Brute<'a> {
    pub(crate) fn new(
        geo: &'a Geometry,
        lo: u64,
        hi: u64,
        ctl: &'a Control,
        out: &'a mut ChunkOutput,
    ) -> Self {
        let cells = 2 * geo.n;
        let mut position = vec![0usize; cells];
        for (f, &c) in geo.fields.iter().enumerate() {
            position[c as usize] = f;
        }
        let mut completes_at = vec![Vec::new(); cells];
        for (i, line) in geo.lines.iter().enumerate() {
            let last = line
                .iter()
                .map(|&c| position[c as usize])
                .max()
                .unwrap_or(0);
            completes_at[last].push(i);
        }
        Brute {
            geo,
            lo,
            hi,
            out,
            labels: vec![0; cells],
            completes_at,
            meter: Meter::new(ctl),
            list: ctl.lists_solutions(),
        }
    }

    pub(crate) fn run(mut self) -> Result<(), SpaceError> {
        if self.lo < self.hi {
            self.dfs(0, 0, label_bits(2 * self.geo.n))?;
        }
        self.out.nodes = self.meter.finish();
        Ok(())
    }

    /// Places field `depth`; the subtree below covers ranks `[base, base + (cells-depth)!)`.
    fn dfs(&mut self, depth: usize, base: u64, mut unused: u64) -> Result<(), SpaceError> {
        let cells = 2 * self.geo.n;
        let block = FACTORIALS[cells - depth - 1];
        let cell = self.geo.fields[depth] as usize;
        let mut child_base = base;
        let free = unused;
        let mut bits = free;
        while bits != 0 {
            let v = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            let (start, end) = (child_base, child_base + block);
            child_base = end;
            if end <= self.lo {
                continue;
            }
            if start >= self.hi {
                break;
            }
            self.labels[cell] = v;
            let in_range = end.min(self.hi) - start.max(self.lo);
            let fails = self.completes_at[depth].iter().any(|&l| {
                self.geo.lines[l]
                    .iter()
                    .map(|&c| u32::from(self.labels[c as usize]))
                    .sum::<u32>()
                    != self.geo.magic
            });
            if fails {
                // Every permutation in this block fails at this line: the one-by-one test's verdict, counted once.
                self.meter.add(in_range)?;
            } else if depth + 1 == cells {
                self.meter.add(1)?;
                self.found();
            } else {
                unused &= !(1u64 << v);
                self.dfs(depth + 1, start, unused)?;
                unused |= 1u64 << v;
            }
        }
        self.labels[cell] = 0;
        Ok(())
    }

    fn found(&mut self) {
        self.out.count("solutions", 1);
        if self.geo.is_canonical(&self.labels) {
            self.out.count("unique", 1);
            if self.list {
                self.out.solutions.push(encode(&self.labels));
            }
        }
    }
}
