//! Progress from the coordinator's job snapshots (the `Watch` stream): on a terminal, indicatif bars, one per job,
//! with a status line under them (live workers, jobs by state, poisoned and re-issued chunks); anywhere else
//! (a log file, a Slurm output file, a pipe) plain lines every few seconds, because bars redrawn with escape codes
//! make an unreadable log.
//!
//! Rates and ETAs come from an exponentially smoothed rate ([`Rate`]), not from indicatif's `{eta}`: snapshots
//! arrive every few hundred milliseconds and chunk results land in bursts, so a raw rate, and any ETA computed
//! from it, would jump with every snapshot.
//!
//! What is left is counted in nodes when the job's size is known (`total_nodes`) or estimated by the coordinator
//! (`estimated_nodes`: the space's up-front estimates of its chunks, corrected by the finished ones), and in
//! chunks only for a job with neither. Chunks of a search differ in size by orders of magnitude, so counting
//! chunks made the first ETA of a 4-second job 21 minutes. An ETA from an estimated size is shown as a range
//! ([`eta_spread`]: `ETA 2m 05s-8m 20s`), one from chunks counted as if equal as the guess it is: `ETA ~4m 10s`.
//!
//! Chunks are counted in the plan's chunks covered (`chunks_covered` of the plan's `chunks_total - pieces`),
//! never in slots: a chunk that splits adds a slot to `chunks_total` while its done count lags, and a bar of
//! done slots would go back.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sweep_proto::v1;

use crate::output::human;
use crate::render::{chunks_covered, chunks_text, plan_chunks};

/// The smoothing time constant: a change in speed shows fully after about this long, and a single burst moves
/// the figure by only a small part of its size.
const RATE_TIME_CONSTANT_S: f64 = 10.0;

/// Snapshots closer together than this carry no usable rate (the division would amplify rounding).
const MIN_SAMPLE_GAP_S: f64 = 0.05;

/// A rate smoothed exponentially over time: each sample pulls the estimate towards the rate seen since the
/// previous one by `1 - exp(-dt / T)`, so irregular sample intervals weigh correctly.
#[derive(Default)]
struct Rate {
    last: Option<(Instant, f64)>,
    per_s: Option<f64>,
}

impl Rate {
    /// Records the counter's `value` at `now` and returns the smoothed rate per second.
    fn update(&mut self, now: Instant, value: f64) -> f64 {
        match self.last {
            None => self.last = Some((now, value)),
            // Until the counter first moves, the first sample stays the reference: the time before a job's first
            // report (worker start, first lease, first heartbeat) is not its speed, and a zero taken as the first
            // rate took a whole time constant to wear off (a 36 s star run's first ETA said 37 min). Its first
            // rate is the average since the first sample instead, dead time included, so it errs a little low.
            Some((_, v)) if self.per_s.is_none() && value == v => {}
            Some((t, v)) => {
                let dt = now.saturating_duration_since(t).as_secs_f64();
                if dt >= MIN_SAMPLE_GAP_S {
                    // A counter that went back (heartbeat progress lost in a coordinator restart) is no speed.
                    let seen = ((value - v) / dt).max(0.0);
                    let alpha = 1.0 - (-dt / RATE_TIME_CONSTANT_S).exp();
                    self.per_s = Some(match self.per_s {
                        None => seen,
                        Some(r) => r + alpha * (seen - r),
                    });
                    self.last = Some((now, value));
                }
            }
        }
        self.per_s.unwrap_or(0.0)
    }
}

/// Time left at `per_s` for `remaining` units; `None` while there is no speed to go by.
fn eta(remaining: f64, per_s: f64) -> Option<Duration> {
    if per_s <= 0.0 || !remaining.is_finite() {
        return None;
    }
    // Capped so a crawling job does not overflow Duration.
    Some(Duration::from_secs_f64(
        (remaining.max(0.0) / per_s).min(1e9),
    ))
}

/// How far an ETA from an estimated size may be off, as a factor either way, when `done` of the job (0 to 1) is
/// behind it: `1 + 3.5 (1 - done)^2`, so 4.5 at the start, 1.875 halfway and 1 at the end. The estimate of what is
/// left is worst before many chunks have corrected it and the rate is youngest then too; the measured ETAs of
/// `docs/performance.md` ("ETA of a search of unknown size": up to 3.7x the time left at 5 %, 2x at 25 %, 1.4x
/// at 50 %) all fall inside it. The dashboard uses the same rule (`coordinator/src/http/state.rs`).
fn eta_spread(done: f64) -> f64 {
    let left = (1.0 - done).clamp(0.0, 1.0);
    1.0 + 3.5 * left * left
}

