//! Errors of the model crate: one enum, structured fields, messages that say what to do.

use std::path::PathBuf;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The device asked for cannot be used (no GPU, a build without `cuda`, missing libraries).
    #[error("{0}")]
    Device(String),
    /// A file the checkpoint needs is not there.
    #[error("{path}: file not found ({what})")]
    MissingFile {
        /// The path that was looked for.
        path: PathBuf,
        /// What the file is for.
        what: &'static str,
    },
    /// The model directory does not exist or is not a directory.
    #[error("{path}: not a model directory (expected config.json, model.safetensors and tokenizer.json){hint}")]
    NotADirectory {
        /// The path given by the user.
        path: PathBuf,
        /// Extra advice (e.g. about the `hub` feature).
        hint: String,
    },
    /// Only pickle-based weights were found.
    #[error(
        "{path}: refusing to load PyTorch pickle weights: unpickling can execute arbitrary code. \
         Convert the checkpoint to safetensors first, e.g. in Python: \
         `AutoModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)`"
    )]
    PickleRefused {
        /// The pickle file that was found.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file is malformed or has fields of the wrong type.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's complaint (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The configuration is inconsistent.
    #[error("{path}: {message}")]
    InvalidConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A safetensors file could not be parsed.
    #[error("{path}: not a valid safetensors file: {message}")]
    CorruptWeights {
        /// The weights file.
        path: PathBuf,
        /// The parser's complaint.
        message: String,
    },
    /// A tensor the model needs is not in the checkpoint.
    #[error("checkpoint has no tensor `{name}` (looked for: {tried}); is this a {model_type} checkpoint?")]
    MissingTensor {
        /// The canonical name.
        name: String,
        /// Every name that was tried.
        tried: String,
        /// The model type from config.json.
        model_type: String,
    },
    /// A tensor has the wrong shape for the configuration.
    #[error("tensor `{name}` has shape {found:?} but config.json implies {expected:?}")]
    ShapeMismatch {
        /// The tensor name.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// An output path exists already and would be overwritten.
    #[error("{path} already exists; choose another output directory or remove it first")]
    OutputExists {
        /// The path.
        path: PathBuf,
    },
    /// A request the model cannot serve: input out of range (token ids, sequence length, ...),
    /// settings that contradict each other or the model, labels that do not match. The message
    /// names the thing and says what is wrong; it is printed as it is (a prefix such as
    /// "invalid model input" misnamed errors in a flag or a data file).
    #[error("{0}")]
    InvalidInput(String),
    /// The tokenizer failed.
    #[error(transparent)]
    Text(#[from] longread_text::TextError),
    /// Downloading from the Hugging Face Hub failed.
    #[error("{repo}: not a local directory; downloading it from the Hugging Face Hub: {message}")]
    Hub {
        /// The repository id.
        repo: String,
        /// What went wrong.
        message: String,
    },
    /// An error from the tensor framework.
    #[error(transparent)]
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for ModelError {
    /// Drops the backtrace candle attaches when `RUST_BACKTRACE` is set: users get one line.
    fn from(mut e: candle_core::Error) -> Self {
        while let candle_core::Error::WithBacktrace { inner, .. } = e {
            e = *inner;
        }
        Self::Candle(e)
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;
