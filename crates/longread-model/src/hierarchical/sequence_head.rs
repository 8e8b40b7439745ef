//! The single-chunk baseline's head, as transformers' sequence classifiers have it, on the
//! `<s>`/`[CLS]` state of the first chunk:
//! - RoBERTa family (`RobertaClassificationHead`): `dropout → classifier.dense (H → H) → tanh →
//!   dropout → classifier.out_proj (→ labels)`;
//! - BERT (`BertPooler` + `BertForSequenceClassification`): `bert.pooler.dense (H → H) → tanh →
//!   dropout → classifier (→ labels)`.
//!
//! Tensor names are transformers' own, so the saved directory loads with `from_pretrained`.

use candle_core::{Result, Tensor};
use candle_nn::{Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::layers::{linear, Dropout, Linear};
use crate::mode::Mode;

/// The head of a `*ForSequenceClassification` model.
#[derive(Debug, Clone)]
pub struct SequenceHead {
    /// RoBERTa's dropout in front of `dense` (BERT has none).
    input_dropout: Option<Dropout>,
    dense: Linear,
    dropout: Dropout,
    out_proj: Linear,
}

impl SequenceHead {
    /// Loads (or, from a fresh builder, creates) the head from the root builder.
    pub fn load(vb: VarBuilder, encoder: &EncoderConfig, labels: usize, dropout: f64) -> Result<Self> {
        let (h, std) = (encoder.hidden_size, encoder.initializer_range);
        let (input_dropout, dense, out_proj) = if encoder.is_roberta() {
            let vb = vb.pp("classifier");
            (
                Some(Dropout::new(dropout)),
                linear(vb.pp("dense"), h, h, std)?,
                linear(vb.pp("out_proj"), h, labels, std)?,
            )
        } else {
            (None, linear(vb.pp(Self::bert_pooler(encoder)), h, h, std)?, linear(vb.pp("classifier"), h, labels, std)?)
        };
        Ok(Self { input_dropout, dense, dropout: Dropout::new(dropout), out_proj })
    }

    /// Where a BERT checkpoint keeps its pooler (`bert.pooler.dense`); a new BERT baseline
    /// starts from the pretrained pooler when the encoder checkpoint has one, as transformers does.
    pub fn bert_pooler(encoder: &EncoderConfig) -> String {
        format!("{}.pooler.dense", encoder.weight_prefix())
    }

    /// # Shapes
    /// `first: [hidden]` (the first chunk's `<s>`/`[CLS]` state) → logits `[labels]`
    pub fn forward(&self, first: &Tensor, mode: Mode) -> Result<Tensor> {
        let mut x = first.unsqueeze(0)?;
        if let Some(dropout) = &self.input_dropout {
            x = dropout.forward(&x, mode)?;
        }
        let x = self.dense.forward(&x)?.tanh()?;
        let x = self.dropout.forward(&x, mode)?;
        self.out_proj.forward(&x)?.squeeze(0)
    }
}
