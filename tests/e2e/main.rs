//! sweep's end-to-end tests, in one test binary (it links once; `cargo test --release --test e2e`). Every test
//! starts real `sweep` processes (a coordinator on 127.0.0.1:0, workers, client commands) and bounds every wait.
//!
//! Where to look:
//! - `support/`: the harness. `mod.rs` runs `sweep` commands and whole clusters ([`support::Cluster`]: start,
//!   submit, wait, SIGKILL, restart, on loopback); `netns.rs` runs the same cluster with each process in its
//!   own network namespace.
//! - `engine_faults.rs`: the engine's fault properties, once, on the `primes` test space (killed workers,
//!   killed coordinator, SIGTERM, interrupted `sweep run`; exact answers, every chunk counted once).
//! - `spaces.rs`: every registered space distributed == in process (one table), then each puzzle's own answers.
//! - `splits.rs`: running chunks split into pieces while workers, the coordinator and `sweep run` are SIGKILLed;
//!   exact answers, every piece counted once.
//! - `dag.rs`: jobs whose inputs form a DAG, under kills. `store.rs`: a damaged store. `trust.rs`: lying
//!   workers, replication, drain. `security.rs`: tokens and TLS. `exec.rs`: programs as chunks; `boxes.rs`: what
//!   contains them (daemons, limits, the sandbox, shipped files in it; needs root).
//!   `dashboard.rs`: the web page in a real browser. `queens.rs`: a user's crate built on sweep.
//! - `answers.rs`: answers of any size: bounded memory (measured), `--count-only` for every space, lists
//!   streamed from the store.
//! - `shares.rs`: fair share between jobs of one priority, with real processes.
//! - `cli.rs`, `fuzz_cli.rs`: the command line's errors and a property test of its argument handling.
//! - `deploy.rs`: the recipes in `deploy/` (flags exist, manifests parse and agree, the Slurm scripts run, the
//!   replicated one through the loss of its leader).
//! - `replicated.rs`: three coordinator members (`support/group.rs`) whose leader is SIGKILLed; a member that
//!   lost its directory.
//! - `netns.rs`: faults between (simulated) hosts: partitions, a full disk, the replicated coordinator's nemesis;
//!   needs root (fails without it). `gray.rs`: silent faults (SIGSTOP, links that drop packets) on leaders,
//!   followers, workers and a worker's link, with progress measured while they last.
//!
//! One module: `cargo test --release --test e2e engine_faults::`. The slow ignored ones:
//! `cargo test --release --test e2e -- --ignored --nocapture`.

mod support;

mod answers;
mod boxes;
mod cli;
mod dag;
mod dashboard;
mod deploy;
mod engine_faults;
mod exec;
mod fuzz_cli;
mod gray;
mod netns;
mod queens;
mod replicated;
mod security;
mod shares;
mod spaces;
mod splits;
mod store;
mod trust;
