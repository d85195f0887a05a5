//! The layout's invariants, checked on the sources so that a change cannot quietly undo them:
//! - a search space crate depends on the contract crate and plain libraries, never on anything engine-side;
//! - the containment and consensus crates depend on no sweep crate at all;
//! - the test kit (`testkit/`) is a dev-dependency only, and is never published;
//! - in every crate of the workspace, the modules in each folder import each other in one direction (no cycle
//!   through `crate::` or `super::` paths), the top level included;
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

/// The test kit depends on the coordinator and on `sweep` itself: as a dev-dependency it serves integration
/// tests, as a dependency it would ship a test harness (and tie a crate to the whole engine).
#[test]
fn the_test_kit_is_a_dev_dependency_only() {
    let sources = workspace_sources();
    assert!(
        sources.iter().any(|s| s.ends_with("testkit/src")),
        "the test kit is a workspace member: {sources:?}"
    );
    for src in sources {
        let manifest = src.parent().expect("a crate's folder").join("Cargo.toml");
        let deps = dependencies(&read(&manifest));
        assert!(
            !deps.iter().any(|d| d == "sweep-testkit"),
            "{} lists sweep-testkit as a dependency: it may be a dev-dependency only",
            manifest.display()
        );
    }
    let kit = read(&root().join("testkit/Cargo.toml"));
    assert!(
        kit.lines().any(|l| l.trim() == "publish = false"),
        "the test kit is never published"
    );
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

/// The `[dependencies]` of the crate in `dir`, after checking that they name `anchor` (so a manifest read wrong
/// fails rather than passes with nothing to check) and none that `banned` refuses; `why` ends each failure.
fn dependencies_without(
    dir: &str,
    anchor: &str,
    banned: impl Fn(&str) -> bool,
    why: &str,
) -> Vec<String> {
    let deps = dependencies(&read(&root().join(dir).join("Cargo.toml")));
    assert!(
        deps.iter().any(|d| d == anchor),
        "{dir}/Cargo.toml's [dependencies] do not name `{anchor}`: {deps:?}"
    );
    for dep in &deps {
        assert!(!banned(dep), "{dir} depends on `{dep}`: {why}");
    }
    deps
}

#[test]
fn consensus_is_a_plain_library() {
    dependencies_without(
        "replicate",
        "raft",
        |dep| dep.starts_with("sweep"),
        "it knows nothing of jobs, chunks or the wire",
    );
}

/// Test modules in files of their own (`tests.rs`, `dag_tests.rs`, `test_support.rs`) may reach anywhere:
/// nothing imports them.
fn is_test_module(file: &Path) -> bool {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests") || stem == "test_support"
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

/// The source directory of every package of the workspace: the root package's and each member's the root
/// manifest lists.
fn workspace_sources() -> Vec<PathBuf> {
    let manifest = read(&root().join("Cargo.toml"));
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the root Cargo.toml lists the workspace's members");
    let mut sources = vec![root().join("src")];
    for line in members.lines() {
        let line = line.split('#').next().unwrap_or("");
        for member in line.split(',').map(|m| m.trim().trim_matches('"')) {
            if !member.is_empty() {
                sources.push(root().join(member).join("src"));
            }
        }
    }
    sources
}

/// The module path of a file of `src`: `store/handle.rs` is `[store, handle]`, `store/mod.rs` is `[store]`, a
/// crate root (`lib.rs`, `main.rs`) is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") || path == ["lib"] || path == ["main"] {
        path.pop();
    }
    path
}

