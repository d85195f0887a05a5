//! What sweep's integration tests share, in one place (as raft-rs keeps its `harness/`): an in-process
//! coordinator, a scripted worker, stub spaces and test certificates.
//!
//! - [`spaces`]: the built-in spaces as a worker without `--allow-exec` declares them, from `sweep::builtin`,
//!   the one list `sweep` itself registers.
//! - [`Server`]: a coordinator opened on a store and served on 127.0.0.1:0 (with tokens, TLS and the HTTP
//!   page when asked) until [`Server::stop`]; [`Server::client`] reaches it through `sweep-client`, as every
//!   user of the coordinator does.
//! - [`FakeWorker`]: a scripted worker that makes one `Work` call per method, so a test can put the coordinator
//!   in any state it wants; [`FakeWorker::run_chunks`] runs leased chunks with the real kernels.
//! - [`stubs`]: small spaces whose chunks behave as a test says (a panic on one chunk, chunks that need memory),
//!   for what no real space does on demand.
//! - [`pki`]: a CA and certificates for TLS tests.
//! - [`fuzz`]: how many cases a fuzz target runs, and running it.
//! - [`process`]: running a command a test depends on, failing the test with what it printed unless it
//!   succeeded.
//!
//! It is a dev-dependency only, and must never become a dependency of a crate that ships: it depends on the
//! coordinator and the `sweep` crate itself, which is fine for integration tests (`tests/`) but would make a
//! second copy of a crate in its own inline unit tests. Every failure here panics with what went wrong: a
//! harness that cannot start is a failed test.

pub mod fuzz;
pub mod pki;
pub mod process;
pub mod stubs;

mod server;
mod worker;

pub use server::{config, fresh_store, result_json, submit_job, submit_req, Server};
pub use worker::{report, run_lease, FakeWorker};

use sweep_space::{Registry, SearchSpace};

/// The built-in spaces (`sweep::builtin`) but `exec`, which a worker declares only when started with
/// `--allow-exec`: the spaces these tests submit to a coordinator and whose chunks a [`FakeWorker`] runs.
pub fn spaces() -> Registry {
    sweep::builtin().without(<sweep_exec::Exec as SearchSpace>::NAME)
}

/// The names of every space of `registry`, as a worker announces them.
pub fn space_names(registry: &Registry) -> Vec<String> {
    registry.names().into_iter().map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_spaces_are_the_builtin_ones_a_worker_declares_without_exec() {
        let names = space_names(&spaces());
        assert!(!names.iter().any(|n| n == "exec"), "{names:?}");
        let builtin = space_names(&sweep::builtin());
        assert_eq!(names.len() + 1, builtin.len(), "{names:?} {builtin:?}");
        for space in ["star", "billiard", "brainball", "buzzled", "peg", "primes"] {
            assert!(names.iter().any(|n| n == space), "{space}: {names:?}");
        }
    }
}
