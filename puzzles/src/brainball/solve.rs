//! Meet-in-the-middle solving against a distance table, and the translation into Jaap's moves.
//!
//! With a table complete to depth d, a position at distance L <= d is in the table. For L > d, walking every
//! twist sequence of exactly f = L - d twists from the position meets the table (the f-th position on a shortest
//! solution is at distance d), while no sequence of fewer twists can (its end would be farther than d). So scanning
//! f = 1, 2, ... and stopping at the first level with any table hit, keeping the hit with the smallest f + distance,
//! gives a proven shortest solution, for every L <= f_max + d.
//!
//! The scan is a proof at every level, so when nothing is met within `forward` levels it goes on deeper while a
//! level costs at most [`EXTRA_SCAN_PROBES`] probes (the answer is then still proven shortest). Past that, a greedy
//! fallback takes over: it applies, round by round, the word (from a fixed set of short words and conjugated
//! small-support words) that leaves the most tiles in place, probing the table every round. Its solutions are
//! correct (they are replayed by the verifier) but not proven optimal, and are labelled so.

use std::collections::HashSet;
use std::fmt;

use crate::brainball::ball::{Ball, Ring, N_TWISTS, SLOTS, TILES};
use crate::brainball::table::Table;
use crate::space::{Control, SpaceError};

/// One step of a physical solution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// `+k/`: turn the ring k places clockwise (negative: counter-clockwise), then twist.
    Twist(i8),
    /// A final plain turn, no twist.
    Turn(i8),
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Move::Twist(k) => write!(f, "{k:+}/"),
            Move::Turn(k) => write!(f, "{k:+}"),
        }
    }
}

impl Move {
    /// The ring turn as a signed amount in -6..=6 (the shorter way round).
    fn signed(k: usize) -> i8 {
        let k = (k % TILES) as i8;
        if k > 6 {
            k - TILES as i8
        } else {
            k
        }
    }

    fn turn_amount(self) -> usize {
        let k = match self {
            Move::Twist(k) | Move::Turn(k) => k,
        };
        (k as isize).rem_euclid(TILES as isize) as usize
    }

    /// Applies the move to a physical ring.
    pub fn apply(self, ring: Ring) -> Ring {
        match self {
            Move::Twist(_) => ring.apply_move(self.turn_amount()),
            Move::Turn(_) => ring.turn(self.turn_amount()),
        }
    }

    /// Parses `+3/`, `-2/`, `+0/` or a plain turn `+5`.
    pub fn parse(text: &str) -> Option<Move> {
        let (body, twist) = match text.strip_suffix('/') {
            Some(b) => (b, true),
            None => (text, false),
        };
        let k: i8 = body.parse().ok()?;
        if k.unsigned_abs() as usize >= TILES {
            return None;
        }
        Some(if twist { Move::Twist(k) } else { Move::Turn(k) })
    }
}

/// A solution as printed: the physical moves from the position as given, and the ball after each move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    pub start: Ring,
    pub moves: Vec<Move>,
    /// Number of twists (plain turns are free).
    pub twists: usize,
    /// Proven shortest (found within forward depth + table depth).
    pub optimal: bool,
    /// The canonical ball after each move.
    pub balls: Vec<Ball>,
    /// Positions probed in the table while searching.
    pub probes: u64,
}

/// The largest extra level the scan walks past `forward` before and the greedy fallback takes over.
const EXTRA_SCAN_PROBES: u64 = 20_000_000;
/// Deepest level scan: the solution length fits the 4-bit distances either way.
const MAX_SCAN: u8 = 12;

/// Twist sequences of exactly `f` twists without immediate repeats: what one scan level probes.
fn level_size(f: u8) -> u64 {
    if f == 0 {
        1
    } else {
        13 * 12u64.pow(u32::from(f) - 1)
    }
}

/// Solves `start` with `table`, searching at most `forward` twists ahead before falling back to greedy descent.
pub fn solve(
    table: &Table,
    forward: u8,
    start: Ring,
    ctl: &Control,
) -> Result<Solution, SpaceError> {
    let ball = start.canonical();
    let mut probes = 0;
    // The level scan stays a proof of optimality past `forward` levels; only its cost grows (12x a level).
    let mut reach = forward;
    let mut found = shortest(table, reach, ball, ctl, &mut probes)?;
    while found.is_none() && reach < MAX_SCAN && level_size(reach + 1) <= EXTRA_SCAN_PROBES {
        reach += 1;
        found = shortest(table, reach, ball, ctl, &mut probes)?;
    }
    let (path, optimal) = match found {
        Some(path) => (path, true),
        None => (greedy(table, forward, ball, ctl, &mut probes)?, false),
    };
    let mut sol = to_moves(start, &path, optimal);
    sol.probes = probes;
    Ok(sol)
}

