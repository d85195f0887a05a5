//! Meet-in-the-middle solving against a distance table, and the translation into Jaap's moves.
//!
//! With a table complete to depth d, a position at distance L <= d is in the table. For L > d, the walk of the twist
//! sequences of exactly f = L - d twists from the position meets the table (the f-th position on a shortest
//! solution is at distance d), while no shorter walk can. This is IDA* with the table as its bound (exact inside,
//! d + 1 outside, see [`lower_bound`]): for a budget of f + d twists only the nodes at exactly f twists need a
//! probe. Five things make it fast (measured in `benches/brainball.rs`):
//! - Parity: every twist changes the parity of the arrangement, so the distance has the arrangement's parity
//!   ([`distance_parity`]) and only every other level can meet the table. A 14-twist position is proven beyond 12
//!   by the 5-twist level (about 0.18 M probes) instead of the 6-twist one (3.2 M).
//! - First hit: at the first level that meets the table any meet is optimal, so the walk stops there. The full
//!   level is only walked to prove there is none (in a 14-twist position about 1 leaf in 10^5 of the last level
//!   meets the table).
//! - Pruning: the walk skips sequences that a short relation makes redundant ([`crate::prune`]): 20.7 M
//!   instead of 38.8 M sequences of 7 twists.
//! - Probes: leaves are probed in batches whose cache misses overlap ([`Table::distance_many`]).
//! - Beyond twice the depth: a pattern database ([`crate::pdb`]) bounds every position by where six
//!   tiles are, read through 26 symmetric views. It skips the levels below its bound at the start, and inside a
//!   level cuts the nodes whose remaining budget (`f - g + depth`) it exceeds, so the last levels before the
//!   leaves (where almost all the work is) shrink. Every answer is therefore optimal, with a [`Proof`] saying why;
//!   there is no unproven fallback.

use std::fmt;

use crate::ball::{Ball, Ring, N_TWISTS, SLOTS, TILES};
use crate::pdb::{Pdb, SOLVER_TILES};
use crate::prune::{Pruner, DEAD};
use crate::table::Table;
use sweep_space::{Control, Meter, SpaceError};

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
    /// Why no shorter solution exists.
    pub proof: Proof,
    /// The canonical ball after each move.
    pub balls: Vec<Ball>,
    /// Positions probed in the table or bounded by the pattern database while searching.
    pub probes: u64,
}

/// Why a solution is shortest. Every solution this module returns carries one: there is no unproven answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proof {
    /// The position is in the table, which holds every position within its depth at its exact distance.
    InTable { depth: u8 },
    /// The forward levels `walked` (each f: every sequence of f twists, less those the pattern bound or the
    /// relation automaton rules out) met no table position; levels of the other parity cannot meet it at
    /// distance `depth`, and levels below the pattern bound cannot either. The last walked level met it.
    Levels {
        depth: u8,
        /// The pattern database's bound on the start, rounded up to the start's parity, when it was consulted.
        pattern_bound: Option<u8>,
        walked: Vec<u8>,
    },
}

impl fmt::Display for Proof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Proof::InTable { depth } => write!(f, "exact distance from the depth-{depth} table"),
            Proof::Levels {
                depth,
                pattern_bound,
                walked,
            } => {
                let last = walked.last().copied().unwrap_or(0);
                let below: Vec<String> = walked[..walked.len().saturating_sub(1)]
                    .iter()
                    .map(|l| (l + depth).to_string())
                    .collect();
                write!(f, "distance parity")?;
                if let Some(b) = pattern_bound {
                    write!(f, ", pattern bound {b}")?;
                }
                if !below.is_empty() {
                    write!(f, ", no solution of {} twists", below.join("/"))?;
                }
                write!(
                    f,
                    " (forward levels walked against the depth-{depth} table; level {last} met it)"
                )
            }
        }
    }
}

/// Leaves gathered before they are probed together (see [`Table::distance_many`]).
const BATCH: usize = 256;
/// Deepest forward level: the walk packs 4 bits a twist into a u128. No position needs more than a handful of
/// levels past the table; the limit only turns a bug into an error instead of a silent overflow.
pub const MAX_LEVEL: u8 = 30;

