//! The HAN classifier and its model directory: config.json (`"architectures": ["LongreadHAN"]`,
//! the [`HanConfig`] keys), vocab.json and model.safetensors (PyTorch `nn.GRU` names).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Init, Module, VarBuilder, VarMap};
use longread_text::words::{Vocabulary, PAD};

use crate::checkpoint::{files_var_builder, fresh_var_builder};
use crate::error::{ModelError, Result};
use crate::han::attention::ContextAttention;
use crate::han::config::{HanConfig, HAN_ARCHITECTURE};
use crate::han::gru::BiGru;
use crate::layers::{Dropout, Linear};
use crate::mode::Mode;
use crate::model_dir::{read_config_text, write_replacing, write_weights_file};

/// A Hierarchical Attention Network classifier (every tensor is a variable: it trains).
pub struct HanClassifier {
    config: HanConfig,
    vocabulary: Vocabulary,
    embedding: Tensor,
    word_gru: BiGru,
    word_attention: ContextAttention,
    sentence_gru: BiGru,
    sentence_attention: ContextAttention,
    classifier: Linear,
    dropout: Dropout,
    vars: VarMap,
}

impl std::fmt::Debug for HanClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HanClassifier").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What [`HanClassifier::forward`] returns.
#[derive(Debug, Clone)]
pub struct HanOutput {
    /// `[B, labels]`
    pub logits: Tensor,
    /// Word attention in each sentence, `[B, D, W]` (0 on padding).
    pub word_attention: Tensor,
    /// Sentence attention per hop, `[B, r, D]` (0 on padding sentences).
    pub sentence_attention: Tensor,
}

impl HanClassifier {
    /// A new model with weights drawn from `seed` (GRUs and linear layers uniform(−1/√fan, 1/√fan)
    /// as PyTorch, embeddings normal(0, 0.1) with a zero padding row, context vectors
    /// normal(0, 1/√A)).
    pub fn new(config: HanConfig, vocabulary: Vocabulary, seed: u64, device: &Device) -> Result<Self> {
        let vars = VarMap::new();
        let vb = fresh_var_builder("han", seed, Some(vars.clone()), DType::F32, device);
        let model = Self::build(vb, config, vocabulary, vars)?;
        // The padding row is zero, as nn.Embedding(padding_idx=0) makes it.
        if let Some(var) = model.vars.data().lock().unwrap_or_else(|p| p.into_inner()).get("embedding.weight") {
            let zero = Tensor::zeros((1, model.config.embedding_dim), DType::F32, device)?;
            var.set(&var.as_tensor().slice_assign(&[0..1, 0..model.config.embedding_dim], &zero)?)?;
        }
        Ok(model)
    }