/// Canonical twists from `ball` down to solved, if the table holds `ball`.
fn descend(table: &Table, mut ball: Ball) -> Option<Vec<u8>> {
    let mut d = table.distance(ball)?;
    let mut path = Vec::with_capacity(d as usize);
    while d > 0 {
        let t = (0..N_TWISTS).find(|&t| table.distance(ball.twist(t)) == Some(d - 1))?;
        path.push(t as u8);
        ball = ball.twist(t);
        d -= 1;
    }
    Some(path)
}

/// The best hit found so far at one forward level: forward twists, then the table's distance.
struct Scan<'a> {
    table: &'a Table,
    ctl: &'a Control,
    path: Vec<u8>,
    best: Option<(u8, Vec<u8>, Ball)>,
    unreported: u64,
    probes: u64,
}

impl Scan<'_> {
    fn level(&mut self, ball: Ball, left: u8, last: Option<usize>) -> Result<(), SpaceError> {
        if left == 1 {
            return self.last_level(ball, last);
        }
        if left == 0 {
            self.unreported += 1;
            self.probes += 1;
            if self.unreported >= 1 << 14 {
                self.ctl.checkpoint(self.unreported)?;
                self.unreported = 0;
            }
            if let Some(d) = self.table.distance(ball) {
                let total = self.path.len() as u8 + d;
                if self.best.as_ref().is_none_or(|(b, _, _)| total < *b) {
                    self.best = Some((total, self.path.clone(), ball));
                }
            }
            return Ok(());
        }
        for t in 0..N_TWISTS {
            if Some(t) == last {
                continue;
            }
            self.path.push(t as u8);
            self.level(ball.twist(t), left - 1, Some(t))?;
            self.path.pop();
        }
        Ok(())
    }
}

impl Scan<'_> {
    /// The children of `ball` are the leaves: probe them together (see [`Table::distance_batch`]).
    fn last_level(&mut self, ball: Ball, last: Option<usize>) -> Result<(), SpaceError> {
        let mut children = [Ball::SOLVED; N_TWISTS];
        let mut twists = [0u8; N_TWISTS];
        let mut n = 0;
        for t in 0..N_TWISTS {
            if Some(t) != last {
                children[n] = ball.twist(t);
                twists[n] = t as u8;
                n += 1;
            }
        }
        let mut dist = [None; N_TWISTS];
        self.table.distance_batch(&children[..n], &mut dist[..n]);
        self.unreported += n as u64;
        self.probes += n as u64;
        if self.unreported >= 1 << 14 {
            self.ctl.checkpoint(self.unreported)?;
            self.unreported = 0;
        }
        for i in 0..n {
            if let Some(d) = dist[i] {
                let total = self.path.len() as u8 + 1 + d;
                if self.best.as_ref().is_none_or(|(b, _, _)| total < *b) {
                    let mut path = self.path.clone();
                    path.push(twists[i]);
                    self.best = Some((total, path, children[i]));
                }
            }
        }
        Ok(())
    }
}

/// The proven shortest canonical twist sequence, if the position is within `forward + depth` twists.
fn shortest(
    table: &Table,
    forward: u8,
    ball: Ball,
    ctl: &Control,
    probes: &mut u64,
) -> Result<Option<Vec<u8>>, SpaceError> {
    *probes += 1;
    if let Some(path) = descend(table, ball) {
        return Ok(Some(path));
    }
    let mut scan = Scan {
        table,
        ctl,
        path: Vec::new(),
        best: None,
        unreported: 0,
        probes: 0,
    };
    for f in 1..=forward {
        scan.level(ball, f, None)?;
        if let Some((_, mut path, meet)) = scan.best.take() {
            ctl.add_nodes(scan.unreported);
            *probes += scan.probes;
            let rest = descend(table, meet).ok_or_else(|| {
                SpaceError::Verification("the table has a gap: it is not complete".into())
            })?;
            path.extend(rest);
            return Ok(Some(path));
        }
    }
    ctl.add_nodes(scan.unreported);
    *probes += scan.probes;
    Ok(None)
}

