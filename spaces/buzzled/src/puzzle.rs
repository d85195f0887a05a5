//! A puzzle (side + clues + optional name), its checks before any search, and the puzzle file format.
//!
//! # Puzzle file format
//!
//! Plain text, one `key: value` (or `key = value`) per line; `#` starts a comment that runs to the end of the line;
//! blank lines are ignored. Keys:
//! - `side` (required): the board's side, 2 or more.
//! - `clues` (required): the `3(2·side−1)` yellow counts in the original program's clockwise order (see [`super::geometry`]),
//!   separated by commas and/or spaces. The key may be repeated; the lists are joined in order, so a file can give
//!   one family of rows per line.
//! - `name` (optional): free text.
//!
//! ```text
//! # The original program's puzzle #52 (58 solutions)
//! name: Puzzle 52
//! side: 4
//! clues: 5,2,2,2, 2,3,1,6,4,2,2
//! clues: 2,2,4,3,3,3,3, 2,4,3
//! ```
//!
//! The file is read by the `sweep` CLI (`--puzzle FILE`); this module only turns its text into a [`Puzzle`], so a
//! job's stored parameters always carry the clues themselves, never a path.

use std::fmt::Write;

use super::geometry::{clues_for_side, Family, Geometry};
use sweep_space::SpaceError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Puzzle {
    pub side: usize,
    pub clues: Vec<u32>,
    pub name: Option<String>,
}

fn file_error(line: usize, reason: impl Into<String>) -> SpaceError {
    SpaceError::invalid_param("puzzle", format!("line {line}: {}", reason.into()))
}

/// Parses a comma- and/or space-separated list of clues.
pub fn parse_clue_list(text: &str) -> Result<Vec<u32>, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| format!("`{t}` is not a yellow count (a whole number >= 0)"))
        })
        .collect()
}

/// Parses the text of a puzzle file (format in the module docs). Checks the syntax and the number of clues; the
/// clues' consistency is checked by [`check_clues`] when the job is built.
pub fn parse_puzzle_file(text: &str) -> Result<Puzzle, SpaceError> {
    let mut side: Option<usize> = None;
    let mut clues: Option<Vec<u32>> = None;
    let mut name: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once([':', '=']) else {
            return Err(file_error(
                no,
                format!("`{line}` is not `key: value` (keys: side, clues, name)"),
            ));
        };
        let value = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "side" => {
                if side.is_some() {
                    return Err(file_error(no, "`side` is given twice"));
                }
                let s = value
                    .parse::<usize>()
                    .map_err(|_| file_error(no, format!("side `{value}` is not a whole number")))?;
                side = Some(s);
            }
            "clues" => {
                let list = parse_clue_list(value).map_err(|e| file_error(no, e))?;
                clues.get_or_insert_with(Vec::new).extend(list);
            }
            "name" => {
                if name.is_some() {
                    return Err(file_error(no, "`name` is given twice"));
                }
                name = Some(value.to_string());
            }
            other => {
                return Err(file_error(
                    no,
                    format!("unknown key `{other}` (keys: side, clues, name)"),
                ))
            }
        }
    }
    let side =
        side.ok_or_else(|| SpaceError::invalid_param("puzzle", "the file has no `side: N` line"))?;
    let clues = clues
        .ok_or_else(|| SpaceError::invalid_param("puzzle", "the file has no `clues:` line"))?;
    Ok(Puzzle { side, clues, name })
}

/// The puzzle in the file format, one family of rows per `clues` line.
pub fn format_puzzle_file(p: &Puzzle) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Buzzled puzzle: clues in clockwise order from the top (see `sweep solve buzzled --help`)"
    );
    if let Some(name) = &p.name {
        let _ = writeln!(out, "name: {}", name.replace(['\n', '#'], " "));
    }
    let _ = writeln!(out, "side: {}", p.side);
    let n = 2 * p.side - 1;
    // Clockwise groups: the top-right columns, the down-right rows, the up-right rows, the top-left columns.
    let groups = [
        0..p.side,
        p.side..p.side + n,
        p.side + n..p.side + 2 * n,
        p.side + 2 * n..3 * n,
    ];
    for g in groups {
        let part: Vec<String> = p
            .clues
            .get(g)
            .unwrap_or(&[])
            .iter()
            .map(|c| c.to_string())
            .collect();
        if !part.is_empty() {
            let _ = writeln!(out, "clues: {}", part.join(","));
        }
    }
    out
}

