//! Exact backtracking over the top row: every lower ball follows by differences.
//!
//! The top row is chosen left to right. Choosing top ball `j` fixes the whole diagonal below it (row `i` from the
//! top gets `|row(i-1)[j-i] - row(i-1)[j-i+1]|`), and that diagonal is checked ball by ball against a bit mask of
//! used numbers, so a bad choice is usually rejected after one or two subtractions.
//!
//! Pruning that keeps the search exact:
//! - The largest number `n` is never a difference (`|a-b| < max(a,b) <= n`), so it sits in the top row.
//! - Mirror breaking: the reflection moves top position `p` to `rows-1-p`, so only triangles with `n` at
//!   `p <= (rows-1)/2` are searched; once the search reaches that position without having used `n`, `n` is
//!   forced there. A triangle with `p < rows-1-p` stands for itself and its mirror (two solutions, one unique,
//!   reported in canonical form); one with `n` in the middle (odd rows) has its mirror in the searched half too,
//!   so it counts once and is unique when it is canonical. Counts stay exact however the prefixes are split.
//!
//! `nodes` counts placements tried: one per chunk prefix plus one per top-row candidate tried below it.
//!
//! Resume: a chunk at 10+ rows runs for minutes, so it saves a cursor ([`Control::save_resume_state`]) at
//! least every [`SAVE_EVERY`] placements, at a point where a sub-branch has just been searched to the end: the
//! index of the prefix being searched, the top row down to that sub-branch (everything before it in search
//! order is done), and what was counted so far. A later attempt rebuilds the board along that top row and goes
//! on with the next candidates, level by level, so its output is the uninterrupted one, nodes included.
//!
//! Splits: asked to split, a run gives away the upper half of the prefixes it has not started ([`SpanWalk`]):
//! a part is a [`Span`] of prefix indices, written `span LO HI`, and a run from it counts from zero. A run of a
//! part saves cursors that name the part (`span=LO..HI`, absent for the whole chunk) and count from the part's
//! start, so a part resumed from its cursor still covers only that part. The two kinds of state are told apart
//! by their first word: `span` is a part to start, the tag below a cursor to continue.

use std::ops::Range;

use sweep_space::{
    ChunkId, ChunkOutput, Control, Meter, SpaceError, Span, SpanWalk, MAX_RESUME_STATE_BYTES,
};

use super::triangle::{encode, index, Geometry};

/// Rows are limited so that numbers fit a u128 mask (`12*13/2 = 78`); 12 rows already take hours.
pub const MAX_ROWS: usize = 12;

/// A set of numbers `1..=n` as bits.
type Mask = u128;

/// How many placements pass between progress reports and cancellation checks.
const REPORT_EVERY: u64 = 1 << 16;

/// Placements between two saved cursors, at least. At 30-50 million placements a second per core this is a
/// save about every second, a little more often than the engine forwards one (every 3 s), and a save (about
/// 150 bytes of text) costs a microsecond or two.
pub const SAVE_EVERY: u64 = 1 << 25;

/// The first word of every state this code writes; a state of another format (another version of this code,
/// another space) is not parsed but ignored.
const STATE_TAG: &str = "billiard-strategy/1";

/// A partial triangle, `tri[i][k]` = row `i` from the top, position `k`.
#[derive(Clone)]
struct Board {
    rows: usize,
    n: u8,
    /// The largest top position `n` may take (mirror breaking).
    half: usize,
    tri: [[u8; MAX_ROWS]; MAX_ROWS],
}

impl Board {
    fn new(rows: usize) -> Board {
        Board {
            rows,
            n: (rows * (rows + 1) / 2) as u8,
            half: rows.saturating_sub(1) / 2,
            tri: [[0; MAX_ROWS]; MAX_ROWS],
        }
    }