/// Solves `start` optimally with `table`, and the 6-tile pattern database ([`Pdb::for_tiles`]) once the walk goes past
/// `forward` levels (built on first use, so positions within `forward + depth` twists never wait for it).
pub fn solve(
    table: &Table,
    forward: u8,
    start: Ring,
    ctl: &Control,
) -> Result<Solution, SpaceError> {
    solve_with(table, SOLVER_TILES, forward, start, ctl)
}

/// [`solve`] with the pattern database of tiles 1..`pattern_tiles` (smaller ones build faster, bound less).
pub fn solve_with(
    table: &Table,
    pattern_tiles: usize,
    forward: u8,
    start: Ring,
    ctl: &Control,
) -> Result<Solution, SpaceError> {
    solve_against(table, Patterns::Tiles(pattern_tiles), forward, start, ctl)
}

/// Where a search gets its pattern database once it goes past `forward` levels.
#[derive(Clone, Copy, Debug)]
pub enum Patterns<'a> {
    /// Built in this process on first use ([`Pdb::for_tiles`]): the library's and the `solve` mode's way.
    Tiles(usize),
    /// Already loaded: the stored database a census or deep job is bound to.
    Bound(&'a Pdb),
}

impl<'a> Patterns<'a> {
    fn get(self) -> Result<&'a Pdb, SpaceError> {
        match self {
            Patterns::Tiles(k) => Pdb::for_tiles(k),
            Patterns::Bound(p) => Ok(p),
        }
    }
}

/// [`solve`] with the pattern database `patterns`.
pub fn solve_against(
    table: &Table,
    patterns: Patterns<'_>,
    forward: u8,
    start: Ring,
    ctl: &Control,
) -> Result<Solution, SpaceError> {
    let ball = start.canonical();
    let mut probes = 0;
    let (path, proof) = shortest(table, patterns, forward, ball, ctl, &mut probes)?;
    let mut sol = to_moves(start, &path, proof);
    sol.probes = probes;
    Ok(sol)
}

/// Canonical twists from `ball` down to solved, if the table holds `ball`.
pub fn descend(table: &Table, mut ball: Ball) -> Option<Vec<u8>> {
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
/// bound and the pattern database's: with a budget of `f + depth` twists, a node at `g < f` twists from the start
/// passes on the table's bound alone (`g + depth + 1 <= f + depth`), so only the nodes at exactly `f` twists need
/// a probe, and the pattern bound cuts the nodes whose budget `f - g + depth` it exceeds.
pub fn lower_bound(table: &Table, ball: Ball) -> u8 {
    table.distance(ball).unwrap_or(table.depth() + 1)
}

/// What walking one level below some prefixes found.
#[derive(Debug, Default)]
pub struct Level {
    /// The first solution met in walk order (the forward twists then the table's descent): one of exactly
    /// `f + depth` twists.
    pub hit: Option<Vec<u8>>,
    /// Table probes.
    pub probes: u64,
    /// Nodes the pattern database was asked about, and those it cut.
    pub bounded: u64,
    pub pruned: u64,
}

/// One level of the forward scan: walks the pruned twist sequences of exactly `f` twists from the start and
/// probes their ends in batches, stopping at the first end the table holds.
struct Scan<'a> {
    table: &'a Table,
    pdb: Option<&'a Pdb>,
    pruner: &'a Pruner,
    /// The twists walked so far, 4 bits each, the first in the lowest bits.
    path: u128,
    leaves: Vec<Ball>,
    paths: Vec<u128>,
    dist: Vec<Option<u8>>,
    /// The first end met (its packed path and position), in walk order.
    hit: Option<(u128, Ball)>,
    /// Counts the bounds computed and the leaves probed; one step per node walked.
    meter: Meter<'a>,
    probes: u64,
    bounded: u64,
    pruned: u64,
}

