//! Finds the files of a Hugging Face model directory, refusing pickle weights.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result};

/// Pickle-based weight files that are never loaded.
const PICKLE_FILES: [&str; 3] = ["pytorch_model.bin", "model.pt", "model.pth"];

/// The files of one checkpoint directory.
#[derive(Debug, Clone)]
pub struct CheckpointFiles {
    /// The directory.
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`, or the shards named by `model.safetensors.index.json`.
    pub weights: Vec<PathBuf>,
    /// `tokenizer.json`, when present.
    pub tokenizer: Option<PathBuf>,
}

impl CheckpointFiles {
    /// Locates config, weights and tokenizer in `dir`.
    pub fn locate(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(ModelError::NotADirectory { path: dir.to_owned(), hint: String::new() });
        }
        refuse_encoderless(dir)?;
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(ModelError::MissingFile { path: config, what: "model configuration" });
        }
        check_json_syntax(&config)?;
        let tokenizer = Some(dir.join("tokenizer.json")).filter(|p| p.is_file());
        let weights = locate_weights(dir)?;
        Ok(Self { dir: dir.to_owned(), config, weights, tokenizer })
    }

    /// `tokenizer.json`, or an error naming it.
    pub fn require_tokenizer(&self) -> Result<&Path> {
        self.tokenizer.as_deref().ok_or_else(|| ModelError::MissingFile {
            path: self.dir.join("tokenizer.json"),
            what: "Hugging Face tokenizer",
        })
    }
}

/// Refuses a longread model without a transformer encoder (a bag of words, a HAN, an ensemble)
/// where a checkpoint is wanted, saying what it is: loading one as a checkpoint said
/// "config.json: file not found" or "missing field `hidden_size`".
pub fn refuse_encoderless(dir: &Path) -> Result<()> {
    match other_model_kind(dir) {
        Some(kind) => Err(ModelError::InvalidConfig {
            path: dir.to_owned(),
            message: format!(
                "{kind}, which has no transformer encoder: give a transformer checkpoint (config.json, \
                 model.safetensors, tokenizer.json), or a longread classifier built on one"
            ),
        }),
        None => Ok(()),
    }
}

/// What `dir` is when it is a longread model without a transformer encoder.
fn other_model_kind(dir: &Path) -> Option<&'static str> {
    if dir.join("bow.json").is_file() {
        Some("a bag-of-words model (bow.json)")
    } else if dir.join("ensemble.json").is_file() {
        Some("an ensemble of models (ensemble.json)")
    } else if crate::han::is_han_dir(dir) {
        Some("a HAN classifier (word vectors and GRUs)")
    } else {
        None
    }
}

/// Refuses a config.json that is not JSON before the weights are looked for: a directory with
/// a broken config and no weights yet (a half-copied download) was told only of the weights.
fn check_json_syntax(config: &Path) -> Result<()> {
    let text = crate::model_dir::read_config_text(config)?;
    serde_json::from_str::<serde::de::IgnoredAny>(&text)
        .map(drop)
        .map_err(|source| ModelError::Json { path: config.to_owned(), source })
}

fn locate_weights(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return shards_from_index(dir, &index);
    }
    for name in PICKLE_FILES {
        let path = dir.join(name);
        if path.is_file() {
            return Err(ModelError::PickleRefused { path });
        }
    }
    Err(ModelError::MissingFile { path: single, what: "model weights in safetensors format" })
}

/// Reads `weight_map` of a sharded checkpoint and checks that every shard exists.
fn shards_from_index(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let text = std::fs::read_to_string(index).map_err(|source| ModelError::Io { path: index.to_owned(), source })?;
    let parsed: Index =
        serde_json::from_str(&text).map_err(|source| ModelError::Json { path: index.to_owned(), source })?;
    let files: BTreeSet<&String> = parsed.weight_map.values().collect();
    if files.is_empty() {
        return Err(ModelError::InvalidConfig { path: index.to_owned(), message: "weight_map is empty".into() });
    }
    files
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            if name.contains("..") || name.contains('/') || !path.is_file() {
                Err(ModelError::MissingFile { path, what: "weight shard named in model.safetensors.index.json" })
            } else {
                Ok(path)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pickle_only_directory_is_refused_with_conversion_hint() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("pytorch_model.bin"), b"not really").unwrap();
        let err = CheckpointFiles::locate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("pickle") && err.contains("safetensors"), "{err}");
    }

    #[test]
    fn missing_config_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = CheckpointFiles::locate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("config.json") && err.contains("not found"), "{err}");
    }

    #[test]
    fn index_naming_a_missing_shard_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors"}}"#,
        )
        .unwrap();
        let err = CheckpointFiles::locate(dir.path()).unwrap_err().to_string();
        assert!(err.contains("model-00001-of-00002.safetensors"), "{err}");
    }
}