/// Checks clues against the board before any search: their number, each count against its row's length, and the
/// three families' totals (each family covers every tile once, so each must add up to the number of yellow tiles).
/// Returns that number.
pub fn check_clues(geo: &Geometry, clues: &[u32]) -> Result<u32, SpaceError> {
    let expected = clues_for_side(geo.side);
    if clues.len() != expected {
        return Err(SpaceError::invalid_param(
            "clues",
            format!(
                "a side-{} board has {expected} rows, so {expected} clues, but {} were given",
                geo.side,
                clues.len()
            ),
        ));
    }
    for (l, (&c, line)) in clues.iter().zip(&geo.lines).enumerate() {
        if c as usize > line.tiles.len() {
            return Err(SpaceError::invalid_param(
                "clues",
                format!(
                    "{} asks for {c} yellow tiles but the row has only {}",
                    geo.describe_line(l),
                    line.tiles.len()
                ),
            ));
        }
    }
    let total = |fam: Family| -> (u32, Vec<usize>) {
        let ls: Vec<usize> = (0..geo.n_lines())
            .filter(|&l| geo.lines[l].family == fam)
            .collect();
        (ls.iter().map(|&l| clues[l]).sum(), ls)
    };
    let (cols, col_ls) = total(Family::Column);
    for fam in [Family::DownRight, Family::UpRight] {
        let (t, ls) = total(fam);
        if t != cols {
            let span = |v: &[usize]| {
                v.iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            return Err(SpaceError::invalid_param(
                "clues",
                format!(
                    "the totals disagree: the columns (clues {}) add up to {cols} yellow tiles but the {}s \
                     (clues {}) add up to {t}",
                    span(&col_ls),
                    fam.describe(),
                    span(&ls)
                ),
            ));
        }
    }
    Ok(cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";

    #[test]
    fn a_file_with_comments_and_split_clues() {
        let text = "# puzzle 52\n\nname = Puzzle 52  # from the original program\nSide: 4\nclues: 5,2,2,2, 2,3,1,6,4,2,2\nclues: 2 2 4 3 3 3 3\nclues: 2,4,3\n";
        let p = parse_puzzle_file(text).unwrap();
        assert_eq!(p.side, 4);
        assert_eq!(p.name.as_deref(), Some("Puzzle 52"));
        assert_eq!(p.clues, parse_clue_list(P52).unwrap());
        // The formatter's output parses back to the same puzzle.
        assert_eq!(parse_puzzle_file(&format_puzzle_file(&p)).unwrap(), p);
    }

    #[test]
    fn bad_files_say_where() {
        for (text, needle) in [
            ("side: 4\nclues: 1,x\n", "line 2: `x`"),
            ("side 4\n", "line 1: `side 4` is not"),
            ("side: four\nclues: 1\n", "side `four`"),
            ("clues: 1,2\n", "no `side"),
            ("side: 4\n", "no `clues"),
            ("side: 4\nside: 5\nclues: 1\n", "twice"),
            ("side: 4\ncolour: red\n", "unknown key `colour`"),
        ] {
            let err = parse_puzzle_file(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn impossible_clues_are_named() {
        let g = Geometry::new(4).unwrap();
        let mut c = parse_clue_list(P52).unwrap();
        assert_eq!(check_clues(&g, &c), Ok(20));
        let err = check_clues(&g, &c[..20]).unwrap_err().to_string();
        assert!(err.contains("21 clues, but 20"), "{err}");
        c[3] = 5;
        let err = check_clues(&g, &c).unwrap_err().to_string();
        assert!(
            err.contains(
                "clue 3 (column, tiles 10,17,24,31) asks for 5 yellow tiles but the row has only 4"
            ),
            "{err}"
        );
        c[3] = 3;
        let err = check_clues(&g, &c).unwrap_err().to_string();
        assert!(
            err.contains("totals disagree") && err.contains("21"),
            "{err}"
        );
    }
}
