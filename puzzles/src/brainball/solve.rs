//! Meet-in-the-middle solving against a distance table, and the translation into Jaap's moves.
//!
//! With a table complete to depth d, a position at distance L <= d is in the table. For L > d, the walk of the twist
//! sequences of exactly f = L - d twists from the position meets the table (the f-th position on a shortest
//! solution is at distance d), while no shorter walk can. This is IDA* with the table as its bound (exact inside,
//! d + 1 outside, see [`lower_bound`]): for a budget of f + d twists only the nodes at exactly f twists need a
//! probe. Four things make it fast (measured in `benches/brainball.rs`):
//! - Parity: every twist changes the parity of the arrangement, so the distance has the arrangement's parity
//!   ([`distance_parity`]) and only every other level can meet the table. A 14-twist position is proven beyond 12
//!   by the 5-twist level (about 0.18 M probes) instead of the 6-twist one (3.2 M).
//! - First hit: at the first level that meets the table any meet is optimal, so the walk stops there. The full
//!   level is only walked to prove there is none (in a 14-twist position about 1 leaf in 10^5 of the last level
//!   meets the table).
//! - Pruning: the walk skips sequences that a short relation makes redundant ([`crate::brainball::prune`]): 20.7 M
//!   instead of 38.8 M sequences of 7 twists.
//! - Probes: leaves are probed in batches whose cache misses overlap ([`Table::distance_many`]).
//!
//! The scan is a proof at every level, so when nothing is met within `forward` levels it goes on deeper while a
//! level costs at most [`EXTRA_SCAN_PROBES`] probes (the answer is then still proven shortest). Past that, a greedy
//! fallback takes over: it applies, round by round, the word (from a fixed set of short words and conjugated
//! small-support words) that leaves the most tiles in place, probing the table every round. Its solutions are
//! correct (they are replayed by the verifier) but not proven optimal, and are labelled so.

use std::collections::HashSet;
use std::fmt;

use crate::brainball::ball::{Ball, Ring, N_TWISTS, SLOTS, TILES};
use crate::brainball::prune::{Pruner, DEAD};
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

/// The largest level the scan walks past `forward` before the greedy fallback takes over (in unpruned twist
/// sequences; a level costs fewer probes with pruning and usually stops early).
const EXTRA_SCAN_PROBES: u64 = 20_000_000;
/// Deepest level scan: the forward path is packed 4 bits a twist into a u64, and the solution length fits the
/// 4-bit distances either way.
const MAX_SCAN: u8 = 12;
/// Leaves gathered before they are probed together (see [`Table::distance_many`]).
const BATCH: usize = 256;

/// Twist sequences of exactly `f` twists without immediate repeats: an upper bound on what one level probes.
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
    // The level scan stays a proof of optimality past `forward` levels; only its cost grows (~11x a level).
    let mut reach = forward.min(MAX_SCAN);
    while reach < MAX_SCAN && level_size(reach + 1) <= EXTRA_SCAN_PROBES {
        reach += 1;
    }
    let found = shortest(table, reach, ball, ctl, &mut probes)?;
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

/// An admissible bound on the distance of `ball` from solved, from the table alone: exact inside it, and one more
/// than its depth outside (the table holds every position within its depth). The scan below is IDA* with this
/// bound: with a budget of `f + depth` twists, a node at `g < f` twists from the start passes on the bound
/// alone (`g + depth + 1 <= f + depth`), so only the nodes at exactly `f` twists need a probe.
pub fn lower_bound(table: &Table, ball: Ball) -> u8 {
    table.distance(ball).unwrap_or(table.depth() + 1)
}

/// One level of the forward scan: walks the pruned twist sequences of exactly `f` twists from the start and
/// probes their ends in batches, stopping at the first end the table holds.
struct Scan<'a> {
    table: &'a Table,
    pruner: &'a Pruner,
    ctl: &'a Control,
    /// The twists walked so far, 4 bits each, the first in the lowest bits.
    path: u64,
    leaves: Vec<Ball>,
    paths: Vec<u64>,
    dist: Vec<Option<u8>>,
    /// The first end met (its packed path and position), in walk order.
    hit: Option<(u64, Ball)>,
    unreported: u64,
    probes: u64,
}

