//! Errors of the bag-of-words baseline.

use std::path::PathBuf;

/// What can go wrong training, saving, loading or running a bag-of-words model.
#[derive(Debug, thiserror::Error)]
pub enum BowError {
    /// Input that cannot be used (no documents, one class, a label out of range, …).
    #[error("{0}")]
    InvalidInput(String),
    /// A file of a model directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A model file that is not what longread writes.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The optimizer failed (it should not on this convex problem).
    #[error("logistic regression: {0}")]
    Solver(String),
}

/// Result with [`BowError`].
pub type Result<T> = std::result::Result<T, BowError>;
