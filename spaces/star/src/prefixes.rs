//! The tops of the backtracking tree that chunks are ranges of ([`Prefix`]), listed once per n and shared. Their
//! order numbers the chunks of stored and running jobs, so this module is what must never change its output.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::geometry::Geometry;
use crate::masks::{half, label_bits, labels_above, mirror};

/// The top of the backtracking tree that a chunk starts from: `[O_0, O_1, O_{n-1}, J_0, J_1]` (J_{n-1} and O_2
/// follow from lines n-1 and 0). `J_1` is 0 in coarse prefixes (see [`FINE_PREFIX_MAX_POINTS`]).
pub(crate) type Prefix = [u8; 5];

/// Up to this n, prefixes include J_1: 956,517 of them for n = 16 (5 MB, 35 ms to list), and more than 64,000
/// (64 chunks per thread on 1,000 threads) from n = 11 on. Beyond it the tree is too big to search anyway, and
/// coarse prefixes (100,824 for n = 17, 1.2 million for n = 31) keep building a job cheap.
pub(crate) const FINE_PREFIX_MAX_POINTS: usize = 16;

/// The prefix list of `geo`'s n, built once while any job of that n holds it. One process builds the same job
/// several times (`sweep run` where it reads the arguments, in the coordinator and in the worker; a coordinator
/// per submit and per restart), and each kept its own list: 1.3 MB for n = 12, 5 MB and 35 ms for n = 16.
///
/// The list stays the `Vec` it was built in: copied into an `Arc<[_]>`, the freed megabytes raised glibc's
/// mmap threshold (it follows the largest block freed), and every later allocation below that size came from
/// the heap and stayed resident: a counting run's memory grew by 3 MB instead of shrinking.
pub(crate) fn shared_prefixes(geo: &Geometry) -> Arc<Vec<Prefix>> {
    static LISTS: Mutex<Vec<(usize, Weak<Vec<Prefix>>)>> = Mutex::new(Vec::new());
    // Poisoned only by a panic while building a list, which pushes nothing: what is there is whole.
    let mut lists = LISTS.lock().unwrap_or_else(PoisonError::into_inner);
    lists.retain(|(_, list)| list.strong_count() > 0);
    if let Some(list) = lists
        .iter()
        .filter(|(n, _)| *n == geo.n)
        .find_map(|(_, list)| list.upgrade())
    {
        return list;
    }
    let list = Arc::new(backtrack_prefixes(geo));
    lists.push((geo.n, Arc::downgrade(&list)));
    list
}

/// Every legal start of the search: O_0 < O_1 < O_{n-1} with O_0 at most n + 1 (the n outer labels all exceed
/// it), J_0 free and J_{n-1} = magic - O_1 - O_{n-1} - J_0 a free label; for n up to [`FINE_PREFIX_MAX_POINTS`]
/// also every J_1 whose O_2 = magic - O_0 - J_0 - J_1 is a free label above O_0.
///
/// J_0 and J_1 are drawn from masks of the values whose partner (J_{n-1}, O_2) is free too, like the search's
/// candidates, in increasing order: the order of the prefixes is what numbers a job's chunks, and must not
/// change. The first build of a job of each n runs this, and loops over all values would take 13 M
/// instructions for n = 11.
pub(crate) fn backtrack_prefixes(geo: &Geometry) -> Vec<Prefix> {
    let n = geo.n as i32;
    let cells = 2 * n;
    let m = geo.magic as i32;
    let fine = geo.n <= FINE_PREFIX_MAX_POINTS;
    let all = label_bits(geo.n * 2);
    let mut out = Vec::new();
    for a in 1..=n + 1 {
        let above_a = labels_above(geo.n * 2, a);
        for b in a + 1..=cells {
            for c in b + 1..=cells {
                let free = all & !((1u64 << a) | (1u64 << b) | (1u64 << c));
                // J_0 = d and J_{n-1} = e with d + e = t, both free and distinct.
                let t = m - b - c;
                let mut ds = free & mirror(free, t) & !half(t);
                while ds != 0 {
                    let d = ds.trailing_zeros() as i32;
                    ds &= ds - 1;
                    let p = [a, b, c, d].map(|x| x as u8);
                    if !fine {
                        out.push([p[0], p[1], p[2], p[3], 0]);
                        continue;
                    }
                    let rest = free & !(1u64 << d) & !(1u64 << (t - d));
                    // J_1 = v and O_2 = w with v + w = u, both free and distinct, w above O_0.
                    let u = m - a - d;
                    let mut vs = rest & mirror(rest & above_a, u) & !half(u);
                    while vs != 0 {
                        let v = vs.trailing_zeros() as u8;
                        vs &= vs - 1;
                        out.push([p[0], p[1], p[2], p[3], v]);
                    }
                }
            }
        }
    }
    out
}
