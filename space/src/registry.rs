//! The registry: a value listing the search spaces one process knows, passed to the coordinator, the workers and
//! the command line. A user's crate builds its own (the built-in spaces plus its own) and hands it to `sweep`.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use crate::{ChunkId, ChunkOutput, Control, FileOption, Job, Plan, SearchSpace, SpaceError};

/// A registry entry: a [`SearchSpace`] with its types erased. Implement it by hand only for a space whose
/// parameters are not a clap/serde struct; [`Registry::with`] wraps a [`SearchSpace`] for you.
pub trait Space: Send + Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    /// Parses the space's options (everything after the space name on the command line).
    fn parse_args(&self, args: &[String]) -> Result<SpaceJob, SpaceError>;
    /// Rebuilds a job from its canonical parameters, rejecting unknown or ill-typed fields.
    fn parse_params(&self, params: &serde_json::Value) -> Result<SpaceJob, SpaceError>;
    /// Options whose value is a file the command line reads ([`SearchSpace::FILE_OPTIONS`]).
    fn file_options(&self) -> &'static [FileOption] {
        &[]
    }
}

/// The spaces one process knows, in the order `sweep spaces` lists them. Cheap to clone.
#[derive(Clone, Default)]
pub struct Registry {
    spaces: Vec<Arc<dyn Space>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a space; an error if its name is taken.
    pub fn add(&mut self, space: Arc<dyn Space>) -> Result<(), SpaceError> {
        if self.spaces.iter().any(|s| s.name() == space.name()) {
            return Err(SpaceError::DuplicateSpace(space.name().to_string()));
        }
        self.spaces.push(space);
        Ok(())
    }

    /// Adds the typed space `S`, for building a registry in one expression.
    ///
    /// # Panics
    /// If a space of the same name is already registered: two spaces with one name is a mistake in the
    /// program that builds the registry, found the first time it starts.
    pub fn with<S: SearchSpace>(self) -> Registry {
        self.with_space(Arc::new(Registered::<S>(PhantomData)))
    }

    /// [`Registry::with`] for a hand-written [`Space`].
    ///
    /// # Panics
    /// As [`Registry::with`].
    pub fn with_space(mut self, space: Arc<dyn Space>) -> Registry {
        if let Err(e) = self.add(space) {
            panic!("{e}");
        }
        self
    }

    /// Every space of `other` after these; an error names the first name both have.
    pub fn merge(mut self, other: &Registry) -> Result<Registry, SpaceError> {
        for s in &other.spaces {
            self.add(s.clone())?;
        }
        Ok(self)
    }

    /// This registry without the space called `name` (a worker drops `exec` unless allowed to run it).
    pub fn without(mut self, name: &str) -> Registry {
        self.spaces.retain(|s| s.name() != name);
        self
    }

    pub fn spaces(&self) -> impl Iterator<Item = &dyn Space> {
        self.spaces.iter().map(|s| s.as_ref())
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.spaces.iter().map(|s| s.name()).collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.spaces.iter().any(|s| s.name() == name)
    }

    /// The space called `name`, or an error that lists the known ones.
    pub fn lookup(&self, name: &str) -> Result<&dyn Space, SpaceError> {
        self.spaces()
            .find(|s| s.name() == name)
            .ok_or_else(|| SpaceError::UnknownSpace {
                name: name.to_string(),
                known: self.names().join(", "),
            })
    }

    /// Rebuilds a job from the space name and canonical parameters that travel with it.
    pub fn job_from_params(
        &self,
        space: &str,
        params: &serde_json::Value,
    ) -> Result<SpaceJob, SpaceError> {
        self.lookup(space)?.parse_params(params)
    }
}

struct Registered<S>(PhantomData<S>);

