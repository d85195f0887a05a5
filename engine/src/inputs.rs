//! A job's input DAG: every job whose merged artifact it needs ([`Job::inputs`]), and theirs, recursively.
//!
//! A space may describe a long chain or a DAG of jobs (a layered search whose layer k reads layer k-1, joins
//! that read two layers, a summary that reads several). The coordinator's submit and `sweep solve` must agree on
//! what that DAG is, and both must refuse a space that describes a cycle or an unbounded one instead of looping
//! or exhausting memory, so the walk lives here once. It is pure: jobs are built with the function passed in
//! (the registry in production, test spaces in tests), nothing is stored.
//!
//! Jobs are identified by (space, canonical parameters): an input named by several jobs of the DAG is one node,
//! built once, the way the coordinator keeps one job for it.

use std::collections::{HashMap, HashSet};

use sweep_space::{JobInput, SpaceError, SpaceJob};

/// More distinct jobs than this in one job's input DAG is a space describing something unbounded, not a search
/// anybody means to run: the submit is refused.
pub const MAX_DAG_JOBS: usize = 4096;

/// Rebuilds a job from its space name and canonical parameters: [`sweep_space::Registry::job_from_params`] in
/// production, a test's own table in tests.
pub type JobBuilder<'a> = &'a dyn Fn(&str, &serde_json::Value) -> Result<SpaceJob, SpaceError>;

