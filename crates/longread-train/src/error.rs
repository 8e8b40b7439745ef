//! Errors of the training crate.

/// Everything that can go wrong while training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A setting is out of range.
    #[error("invalid training setting: {0}")]
    InvalidSetting(String),
    /// Training diverged: too many optimizer steps in a row had NaN/inf loss or gradients.
    #[error("{0}")]
    Diverged(String),
    /// The run was asked to stop ([`crate::interrupt::request_stop`]); its last checkpoint
    /// holds everything trained.
    #[error("{0}")]
    Interrupted(String),
    /// The output directory of a run cannot be used as asked (exists, nothing to resume,
    /// settings that differ from the run being resumed); the message says what to do.
    #[error("{0}")]
    Run(String),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An error from the model crate.
    #[error(transparent)]
    Model(#[from] longread_model::ModelError),
    /// An error from the tensor framework.
    #[error(transparent)]
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for TrainError {
    /// Drops candle's backtrace wrapper, as the model crate does.
    fn from(e: candle_core::Error) -> Self {
        match longread_model::ModelError::from(e) {
            longread_model::ModelError::Candle(e) => Self::Candle(e),
            other => Self::Model(other),
        }
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, TrainError>;

impl From<longread_text::TextError> for TrainError {
    /// Text errors (unreadable data, unknown labels, chunking settings) as the model crate
    /// reports them: one line that names the input and the line.
    fn from(e: longread_text::TextError) -> Self {
        Self::Model(longread_model::ModelError::from(e))
    }
}
