//! What can go wrong inside a search space, as one error type every caller maps in one place.

/// Everything that can go wrong inside a search space. Expected conditions (bad parameters, cancellation) are
/// variants, so callers can map them to exit codes and RPC statuses in one place.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SpaceError {
    #[error("unknown search space `{name}` (known: {known})")]
    UnknownSpace { name: String, known: String },
    /// The user asked for `--help`; the text is the space's rendered help, not an error.
    #[error("{0}")]
    Help(String),
    /// The space's command-line options did not parse; the text is clap's message.
    #[error("{0}")]
    Usage(String),
    #[error("invalid value for `{name}`: {reason}")]
    InvalidParam { name: &'static str, reason: String },
    #[error("malformed job parameters for `{space}`: {reason}")]
    BadParams { space: &'static str, reason: String },
    #[error("chunk {chunk} does not exist: the job has {n_chunks} chunks")]
    ChunkOutOfRange { chunk: u64, n_chunks: u64 },
    #[error("cancelled")]
    Cancelled,
    #[error("result failed verification: {0}")]
    Verification(String),
    /// The chunk's own program failed (an `exec` chunk: exit status, signal, bad output); the text says how,
    /// with the tail of what it wrote on stderr.
    #[error("{0}")]
    ChunkFailed(String),
    #[error("a space named `{0}` is registered twice")]
    DuplicateSpace(String),
}

/// A u128 figure (a counter, a node total) as JSON: a number while it fits in 64 bits, else its decimal string.
/// `json!` on a bare u128 above `u64::MAX` panics (serde_json has no bigger numbers), and a worker may report
/// counters that large, truthfully or not.
pub fn json_u128(v: u128) -> serde_json::Value {
    u64::try_from(v)
        .map(serde_json::Value::from)
        .unwrap_or_else(|_| serde_json::Value::String(v.to_string()))
}
