//! The board: tile numbering, the rows the clues count, and the board string.
//!
//! Tiles sit on a flat-topped hexagon of side `s` in axial coordinates `(q, r)` with `|q|, |r|, |q + r| < s`:
//! `q` is the vertical column (left to right), `r` grows downwards inside a column, and a tile's visual height is
//! `y = 2r + q` (in half tiles), because each column is shifted by half a tile against its neighbour.
//!
//! Numbering (the original program's for side 4, generalised to any side): tiles are numbered from 1 by visual row `y`, top to
//! bottom, and left to right (`q`) inside a visual row. Side 4 gives the original program's rows `1 | 2 3 | 4 5 6 | 7 8 9 10 |
//! ...`.
//!
//! Rows (what a clue counts): the three families of straight lines are constant `q` (columns), constant `r` (rows
//! running down to the right) and constant `s = -q - r` (rows running up to the right). Clues are listed clockwise
//! around the board starting at the top, exactly as the original program does for side 4:
//! - clues `0 .. s`: columns `q = 0 .. s-1` (their clue sits above the column, along the top-right edge);
//! - the next `2s-1`: down-right rows `r = -(s-1) .. s-1` (clue at the right-hand end);
//! - the next `2s-1`: up-right rows `s = -(s-1) .. s-1`, i.e. `q + r = s-1 .. -(s-1)` (clue at the lower-left end);
//! - the last `s-1`: columns `q = -(s-1) .. -1` (clue above the column, along the top-left edge).
//!
//! For side 4 this reproduces the original program's table (clue 0 = tiles 1,5,12,19,26,33,37; clue 4 = 1,3,6,10; clue 11 =
//! 31,34,36,37; clue 18 = 7,14,21,28); a unit test checks all 21.
//!
//! Board string: one character per tile, `1` = yellow, `0` = black, tile `n` first and tile 1 last (the original program prints
//! its 37-bit board number in binary, so character `j` is tile `37 - j`).

use sweep_space::SpaceError;

/// Which family a row belongs to; used to describe a row to people.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Constant `q`: a vertical column.
    Column,
    /// Constant `r`: a row running from upper left to lower right.
    DownRight,
    /// Constant `q + r`: a row running from lower left to upper right.
    UpRight,
}

impl Family {
    pub fn describe(self) -> &'static str {
        match self {
            Family::Column => "column",
            Family::DownRight => "down-right row",
            Family::UpRight => "up-right row",
        }
    }
}

/// One row a clue counts.
#[derive(Clone, Debug)]
pub struct Line {
    pub family: Family,
    /// Tile indices (tile number - 1), ascending.
    pub tiles: Vec<u16>,
    /// The tile next to which the clue is drawn, and the axial step from it to the clue's position.
    pub clue_anchor: (u16, (i32, i32)),
}

/// The static shape of a board of one side.
#[derive(Clone, Debug)]
pub struct Geometry {
    pub side: usize,
    /// `coords[t]` = axial `(q, r)` of tile index `t` (tile number `t + 1`).
    pub coords: Vec<(i32, i32)>,
    /// Rows in clue order.
    pub lines: Vec<Line>,
    /// `tile_lines[t]` = the three rows through tile `t`.
    pub tile_lines: Vec<[u16; 3]>,
}

/// The largest side accepted. Tile indices are u16 and the pictures grow with the side; 40 is 4681 tiles, far
/// beyond what any method solves in reasonable time, so the cap only rejects nonsense.
pub const MAX_SIDE: usize = 40;

impl Geometry {
    /// The board of side `side` (2 ..= [`MAX_SIDE`]).
    pub fn new(side: usize) -> Result<Geometry, SpaceError> {
        SpaceError::check_param_range("side", side, 2..=MAX_SIDE)?;
        let m = side as i32 - 1;
        let mut coords: Vec<(i32, i32)> = Vec::with_capacity(tiles_for_side(side));
        for q in -m..=m {
            for r in -m..=m {
                if (q + r).abs() <= m {
                    coords.push((q, r));
                }
            }
        }
        coords.sort_by_key(|&(q, r)| (2 * r + q, q));
        let index = |q: i32, r: i32| coords.iter().position(|&c| c == (q, r));
        let tiles_where = |pred: &dyn Fn(i32, i32) -> bool| -> Vec<u16> {
            (0..coords.len())
                .filter(|&t| pred(coords[t].0, coords[t].1))
                .map(|t| t as u16)
                .collect()
        };
        let mut lines = Vec::with_capacity(3 * (2 * side - 1));
        let column = |q: i32| {
            let tiles = tiles_where(&|tq, _| tq == q);
            // The clue sits one step above the column's top tile.
            let top = tiles[0];
            Line {
                family: Family::Column,
                tiles,
                clue_anchor: (top, (0, -1)),
            }
        };
        for q in 0..=m {
            lines.push(column(q));
        }
        for r in -m..=m {
            let tiles = tiles_where(&|_, tr| tr == r);
            // The right-hand end: the largest q.
            let end = (-m..=m)
                .rev()
                .find_map(|q| index(q, r))
                .unwrap_or(tiles[0] as usize) as u16;
            lines.push(Line {
                family: Family::DownRight,
                tiles,
                clue_anchor: (end, (1, 0)),
            });
        }
        for sum in (-m..=m).rev() {
            let tiles = tiles_where(&|tq, tr| tq + tr == sum);
            // The lower-left end: the smallest q.
            let end = (-m..=m)
                .find_map(|q| index(q, sum - q))
                .unwrap_or(tiles[0] as usize) as u16;
            lines.push(Line {
                family: Family::UpRight,
                tiles,
                clue_anchor: (end, (-1, 1)),
            });
        }
        for q in -m..0 {
            lines.push(column(q));
        }
        let mut tile_lines = vec![[0u16; 3]; coords.len()];
        let mut filled = vec![0usize; coords.len()];
        for (l, line) in lines.iter().enumerate() {
            for &t in &line.tiles {
                tile_lines[t as usize][filled[t as usize]] = l as u16;
                filled[t as usize] += 1;
            }
        }
        Ok(Geometry {
            side,
            coords,
            lines,
            tile_lines,
        })
    }

