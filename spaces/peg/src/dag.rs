//! `count` and `positions` as a DAG of jobs, so that more workers make them proportionally faster.
//!
//! Why: a chunk that needs a whole search behind it cannot be split without repeating that search. Here every
//! job is one step of a layered search whose previous step is an input artifact, so a chunk only does its own
//! share of one step (the kernels and the algebra are in [`super::layers`]). The jobs, all of the `peg` space,
//! told apart by hidden parameters (`--stage`, `--layer`, `--shards`, see [`super::PegParams`]):
//! - `layer k` (`L_k`): the canonical positions after k jumps with their class weights. Input: `L_{k-1}` (none
//!   for k = 0). Chunk i of S expands the positions of `L_{k-1}` whose owner hash is i mod S; the merge sums
//!   the weights of positions reached from several chunks.
//! - `path k` (`P_k`): the positions of `L_k` on a path to the goal, with the layer's four figures. Inputs:
//!   `L_k` and `P_{k+1}` (only `L_k` for the one-peg layer). Chunk i owns the same hash class of `L_k`.
//! - `count` (the user's job): for a goal hole, the join of the middle forward layer `L_m` (m = half the
//!   depth) with the dual layer `L'_{depth-m}` of the game started at the goal (start and goal swapped: the
//!   same jobs as `L` when start = goal). For goal `any`, the one-peg layer `L_depth`, whose weights are the
//!   answer. Chunk i joins the classes it owns; the merge is the engine's sum of the `count` counters.
//! - `positions` (the user's job): inputs `P_0 .. P_depth`; chunk i reports the figures of the layers k with
//!   k = i mod n as the same counters the single-chunk method reported, so `result` is unchanged.
//!
//! Goal `any` needs no dual game for `positions`: the on-path chain walks backwards from the one-peg layer,
//! which holds only goals. (A dual join would need one dual game per possible last hole, each with its own
//! symmetry group.) Every position of the DAG is expanded once by a layer job and examined once by a path
//! job, whatever S; the jobs differ by S only in how many chunks share that work.
//!
//! Measured on the English centre game (in-process driver of `dag_tests.rs`, 16 shards, a loaded 2-core
//! machine, the single-chunk methods measured on it alongside): `count` 40,861,647,040,079,968 in 16.8 s of
//! CPU and 260 MB (layers 0..16: 6.26 M expansions, then 2.6 M joins at layer 15), against 84.6 s and 1.63 GB
//! for the single-chunk count; `positions` in 65 s of CPU and 540 MB (23.5 M expansions and 23.5 M on-path
//! tests), against 33.8 s and 1.46 GB. Node totals are equal with 1 and 16 shards; from layer 8 on the largest
//! chunk of a job is within 2% of the mean (total nodes / sum of each job's largest chunk = 15.9 of 16). About
//! a quarter of the CPU is the coordinator's share (the verifier's canonical-form test, the k-way merges), done
//! one job at a time. `positions` costs twice the single-chunk CPU because its layers carry the count's u128
//! weights (so both modes share them), every artifact is encoded, verified and merged, and the on-path chain
//! expands every position a second time; what it buys is a split into shards without repeated work.

use std::sync::Arc;

use serde_json::{json, Value};

use super::game::{Game, Goal};
use super::layers::{self, Figures, Lookup, SortedSet};
pub use super::params::Stage;
use super::params::{layer_counter, Mode, PegParams, LAYER_FIELDS, SPACE_NAME};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, JobInput, Plan, SpaceError, Span};

/// Shards of one step: more would leave most chunks with nothing to do on any board of this space.
pub const MAX_SHARDS: u32 = 4096;
/// The user's `--chunks` for a `count` or `positions` job.
pub const MAX_TOP_CHUNKS: u64 = 1024;

/// Every count chunk walks the whole join layer and joins the classes it owns (by owner hash), so the items of
/// any of its runs are indices of the whole layer: the range of a one-chunk plan over the layer.
const WHOLE_LAYER: ChunkId = ChunkId {
    n_chunks: 1,
    chunk: 0,
};

/// The part of the join layer (`items` positions) a run of a count chunk covers: the span its state names, or
/// the whole layer.
fn join_part(items: u128, state: Option<&str>) -> Result<Span, SpaceError> {
    Span::of(WHOLE_LAYER, items, 1, state)
}

/// Default shards per step: enough to feed 16 workers on the large boards; the triangle's layers are tiny.
fn default_shards(game: &Game) -> u32 {
    if game.board.n_holes > 24 {
        16
    } else {
        4
    }
}