/// `eta` as the range an estimated size allows when `done` of the job is behind it.
fn eta_range(eta: Duration, done: f64) -> (Duration, Duration) {
    let f = eta_spread(done);
    // Capped as `eta` is, so a crawling job does not overflow Duration.
    let high = (eta.as_secs_f64() * f).min(1e9);
    (eta.div_f64(f), Duration::from_secs_f64(high))
}

/// `42s`, `4m 05s`, `3h 07m`, `12d 04h`: two units at most, so the line keeps its width.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ if s >= 100 * 86_400 => ">99d".to_string(),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What a job's progress is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    /// Nodes, out of the exact total its space knows in advance.
    Nodes,
    /// Nodes, out of the coordinator's estimate of the total.
    EstimatedNodes,
    /// Plan chunks covered: the job's size is neither known nor estimated.
    Chunks,
}

/// How far a job is: in nodes when the space knows or estimates its total, in plan chunks covered otherwise.
struct Progress {
    done: f64,
    total: f64,
    nodes: f64,
    measure: Measure,
}

/// A positive figure from a decimal wire field (empty: unknown).
fn positive(decimal: &str) -> Option<f64> {
    decimal.parse::<f64>().ok().filter(|v| *v > 0.0)
}

fn progress_of(j: &v1::JobInfo) -> Progress {
    // Nodes of running chunks count too, so a job of a few huge chunks still moves.
    let nodes = j.nodes.parse::<f64>().unwrap_or(0.0) + j.running_nodes as f64;
    let by_nodes = |total: f64, measure| Progress {
        done: nodes.min(total),
        total,
        nodes,
        measure,
    };
    match (positive(&j.total_nodes), positive(&j.estimated_nodes)) {
        (Some(total), _) => by_nodes(total, Measure::Nodes),
        (None, Some(expected)) => by_nodes(expected, Measure::EstimatedNodes),
        (None, None) => Progress {
            done: chunks_covered(j),
            total: plan_chunks(j) as f64,
            nodes,
            measure: Measure::Chunks,
        },
    }
}

/// What follows a job's bar, and the body of its plain line: chunks, speed, ETA (or, on a bar, the final state),
/// and the poisoned and re-issued chunks when there are any.
fn job_summary(
    j: &v1::JobInfo,
    nodes_per_s: f64,
    eta: Option<Duration>,
    with_state: bool,
) -> String {
    let mut s = format!("{}, {} nodes/s", chunks_text(j), human(nodes_per_s));
    // Only an exact total gives an ETA as one figure: an estimated size gives a range, chunks counted as if
    // equal a guess marked `~`.
    let p = progress_of(j);
    let eta_text = |d: Duration| match p.measure {
        Measure::Nodes => short_duration(d),
        Measure::EstimatedNodes => {
            let done = if p.total > 0.0 { p.done / p.total } else { 0.0 };
            let (low, high) = eta_range(d, done);
            format!("{}-{}", short_duration(low), short_duration(high))
        }
        Measure::Chunks => format!("~{}", short_duration(d)),
    };
    match (j.state().label(), eta) {
        ("running", Some(d)) => s.push_str(&format!(", ETA {}", eta_text(d))),
        ("running", None) => s.push_str(", ETA ?"),
        (state, _) if with_state => s.push_str(&format!(" [{state}]")),
        _ => {}
    }
    if j.chunks_poisoned > 0 {
        s.push_str(&format!(", {} poisoned", j.chunks_poisoned));
    }
    if j.reissued > 0 {
        s.push_str(&format!(", {} reissued", j.reissued));
    }
    s
}

/// One job as a plain line: `job 3 star running 18.8%: 12/64 chunks, 1.23 G nodes/s, ETA 4m 10s, 2 reissued`.
fn plain_line(j: &v1::JobInfo, nodes_per_s: f64, eta: Option<Duration>) -> String {
    let p = progress_of(j);
    let percent = if p.total > 0.0 {
        100.0 * p.done / p.total
    } else {
        0.0
    };
    format!(
        "job {} {} {} {percent:.1}%: {}",
        j.id,
        j.space,
        j.state().label(),
        job_summary(j, nodes_per_s, eta, false)
    )
}

