//! The exact solver: line solving plus backtracking.
//!
//! Every row only says how many of its tiles are yellow, so a row is decided by two counts: yellow tiles so far and
//! unknown tiles. A row whose yellow count has reached its clue turns its unknown tiles black; a row whose yellow
//! and unknown tiles together just reach its clue turns them yellow; a row with too many yellow tiles, or too few
//! left to reach its clue, is a contradiction. That is the original program's "deterministic solver", run to a fixed point.
//! When it stalls, we branch on a tile of the tightest row (fewest ways to go either way), preferring the tile whose
//! other rows are tightest too, and try yellow then black. Every complete board found this way meets every clue,
//! and every board that meets the clues is found exactly once (the two branches split the boards by that tile).
//!
//! Chunks: the search tree's first [`PATH_BITS`] branchings give every node a range of path indices (a node with
//! range `[base, base + w)` gives its children the two halves). A chunk owns a range of path indices; it walks
//! only nodes whose ranges meet it, and counts a node (and reports its solution) only when the node's `base` lies in
//! its range. So every node and every solution belongs to exactly one chunk, whatever the number of chunks; the
//! shallow nodes are re-walked by several chunks, which costs little since they are few.
//!
//! Splits follow from the same rule: a part of a chunk is any range of its path indices, so a run asked to split
//! at a node of the first branchings (before its children) gives away the upper half of the indices above the
//! node's own: no node with such a base has been visited yet, and the run stops short of them.

use super::geometry::Geometry;
use sweep_space::{Control, Meter, SpaceError, Span};

/// Path indices: the first 10 branchings split the tree into at most 1024 pieces.
pub const PATH_BITS: u32 = 10;
pub const N_PATHS: u64 = 1 << PATH_BITS;

const BLACK: u8 = 0;
const YELLOW: u8 = 1;
const UNKNOWN: u8 = 2;

/// What to do with a found board (tile states, 1 = yellow): keep going or stop the search.
pub enum Flow {
    Continue,
    Stop,
}

pub struct Solver<'a> {
    geo: &'a Geometry,
    clues: &'a [u32],
    state: Vec<u8>,
    yellow: Vec<u32>,
    unknown: Vec<u32>,
    /// Assigned tiles in order, for undo.
    trail: Vec<u16>,
    /// Rows whose counts changed and may force tiles.
    queue: Vec<u16>,
    queued: Vec<bool>,
    /// The run's path-index range: the chunk's or a part of it, `hi` lowered when the run gives the rest away.
    lo: u64,
    hi: u64,
    /// The chunk's control, to answer split requests (`None` outside a chunk).
    ctl: Option<&'a Control>,
    /// Detached when the solver runs outside a chunk (puzzle generation).
    meter: Meter<'a>,
    stopped: bool,
    /// The search gives up after this many nodes (generation uses it to skip boards that are slow to decide).
    node_limit: u64,
}

impl<'a> Solver<'a> {
    /// A solver for the path-index range `[lo, hi)` (`0..N_PATHS` for the whole tree). `clues` must have passed
    /// [`super::puzzle::check_clues`].
    pub fn new(
        geo: &'a Geometry,
        clues: &'a [u32],
        lo: u64,
        hi: u64,
        ctl: Option<&'a Control>,
    ) -> Self {
        let n_lines = geo.n_lines();
        Solver {
            geo,
            clues,
            state: vec![UNKNOWN; geo.n_tiles()],
            yellow: vec![0; n_lines],
            unknown: geo.lines.iter().map(|l| l.tiles.len() as u32).collect(),
            trail: Vec::with_capacity(geo.n_tiles()),
            queue: (0..n_lines as u16).collect(),
            queued: vec![true; n_lines],
            lo,
            hi,
            ctl,
            meter: ctl.map_or_else(Meter::detached, Meter::new),
            stopped: false,
            node_limit: u64::MAX,
        }
    }

    /// Stops the search after `limit` nodes; [`Solver::gave_up`] then tells that the answer is incomplete.
    pub fn with_node_limit(mut self, limit: u64) -> Self {
        self.node_limit = limit;
        self
    }

    pub fn gave_up(&self) -> bool {
        self.meter.nodes() >= self.node_limit
    }

    /// The nodes searched so far: all of the chunk's once [`Solver::run`] has returned.
    pub fn nodes(&self) -> u64 {
        self.meter.nodes()
    }

    /// Searches the chunk, calling `found` with each board (true = yellow) it owns.
    pub fn run(&mut self, found: &mut dyn FnMut(&[bool]) -> Flow) -> Result<(), SpaceError> {
        let owned = self.lo == 0 && self.hi > 0;
        if owned {
            self.count_node()?;
        }
        if self.propagate() {
            self.dfs(0, N_PATHS, found)?;
        }
        self.meter.finish();
        Ok(())
    }

    fn count_node(&mut self) -> Result<(), SpaceError> {
        self.meter.tick()?;
        if self.meter.nodes() >= self.node_limit {
            self.stopped = true;
        }
        Ok(())
    }

