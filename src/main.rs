//! The `sweep` binary: the command line with the built-in spaces (the five puzzles, `primes` and `exec`).

fn main() -> std::process::ExitCode {
    sweep::main_with(sweep::builtin())
}