/// A job's place in the DAG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Layer(u32),
    Path(u32),
    Count,
    Positions,
}

/// The loaded input artifacts of a bound job.
#[derive(Debug)]
enum Bound {
    /// The previous layer (checked, decoded once for every chunk the process runs).
    Layer(Lookup),
    /// This job's layer, and the next layer's on-path positions (none for the one-peg layer).
    Path {
        layer: Vec<u64>,
        next: Option<SortedSet>,
    },
    /// The forward layer and, for a goal hole, the dual layer.
    Join {
        forward: Lookup,
        dual: Option<Lookup>,
    },
    /// Figures per layer.
    Positions(Vec<Figures>),
}

#[derive(Clone, Debug)]
pub struct Dag {
    kind: Kind,
    shards: Option<u32>,
    bound: Option<Arc<Bound>>,
}

/// Internal stages ignore `mode` and `seed`: they are reset to their defaults, so the same stage reached from a
/// `count` and from a `positions` job (or typed by hand) has the same canonical parameters and is one job.
pub fn canonical(params: PegParams) -> PegParams {
    if params.stage.is_some() {
        PegParams {
            mode: Mode::Solve,
            seed: 0,
            ..params
        }
    } else {
        params
    }
}

impl Dag {
    /// The DAG role of a job with these parameters, validated; `None` for a plain `solve` job.
    pub fn new(params: &PegParams, game: &Game) -> Result<Option<Dag>, SpaceError> {
        let last = game.depth();
        if let Some(s) = params.shards {
            if s == 0 || s > MAX_SHARDS {
                return Err(SpaceError::invalid_param(
                    "shards",
                    format!("{s} is not between 1 and {MAX_SHARDS}"),
                ));
            }
        }
        let kind = match (params.stage, params.layer) {
            (None, Some(k)) => {
                return Err(SpaceError::invalid_param(
                    "layer",
                    format!("layer {k} given without a stage (`--stage layer|path`)"),
                ))
            }
            (Some(_), None) => {
                return Err(SpaceError::invalid_param(
                    "layer",
                    "a stage needs its layer (`--layer K`)",
                ))
            }
            (Some(_), Some(k)) if k > last => {
                return Err(SpaceError::invalid_param(
                    "layer",
                    format!(
                        "{k} is beyond the last layer of this game ({last}: one peg left after {last} jumps)"
                    ),
                ))
            }
            (Some(Stage::Layer), Some(k)) => Kind::Layer(k),
            (Some(Stage::Path), Some(k)) => Kind::Path(k),
            (None, None) => match params.mode {
                Mode::Count => Kind::Count,
                Mode::Positions => Kind::Positions,
                Mode::Solve => {
                    if params.shards.is_some() {
                        return Err(SpaceError::invalid_param(
                            "shards",
                            "only `count` and `positions` are split into shards",
                        ));
                    }
                    return Ok(None);
                }
            },
        };
        Ok(Some(Dag {
            kind,
            shards: params.shards,
            bound: None,
        }))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Internal stages (not the user's `count` / `positions` job).
    pub fn is_stage(&self) -> bool {
        matches!(self.kind, Kind::Layer(_) | Kind::Path(_))
    }

    /// The middle layer of a count join (goal hole) or the one-peg layer (goal `any`).
    fn join_layer(game: &Game) -> u32 {
        match game.goal {
            Goal::Hole(_) => game.depth() / 2,
            Goal::Any => game.depth(),
        }
    }

    fn max_chunks(&self) -> u64 {
        if self.is_stage() {
            u64::from(MAX_SHARDS)
        } else {
            MAX_TOP_CHUNKS
        }
    }

    pub fn plan(&self, game: &Game, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let s = u64::from(self.shards.unwrap_or_else(|| default_shards(game)));
        // Early layers have few positions: 1, 2, 8, ... on the English board; a shard per position at most.
        let cap = |k: u32| 1u64 << k.min(20);
        let default = match self.kind {
            Kind::Layer(0) => 1,
            Kind::Layer(k) => s.min(cap(k - 1)),
            Kind::Path(k) => s.min(cap(k)),
            Kind::Count => s,
            Kind::Positions => 1,
        };
        Ok(Plan {
            n_chunks: Plan::chunk_count(requested, self.max_chunks(), default)?,
            total_nodes: None,
        })
    }

    /// The jobs this one reads, in the order [`Dag::bind`] expects their artifacts.
    pub fn inputs(&self, params: &PegParams, game: &Game) -> Vec<JobInput> {
        let stage = |stage: Stage, layer: u32, dual: bool| {
            let (start, goal) = if dual {
                (params.goal.clone(), params.start.clone())
            } else {
                (params.start.clone(), params.goal.clone())
            };
            let p = PegParams {
                start,
                goal,
                seed: 0,
                mode: Mode::Solve,
                stage: Some(stage),
                layer: Some(layer),
                shards: self.shards,
                ..params.clone()
            };
            JobInput {
                space: SPACE_NAME.to_string(),
                params: serde_json::to_value(&p).unwrap_or(Value::Null),
            }
        };
        let last = game.depth();
        match self.kind {
            Kind::Layer(0) => Vec::new(),
            Kind::Layer(k) => vec![stage(Stage::Layer, k - 1, false)],
            Kind::Path(k) if k == last => vec![stage(Stage::Layer, k, false)],
            Kind::Path(k) => vec![
                stage(Stage::Layer, k, false),
                stage(Stage::Path, k + 1, false),
            ],
            Kind::Count => {
                let m = Self::join_layer(game);
                match game.goal {
                    Goal::Hole(_) => vec![
                        stage(Stage::Layer, m, false),
                        stage(Stage::Layer, last - m, true),
                    ],
                    Goal::Any => vec![stage(Stage::Layer, m, false)],
                }
            }
            Kind::Positions => (0..=last).map(|k| stage(Stage::Path, k, false)).collect(),
        }
    }

    /// This job with its input artifacts loaded and checked (structure, layer numbers, peg counts; the
    /// canonical forms were checked when the input chunks were accepted).
    pub fn bind(
        &self,
        params: &PegParams,
        game: &Game,
        artifacts: &[&[u8]],
    ) -> Result<Dag, SpaceError> {
        let want = self.inputs(params, game).len();
        if artifacts.len() != want || want == 0 {
            return Err(SpaceError::BadParams {
                space: "peg",
                reason: format!(
                    "this job takes {want} input artifacts, {} were given",
                    artifacts.len()
                ),
            });
        }
        let last = game.depth();
        let read = |bytes: &[u8], layer: u32| {
            Lookup::read(bytes, layer, game.board.holes, layers::pegs_at(game, layer))
        };
        let bound = match self.kind {
            Kind::Layer(k) => Bound::Layer(read(artifacts[0], k - 1)?),
            Kind::Path(k) => {
                let next = if k < last {
                    Some(SortedSet::new(layers::read_path(artifacts[1], k + 1)?.1))
                } else {
                    None
                };
                Bound::Path {
                    layer: read(artifacts[0], k)?.positions.into_keys(),
                    next,
                }
            }
            Kind::Count => {
                let m = Self::join_layer(game);
                let dual = match game.goal {
                    // The dual layer holds the complements of layer m: m + 1 pegs.
                    Goal::Hole(_) => Some(Lookup::read(
                        artifacts[1],
                        last - m,
                        game.board.holes,
                        m + 1,
                    )?),
                    Goal::Any => None,
                };
                Bound::Join {
                    forward: read(artifacts[0], m)?,
                    dual,
                }
            }
            Kind::Positions => Bound::Positions(
                artifacts
                    .iter()
                    .enumerate()
                    .map(|(k, a)| layers::read_path(a, k as u32).map(|(f, _)| f))
                    .collect::<Result<_, _>>()?,
            ),
        };
        Ok(Dag {
            bound: Some(Arc::new(bound)),
            ..self.clone()
        })
    }

    pub fn run_chunk(
        &self,
        game: &Game,
        at: ChunkId,
        ctl: &Control,
    ) -> Result<ChunkOutput, SpaceError> {
        at.check(self.max_chunks())?;
        let mut out = ChunkOutput::default();
        if self.kind == Kind::Layer(0) {
            let e = layers::start_layer(game, at.chunk)?;
            out.count("positions", u128::from(e.entries));
            out.nodes = e.nodes;
            out.artifact = e.artifact;
            return Ok(out);
        }
        let Some(bound) = self.bound.as_deref() else {
            return Err(SpaceError::BadParams {
                space: "peg",
                reason: format!(
                    "{:?} needs its input artifacts: bind them first (`Job::bind_inputs`)",
                    self.kind
                ),
            });
        };
        match (self.kind, bound) {
            (Kind::Layer(k), Bound::Layer(prev)) => {
                let e = layers::expand(game, k, prev, at, ctl)?;
                out.count("positions", u128::from(e.entries));
                out.nodes = e.nodes;
                out.artifact = e.artifact;
            }
            (Kind::Path(k), Bound::Path { layer, next }) => {
                let m = layers::mark_on_path(game, k, layer, next.as_ref(), at, ctl)?;
                for (name, v) in LAYER_FIELDS.iter().zip(m.figures.as_array()) {
                    out.count(name, u128::from(v));
                }
                out.nodes = m.nodes;
                out.artifact = m.artifact;
            }
            (Kind::Count, Bound::Join { forward, dual }) => {
                let part = join_part(forward.len() as u128, ctl.resume_state())?;
                let j = layers::join_count(game, forward, dual.as_ref(), part, at, ctl)?;
                out.count("count", j.count);
                out.count("classes", u128::from(j.classes));
                out.nodes = j.nodes;
            }
            (Kind::Positions, Bound::Positions(figs)) => {
                for (k, f) in figs.iter().enumerate() {
                    if k as u64 % at.n_chunks != at.chunk {
                        continue;
                    }
                    let pegs = layers::pegs_at(game, k as u32) as usize;
                    for (what, v) in LAYER_FIELDS.iter().zip(f.as_array()) {
                        if v > 0 {
                            out.count(&layer_counter(pegs, what), u128::from(v));
                        }
                    }
                    out.nodes += 1;
                }
            }
            _ => {
                return Err(SpaceError::BadParams {
                    space: "peg",
                    reason: format!("{:?} was bound to the inputs of another stage", self.kind),
                })
            }
        }
        Ok(out)
    }

    /// Only the count join splits. A stage chunk's artifact is merged as one chunk's (the engine keeps one output
    /// per chunk of a job with artifacts), and a layer chunk's `positions` counts distinct successors, which two
    /// pieces reaching the same one would count twice; a `positions` chunk only reports a few figures its inputs
    /// already hold, microseconds of work with nothing worth giving away.
    pub fn splits(&self) -> bool {
        self.kind == Kind::Count
    }

    fn check_splits(&self) -> Result<(), SpaceError> {
        if !self.splits() {
            return Err(SpaceError::Verification(format!(
                "peg {:?} chunks do not split: only the count join does",
                self.kind
            )));
        }
        Ok(())
    }

    /// The size of the count join's layer when the job is bound; unbound (a coordinator checking a split it
    /// recorded), only the shape of a split can be checked, and a run refuses a part past the layer's end.
    fn join_items(&self) -> u128 {
        match self.bound.as_deref() {
            Some(Bound::Join { forward, .. }) => forward.len() as u128,
            _ => u128::from(u64::MAX),
        }
    }

    /// Checks a split of a count chunk: spans of the join layer's indices that cover the parent exactly once.
    pub fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        at.check(self.max_chunks())?;
        Span::check_split(WHOLE_LAYER, self.join_items(), 1, parent, kept, given)
    }

    /// The part `state` names, for checking a piece: the classes it joined lie in its span, so there are at most
    /// as many as its indices.
    pub fn check_part(
        &self,
        at: ChunkId,
        state: &str,
        out: &ChunkOutput,
    ) -> Result<(), SpaceError> {
        self.check_splits()?;
        at.check(self.max_chunks())?;
        let part = Span::of(WHOLE_LAYER, self.join_items(), 1, Some(state))?;
        let classes = out.counters.get("classes").copied().unwrap_or(0);
        if classes > part.len() {
            return Err(SpaceError::Verification(format!(
                "{classes} classes joined in a part of {} positions",
                part.len()
            )));
        }
        Ok(())
    }

    /// Checks a stage chunk's output without its inputs: a sorted list of canonical positions of the layer's
    /// peg count, and counters that match it. (The user's jobs are checked by the space's own verifier.)
    pub fn verify_stage(
        &self,
        game: &Game,
        at: ChunkId,
        out: &ChunkOutput,
    ) -> Result<(), SpaceError> {
        let bad = |s: String| Err(SpaceError::Verification(s));
        at.check(self.max_chunks())?;
        if !out.solutions.is_empty() {
            return bad("a peg stage lists no solutions".into());
        }
        match self.kind {
            Kind::Layer(k) => {
                let n = layers::check_layer(game, k, &out.artifact)?;
                if out.counters.len() != 1 || out.counters.get("positions") != Some(&u128::from(n))
                {
                    return bad(format!(
                        "counters {:?} do not match the {n} positions of the artifact",
                        out.counters
                    ));
                }
                if k == 0 && n != u64::from(at.chunk == 0) {
                    return bad("the start layer has one position, in chunk 0".into());
                }
            }
            Kind::Path(k) => {
                let (fig, list) = layers::read_path(&out.artifact, k)?;
                let pegs = layers::pegs_at(game, k);
                let mut raw = 0u64;
                for &p in &list {
                    if p & !game.board.holes != 0
                        || p.count_ones() != pegs
                        || game.canon(&game.game_group, p) != p
                        || super::game::owner_hash(p) % at.n_chunks != at.chunk
                    {
                        return bad(format!(
                            "{p:#x} is not a canonical {pegs}-peg position owned by {at}"
                        ));
                    }
                    raw += game.orbit_size(&game.game_group, p);
                }
                let g = game.game_group.len() as u64;
                let consistent = fig.on_path_raw == raw
                    && fig.on_path <= fig.reachable
                    && fig.reachable <= fig.reachable_raw
                    && fig.reachable_raw <= fig.reachable.saturating_mul(g)
                    && fig.on_path_raw <= fig.reachable_raw;
                if !consistent {
                    return bad(format!("inconsistent figures {fig:?} for layer {k}"));
                }
                let expect: std::collections::BTreeMap<String, u128> = LAYER_FIELDS
                    .iter()
                    .zip(fig.as_array())
                    .map(|(n, v)| (n.to_string(), u128::from(v)))
                    .collect();
                if out.counters != expect {
                    return bad(format!(
                        "counters {:?} do not match the artifact's figures {fig:?}",
                        out.counters
                    ));
                }
            }
            Kind::Count | Kind::Positions => {
                return Err(SpaceError::BadParams {
                    space: "peg",
                    reason: "not a stage".into(),
                })
            }
        }
        Ok(())
    }

    pub fn merge(&self, parts: &mut dyn Iterator<Item = &[u8]>) -> Result<Vec<u8>, SpaceError> {
        let parts: Vec<&[u8]> = parts.collect();
        match self.kind {
            Kind::Layer(k) => layers::merge_layers(k, &parts),
            Kind::Path(k) => layers::merge_paths(k, &parts),
            Kind::Count | Kind::Positions => Ok(Vec::new()),
        }
    }

    /// The `result` of a stage job: what its merged artifact holds.
    pub fn stage_result(&self, game: &Game, answer: &Answer) -> Value {
        let head = json!({
            "board": game.board.kind,
            "start": game.board.name(game.start_hole),
            "goal": match game.goal {
                Goal::Hole(h) => game.board.name(h),
                Goal::Any => "any".into(),
            },
            "symmetries": game.game_group.len(),
        });
        let body = match self.kind {
            Kind::Layer(k) => json!({
                "stage": "layer",
                "layer": k,
                "pegs": layers::pegs_at(game, k),
                "positions": layers::layer_header(&answer.artifact).ok().map(|(_, n)| n),
                "bytes": answer.artifact.len(),
            }),
            Kind::Path(k) => {
                let mut v = json!({"stage": "path", "layer": k, "pegs": layers::pegs_at(game, k)});
                for f in LAYER_FIELDS {
                    v[f] = sweep_space::json_u128(answer.tally.counter(f));
                }
                v
            }
            Kind::Count | Kind::Positions => Value::Null,
        };
        let mut head = head;
        if let (Some(h), Some(b)) = (head.as_object_mut(), body.as_object()) {
            for (k, v) in b {
                h.insert(k.clone(), v.clone());
            }
        }
        head
    }

    pub fn stage_text(result: &Value) -> String {
        let mut s = format!(
            "peg solitaire, {} board, start {}, goal {}: {} {} ({} pegs)",
            result["board"].as_str().unwrap_or_default(),
            result["start"].as_str().unwrap_or_default(),
            result["goal"].as_str().unwrap_or_default(),
            result["stage"].as_str().unwrap_or_default(),
            result["layer"],
            result["pegs"],
        );
        if result["stage"] == "layer" {
            s.push_str(&format!(
                ": {} positions up to symmetry, {} bytes\n",
                result["positions"], result["bytes"]
            ));
        } else {
            s.push_str(&format!(
                ": {} reachable ({} raw), {} on a path to the goal ({} raw)\n",
                result["reachable"],
                result["reachable_raw"],
                result["on_path"],
                result["on_path_raw"]
            ));
        }
        s
    }
}
