//! Board geometry: holes, their names and bits, the moves, the symmetries and the position-class invariants.
//!
//! Holes are named `ROW,COL`, both counted from 1 at the top left of the board's grid (the English centre is
//! `4,4`; on the triangle row `r` holds columns `1..=r`, so its apex is `1,1`).
//!
//! Bit layout: a board whose grid has at most 64 cells keeps the original program's layout, bit = `cols * row +
//! col` (0-based), so the English board has exactly its bits {2,3,4, 9,10,11, 14..34, 37,38,39, 44,45,46} and
//! centre 24. The 9x9 boards (wiegleb, diamond) would need 81 bits that way, so their holes are numbered compactly
//! in reading order instead, which keeps every position in one `u64`.

use std::fmt::Write;

/// The five boards of the spec.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum BoardKind {
    /// 33 holes, the plus shape on a 7x7 grid (the original program's board).
    English,
    /// 37 holes: the English board plus the four inner corners (the French board).
    European,
    /// 45 holes: a plus shape with arms 3 wide on a 9x9 grid.
    Wiegleb,
    /// 41 holes: the diamond |row-5| + |col-5| <= 4 on a 9x9 grid.
    Diamond,
    /// 15 holes: a triangle of side 5 with jumps along its three directions.
    Triangle,
}

impl BoardKind {
    /// Every board, in the order of the spec: what a property that holds on any board is checked over.
    pub const ALL: [BoardKind; 5] = [
        BoardKind::English,
        BoardKind::European,
        BoardKind::Wiegleb,
        BoardKind::Diamond,
        BoardKind::Triangle,
    ];
}

/// One jump: the peg on `from` jumps over `over` into the empty `to`. Fields are bit indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub from: u8,
    pub over: u8,
    pub to: u8,
    /// `from | over`: both must hold pegs.
    pub need: u64,
    /// All three bits: a move flips exactly these.
    pub flip: u64,
}

impl Move {
    #[inline]
    pub fn applies(&self, pos: u64) -> bool {
        pos & self.flip == self.need
    }
}

/// A symmetry as a bit permutation, applied through one 256-entry table per byte of the position so that an
/// image costs eight loads instead of a loop over the holes.
#[derive(Clone)]
pub struct Symmetry {
    /// `perm[bit]` = the image bit (only meaningful for hole bits).
    pub perm: Vec<u8>,
    tables: Vec<[u64; 256]>,
}

impl std::fmt::Debug for Symmetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symmetry")
            .field("perm", &self.perm)
            .finish()
    }
}

impl Symmetry {
    fn new(perm: Vec<u8>, bits: usize) -> Symmetry {
        let n_bytes = bits.div_ceil(8);
        let mut tables = vec![[0u64; 256]; n_bytes];
        for (byte, table) in tables.iter_mut().enumerate() {
            for (v, slot) in table.iter_mut().enumerate() {
                let mut img = 0u64;
                for k in 0..8 {
                    let bit = byte * 8 + k;
                    if v & (1 << k) != 0 && bit < perm.len() && perm[bit] != u8::MAX {
                        img |= 1u64 << perm[bit];
                    }
                }
                *slot = img;
            }
        }
        Symmetry { perm, tables }
    }

    #[inline]
    pub fn apply(&self, pos: u64) -> u64 {
        let mut img = 0;
        for (byte, table) in self.tables.iter().enumerate() {
            img |= table[((pos >> (8 * byte)) & 0xff) as usize];
        }
        img
    }
}

/// A map of grid cells (row, col) to grid cells: a candidate symmetry.
type CellMap = Box<dyn Fn(usize, usize) -> (usize, usize)>;

/// A board with everything the kernels need precomputed.
#[derive(Clone, Debug)]
pub struct Board {
    pub kind: BoardKind,
    pub rows: usize,
    pub cols: usize,
    /// `bit_at[row * cols + col]` = the hole's bit, or `None` outside the board.
    pub bit_at: Vec<Option<u8>>,
    /// `cell_of[bit]` = (row, col), 0-based, for hole bits.
    pub cell_of: Vec<Option<(usize, usize)>>,
    /// Every hole's bit.
    pub holes: u64,
    pub n_holes: u32,
    pub moves: Vec<Move>,
    /// The board's symmetry group (identity first).
    pub symmetries: Vec<Symmetry>,
    /// A basis of the position-class functionals: sets of holes whose peg count has a parity no move changes.
    pub class_basis: Vec<u64>,
    /// Triangle boards are drawn as a triangle; the others as their grid.
    triangular: bool,
}

