//! Splits `SPACE [options]` into the engine's own flags and the space's options, so each space parses its
//! options with its own clap definition and a new space needs no change here.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use sweep_space::{FileRead, Registry, Space, SpaceError, SpaceJob};

use crate::exit::usage;

/// Flags the engine takes wherever they appear after the space name. Spaces must not use these names
/// (a test checks every registered space).
pub const ENGINE_FLAGS: &[(&str, bool)] = &[
    ("--threads", true),
    ("--chunks", true),
    ("--data", true),
    ("--priority", true),
    ("--coordinator", true),
    ("--json", false),
    ("--no-progress", false),
    ("--svg", true),
    ("--token-file", true),
    ("--tls-ca", true),
    ("--tls-cert", true),
    ("--tls-key", true),
    ("--replicate", true),
    ("--count-only", false),
    ("--solutions", true),
    ("--max-attempts", true),
    ("--share", true),
    ("--chunk-time-hint", true),
];

#[derive(Parser, Debug, Default)]
#[command(no_binary_name = true, disable_help_flag = true)]
pub struct EngineOpts {
    /// Worker threads (default: all cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,
    /// Number of chunks (default: the space's choice).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub chunks: Option<u64>,
    /// Store directory for `run`.
    #[arg(long, default_value = "./sweep-data")]
    pub data: PathBuf,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// `submit`: the coordinator's URL, or its members' URLs separated by commas.
    #[arg(
        long,
        env = "SWEEP_COORDINATOR",
        default_value = "http://127.0.0.1:7878"
    )]
    pub coordinator: String,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub no_progress: bool,
    /// Write the answer's pictures (SVG files) into this directory, created if missing.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Token and TLS settings for `submit`.
    #[command(flatten)]
    pub security: crate::security::ClientArgs,
    /// `submit`: every chunk runs on this many distinct workers and is accepted only when their results agree.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub replicate: u32,
    /// Keep counts only, no list of solutions: memory and store stay small however many there are.
    #[arg(long)]
    pub count_only: bool,
    /// `run`: write every solution, one per line, into this file (streamed from the store).
    #[arg(long, value_name = "FILE", conflicts_with = "count_only")]
    pub solutions: Option<PathBuf>,
    /// `run`, `submit`: failed or expired attempts after which one of the job's chunks is poisoned (default and
    /// most: the coordinator's --max-attempts).
    #[arg(long, value_name = "N", value_parser = attempts)]
    pub max_attempts: Option<u32>,
    /// `run`, `submit`: the job's weight among its identity's jobs of the same priority (default 1).
    #[arg(long, value_name = "W", value_parser = share)]
    pub share: Option<f64>,
    /// `run`, `submit`: about how long one chunk takes (`500ms`, `2min`): until its first chunk ends, the
    /// scheduler charges each lease this much, so a job of short chunks gets its threads at once.
    #[arg(long, value_name = "DURATION", value_parser = chunk_time)]
    pub chunk_time_hint: Option<u64>,
}

/// `--share W` (and `sweep share set`): a number above 0, at most a million.
pub fn share(text: &str) -> Result<f64, String> {
    let max = sweep_coordinator::core::MAX_SHARE;
    match text.trim().parse::<f64>() {
        Ok(w) if w.is_finite() && w > 0.0 && w <= max => Ok(w),
        Ok(w) => Err(format!("must be above 0 and at most {max}, got {w}")),
        Err(_) => Err(format!(
            "`{text}` is not a number (a share is a weight such as 1, 2 or 0.5)"
        )),
    }
}

/// `--chunk-time-hint DURATION` in milliseconds: a duration such as `500ms`, `20s` or `2h`, from 1 ms to a week.
fn chunk_time(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration such as 500ms, 20s or 2h: {e}"))?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let max = sweep_coordinator::core::MAX_CHUNK_HINT_MS;
    if ms == 0 || ms > max {
        return Err(format!("must be from 1ms to a week, got {text}"));
    }
    Ok(ms)
}

/// `--max-attempts N`: a whole number, at least 1 (the first attempt is one).
fn attempts(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err("must be at least 1 (the first attempt counts as one)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number of attempts")),
    }
}

pub struct JobArgs {
    pub job: SpaceJob,
    pub engine: EngineOpts,
    /// Files the job ships (`exec --ship`), packed: sent to the coordinator before the job is submitted.
    pub ship: Option<crate::exec_args::ShipArg>,
}

