//! Optional download from the Hugging Face Hub (cargo feature `hub`). Not exercised by the
//! tests, which have no network: the local-directory path is the tested one.

use std::path::PathBuf;

use crate::error::{ModelError, Result};

/// Downloads config, weights (single or sharded), tokenizer and sentence-transformers' settings
/// where the repository has them; returns the snapshot directory.
pub fn download(repo_id: &str) -> Result<PathBuf> {
    let err = |message: String| ModelError::Hub { repo: repo_id.to_owned(), message };
    let api = hf_hub::api::sync::Api::new().map_err(|e| err(e.to_string()))?;
    let repo = api.model(repo_id.to_owned());
    let config = repo.get("config.json").map_err(|e| err(format!("config.json: {e}")))?;
    if repo.get("model.safetensors").is_err() {
        let index = repo
            .get("model.safetensors.index.json")
            .map_err(|e| err(format!("no model.safetensors nor an index of shards: {e}")))?;
        let text = std::fs::read_to_string(&index).map_err(|e| err(e.to_string()))?;
        let parsed: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        let shards: std::collections::BTreeSet<String> = parsed["weight_map"]
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for shard in shards {
            repo.get(&shard).map_err(|e| err(format!("{shard}: {e}")))?;
        }
    }
    repo.get("tokenizer.json").map_err(|e| err(format!("tokenizer.json: {e}")))?;
    // sentence-transformers' settings, which `embed` honours (max_seq_length, pooling, Normalize):
    // optional, as a plain transformers repository has none of them.
    let modules = repo.get("modules.json").ok().and_then(|path| std::fs::read_to_string(path).ok());
    for name in super::sentence_files(modules.as_deref()) {
        let _ = repo.get(&name);
    }
    Ok(config.parent().map(PathBuf::from).unwrap_or_default())
}
