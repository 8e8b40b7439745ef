//! What kind of model a directory holds, decided in one place for every reader (the
//! `Classifier`, `inspect`'s summary, an ensemble's members): the files that make each kind.

use std::path::Path;

use longread_bow::is_bow_dir;

use crate::ensemble::is_ensemble_dir;
use longread_model::han::is_han_dir;

/// The kinds of model directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `ensemble.json`: members whose probabilities are averaged.
    Ensemble,
    /// The bag-of-words baseline's configuration file.
    Bow,
    /// A config.json whose architecture is the HAN's.
    Han,
    /// Anything else: a transformer encoder checkpoint (a plain Hugging Face encoder or a
    /// longread classifier on one); reading it says whether it is one.
    Encoder,
}

impl ModelKind {
    /// The kind of `dir` (checked in this order: ensemble, bag of words, HAN, encoder).
    pub fn of(dir: &Path) -> Self {
        if is_ensemble_dir(dir) {
            Self::Ensemble
        } else if is_bow_dir(dir) {
            Self::Bow
        } else if is_han_dir(dir) {
            Self::Han
        } else {
            Self::Encoder
        }
    }

    /// Whether models of this kind may have a transformer encoder (an ensemble's members may),
    /// and so run on the device asked for; the bag of words and the HAN run on the CPU in f32.
    pub fn has_encoder(self) -> bool {
        matches!(self, Self::Ensemble | Self::Encoder)
    }
}
