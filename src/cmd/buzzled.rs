//! `sweep buzzled generate`: random puzzles with exactly one solution, in the puzzle file format.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use sweep_buzzled::{generate::generate, puzzle::format_puzzle_file};

use crate::exit::usage;

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
        let geo = sweep_buzzled::geometry::Geometry::new(puzzle.side)
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