impl Scan<'_> {
    /// Walks below `ball` (reached by `g` twists, automaton state `state`) to `left` more twists. Returns true once
    /// a hit is found, to unwind.
    fn walk(&mut self, ball: Ball, state: u32, g: u32, left: u8) -> Result<bool, SpaceError> {
        if left == 1 {
            for t in 0..N_TWISTS {
                if self.pruner.step(state, t) != DEAD {
                    self.leaves.push(ball.twist(t));
                    self.paths.push(self.path | (t as u64) << (4 * g));
                }
            }
            if self.leaves.len() + N_TWISTS > BATCH {
                return self.flush();
            }
            return Ok(false);
        }
        for t in 0..N_TWISTS {
            let next = self.pruner.step(state, t);
            if next == DEAD {
                continue;
            }
            self.path |= (t as u64) << (4 * g);
            let stop = self.walk(ball.twist(t), next, g + 1, left - 1)?;
            self.path &= !(15 << (4 * g));
            if stop {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Probes the gathered leaves; keeps the first hit in walk order, so the answer does not depend on batching.
    fn flush(&mut self) -> Result<bool, SpaceError> {
        let n = self.leaves.len();
        self.dist.resize(n, None);
        self.table.distance_many(&self.leaves, &mut self.dist[..n]);
        self.probes += n as u64;
        self.unreported += n as u64;
        if self.unreported >= 1 << 14 {
            self.ctl.checkpoint(self.unreported)?;
            self.unreported = 0;
        }
        if let Some(i) = self.dist[..n].iter().position(Option::is_some) {
            self.hit = Some((self.paths[i], self.leaves[i]));
        }
        self.leaves.clear();
        self.paths.clear();
        Ok(self.hit.is_some())
    }
}

/// The proven shortest canonical twist sequence, if the position is within `forward + depth` twists.
///
/// Level f (f = 1, 2, ...) walks the sequences of exactly f twists. If level f is the first with an end in the
/// table, every end it meets is at distance exactly `depth` and the shortest solution has `f + depth` twists:
/// a shorter one would have met the table at an earlier level (its position `L - depth` twists in is at distance
/// `depth`), and any end met gives a solution of at most `f + depth`. So the first end met is enough: the full
/// level is only walked to prove there is none.
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
        pruner: Pruner::get(),
        ctl,
        path: 0,
        leaves: Vec::with_capacity(BATCH),
        paths: Vec::with_capacity(BATCH),
        dist: Vec::with_capacity(BATCH),
        hit: None,
        unreported: 0,
        probes: 0,
    };
    // Distances have the parity of the arrangement (see [`distance_parity`]), so only the levels whose meets
    // have that parity can hit: the others would meet the table at distance `depth - 1` or less, which the level
    // before them already rules out.
    let parity = distance_parity(ball);
    let mut result = None;
    for f in (1..=forward.min(MAX_SCAN)).filter(|f| (f + table.depth()) % 2 == parity) {
        if !scan.walk(ball, Pruner::START, 0, f)? {
            scan.flush()?;
        }
        if let Some((packed, meet)) = scan.hit.take() {
            let mut path: Vec<u8> = (0..f).map(|i| (packed >> (4 * i) & 15) as u8).collect();
            let rest = descend(table, meet).ok_or_else(|| {
                SpaceError::Verification("the table has a gap: it is not complete".into())
            })?;
            path.extend(rest);
            result = Some(path);
            break;
        }
    }
    ctl.add_nodes(scan.unreported);
    *probes += scan.probes;
    Ok(result)
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

/// The parity of every twist sequence from `ball` to solved: 0 if even, 1 if odd.
///
/// A twist reverses three tiles (one transposition) and, separately, four (two), so it changes the parity of
/// the arrangement; turning the ring (a 13-cycle) and turning the ball over (six transpositions) do not. So the
/// parity of the arrangement read from 13 flips with every twist, solved is even, and the distance of a position
/// has the parity of its arrangement: the twist graph is bipartite.
pub fn distance_parity(ball: Ball) -> u8 {
    u8::from(!is_even(ball))
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
