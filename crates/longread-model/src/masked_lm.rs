//! Masked language modelling on top of the encoder, as transformers' `RobertaForMaskedLM`
//! (`RobertaLMHead`) and `BertForMaskedLM` (`BertLMPredictionHead`) compute it: dense →
//! activation → LayerNorm → decoder tied to the word embeddings, plus a bias. The two differ
//! only in the tensors' names and in the activation (RoBERTa: exact GELU; BERT: the config's
//! `hidden_act`). Loss: cross-entropy over the positions whose label is not −100.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, Module, VarMap};

use crate::activation::Activation;
use crate::checkpoint::{Checkpoint, LoadOptions};
use crate::config::EncoderConfig;
use crate::encoder::Encoder;
use crate::encoder::Family;
use crate::error::{ModelError, Result};
use crate::layers::{linear, LayerNorm, Linear};
use crate::mode::Mode;
use crate::model_dir::write_new_dir;
use crate::variables;

/// An encoder with its masked-language-model head (a `RobertaForMaskedLM` or
/// `BertForMaskedLM` checkpoint).
pub struct MaskedLm {
    encoder: Encoder,
    config: EncoderConfig,
    /// tokenizer.json as read at load time (written again by [`MaskedLm::save`]).
    tokenizer_json: Option<Vec<u8>>,
    dense: Linear,
    activation: Activation,
    norm: LayerNorm,
    bias: Tensor,
    /// Variables (`encoder` without prefix, the head's under their file names), when loaded
    /// to be trained.
    vars: Option<(VarMap, VarMap)>,
}

/// Where a model family keeps its masked-LM head, and the head's activation.
struct HeadLayout {
    /// `lm_head` (RoBERTa) or `cls.predictions` (BERT): the bias lives here.
    prefix: &'static str,
    /// The dense layer and the LayerNorm under `prefix`.
    dense: &'static str,
    norm: &'static str,
    activation: Activation,
}

impl HeadLayout {
    fn of(config: &EncoderConfig) -> Self {
        if config.is_roberta() {
            Self { prefix: "lm_head", dense: "dense", norm: "layer_norm", activation: Activation::GeluErf }
        } else {
            let activation = config.activation();
            Self { prefix: "cls.predictions", dense: "transform.dense", norm: "transform.LayerNorm", activation }
        }
    }
}

impl MaskedLm {
    /// Loads `config.json` + `model.safetensors` with the masked-LM head
    /// (`lm_head.{dense, layer_norm, bias}` for RoBERTa, `cls.predictions.{transform.dense,
    /// transform.LayerNorm, bias}` for BERT); a missing head is an error.
    pub fn load(dir: &Path, trainable: bool, device: &Device) -> Result<Self> {
        Self::load_with(dir, trainable, None, device).map(|(model, _)| model)
    }

    /// Loads a pretrained encoder to continue its masked-LM pretraining (trainable): its head
    /// when the checkpoint has one (e.g. `bert-base-uncased`), else a new head initialised from
    /// `seed` (e.g. a sentence-transformers model, saved without one). Returns the model and
    /// whether the head came from the checkpoint. The configuration names the `*ForMaskedLM`
    /// architecture, so that [`MaskedLm::save`] writes a checkpoint transformers loads as one.
    pub fn continue_from(dir: &Path, seed: u64, device: &Device) -> Result<(Self, bool)> {
        let (mut model, stored) = Self::load_with(dir, true, Some(seed), device)?;
        let architecture = if model.config.is_roberta() { "RobertaForMaskedLM" } else { "BertForMaskedLM" };
        model.config.extra.insert("architectures".into(), serde_json::json!([architecture]));
        Ok((model, stored))
    }