    /// The numbers worth trying at top position `j` given the used mask.
    fn candidates(&self, j: usize, used: Mask) -> Mask {
        let all = ((1 << (self.n + 1)) - 1) & !1;
        let big: Mask = 1 << self.n;
        if used & big != 0 {
            all & !used
        } else if j == self.half {
            big
        } else {
            // Positions right of `half` are never reached without `n`: it is forced at `half`.
            all & !used
        }
    }

    /// Puts `v` at top position `j` and derives the diagonal below it; the new used mask, or `None` when a
    /// derived ball repeats a number.
    #[inline]
    fn place(&mut self, j: usize, v: u8, used: Mask) -> Option<Mask> {
        let mut used = used | (1 << v);
        self.tri[0][j] = v;
        for i in 1..=j {
            let k = j - i;
            let d = self.tri[i - 1][k].abs_diff(self.tri[i - 1][k + 1]);
            let bit: Mask = 1 << d;
            // d >= 1 because the two balls above are distinct numbers.
            if used & bit != 0 {
                return None;
            }
            used |= bit;
            self.tri[i][k] = d;
        }
        Some(used)
    }

    /// The finished triangle as a seed index vector.
    fn balls(&self) -> Vec<u8> {
        let n = usize::from(self.n);
        let mut balls = vec![0; n];
        for i in 0..self.rows {
            let level = self.rows - 1 - i;
            for k in 0..=level {
                balls[index(level, k)] = self.tri[i][k];
            }
        }
        balls
    }

    /// Where `n` sits in the finished top row.
    fn position_of_max(&self) -> usize {
        (0..self.rows)
            .find(|&k| self.tri[0][k] == self.n)
            .unwrap_or(0)
    }
}

/// The chunk prefixes: the first `min(rows, 2)` top balls, every consistent choice under the same rules the
/// search applies, in increasing order.
pub fn prefixes(rows: usize) -> Vec<[u8; 2]> {
    let mut board = Board::new(rows);
    let mut out = Vec::new();
    let mut first = board.candidates(0, 0);
    while first != 0 {
        let a = first.trailing_zeros() as u8;
        first &= first - 1;
        let Some(used) = board.place(0, a, 0) else {
            continue;
        };
        if rows == 1 {
            out.push([a, 0]);
            continue;
        }
        let mut second = board.candidates(1, used);
        while second != 0 {
            let b = second.trailing_zeros() as u8;
            second &= second - 1;
            if board.place(1, b, used).is_some() {
                out.push([a, b]);
            }
        }
    }
    out
}

/// Where a chunk's cursors go, and how often.
pub struct Saves<'s> {
    /// Placements between two saves, at least (`u64::MAX`: never). Progress is reported at least as often.
    pub every: u64,
    /// Takes each state. An error (the engine refused it) means it was not saved.
    pub sink: &'s mut dyn FnMut(String) -> Result<(), SpaceError>,
}

/// The first word of a split state (a [`Span`] of prefix indices).
const SPAN_WORD: &str = "span ";

/// The range of prefix indices of chunk `at` (in the plan, checked by the caller).
fn chunk_range(prefixes: usize, at: ChunkId) -> Range<usize> {
    let (lo, hi) = at.split(prefixes as u128);
    // lo <= hi <= prefixes, a usize.
    lo as usize..hi as usize
}

/// A split state of chunk `at`: a span of its prefixes.
fn split_part(prefixes: usize, at: ChunkId, state: &str) -> Result<Range<usize>, SpaceError> {
    let span = Span::parse(state)?;
    let mine = chunk_range(prefixes, at);
    if span.lo < mine.start as u128 || span.hi > mine.end as u128 {
        return Err(SpaceError::invalid_param(
            "state",
            format!(
                "prefixes {}..{} are not inside {at}, which has {}..{}",
                span.lo, span.hi, mine.start, mine.end
            ),
        ));
    }
    // Inside a range of usizes.
    Ok(span.lo as usize..span.hi as usize)
}