fn skip_space(s: &[u8], i: &mut usize) {
    while s.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// Reads the rest of a path from `s[*i..]` (just after a `::`), appending every path it names to `out`: one,
/// or one per item of a `{a, b::{c, d}}` group, however the group is spread over lines.
fn path_tree(s: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    skip_space(s, i);
    if s.get(*i) == Some(&b'{') {
        *i += 1;
        loop {
            skip_space(s, i);
            match s.get(*i) {
                None => return,
                Some(b'}') => {
                    *i += 1;
                    return;
                }
                Some(b',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    path_tree(s, i, prefix, out);
                    // A rename (`as name`) or a glob: nothing more to read up to the next item.
                    while s.get(*i).is_some_and(|b| !b",{}".contains(b)) {
                        *i += 1;
                    }
                    if *i == before {
                        *i += 1;
                    }
                }
            }
        }
    }
    let start = *i;
    while s
        .get(*i)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        *i += 1;
    }
    let ident = String::from_utf8_lossy(&s[start..*i]).into_owned();
    let mut path = prefix.to_vec();
    if !ident.is_empty() && ident != "self" {
        path.push(ident.clone());
    }
    if !ident.is_empty() && s[*i..].starts_with(b"::") {
        *i += 2;
        path_tree(s, i, &path, out);
    } else {
        out.push(path);
    }
}