    /// [`MaskedLm::load`], initialising a missing head from `head_seed` when given; also
    /// returns whether the head's bias was stored.
    fn load_with(dir: &Path, trainable: bool, head_seed: Option<u64>, device: &Device) -> Result<(Self, bool)> {
        let checkpoint = Checkpoint::open(dir)?;
        let family = checkpoint.config.family();
        if !matches!(family, Family::Bert | Family::Roberta) {
            return Err(ModelError::InvalidInput(format!(
                "{}: masked-LM pretraining reads BERT and RoBERTa encoders, not {family} (model_type \"{}\")",
                dir.display(),
                checkpoint.config.model_type
            )));
        }
        let vars = trainable.then(|| (VarMap::new(), VarMap::new()));
        let options =
            |v: Option<&VarMap>| LoadOptions { trainable: v.cloned(), init_seed: head_seed, ..LoadOptions::default() };
        let encoder = checkpoint.load_encoder(&options(vars.as_ref().map(|v| &v.0)), device)?;
        let cfg = &checkpoint.config;
        let layout = HeadLayout::of(cfg);
        let stored = checkpoint.store.contains(&format!("{}.bias", layout.prefix));
        let vb = checkpoint.var_builder("", &options(vars.as_ref().map(|v| &v.1)), device).pp(layout.prefix);
        let (h, std) = (cfg.hidden_size, cfg.initializer_range);
        let no_head = |e: candle_core::Error| {
            ModelError::InvalidInput(format!(
                "{}: no masked-LM head ({}.*): {e}; to continue pretraining an encoder saved without one, \
                 start a new run from it (`longread pretrain --model DIR`)",
                dir.display(),
                layout.prefix
            ))
        };
        let dense = linear(vb.pp(layout.dense), h, h, std).map_err(no_head)?;
        let norm = LayerNorm::load(vb.pp(layout.norm), h, cfg.layer_norm_eps).map_err(no_head)?;
        let bias = vb.get_with_hints(cfg.vocab_size, "bias", Init::Const(0.0)).map_err(no_head)?;
        let tokenizer_json = checkpoint.files.tokenizer.as_ref().and_then(|p| std::fs::read(p).ok());
        let activation = layout.activation;
        Ok((Self { encoder, config: cfg.clone(), tokenizer_json, dense, activation, norm, bias, vars }, stored))
    }

    /// The encoder's configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// Uses `dtype` for the encoder's activations (see [`Encoder::set_compute_dtype`]).
    pub fn set_precision(&mut self, dtype: DType) {
        self.encoder.set_compute_dtype(dtype);
    }

    /// The tensors under the names `save_pretrained` writes (`roberta.…` and `lm_head.…`, or
    /// `bert.…` and `cls.predictions.…`; the decoder is tied to the word embeddings and not
    /// stored).
    pub fn named_tensors(&self) -> Result<HashMap<String, Tensor>> {
        variables::named_tensors(self.vars.as_ref(), self.config.weight_prefix(), self.config.family())
    }