/// The line under the bars (and after each block of plain lines): the cluster at a glance.
fn status_line(ev: &v1::WatchEvent) -> String {
    let count = |state: &str| {
        ev.jobs
            .iter()
            .filter(|j| j.state().label() == state)
            .count()
    };
    let mut by_state = vec![format!("{} running", count("running"))];
    for state in ["paused", "done", "done-with-poisoned-chunks", "cancelled"] {
        let n = count(state);
        if n > 0 {
            by_state.push(format!("{n} {state}"));
        }
    }
    let poisoned: u64 = ev.jobs.iter().map(|j| j.chunks_poisoned).sum();
    let reissued: u64 = ev.jobs.iter().map(|j| j.reissued).sum();
    format!(
        "{} live workers; jobs: {}; chunks: {poisoned} poisoned, {reissued} reissued",
        ev.workers,
        by_state.join(", ")
    )
}

/// Input jobs drawn as bars at most, however many are ready to run at once (the joins of a wide DAG).
const MAX_INPUT_BARS: usize = 2;

/// What to draw for a snapshot in which jobs read other jobs' artifacts: a layered search is one job over a DAG
/// of dozens of input jobs, and a bar for each would bury the one that matters.
struct Folded {
    /// The jobs the status line sums over: the DAG of the focused job, or every job.
    scope: v1::WatchEvent,
    /// The jobs that get a bar: every job no other job in scope reads, plus the first few inputs that are running
    /// now (not waiting for inputs of their own).
    shown: v1::WatchEvent,
    /// One line per job with inputs: `job 61 inputs: 12/60 done, 1 running`.
    notes: Vec<String>,
}

/// Every job `top` reads, directly or not, among `by_id` (itself not included).
fn dag_of(top: u64, by_id: &HashMap<u64, &v1::JobInfo>) -> std::collections::BTreeSet<u64> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<u64> = by_id
        .get(&top)
        .map(|j| j.input_jobs.clone())
        .unwrap_or_default();
    while let Some(id) = todo.pop() {
        if id != top && seen.insert(id) {
            if let Some(j) = by_id.get(&id) {
                todo.extend(j.input_jobs.iter().copied());
            }
        }
    }
    seen
}

fn is_running_now(j: &v1::JobInfo) -> bool {
    j.state() == v1::JobState::Running && j.inputs_waiting == 0
}

/// Folds `ev` for drawing: with `focus`, only that job and its inputs are in scope (`sweep run`).
fn fold(ev: &v1::WatchEvent, focus: Option<u64>) -> Folded {
    let by_id: HashMap<u64, &v1::JobInfo> = ev.jobs.iter().map(|j| (j.id, j)).collect();
    let in_scope: Vec<&v1::JobInfo> = match focus {
        Some(top) => {
            let dag = dag_of(top, &by_id);
            ev.jobs
                .iter()
                .filter(|j| j.id == top || dag.contains(&j.id))
                .collect()
        }
        None => ev.jobs.iter().collect(),
    };
    let read: std::collections::HashSet<u64> = in_scope
        .iter()
        .flat_map(|j| j.input_jobs.iter().copied())
        .collect();
    let mut shown = Vec::new();
    let mut input_bars = 0;
    let mut notes = Vec::new();
    for j in &in_scope {
        if !read.contains(&j.id) {
            shown.push((*j).clone());
            let dag = dag_of(j.id, &by_id);
            if !dag.is_empty() {
                let inputs: Vec<&&v1::JobInfo> =
                    dag.iter().filter_map(|id| by_id.get(id)).collect();
                let done = inputs
                    .iter()
                    .filter(|i| i.state() == v1::JobState::Done)
                    .count();
                let running = inputs.iter().filter(|i| is_running_now(i)).count();
                let mut note = format!("job {} inputs: {done}/{} done", j.id, dag.len());
                if running > 0 {
                    note.push_str(&format!(", {running} running"));
                }
                notes.push(note);
            }
        } else if is_running_now(j) && input_bars < MAX_INPUT_BARS {
            input_bars += 1;
            shown.push((*j).clone());
        }
    }
    Folded {
        scope: v1::WatchEvent {
            jobs: in_scope.into_iter().cloned().collect(),
            workers: ev.workers,
        },
        shown: v1::WatchEvent {
            jobs: shown,
            workers: ev.workers,
        },
        notes,
    }
}

struct JobView {
    /// Hidden in plain mode: only the rates are used then.
    bar: ProgressBar,
    nodes: Rate,
    /// The rate of whatever the bar counts (nodes or chunks), for the ETA.
    progress: Rate,
    /// What `progress` counts: a job's estimate arrives after its first snapshots, and a rate must not mix
    /// chunks with nodes.
    measure: Measure,
    state: String,
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn is_terminal(self) -> bool {
        match self {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        }
    }

