//! Brainball positions: the physical ring, its canonical u64 form and the 13 twists.
//!
//! Physical frame: ring positions 0..12 clockwise as the viewer sees them. The twisting mechanism is fixed in
//! space: a twist reverses the tiles at positions {12, 0, 1} and, separately, at {5, 6, 7, 8}, and turns those
//! seven tiles over. A move `+k/` turns the ring k places clockwise (the tile at position i goes to i + k), then
//! twists.
//!
//! Canonical form: read the ring clockwise from tile 13; if 13 shows the other colour, turn the ball over first
//! (read counter-clockwise and swap every colour), so 13 is always white and never stored. The 12 tiles after it
//! take 5 bits each (`(number - 1) << 1 | turned`), the first tile after 13 in the most significant slot, so the
//! 60-bit value sorts like the original program's list of tiles.
//!
//! Because the mechanism is symmetric under the reflection that fixes position 0, turning the ball over commutes
//! with the move set, and each of the 13 moves from the canonical frame is one fixed signed permutation of the 12
//! slots. The twists below are those 13 maps, numbered as the original program numbers them.

use std::fmt;

use sweep_space::SpaceError;

/// Number of tiles on the ring.
pub const TILES: usize = 13;
/// Tiles stored in the canonical form (13 is implied).
pub const SLOTS: usize = 12;
/// Number of twists (moves) from any position.
pub const N_TWISTS: usize = 13;
/// The 60 bits the canonical form uses.
pub const POS_MASK: u64 = (1 << 60) - 1;

/// A signed tile: `1..=13` shows the first colour (written positive), `-13..=-1` the other.
pub type Tile = i8;

/// The physical ring as seen by the viewer: `ring[i]` is the signed tile at position i (clockwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ring(pub [Tile; TILES]);

/// A canonical position: 12 tiles x 5 bits in the low 60 bits of a u64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ball(pub u64);

const fn slot_shift(slot: usize) -> u32 {
    (5 * (SLOTS - 1 - slot)) as u32
}

impl Ball {
    /// 1..12 in order after 13, all the colour of 13.
    pub const SOLVED: Ball = {
        let mut v = 0u64;
        let mut i = 0;
        while i < SLOTS {
            v |= ((i as u64) << 1) << slot_shift(i);
            i += 1;
        }
        Ball(v)
    };

    /// The signed tile in `slot` (0 = the first tile clockwise after 13).
    pub fn tile(self, slot: usize) -> Tile {
        let v = (self.0 >> slot_shift(slot)) & 31;
        let n = (v >> 1) as Tile + 1;
        if v & 1 == 1 {
            -n
        } else {
            n
        }
    }

    /// The 12 signed tiles after 13, clockwise.
    pub fn tiles(self) -> [Tile; SLOTS] {
        std::array::from_fn(|s| self.tile(s))
    }

    /// Is this a well-formed canonical value (a signed permutation of 1..12 in the low 60 bits)?
    pub fn is_valid(self) -> bool {
        if self.0 & !POS_MASK != 0 {
            return false;
        }
        let mut seen = 0u16;
        for s in 0..SLOTS {
            let n = ((self.0 >> slot_shift(s)) & 31) >> 1;
            if n >= SLOTS as u64 || seen & (1 << n) != 0 {
                return false;
            }
            seen |= 1 << n;
        }
        true
    }

    /// Applies canonical twist `t` (0..13, the original program's numbering).
    #[inline]
    pub fn twist(self, t: usize) -> Ball {
        let tw = &TWISTS[t];
        let mut out = 0u64;
        for (dst, &src) in tw.src.iter().enumerate() {
            out |= ((self.0 >> slot_shift(src as usize)) & 31) << slot_shift(dst);
        }
        Ball(out ^ tw.flip)
    }

    /// The physical ring with 13 (white) at position 12, i.e. the canonical tiles followed by 13.
    pub fn ring(self) -> Ring {
        let mut r = [13; TILES];
        r[..SLOTS].copy_from_slice(&self.tiles());
        Ring(r)
    }

    /// Parses the original program's notation: 13 signed integers clockwise from anywhere, separated by whitespace
    /// or commas.
    pub fn parse(text: &str) -> Result<Ball, SpaceError> {
        Ring::parse(text).map(Ring::canonical)
    }
}

impl fmt::Display for Ball {
    /// As the original program draws its ball: `13 | ` and the 12 tiles after it, the other colour negative.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("13 |")?;
        for t in self.tiles() {
            write!(f, " {t}")?;
        }
        Ok(())
    }
}