impl Board {
    pub fn new(kind: BoardKind) -> Board {
        match kind {
            BoardKind::English => {
                Self::square(kind, 7, |r, c| (2..5).contains(&r) || (2..5).contains(&c))
            }
            BoardKind::European => Self::square(kind, 7, |r, c| {
                (2..5).contains(&r)
                    || (2..5).contains(&c)
                    || ((1..6).contains(&r) && (1..6).contains(&c))
            }),
            BoardKind::Wiegleb => {
                Self::square(kind, 9, |r, c| (3..6).contains(&r) || (3..6).contains(&c))
            }
            BoardKind::Diamond => Self::square(kind, 9, |r, c| r.abs_diff(4) + c.abs_diff(4) <= 4),
            BoardKind::Triangle => Self::triangle(kind, 5),
        }
    }

    /// A board on an n x n grid with orthogonal jumps and the square's symmetries that keep the hole set.
    pub fn square(kind: BoardKind, n: usize, is_hole: impl Fn(usize, usize) -> bool) -> Board {
        let dirs = [(0isize, 1isize), (1, 0)];
        let maps: Vec<CellMap> = vec![
            Box::new(|r, c| (r, c)),
            Box::new(move |r, c| (c, n - 1 - r)),
            Box::new(move |r, c| (n - 1 - r, n - 1 - c)),
            Box::new(move |r, c| (n - 1 - c, r)),
            Box::new(move |r, c| (r, n - 1 - c)),
            Box::new(move |r, c| (n - 1 - r, c)),
            Box::new(|r, c| (c, r)),
            Box::new(move |r, c| (n - 1 - c, n - 1 - r)),
        ];
        Self::build(kind, n, n, &is_hole, &dirs, &maps, false)
    }

    /// The triangle of side `s`: row r (0-based) holds columns 0..=r; jumps along rows, columns and the
    /// diagonal (1,1). Its six symmetries permute the barycentric coordinates (c, r - c, s - 1 - r).
    fn triangle(kind: BoardKind, s: usize) -> Board {
        let dirs = [(0isize, 1isize), (1, 0), (1, 1)];
        let m = s - 1;
        let to_rc = move |x: usize, _y: usize, z: usize| (m - z, x);
        let maps: Vec<CellMap> = vec![
            Box::new(move |r, c| to_rc(c, r - c.min(r), m - r)),
            Box::new(move |r, c| to_rc(r - c.min(r), m - r, c)),
            Box::new(move |r, c| to_rc(m - r, c, r - c.min(r))),
            Box::new(move |r, c| to_rc(r - c.min(r), c, m - r)),
            Box::new(move |r, c| to_rc(c, m - r, r - c.min(r))),
            Box::new(move |r, c| to_rc(m - r, r - c.min(r), c)),
        ];
        Self::build(kind, s, s, &|r, c| c <= r, &dirs, &maps, true)
    }

    fn build(
        kind: BoardKind,
        rows: usize,
        cols: usize,
        is_hole: &dyn Fn(usize, usize) -> bool,
        dirs: &[(isize, isize)],
        maps: &[CellMap],
        triangular: bool,
    ) -> Board {
        let compact = rows * cols > 64;
        let mut bit_at = vec![None; rows * cols];
        let mut next = 0u8;
        for r in 0..rows {
            for c in 0..cols {
                if is_hole(r, c) {
                    bit_at[r * cols + c] = Some(if compact { next } else { (r * cols + c) as u8 });
                    next += 1;
                }
            }
        }
        let n_bits = if compact { next as usize } else { rows * cols };
        let mut cell_of = vec![None; n_bits];
        let mut holes = 0u64;
        for r in 0..rows {
            for c in 0..cols {
                if let Some(b) = bit_at[r * cols + c] {
                    cell_of[b as usize] = Some((r, c));
                    holes |= 1u64 << b;
                }
            }
        }
        let at = |r: isize, c: isize| -> Option<u8> {
            if r < 0 || c < 0 || r as usize >= rows || c as usize >= cols {
                None
            } else {
                bit_at[r as usize * cols + c as usize]
            }
        };
        let mut moves = Vec::new();
        let mut lines = Vec::new();
        for r in 0..rows as isize {
            for c in 0..cols as isize {
                for &(dr, dc) in dirs {
                    if let (Some(a), Some(b), Some(e)) =
                        (at(r, c), at(r + dr, c + dc), at(r + 2 * dr, c + 2 * dc))
                    {
                        lines.push((1u64 << a) | (1u64 << b) | (1u64 << e));
                        for (from, to) in [(a, e), (e, a)] {
                            moves.push(Move {
                                from,
                                over: b,
                                to,
                                need: (1u64 << from) | (1u64 << b),
                                flip: (1u64 << from) | (1u64 << b) | (1u64 << to),
                            });
                        }
                    }
                }
            }
        }
        let mut symmetries = Vec::new();
        for map in maps {
            let mut perm = vec![u8::MAX; n_bits];
            let mut ok = true;
            for (bit, cell) in cell_of.iter().enumerate() {
                if let Some((r, c)) = *cell {
                    let (r2, c2) = map(r, c);
                    match at(r2 as isize, c2 as isize) {
                        Some(b2) => perm[bit] = b2,
                        None => ok = false,
                    }
                }
            }
            if ok {
                symmetries.push(Symmetry::new(perm, n_bits));
            }
        }
        let class_basis = gf2_kernel(&lines, holes);
        Board {
            kind,
            rows,
            cols,
            bit_at,
            cell_of,
            holes,
            n_holes: holes.count_ones(),
            moves,
            symmetries,
            class_basis,
            triangular,
        }
    }

