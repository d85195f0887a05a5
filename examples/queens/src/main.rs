//! The whole `sweep` command (run, solve, coordinator, worker, submit, watch, status, results, the dashboard)
//! with one more search space: `sweep-queens run queens --n 12`.

use std::process::ExitCode;

fn main() -> ExitCode {
    sweep::main_with(sweep::builtin().with::<sweep_queens::Queens>())
}