impl JobArgs {
    /// The job's plan, once its program is known to start where it runs (`exec`): before anything is stored,
    /// sent or run, since a program that cannot start would fail every attempt.
    pub fn checked_plan(
        &self,
        runs_on: crate::exec_program::RunsOn,
    ) -> anyhow::Result<sweep_space::Plan> {
        let plan = self
            .job
            .plan(self.engine.chunks)
            .map_err(|e| usage(e.to_string()))?;
        crate::exec_program::check(
            &self.job,
            self.ship.as_ref().map(|s| s.path.as_path()),
            runs_on,
        )?;
        Ok(plan)
    }
}

/// Parses `SPACE [options]`. `--help` anywhere prints the space's help.
pub fn parse(registry: &Registry, args: &[String]) -> anyhow::Result<Result<JobArgs, String>> {
    let Some((space_name, rest)) = args.split_first() else {
        return Err(usage(format!(
            "name a search space: one of {}",
            registry.names().join(", ")
        )));
    };
    if space_name == "--help" || space_name == "-h" {
        return Ok(Err(engine_help()));
    }
    let space = registry
        .lookup(space_name)
        .map_err(|e| usage(e.to_string()))?;
    let (engine_args, space_args) = split(rest)?;
    let space_args = expand_files(space, space_args)?;
    let (space_args, ship) = crate::exec_args::take_ship(space_name, space_args)?;
    let engine = EngineOpts::try_parse_from(&engine_args)
        .map_err(|e| usage(e.render().to_string().trim().to_string()))?;
    let job = match space.parse_args(&space_args) {
        Ok(job) => job,
        Err(SpaceError::Help(text)) => return Ok(Err(format!("{text}\n{}", engine_help()))),
        Err(e) => return Err(usage(e.to_string())),
    };
    Ok(Ok(JobArgs { job, engine, ship }))
}

/// Reads the files of the space's file options ([`Space::file_options`]) and passes their text on as the
/// options they stand for: the space itself never touches a file.
fn expand_files(space: &dyn Space, args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let mut args = args;
    for opt in space.file_options() {
        let mut out = Vec::with_capacity(args.len());
        let mut texts = Vec::new();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                out.push(arg);
                out.extend(it.by_ref());
                break;
            }
            let path = if arg == opt.flag {
                it.next()
                    .ok_or_else(|| usage(format!("{} needs a file", opt.flag)))?
            } else if let Some(p) = arg.strip_prefix(&format!("{}=", opt.flag)) {
                p.to_string()
            } else {
                out.push(arg);
                continue;
            };
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {} {path}", opt.flag))
                .map_err(|e| usage(format!("{e:#}")))?;
            match opt.read {
                FileRead::Whole => {
                    out.push(opt.into.to_string());
                    out.push(text);
                }
                FileRead::Lines { .. } => {
                    let before = texts.len();
                    texts.extend(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && !l.starts_with('#'))
                            .map(str::to_string),
                    );
                    if texts.len() == before {
                        return Err(usage(format!("{} {path} holds nothing", opt.flag)));
                    }
                }
            }
        }
        if let (FileRead::Lines { sep }, false) = (opt.read, texts.is_empty()) {
            let joined = texts.join(sep);
            // Inline values and files add up to one list.
            let inline = format!("{}=", opt.into);
            match out.iter().position(|a| a == opt.into) {
                Some(i) if i + 1 < out.len() => out[i + 1] = format!("{}{sep}{joined}", out[i + 1]),
                _ => match out.iter_mut().find(|a| a.starts_with(&inline)) {
                    Some(a) => *a = format!("{a}{sep}{joined}"),
                    None => {
                        out.push(opt.into.to_string());
                        out.push(joined);
                    }
                },
            }
        }
        args = out;
    }
    Ok(args)
}