    /// A custom board for tests: orthogonal jumps on a grid, the square's symmetries that keep it.
    #[cfg(test)]
    pub fn custom(n: usize, is_hole: impl Fn(usize, usize) -> bool) -> Board {
        Self::square(BoardKind::English, n, is_hole)
    }

    pub fn centre(&self) -> Option<u8> {
        self.bit_at[(self.rows / 2) * self.cols + self.cols / 2]
    }

    /// The hole's name, `ROW,COL` from 1 at the top left.
    pub fn name(&self, bit: u8) -> String {
        match self.cell_of.get(bit as usize).copied().flatten() {
            Some((r, c)) => format!("{},{}", r + 1, c + 1),
            None => format!("?{bit}"),
        }
    }

    /// Parses `ROW,COL` (1-based) or `centre`/`center`.
    pub fn parse_hole(&self, text: &str) -> Result<u8, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("centre") || t.eq_ignore_ascii_case("center") {
            return self
                .centre()
                .ok_or_else(|| format!("the {:?} board has no centre hole", self.kind));
        }
        let (r, c) = t.split_once(',').ok_or_else(|| {
            format!("`{text}` is not a hole: write ROW,COL counted from 1 at the top left")
        })?;
        let parse = |s: &str| s.trim().parse::<usize>().ok().filter(|&v| v >= 1);
        let (Some(r), Some(c)) = (parse(r), parse(c)) else {
            return Err(format!(
                "`{text}` is not a hole: ROW and COL are numbers from 1"
            ));
        };
        if r > self.rows || c > self.cols {
            return Err(format!(
                "`{text}` lies outside the {}x{} grid",
                self.rows, self.cols
            ));
        }
        self.bit_at[(r - 1) * self.cols + (c - 1)]
            .ok_or_else(|| format!("`{text}` is not a hole of this board"))
    }

    /// The class of a position: one parity bit per basis functional. Moves never change it.
    pub fn class(&self, pos: u64) -> u32 {
        self.class_basis
            .iter()
            .enumerate()
            .map(|(i, w)| ((pos & w).count_ones() & 1) << i)
            .fold(0, |a, b| a | b)
    }

    /// Holes named in a short list (for explanations).
    pub fn names(&self, set: u64) -> String {
        bits(set)
            .map(|b| self.name(b))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The original program's drawing: rows of `X` (peg), `0` (empty hole), blank (no hole), boards side by side, at
    /// most `per_block` boards per block.
    pub fn draw_row(&self, boards: &[u64], per_block: usize) -> String {
        let mut s = String::new();
        for block in boards.chunks(per_block.max(1)) {
            for r in 0..self.rows {
                let mut line = String::new();
                for (i, &pos) in block.iter().enumerate() {
                    if i > 0 {
                        line.push_str("  ");
                    }
                    line.push_str(&self.draw_line(pos, r));
                }
                let _ = writeln!(s, "{}", line.trim_end());
            }
            s.push('\n');
        }
        s
    }

    fn draw_line(&self, pos: u64, r: usize) -> String {
        let cell = |c: usize| match self.bit_at[r * self.cols + c] {
            Some(b) if pos >> b & 1 == 1 => 'X',
            Some(_) => '0',
            None => ' ',
        };
        if self.triangular {
            // Row r is centred: (rows - 1 - r) blanks, then the holes separated by blanks; width 2*rows - 1.
            let mut line = " ".repeat(self.rows - 1 - r);
            for c in 0..=r {
                if c > 0 {
                    line.push(' ');
                }
                line.push(cell(c));
            }
            line.push_str(&" ".repeat(self.rows - 1 - r));
            line
        } else {
            (0..self.cols).map(cell).collect()
        }
    }
}