impl<S: SearchSpace> Space for Registered<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn about(&self) -> &'static str {
        S::ABOUT
    }

    fn file_options(&self) -> &'static [FileOption] {
        S::FILE_OPTIONS
    }

    fn parse_args(&self, args: &[String]) -> Result<SpaceJob, SpaceError> {
        use clap::{Args, FromArgMatches};
        let cmd = S::Params::augment_args(
            clap::Command::new(S::NAME)
                .about(S::ABOUT)
                .no_binary_name(true)
                // `--points -1` is a bad value for --points, not an unknown flag `-1`.
                .allow_negative_numbers(true),
        );
        let matches = cmd.try_get_matches_from(args).map_err(|e| match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                SpaceError::Help(e.render().to_string())
            }
            _ => SpaceError::Usage(e.render().to_string().trim_end().to_string()),
        })?;
        let params =
            S::Params::from_arg_matches(&matches).map_err(|e| SpaceError::Usage(e.to_string()))?;
        framed::<S>(params)
    }

    fn parse_params(&self, params: &serde_json::Value) -> Result<SpaceJob, SpaceError> {
        // The error names the field (`points: invalid type: string "x", expected u32`): serde's own message does
        // not say where, and these parameters come from a Submit or a stored job record, not from a person who
        // just typed them.
        let params: S::Params = serde_path_to_error::deserialize(params.clone()).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            SpaceError::BadParams {
                space: S::NAME,
                reason: if path == "." {
                    inner.to_string()
                } else {
                    format!("{path}: {inner}")
                },
            }
        })?;
        framed::<S>(params)
    }
}

fn framed<S: SearchSpace>(params: S::Params) -> Result<SpaceJob, SpaceError> {
    let job = S::build(params.clone())?;
    let parsed = serde_json::to_value(&params).map_err(|e| SpaceError::BadParams {
        space: S::NAME,
        reason: format!("parameters do not serialise: {e}"),
    })?;
    Ok(SpaceJob::new(S::NAME, parsed, Arc::new(job)))
}

/// A job of a registered space, as the coordinator, the workers and the command line hold it: the space's name,
/// the job's canonical parameters, and the space's own [`Job`].
///
/// It is the space's job behind a pointer ([`Deref`] to `dyn Job`), with the framework's rules added where
/// they apply, so a space's own code never has to enforce them: chunk indices are checked against the plan
/// before [`Job::run_chunk`], [`Job::verify`] and [`Job::verify_counts`] see them, a plan has at least one
/// chunk, a chunk uses at least one thread, a memory limit of zero is none, and an estimate is finite and not
/// negative. Those methods are this type's own and take precedence over the trait's; every other method of
/// [`Job`] is the space's, reached through the pointer. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SpaceJob {
    space: &'static str,
    params: Arc<serde_json::Value>,
    job: Arc<dyn Job>,
}

impl Deref for SpaceJob {
    type Target = dyn Job;

    fn deref(&self) -> &Self::Target {
        self.job.as_ref()
    }
}

/// The space's own job, unchecked, as [`Deref`] gives it: for tests and benches that drive a kernel directly.
impl AsRef<dyn Job> for SpaceJob {
    fn as_ref(&self) -> &(dyn Job + 'static) {
        self.job.as_ref()
    }
}

impl SpaceJob {
    /// A job of the space `space` built from `params`. The job's own canonical form of its parameters
    /// ([`Job::params`]) wins over `params` as parsed, so two spellings of one search store as one. For a
    /// hand-written [`Space`]; [`Registry::with`] builds these itself.
    pub fn new(space: &'static str, params: serde_json::Value, job: Arc<dyn Job>) -> SpaceJob {
        let params = match job.params() {
            serde_json::Value::Null => params,
            own => own,
        };
        SpaceJob {
            space,
            params: Arc::new(params),
            job,
        }
    }