/// The prefixes a run of chunk `at` from `state` answers for: the chunk (`None`), a split state's span, or the
/// part a cursor names. A state that is neither is refused: this is for checking splits, which must name
/// their parts exactly (a run starts a garbled cursor's part over, see [`run_chunk`]).
pub fn part_of(
    prefixes: usize,
    at: ChunkId,
    state: Option<&str>,
) -> Result<Range<usize>, SpaceError> {
    let Some(state) = state else {
        return Ok(chunk_range(prefixes, at));
    };
    if state.starts_with(SPAN_WORD) {
        return split_part(prefixes, at, state);
    }
    let mine = chunk_range(prefixes, at);
    parse_state(state)
        .filter(|saved| saved.id == at)
        .and_then(|saved| saved.cursor.part(&mine))
        .ok_or_else(|| {
            SpaceError::invalid_param(
                "state",
                format!("`{state}` is neither a span of {at}'s prefixes nor one of its cursors"),
            )
        })
}

/// Runs chunk `chunk` of `n_chunks` (in range, checked by the caller) over `prefixes`, the job's prefixes:
/// the part a split state `resume` names, or continuing from `resume` when it is a cursor this chunk saved,
/// or the whole chunk. A split state outside the chunk is refused, and so is a cursor that claims a span but
/// cannot be read; a cursor that cannot be trusted starts its part over (the whole chunk when it names none).
pub fn run_chunk(
    geo: &Geometry,
    prefixes: &[[u8; 2]],
    at: ChunkId,
    ctl: &Control,
    resume: Option<&str>,
    saves: Saves,
) -> Result<ChunkOutput, SpaceError> {
    let mine = chunk_range(prefixes.len(), at);
    let (part, cursor_state) = match resume {
        Some(state) if state.starts_with(SPAN_WORD) => {
            (split_part(prefixes.len(), at, state)?, None)
        }
        other => (mine.clone(), other),
    };
    let mut search = Strategy {
        geo,
        ctl,
        out: ChunkOutput::default(),
        board: Board::new(geo.rows),
        meter: Meter::new(ctl),
        id: at,
        chunk: mine.clone(),
        part: part.clone(),
        prefix: part.start,
        report_every: REPORT_EVERY.min(saves.every.max(1)),
        save_every: saves.every,
        next_save: saves.every,
        sink: Some(saves.sink),
    };
    let mut next = part.start;
    if let Some(text) = cursor_state {
        match search.restore(text, prefixes) {
            Some((cursor, used)) => {
                search.continue_from(&cursor, &used)?;
                next = cursor.prefix + 1;
            }
            None => {
                // A cursor of a piece answers for its span only: the chunk's other prefixes belong to other
                // pieces, so starting the whole chunk over would count them twice. Its span, if it can be read,
                // starts over; if not, the run fails and the chunk is retried from its recorded part.
                if let Some(piece) = claimed_span(geo.rows, prefixes.len(), at, text)? {
                    search.part = piece.clone();
                    search.prefix = piece.start;
                    next = piece.start;
                }
            }
        }
    }
    // One look at the split flag per prefix: a prefix's search is never cut, the prefixes not started are.
    let span = Span {
        lo: search.part.start as u128,
        hi: search.part.end as u128,
    };
    let mut walk = SpanWalk::resuming(span, next as u128, ctl);
    while let Some(k) = walk.next() {
        let kept = walk.span();
        // Inside the part, a range of usizes.
        search.part.end = kept.hi as usize;
        search.prefix = k as usize;
        search.run_prefix(prefixes[k as usize])?;
    }
    Ok(search.finish())
}