/// The set bits of `set`, lowest first.
pub fn bits(mut set: u64) -> impl Iterator<Item = u8> {
    std::iter::from_fn(move || {
        if set == 0 {
            None
        } else {
            let b = set.trailing_zeros() as u8;
            set &= set - 1;
            Some(b)
        }
    })
}

/// All hole sets `w` whose intersection with every line has even size: a move flips the three holes of a line,
/// so it keeps the parity of the pegs on `w`. This is the GF(2) form of Conway's position classes (on square
/// boards it is the "three-colour" argument along both diagonal directions), computed from the lines so every
/// board gets its own. Returns a basis.
fn gf2_kernel(lines: &[u64], holes: u64) -> Vec<u64> {
    // Row-reduce the line incidence matrix (rows = lines, columns = hole bits), then read off the null space.
    let mut rows: Vec<u64> = lines.to_vec();
    let mut pivots: Vec<(u8, usize)> = Vec::new();
    let mut rank = 0;
    for col in bits(holes) {
        let Some(p) = (rank..rows.len()).find(|&i| rows[i] >> col & 1 == 1) else {
            continue;
        };
        rows.swap(rank, p);
        let pivot_row = rows[rank];
        for (i, row) in rows.iter_mut().enumerate() {
            if i != rank && *row >> col & 1 == 1 {
                *row ^= pivot_row;
            }
        }
        pivots.push((col, rank));
        rank += 1;
    }
    let pivot_cols: u64 = pivots.iter().fold(0, |a, &(c, _)| a | 1u64 << c);
    let free = holes & !pivot_cols;
    bits(free)
        .map(|f| {
            // Set the free column f to 1, the other free ones to 0, and solve each pivot variable.
            let mut w = 1u64 << f;
            for &(c, r) in &pivots {
                if rows[r] >> f & 1 == 1 {
                    w |= 1u64 << c;
                }
            }
            w
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_board_has_the_seed_layout() {
        let b = Board::new(BoardKind::English);
        let expect: u64 = [2, 3, 4, 9, 10, 11, 37, 38, 39, 44, 45, 46]
            .iter()
            .chain((14..=34).collect::<Vec<_>>().iter())
            .fold(0, |a, &x| a | 1u64 << x);
        assert_eq!(b.holes, expect);
        assert_eq!(b.n_holes, 33);
        assert_eq!(b.centre(), Some(24));
        assert_eq!(b.moves.len(), 76);
        assert_eq!(b.symmetries.len(), 8);
        assert_eq!(b.name(24), "4,4");
        assert_eq!(b.parse_hole("4,4"), Ok(24));
        assert_eq!(b.parse_hole("centre"), Ok(24));
        assert!(b.parse_hole("1,1").is_err());
        assert!(b.parse_hole("9,1").is_err());
        assert!(b.parse_hole("x").is_err());
    }

    #[test]
    fn boards_have_their_sizes_and_symmetries() {
        for (kind, holes, syms) in [
            (BoardKind::European, 37, 8),
            (BoardKind::Wiegleb, 45, 8),
            (BoardKind::Diamond, 41, 8),
            (BoardKind::Triangle, 15, 6),
        ] {
            let b = Board::new(kind);
            assert_eq!(b.n_holes, holes, "{kind:?}");
            assert_eq!(b.symmetries.len(), syms, "{kind:?}");
            for g in &b.symmetries {
                assert_eq!(g.apply(b.holes), b.holes, "{kind:?}");
                // Symmetries map moves to moves.
                for m in &b.moves {
                    let img = g.apply(m.flip);
                    assert!(b.moves.iter().any(|n| n.flip == img), "{kind:?}");
                }
            }
        }
        // Triangle: 18 lines of three (6 per direction).
        assert_eq!(Board::new(BoardKind::Triangle).moves.len(), 36);
    }

    #[test]
    fn class_functionals_are_invariant_under_every_move() {
        for kind in BoardKind::ALL {
            let b = Board::new(kind);
            assert!(!b.class_basis.is_empty(), "{kind:?}");
            for w in &b.class_basis {
                for m in &b.moves {
                    assert_eq!((m.flip & w).count_ones() % 2, 0, "{kind:?}");
                }
            }
        }
        // Conway: on the square boards the classes form a group of order 16.
        assert_eq!(Board::new(BoardKind::English).class_basis.len(), 4);
    }

    #[test]
    fn triangle_is_drawn_as_a_triangle() {
        let b = Board::new(BoardKind::Triangle);
        let start = b.holes & !1;
        let text = b.draw_row(&[start], 16);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "    0");
        assert_eq!(lines[4], "X X X X X");
    }
}
