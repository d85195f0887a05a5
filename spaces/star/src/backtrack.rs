//! The `backtrack` kernel, where a star job spends its time: the search below one prefix ([`Search`]) and the
//! chunk's walk over its prefixes ([`Backtrack`]). Its own module so that the hot loop reads in one place; the
//! cell order and the symmetry breaking it relies on are described in the crate documentation.

use sweep_space::{ChunkOutput, Control, Meter, SpaceError};

use crate::geometry::Geometry;
use crate::labels::encode;
use crate::masks::{half, label_bits, labels_above, mirror};
use crate::prefixes::Prefix;

/// The backtracking search below one prefix (see the crate documentation for the cell order). Free values are a
/// bit mask; `outer_ok` masks the values an outer cell may take (above O_0).
pub(crate) struct Search {
    pub(crate) n: usize,
    magic: i32,
    /// Outer labels `O_i`, 0 while unset (fixed arrays: no bounds to grow, n <= MAX_POINTS < 32).
    pub(crate) o: [i32; 32],
    /// Inner labels `J_i`, 0 while unset.
    pub(crate) j: [i32; 32],
    outer_ok: u64,
    /// What O_{n-2} + J_{n-2} must sum to: line n-2 less J_{n-1} and O_0, both set by the prefix.
    pair: i32,
    /// What O_{n-3} + J_{n-3} + J_{n-2} must sum to: line n-3 less O_{n-1}, set by the prefix.
    triple: i32,
}

impl Search {
    pub(crate) fn new(geo: &Geometry) -> Search {
        Search {
            n: geo.n,
            magic: geo.magic as i32,
            o: [0; 32],
            j: [0; 32],
            outer_ok: 0,
            pair: 0,
            triple: 0,
        }
    }

    /// Sets the prefix's cells; returns the free values, the first level left to search and a witness that the
    /// far lines can close (see [`Search::far_witness`]), or `None` if the prefix cannot lead to a star.
    pub(crate) fn start(&mut self, p: Prefix) -> Option<(u64, usize, u64)> {
        let n = self.n;
        let cells = 2 * n as i32;
        let [a, b, c, d, v] = p.map(i32::from);
        self.o = [0; 32];
        self.j = [0; 32];
        let e = self.magic - b - c - d;
        // A fixed array, not a `Vec`: this runs once per prefix (10^5 per chunk of n = 12), and a `realloc` takes
        // the malloc arena's lock, which threads that free this thread's reported stars hold at times (a search
        // thread slept on it for 5-20 ms at a time in `sweep run`).
        let mut vals = [a, b, c, d, e, 0, 0];
        let mut n_vals = 5;
        self.o[0] = a;
        self.o[1] = b;
        self.o[n - 1] = c;
        self.j[0] = d;
        self.j[n - 1] = e;
        let mut level = 1;
        if v != 0 {
            let w = self.magic - a - d - v;
            self.j[1] = v;
            self.o[2] = w;
            vals[5..].copy_from_slice(&[v, w]);
            n_vals = 7;
            level = 2;
        }
        let mut used = 0u64;
        for &x in &vals[..n_vals] {
            if !(1..=cells).contains(&x) || used & (1 << x) != 0 {
                return None;
            }
            used |= 1 << x;
        }
        let all = label_bits(2 * n);
        self.outer_ok = labels_above(2 * n, a);
        let outer = [b, c].into_iter().chain((v != 0).then_some(self.o[2]));
        if outer.into_iter().any(|x| x <= a) || b >= c {
            return None;
        }
        self.pair = self.magic - a - e;
        self.triple = self.magic - c;
        let free = all & !used;
        let witness = if level + 3 == n {
            u64::MAX
        } else {
            self.far_witness(free)
        };
        (witness != 0).then_some((free, level, witness))
    }

    /// Can lines n-2 and n-3 still be completed from the free values? Some J_{n-2} = z and O_{n-2} = pair - z
    /// (above O_0), and then O_{n-3} (above O_0) and J_{n-3} summing to triple - z, all distinct and free. Returns
    /// those four values as a mask (a witness), or 0 if there are none. Only valid while the four cells are
    /// unset, i.e. below level n-4. A witness stays one for every subset of `free` that keeps its four values,
    /// which is what makes the check cheap: a child needs a new witness only if it uses one of them.
    #[inline(always)]
    fn far_witness(&self, free: u64) -> u64 {
        let (pair, triple) = (self.pair, self.triple);
        let mut zs = free & mirror(free & self.outer_ok, pair) & !half(pair);
        while zs != 0 {
            let z = zs.trailing_zeros() as i32;
            zs &= zs - 1;
            let zy = (1u64 << z) | (1u64 << (pair - z));
            let rest = free & !zy;
            let r = triple - z;
            let xs = rest & mirror(rest & self.outer_ok, r) & !half(r);
            if xs != 0 {
                let x = xs.trailing_zeros() as i32;
                return zy | (1u64 << x) | (1u64 << (r - x));
            }
        }
        0
    }

    /// The candidates at level `k`: a mask of the values J_k may take such that O_{k+1} = t - J_k, forced by line
    /// k-1, is free and above O_0; and t.
    #[inline(always)]
    pub(crate) fn candidates(&self, k: usize, free: u64) -> (u64, i32) {
        let t = self.magic - self.o[k - 1] - self.j[k - 1];
        (free & mirror(free & self.outer_ok, t) & !half(t), t)
    }

