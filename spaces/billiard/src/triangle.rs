//! The shape of a difference triangle and the original program's ball numbering.
//!
//! Two views of the same triangle are used. The *index vector* is the original program's: index 0 is the bottom ball, then
//! level by level upwards, left to right, so level `L` (0 = bottom) holds indices `L(L+1)/2 ..= L(L+1)/2 + L`.
//! Permutation ranks, solution strings and canonical forms are all defined on the index vector, which keeps
//! `--ranks` slices comparable with the original program's own next-permutation walk. The *rows* view (top row first) is what
//! people read and what the JSON `canonical` field holds.

use sweep_space::SpaceError;

/// The original program's ten groups `(bottom, upper left, upper right)` of the 15-ball triangle, as it lists
/// them: what [`Geometry::new`] must reproduce for 5 rows, and what the bench's re-implementation of that
/// program tests.
pub const ORIGINAL_GROUPS: [[u8; 3]; 10] = [
    [0, 1, 2],
    [1, 3, 4],
    [2, 4, 5],
    [3, 6, 7],
    [4, 7, 8],
    [5, 8, 9],
    [6, 10, 11],
    [7, 11, 12],
    [8, 12, 13],
    [9, 13, 14],
];

/// A triangle of `rows` rows over the numbers `1..=n`, `n = rows(rows+1)/2`.
#[derive(Debug, Clone)]
pub struct Geometry {
    pub rows: usize,
    pub n: usize,
    /// The original program's groups `(bottom, upper left, upper right)` as index triples, in the original program's checking order.
    pub groups: Vec<[u8; 3]>,
    /// `mirror[i]`: the index that ball `i` moves to under the left-right reflection.
    pub mirror: Vec<u8>,
}

/// The original program's index of the ball at `level` (0 = bottom) and position `pos` (0 = left).
pub const fn index(level: usize, pos: usize) -> usize {
    level * (level + 1) / 2 + pos
}

impl Geometry {
    pub fn new(rows: usize) -> Geometry {
        let n = rows * (rows + 1) / 2;
        let mut groups = Vec::new();
        for level in 1..rows {
            for pos in 0..level {
                groups.push([
                    index(level - 1, pos) as u8,
                    index(level, pos) as u8,
                    index(level, pos + 1) as u8,
                ]);
            }
        }
        let mut mirror = vec![0u8; n];
        for level in 0..rows {
            for pos in 0..=level {
                mirror[index(level, pos)] = index(level, level - pos) as u8;
            }
        }
        Geometry {
            rows,
            n,
            groups,
            mirror,
        }
    }

    /// Does the index vector `balls` hold every group's rule? Does not check that it is a permutation.
    pub fn groups_hold(&self, balls: &[u8]) -> bool {
        self.groups
            .iter()
            .all(|&[b, l, r]| balls[b as usize] == balls[l as usize].abs_diff(balls[r as usize]))
    }

    /// Is `balls` a permutation of `1..=n` satisfying every group?
    pub fn is_solution(&self, balls: &[u8]) -> bool {
        if balls.len() != self.n {
            return false;
        }
        let mut seen = 0u128;
        for &b in balls {
            if b == 0 || usize::from(b) > self.n || seen & (1 << b) != 0 {
                return false;
            }
            seen |= 1 << b;
        }
        self.groups_hold(balls)
    }

    /// The left-right mirror image of an index vector.
    pub fn mirrored(&self, balls: &[u8]) -> Vec<u8> {
        let mut out = vec![0; balls.len()];
        for (i, &b) in balls.iter().enumerate() {
            out[usize::from(self.mirror[i])] = b;
        }
        out
    }

    /// The canonical member of a mirror class: the lexicographically smaller index vector. For the original program's two
    /// solutions this is `5, 4,9, ...`, the one the original program prints first.
    pub fn canonical(&self, balls: &[u8]) -> Vec<u8> {
        let m = self.mirrored(balls);
        if m.as_slice() < balls {
            m
        } else {
            balls.to_vec()
        }
    }

    /// The rows of an index vector, top row first.
    pub fn to_rows(&self, balls: &[u8]) -> Vec<Vec<u8>> {
        (0..self.rows)
            .rev()
            .map(|level| (0..=level).map(|pos| balls[index(level, pos)]).collect())
            .collect()
    }

    /// Parses the solution text form (`encode`) and checks that it is a solution of this geometry.
    pub fn parse_solution(&self, s: &str) -> Result<Vec<u8>, SpaceError> {
        let bad = |why: String| SpaceError::Verification(format!("triangle `{s}`: {why}"));
        let balls: Vec<u8> = s
            .split(',')
            .map(|t| t.parse::<u8>().map_err(|e| bad(format!("`{t}`: {e}"))))
            .collect::<Result<_, _>>()?;
        if balls.len() != self.n {
            return Err(bad(format!("{} balls, expected {}", balls.len(), self.n)));
        }
        if !self.is_solution(&balls) {
            return Err(bad(format!(
                "not a difference triangle of 1..{} (a group fails or a number repeats)",
                self.n
            )));
        }
        Ok(balls)
    }
}

/// The text form of a triangle: its index vector, comma separated (the original program's index order).
pub fn encode(balls: &[u8]) -> String {
    balls
        .iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Draws a triangle like the original program: levels from the top, balls spaced as a triangle.
pub fn draw(rows: &[Vec<u8>], n: usize) -> String {
    use std::fmt::Write;
    let width = n.to_string().len();
    let levels = rows.len();
    let mut s = String::new();
    for (i, row) in rows.iter().enumerate() {
        let level = levels - 1 - i;
        let _ = write!(s, "  level {level:>2} |{}", " ".repeat(i * (width + 1)));
        for (k, b) in row.iter().enumerate() {
            if k > 0 {
                s.push_str(&" ".repeat(width + 1));
            }
            let _ = write!(s, " {b:>width$}");
        }
        s.push('\n');
    }
    s
}