    /// Writes lines, ignoring errors: a closed pipe (`sweep watch | head`) must not panic the way `println!` does.
    fn write_lines(self, lines: &[String]) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let _ = match self {
            Stream::Stdout => std::io::stdout().lock().write_all(text.as_bytes()),
            Stream::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
        };
    }
}

pub struct Bars {
    /// Bars and the status line, when drawing on a terminal.
    multi: Option<(MultiProgress, ProgressBar)>,
    /// Plain lines: where, how often, and when last.
    plain: Option<(Stream, Duration, Option<Instant>)>,
    jobs: HashMap<u64, JobView>,
}

pub enum Mode {
    /// Bars on stderr when it is a terminal, plain periodic lines on stderr otherwise (`sweep run`, whose stdout
    /// is the answer).
    Auto,
    /// The same on stdout (`sweep watch`, whose output is the progress).
    Stdout,
    Off,
}

/// How often plain lines are printed (besides whenever a job changes state).
const PLAIN_EVERY: Duration = Duration::from_secs(5);

impl Bars {
    pub fn new(mode: Mode) -> Bars {
        let stream = match mode {
            Mode::Off => {
                return Bars {
                    multi: None,
                    plain: None,
                    jobs: HashMap::new(),
                }
            }
            Mode::Auto => Stream::Stderr,
            Mode::Stdout => Stream::Stdout,
        };
        if stream.is_terminal() {
            let target = match stream {
                Stream::Stdout => ProgressDrawTarget::stdout_with_hz(5),
                Stream::Stderr => ProgressDrawTarget::stderr_with_hz(5),
            };
            let multi = MultiProgress::with_draw_target(target);
            let status = multi.add(ProgressBar::new(0));
            if let Ok(style) = ProgressStyle::with_template("{msg}") {
                status.set_style(style);
            }
            Bars {
                multi: Some((multi, status)),
                plain: None,
                jobs: HashMap::new(),
            }
        } else {
            Bars {
                multi: None,
                plain: Some((stream, PLAIN_EVERY, None)),
                jobs: HashMap::new(),
            }
        }
    }

    /// Draws a snapshot in which jobs may read other jobs' artifacts: a bar for each job no other one reads and
    /// for the input jobs running now (a few at most), a line with each DAG's progress under them. A bar whose
    /// job is no longer drawn (an input that finished) goes away. With `focus`, only that job and its inputs.
    pub fn update_folded(&mut self, ev: &v1::WatchEvent, focus: Option<u64>) {
        if self.multi.is_none() && self.plain.is_none() {
            return;
        }
        let folded = fold(ev, focus);
        let mut status = status_line(&folded.scope);
        for note in &folded.notes {
            status.push_str("; ");
            status.push_str(note);
        }
        self.draw(&folded.shown, status);
        let shown: std::collections::HashSet<u64> =
            folded.shown.jobs.iter().map(|j| j.id).collect();
        let multi = &self.multi;
        self.jobs.retain(|id, view| {
            if shown.contains(id) {
                return true;
            }
            view.bar.finish_and_clear();
            if let Some((multi, _)) = multi {
                multi.remove(&view.bar);
            }
            false
        });
    }

