//! The single-chunk baseline's head, as transformers' sequence classifiers have it, on the
//! `<s>`/`[CLS]` state of the first chunk:
//! - RoBERTa family (`RobertaClassificationHead`): `dropout → classifier.dense (H → H) → tanh →
//!   dropout → classifier.out_proj (→ labels)`;
//! - BERT (`BertPooler` + `BertForSequenceClassification`): `bert.pooler.dense (H → H) → tanh →
//!   dropout → classifier (→ labels)`;
//! - MPNet (`MPNetClassificationHead`): as RoBERTa;
//! - ELECTRA (`ElectraClassificationHead`): as RoBERTa with GELU for tanh;
//! - DistilBERT (`DistilBertForSequenceClassification`): `pre_classifier (H → H) → ReLU → dropout
//!   (seq_classif_dropout) → classifier (→ labels)`;
//! - ModernBERT (`ModernBertForSequenceClassification` with `classifier_pooling` "cls"):
//!   `head.dense (H → H) → GELU → head.norm → dropout → classifier (→ labels)`;
//! - DeBERTa-v2 (`ContextPooler` + `DebertaV2ForSequenceClassification`): `dropout (pooler_dropout)
//!   → pooler.dense (H → H) → GELU → dropout (cls_dropout) → classifier (→ labels)`.
//!
//! Tensor names are transformers' own, so the saved directory loads with `from_pretrained`.

use candle_core::{Result, Tensor};
use candle_nn::{Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::encoder::SequenceHeadStyle;
use crate::layers::{linear, linear_with_bias, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// The head of a `*ForSequenceClassification` model.
#[derive(Debug, Clone)]
pub struct SequenceHead {
    /// The dropout in front of `dense` (RoBERTa, MPNet, ELECTRA; BERT and DistilBERT have none).
    input_dropout: Option<Dropout>,
    dense: Linear,
    activation: HeadActivation,
    /// ModernBERT's `head.norm` after the activation.
    norm: Option<LayerNorm>,
    dropout: Dropout,
    out_proj: Linear,
}

/// The activation between the head's two dense layers.
#[derive(Debug, Clone, Copy)]
enum HeadActivation {
    Tanh,
    Gelu,
    Relu,
}

impl SequenceHead {
    /// Loads (or, from a fresh builder, creates) the head from the root builder, shaped and
    /// named as transformers has it for the encoder's family ([`SequenceHeadStyle`]).
    pub fn load(vb: VarBuilder, encoder: &EncoderConfig, labels: usize, dropout: f64) -> Result<Self> {
        let (h, std) = (encoder.hidden_size, encoder.initializer_range);
        let style = encoder.family().sequence_head();
        let classifier = vb.pp("classifier");
        let mut norm = None;
        let (input_dropout, dense, activation, out_proj) = match style {
            SequenceHeadStyle::Classifier | SequenceHeadStyle::ClassifierGelu => (
                Some(Dropout::new(dropout)),
                linear(classifier.pp("dense"), h, h, std)?,
                if style == SequenceHeadStyle::Classifier { HeadActivation::Tanh } else { HeadActivation::Gelu },
                linear(classifier.pp("out_proj"), h, labels, std)?,
            ),
            SequenceHeadStyle::BertPooler => (
                None,
                linear(vb.pp(Self::bert_pooler(encoder)), h, h, std)?,
                HeadActivation::Tanh,
                linear(classifier, h, labels, std)?,
            ),
            SequenceHeadStyle::PredictionHead => {
                let settings = crate::encoder::ModernSettings::of(encoder);
                let bias = encoder.extra.get("classifier_bias").and_then(serde_json::Value::as_bool).unwrap_or(false);
                let head = vb.pp("head");
                let dense = linear_with_bias(head.pp("dense"), h, h, std, bias)?;
                norm =
                    Some(crate::encoder::modern_norm(head.pp("norm"), h, encoder.layer_norm_eps, settings.norm_bias)?);
                (None, dense, HeadActivation::Gelu, linear(classifier, h, labels, std)?)
            }
            SequenceHeadStyle::ContextPooler => {
                let pooler_dropout =
                    encoder.extra.get("pooler_dropout").and_then(serde_json::Value::as_f64).unwrap_or(0.0);
                (
                    Some(Dropout::new(pooler_dropout)),
                    linear(vb.pp("pooler").pp("dense"), h, h, std)?,
                    HeadActivation::Gelu,
                    linear(classifier, h, labels, std)?,
                )
            }
            SequenceHeadStyle::PreClassifier => (
                None,
                linear(vb.pp("pre_classifier"), h, h, std)?,
                HeadActivation::Relu,
                linear(classifier, h, labels, std)?,
            ),
        };
        Ok(Self { input_dropout, dense, activation, norm, dropout: Dropout::new(dropout), out_proj })
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
        let x = self.dense.forward(&x)?;
        let x = match self.activation {
            HeadActivation::Tanh => x.tanh()?,
            HeadActivation::Gelu => x.gelu_erf()?,
            HeadActivation::Relu => x.relu()?,
        };
        let x = match &self.norm {
            Some(norm) => norm.forward(&x, mode)?,
            None => x,
        };
        let x = self.dropout.forward(&x, mode)?;
        self.out_proj.forward(&x)?.squeeze(0)
    }
}