impl Ring {
    /// Parses 13 signed integers (whitespace and commas separate them) that must be a signed permutation of
    /// 1..13; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Ring, SpaceError> {
        let bad = |reason: String| {
            SpaceError::invalid_param("position", format!("`{}`: {reason}", text.trim()))
        };
        let mut tiles = Vec::with_capacity(TILES);
        for word in text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
        {
            let v: i64 = word.parse().map_err(|_| {
                bad(format!(
                    "`{word}` is not a signed tile number (1..13, negative for the other colour)"
                ))
            })?;
            if v == 0 || v.unsigned_abs() > TILES as u64 {
                return Err(bad(format!(
                    "tile {v} does not exist: tiles are 1..13 (negative for the other colour)"
                )));
            }
            tiles.push(v as Tile);
        }
        let mut seen = [false; TILES + 1];
        for &t in &tiles {
            let n = t.unsigned_abs() as usize;
            if seen[n] {
                return Err(bad(format!("tile {n} appears more than once")));
            }
            seen[n] = true;
        }
        let missing: Vec<String> = (1..=TILES)
            .filter(|&n| !seen[n])
            .map(|n| n.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(bad(format!(
                "{} tiles given, tile{} {} missing",
                tiles.len(),
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            )));
        }
        let mut ring = [0; TILES];
        ring.copy_from_slice(&tiles);
        Ok(Ring(ring))
    }

    /// Turns the ring `k` places clockwise (free, not a move).
    pub fn turn(self, k: usize) -> Ring {
        let mut out = [0; TILES];
        for (i, &t) in self.0.iter().enumerate() {
            out[(i + k) % TILES] = t;
        }
        Ring(out)
    }

    /// The mechanism's twist at the fixed positions {12, 0, 1} and {5, 6, 7, 8}.
    pub fn twist(self) -> Ring {
        let mut r = self.0;
        for (a, b) in [(12, 1), (0, 0), (5, 8), (6, 7)] {
            let (ta, tb) = (self.0[a], self.0[b]);
            r[a] = -tb;
            r[b] = -ta;
        }
        Ring(r)
    }

    /// Jaap's move `+k/`: turn k places clockwise, then twist.
    pub fn apply_move(self, k: usize) -> Ring {
        self.turn(k).twist()
    }

    /// The same physical state read from the other side of the ball: order reversed, every colour swapped.
    pub fn turned_over(self) -> Ring {
        let mut out = [0; TILES];
        for (i, &t) in self.0.iter().enumerate() {
            out[(TILES - i) % TILES] = -t;
        }
        Ring(out)
    }

    /// The position of tile 13.
    fn pos13(&self) -> usize {
        self.0
            .iter()
            .position(|t| t.unsigned_abs() as usize == TILES)
            .unwrap_or(0)
    }

    /// The canonical form: clockwise from 13, with the ball turned over first if 13 shows the other colour.
    pub fn canonical(self) -> Ball {
        let p = self.pos13();
        let flipped = self.0[p] < 0;
        let mut v = 0u64;
        for s in 0..SLOTS {
            let t = if flipped {
                -self.0[(p + TILES - 1 - s) % TILES]
            } else {
                self.0[(p + 1 + s) % TILES]
            };
            let code = ((t.unsigned_abs() as u64 - 1) << 1) | u64::from(t < 0);
            v |= code << slot_shift(s);
        }
        Ball(v)
    }
}

impl fmt::Display for Ring {
    /// The original program's input form: 13 signed integers clockwise from position 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

/// One canonical twist as a signed slot permutation: slot `dst` of the result is slot `src[dst]` of the input,
/// then the colour bits in `flip` are toggled.
#[derive(Clone, Copy, Debug)]
pub struct TwistMap {
    pub src: [u8; SLOTS],
    pub flip: u64,
    /// The ring turn k of the physical move `+k/` this twist is, from the frame with 13 at position 12.
    pub turn: u8,
}

/// For twist `t` in the original program's numbering, the ring turn that realises it from the frame with 13 at
/// position 12. Derived once from that program's table (a unit test checks all 13 rows).
pub const ORIGINAL_TURNS: [u8; N_TWISTS] = [5, 4, 3, 12, 11, 10, 2, 1, 0, 9, 8, 7, 6];

/// The 13 twists in the original program's numbering.
pub static TWISTS: std::sync::LazyLock<[TwistMap; N_TWISTS]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|t| twist_map(ORIGINAL_TURNS[t] as usize)));

/// Derives the canonical map of the physical move `+k/` by tracing tagged tiles through it.
pub fn twist_map(k: usize) -> TwistMap {
    // Tag slot s by tile s + 1 (white); the canonical result tells where each tag went and whether it turned.
    let start = Ball::SOLVED.ring();
    let after = start.apply_move(k).canonical();
    let mut src = [0u8; SLOTS];
    let mut flip = 0u64;
    for (dst, t) in after.tiles().iter().enumerate() {
        src[dst] = t.unsigned_abs() - 1;
        if *t < 0 {
            flip |= 1 << slot_shift(dst);
        }
    }
    TwistMap {
        src,
        flip,
        turn: k as u8,
    }
}
