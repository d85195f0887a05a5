//! The `exec` space: any program is a search space. Each chunk runs the user's command once, directly (no
//! shell), with `{chunk}`, `{chunks}` and `{job}` replaced in its arguments, and reads JSON lines from its
//! stdout:
//!
//! - `{"progress": NODES}`: nodes so far in this chunk (forwarded with heartbeats, so bars move);
//! - `{"checkpoint": "TEXT"}`: where the chunk is; kept by the coordinator, and handed to the next attempt of
//!   the chunk (on any worker) as `SWEEP_RESUME=TEXT`;
//! - exactly one final `{"nodes": N, "counters": {...}, "solutions": [...]}`;
//! - with `--splits` only, the answer to each line `split` that sweep writes on the program's stdin (when an
//!   idle thread could take part of the chunk): `{"split": {"kept": "K", "given": "G"}}` (the program goes on
//!   with K only, and a run of the chunk with `SWEEP_RESUME=G` does exactly the rest) or `{"split": null}`.
//!   Without `--splits` stdin is /dev/null and nothing is written. The rules (one request at a time, the wait
//!   for an answer, which answers fail the attempt) are in [`supervise`].
//!
//! Exit 0 with one valid final line is a done chunk; anything else is a failed attempt whose error carries the
//! exit status and the tail of stderr. The program runs in a box (`sweep-contain`): nothing it starts outlives
//! the chunk, and the job's limits (`--chunk-memory`, `--chunk-pids`, `--chunk-disk`, `--chunk-cpu`) hold; in a
//! private working directory, with a cleared environment (see [`ENVIRONMENT`]). Cancellation sends SIGTERM to
//! every process in the box, then SIGKILL after the job's grace period; a worker that dies takes the box along.
//!
//! # The one space that does I/O
//!
//! Every other space is a pure kernel. This one starts processes, reads their output, and packs and unpacks the
//! files a job ships. That is allowed because the program *is* the user's search, their kernel in whatever
//! language they wrote it: its output becomes the same `ChunkOutput` as any kernel's and goes through the same
//! checks (the protocol parsed strictly, [`Job::verify`](sweep_space::Job::verify) on every completion, each
//! chunk counted once). Workers run it only when started with `--allow-exec`.
//!
//! It still depends on nothing engine-side: only the contract crate `sweep-space`, the containment library
//! `sweep-contain` (the box each program runs in), and plain libraries (tar and blake3 for shipped files, nix for
//! their owner, serde, clap, thiserror). The worker that runs its chunks and the coordinator that stores its
//! shipped archive reach it only through the `Job` trait.
//!
//! # Modules
//!
//! - [`protocol`]: the lines of stdout parsed into typed [`protocol::Line`]s, or errors that say what is wrong;
//! - [`supervise`]: the program in its box: output as it comes, stop with grace ([`StopReason`]), exit status;
//! - [`ship`]: `--ship` files packed and named by digest, unpacked once per machine;
//! - `space`: the `SearchSpace` and `Job` that tie them together for one chunk.
//!
//! Rewriting a command line for the person who typed it (paths made absolute, `--ship PATH` replaced by a
//! digest) is the command line's business, not the space's: it lives with the `sweep` CLI.

pub mod protocol;
pub mod ship;
mod space;
pub mod supervise;

pub use protocol::MAX_LINE_BYTES;
pub use space::{Exec, ExecJob, ExecParams};
pub use supervise::{StopReason, STDERR_TAIL_BYTES};

/// The documented environment of a chunk's program. Everything else of the worker's environment is cleared.
pub const ENVIRONMENT: &str = "\
SWEEP_CHUNK    this chunk's index, 0-based
SWEEP_CHUNKS   the job's number of chunks
SWEEP_JOB      the coordinator's job number (0 under `sweep solve`)
SWEEP_THREADS  threads this chunk may use (--threads-per-chunk, capped by the worker's threads)
SWEEP_RESUME   the last checkpoint an earlier attempt of this chunk wrote; unset on a first attempt
SWEEP_SHIP     the directory of the shipped files (--ship), if any; also first on PATH
PATH           the worker's PATH (with the shipped directory first)
HOME, TMPDIR   the chunk's private working directory (removed afterwards)
LANG           C.UTF-8";
