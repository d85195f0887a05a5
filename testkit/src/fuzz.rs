//! Running a fuzz target: how many cases, and the one report of what it ran.

use std::time::Instant;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// How many cases each target runs: `SWEEP_FUZZ_CASES`, else `default` (a quick run for `cargo test`; the
/// full runs set the variable).
pub fn cases(default: u32) -> u32 {
    std::env::var("SWEEP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs `test` on `cases` inputs drawn from `strategy`, shrinking a failing one at most `max_shrink_iters`
/// times, and reports the wall time. Failures are never persisted: the inputs are seeded afresh each run,
/// and a failing one is in the panic message.
pub fn fuzz<S>(
    name: &str,
    cases: u32,
    max_shrink_iters: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters,
        ..Config::default()
    });
    let start = Instant::now();
    let result = runner.run(&strategy, test);
    eprintln!("fuzz {name}: {cases} cases in {:.2?}", start.elapsed());
    if let Err(e) = result {
        panic!("fuzz {name} failed: {e}");
    }
}
