//! Buzzled glue in the CLI: reading `--puzzle FILE` (the puzzles crate does no I/O) and `sweep buzzled generate`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use sweep_puzzles::buzzled::{generate::generate, puzzle::format_puzzle_file};

use crate::usage;

/// Replaces `--puzzle FILE` (or `--puzzle=FILE`) among a buzzled job's options by `--puzzle-text <the file's
/// text>`. The space parses the text into side and clues, so the job's stored parameters hold the clues, never a
/// path another machine could not read. Other spaces' options pass through untouched.
pub fn expand_puzzle_file(space: &str, args: Vec<String>) -> anyhow::Result<Vec<String>> {
    if space != "buzzled" {
        return Ok(args);
    }
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let path = if arg == "--puzzle" {
            it.next().ok_or_else(|| usage("--puzzle needs a file"))?
        } else if let Some(p) = arg.strip_prefix("--puzzle=") {
            p.to_string()
        } else {
            out.push(arg);
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read --puzzle {path}"))
            .map_err(|e| usage(format!("{e:#}")))?;
        out.push("--puzzle-text".into());
        out.push(text);
    }
    Ok(out)
}

#[derive(Args)]
pub struct BuzzledArgs {
    #[command(subcommand)]
    command: BuzzledCommand,
}

#[derive(Subcommand)]
enum BuzzledCommand {
    /// Print a random puzzle with exactly one solution (checked by the exact solver) in the puzzle file format.
    Generate(GenerateArgs),
}

#[derive(Args)]
struct GenerateArgs {
    /// Board side (3 = mini, 4 = master, 5 = expert, and larger).
    #[arg(long, default_value_t = 4)]
    side: usize,
    /// Random seed: the same seed gives the same puzzle (default: taken from the clock and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object (side, clues, name, seed, the solution and the file text).
    #[arg(long)]
    json: bool,
}

pub fn run(a: BuzzledArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        BuzzledCommand::Generate(g) => generate_cmd(g),
    }
}

fn generate_cmd(g: GenerateArgs) -> anyhow::Result<ExitCode> {
    let seed = match g.seed {
        Some(s) => s,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    let (puzzle, board) = generate(g.side, seed).map_err(|e| usage(e.to_string()))?;
    let text = format_puzzle_file(&puzzle);
    if g.json {
        let geo = sweep_puzzles::buzzled::geometry::Geometry::new(puzzle.side)
            .map_err(|e| usage(e.to_string()))?;
        let out = serde_json::json!({
            "side": puzzle.side,
            "clues": puzzle.clues,
            "name": puzzle.name,
            "seed": seed,
            "solution": geo.encode(&board),
            "puzzle_file": text,
        });
        crate::output::emit(&format!("{out}\n"));
    } else {
        crate::output::emit(&text);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn puzzle_files_become_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p52.txt");
        std::fs::write(
            &f,
            "side: 4\nclues: 5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3\n",
        )
        .unwrap();
        let path = f.display().to_string();
        let out = expand_puzzle_file(
            "buzzled",
            strings(&["--puzzle", &path, "--method", "brute"]),
        )
        .unwrap();
        assert_eq!(out[0], "--puzzle-text");
        assert!(out[1].starts_with("side: 4"));
        assert_eq!(&out[2..], &strings(&["--method", "brute"])[..]);
        let eq = expand_puzzle_file("buzzled", vec![format!("--puzzle={path}")]).unwrap();
        assert_eq!(eq[1], out[1]);
        // Parsed by the space into canonical params holding the clues, not the path.
        let parsed = crate::args::parse(&strings(&["buzzled", "--puzzle", &path]))
            .unwrap()
            .ok()
            .unwrap();
        assert_eq!(
            parsed.job.params()["clues"],
            "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3"
        );
        let err =
            expand_puzzle_file("buzzled", strings(&["--puzzle", "/no/such/file"])).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot read --puzzle /no/such/file"),
            "{err}"
        );
        assert!(expand_puzzle_file("buzzled", strings(&["--puzzle"])).is_err());
        assert_eq!(
            expand_puzzle_file("star", strings(&["--puzzle", "x"])).unwrap(),
            strings(&["--puzzle", "x"])
        );
    }
}