    pub fn n_tiles(&self) -> usize {
        self.coords.len()
    }

    pub fn n_lines(&self) -> usize {
        self.lines.len()
    }

    /// The clues a board (by tile index, true = yellow) shows.
    pub fn clues_of(&self, board: &[bool]) -> Vec<u32> {
        self.lines
            .iter()
            .map(|l| l.tiles.iter().filter(|&&t| board[t as usize]).count() as u32)
            .collect()
    }

    /// "clue 3 (column, tiles 10,17,24,31)": how errors name a row.
    pub fn describe_line(&self, l: usize) -> String {
        let line = &self.lines[l];
        let tiles: Vec<String> = line.tiles.iter().map(|t| (t + 1).to_string()).collect();
        format!(
            "clue {l} ({}, tiles {})",
            line.family.describe(),
            tiles.join(",")
        )
    }

    /// The board string: tile n first, tile 1 last.
    pub fn encode(&self, board: &[bool]) -> String {
        board
            .iter()
            .rev()
            .map(|&y| if y { '1' } else { '0' })
            .collect()
    }

    /// Parses a board string; the error says what is wrong with it.
    pub fn decode(&self, s: &str) -> Result<Vec<bool>, String> {
        let n = self.n_tiles();
        if s.len() != n {
            return Err(format!(
                "{} characters, a side-{} board has {n} tiles",
                s.len(),
                self.side
            ));
        }
        let mut board = vec![false; n];
        for (j, ch) in s.chars().enumerate() {
            board[n - 1 - j] = match ch {
                '1' => true,
                '0' => false,
                other => return Err(format!("character `{other}` is neither 0 nor 1")),
            };
        }
        Ok(board)
    }
}

/// `3s(s-1) + 1` tiles.
pub fn tiles_for_side(side: usize) -> usize {
    3 * side * (side - 1) + 1
}

/// `3(2s-1)` clues.
pub fn clues_for_side(side: usize) -> usize {
    3 * (2 * side - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The original program's table for side 4, in clue order.
    pub const SEED_LINES: [&[u16]; 21] = [
        &[1, 5, 12, 19, 26, 33, 37],
        &[3, 9, 16, 23, 30, 36],
        &[6, 13, 20, 27, 34],
        &[10, 17, 24, 31],
        &[1, 3, 6, 10],
        &[2, 5, 9, 13, 17],
        &[4, 8, 12, 16, 20, 24],
        &[7, 11, 15, 19, 23, 27, 31],
        &[14, 18, 22, 26, 30, 34],
        &[21, 25, 29, 33, 36],
        &[28, 32, 35, 37],
        &[31, 34, 36, 37],
        &[24, 27, 30, 33, 35],
        &[17, 20, 23, 26, 29, 32],
        &[10, 13, 16, 19, 22, 25, 28],
        &[6, 9, 12, 15, 18, 21],
        &[3, 5, 8, 11, 14],
        &[1, 2, 4, 7],
        &[7, 14, 21, 28],
        &[4, 11, 18, 25, 32],
        &[2, 8, 15, 22, 29, 35],
    ];

    #[test]
    fn side_four_is_the_seed_numbering() {
        let g = Geometry::new(4).unwrap();
        assert_eq!(g.n_tiles(), 37);
        assert_eq!(g.n_lines(), 21);
        for (l, seed) in SEED_LINES.iter().enumerate() {
            let ours: Vec<u16> = g.lines[l].tiles.iter().map(|t| t + 1).collect();
            assert_eq!(&ours[..], *seed, "clue {l}");
        }
    }

    #[test]
    fn every_side_has_the_right_shape() {
        for side in 2..=9 {
            let g = Geometry::new(side).unwrap();
            assert_eq!(g.n_tiles(), tiles_for_side(side));
            assert_eq!(g.n_lines(), clues_for_side(side));
            // Every tile lies on exactly one row of each family.
            for (t, ls) in g.tile_lines.iter().enumerate() {
                let mut fams: Vec<u8> = ls
                    .iter()
                    .map(|&l| g.lines[l as usize].family as u8)
                    .collect();
                fams.sort();
                assert_eq!(fams, vec![0, 1, 2], "side {side} tile {}", t + 1);
            }
            // Tile 1 is the top of the centre column, tile n its bottom.
            assert_eq!(g.coords[0], (0, 1 - side as i32));
            assert_eq!(g.coords[g.n_tiles() - 1], (0, side as i32 - 1));
        }
        assert!(Geometry::new(1).is_err());
        assert!(Geometry::new(MAX_SIDE + 1).is_err());
    }

    #[test]
    fn board_strings_put_tile_one_last() {
        let g = Geometry::new(4).unwrap();
        let mut board = vec![false; 37];
        board[0] = true;
        let s = g.encode(&board);
        assert_eq!(s.len(), 37);
        assert!(s.ends_with('1') && s[..36].chars().all(|c| c == '0'));
        assert_eq!(g.decode(&s).unwrap(), board);
        assert!(g.decode("01").is_err());
        assert!(g.decode(&"2".repeat(37)).is_err());
    }
}