    /// Loads a model directory written by [`Self::save_replacing`].
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = read_config(&dir.join("config.json"))?;
        let vocab_path = dir.join("vocab.json");
        let vocabulary = Vocabulary::load(&vocab_path)
            .map_err(|e| ModelError::InvalidConfig { path: vocab_path.clone(), message: e.to_string() })?;
        if vocabulary.len() != config.vocab_size {
            return Err(ModelError::InvalidConfig {
                path: vocab_path,
                message: format!("{} words, but config.json says vocab_size {}", vocabulary.len(), config.vocab_size),
            });
        }
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(ModelError::MissingFile { path: weights, what: "model weights" });
        }
        let vars = VarMap::new();
        let vb = files_var_builder(&[weights], Some(vars.clone()), device)?;
        Self::build(vb, config, vocabulary, vars)
    }

    fn build(vb: VarBuilder, config: HanConfig, vocabulary: Vocabulary, vars: VarMap) -> Result<Self> {
        let c = &config;
        let embedding = vb.pp("embedding").get_with_hints(
            (c.vocab_size, c.embedding_dim),
            "weight",
            Init::Randn { mean: 0.0, stdev: 0.1 },
        )?;
        let (word_out, sentence_out) = (2 * c.word_hidden, 2 * c.sentence_hidden);
        let word_gru = BiGru::load(vb.pp("word_gru"), c.embedding_dim, c.word_hidden)?;
        let word_attention = ContextAttention::load(vb.pp("word_attention"), word_out, c.word_attention_size, 1)?;
        let sentence_gru = BiGru::load(vb.pp("sentence_gru"), word_out, c.sentence_hidden)?;
        let sentence_attention = ContextAttention::load(
            vb.pp("sentence_attention"),
            sentence_out,
            c.sentence_attention_size,
            c.attention_hops,
        )?;
        let fan_in = c.attention_hops * sentence_out;
        let bound = 1.0 / (fan_in as f64).sqrt();
        let uniform = Init::Uniform { lo: -bound, up: bound };
        let classifier = Linear::new(
            vb.pp("classifier").get_with_hints((c.labels.len(), fan_in), "weight", uniform)?,
            Some(vb.pp("classifier").get_with_hints(c.labels.len(), "bias", uniform)?),
        );
        let dropout = Dropout::new(c.dropout);
        Ok(Self {
            config,
            vocabulary,
            embedding,
            word_gru,
            word_attention,
            sentence_gru,
            sentence_attention,
            classifier,
            dropout,
            vars,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HanConfig {
        &self.config
    }

    /// The vocabulary.
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocabulary
    }

    /// Label names in id order.
    pub fn labels(&self) -> &[String] {
        &self.config.labels
    }

    /// Whether a document carries any number of the labels (a sigmoid per label).
    pub fn is_multi_label(&self) -> bool {
        self.config.multi_label
    }

    /// Classifies a batch of documents given as word-id grids (`PAD` = 0 is padding).
    ///
    /// # Shapes
    /// `ids: [B, D, W]` (u32) → logits `[B, labels]`, word attention `[B, D, W]`, sentence
    /// attention `[B, r, D]`
    pub fn forward(&self, ids: &Tensor, mode: Mode) -> Result<HanOutput> {
        let (b, d, w) = ids.dims3()?;
        let word_mask = ids.ne(PAD)?.to_dtype(DType::F32)?; // [B, D, W]
        let sentence_mask = word_mask.max(D::Minus1)?; // [B, D]
        let flat_ids = ids.flatten_all()?;
        let x = self.embedding.index_select(&flat_ids, 0)?.reshape((b * d, w, self.config.embedding_dim))?;
        let x = self.dropout.forward(&x, mode)?;
        let word_mask = word_mask.reshape((b * d, w))?;
        let words = self.word_gru.forward(&x, &word_mask)?; // [B·D, W, 2Hw]
        let attended = self.word_attention.forward(&words, &word_mask)?;
        let sentences = attended.vectors.reshape((b, d, ()))?; // [B, D, 2Hw]
        let states = self.sentence_gru.forward(&sentences, &sentence_mask)?; // [B, D, 2Hs]
        let doc = self.sentence_attention.forward(&states, &sentence_mask)?;
        let doc_vector = self.dropout.forward(&doc.vectors.reshape((b, ()))?, mode)?;
        Ok(HanOutput {
            logits: self.classifier.forward(&doc_vector)?,
            word_attention: attended.weights.reshape((b, d, w))?,
            sentence_attention: doc.weights,
        })
    }

    /// Every variable by name.
    pub fn named_vars(&self) -> Vec<(String, candle_core::Var)> {
        let mut out: Vec<(String, candle_core::Var)> = self
            .vars
            .data()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// All tensors under their file names.
    pub fn named_tensors(&self) -> HashMap<String, Tensor> {
        self.named_vars().into_iter().map(|(k, v)| (k, v.as_tensor().detach())).collect()
    }

    /// config.json's contents.
    pub fn config_json(&self) -> String {
        let mut value = serde_json::to_value(&self.config).unwrap_or_default();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("architectures".into(), serde_json::json!([HAN_ARCHITECTURE]));
            obj.insert("model_type".into(), serde_json::json!("longread-han"));
        }
        serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
    }

    /// Replaces the word vectors (all but `<pad>`'s row, which stays zero).
    ///
    /// # Shapes
    /// `vectors: [vocab_size, embedding_dim]`
    pub fn set_word_vectors(&self, vectors: &Tensor) -> Result<()> {
        let (v, e) = (self.config.vocab_size, self.config.embedding_dim);
        if vectors.dims() != [v, e] {
            return Err(ModelError::ShapeMismatch {
                name: "embedding.weight".into(),
                expected: vec![v, e],
                found: vectors.dims().to_vec(),
            });
        }
        let zero = Tensor::zeros((1, e), DType::F32, vectors.device())?;
        let vectors = vectors.to_dtype(DType::F32)?.slice_assign(&[0..1, 0..e], &zero)?;
        let data = self.vars.data().lock().unwrap_or_else(|p| p.into_inner());
        match data.get("embedding.weight") {
            Some(var) => var.set(&vectors)?,
            None => unreachable!("every HAN tensor is a variable"),
        }
        Ok(())
    }

    /// Replaces `dir/model.safetensors` with the current weights atomically.
    pub fn save_weights(&self, dir: &Path) -> Result<()> {
        write_weights_file(dir, &self.named_tensors())
    }

    /// The model directory's files besides the weights: config.json and vocab.json.
    pub fn model_files(&self) -> Vec<(&'static str, Vec<u8>)> {
        vec![("config.json", self.config_json().into_bytes()), ("vocab.json", self.vocabulary.to_json().into_bytes())]
    }

    /// Writes the model directory (config.json, vocab.json, model.safetensors and `extra`
    /// files) as a new version of `out`, swapped in atomically.
    pub fn save_replacing(&self, out: &Path, extra: &[(&str, &[u8])]) -> Result<()> {
        let own = self.model_files();
        let mut files: Vec<(&str, &[u8])> = own.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        files.extend_from_slice(extra);
        write_replacing(out, &self.named_tensors(), &files)
    }
}

/// True when `dir/config.json` names a HAN model (`"architectures": ["LongreadHAN"]`).
pub fn is_han_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v["architectures"][0] == HAN_ARCHITECTURE)
}

/// Reads and validates a HAN config.json.
fn read_config(path: &Path) -> Result<HanConfig> {
    let text = read_config_text(path)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.to_owned(), source })?;
    if value["architectures"][0] != HAN_ARCHITECTURE {
        return Err(ModelError::InvalidConfig {
            path: path.to_owned(),
            message: "not a HAN model (architectures)".into(),
        });
    }
    let config: HanConfig =
        serde_json::from_value(value).map_err(|source| ModelError::Json { path: path.to_owned(), source })?;
    config.validate().map_err(|message| ModelError::InvalidConfig { path: path.to_owned(), message })?;
    Ok(config)
}
