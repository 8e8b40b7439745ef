//! A HAN model's config.json (`"architectures": ["LongreadHAN"]`).

use longread_text::words::GridShape;
use serde::{Deserialize, Serialize};

/// `architectures` value of a HAN model directory.
pub const HAN_ARCHITECTURE: &str = "LongreadHAN";

/// Sizes and settings of a HAN; every field but the vocabulary and labels has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HanConfig {
    /// Words in the vocabulary, `<pad>` (0) and `<unk>` (1) included.
    pub vocab_size: usize,
    /// Word embedding size (200).
    pub embedding_dim: usize,
    /// Hidden size of each direction of the word GRU (50).
    pub word_hidden: usize,
    /// Hidden size of each direction of the sentence GRU (50).
    pub sentence_hidden: usize,
    /// Size of the word attention projection (100 = 2 × word_hidden, as in the paper).
    pub word_attention_size: usize,
    /// Size of the sentence attention projection (100).
    pub sentence_attention_size: usize,
    /// Context vectors of the sentence attention, r (1); the r document vectors are concatenated.
    pub attention_hops: usize,
    /// Dropout on the embeddings and on the document vector (0.5).
    pub dropout: f64,
    /// Most sentences read per document.
    pub doc_size: usize,
    /// Most words read per sentence.
    pub sent_size: usize,
    /// Label names in id order.
    pub labels: Vec<String>,
    /// Whether a document carries any number of the labels: one sigmoid per label instead of
    /// a softmax over them (false; written only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub multi_label: bool,
}

impl Default for HanConfig {
    fn default() -> Self {
        Self {
            vocab_size: 2,
            embedding_dim: 200,
            word_hidden: 50,
            sentence_hidden: 50,
            word_attention_size: 100,
            sentence_attention_size: 100,
            attention_hops: 1,
            dropout: 0.5,
            doc_size: 30,
            sent_size: 40,
            labels: Vec::new(),
            multi_label: false,
        }
    }
}

impl HanConfig {
    /// Sentences per document and words per sentence read.
    pub fn grid_shape(&self) -> GridShape {
        GridShape { doc_size: self.doc_size, sent_size: self.sent_size }
    }

    /// What is wrong with the settings, if anything.
    pub fn validate(&self) -> Result<(), String> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("embedding_dim", self.embedding_dim),
            ("word_hidden", self.word_hidden),
            ("sentence_hidden", self.sentence_hidden),
            ("word_attention_size", self.word_attention_size),
            ("sentence_attention_size", self.sentence_attention_size),
            ("attention_hops", self.attention_hops),
            ("doc_size", self.doc_size),
            ("sent_size", self.sent_size),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be positive"));
        }
        if self.vocab_size < 2 {
            return Err("vocab_size must count <pad> and <unk>".into());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(format!("dropout {} must be in [0, 1)", self.dropout));
        }
        if self.labels.len() < 2 {
            return Err("a classifier needs at least 2 labels".into());
        }
        Ok(())
    }
}