/// Slots that already hold their solved tile in its solved colour.
fn correct_slots(ball: Ball) -> u32 {
    let diff = ball.0 ^ Ball::SOLVED.0;
    (0..SLOTS).filter(|&s| (diff >> (5 * s)) & 31 == 0).count() as u32
}

/// Progress measure of the greedy fallback: two points for a tile in place in its colour, one for a tile in
/// place showing the other colour, and three for an even arrangement of the tiles.
///
/// The half points matter because fixing a pair often takes a word that turns tiles over plus single turns.
/// The parity bonus matters because short small-support words are flips and 3-cycles (even); a position left
/// with two tiles swapped is odd and needs a step that looks like a loss (an odd 4-cycle leaving a 3-cycle)
/// before a 3-cycle finishes it.
fn progress(ball: Ball) -> u32 {
    let diff = ball.0 ^ Ball::SOLVED.0;
    let placed: u32 = (0..SLOTS)
        .map(|s| match (diff >> (5 * s)) & 31 {
            0 => 2,
            1 => 1,
            _ => 0,
        })
        .sum();
    placed + if is_even(ball) { 3 } else { 0 }
}

/// Is the arrangement of the 12 tiles (colours aside) an even permutation?
fn is_even(ball: Ball) -> bool {
    let tiles = ball.tiles();
    let mut seen = [false; SLOTS];
    let mut transpositions = 0usize;
    for start in 0..SLOTS {
        let mut s = start;
        let mut len = 0usize;
        while !seen[s] {
            seen[s] = true;
            s = tiles[s].unsigned_abs() as usize - 1;
            len += 1;
        }
        transpositions += len.saturating_sub(1);
    }
    transpositions.is_multiple_of(2)
}

/// The effect of `effect` (a word's result on solved, read as a signed slot map) applied to `ball`.
#[inline]
fn compose(ball: Ball, effect: Ball) -> Ball {
    let mut out = 0u64;
    for dst in 0..SLOTS {
        let shift = 5 * (SLOTS - 1 - dst) as u32;
        let e = (effect.0 >> shift) & 31;
        let src_shift = 5 * (SLOTS - 1 - (e >> 1) as usize) as u32;
        out |= (((ball.0 >> src_shift) & 31) ^ (e & 1)) << shift;
    }
    Ball(out)
}

/// Words the greedy fallback chooses from, each with its effect: every word of up to [`PLAIN_WORDS`] twists, and
/// the conjugates `S M S` (twists are involutions, so S reversed undoes S) of the words of up to
/// [`SMALL_WORDS`] twists that move or turn at most [`SMALL_SUPPORT`] tiles, with setups S of up to
/// [`SETUP_WORDS`] twists. Small-support words are what lets the greedy fix the last few tiles without undoing
/// the others; they are found here, not written in, so they are right by construction.
struct Macros {
    list: Vec<(Ball, Vec<u8>)>,
}

const PLAIN_WORDS: usize = 3;
const SMALL_WORDS: usize = 6;
const SMALL_SUPPORT: u32 = 4;
const SETUP_WORDS: usize = 2;

fn words(max_len: usize, mut f: impl FnMut(Ball, &[u8])) {
    fn rec(ball: Ball, word: &mut Vec<u8>, max_len: usize, f: &mut impl FnMut(Ball, &[u8])) {
        if !word.is_empty() {
            f(ball, word);
        }
        if word.len() == max_len {
            return;
        }
        for t in 0..N_TWISTS as u8 {
            if word.last() != Some(&t) {
                word.push(t);
                rec(ball.twist(t as usize), word, max_len, f);
                word.pop();
            }
        }
    }
    rec(Ball::SOLVED, &mut Vec::new(), max_len, &mut f);
}