    /// The witness a child of level `k` with free values `rest` passes on (see [`Search::far_witness`]), given
    /// its parent's `witness` and the two values `placed` it took; 0 if the far lines cannot close, in which
    /// case the child is not part of the tree. At level n-4 the next step solves the last cells exactly, far
    /// lines included, so every candidate is a child.
    #[inline(always)]
    pub(crate) fn child_witness(&self, k: usize, rest: u64, placed: u64, witness: u64) -> u64 {
        if k + 4 == self.n {
            u64::MAX
        } else if placed & witness == 0 {
            witness
        } else {
            self.far_witness(rest)
        }
    }

    /// The last three cells J_{n-3}, O_{n-2}, J_{n-2} are forced by lines n-4 and n-3 and the three free values:
    /// solves for them and returns true if they are exactly the free values (O_{n-2} above O_0). Line n-2 then
    /// holds by itself, since all lines together sum to twice 1 + ... + 2n.
    #[inline(always)]
    pub(crate) fn close(&mut self, free: u64) -> bool {
        let n = self.n;
        let mut rest = free;
        let mut total = 0;
        while rest != 0 {
            total += rest.trailing_zeros() as i32;
            rest &= rest - 1;
        }
        let t1 = self.magic - self.o[n - 4] - self.j[n - 4];
        let t2 = self.magic - self.o[n - 3] - self.o[n - 1];
        let (x, y, z) = (t1 + t2 - total, total - t2, total - t1);
        if x <= 0 || y <= 0 || z <= 0 || x >= 64 || y >= 64 || z >= 64 {
            return false;
        }
        if (1u64 << x) | (1u64 << y) | (1u64 << z) != free || (1u64 << y) & self.outer_ok == 0 {
            return false;
        }
        self.j[n - 3] = x;
        self.o[n - 2] = y;
        self.j[n - 2] = z;
        true
    }

    /// The labelling by cell: outer cells, then inner ones.
    fn labels<'a>(&self, buf: &'a mut [u8; 64]) -> &'a [u8] {
        let n = self.n;
        for (b, &x) in buf.iter_mut().zip(self.o[..n].iter().chain(&self.j[..n])) {
            *b = x as u8;
        }
        &buf[..2 * n]
    }
}

/// Runs the search below prefixes, counting nodes and reporting progress.
pub(crate) struct Backtrack<'a> {
    search: Search,
    out: &'a mut ChunkOutput,
    /// Counts every node where it is made and takes one step per call above the bottom level: the bottom
    /// loop, where most nodes are, stays a plain add.
    meter: Meter<'a>,
    /// Unique stars found, added to the counters once at the end (not a map update per star).
    unique: u128,
    /// Whether the job wants the stars' text (a job that keeps counts only does not).
    list: bool,
}

impl<'a> Backtrack<'a> {
    pub(crate) fn new(geo: &Geometry, ctl: &'a Control, out: &'a mut ChunkOutput) -> Self {
        Backtrack {
            search: Search::new(geo),
            out,
            meter: Meter::new(ctl),
            unique: 0,
            list: ctl.lists_solutions(),
        }
    }

    pub(crate) fn run_prefix(&mut self, p: Prefix) -> Result<(), SpaceError> {
        let Some((free, level, witness)) = self.search.start(p) else {
            return Ok(());
        };
        self.meter.count(1);
        self.dfs(level, free, witness)
    }

    pub(crate) fn flush(&mut self) {
        self.out.nodes = self.meter.finish();
        // A chunk without stars reports no counters at all, as it always has (the digest of its output is
        // compared across workers and versions).
        let unique = std::mem::take(&mut self.unique);
        if unique > 0 {
            self.out
                .count("solutions", 2 * self.search.n as u128 * unique);
            self.out.count("unique", unique);
        }
    }

    fn dfs(&mut self, k: usize, free: u64, witness: u64) -> Result<(), SpaceError> {
        if k + 3 == self.search.n {
            if self.search.close(free) {
                self.meter.count(1);
                self.found();
            }
            return Ok(());
        }
        let (mut cand, t) = self.search.candidates(k, free);
        if k + 4 == self.search.n {
            // The bottom of the tree, where most nodes are: each child is closed at once, without recursing.
            while cand != 0 {
                let v = cand.trailing_zeros() as i32;
                cand &= cand - 1;
                let w = t - v;
                self.search.j[k] = v;
                self.search.o[k + 1] = w;
                self.meter.count(1);
                if self.search.close(free & !(1u64 << v) & !(1u64 << w)) {
                    self.meter.count(1);
                    self.found();
                }
            }
            return Ok(());
        }
        while cand != 0 {
            let v = cand.trailing_zeros() as i32;
            cand &= cand - 1;
            let w = t - v;
            let placed = (1u64 << v) | (1u64 << w);
            let rest = free & !placed;
            let witness = self.search.child_witness(k, rest, placed, witness);
            if witness == 0 {
                continue;
            }
            self.search.j[k] = v;
            self.search.o[k + 1] = w;
            self.meter.count(1);
            self.dfs(k + 1, rest, witness)?;
        }
        self.meter.step()
    }

    fn found(&mut self) {
        // The search visits exactly one member of each orbit, and it is the canonical one (crate documentation),
        // so it stands for 2n solutions and is itself the unique representative.
        self.unique += 1;
        if self.list {
            let mut labels = [0u8; 64];
            let cells = self.search.labels(&mut labels);
            self.out.solutions.push(encode(cells));
        }
    }
}
