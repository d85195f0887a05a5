//! The layout's invariants, checked on the sources so that a change cannot quietly undo them:
//! - a search space crate depends on the contract crate and plain libraries, never on anything engine-side;
//! - the containment and consensus crates depend on no sweep crate at all;
//! - in every crate, top-level modules import each other in one direction (no cycle through `crate::` paths);
//! - the README names one test command, which does the set-up a fresh machine needs, and CI runs exactly it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What a space must never depend on: the engine's crates and the runtimes, transports and stores they use.
const ENGINE_SIDE: &[&str] = &[
    "sweep-coordinator",
    "sweep-worker",
    "sweep-client",
    "sweep-proto",
    "sweep-engine",
    "sweep",
    "tokio",
    "tonic",
    "prost",
    "sled",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names in a manifest's `[dependencies]` table (not dev- or build-dependencies).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                names.push(name.trim().split('.').next().unwrap_or("").to_string());
            }
        }
    }
    names
}

fn space_crates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("spaces"))
        .expect("spaces/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn spaces_depend_on_the_contract_and_nothing_engine_side() {
    let crates = space_crates();
    assert!(crates.len() >= 7, "the built-in spaces: {crates:?}");
    for dir in crates {
        let deps = dependencies(&read(&dir.join("Cargo.toml")));
        assert!(
            deps.iter().any(|d| d == "sweep-space"),
            "{}: a space depends on the contract crate",
            dir.display()
        );
        for dep in &deps {
            assert!(
                !ENGINE_SIDE.contains(&dep.as_str()),
                "{} depends on `{dep}`: spaces know nothing of the engine",
                dir.display()
            );
            assert!(
                !dep.starts_with("sweep-") || ALLOWED_TO_SPACES.contains(&dep.as_str()),
                "{} depends on `{dep}`: spaces depend on no sweep crate but the contract (and containment)",
                dir.display()
            );
        }
    }
}

/// The sweep crates a space may use: the contract, and the box that contains a program's processes (which the
/// `exec` space needs, and which is a plain library itself).
const ALLOWED_TO_SPACES: &[&str] = &["sweep-space", "sweep-contain"];

#[test]
fn containment_is_a_plain_library() {
    let deps = dependencies(&read(&root().join("contain/Cargo.toml")));
    for dep in &deps {
        assert!(
            !ENGINE_SIDE.contains(&dep.as_str()) && !dep.starts_with("sweep"),
            "contain depends on `{dep}`: it knows nothing of jobs, networks or stores"
        );
    }
}