    pub fn space(&self) -> &'static str {
        self.space
    }

    /// The canonical parameters: what is stored and sent with the job, and rebuilds it in any process.
    pub fn params(&self) -> &serde_json::Value {
        &self.params
    }

    /// The space's own job, for code that needs it as a trait object of its own.
    pub fn job(&self) -> &Arc<dyn Job> {
        &self.job
    }

    fn check(at: ChunkId) -> Result<(), SpaceError> {
        at.check(u64::MAX)
    }

    pub fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
        let plan = self.job.plan(requested)?;
        if plan.n_chunks == 0 {
            return Err(SpaceError::InvalidParam {
                name: "chunks",
                reason: "the space planned no chunks".into(),
            });
        }
        Ok(plan)
    }

    pub fn run_chunk(&self, at: ChunkId, ctl: &Control) -> Result<ChunkOutput, SpaceError> {
        Self::check(at)?;
        self.job.run_chunk(at, ctl)
    }

    pub fn verify(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        Self::check(at)?;
        self.job.verify(at, out)
    }

    pub fn verify_counts(&self, at: ChunkId, out: &ChunkOutput) -> Result<(), SpaceError> {
        Self::check(at)?;
        self.job.verify_counts(at, out)
    }

    pub fn check_split(
        &self,
        at: ChunkId,
        parent: Option<&str>,
        kept: &str,
        given: &str,
    ) -> Result<(), SpaceError> {
        Self::check(at)?;
        self.job.check_split(at, parent, kept, given)
    }

    pub fn verify_part(
        &self,
        at: ChunkId,
        part: &str,
        out: &ChunkOutput,
        listed: bool,
    ) -> Result<(), SpaceError> {
        Self::check(at)?;
        self.job.verify_part(at, part, out, listed)
    }

    pub fn threads_per_chunk(&self) -> u32 {
        self.job.threads_per_chunk().max(1)
    }

    /// Zero bytes is no limit at all: every worker meets it, so the job is shown and stored as having none.
    pub fn chunk_memory(&self) -> Option<u64> {
        self.job.chunk_memory().filter(|&b| b > 0)
    }

    /// A space's arithmetic gone wrong must not become a negative or infinite job size downstream.
    pub fn estimate_chunk_nodes(&self, at: ChunkId) -> Option<f64> {
        Self::check(at).ok()?;
        self.job
            .estimate_chunk_nodes(at)
            .filter(|e| e.is_finite() && *e >= 0.0)
    }

    /// This job with its inputs' artifacts and shipped files loaded ([`Job::bind_inputs`]), under the same
    /// name and parameters.
    pub fn bind_inputs(&self, artifacts: &[&[u8]]) -> Result<SpaceJob, SpaceError> {
        Ok(SpaceJob {
            space: self.space,
            params: self.params.clone(),
            job: self.job.bind_inputs(artifacts)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Answer;

    /// A space as a user would write it: no name, no parameters, no range checks of its own.
    #[derive(Debug)]
    struct Count(u64);

    #[derive(clap::Args, serde::Serialize, serde::Deserialize, Clone, Debug)]
    struct CountParams {
        #[arg(long)]
        up_to: u64,
    }

    impl Job for Count {
        fn plan(&self, requested: Option<u64>) -> Result<Plan, SpaceError> {
            Ok(Plan {
                n_chunks: Plan::chunk_count(requested, self.0.max(1), 4)?,
                total_nodes: Some(u128::from(self.0)),
            })
        }
        fn run_chunk(&self, at: ChunkId, _: &Control) -> Result<ChunkOutput, SpaceError> {
            let nodes = (0..self.0).filter(|i| i % at.n_chunks == at.chunk).count() as u64;
            Ok(ChunkOutput {
                nodes,
                ..Default::default()
            })
        }
        fn verify(&self, _at: ChunkId, _: &ChunkOutput) -> Result<(), SpaceError> {
            Ok(())
        }
        /// Careless arithmetic, as a space might have: negative past the middle, and no range check.
        fn estimate_chunk_nodes(&self, at: ChunkId) -> Option<f64> {
            Some((self.0 / at.n_chunks) as f64 - at.chunk as f64)
        }
        /// A MiB per counted number, so `--up-to 0` asks for a limit of nothing.
        fn chunk_memory(&self) -> Option<u64> {
            Some(self.0 << 20)
        }
        fn result(&self, a: &Answer) -> serde_json::Value {
            serde_json::json!({ "n": crate::json_u128(a.tally.nodes) })
        }
        fn render_text(&self, r: &serde_json::Value) -> String {
            r.to_string()
        }
    }

    struct CountSpace;
    impl SearchSpace for CountSpace {
        const NAME: &'static str = "count";
        const ABOUT: &'static str = "counts";
        type Params = CountParams;
        fn build(p: CountParams) -> Result<impl Job, SpaceError> {
            Ok(Count(p.up_to))
        }
    }

    #[test]
    fn the_framework_names_the_job_and_checks_its_chunks() {
        let reg = Registry::new().with::<CountSpace>();
        let job = reg
            .lookup("count")
            .unwrap()
            .parse_args(&["--up-to".into(), "10".into()])
            .unwrap();
        assert_eq!(job.space(), "count");
        assert_eq!(job.params(), &serde_json::json!({"up_to": 10}));
        let again = reg.job_from_params("count", job.params()).unwrap();
        assert_eq!(again.params(), job.params());
        assert_eq!(
            job.run_chunk(ChunkId::new(4, 4), &Control::new()),
            Err(SpaceError::ChunkOutOfRange {
                chunk: 4,
                n_chunks: 4
            })
        );
        assert!(job
            .verify(ChunkId::new(4, 9), &ChunkOutput::default())
            .unwrap_err()
            .to_string()
            .contains("chunk 9"));
        let total: u64 = (0..4)
            .map(|c| {
                job.run_chunk(ChunkId::new(4, c), &Control::new())
                    .unwrap()
                    .nodes
            })
            .sum();
        assert_eq!(total, 10);
        // Estimates are forwarded, and the framework keeps impossible ones (negative, chunks outside the plan)
        // from reaching the engine.
        assert_eq!(job.estimate_chunk_nodes(ChunkId::new(4, 1)), Some(1.0));
        assert_eq!(job.estimate_chunk_nodes(ChunkId::new(4, 3)), None);
        assert_eq!(job.estimate_chunk_nodes(ChunkId::new(4, 4)), None);
        // A chunk's memory is forwarded; a limit of zero bytes is none.
        assert_eq!(job.chunk_memory(), Some(10 << 20));
        let zero = reg
            .job_from_params("count", &serde_json::json!({"up_to": 0}))
            .unwrap();
        assert_eq!(zero.chunk_memory(), None);
    }

    #[test]
    fn names_are_unique_and_unknown_ones_are_listed() {
        let mut reg = Registry::new().with::<CountSpace>();
        assert_eq!(
            reg.add(Arc::new(Registered::<CountSpace>(PhantomData))),
            Err(SpaceError::DuplicateSpace("count".into()))
        );
        let err = reg
            .job_from_params("nope", &serde_json::json!({}))
            .unwrap_err();
        assert!(err.to_string().contains("known: count"), "{err}");
        assert!(!reg.clone().without("count").contains("count"));
        assert!(Registry::new().merge(&reg).is_ok());
        assert!(reg.clone().merge(&reg).is_err());
        let err = reg
            .job_from_params("count", &serde_json::json!({"up_to": "x"}))
            .unwrap_err();
        assert!(err.to_string().contains("up_to"), "{err}");
    }

    /// What the space itself answers reaches callers unchanged through the pointer; what the framework rules on
    /// is its own: a plan of no chunks is refused and a chunk uses at least one thread.
    #[derive(Debug)]
    struct Careless;

    impl Job for Careless {
        fn plan(&self, _: Option<u64>) -> Result<Plan, SpaceError> {
            Ok(Plan {
                n_chunks: 0,
                total_nodes: None,
            })
        }
        fn run_chunk(&self, _at: ChunkId, _: &Control) -> Result<ChunkOutput, SpaceError> {
            Ok(ChunkOutput::default())
        }
        fn verify(&self, _at: ChunkId, _: &ChunkOutput) -> Result<(), SpaceError> {
            Ok(())
        }
        fn threads_per_chunk(&self) -> u32 {
            0
        }
        fn verifiable(&self) -> bool {
            false
        }
        fn result(&self, _: &Answer) -> serde_json::Value {
            serde_json::json!("careless")
        }
        fn render_text(&self, r: &serde_json::Value) -> String {
            format!("text of {r}")
        }
    }

    #[test]
    fn the_space_answers_through_the_pointer_and_the_framework_keeps_its_rules() {
        let job = SpaceJob::new("careless", serde_json::json!({"k": 1}), Arc::new(Careless));
        assert_eq!(job.space(), "careless");
        assert_eq!(job.params(), &serde_json::json!({"k": 1}));
        assert!(matches!(
            job.plan(None),
            Err(SpaceError::InvalidParam { name: "chunks", .. })
        ));
        assert_eq!(job.threads_per_chunk(), 1);
        assert!(!job.verifiable());
        let (json, text) = job.result_texts(&Answer::default());
        assert_eq!(
            (json.as_str(), text.as_str()),
            ("\"careless\"", "text of \"careless\"")
        );
        // A job that takes no inputs says so under its space's name, and binding keeps name and parameters.
        let err = job.bind_inputs(&[b"x"]).unwrap_err();
        assert!(err.to_string().contains("1 were given"), "{err}");
    }
}
