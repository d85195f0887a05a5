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

/// `println!` for what a command prints, ending quietly when the reader went away ([`exit::print_line`]).
macro_rules! outln {
    () => {
        $crate::exit::print_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::exit::print_line(format_args!($($arg)*))
    };
}

mod args;
mod cmd;
mod exec_args;
mod exec_program;
pub mod exit;
mod output;
mod progress;
mod recover;
mod remote;
mod render;
mod runtime;
mod security;

pub use exit::{usage, Exit};

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Coordinator(Box<cmd::coordinator::CoordinatorArgs>),
    /// Lease chunks from a coordinator and run them on all cores.
    Worker(cmd::worker::WorkerArgs),
    /// Show every job, or one job.
    Status(cmd::jobs::StatusArgs),
    /// Live progress bars for every job, or one job, until they finish.
    Watch(cmd::jobs::WatchArgs),
    /// The answer of a job.
    Results(cmd::jobs::ResultsArgs),
    /// Cancel a job (its stored results stay, it gets no more work).
    Cancel(cmd::jobs::JobArgs),
    /// Pause a job: no new chunks are handed out.
    Pause(cmd::jobs::JobArgs),
    /// Resume a paused job.
    Resume(cmd::jobs::JobArgs),
    /// List the workers the coordinator has seen: cores, memory, last heartbeat, chunks, standing.
    Workers(cmd::workers::WorkersArgs),
    /// Ask a worker to finish its chunks, take no new ones and stop.
    Drain(cmd::workers::DrainArgs),
    /// Set an identity's share of the cluster (admin token): `sweep share set IDENTITY W`.
    Share(cmd::share::ShareArgs),
    /// Check a stopped coordinator's store, or repair it from its chunk records.
    Store(cmd::store::StoreArgs),
    /// List the search spaces.
    Spaces,
    /// Print a shell completion script: `sweep completions bash > /etc/bash_completion.d/sweep`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `sweep man > /usr/local/share/man/man1/sweep.1`.
    Man,
    /// Buzzled tools: `generate` prints a random puzzle with exactly one solution.
    Buzzled(cmd::buzzled::BuzzledArgs),
}

/// The spaces `sweep` itself knows, in the order `sweep spaces` lists them: the five puzzles, `primes` (the
/// engine's test space) and `exec`. Each is a crate of its own under `spaces/`, registered here exactly as a
/// user's crate registers its own; adding a built-in space is one line here and one in `Cargo.toml`.
pub fn builtin() -> Registry {
    Registry::new()
        .with::<sweep_star::Star>()
        .with::<sweep_billiard::Billiard>()
        .with::<sweep_brainball::Brainball>()
        .with::<sweep_buzzled::Buzzled>()
        .with::<sweep_peg::Peg>()
        .with::<sweep_primes::Primes>()
        .with::<sweep_exec::Exec>()
}

/// Runs the `sweep` command with `registry`'s spaces: what `sweep`'s own `main` does with [`builtin`], and what
/// a user's crate does with its own spaces added.
pub fn main_with(registry: Registry) -> ExitCode {
    // The launcher that forks `exec` chunks' boxes, and the server in a resident box, are this same binary
    // started with one argument.
    sweep_contain::serve_if_asked();
    let cli = Cli::parse();
    init_tracing(cli.log_json);
    let reg = &registry;
    let result = match cli.command {
        Command::Run(SpaceArgs { args }) => {
            start_launcher_for(&args);
            cmd::local::run(reg, args)
        }
        Command::Solve(SpaceArgs { args }) => {
            start_launcher_for(&args);
            cmd::local::solve(reg, args)
        }
        Command::Submit(SpaceArgs { args }) => cmd::submit::submit(reg, args),
        Command::Coordinator(a) => cmd::coordinator::coordinator(reg, *a),
        Command::Worker(a) => cmd::worker::worker(reg, a),
        Command::Status(a) => cmd::jobs::status(a),
        Command::Watch(a) => cmd::jobs::watch(a),
        Command::Results(a) => cmd::jobs::results(reg, a),
        Command::Cancel(a) => cmd::jobs::control(a, cmd::jobs::Control::Cancel),
        Command::Pause(a) => cmd::jobs::control(a, cmd::jobs::Control::Pause),
        Command::Resume(a) => cmd::jobs::control(a, cmd::jobs::Control::Resume),
        Command::Workers(a) => cmd::workers::workers(a),
        Command::Drain(a) => cmd::workers::drain(a),
        Command::Share(a) => cmd::share::share(a),
        Command::Store(a) => cmd::store::run(a),
        Command::Buzzled(a) => cmd::buzzled::run(a),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "sweep", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| anyhow::Error::new(e).context("writing the manual page")),
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
            eprintln!("sweep: {}", exit::one_line(&e));
            ExitCode::from(code)
        }
    }
}

/// Starts the launcher of `exec` boxes when the local run is an exec job. It must start from the main thread,
/// before the runtime's threads: its parent-death signal follows the thread that started it.
fn start_launcher_for(args: &[String]) {
    if args.first().map(String::as_str)
        == Some(<sweep_exec::Exec as sweep_space::SearchSpace>::NAME)
    {
        start_launcher();
    }
}

/// Starts the process's launcher; without one, boxes are forked from this process (slower, as contained).
pub(crate) fn start_launcher() {
    // For measuring what the launcher buys: SWEEP_NO_LAUNCHER=1 forks every box from this process.
    if std::env::var_os("SWEEP_NO_LAUNCHER").is_some_and(|v| v == "1") {
        return;
    }
    let started =
        std::env::current_exe().and_then(|exe| sweep_contain::launcher::start_global(&exe));
    if let Err(e) = started {
        tracing::warn!("no launcher ({e}): chunks' programs are forked from this process");
    }
}

/// The one place that turns errors into exit codes (the codes are in [`exit`]).
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

fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Whether logs on stderr are coloured: only on a terminal (a file or a pipe would keep the escape codes), and
/// not when `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).
fn log_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some("".into())));
        assert!(!log_colour(true, Some("1".into())));
        assert!(!log_colour(false, None));
        assert!(!log_colour(false, Some("".into())));
    }

    /// The completion scripts and the manual page come from the definition the command parses with, so they
    /// name every subcommand, including the ones added later.
    #[test]
    fn completions_and_manual_page_name_every_subcommand() {
        Cli::command().debug_assert();
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "sweep",
            &mut bash,
        );
        let bash = String::from_utf8(bash).expect("a bash script is text");
        let mut man = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut man)
            .expect("the manual page renders");
        let man = String::from_utf8(man).expect("a manual page is text");
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            assert!(bash.contains(name), "bash completion lacks `{name}`");
            assert!(man.contains(name), "manual page lacks `{name}`");
        }
    }
}