#[test]
fn consensus_is_a_plain_library() {
    let deps = dependencies(&read(&root().join("replicate/Cargo.toml")));
    assert!(
        deps.iter().any(|d| d == "raft"),
        "replicate is built on raft-rs: {deps:?}"
    );
    for dep in &deps {
        assert!(
            !dep.starts_with("sweep"),
            "replicate depends on `{dep}`: it knows nothing of jobs, chunks or the wire"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to (`lib` for the crate root).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules that production code in `text` names through `crate::`, in `use crate::{a, b::c}`
/// groups too. Test code (from the first `#[cfg(test)]` on) and comments are not counted.
fn crate_references(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut names = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}` on one line: each item's first segment.
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim();
                    if !first.is_empty() {
                        names.insert(first.to_string());
                    }
                }
            } else {
                let ident: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() {
                    names.insert(ident);
                }
            }
        }
    }
    names
}

/// A cycle among `edges`, if there is one, as the path that closes it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, edges, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn top_level_modules_import_in_one_direction_in_every_crate() {
    let mut crates = vec![
        root().join("src"),
        root().join("space/src"),
        root().join("engine/src"),
        root().join("proto/src"),
        root().join("client/src"),
        root().join("coordinator/src"),
        root().join("worker/src"),
        root().join("replicate/src"),
    ];
    crates.extend(space_crates().into_iter().map(|d| d.join("src")));
    for src in crates {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(!files.is_empty(), "{}: no sources", src.display());
        let modules: BTreeSet<String> = files.iter().map(|f| top_module(&src, f)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let from = top_module(&src, file);
            // The crate root declares and re-exports every module; what matters is how the modules use each
            // other, so it is left out as a source of edges.
            // Test modules in files of their own (`tests.rs`, `dag_tests.rs`, `test_support.rs`) may reach
            // anywhere: nothing imports them.
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let test_file = stem == "tests" || stem.ends_with("_tests") || stem == "test_support";
            if from == "lib" || from == "main" || test_file {
                continue;
            }
            for to in crate_references(&read(file)) {
                if to != from && modules.contains(&to) && to != "lib" {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        if let Some(cycle) = find_cycle(&edges) {
            panic!(
                "{}: top-level modules import each other in a circle: {}",
                src.display(),
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_only_then() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&edges), None);
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        crate_references(
            "use crate::{store::Store, core};\nlet x = crate::limits::MAX; // crate::no"
        ),
        ["core", "limits", "store"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

/// The lines of a shell text that are commands: neither blank nor comments, trailing comments cut.
fn commands(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split(" #").next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// A newcomer's first run and CI's are the same run: the README's test command installs what the tests need
/// and runs them all without stopping at the first failing binary, and `.ci/run` runs that command and does
/// nothing of its own.
#[test]
fn ci_runs_the_test_command_the_readme_names() {
    let readme = read(&root().join("README.md"));
    let block = readme
        .split("## The two commands")
        .nth(1)
        .and_then(|section| section.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("README.md has a section `The two commands` with a sh block");
    assert_eq!(
        commands(block),
        ["cargo run --release -- run star", "scripts/test"],
        "README.md's two commands"
    );
    let ci = read(&root().join(".ci/run"));
    assert_eq!(
        commands(&ci).last().map(String::as_str),
        Some(r#"exec scripts/test "$@""#),
        ".ci/run ends by running the README's command:\n{ci}"
    );
    for own in commands(&ci) {
        assert!(
            !own.contains("apt-get") && !own.contains("cargo"),
            ".ci/run does no set-up or testing of its own: `{own}`"
        );
    }
    let script = commands(&read(&root().join("scripts/test")));
    assert!(
        script.iter().any(|c| c.contains("apt-get")),
        "scripts/test installs the tools the tests drive"
    );
    assert_eq!(
        script.last().map(String::as_str),
        Some(r#"exec cargo test --workspace --release --no-fail-fast "$@""#),
        "scripts/test runs every test, past a failing binary"
    );
}

/// What the coordinator's core must never depend on: an async runtime, a store, a network or the wire.
const NOT_IN_THE_CORE: &[&str] = &[
    "tokio",
    "tokio-stream",
    "sled",
    "tonic",
    "prost",
    "hyper",
    "axum",
    "sweep-proto",
    "sweep-client",
    "sweep-coordinator",
    "sweep-worker",
];

/// The core does no I/O because it has nothing to do I/O with: its manifest names no runtime, store or network,
/// and neither does any sweep crate it depends on.
#[test]
fn the_coordinator_core_depends_on_no_runtime_store_or_network() {
    let deps = dependencies(&read(&root().join("core/Cargo.toml")));
    assert!(
        deps.iter().any(|d| d == "sweep-space"),
        "core/Cargo.toml's [dependencies] were not found: {deps:?}"
    );
    for dep in &deps {
        assert!(
            !NOT_IN_THE_CORE.contains(&dep.as_str()),
            "core depends on `{dep}`: the coordinator's core does no I/O, so it needs no runtime, store or network"
        );
        // A sweep crate the core uses must be as plain: its own dependencies are checked the same way.
        if let Some(dir) = dep.strip_prefix("sweep-") {
            let manifest = root().join(dir).join("Cargo.toml");
            for inner in dependencies(&read(&manifest)) {
                assert!(
                    !NOT_IN_THE_CORE.contains(&inner.as_str()),
                    "core depends on `{dep}`, which depends on `{inner}`: the core must stay free of I/O"
                );
            }
        }
    }
    let coordinator = dependencies(&read(&root().join("coordinator/Cargo.toml")));
    assert!(
        coordinator.iter().any(|d| d == "sweep-core"),
        "the coordinator is a shell around sweep-core: {coordinator:?}"
    );
}

/// The core's top-level modules import each other in one direction, as every other crate's do.
#[test]
fn the_coordinator_core_s_modules_import_in_one_direction() {
    let src = root().join("core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "core/src: {} sources", files.len());
    let modules: BTreeSet<String> = files.iter().map(|f| top_module(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = top_module(&src, file);
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let test_file = stem == "tests" || stem.ends_with("_tests");
        if from == "lib" || test_file {
            continue;
        }
        for to in crate_references(&read(file)) {
            if to != from && modules.contains(&to) && to != "lib" {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        panic!(
            "core/src: top-level modules import each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
    assert!(
        !edges.get("scheduler").is_some_and(|to| !to.is_empty()),
        "the scheduler is the core's bottom: it imports no other module of the core: {:?}",
        edges.get("scheduler")
    );
}
