//! Progress bars (indicatif) from the coordinator's job snapshots, or plain lines when stdout is no terminal.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sweep_proto::v1;

use crate::output::human;

/// A rate smoothed over about ten seconds, so the figure and the ETA do not jump with every snapshot.
#[derive(Default)]
struct Rate {
    last: Option<(Instant, f64)>,
    per_s: f64,
}

impl Rate {
    fn update(&mut self, now: Instant, value: f64) -> f64 {
        if let Some((t, v)) = self.last {
            let dt = now.duration_since(t).as_secs_f64();
            if dt >= 0.05 {
                let inst = ((value - v) / dt).max(0.0);
                let alpha = 1.0 - (-dt / 10.0).exp();
                self.per_s = if self.per_s == 0.0 {
                    inst
                } else {
                    self.per_s + alpha * (inst - self.per_s)
                };
                self.last = Some((now, value));
            }
        } else {
            self.last = Some((now, value));
        }
        self.per_s
    }
}

pub struct Bars {
    multi: Option<MultiProgress>,
    bars: HashMap<u64, (ProgressBar, Rate)>,
    plain_every: Option<Duration>,
    last_plain: Option<Instant>,
}

pub enum Mode {
    /// Bars on a terminal, plain periodic lines otherwise.
    Auto,
    Off,
}

impl Bars {
    pub fn new(mode: Mode) -> Bars {
        match mode {
            Mode::Off => Bars {
                multi: None,
                bars: HashMap::new(),
                plain_every: None,
                last_plain: None,
            },
            Mode::Auto if std::io::stderr().is_terminal() => Bars {
                multi: Some(MultiProgress::with_draw_target(
                    ProgressDrawTarget::stderr_with_hz(5),
                )),
                bars: HashMap::new(),
                plain_every: None,
                last_plain: None,
            },
            Mode::Auto => Bars {
                multi: None,
                bars: HashMap::new(),
                plain_every: Some(Duration::from_secs(5)),
                last_plain: None,
            },
        }
    }

    pub fn update(&mut self, ev: &v1::WatchEvent) {
        let now = Instant::now();
        if let Some(every) = self.plain_every {
            if self
                .last_plain
                .is_some_and(|t| now.duration_since(t) < every)
            {
                return;
            }
            self.last_plain = Some(now);
            for j in &ev.jobs {
                let done: f64 = j.nodes.parse::<f64>().unwrap_or(0.0) + j.running_nodes as f64;
                let rate = self
                    .bars
                    .entry(j.id)
                    .or_insert_with(|| (ProgressBar::hidden(), Rate::default()))
                    .1
                    .update(now, done);
                eprintln!(
                    "job {} {} {}: {}/{} chunks, {} nodes/s, {} workers, {} poisoned, {} reissued",
                    j.id,
                    j.space,
                    j.state,
                    j.chunks_done,
                    j.chunks_total,
                    human(rate),
                    ev.workers,
                    j.chunks_poisoned,
                    j.reissued
                );
            }
            return;
        }
        let Some(multi) = &self.multi else { return };
        for j in &ev.jobs {
            let total_nodes: Option<u64> = j
                .total_nodes
                .parse::<u128>()
                .ok()
                .map(|n| n.min(u128::from(u64::MAX)) as u64);
            let (bar, rate) = self.bars.entry(j.id).or_insert_with(|| {
                let (len, template) = match total_nodes {
                    Some(n) => (
                        n,
                        "{prefix} [{bar:30.cyan/blue}] {percent:>3}% {msg} ETA {eta}",
                    ),
                    None => (
                        j.chunks_total,
                        "{prefix} [{bar:30.cyan/blue}] {pos}/{len} chunks {msg} ETA {eta}",
                    ),
                };
                let bar = multi.add(ProgressBar::new(len));
                if let Ok(style) = ProgressStyle::with_template(template) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_prefix(format!("job {} {}", j.id, j.space));
                (bar, Rate::default())
            });
            let nodes = j.nodes.parse::<f64>().unwrap_or(0.0) + j.running_nodes as f64;
            let per_s = rate.update(now, nodes);
            match total_nodes {
                Some(n) => bar.set_position((nodes as u64).min(n)),
                None => bar.set_position(j.chunks_done),
            }
            let mut msg = format!("{} nodes/s, {} workers", human(per_s), ev.workers);
            if j.chunks_poisoned > 0 {
                msg.push_str(&format!(", {} poisoned", j.chunks_poisoned));
            }
            if j.reissued > 0 {
                msg.push_str(&format!(", {} reissued", j.reissued));
            }
            if j.state != "running" {
                msg.push_str(&format!(" [{}]", j.state));
            }
            bar.set_message(msg);
        }
    }

    pub fn finish(&self) {
        for (bar, _) in self.bars.values() {
            bar.abandon();
        }
    }
}