impl Macros {
    fn get() -> &'static Macros {
        static MACROS: std::sync::OnceLock<Macros> = std::sync::OnceLock::new();
        MACROS.get_or_init(Macros::build)
    }

    fn build() -> Macros {
        let mut best: std::collections::HashMap<Ball, Vec<u8>> = std::collections::HashMap::new();
        let mut keep = |effect: Ball, word: &[u8]| {
            if effect != Ball::SOLVED && best.get(&effect).is_none_or(|w| w.len() > word.len()) {
                best.insert(effect, word.to_vec());
            }
        };
        words(PLAIN_WORDS, &mut keep);
        let mut small = Vec::new();
        words(SMALL_WORDS, |effect, word| {
            if effect != Ball::SOLVED && SLOTS as u32 - correct_slots(effect) <= SMALL_SUPPORT {
                small.push(word.to_vec());
            }
        });
        let mut setups = vec![Vec::new()];
        words(SETUP_WORDS, |_, w| setups.push(w.to_vec()));
        for m in &small {
            for s in &setups {
                let word: Vec<u8> = s.iter().chain(m).chain(s.iter().rev()).copied().collect();
                let effect = word.iter().fold(Ball::SOLVED, |b, &t| b.twist(t as usize));
                keep(effect, &word);
            }
        }
        let mut list: Vec<(Ball, Vec<u8>)> = best.into_iter().collect();
        // A fixed order keeps the fallback deterministic (the map's order is not).
        list.sort_unstable_by(|a, b| a.1.len().cmp(&b.1.len()).then(a.0.cmp(&b.0)));
        Macros { list }
    }
}

/// Rounds before the fallback gives up; each round fixes at least one tile in all cases seen in testing.
const GREEDY_ROUNDS: usize = 200;

/// A correct but not necessarily shortest sequence for positions beyond the table's reach: repeatedly apply the
/// macro that leaves the most tiles in place (never revisiting a position), until the table is within reach.
fn greedy(
    table: &Table,
    forward: u8,
    ball: Ball,
    ctl: &Control,
    probes: &mut u64,
) -> Result<Vec<u8>, SpaceError> {
    let macros = Macros::get();
    let look = forward.min(2);
    let mut seen = HashSet::new();
    let mut path = Vec::new();
    let mut cur = ball;
    seen.insert(cur);
    for _ in 0..GREEDY_ROUNDS {
        if let Some(rest) = shortest(table, look, cur, ctl, probes)? {
            path.extend(rest);
            return Ok(path);
        }
        let mut best: Option<(u32, usize, Ball)> = None;
        for (i, (effect, word)) in macros.list.iter().enumerate() {
            let next = compose(cur, *effect);
            let c = progress(next);
            if best.is_none_or(|(bc, bi, _)| {
                c > bc || (c == bc && word.len() < macros.list[bi].1.len())
            }) && !seen.contains(&next)
            {
                best = Some((c, i, next));
            }
        }
        ctl.checkpoint(macros.list.len() as u64)?;
        *probes += macros.list.len() as u64;
        let Some((_, i, next)) = best else {
            break;
        };
        path.extend_from_slice(&macros.list[i].1);
        cur = next;
        seen.insert(cur);
    }
    Err(SpaceError::Verification(format!(
        "no solution found for {ball} within {GREEDY_ROUNDS} greedy rounds"
    )))
}

/// Turns canonical twists into physical moves from the ring as given, plus a final turn that brings tile 1 to
/// position 0.
fn to_moves(start: Ring, path: &[u8], optimal: bool) -> Solution {
    let mut ring = start;
    let mut moves = Vec::with_capacity(path.len() + 1);
    let mut balls = Vec::with_capacity(path.len() + 1);
    let mut ball = start.canonical();
    for &t in path {
        ball = ball.twist(t as usize);
        // Some turn realises each canonical twist; the first that does is taken.
        let k = (0..TILES)
            .find(|&k| ring.apply_move(k).canonical() == ball)
            .unwrap_or(0);
        ring = ring.apply_move(k);
        moves.push(Move::Twist(Move::signed(k)));
        balls.push(ball);
    }
    let p1 = ring
        .0
        .iter()
        .position(|t| t.unsigned_abs() == 1)
        .unwrap_or(0);
    if p1 != 0 {
        moves.push(Move::Turn(Move::signed(TILES - p1)));
        balls.push(ball);
    }
    Solution {
        start,
        twists: path.len(),
        moves,
        optimal,
        balls,
        probes: 0,
    }
}

/// Replays `moves` from `start`: the final position, and the number of twists, or the first unreadable move.
pub fn replay(start: Ring, moves: &[Move]) -> (Ring, usize) {
    let mut ring = start;
    let mut twists = 0;
    for m in moves {
        ring = m.apply(ring);
        twists += usize::from(matches!(m, Move::Twist(_)));
    }
    (ring, twists)
}
