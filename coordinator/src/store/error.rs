//! The store's error, in a leaf of its own: every layer of the store (the key-value layer, the blobs, the codecs)
//! returns it, so it cannot live in any one of them without making the others import upward.

use std::path::PathBuf;

use crate::core::CoreError;

/// Why a store could not be opened, read or written; each names the path or key involved, so that an operator
/// (or `sweep store check`) can find what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is not a sweep store ({why})")]
    NotAStore { path: PathBuf, why: String },
    #[error("cannot open the store at {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("store I/O failed: {0}")]
    Io(#[from] sled::Error),
    #[error("damaged record `{key}`: {why}")]
    Damaged { key: String, why: String },
    #[error("{what} of {bytes} bytes is too large to store")]
    TooLarge { what: String, bytes: u64 },
    #[error("artifact file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A store failure as the core names it: the core sits below the store and knows nothing of sled or files, so
/// the conversion lives here, on the side that knows both.
impl From<StoreError> for CoreError {
    fn from(e: StoreError) -> CoreError {
        CoreError::Store(e.to_string())
    }
}