fn engine_help() -> String {
    "Engine options (any position after the space name):\n  --threads N        worker threads (default: all cores)\n  --chunks N         number of chunks (default: the space's choice)\n  --data DIR         store directory for `run` (default ./sweep-data)\n  --priority P       job priority (higher first)\n  --coordinator URLS coordinator for `submit`: its URL, or its members' URLs separated by commas (env SWEEP_COORDINATOR)\n  --json             print one JSON object\n  --no-progress      no progress bars\n  --svg DIR          write the answer's pictures (SVG) into DIR\n  --replicate K      `submit`: run every chunk on K distinct workers, accept only agreeing results\n  --count-only       keep counts only, no list of solutions (bounded memory for any answer)\n  --solutions FILE   `run`: write every solution into FILE, one per line, streamed from the store\n  --max-attempts N   failed attempts after which a chunk is poisoned (default and most: the coordinator's)\n  --share W          the job's weight among its owner's jobs of the same priority (default 1)\n  --chunk-time-hint D  about how long one chunk takes (500ms, 2min): a new job's first leases are charged that\n  --token-file FILE  token for `submit` (env SWEEP_TOKEN)\n  --tls-ca FILE      CA of the coordinator's certificate, for https:// URLs\n  --tls-cert FILE    client certificate, with --tls-key FILE\n".to_string()
}