    /// Assigns tile `t`; false on a contradiction (the assignment stays on the trail for undo).
    fn set(&mut self, t: u16, v: u8) -> bool {
        self.state[t as usize] = v;
        self.trail.push(t);
        let mut ok = true;
        for &l in &self.geo.tile_lines[t as usize] {
            let li = l as usize;
            self.unknown[li] -= 1;
            if v == YELLOW {
                self.yellow[li] += 1;
            }
            let clue = self.clues[li];
            if self.yellow[li] > clue || self.yellow[li] + self.unknown[li] < clue {
                ok = false;
            }
            if !self.queued[li] {
                self.queued[li] = true;
                self.queue.push(l);
            }
        }
        ok
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            let Some(t) = self.trail.pop() else { break };
            let v = self.state[t as usize];
            for &l in &self.geo.tile_lines[t as usize] {
                self.unknown[l as usize] += 1;
                if v == YELLOW {
                    self.yellow[l as usize] -= 1;
                }
            }
            self.state[t as usize] = UNKNOWN;
        }
        self.clear_queue();
    }

    fn clear_queue(&mut self) {
        for &l in &self.queue {
            self.queued[l as usize] = false;
        }
        self.queue.clear();
    }

    /// Line solving to a fixed point; false on a contradiction.
    fn propagate(&mut self) -> bool {
        while let Some(l) = self.queue.pop() {
            let li = l as usize;
            self.queued[li] = false;
            if self.unknown[li] == 0 {
                continue;
            }
            let need = self.clues[li] - self.yellow[li];
            let fill = if need == 0 {
                BLACK
            } else if need == self.unknown[li] {
                YELLOW
            } else {
                continue;
            };
            let geo = self.geo;
            for &t in &geo.lines[li].tiles {
                if self.state[t as usize] == UNKNOWN && !self.set(t, fill) {
                    self.clear_queue();
                    return false;
                }
            }
        }
        true
    }

    /// The tile to branch on, or None when the board is complete.
    fn choose(&self) -> Option<u16> {
        let slack = |l: usize| -> u32 {
            let need = self.clues[l] - self.yellow[l];
            need.min(self.unknown[l] - need)
        };
        let mut best: Option<(u32, u32, usize)> = None;
        for l in 0..self.geo.n_lines() {
            if self.unknown[l] == 0 {
                continue;
            }
            let key = (slack(l), self.unknown[l], l);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        let (_, _, line) = best?;
        let mut pick: Option<(u32, u16)> = None;
        for &t in &self.geo.lines[line].tiles {
            if self.state[t as usize] != UNKNOWN {
                continue;
            }
            let others: u32 = self.geo.tile_lines[t as usize]
                .iter()
                .map(|&l| slack(l as usize))
                .sum();
            if pick.is_none_or(|(s, _)| others < s) {
                pick = Some((others, t));
            }
        }
        pick.map(|(_, t)| t)
    }

    /// Gives away the upper half of the path indices not reached at a node with base `base`: every node visited so
    /// far has a base of at most `base`, so those above it and in the run's range are untouched. Declines when
    /// fewer than two are left.
    #[cold]
    fn split(&mut self, base: u64) {
        let Some(ctl) = self.ctl else { return };
        let from = (base + 1).max(self.lo);
        if self.hi < from + 2 {
            ctl.decline_split();
            return;
        }
        let mid = from + (self.hi - from) / 2;
        let kept = Span {
            lo: u128::from(self.lo),
            hi: u128::from(mid),
        };
        let given = Span {
            lo: u128::from(mid),
            hi: u128::from(self.hi),
        };
        // Spans are a few dozen bytes, far below the size limit: a refusal leaves the run whole.
        if ctl.hand_off(kept.state(), given.state()).is_ok() {
            self.hi = mid;
        }
    }

    fn dfs(
        &mut self,
        base: u64,
        width: u64,
        found: &mut dyn FnMut(&[bool]) -> Flow,
    ) -> Result<(), SpaceError> {
        let Some(t) = self.choose() else {
            if (self.lo..self.hi).contains(&base) {
                let board: Vec<bool> = self.state.iter().map(|&s| s == YELLOW).collect();
                if let Flow::Stop = found(&board) {
                    self.stopped = true;
                }
            }
            return Ok(());
        };
        // Only the first branchings carry a range of paths, so this is one look per node of a few levels.
        if width > 1 && self.ctl.is_some_and(Control::split_requested) {
            self.split(base);
        }
        for (b, v) in [YELLOW, BLACK].into_iter().enumerate() {
            if self.stopped {
                break;
            }
            let (cbase, cwidth) = if width > 1 {
                (base + b as u64 * (width / 2), width / 2)
            } else {
                (base, 1)
            };
            if cbase >= self.hi || cbase + cwidth <= self.lo {
                continue;
            }
            if (self.lo..self.hi).contains(&cbase) {
                self.count_node()?;
            }
            let mark = self.trail.len();
            if self.set(t, v) && self.propagate() {
                self.dfs(cbase, cwidth, found)?;
            }
            self.undo_to(mark);
        }
        Ok(())
    }
}

/// Every board meeting `clues` (up to `limit` of them), in search order; for tests, generation and the bench.
pub fn solve_all(geo: &Geometry, clues: &[u32], limit: Option<usize>) -> Vec<Vec<bool>> {
    let mut out = Vec::new();
    let mut solver = Solver::new(geo, clues, 0, N_PATHS, None);
    // Without a Control nothing can cancel the run, so it cannot fail.
    let _ = solver.run(&mut |b| {
        out.push(b.to_vec());
        if limit.is_some_and(|l| out.len() >= l) {
            Flow::Stop
        } else {
            Flow::Continue
        }
    });
    out
}