    /// Writes config.json, model.safetensors, tokenizer.json (the model's own unless `extra`
    /// has one) and `extra` files as the new directory `out` (atomically; `out` must not exist).
    pub fn save(&self, out: &Path, extra: &[(&str, &[u8])]) -> Result<()> {
        let config = serde_json::to_string_pretty(&self.config).unwrap_or_default() + "\n";
        let mut files: Vec<(&str, &[u8])> = vec![("config.json", config.as_bytes())];
        if !extra.iter().any(|(name, _)| *name == "tokenizer.json") {
            let tokenizer = self
                .tokenizer_json
                .as_deref()
                .ok_or_else(|| ModelError::InvalidInput("the model was loaded without a tokenizer.json".into()))?;
            files.push(("tokenizer.json", tokenizer));
        }
        files.extend_from_slice(extra);
        write_new_dir(out, &self.named_tensors()?, &files)
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Every variable (`encoder:…` and the head's, e.g. `lm_head.…`), when loaded as trainable.
    pub fn named_vars(&self) -> Vec<(String, candle_core::Var)> {
        variables::named_vars(self.vars.as_ref())
    }

    /// Vocabulary logits.
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [batch, seq]` (u32) → `[batch, seq, vocab]`
    pub fn forward(&self, input_ids: &Tensor, attention_mask: &Tensor, mode: Mode) -> Result<Tensor> {
        let hidden = self.encoder.forward(input_ids, attention_mask, mode)?.to_dtype(DType::F32)?;
        self.head(&hidden, mode)
    }

    /// The masked-LM loss of `labels` (−100 = not predicted), with the head run only at the
    /// labelled positions: the same value as `masked_lm_loss(&self.forward(..), labels)`
    /// (the head works on each position alone) without the vocabulary-sized logits of the
    /// ~85% of positions that carry no label, which dominate small models' steps.
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [batch, seq]` (u32), `labels: batch·seq` → scalar
    pub fn loss(&self, input_ids: &Tensor, attention_mask: &Tensor, labels: &[i64], mode: Mode) -> Result<Tensor> {
        let (b, s) = input_ids.dims2()?;
        let (rows, targets) = labelled_rows(labels, b * s, self.config.vocab_size)?;
        let hidden = self.encoder.forward(input_ids, attention_mask, mode)?.to_dtype(DType::F32)?;
        let chosen = hidden.reshape((b * s, ()))?.index_select(&Tensor::new(rows.as_slice(), hidden.device())?, 0)?;
        cross_entropy_at(&self.head(&chosen, mode)?, targets)
    }

    /// The head on hidden states: dense → activation → LayerNorm → tied decoder + bias.
    ///
    /// # Shapes
    /// `hidden: [.., hidden]` → `[.., vocab]`
    fn head(&self, hidden: &Tensor, mode: Mode) -> Result<Tensor> {
        let x = self.activation.forward(&self.dense.forward(hidden)?)?;
        let x = self.norm.forward(&x, mode)?;
        let decoder = self.encoder.embeddings().word_embeddings();
        Ok(x.broadcast_matmul(&decoder.t()?)?.broadcast_add(&self.bias)?)
    }
}

/// Mean cross-entropy over the positions whose label is not −100 (`ignore_index`), as
/// `RobertaForMaskedLM` computes its loss. Errors when no position is labelled.
///
/// # Shapes
/// `logits: [batch, seq, vocab]`, `labels: batch·seq` (row-major) → scalar
pub fn masked_lm_loss(logits: &Tensor, labels: &[i64]) -> Result<Tensor> {
    let (b, s, v) = logits.dims3()?;
    let (rows, targets) = labelled_rows(labels, b * s, v)?;
    let chosen = logits.reshape((b * s, v))?.index_select(&Tensor::new(rows.as_slice(), logits.device())?, 0)?;
    cross_entropy_at(&chosen, targets)
}

/// The positions whose label is not −100 and their labels; errors when there are
/// `positions` labels, none of them set, or one outside the vocabulary.
fn labelled_rows(labels: &[i64], positions: usize, vocab: usize) -> Result<(Vec<u32>, Vec<u32>)> {
    if labels.len() != positions {
        return Err(ModelError::InvalidInput(format!("{} labels for {positions} positions", labels.len())));
    }
    let rows: Vec<u32> = (0..labels.len()).filter(|&i| labels[i] != -100).map(|i| i as u32).collect();
    if rows.is_empty() {
        return Err(ModelError::InvalidInput("no masked position to predict".into()));
    }
    if let Some(bad) = rows.iter().map(|&i| labels[i as usize]).find(|&t| t < 0 || t as usize >= vocab) {
        return Err(ModelError::InvalidInput(format!("label {bad} is outside the vocabulary of {vocab}")));
    }
    let targets = rows.iter().map(|&i| labels[i as usize] as u32).collect();
    Ok((rows, targets))
}

/// Mean cross-entropy of rows of logits against one target each.
///
/// # Shapes
/// `logits: [rows, vocab]`, `targets: rows` → scalar
fn cross_entropy_at(logits: &Tensor, targets: Vec<u32>) -> Result<Tensor> {
    let log_probs = candle_nn::ops::log_softmax(logits, 1)?;
    let targets = Tensor::from_vec(targets, (logits.dim(0)?, 1), logits.device())?;
    Ok(log_probs.gather(&targets, 1)?.neg()?.mean_all()?)
}
