//! Word + position + token-type embeddings, LayerNorm, dropout.
//! Reference: transformers `models/bert/modeling_bert.py: BertEmbeddings` and
//! `models/roberta/modeling_roberta.py: RobertaEmbeddings`.

use candle_core::{Result, Tensor};
use candle_nn::{Embedding, Init, Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::layers::{Dropout, LayerNorm};
use crate::mode::Mode;

/// The embedding block of a BERT/RoBERTa encoder.
#[derive(Debug, Clone)]
pub struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    dropout: Dropout,
}

impl Embeddings {
    /// Loads `word_embeddings`, `position_embeddings`, `token_type_embeddings` and `LayerNorm`.
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.initializer_range };
        let table = |name: &str, rows: usize| -> Result<Embedding> {
            let w = vb.pp(name).get_with_hints((rows, cfg.hidden_size), "weight", init)?;
            Ok(Embedding::new(w, cfg.hidden_size))
        };
        Ok(Self {
            word: table("word_embeddings", cfg.vocab_size)?,
            position: table("position_embeddings", cfg.max_position_embeddings)?,
            token_type: table("token_type_embeddings", cfg.type_vocab_size)?,
            norm: LayerNorm::load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)?,
            dropout: Dropout::new(cfg.hidden_dropout_prob),
        })
    }

    /// The word-embedding matrix (tied to the MLM decoder).
    pub fn word_embeddings(&self) -> &Tensor {
        self.word.embeddings()
    }

    /// Embeds token ids.
    ///
    /// # Shapes
    /// `input_ids, position_ids, token_type_ids: [batch, seq]` (u32) → `[batch, seq, hidden]`
    pub fn forward(
        &self,
        input_ids: &Tensor,
        position_ids: &Tensor,
        token_type_ids: &Tensor,
        mode: Mode,
    ) -> Result<Tensor> {
        let x = self.word.forward(input_ids)?;
        let x = (x + self.position.forward(position_ids)?)?;
        let x = (x + self.token_type.forward(token_type_ids)?)?;
        let x = self.norm.forward(&x, mode)?;
        self.dropout.forward(&x, mode)
    }
}