/// `written` (a path beginning with `crate` or `super`) as a module path from the crate root, seen from the
/// file whose module path is `module`; `None` for a path that climbs above the crate.
fn resolve(module: &[String], written: &[String]) -> Option<Vec<String>> {
    let (first, mut rest) = written.split_first()?;
    let mut base = if first == "crate" {
        Vec::new()
    } else {
        module[..module.len().checked_sub(1)?].to_vec()
    };
    while let Some((segment, more)) = rest.split_first() {
        if segment != "super" {
            break;
        }
        base.pop()?;
        rest = more;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The paths that production code in `text`, the file of module `module`, names through `crate::` and
/// `super::`, from the crate root, `use` groups expanded. Test code (from the first `#[cfg(test)]` on) and
/// comments are not counted.
fn referenced_paths(module: &[String], text: &str) -> BTreeSet<Vec<String>> {
    let code: Vec<&str> = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or("")
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    let s = code.as_bytes();
    let mut written = Vec::new();
    let mut i = 0;
    while i < s.len() {
        // The start of a path, not a segment inside one (`super::super::x` is read once, from its first).
        let starts = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || b"_:".contains(&s[i - 1]));
        let head = ["crate", "super"]
            .into_iter()
            .find(|head| starts && s[i..].starts_with(format!("{head}::").as_bytes()));
        match head {
            Some(head) => {
                i += head.len() + 2;
                path_tree(s, &mut i, &[head.to_string()], &mut written);
            }
            None => i += 1,
        }
    }
    written.iter().filter_map(|w| resolve(module, w)).collect()
}

/// Where a reference from `module` to `path` makes an edge: between the two children of their deepest common
/// module, in that module's folder. From `store::handle`, `store::entry::Proposed` is `handle -> entry` in
/// `store`, and `core::Op` is `store -> core` at the top; a module's references into itself make none.
fn sibling_edge(module: &[String], path: &[String]) -> Option<(Vec<String>, String, String)> {
    let common = module.iter().zip(path).take_while(|(a, b)| a == b).count();
    let from = module.get(common)?;
    let to = path.get(common)?;
    Some((module[..common].to_vec(), from.clone(), to.clone()))
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
fn modules_import_in_one_direction_in_every_folder_of_every_crate() {
    let sources = workspace_sources();
    assert!(
        sources.len() >= 16,
        "the root package and the workspace's members: {sources:?}"
    );
    let mut circles = Vec::new();
    for src in sources {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(!files.is_empty(), "{}: no sources", src.display());
        // Per folder (by module path), the edges between the modules in it.
        let mut folders: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> =
            BTreeMap::new();
        for file in &files {
            if is_test_module(file) {
                continue;
            }
            let module = module_path(&src, file);
            for path in referenced_paths(&module, &read(file)) {
                let Some((folder, from, to)) = sibling_edge(&module, &path) else {
                    continue;
                };
                // Items of the folder's own module (re-exports included) are not a sibling.
                let dir = folder.iter().fold(src.clone(), |dir, m| dir.join(m));
                if !dir.join(format!("{to}.rs")).is_file() && !dir.join(&to).is_dir() {
                    continue;
                }
                folders
                    .entry(folder)
                    .or_default()
                    .entry(from)
                    .or_default()
                    .insert(to);
            }
        }
        for (folder, edges) in folders {
            if let Some(cycle) = find_cycle(&edges) {
                let dir = folder.iter().fold(src.clone(), |dir, m| dir.join(m));
                circles.push(format!("{}: {}", dir.display(), cycle.join(" -> ")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules import each other in a circle:\n{}",
        circles.join("\n")
    );
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
}

fn strings(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| s.to_string()).collect()
}

#[test]
fn references_are_resolved_from_the_file_that_makes_them() {
    let handle = strings(&["store", "handle"]);
    let text = "use super::entry::Proposed;\n\
                use super::{\n    blobs::{Blobs, FileBlobs as Files},\n    kv,\n};\n\
                use crate::{store::Store, core};\n\
                fn f() { super::super::fsck::check(); crate::limits::MAX } // crate::no, super::no\n\
                #[cfg(test)]\nuse super::test_support;";
    let found: BTreeSet<Vec<String>> = [
        &["store", "entry", "Proposed"][..],
        &["store", "blobs", "Blobs"],
        &["store", "blobs", "FileBlobs"],
        &["store", "kv"],
        &["store", "Store"],
        &["core"],
        &["fsck", "check"],
        &["limits", "MAX"],
    ]
    .into_iter()
    .map(strings)
    .collect();
    assert_eq!(referenced_paths(&handle, text), found);
    // In a folder's `mod.rs`, `super` is the folder's parent.
    assert_eq!(
        referenced_paths(&strings(&["store"]), "use super::core::Op;"),
        [strings(&["core", "Op"])].into_iter().collect()
    );
    assert_eq!(referenced_paths(&[], "use super::x;"), BTreeSet::new());
    // A sibling in the folder, a module at the top, nothing for a reference into the module itself.
    assert_eq!(
        sibling_edge(&handle, &strings(&["store", "entry", "Proposed"])),
        Some((strings(&["store"]), "handle".into(), "entry".into()))
    );
    assert_eq!(
        sibling_edge(&handle, &strings(&["core", "Op"])),
        Some((vec![], "store".into(), "core".into()))
    );
    assert_eq!(sibling_edge(&handle, &strings(&["store"])), None);
    assert_eq!(
        module_path(Path::new("/c/src"), Path::new("/c/src/store/mod.rs")),
        strings(&["store"])
    );
    assert_eq!(
        module_path(Path::new("/c/src"), Path::new("/c/src/lib.rs")),
        Vec::<String>::new()
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
    let deps = dependencies_without(
        "core",
        "sweep-space",
        |dep| NOT_IN_THE_CORE.contains(&dep),
        "the coordinator's core does no I/O, so it needs no runtime, store or network",
    );
    for dep in &deps {
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

/// The scheduler is the core's bottom: the lease and chunk state machine imports nothing else of the core, so
/// that it stays testable alone with simulated time. (Circles in `core/` are checked with every crate's.)
#[test]
fn the_scheduler_imports_nothing_else_of_the_core() {
    let src = root().join("core/src");
    let mut files = Vec::new();
    rust_files(&src.join("scheduler"), &mut files);
    assert!(
        files.len() > 3,
        "core/src/scheduler: {} sources",
        files.len()
    );
    for file in &files {
        if is_test_module(file) {
            continue;
        }
        let module = module_path(&src, file);
        for path in referenced_paths(&module, &read(file)) {
            let other_module = path.first().is_some_and(|top| {
                top != "scheduler"
                    && (src.join(format!("{top}.rs")).is_file() || src.join(top).is_dir())
            });
            assert!(
                !other_module,
                "{} uses {}: the scheduler imports nothing else of the core",
                file.display(),
                path.join("::")
            );
        }
    }
}
