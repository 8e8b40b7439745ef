//! Download from the Hugging Face Hub (cargo feature `hub`, on in the CLI's default build):
//! `--encoder sentence-transformers/all-MiniLM-L6-v2` fetches the checkpoint into the Hugging
//! Face cache, shared with Python's tools, and reads the same environment as they do
//! (huggingface_hub's `constants.py`):
//!
//! - `HF_HUB_CACHE`, else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
//!   `~/.cache/huggingface/hub`: where files are kept;
//! - `HF_ENDPOINT` (default `https://huggingface.co`): a mirror or a private hub;
//! - `HF_TOKEN` (else the cache's `token` file): for gated or private repositories;
//! - `HF_HUB_OFFLINE=1`: no network; only what the cache holds.
//!
//! Tested against a local stand-in for the Hub's file routes (longread-cli's
//! `tests/hub_download.rs`), so the real download path runs without a network.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiRepo};
use hf_hub::{Cache, CacheRepo, Repo, RepoType};

use crate::error::{ModelError, Result};

/// Where the Hugging Face cache is, as huggingface_hub decides it.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|home| home.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|cache| cache.join("huggingface/hub")))
        .or_else(|| var("HOME").map(|home| home.join(".cache/huggingface/hub")))
}

/// Whether `HF_HUB_OFFLINE` asks for no network (`1`, `true`, `yes`, `on`, as huggingface_hub
/// reads it).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// Where files come from: the Hub (through the cache) or, offline, the cache alone.
enum Source {
    Online(ApiRepo),
    Offline(CacheRepo, PathBuf),
}

impl Source {
    /// The local path of `file`, downloading it if needed; `Ok(None)` when the repository
    /// does not have it (offline: when the cache does not).
    fn get(&self, file: &str) -> std::result::Result<Option<PathBuf>, String> {
        match self {
            Source::Online(repo) => match repo.get(file) {
                Ok(path) => Ok(Some(path)),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(format!("{file}: {e}")),
            },
            Source::Offline(repo, _) => Ok(repo.get(file)),
        }
    }
}

/// Whether a download failed because the file is not in the repository (the Hub answers 404).
fn is_not_found(error: &hf_hub::api::sync::ApiError) -> bool {
    matches!(error, hf_hub::api::sync::ApiError::RequestError(e) if matches!(**e, ureq::Error::Status(404, _)))
}

/// Downloads config, weights (single or sharded), tokenizer and sentence-transformers' settings
/// where the repository has them; returns the snapshot directory.
pub fn download(repo_id: &str) -> Result<PathBuf> {
    let err = |message: String| ModelError::Hub { repo: repo_id.to_owned(), message };
    let cache_path = cache_dir().ok_or_else(|| {
        err("no cache directory: set HF_HOME (or HF_HUB_CACHE), or HOME, to say where downloads go".into())
    })?;
    let cache = Cache::new(cache_path.clone());
    let repo = Repo::new(repo_id.to_owned(), RepoType::Model);
    let source = if offline() {
        Source::Offline(cache.repo(repo), cache_path.clone())
    } else {
        let mut builder = ApiBuilder::from_cache(cache)
            .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_retries(2);
        if let Some(endpoint) = std::env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()) {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_owned());
        }
        if let Some(token) = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()) {
            builder = builder.with_token(Some(token));
        }
        Source::Online(builder.build().map_err(|e| err(e.to_string()))?.repo(repo))
    };
    let missing = |file: &str| match &source {
        Source::Offline(_, path) => err(format!(
            "HF_HUB_OFFLINE is set and the cache ({}) has no {file} for it: fetch it once on a connected \
             machine (e.g. `longread inspect --model {repo_id}`) or give a local directory",
            path.display()
        )),
        Source::Online(_) => err(format!("the repository has no {file}")),
    };
    let config = source.get("config.json").map_err(err)?.ok_or_else(|| missing("config.json"))?;
    if source.get("model.safetensors").map_err(err)?.is_none() {
        let index = source.get("model.safetensors.index.json").map_err(err)?.ok_or_else(|| {
            let pickle = matches!(source.get("pytorch_model.bin"), Ok(Some(_)));
            if pickle {
                err("it has only pytorch_model.bin (pickle), which longread does not load: convert it to \
                     safetensors (transformers' save_pretrained(safe_serialization=True))"
                    .into())
            } else {
                missing("model.safetensors (nor model.safetensors.index.json)")
            }
        })?;
        for shard in shard_files(&index).map_err(err)? {
            source.get(&shard).map_err(err)?.ok_or_else(|| missing(&shard))?;
        }
    }
    source.get("tokenizer.json").map_err(err)?.ok_or_else(|| missing("tokenizer.json"))?;
    // sentence-transformers' settings, which `embed` honours (max_seq_length, pooling, Normalize):
    // optional, as a plain transformers repository has none of them.
    let modules = source.get("modules.json").ok().flatten().and_then(|path| std::fs::read_to_string(path).ok());
    for name in super::sentence_files(modules.as_deref()) {
        let _ = source.get(&name);
    }
    Ok(config.parent().map(PathBuf::from).unwrap_or_default())
}

/// The shard files an index of sharded safetensors names.
fn shard_files(index: &Path) -> std::result::Result<std::collections::BTreeSet<String>, String> {
    let text = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    let parsed: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("model.safetensors.index.json: {e}"))?;
    let map =
        parsed["weight_map"].as_object().ok_or_else(|| "model.safetensors.index.json: no weight_map".to_string())?;
    map.values()
        .map(|v| {
            v.as_str()
                .filter(|name| !name.contains("..") && !name.starts_with('/'))
                .map(str::to_owned)
                .ok_or_else(|| format!("model.safetensors.index.json: a shard name that is not a file name: {v}"))
        })
        .collect()
}
