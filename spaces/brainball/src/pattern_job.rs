//! The job glue of the `pattern` mode: its parameters, its inputs (the levels it reads), its chunks and its
//! answer, on top of the level format and kernels in [`crate::pattern`].

use std::sync::Arc;

use serde_json::{json, Value};

use sweep_space::{ChunkId, ChunkOutput, Control, Job, JobInput, SpaceError};

use crate::job::BrainballJob;
use crate::params::{BrainballParams, Mode, SPACE_NAME};
use crate::pattern::{
    bad, check_database_chunk, check_level_chunk, database_chunk, layout, level_chunk,
    merge_database, merge_level, Visited, LEVELS, MAX_DB_CHUNKS,
};
use crate::pdb::{self, patterns, Pdb};

/// `pattern [--level L]`: only the pattern size and the level are its parameters.
pub fn build_job(p: BrainballParams) -> Result<BrainballJob, SpaceError> {
    if p.position.is_some() || p.positions.is_some() || p.random.is_some() {
        return Err(SpaceError::invalid_param(
            "position",
            "a pattern database job takes no positions",
        ));
    }
    if p.samples.is_some() || p.max_twists.is_some() || p.split.is_some() {
        return Err(SpaceError::invalid_param(
            "samples",
            "a pattern database job takes only --pattern-tiles and --level",
        ));
    }
    let k = p.pattern_tiles as usize;
    pdb::check_tiles(k)?;
    if let Some(l) = p.level {
        if !(1..=LEVELS[k]).contains(&l) {
            return Err(SpaceError::invalid_param(
                "level",
                format!(
                    "{l} is outside 1..={}: the patterns of {k} tiles are at most {} twists from solved",
                    LEVELS[k], LEVELS[k]
                ),
            ));
        }
    }
    // The depth and seed mean nothing here: left at their defaults, every job names the same database.
    let canonical = BrainballParams {
        mode: Some(Mode::Pattern),
        level: p.level,
        pattern_tiles: p.pattern_tiles,
        ..BrainballParams::empty()
    };
    Ok(BrainballJob::new(canonical, Mode::Pattern, Vec::new()))
}

/// The pattern job a job names as its input: the database of `k` tiles, or one of its levels.
pub fn input(k: u8, level: Option<u8>) -> Option<JobInput> {
    let job = build_job(BrainballParams {
        mode: Some(Mode::Pattern),
        level,
        pattern_tiles: k,
        ..BrainballParams::empty()
    })
    .ok()?;
    Some(JobInput {
        space: SPACE_NAME.to_string(),
        params: job.params(),
    })
}

impl BrainballJob {
    fn tiles(&self) -> usize {
        self.params.pattern_tiles as usize
    }

    pub(super) fn pattern_max_chunks(&self) -> u64 {
        match (self.params.level, layout(self.tiles())) {
            (Some(_), Ok(l)) => u64::from(l.segments()),
            (None, _) => MAX_DB_CHUNKS,
            (Some(_), Err(_)) => 1,
        }
    }

    /// A level reads the two before it (those that are jobs); the database reads every level.
    pub(super) fn pattern_inputs(&self) -> Vec<JobInput> {
        let k = self.params.pattern_tiles;
        let levels: Vec<u8> = match self.params.level {
            Some(l) => (1..l).rev().take(2).collect(),
            None => (1..=LEVELS[k as usize]).collect(),
        };
        levels
            .into_iter()
            .filter_map(|l| input(k, Some(l)))
            .collect()
    }

    pub(super) fn bind_pattern(&self, artifacts: &[&[u8]]) -> Result<Arc<dyn Job>, SpaceError> {
        let layout = layout(self.tiles())?;
        let want: Vec<u8> = match self.params.level {
            Some(l) => (1..l).rev().take(2).collect(),
            None => (1..=LEVELS[self.tiles()]).collect(),
        };
        if artifacts.len() != want.len() {
            return Err(SpaceError::BadParams {
                space: SPACE_NAME,
                reason: format!(
                    "this pattern job takes {} input artifacts, {} were given",
                    want.len(),
                    artifacts.len()
                ),
            });
        }
        let mut levels = want
            .iter()
            .zip(artifacts)
            .map(|(&l, a)| Visited::from_bytes(&layout, l, a))
            .collect::<Result<Vec<_>, _>>()?;
        if self.params.level.is_none() {
            levels.insert(0, Visited::solved(&layout));
            let all = patterns(self.tiles()) as u64;
            let held = levels.last().map_or(0, Visited::count);
            if held != all {
                return Err(bad(format!(
                    "the {} levels hold {held} of the {all} patterns: the level count of {} tiles is wrong",
                    LEVELS[self.tiles()],
                    self.tiles()
                )));
            }
        }
        Ok(Arc::new(BrainballJob {
            levels: Some(Arc::new(levels)),
            ..self.clone()
        }))
    }