fn split(args: &[String]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut engine = Vec::new();
    let mut space = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        // After `--` comes a command (`exec`): its flags are its own, whatever their names.
        if arg == "--" {
            space.extend(args[i..].iter().cloned());
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg.as_str(), None),
        };
        match ENGINE_FLAGS.iter().find(|(f, _)| *f == name) {
            Some((_, takes_value)) => {
                engine.push(arg.clone());
                if *takes_value && inline.is_none() {
                    let value = args
                        .get(i + 1)
                        .ok_or_else(|| usage(format!("{name} needs a value")))?;
                    engine.push(value.clone());
                    i += 1;
                }
            }
            None => space.push(arg.clone()),
        }
        i += 1;
    }
    Ok((engine, space))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn builtin(space: &str) -> &'static dyn Space {
        static REG: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(crate::builtin);
        REG.lookup(space).unwrap()
    }

    /// A file `name` holding `text` in a new directory: the directory (removed when dropped) and the path.
    fn file_holding(name: &str, text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        (dir, f.display().to_string())
    }

    #[test]
    fn file_lines_become_one_list_with_inline_values() {
        let (dir, path) = file_holding(
            "balls.txt",
            "# two balls\n1 2 3 4 5 6 7 8 9 10 11 12 13\n\n2 3 4 5 6 7 8 9 10 11 12 13 1\n",
        );
        let ball = builtin("brainball");
        let out = expand_files(ball, strings(&["solve", "--file", &path, "--depth", "3"])).unwrap();
        assert_eq!(
            out,
            strings(&[
                "solve",
                "--depth",
                "3",
                "--positions",
                "1 2 3 4 5 6 7 8 9 10 11 12 13; 2 3 4 5 6 7 8 9 10 11 12 13 1"
            ])
        );
        let out = expand_files(
            ball,
            strings(&["--positions", "a", &format!("--file={path}")]),
        )
        .unwrap();
        assert_eq!(
            out[1],
            "a; 1 2 3 4 5 6 7 8 9 10 11 12 13; 2 3 4 5 6 7 8 9 10 11 12 13 1"
        );
        // A space that declares no such option leaves it to its own parser.
        assert_eq!(
            expand_files(builtin("star"), strings(&["--file", "x"])).unwrap(),
            strings(&["--file", "x"])
        );
        let err = expand_files(ball, strings(&["--file", "/nonexistent/x"])).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "# nothing\n\n").unwrap();
        let err =
            expand_files(ball, strings(&["--file", &empty.display().to_string()])).unwrap_err();
        assert!(err.to_string().contains("holds nothing"), "{err}");
        // The command of `exec` keeps a flag of the same name.
        assert_eq!(
            expand_files(ball, strings(&["--", "prog", "--file", "x"])).unwrap(),
            strings(&["--", "prog", "--file", "x"])
        );
    }

    #[test]
    fn whole_files_become_their_text_and_the_params_hold_no_path() {
        let (_dir, path) = file_holding(
            "p52.txt",
            "side: 4\nclues: 5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3\n",
        );
        let buzz = builtin("buzzled");
        let out = expand_files(buzz, strings(&["--puzzle", &path, "--method", "brute"])).unwrap();
        assert_eq!(out[0], "--puzzle-text");
        assert!(out[1].starts_with("side: 4"));
        assert_eq!(&out[2..], &strings(&["--method", "brute"])[..]);
        let eq = expand_files(buzz, vec![format!("--puzzle={path}")]).unwrap();
        assert_eq!(eq[1], out[1]);
        let parsed = parse(&crate::builtin(), &strings(&["buzzled", "--puzzle", &path]))
            .unwrap()
            .ok()
            .unwrap();
        assert_eq!(
            parsed.job.params()["clues"],
            "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3"
        );
        let err = expand_files(buzz, strings(&["--puzzle", "/no/such/file"])).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot read --puzzle /no/such/file"),
            "{err}"
        );
        assert!(expand_files(buzz, strings(&["--puzzle"])).is_err());
    }

    #[test]
    fn ship_becomes_a_digest_before_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog.sh");
        std::fs::write(&prog, "#!/bin/sh\necho hi\n").unwrap();
        let path = prog.display().to_string();
        let parsed = parse(
            &crate::builtin(),
            &strings(&[
                "exec", "--chunks", "3", "--ship", &path, "--", "prog.sh", "--ship", "x",
            ]),
        )
        .unwrap()
        .ok()
        .unwrap();
        let shipped = parsed.ship.expect("the files are packed").files;
        let digest = blake3::hash(&shipped.packed).to_hex().to_string();
        assert_eq!(shipped.digest, digest);
        assert_eq!(parsed.job.params()["ship_digest"], digest.as_str());
        assert_eq!(
            parsed.job.params()["command"],
            serde_json::json!(["prog.sh", "--ship", "x"])
        );
        assert_eq!(parsed.job.shipped(), vec![digest]);
        // Other spaces do not know the flag.
        assert!(parse(&crate::builtin(), &strings(&["star", "--ship", &path])).is_err());
        let Err(err) = parse(
            &crate::builtin(),
            &strings(&["exec", "--ship", "/no/such", "--", "x"]),
        ) else {
            panic!("a missing --ship path must be an error");
        };
        assert!(format!("{err:#}").contains("/no/such"), "{err:#}");
    }

    #[test]
    fn a_command_after_two_dashes_keeps_its_flags() {
        let (e, s) = split(&strings(&["--chunks", "4", "--", "prog", "--threads", "2"])).unwrap();
        assert_eq!(e, strings(&["--chunks", "4"]));
        assert_eq!(s, strings(&["--", "prog", "--threads", "2"]));
    }

    #[test]
    fn engine_flags_are_taken_anywhere() {
        let (e, s) = split(&strings(&[
            "--points",
            "7",
            "--threads",
            "2",
            "--json",
            "--chunks=9",
            "--method",
            "brute",
        ]))
        .unwrap();
        assert_eq!(e, strings(&["--threads", "2", "--json", "--chunks=9"]));
        assert_eq!(s, strings(&["--points", "7", "--method", "brute"]));
    }

    #[test]
    fn no_space_uses_an_engine_flag() {
        for space in crate::builtin().spaces() {
            for (flag, _) in ENGINE_FLAGS {
                let help = match space.parse_args(&strings(&["--help"])) {
                    Err(SpaceError::Help(h)) => h,
                    other => panic!("{}: --help gave {other:?}", space.name()),
                };
                assert!(
                    !help.contains(&format!("{flag} ")),
                    "{} uses the engine flag {flag}",
                    space.name()
                );
            }
        }
    }

    #[test]
    fn bad_values_are_named() {
        let err = parse(&crate::builtin(), &strings(&["star", "--chunks", "0"]))
            .err()
            .unwrap();
        assert!(err.to_string().contains("--chunks"), "{err}");
        let err = parse(&crate::builtin(), &strings(&["star", "--points", "3"]))
            .err()
            .unwrap();
        assert!(err.to_string().contains("points"), "{err}");
        let err = parse(&crate::builtin(), &strings(&["nope"])).err().unwrap();
        assert!(err.to_string().contains("unknown search space"), "{err}");
        let err = parse(&crate::builtin(), &strings(&["star", "--threads"]))
            .err()
            .unwrap();
        assert!(err.to_string().contains("needs a value"), "{err}");
        let err = parse(
            &crate::builtin(),
            &strings(&["star", "--max-attempts", "0"]),
        )
        .err()
        .unwrap();
        assert!(
            err.to_string().contains("--max-attempts") && err.to_string().contains("at least 1"),
            "{err}"
        );
        let parsed = parse(&crate::builtin(), &strings(&["star", "--max-attempts=2"]))
            .unwrap()
            .ok()
            .unwrap();
        assert_eq!(parsed.engine.max_attempts, Some(2));
    }
}
