//! Hugging Face checkpoint directories: `config.json`, `model.safetensors` (or shards) and
//! `tokenizer.json`. Pickle files are refused.

mod backend;
mod files;
#[cfg(feature = "hub")]
mod hub;
mod sentence_transformers;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};

pub use files::{refuse_encoderless, CheckpointFiles};
pub use sentence_transformers::{
    sentence_bert_config, sentence_files, sentence_modules, SentenceBertConfig, SentenceModules,
};
pub use store::TensorStore;

use crate::config::EncoderConfig;
use crate::encoder::Encoder;
use crate::error::{ModelError, Result};

/// An opened checkpoint: its files, validated config and lazily-read tensors.
#[derive(Debug)]
pub struct Checkpoint {
    /// Where everything is.
    pub files: CheckpointFiles,
    /// The parsed `config.json`.
    pub config: EncoderConfig,
    /// The tensors.
    pub store: Arc<TensorStore>,
}

/// Options for building a model from a checkpoint.
#[derive(Clone)]
pub struct LoadOptions {
    /// Compute dtype.
    pub dtype: DType,
    /// Register every tensor as a trainable variable here.
    pub trainable: Option<VarMap>,
    /// Initialise tensors missing from the checkpoint from this seed (new heads); when `None`,
    /// a missing tensor is an error.
    pub init_seed: Option<u64>,
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("dtype", &self.dtype)
            .field("trainable", &self.trainable.is_some())
            .field("init_seed", &self.init_seed)
            .finish()
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { dtype: DType::F32, trainable: None, init_seed: None }
    }
}

impl Checkpoint {
    /// Opens a local checkpoint directory.
    pub fn open(dir: &Path) -> Result<Self> {
        let files = CheckpointFiles::locate(dir)?;
        let config = EncoderConfig::from_file(&files.config)?;
        let store = Arc::new(TensorStore::open(&files.weights)?);
        Ok(Self { files, config, store })
    }

    /// Where the encoder's tensors live: `""` for a bare `BertModel` checkpoint,
    /// `"bert"`/`"roberta"` for one saved by a `*For...` head model.
    pub fn encoder_prefix(&self) -> &str {
        let prefix = self.config.weight_prefix();
        let word_table = self.config.family().file_name("embeddings.word_embeddings.weight");
        if self.store.contains(&format!("{prefix}.{word_table}")) {
            prefix
        } else {
            ""
        }
    }

    /// A `VarBuilder` over the tensors whose names start with `prefix` (`""` for the root,
    /// else e.g. `"bert"`); names are seen, and variables registered, without the prefix.
    pub fn var_builder(&self, prefix: &str, options: &LoadOptions, device: &Device) -> VarBuilder<'static> {
        let backend = backend::StoreBackend {
            store: Some(self.store.clone()),
            vars: options.trainable.clone(),
            init_rng: options.init_seed.map(backend::init_rng),
            model_type: self.config.model_type.clone(),
            family: Some(self.config.family()),
            lookup_prefix: if prefix.is_empty() { String::new() } else { format!("{prefix}.") },
        };
        VarBuilder::from_backend(Box::new(backend), options.dtype, device.clone())
    }

    /// Builds the encoder from the checkpoint's tensors (every tensor must be present).
    pub fn load_encoder(&self, options: &LoadOptions, device: &Device) -> Result<Encoder> {
        let options = LoadOptions { init_seed: None, ..options.clone() };
        let vb = self.var_builder(self.encoder_prefix(), &options, device);
        Ok(Encoder::load(vb, &self.config)?)
    }
}

/// A `VarBuilder` with no checkpoint behind it: every tensor is initialised from `seed`.
pub fn fresh_var_builder(
    model_type: &str,
    seed: u64,
    trainable: Option<VarMap>,
    dtype: DType,
    device: &Device,
) -> VarBuilder<'static> {
    let backend = backend::StoreBackend {
        store: None,
        vars: trainable,
        init_rng: Some(backend::init_rng(seed)),
        model_type: model_type.to_owned(),
        family: crate::encoder::Family::of(model_type).ok(),
        lookup_prefix: String::new(),
    };
    VarBuilder::from_backend(Box::new(backend), dtype, device.clone())
}

/// A `VarBuilder` over the tensors of safetensors files alone (no config), for models that are
/// not BERT-family checkpoints (the HAN): a missing tensor is an error naming it.
pub fn files_var_builder(
    weights: &[PathBuf],
    trainable: Option<VarMap>,
    device: &Device,
) -> Result<VarBuilder<'static>> {
    let backend = backend::StoreBackend {
        store: Some(Arc::new(TensorStore::open(weights)?)),
        vars: trainable,
        init_rng: None,
        model_type: String::new(),
        family: None,
        lookup_prefix: String::new(),
    };
    Ok(VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone()))
}

/// Resolves `--model`: a local directory, or (with the `hub` feature) a Hub repository id
/// such as `sentence-transformers/all-MiniLM-L6-v2`, downloaded to the local cache.
pub fn resolve_model_dir(spec: &str) -> Result<PathBuf> {
    let path = PathBuf::from(spec);
    if path.is_dir() {
        return Ok(path);
    }
    let looks_like_repo = !path.exists() && looks_like_hub_id(spec);
    #[cfg(feature = "hub")]
    if looks_like_repo {
        return hub::download(spec);
    }
    let hint = if looks_like_repo && cfg!(not(feature = "hub")) {
        "; if it is a Hugging Face Hub id, build longread with `--features hub` to download it".to_string()
    } else {
        String::new()
    };
    Err(ModelError::NotADirectory { path, hint })
}

/// A path as given when it exists or cannot be a Hub id; a Hugging Face Hub id (`org/name`,
/// no such local path) downloaded (with the `hub` feature) and replaced by its directory in the
/// cache. For flags that take a directory and may take a Hub id (`train --model`,
/// `serve --embedding-model`, Python's `Embedder`).
pub fn local_or_hub(path: &std::path::Path) -> Result<PathBuf> {
    match path.to_str() {
        Some(id) if !path.exists() && looks_like_hub_id(id) => resolve_model_dir(id),
        _ => Ok(path.to_path_buf()),
    }
}

/// Whether `spec` has the shape of a Hub repository id: `owner/name`, or a bare name such as
/// `roberta-base` (the Hub's older ids, which it still serves), each part of letters, digits,
/// `-`, `_` and `.`, not starting with `.`.
pub fn looks_like_hub_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

#[cfg(test)]
mod hub_id_tests {
    use super::looks_like_hub_id;

    #[test]
    fn hub_ids_with_and_without_an_owner_are_told_from_paths() {
        for id in
            ["roberta-base", "FacebookAI/roberta-base", "sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased"]
        {
            assert!(looks_like_hub_id(id), "{id}");
        }
        for path in ["./model", "../shared/models/x", "/abs/model", "a/b/c", "model dir", "", "a//b", ".hidden", "out/"]
        {
            assert!(!looks_like_hub_id(path), "{path}");
        }
    }
}