    pub(super) fn run_pattern_chunk(
        &self,
        at: ChunkId,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError> {
        let layout = layout(self.tiles())?;
        let unbound = || SpaceError::BadParams {
            space: SPACE_NAME,
            reason: "this pattern chunk needs its levels: bind its input artifacts first".into(),
        };
        let bound = self.levels.as_deref().map(Vec::as_slice);
        match self.params.level {
            // Levels 1 and 2 start from V@0 (and V@-1), which no job stores.
            Some(1) => level_chunk(&layout, &Visited::solved(&layout), None, at, ctl),
            Some(2) => {
                let v = bound.and_then(|b| b.first()).ok_or_else(unbound)?;
                let solved = Visited::solved(&layout);
                level_chunk(&layout, v, Some(&solved), at, ctl)
            }
            Some(_) => match bound {
                Some([v, b]) => level_chunk(&layout, v, Some(b), at, ctl),
                _ => Err(unbound()),
            },
            None => database_chunk(&layout, bound.ok_or_else(unbound)?, at, ctl),
        }
    }

    pub(super) fn verify_pattern(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        match self.params.level {
            Some(_) => check_level_chunk(&layout(self.tiles())?, at, out),
            None => check_database_chunk(self.tiles(), at, out),
        }
    }

    pub(super) fn merge_pattern(
        &self,
        artifacts: &mut dyn Iterator<Item = &[u8]>,
    ) -> Result<Vec<u8>, SpaceError> {
        match self.params.level {
            Some(l) => merge_level(&layout(self.tiles())?, l, artifacts),
            None => merge_database(self.tiles(), artifacts),
        }
    }

    pub(super) fn pattern_result(&self, answer: &sweep_space::Answer) -> Value {
        let k = self.tiles();
        let bytes = &answer.artifact;
        let digest = blake3::hash(bytes).to_hex().to_string();
        match self.params.level {
            Some(l) => json!({
                "mode": "pattern",
                "tiles": k,
                "level": l,
                "found": sweep_space::json_u128(answer.tally.counter("found")),
                "bytes": bytes.len(),
                "digest": digest,
            }),
            None => match Pdb::from_bytes(bytes) {
                Ok(p) => json!({
                    "mode": "pattern",
                    "tiles": k,
                    "patterns": p.len(),
                    "max": p.max(),
                    "histogram": p.histogram(),
                    "bytes": bytes.len(),
                    "digest": digest,
                }),
                Err(e) => json!({"mode": "pattern", "tiles": k, "error": e.to_string()}),
            },
        }
    }
}

/// The rest of a stored table's line for people: its size and digest, then its count of positions per number
/// of twists when the answer has one.
pub(crate) fn write_stored(s: &mut String, result: &Value) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{} bytes, blake3 {}",
        result["bytes"],
        result["digest"].as_str().unwrap_or("")
    );
    if let Some(h) = result["histogram"].as_array() {
        for (d, n) in h.iter().enumerate() {
            let _ = writeln!(s, "  {d:2} twists: {n}");
        }
    }
}

/// The pattern jobs' answers for people.
pub fn render(result: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let k = &result["tiles"];
    if let Some(e) = result["error"].as_str() {
        let _ = writeln!(s, "{k}-tile pattern database not available: {e}");
    } else if let Some(l) = result["level"].as_u64() {
        let _ = write!(
            s,
            "{k}-tile pattern database, level {l}: {} patterns first reached, ",
            result["found"]
        );
        write_stored(&mut s, result);
    } else {
        let _ = write!(
            s,
            "{k}-tile pattern database: {} patterns, at most {} twists, ",
            result["patterns"], result["max"]
        );
        write_stored(&mut s, result);
    }
    s
}
