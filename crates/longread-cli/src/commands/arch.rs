//! `--arch`: which classifier `init` and `train` build (on a pretrained encoder, or the HAN).

use clap::ValueEnum;
use longread_model::hierarchical::{Architecture, LongreadSection};
use longread_model::EncoderConfig;

/// The classifier architectures built on an encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Every chunk of the document, attention over the chunk vectors (longread's model).
    Hierarchical,
    /// The single-chunk baseline: the first chunk only (the first --chunk-size tokens),
    /// transformers' sequence-classification head, saved in the
    /// RobertaForSequenceClassification / BertForSequenceClassification layout.
    Sequence,
    /// The classic Hierarchical Attention Network (Yang et al. 2016): word BiGRU + attention,
    /// sentence BiGRU + attention, trained from scratch on the training data's words (no
    /// encoder; `train` only).
    Han,
}

impl Arch {
    /// The architecture of a model's section.
    pub fn of(section: &LongreadSection) -> Self {
        match section.architecture {
            Architecture::Hierarchical => Self::Hierarchical,
            Architecture::Sequence => Self::Sequence,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hierarchical => "hierarchical",
            Self::Sequence => "sequence",
            Self::Han => "han",
        }
    }
}

/// The single-chunk baseline's section: the first `chunk_size` tokens (at most the encoder's
/// positions), the head's dropout as transformers picks it.
pub fn sequence_section(encoder: &EncoderConfig, chunk_size: usize) -> LongreadSection {
    LongreadSection::sequence(chunk_size.min(encoder.max_sequence_length()), encoder.classifier_dropout())
}
