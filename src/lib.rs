//! `sweep`: the command-line front end, as a library. Glue over the `sweep-*` crates: it parses arguments, starts
//! the coordinator and workers in-process (`run`) or talks to remote ones, draws progress, and prints answers.
//!
//! A crate with search spaces of its own gets the whole command (run, solve, coordinator, worker, submit,
//! watch, status, results, the dashboard) with its spaces beside the built-in ones:
//!
//! ```no_run
//! # use sweep_space::{Registry, SearchSpace};
//! fn main() -> std::process::ExitCode {
//!     let spaces = sweep::builtin(); // .with::<my_crate::MySpace>()
//!     sweep::main_with(spaces)
//! }
//! ```

pub use sweep_space::{self as space, Registry};

mod args;
mod buzzled_cmd;
mod client;
pub mod exec;
mod local;
mod output;
mod progress;
mod recover;
mod security;
mod store_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes, decided in one place ([`exit_code`]).
pub mod exit {
    pub const FAILURE: u8 = 1;
    /// Bad input: an unknown space, a bad option value, a data dir that is not a store.
    pub const USAGE: u8 = 2;
    /// The coordinator could not be reached.
    pub const UNAVAILABLE: u8 = 3;
    /// The job finished but some chunks were poisoned: the answer is incomplete.
    pub const POISONED: u8 = 4;
    /// The coordinator refused the token (missing, unknown, or a worker token on an admin command).
    pub const AUTH: u8 = 5;
    /// Interrupted by Ctrl-C or SIGTERM; stored progress is kept.
    pub const INTERRUPTED: u8 = 130;
}

/// An error that carries its exit code.
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: exit::USAGE,
        message: message.into(),
    }
    .into()
}

#[derive(Parser)]
#[command(
    name = "sweep",
    version,
    about = "Distributed exhaustive search: coordinator, workers and jobs"
)]
struct Cli {
    /// Log as JSON lines (logs go to stderr; RUST_LOG sets the level).
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

/// `SPACE [space options] [engine options]`: everything after `run`, `solve` or `submit`, parsed by the space
/// and the engine (`sweep run SPACE --help` lists both).
#[derive(clap::Args)]
struct SpaceArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SPACE [OPTIONS]"
    )]
    args: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a job on this machine: an embedded coordinator (store in --data) and local workers over gRPC.
    /// Re-running with the same parameters and --data resumes the job.
    #[command(disable_help_flag = true)]
    Run(SpaceArgs),
    /// Run the same search in-process (rayon over the same chunks): no coordinator, no store.
    #[command(disable_help_flag = true)]
    Solve(SpaceArgs),
    /// Submit a job to a running coordinator.
    #[command(disable_help_flag = true)]
    Submit(SpaceArgs),
    /// Serve jobs to workers: gRPC on --listen, progress kept in the sled store in --data.
    Coordinator(client::CoordinatorArgs),
    /// Lease chunks from a coordinator and run them on all cores.
    Worker(client::WorkerArgs),
    /// Show every job, or one job.
    Status(client::StatusArgs),
    /// Live progress bars for every job, or one job, until they finish.
    Watch(client::WatchArgs),
    /// The answer of a job.
    Results(client::ResultsArgs),
    /// Cancel a job (its stored results stay, it gets no more work).
    Cancel(client::JobArgs),
    /// Pause a job: no new chunks are handed out.
    Pause(client::JobArgs),
    /// Resume a paused job.
    Resume(client::JobArgs),
    /// List the workers the coordinator has seen: cores, memory, last heartbeat, chunks, standing.
    Workers(client::WorkersArgs),
    /// Ask a worker to finish its chunks, take no new ones and stop.
    Drain(client::DrainArgs),
    /// Check a stopped coordinator's store, or repair it from its chunk records.
    Store(store_cmd::StoreArgs),
    /// List the search spaces.
    Spaces,
    /// Buzzled tools: `generate` prints a random puzzle with exactly one solution.
    Buzzled(buzzled_cmd::BuzzledArgs),
}