/// Whether a cursor that could not be restored claims a span (a word `span=...`, or the `span` of a split state
/// anywhere but first): `None` when it does not (a cursor of the whole chunk, which starts over), the span when
/// it names one of chunk `at`'s parts legibly (of a job with `rows` rows), and an error when it claims one that
/// cannot be read.
fn claimed_span(
    rows: usize,
    prefixes: usize,
    at: ChunkId,
    text: &str,
) -> Result<Option<Range<usize>>, SpaceError> {
    let claims = text
        .split_whitespace()
        .any(|w| w == SPAN_WORD.trim_end() || w.starts_with("span="));
    if !claims {
        return Ok(None);
    }
    let mine = chunk_range(prefixes, at);
    parse_state(text)
        .filter(|saved| saved.rows == rows && saved.id == at)
        .and_then(|saved| saved.cursor.span)
        .filter(|span| mine.start <= span.start && span.end <= mine.end)
        .map(Some)
        .ok_or_else(|| {
            SpaceError::invalid_param(
                "state",
                format!(
                    "`{text}` claims a span of {at}'s prefixes but cannot be read as one; running the whole \
                     chunk would count its other pieces twice"
                ),
            )
        })
}

/// A parsed state, not yet checked against the chunk.
#[derive(Debug, PartialEq, Eq)]
struct Saved {
    rows: usize,
    id: ChunkId,
    cursor: Cursor,
}

/// Where a chunk stands: prefix `prefix` (an index into the job's prefixes) is being searched, the sub-branch
/// with top row `path` (the prefix's two balls first) is done, and so is everything before it in search order
/// within the part `span` (`None`: the whole chunk), which the counts cover.
#[derive(Debug, PartialEq, Eq)]
struct Cursor {
    span: Option<Range<usize>>,
    prefix: usize,
    path: Vec<u8>,
    nodes: u64,
    solutions: u128,
    unique: u128,
    found: Vec<String>,
}

impl Cursor {
    /// The part this cursor's run answers for, if it lies inside `mine` (the chunk's prefixes) and holds the
    /// cursor's prefix.
    fn part(&self, mine: &Range<usize>) -> Option<Range<usize>> {
        let part = self.span.clone().unwrap_or_else(|| mine.clone());
        let inside =
            mine.start <= part.start && part.end <= mine.end && part.contains(&self.prefix);
        inside.then_some(part)
    }
}

/// A short digest of a state's text, so that a state garbled in storage or transit is ignored rather than
/// trusted (a changed digit in `nodes` would otherwise pass every other check).
pub(super) fn digest(body: &str) -> String {
    blake3::hash(body.as_bytes()).to_hex()[..16].to_string()
}

/// Parses a state written by [`Strategy::state`]; `None` for anything else.
fn parse_state(text: &str) -> Option<Saved> {
    let (body, check) = text.rsplit_once(" check=")?;
    if check != digest(body) {
        return None;
    }
    let mut words = body.split(' ');
    if words.next()? != STATE_TAG {
        return None;
    }
    let mut field = |key: &str| words.next()?.strip_prefix(key)?.strip_prefix('=');
    let rows = field("rows")?.parse().ok()?;
    let (chunk, n_chunks) = field("chunk")?.split_once('/')?;
    let id = ChunkId::new(n_chunks.parse().ok()?, chunk.parse().ok()?);
    let mut word = words.next()?;
    let span = match word.strip_prefix("span=") {
        Some(range) => {
            let (lo, hi) = range.split_once("..")?;
            let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
            if lo >= hi {
                return None;
            }
            word = words.next()?;
            Some(lo..hi)
        }
        None => None,
    };
    let prefix = word.strip_prefix("prefix=")?.parse().ok()?;
    let mut field = |key: &str| words.next()?.strip_prefix(key)?.strip_prefix('=');
    let path = field("path")?
        .split(',')
        .map(|v| v.parse().ok())
        .collect::<Option<Vec<u8>>>()?;
    let nodes = field("nodes")?.parse().ok()?;
    let solutions = field("solutions")?.parse().ok()?;
    let unique = field("unique")?.parse().ok()?;
    let found = match field("found")? {
        "" => Vec::new(),
        list => list.split(';').map(str::to_string).collect(),
    };
    if words.next().is_some() {
        return None;
    }
    Some(Saved {
        rows,
        id,
        cursor: Cursor {
            span,
            prefix,
            path,
            nodes,
            solutions,
            unique,
            found,
        },
    })
}