/// One job of a DAG and where its inputs are in the list.
#[derive(Clone, Debug)]
pub struct DagNode {
    pub job: SpaceJob,
    /// Indices (into the list [`resolve`] returns) of this job's inputs, in the order of [`Job::inputs`]; always
    /// smaller than this node's own index.
    pub inputs: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DagError {
    /// An input's space is unknown or its parameters do not build a job.
    #[error("{path}: {source}")]
    BadInput { path: String, source: SpaceError },
    #[error("the jobs' inputs form a cycle: {0}")]
    Cycle(String),
    #[error("the job's input DAG has more than {max} jobs (still growing at {path})")]
    TooLarge { max: usize, path: String },
}

/// The job's input DAG in dependency order: every job after all of its inputs, `root` last, each distinct job
/// once. A job without inputs gives a one-element list.
pub fn resolve(root: SpaceJob, build: JobBuilder<'_>) -> Result<Vec<DagNode>, DagError> {
    resolve_bounded(root, build, MAX_DAG_JOBS)
}

/// A job in messages: its space and parameters, clipped (a parameter list can be long).
pub fn label(job: &SpaceJob) -> String {
    format!("{} {}", job.space(), clip(&job.params().to_string()))
}

fn key(job: &SpaceJob) -> (String, String) {
    (job.space().to_string(), job.params().to_string())
}

/// A job being walked: the inputs it names and the nodes of those resolved so far.
struct Frame {
    key: (String, String),
    job: SpaceJob,
    wanted: Vec<JobInput>,
    inputs: Vec<usize>,
}

fn frame(job: SpaceJob) -> Frame {
    Frame {
        key: key(&job),
        wanted: job.inputs(),
        inputs: Vec::new(),
        job,
    }
}

fn chain(stack: &[Frame]) -> String {
    stack
        .iter()
        .map(|f| label(&f.job))
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// [`resolve`] with the size bound as a parameter (tests use a small one). Depth-first with an explicit stack:
/// a chain thousands of jobs long must not overflow the thread's stack.
pub fn resolve_bounded(
    root: SpaceJob,
    build: JobBuilder<'_>,
    max: usize,
) -> Result<Vec<DagNode>, DagError> {
    let mut nodes: Vec<DagNode> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    let mut on_path: HashSet<(String, String)> = HashSet::new();
    let root = frame(root);
    on_path.insert(root.key.clone());
    let mut stack = vec![root];
    while let Some(top) = stack.last_mut() {
        let k = top.inputs.len();
        let Some(wanted) = top.wanted.get(k).cloned() else {
            let Some(done) = stack.pop() else { break };
            on_path.remove(&done.key);
            index.insert(done.key, nodes.len());
            nodes.push(DagNode {
                job: done.job,
                inputs: done.inputs,
            });
            continue;
        };
        let job = build(&wanted.space, &wanted.params).map_err(|source| DagError::BadInput {
            path: format!(
                "input {k} ({} {}) of {}",
                wanted.space,
                clip(&wanted.params.to_string()),
                chain(&stack)
            ),
            source,
        })?;
        let key = key(&job);
        if let Some(&i) = index.get(&key) {
            if let Some(top) = stack.last_mut() {
                top.inputs.push(i);
            }
            continue;
        }
        if on_path.contains(&key) {
            let from = stack.iter().position(|f| f.key == key).unwrap_or(0);
            return Err(DagError::Cycle(format!(
                "{} -> {}",
                chain(&stack[from..]),
                label(&job)
            )));
        }
        if nodes.len() + stack.len() >= max {
            return Err(DagError::TooLarge {
                max,
                path: format!("{} -> {}", chain(&stack), label(&job)),
            });
        }
        on_path.insert(key);
        stack.push(frame(job));
    }
    Ok(nodes)
}

fn clip(text: &str) -> String {
    const MAX: usize = 160;
    if text.len() <= MAX {
        text.to_string()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}

/// For each node, the index of the last node that reads its artifact (`None`: nobody, the root). Lets
/// `sweep solve` drop an input's artifact as soon as its last reader is bound.
pub fn last_readers(nodes: &[DagNode]) -> Vec<Option<usize>> {
    let mut last = vec![None; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &inp in &n.inputs {
            if let Some(slot) = last.get_mut(inp) {
                *slot = Some(i);
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Job, Plan};

    /// A test space: job `n` reads the jobs its parameters list, so any graph can be described.
    #[derive(Debug)]
    struct Node {
        name: String,
        inputs: Vec<String>,
    }

    /// Each test describes its graph in this table: name -> inputs. A name missing from it fails to build.
    fn graph(name: &str) -> Option<Vec<String>> {
        let edges: &[(&str, &[&str])] = &[
            // A diamond: d reads b and c, which both read a.
            ("a", &[]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["b", "c", "a"]),
            // A cycle through three jobs, reached from e.
            ("e", &["f"]),
            ("f", &["g"]),
            ("g", &["h"]),
            ("h", &["f"]),
            // Reads itself.
            ("self", &["self"]),
            // Reads a job that cannot be built.
            ("broken", &["a", "nope"]),
        ];
        if let Some(n) = name.strip_prefix("chain") {
            // chainN reads chain(N-1); chain0 reads nothing.
            let n: u64 = n.parse().ok()?;
            return Some(if n == 0 {
                vec![]
            } else {
                vec![format!("chain{}", n - 1)]
            });
        }
        if let Some(n) = name.strip_prefix("grow") {
            // An unbounded chain: growN reads grow(N+1).
            let n: u64 = n.parse().ok()?;
            return Some(vec![format!("grow{}", n + 1)]);
        }
        edges
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, i)| i.iter().map(|s| s.to_string()).collect())
    }

    fn build(space: &str, params: &serde_json::Value) -> Result<SpaceJob, SpaceError> {
        let name = params.as_str().unwrap_or_default().to_string();
        match (space, graph(&name)) {
            ("g", Some(inputs)) => Ok(SpaceJob::new(
                "g",
                params.clone(),
                Arc::new(Node { name, inputs }),
            )),
            _ => Err(SpaceError::BadParams {
                space: "g",
                reason: format!("no node `{name}`"),
            }),
        }
    }

    impl Job for Node {
        fn space(&self) -> &'static str {
            "g"
        }
        fn params(&self) -> serde_json::Value {
            serde_json::Value::String(self.name.clone())
        }
        fn plan(&self, _: Option<u64>) -> Result<Plan, SpaceError> {
            Ok(Plan {
                n_chunks: 1,
                total_nodes: None,
            })
        }
        fn run_chunk(&self, _at: ChunkId, _: &Control) -> Result<ChunkOutput, SpaceError> {
            Ok(ChunkOutput::default())
        }
        fn verify(&self, _at: ChunkId, _: &ChunkOutput) -> Result<(), SpaceError> {
            Ok(())
        }
        fn result(&self, _: &Answer) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn render_text(&self, _: &serde_json::Value) -> String {
            String::new()
        }
        fn inputs(&self) -> Vec<JobInput> {
            self.inputs
                .iter()
                .map(|n| JobInput {
                    space: "g".into(),
                    params: serde_json::Value::String(n.clone()),
                })
                .collect()
        }
    }

    fn root(name: &str) -> SpaceJob {
        build("g", &serde_json::json!(name)).unwrap()
    }

    fn names(nodes: &[DagNode]) -> Vec<String> {
        nodes
            .iter()
            .map(|n| n.job.params().as_str().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn a_job_without_inputs_is_its_own_dag() {
        let nodes = resolve(root("a"), &build).unwrap();
        assert_eq!(names(&nodes), ["a"]);
        assert!(nodes[0].inputs.is_empty());
    }

    #[test]
    fn a_diamond_builds_each_job_once_inputs_first_in_order() {
        let nodes = resolve(root("d"), &build).unwrap();
        assert_eq!(names(&nodes), ["a", "b", "c", "d"]);
        assert_eq!(nodes[1].inputs, [0]);
        assert_eq!(nodes[2].inputs, [0]);
        // In the order `inputs()` lists them, repeated reads of the same job included.
        assert_eq!(nodes[3].inputs, [1, 2, 0]);
        for (i, n) in nodes.iter().enumerate() {
            assert!(n.inputs.iter().all(|&j| j < i));
        }
        assert_eq!(last_readers(&nodes), [Some(3), Some(3), Some(3), None]);
    }

    #[test]
    fn a_long_chain_resolves_without_recursion() {
        let nodes = resolve(root("chain3000"), &build).unwrap();
        assert_eq!(nodes.len(), 3001);
        assert_eq!(names(&nodes)[0], "chain0");
        assert!(nodes
            .iter()
            .skip(1)
            .enumerate()
            .all(|(i, n)| n.inputs == [i]));
    }

    #[test]
    fn cycles_are_named() {
        let err = resolve(root("e"), &build).unwrap_err();
        let DagError::Cycle(path) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, r#"g "f" -> g "g" -> g "h" -> g "f""#);
        assert!(matches!(
            resolve(root("self"), &build),
            Err(DagError::Cycle(_))
        ));
    }

    #[test]
    fn unbounded_and_oversized_dags_are_refused() {
        let err = resolve(root("grow0"), &build).unwrap_err();
        assert!(
            matches!(
                err,
                DagError::TooLarge {
                    max: MAX_DAG_JOBS,
                    ..
                }
            ),
            "{err}"
        );
        assert!(resolve_bounded(root("chain9"), &build, 10).is_ok());
        assert!(matches!(
            resolve_bounded(root("chain10"), &build, 10),
            Err(DagError::TooLarge { max: 10, .. })
        ));
    }

    #[test]
    fn an_input_that_does_not_build_is_named() {
        let err = resolve(root("broken"), &build).unwrap_err();
        assert!(matches!(err, DagError::BadInput { .. }));
        assert_eq!(
            err.to_string(),
            r#"input 1 (g "nope") of g "broken": malformed job parameters for `g`: no node `nope`"#
        );
    }
}