/// The spaces `sweep` itself knows: the five puzzles and `exec`.
pub fn builtin() -> Registry {
    sweep_puzzles::registry().with::<exec::Exec>()
}

/// Runs the `sweep` command with `registry`'s spaces: what `sweep`'s own `main` does with [`builtin`], and what
/// a user's crate does with its own spaces added.
pub fn main_with(registry: Registry) -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_json);
    let reg = &registry;
    let result = match cli.command {
        Command::Run(SpaceArgs { args }) => local::run(reg, args),
        Command::Solve(SpaceArgs { args }) => local::solve(reg, args),
        Command::Submit(SpaceArgs { args }) => client::submit(reg, args),
        Command::Coordinator(a) => client::coordinator(reg, a),
        Command::Worker(a) => client::worker(reg, a),
        Command::Status(a) => client::status(a),
        Command::Watch(a) => client::watch(a),
        Command::Results(a) => client::results(reg, a),
        Command::Cancel(a) => client::control(a, client::Control::Cancel),
        Command::Pause(a) => client::control(a, client::Control::Pause),
        Command::Resume(a) => client::control(a, client::Control::Resume),
        Command::Workers(a) => client::workers(a),
        Command::Drain(a) => client::drain(a),
        Command::Store(a) => store_cmd::run(a),
        Command::Buzzled(a) => buzzled_cmd::run(a),
        Command::Spaces => {
            for s in registry.spaces() {
                println!("{:<10} {}", s.name(), s.about());
            }
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = exit_code(&e);
            eprintln!("sweep: {}", one_line(&e));
            ExitCode::from(code)
        }
    }
}

/// The one place that turns errors into exit codes.
fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(x) = e.downcast_ref::<Exit>() {
        return x.code;
    }
    if let Some(c) = e.downcast_ref::<sweep_client::ClientError>() {
        return match c {
            sweep_client::ClientError::Settings(_) => exit::USAGE,
            sweep_client::ClientError::Unreachable { .. } => exit::UNAVAILABLE,
            sweep_client::ClientError::Refused(_) => exit::AUTH,
            sweep_client::ClientError::Call(s) => status_exit_code(s),
            sweep_client::ClientError::Reply(_) => exit::FAILURE,
        };
    }
    if let Some(s) = e.downcast_ref::<tonic::Status>() {
        return status_exit_code(s);
    }
    if let Some(s) = e.downcast_ref::<sweep_space::SpaceError>() {
        return match s {
            sweep_space::SpaceError::Cancelled => exit::INTERRUPTED,
            _ => exit::USAGE,
        };
    }
    if e.downcast_ref::<sweep_coordinator::store::StoreError>()
        .is_some()
    {
        return exit::USAGE;
    }
    exit::FAILURE
}

fn status_exit_code(s: &tonic::Status) -> u8 {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => exit::UNAVAILABLE,
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => exit::AUTH,
        tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::FailedPrecondition => {
            exit::USAGE
        }
        _ => exit::FAILURE,
    }
}

/// Errors print as one line: context first, then causes; tonic statuses as their message only.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |text: String| {
        let text = text.trim().replace('\n', " ");
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    };
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<sweep_client::ClientError>() {
            // The client's error says what a status means; the transport's causes below it say why.
            push(c.to_string());
            let mut below = c.status().and_then(std::error::Error::source);
            while let Some(s) = below {
                push(s.to_string());
                below = s.source();
            }
            continue;
        }
        let text = match cause.downcast_ref::<tonic::Status>() {
            Some(s)
                if s.code() == tonic::Code::Unavailable && s.message().contains("transport") =>
            {
                "the coordinator is unreachable".to_string()
            }
            Some(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                ) =>
            {
                format!("refused by the coordinator: {}", s.message())
            }
            Some(s) => s.message().to_string(),
            None => cause.to_string(),
        };
        push(text);
    }
    parts.join(": ")
}

fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