struct Strategy<'a> {
    geo: &'a Geometry,
    ctl: &'a Control,
    out: ChunkOutput,
    board: Board,
    /// Placements tried, published at each report: reports follow placements rather than the meter's steps,
    /// since every report is a point where a cursor may be saved, at least every [`Saves::every`] placements.
    meter: Meter<'a>,
    id: ChunkId,
    /// The chunk's prefixes.
    chunk: Range<usize>,
    /// The prefixes this run answers for: the chunk or a part of it, narrowed when the run gives some away.
    part: Range<usize>,
    /// The index (into the job's prefixes) of the prefix being searched.
    prefix: usize,
    report_every: u64,
    save_every: u64,
    /// Save at the first report once `nodes` reaches this.
    next_save: u64,
    /// `None` once a save was refused: a state only grows (its solutions), so later ones would be refused too.
    sink: Option<&'a mut dyn FnMut(String) -> Result<(), SpaceError>>,
}

impl Strategy<'_> {
    fn run_prefix(&mut self, [a, b]: [u8; 2]) -> Result<(), SpaceError> {
        self.meter.count(1);
        let Some(mut used) = self.board.place(0, a, 0) else {
            return Ok(());
        };
        let mut depth = 1;
        if self.geo.rows > 1 {
            let Some(u) = self.board.place(1, b, used) else {
                return Ok(());
            };
            used = u;
            depth = 2;
        }
        self.dfs(depth, used)
    }

    fn finish(mut self) -> ChunkOutput {
        self.out.nodes = self.meter.finish();
        self.out
    }

    fn dfs(&mut self, j: usize, used: Mask) -> Result<(), SpaceError> {
        if j == self.board.rows {
            self.found();
            return Ok(());
        }
        let cands = self.board.candidates(j, used);
        self.meter.count(u64::from(cands.count_ones()));
        self.branch(j, used, cands)
    }

    /// Tries `cands` at top position `j` (their nodes already counted), then reports if it is time: the
    /// sub-branch above `j` is then done, a point where a cursor can be saved.
    #[inline(always)]
    fn branch(&mut self, j: usize, used: Mask, mut cands: Mask) -> Result<(), SpaceError> {
        while cands != 0 {
            let v = cands.trailing_zeros() as u8;
            cands &= cands - 1;
            if let Some(u) = self.board.place(j, v, used) {
                self.dfs(j + 1, u)?;
            }
        }
        if self.meter.unpublished() >= self.report_every {
            self.report(j)?;
        }
        Ok(())
    }

    /// Reports progress and saves a cursor when one is due, or when the worker asks the chunk to stop: then the
    /// chunk stops once its cursor is saved (the engine hands it back with that state), and finishes otherwise.
    #[cold]
    #[inline(never)]
    fn report(&mut self, j: usize) -> Result<(), SpaceError> {
        self.meter.checkpoint()?;
        let stop = self.ctl.is_stop_requested();
        if self.sink.is_some() && (stop || self.meter.nodes() >= self.next_save) {
            self.next_save = self.meter.nodes().saturating_add(self.save_every);
            let saved = self.save(j);
            if stop && saved {
                return Err(SpaceError::Cancelled);
            }
        }
        Ok(())
    }

    /// Saves the cursor "the sub-branch of top balls `0..j` is done"; whether the state was taken.
    fn save(&mut self, j: usize) -> bool {
        let state = self.state(&self.board.tri[0][..j]);
        let taken = state.len() <= MAX_RESUME_STATE_BYTES
            && self.sink.as_mut().is_some_and(|sink| sink(state).is_ok());
        if !taken {
            self.sink = None;
        }
        taken
    }

    fn state(&self, path: &[u8]) -> String {
        let counter = |name: &str| self.out.counters.get(name).copied().unwrap_or(0);
        let span = if self.part == self.chunk {
            String::new()
        } else {
            format!(" span={}..{}", self.part.start, self.part.end)
        };
        let body = format!(
            "{STATE_TAG} rows={} chunk={}/{}{span} prefix={} path={} nodes={} solutions={} unique={} found={}",
            self.geo.rows,
            self.id.chunk,
            self.id.n_chunks,
            self.prefix,
            encode(path),
            self.meter.nodes(),
            counter("solutions"),
            counter("unique"),
            self.out.solutions.join(";"),
        );
        let check = digest(&body);
        format!("{body} check={check}")
    }

    /// Takes over a saved state if it is this chunk's and consistent: the part it covers, the counts so far,
    /// and the board rebuilt along the cursor's top row. `None` (start over) for anything else.
    /// Also returns the used mask before each level of the cursor's top row.
    fn restore(&mut self, text: &str, prefixes: &[[u8; 2]]) -> Option<(Cursor, [Mask; MAX_ROWS])> {
        let Saved { rows, id, cursor } = parse_state(text)?;
        let path = &cursor.path;
        let part = cursor.part(&self.chunk)?;
        if rows != self.geo.rows
            || id != self.id
            // Cursors are only saved below the prefix and above the last position (see `branch`).
            || !(2..self.geo.rows).contains(&path.len())
            || prefixes.get(cursor.prefix)?[..] != path[..2]
            || cursor.found.len() as u128 != cursor.unique
            || cursor.solutions < cursor.unique
        {
            return None;
        }
        let mut used = 0;
        let mut before = [0; MAX_ROWS];
        for (j, &v) in path.iter().enumerate() {
            before[j] = used;
            let allowed = v <= self.board.n && self.board.candidates(j, used) & (1 << v) != 0;
            used = self.board.place(j, v, used).filter(|_| allowed)?;
        }
        for s in &cursor.found {
            let balls = self.geo.parse_solution(s).ok()?;
            if self.geo.canonical(&balls) != balls {
                return None;
            }
        }
        self.meter.resume_at(cursor.nodes);
        self.next_save = cursor.nodes.saturating_add(self.save_every);
        self.prefix = cursor.prefix;
        self.part = part;
        // Only counters that were counted: an uninterrupted run has no zero entries.
        for (name, n) in [("solutions", cursor.solutions), ("unique", cursor.unique)] {
            if n > 0 {
                self.out.count(name, n);
            }
        }
        self.out.solutions.clone_from(&cursor.found);
        Some((cursor, before))
    }

    /// Searches what is left of the cursor's prefix after its done sub-branch, deepest level first, as the
    /// uninterrupted search would have (the board holds the cursor's top row; each level's nodes were counted
    /// when it was entered).
    fn continue_from(
        &mut self,
        cursor: &Cursor,
        used: &[Mask; MAX_ROWS],
    ) -> Result<(), SpaceError> {
        let path = &cursor.path;
        for j in (2..path.len()).rev() {
            let later = !((2 << path[j]) - 1);
            let cands = self.board.candidates(j, used[j]) & later;
            self.branch(j, used[j], cands)?;
        }
        Ok(())
    }

    fn found(&mut self) {
        let balls = self.board.balls();
        let p = self.board.position_of_max();
        let canonical = self.geo.canonical(&balls);
        if 2 * p + 1 < self.geo.rows {
            // Its mirror (n at rows-1-p) is never searched: count it here.
            self.out.count("solutions", 2);
            self.out.count("unique", 1);
            self.out.solutions.push(encode(&canonical));
        } else {
            self.out.count("solutions", 1);
            if canonical == balls {
                self.out.count("unique", 1);
                self.out.solutions.push(encode(&balls));
            }
        }
    }
}