impl<'a> Scan<'a> {
    fn new(table: &'a Table, pdb: Option<&'a Pdb>, ctl: &'a Control) -> Scan<'a> {
        Scan {
            table,
            pdb,
            pruner: Pruner::get(),
            path: 0,
            leaves: Vec::with_capacity(BATCH),
            paths: Vec::with_capacity(BATCH),
            dist: Vec::with_capacity(BATCH),
            hit: None,
            meter: Meter::new(ctl),
            probes: 0,
            bounded: 0,
            pruned: 0,
        }
    }

    /// Can the pattern bound prove that `ball` needs more than `left + depth` twists?
    #[inline]
    fn cut(&mut self, ball: Ball, left: u8) -> bool {
        let Some(pdb) = self.pdb else {
            return false;
        };
        let budget = left + self.table.depth();
        if budget >= pdb.max() {
            return false;
        }
        self.bounded += 1;
        self.meter.count(1);
        let cut = pdb.exceeds(ball, budget);
        self.pruned += u64::from(cut);
        cut
    }

    /// Walks below `ball` (reached by `g` twists, automaton state `state`) to `left` more twists. Returns true once
    /// a hit is found, to unwind.
    fn walk(&mut self, ball: Ball, state: u32, g: u32, left: u8) -> Result<bool, SpaceError> {
        self.meter.step()?;
        if self.cut(ball, left) {
            return Ok(false);
        }
        if left == 1 {
            for t in 0..N_TWISTS {
                if self.pruner.step(state, t) != DEAD {
                    self.leaves.push(ball.twist(t));
                    self.paths.push(self.path | (t as u128) << (4 * g));
                }
            }
            if self.leaves.len() + N_TWISTS > BATCH {
                return Ok(self.flush());
            }
            return Ok(false);
        }
        for t in 0..N_TWISTS {
            let next = self.pruner.step(state, t);
            if next == DEAD {
                continue;
            }
            self.path |= (t as u128) << (4 * g);
            let stop = self.walk(ball.twist(t), next, g + 1, left - 1)?;
            self.path &= !(15 << (4 * g));
            if stop {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Probes the gathered leaves; keeps the first hit in walk order, so the answer does not depend on batching.
    fn flush(&mut self) -> bool {
        let n = self.leaves.len();
        self.dist.resize(n, None);
        self.table.distance_many(&self.leaves, &mut self.dist[..n]);
        self.probes += n as u64;
        self.meter.count(n as u64);
        if let Some(i) = self.dist[..n].iter().position(Option::is_some) {
            self.hit = Some((self.paths[i], self.leaves[i]));
        }
        self.leaves.clear();
        self.paths.clear();
        self.hit.is_some()
    }
}

/// Walks forward level `f` from `ball` below each of `prefixes` in turn (sequences of at most `f` twists; the
/// empty prefix is the whole level), stopping at the first sequence whose end the table holds. Prefixes that
/// the relation automaton rules out are skipped: their positions are reached by the sequences it keeps, under
/// some other prefix of the same length.
///
/// Without a hit, no solution of `f + depth` twists starts with any of the prefixes (the automaton keeps the
/// shortlex-least word of every position, see [`crate::prune`], and the pattern bound is admissible).
pub fn walk_level(
    table: &Table,
    pdb: Option<&Pdb>,
    ball: Ball,
    prefixes: &[Vec<u8>],
    f: u8,
    ctl: &Control,
) -> Result<Level, SpaceError> {
    if f == 0 || f > MAX_LEVEL {
        return Err(SpaceError::invalid_param(
            "level",
            format!("forward level {f} is outside 1..={MAX_LEVEL}"),
        ));
    }
    let mut scan = Scan::new(table, pdb, ctl);
    'prefixes: for prefix in prefixes {
        if prefix.len() > f as usize {
            return Err(SpaceError::invalid_param(
                "level",
                format!(
                    "a prefix of {} twists is longer than level {f}",
                    prefix.len()
                ),
            ));
        }
        let (mut b, mut state) = (ball, Pruner::START);
        scan.path = 0;
        for (g, &t) in prefix.iter().enumerate() {
            if t as usize >= N_TWISTS || scan.cut(b, f - g as u8) {
                continue 'prefixes;
            }
            state = scan.pruner.step(state, t as usize);
            if state == DEAD {
                continue 'prefixes;
            }
            b = b.twist(t as usize);
            scan.path |= u128::from(t) << (4 * g);
        }
        let left = f - prefix.len() as u8;
        let stop = if left == 0 {
            scan.leaves.push(b);
            scan.paths.push(scan.path);
            scan.flush()
        } else {
            scan.walk(b, state, prefix.len() as u32, left)?
        };
        if stop {
            break;
        }
    }
    if scan.hit.is_none() {
        scan.flush();
    }
    scan.meter.finish();
    let hit = match scan.hit {
        Some((packed, meet)) => {
            let mut path: Vec<u8> = (0..f).map(|i| (packed >> (4 * i) & 15) as u8).collect();
            let rest = descend(table, meet).ok_or_else(|| {
                SpaceError::Verification("the table has a gap: it is not complete".into())
            })?;
            path.extend(rest);
            Some(path)
        }
        None => None,
    };
    Ok(Level {
        hit,
        probes: scan.probes,
        bounded: scan.bounded,
        pruned: scan.pruned,
    })
}

/// The first forward level worth walking for `ball`: the lowest f >= 1 with `f + depth` of the distance's parity
/// and, with a pattern database, `f + depth` at least its bound. Also the bound used, rounded up to the parity.
pub fn first_level(depth: u8, pdb: Option<&Pdb>, ball: Ball) -> (u8, Option<u8>) {
    let parity = distance_parity(ball);
    let mut f = if (1 + depth) % 2 == parity { 1 } else { 2 };
    let bound = pdb.map(|p| {
        let h = p.bound(ball);
        h + u8::from(h % 2 != parity)
    });
    if let Some(h) = bound {
        if h > f + depth {
            f = h - depth;
        }
    }
    (f, bound)
}

/// The proven shortest canonical twist sequence and its proof.
///
/// Level f walks the sequences of exactly f twists. If level f is the first with an end in the table, every end it
/// meets is at distance exactly `depth` and the shortest solution has `f + depth` twists: a shorter one would have
/// met the table at an earlier level (its position `L - depth` twists in is at distance `depth`), and any end met
/// gives a solution of at most `f + depth`. So the first end met is enough: the full level is only walked to prove
/// there is none. Distances have the arrangement's parity ([`distance_parity`]), so only every other level can
/// meet the table. Past `forward` levels, the pattern database skips the levels below its bound and cuts the
/// nodes whose remaining budget it exceeds (IDA* with the table as an exact bound at the leaves).
fn shortest(
    table: &Table,
    patterns: Patterns<'_>,
    forward: u8,
    ball: Ball,
    ctl: &Control,
    probes: &mut u64,
) -> Result<(Vec<u8>, Proof), SpaceError> {
    let depth = table.depth();
    *probes += 1;
    if let Some(path) = descend(table, ball) {
        return Ok((path, Proof::InTable { depth }));
    }
    let (mut f, _) = first_level(depth, None, ball);
    let mut walked = Vec::new();
    let mut pattern: Option<&Pdb> = None;
    let mut pattern_bound = None;
    loop {
        if f > forward && pattern.is_none() {
            let p = patterns.get()?;
            let (from, bound) = first_level(depth, Some(p), ball);
            f = f.max(from);
            pattern = Some(p);
            pattern_bound = bound;
        }
        let level = walk_level(table, pattern, ball, &[Vec::new()], f, ctl)?;
        *probes += level.probes + level.bounded;
        walked.push(f);
        if let Some(path) = level.hit {
            return Ok((
                path,
                Proof::Levels {
                    depth,
                    pattern_bound,
                    walked,
                },
            ));
        }
        f += 2;
    }
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

/// Turns canonical twists into physical moves from the ring as given, plus a final turn that brings tile 1 to
/// position 0.
pub(crate) fn to_moves(start: Ring, path: &[u8], proof: Proof) -> Solution {
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
        proof,
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