    /// A bar (or a plain line) for every job of `ev`, and `status` under them.
    fn draw(&mut self, ev: &v1::WatchEvent, status: String) {
        let now = Instant::now();
        let mut lines = Vec::new();
        let mut changed = false;
        for j in &ev.jobs {
            let p = progress_of(j);
            let view = match self.jobs.entry(j.id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    changed = true;
                    let bar = match &self.multi {
                        Some((multi, status)) => {
                            let bar = multi.insert_before(status, ProgressBar::new(0));
                            if let Ok(style) = ProgressStyle::with_template(
                                "{prefix} [{bar:30.cyan/blue}] {percent:>3}% {msg}",
                            ) {
                                bar.set_style(style.progress_chars("=> "));
                            }
                            bar.set_prefix(format!("job {} {}", j.id, j.space));
                            bar
                        }
                        None => ProgressBar::hidden(),
                    };
                    e.insert(JobView {
                        bar,
                        nodes: Rate::default(),
                        progress: Rate::default(),
                        measure: p.measure,
                        state: j.state().label().to_string(),
                    })
                }
            };
            if view.state != j.state().label() {
                changed = true;
                view.state = j.state().label().to_string();
            }
            if view.measure != p.measure {
                view.measure = p.measure;
                view.progress = Rate::default();
            }
            let nodes_per_s = view.nodes.update(now, p.nodes);
            let progress_per_s = view.progress.update(now, p.done);
            let eta = eta(p.total - p.done, progress_per_s);
            // Bars count in u64; totals beyond that only lose precision in the drawing.
            view.bar.set_length(p.total.min(u64::MAX as f64) as u64);
            view.bar.set_position(p.done.min(u64::MAX as f64) as u64);
            view.bar.set_message(job_summary(j, nodes_per_s, eta, true));
            lines.push(plain_line(j, nodes_per_s, eta));
        }
        if let Some((_, bar)) = &self.multi {
            bar.set_message(status.clone());
        }
        if let Some((stream, every, last)) = &mut self.plain {
            let due = last.is_none_or(|t| now.duration_since(t) >= *every);
            // A state change is printed at once: otherwise a job's last line ("done") could fall between two
            // periods and never appear in the log.
            if due || changed {
                *last = Some(now);
                lines.push(status);
                stream.write_lines(&lines);
            }
        }
    }

    pub fn finish(&self) {
        for view in self.jobs.values() {
            view.bar.abandon();
        }
        if let Some((_, status)) = &self.multi {
            status.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, secs: f64) -> Instant {
        t0 + Duration::from_secs_f64(secs)
    }

    #[test]
    fn rate_of_a_steady_counter_is_exact() {
        let t0 = Instant::now();
        let mut r = Rate::default();
        assert_eq!(r.update(t0, 0.0), 0.0, "one sample has no rate yet");
        for k in 1..=20 {
            let v = r.update(at(t0, 0.5 * k as f64), 500.0 * k as f64);
            assert!((v - 1000.0).abs() < 1e-6, "sample {k}: {v}");
        }
    }

    #[test]
    fn a_burst_moves_the_rate_only_a_little() {
        let t0 = Instant::now();
        let mut r = Rate::default();
        let mut value = 0.0;
        for k in 0..=20 {
            value = 500.0 * k as f64;
            r.update(at(t0, 0.5 * k as f64), value);
        }
        // A chunk's result lands at once: 10,000 nodes in half a second, 20x the steady speed.
        let after_burst = r.update(at(t0, 10.5), value + 10_000.0);
        // It moves the rate about 5 % of the way (alpha for 0.5 s at a 10 s time constant), not to 20,000/s.
        let share = (after_burst - 1000.0) / (20_000.0 - 1000.0);
        assert!(
            share > 0.0 && share < 0.06,
            "one 20x burst moved the rate to {after_burst}"
        );
    }

    #[test]
    fn the_rate_follows_a_lasting_change_within_a_minute() {
        let t0 = Instant::now();
        let mut r = Rate::default();
        for k in 0..=20 {
            r.update(at(t0, 0.5 * k as f64), 500.0 * k as f64);
        }
        // From 1000/s to 2000/s for 60 s (six time constants).
        let mut v = 0.0;
        for k in 1..=120 {
            v = r.update(at(t0, 10.0 + 0.5 * k as f64), 10_000.0 + 1000.0 * k as f64);
        }
        assert!((v - 2000.0).abs() < 2000.0 * 0.01, "{v}");
    }

    /// A rate whose first sample, `count`, was taken now: that instant and the rate.
    fn rate_from(count: f64) -> (Instant, Rate) {
        let t0 = Instant::now();
        let mut r = Rate::default();
        r.update(t0, count);
        (t0, r)
    }

    #[test]
    fn samples_too_close_together_are_ignored() {
        let (t0, mut r) = rate_from(0.0);
        assert_eq!(r.update(at(t0, 1.0), 1000.0), 1000.0);
        // 10 ms later with a huge jump: skipped, and the next sample measures from the last one kept.
        assert_eq!(r.update(at(t0, 1.01), 1_000_000.0), 1000.0);
        let v = r.update(at(t0, 2.0), 2000.0);
        assert!((v - 1000.0).abs() < 1e-6, "{v}");
    }

    #[test]
    fn the_wait_for_a_first_report_is_not_taken_as_speed() {
        let t0 = Instant::now();
        let mut r = Rate::default();
        // Nothing reported for 1.5 s (five snapshots), then 1000/s from 1 s on.
        for k in 0..5 {
            assert_eq!(r.update(at(t0, 0.3 * k as f64), 0.0), 0.0);
        }
        // The first rate is the average since the first sample, not an average with a run of zeros.
        let first = r.update(at(t0, 2.0), 1000.0);
        assert!((first - 500.0).abs() < 1e-6, "{first}");
        // Steady from there: within a time constant most of the way to the real speed.
        let mut v = 0.0;
        for k in 1..=20 {
            v = r.update(at(t0, 2.0 + 0.5 * k as f64), 1000.0 + 500.0 * k as f64);
        }
        assert!(v > 800.0, "{v}");
    }

    #[test]
    fn a_counter_that_goes_back_is_no_negative_speed() {
        let (t0, mut r) = rate_from(5000.0);
        assert_eq!(r.update(at(t0, 1.0), 1000.0), 0.0);
    }

    #[test]
    fn eta_is_remaining_over_rate_and_unknown_without_speed() {
        assert_eq!(eta(1000.0, 100.0), Some(Duration::from_secs(10)));
        assert_eq!(eta(1000.0, 0.0), None);
        assert_eq!(eta(-5.0, 10.0), Some(Duration::ZERO));
        assert_eq!(eta(f64::INFINITY, 10.0), None);
        assert_eq!(eta(1e300, 1e-300), Some(Duration::from_secs_f64(1e9)));
    }

    #[test]
    fn durations_print_in_two_units_at_most() {
        let s = Duration::from_secs;
        assert_eq!(short_duration(s(0)), "0s");
        assert_eq!(short_duration(s(59)), "59s");
        assert_eq!(short_duration(s(250)), "4m 10s");
        assert_eq!(short_duration(s(3600 + 7 * 60 + 5)), "1h 07m");
        assert_eq!(short_duration(s(12 * 86_400 + 4 * 3600)), "12d 04h");
        assert_eq!(short_duration(s(1_000_000_000)), ">99d");
    }

    /// The wire code of a state label, so the fixtures read as the output does.
    fn state_code(label: &str) -> i32 {
        let all = [
            v1::JobState::Running,
            v1::JobState::Paused,
            v1::JobState::Cancelled,
            v1::JobState::Done,
            v1::JobState::DoneWithPoisonedChunks,
        ];
        let s = all.into_iter().find(|s| s.label() == label);
        s.unwrap_or_else(|| panic!("no state {label}")) as i32
    }

    fn job(state: &str) -> v1::JobInfo {
        v1::JobInfo {
            id: 3,
            space: "star".into(),
            state: state_code(state),
            chunks_total: 64,
            chunks_done: 12,
            nodes: "1000".into(),
            running_nodes: 500,
            total_nodes: "8000".into(),
            ..Default::default()
        }
    }

    #[test]
    fn plain_line_of_a_running_job() {
        assert_eq!(
            plain_line(&job("running"), 1_234_567.0, Some(Duration::from_secs(250))),
            "job 3 star running 18.8%: 12/64 chunks, 1.23 M nodes/s, ETA 4m 10s"
        );
    }

    #[test]
    fn plain_line_counts_chunks_without_a_node_total_and_shows_trouble() {
        let mut j = job("running");
        j.total_nodes = String::new();
        j.chunks_poisoned = 2;
        j.reissued = 5;
        assert_eq!(
            plain_line(&j, 0.0, None),
            "job 3 star running 18.8%: 12/64 chunks, 0 nodes/s, ETA ?, 2 poisoned, 5 reissued"
        );
    }

    #[test]
    fn progress_counts_nodes_of_a_known_or_estimated_size_else_chunks() {
        // (total_nodes, estimated_nodes, measure, done, total): the job has 1000 + 500 running nodes, 12/64 chunks.
        let cases = [
            ("8000", "", Measure::Nodes, 1500.0, 8000.0),
            ("8000", "9000", Measure::Nodes, 1500.0, 8000.0),
            ("", "10000", Measure::EstimatedNodes, 1500.0, 10000.0),
            // An estimate below what is done already (running chunks beyond it): full, never past 100 %.
            ("", "1200", Measure::EstimatedNodes, 1200.0, 1200.0),
            ("", "", Measure::Chunks, 12.0, 64.0),
            ("0", "0", Measure::Chunks, 12.0, 64.0),
            ("", "garbage", Measure::Chunks, 12.0, 64.0),
        ];
        for (total, estimated, measure, done, want_total) in cases {
            let mut j = job("running");
            j.total_nodes = total.into();
            j.estimated_nodes = estimated.into();
            let p = progress_of(&j);
            assert_eq!(
                (p.measure, p.done, p.total, p.nodes),
                (measure, done, want_total, 1500.0),
                "total {total:?}, estimated {estimated:?}"
            );
        }
    }

    #[test]
    fn an_eta_from_an_estimated_size_is_a_range_and_from_chunks_a_guess() {
        let mut j = job("running");
        j.total_nodes = String::new();
        j.estimated_nodes = "10000".into();
        // 15 % done: the spread is 1 + 3.5 * 0.85^2 = 3.52875, so 250 s is 70.8 s to 882.2 s.
        assert_eq!(
            plain_line(&j, 1_234_567.0, Some(Duration::from_secs(250))),
            "job 3 star running 15.0%: 12/64 chunks, 1.23 M nodes/s, ETA 1m 10s-14m 42s"
        );
        // Chunks counted as if they were equal are a guess too.
        j.estimated_nodes = String::new();
        assert_eq!(
            plain_line(&j, 1_234_567.0, Some(Duration::from_secs(250))),
            "job 3 star running 18.8%: 12/64 chunks, 1.23 M nodes/s, ETA ~4m 10s"
        );
    }

    #[test]
    fn the_eta_spread_narrows_to_nothing_as_the_job_ends() {
        assert_eq!(eta_spread(0.0), 4.5);
        assert_eq!(eta_spread(0.5), 1.875);
        assert_eq!(eta_spread(1.0), 1.0);
        // Past the estimate (running chunks beyond it) or nonsense: no narrower than exact, no wider than at
        // the start.
        assert_eq!(eta_spread(1.5), 1.0);
        assert_eq!(eta_spread(-1.0), 4.5);
        let mut last = f64::INFINITY;
        for k in 0..=100 {
            let f = eta_spread(k as f64 / 100.0);
            assert!(f <= last, "at {k} %: {f} after {last}");
            last = f;
        }
        let s = Duration::from_secs;
        assert_eq!(
            eta_range(s(100), 0.5),
            (s(100).div_f64(1.875), Duration::from_secs_f64(187.5))
        );
        assert_eq!(eta_range(s(100), 1.0), (s(100), s(100)));
        assert_eq!(eta_range(s(1_000_000_000), 0.0).1, s(1_000_000_000));
    }

    /// A job of 4 plan chunks whose chunks split while it runs, as successive snapshots: (chunks_total, pieces,
    /// chunks_done, chunks_covered).
    const SPLITTING: [(u64, u64, u64, f64); 8] = [
        (4, 0, 0, 0.0),
        (4, 0, 1, 1.0),
        // Chunk 1 splits: a slot more, nothing more done.
        (5, 1, 1, 1.0),
        // Its given half is done.
        (5, 1, 2, 1.5),
        // Chunk 2 splits twice, chunk 3 once.
        (8, 4, 2, 1.5),
        // A quarter of chunk 2 is done.
        (8, 4, 3, 1.75),
        (8, 4, 6, 3.0),
        (8, 4, 8, 4.0),
    ];

    fn splitting(total: u64, pieces: u64, done: u64, covered: f64) -> v1::JobInfo {
        v1::JobInfo {
            chunks_total: total,
            pieces,
            chunks_done: done,
            chunks_covered: covered,
            total_nodes: String::new(),
            ..job("running")
        }
    }

    #[test]
    fn a_chunk_bar_never_goes_back_when_chunks_split() {
        let mut last = 0.0;
        let mut slots_went_back = false;
        let mut last_slots = 0.0;
        for (total, pieces, done, covered) in SPLITTING {
            let j = splitting(total, pieces, done, covered);
            let p = progress_of(&j);
            assert_eq!(p.measure, Measure::Chunks);
            assert_eq!(p.total, 4.0, "the bar's length is the plan's chunks");
            let fraction = p.done / p.total;
            assert!(fraction >= last, "{j:?}: {fraction} after {last}");
            last = fraction;
            // What a bar of done slots would have shown.
            let slots = done as f64 / total as f64;
            slots_went_back |= slots < last_slots;
            last_slots = slots;
        }
        assert_eq!(last, 1.0, "it ends full");
        assert!(slots_went_back, "the sequence splits while done slots lag");
    }

    #[test]
    fn a_chunk_bar_of_a_splitting_job_moves_only_forwards_through_the_drawing() {
        // The same sequence through `draw`, which sets the (hidden) bar's length and position.
        let mut bars = Bars {
            multi: None,
            plain: Some((
                Stream::Stdout,
                Duration::from_secs(3600),
                Some(Instant::now()),
            )),
            jobs: HashMap::new(),
        };
        let mut last = 0;
        for (total, pieces, done, covered) in SPLITTING {
            let ev = v1::WatchEvent {
                jobs: vec![splitting(total, pieces, done, covered)],
                workers: 1,
            };
            bars.draw(&ev, String::new());
            let bar = &bars.jobs[&3].bar;
            assert_eq!(bar.length(), Some(4));
            assert!(bar.position() >= last, "{total} {done}");
            last = bar.position();
        }
        assert_eq!(last, 4);
    }

    #[test]
    fn the_line_of_a_splitting_job_shows_the_plan_covered_and_its_pieces() {
        let j = splitting(8, 4, 3, 1.75);
        assert_eq!(
            plain_line(&j, 1000.0, None),
            "job 3 star running 43.8%: 1.7/4 chunks (4 pieces), 1.00 k nodes/s, ETA ?"
        );
        let one = splitting(5, 1, 1, 1.0);
        assert_eq!(
            plain_line(&one, 0.0, None),
            "job 3 star running 25.0%: 1/4 chunks (1 piece), 0 nodes/s, ETA ?"
        );
        // Nearly done is not shown as done.
        let nearly = splitting(8, 4, 7, 3.96);
        assert!(plain_line(&nearly, 0.0, None).contains(" 3.9/4 chunks"));
    }

    #[test]
    fn plain_line_of_a_finished_job_shows_its_state_not_an_eta() {
        let mut j = job("done-with-poisoned-chunks");
        j.chunks_done = 64;
        j.nodes = "8000".into();
        j.running_nodes = 0;
        j.chunks_poisoned = 1;
        assert_eq!(
            plain_line(&j, 0.0, Some(Duration::from_secs(1))),
            "job 3 star done-with-poisoned-chunks 100.0%: 64/64 chunks, 0 nodes/s, 1 poisoned"
        );
    }

    fn dag_job(id: u64, state: &str, inputs: &[u64], waiting: u32) -> v1::JobInfo {
        v1::JobInfo {
            id,
            space: "peg".into(),
            state: state_code(state),
            input_jobs: inputs.to_vec(),
            inputs_waiting: waiting,
            ..job(state)
        }
    }

    /// A chain of 40 layers (job k reads k-1), 12 done, the 13th running, read by a summary job 41; beside it
    /// an unrelated job 50 with no inputs.
    fn layered() -> v1::WatchEvent {
        let mut jobs = Vec::new();
        for k in 1..=40u64 {
            let inputs: Vec<u64> = if k == 1 { vec![] } else { vec![k - 1] };
            let (state, waiting) = match k {
                1..=12 => ("done", 0),
                13 => ("running", 0),
                _ => ("running", 1),
            };
            jobs.push(dag_job(k, state, &inputs, waiting));
        }
        jobs.push(dag_job(41, "running", &[40, 20, 1], 2));
        jobs.push(dag_job(50, "running", &[], 0));
        v1::WatchEvent { jobs, workers: 2 }
    }

    fn ids(ev: &v1::WatchEvent) -> Vec<u64> {
        ev.jobs.iter().map(|j| j.id).collect()
    }

    #[test]
    fn a_layered_dag_folds_into_its_top_job_and_the_running_layer() {
        let ev = layered();
        let all = fold(&ev, None);
        assert_eq!(ids(&all.shown), [13, 41, 50]);
        assert_eq!(all.notes, ["job 41 inputs: 12/40 done, 1 running"]);
        assert_eq!(all.scope.jobs.len(), 42);
        let focused = fold(&ev, Some(41));
        assert_eq!(ids(&focused.shown), [13, 41]);
        assert_eq!(
            focused.scope.jobs.len(),
            41,
            "job 50 is not part of job 41's DAG"
        );
        assert_eq!(focused.notes, all.notes);
    }

    #[test]
    fn only_a_few_ready_inputs_get_bars() {
        // Five joins ready at once, all read by job 9.
        let mut jobs: Vec<v1::JobInfo> = (1..=5).map(|k| dag_job(k, "running", &[], 0)).collect();
        jobs.push(dag_job(9, "running", &[1, 2, 3, 4, 5], 5));
        let f = fold(&v1::WatchEvent { jobs, workers: 1 }, Some(9));
        assert_eq!(ids(&f.shown), [1, 2, 9]);
        assert_eq!(f.notes, ["job 9 inputs: 0/5 done, 5 running"]);
    }

    #[test]
    fn status_line_sums_over_jobs() {
        let mut a = job("running");
        a.reissued = 2;
        let mut b = job("done-with-poisoned-chunks");
        b.chunks_poisoned = 1;
        b.reissued = 3;
        let ev = v1::WatchEvent {
            jobs: vec![a, b, job("running")],
            workers: 4,
        };
        assert_eq!(
            status_line(&ev),
            "4 live workers; jobs: 2 running, 1 done-with-poisoned-chunks; chunks: 1 poisoned, 5 reissued"
        );
    }
}
