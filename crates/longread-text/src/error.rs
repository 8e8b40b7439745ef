//! Errors of the text crate.

use std::path::PathBuf;

/// Everything that can go wrong reading text or tokenizing it.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` could not be loaded.
    #[error("{path}: not a valid Hugging Face tokenizer.json: {message}")]
    TokenizerLoad {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        message: String,
    },
    /// Tokenizing failed.
    #[error("tokenizing: {0}")]
    Tokenize(String),
    /// A line of a JSON-lines input is unusable.
    #[error("{source_name}:{line}: {message}")]
    BadLine {
        /// The input's name (path or `-`).
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A document has no tokens.
    #[error("the document is empty or whitespace-only (no tokens)")]
    EmptyDocument,
    /// A dataset cannot be split as asked; the message says why and what to do.
    #[error("{0}")]
    Split(String),
    /// Chunking settings are inconsistent.
    #[error("chunking configuration: {0}")]
    Config(String),
    /// The input holds no records.
    #[error("{source_name}: no input records ({why})")]
    EmptyInput {
        /// The input's name.
        source_name: String,
        /// Why, as the input is: an empty file, a directory without the files read.
        why: &'static str,
    },
    /// A setting cannot work; the message names it and says what can.
    #[error("{0}")]
    Setting(String),
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, TextError>;
