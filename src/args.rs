//! Splits `SPACE [options]` into the engine's own flags and the space's options, so each space parses its
//! options with its own clap definition and a new space needs no change here.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use sweep_puzzles::{Job, SpaceError};

use crate::usage;

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
}

pub struct JobArgs {
    pub job: Arc<dyn Job>,
    pub engine: EngineOpts,
}

/// Parses `SPACE [options]`. `--help` anywhere prints the space's help.
pub fn parse(args: &[String]) -> anyhow::Result<Result<JobArgs, String>> {
    let Some((space_name, rest)) = args.split_first() else {
        let known: Vec<&str> = sweep_puzzles::spaces().iter().map(|s| s.name()).collect();
        return Err(usage(format!(
            "name a search space: one of {}",
            known.join(", ")
        )));
    };
    if space_name == "--help" || space_name == "-h" {
        return Ok(Err(engine_help()));
    }
    let space = sweep_puzzles::lookup(space_name).map_err(|e| usage(e.to_string()))?;
    let (engine_args, space_args) = split(rest)?;
    let space_args = crate::brainball_cmd::expand_file(space_name, space_args)?;
    let space_args = crate::buzzled_cmd::expand_puzzle_file(space_name, space_args)?;
    let engine = EngineOpts::try_parse_from(&engine_args)
        .map_err(|e| usage(e.render().to_string().trim().to_string()))?;
    let job = match space.parse_args(&space_args) {
        Ok(job) => job,
        Err(SpaceError::Help(text)) => return Ok(Err(format!("{text}\n{}", engine_help()))),
        Err(e) => return Err(usage(e.to_string())),
    };
    Ok(Ok(JobArgs { job, engine }))
}

fn engine_help() -> String {
    "Engine options (any position after the space name):\n  --threads N        worker threads (default: all cores)\n  --chunks N         number of chunks (default: the space's choice)\n  --data DIR         store directory for `run` (default ./sweep-data)\n  --priority P       job priority (higher first)\n  --coordinator URL  coordinator for `submit` (env SWEEP_COORDINATOR)\n  --json             print one JSON object\n  --no-progress      no progress bars\n  --svg DIR          write the answer's pictures (SVG) into DIR\n  --replicate K      `submit`: run every chunk on K distinct workers, accept only agreeing results\n  --token-file FILE  token for `submit` (env SWEEP_TOKEN)\n  --tls-ca FILE      CA of the coordinator's certificate, for https:// URLs\n  --tls-cert FILE    client certificate, with --tls-key FILE\n".to_string()
}

fn split(args: &[String]) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut engine = Vec::new();
    let mut space = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
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
        for space in sweep_puzzles::spaces() {
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
        let err = parse(&strings(&["star", "--chunks", "0"])).err().unwrap();
        assert!(err.to_string().contains("--chunks"), "{err}");
        let err = parse(&strings(&["star", "--points", "3"])).err().unwrap();
        assert!(err.to_string().contains("points"), "{err}");
        let err = parse(&strings(&["nope"])).err().unwrap();
        assert!(err.to_string().contains("unknown search space"), "{err}");
        let err = parse(&strings(&["star", "--threads"])).err().unwrap();
        assert!(err.to_string().contains("needs a value"), "{err}");
    }
}
