//! Errors of the bag-of-words baseline.

use std::path::PathBuf;

/// What can go wrong training, saving, loading or running a bag-of-words model.
#[derive(Debug, thiserror::Error)]
pub enum BowError {
    /// Input that cannot be used (no documents, one class, a label out of range, …).
    #[error("{0}")]
    InvalidInput(String),
    /// Too few documents of some label for the cross-validation that chooses C.
    #[error(
        "{folds}-fold cross-validation to choose C needs at least 2 folds and as many documents of every \
         label (the rarest has {rarest}); give fewer folds or one C"
    )]
    TooFewForFolds {
        /// Folds asked for.
        folds: usize,
        /// Documents of the rarest label present.
        rarest: usize,
    },
    /// No term occurs in enough training documents to be a feature: the model could only
    /// predict the label frequencies.
    #[error(
        "no word or n-gram occurs in at least {min_df} of the {documents} training documents, so the model \
         would have no features; lower the minimum document frequency or give more documents"
    )]
    NoFeatures {
        /// The least number of documents a term must occur in.
        min_df: usize,
        /// Training documents.
        documents: usize,
    },
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
