//! The commands, one module per command or family of commands. Each takes its parsed arguments and returns
//! the process's exit code, or an error that `lib.rs` turns into one.

pub mod buzzled;
pub mod coordinator;
pub mod jobs;
pub mod local;
pub mod members;
pub mod share;
pub mod store;
pub mod submit;
pub mod worker;
pub mod workers;
