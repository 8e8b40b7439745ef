//! The one sentence-transformers setting `embed` honours: `sentence_bert_config.json`'s
//! `max_seq_length`, which overrides the tokenizer's own truncation (all-MiniLM-L6-v2 ships
//! a tokenizer.json truncating at 128 but is used at 256).

use std::path::Path;

use crate::error::{ModelError, Result};

/// `max_seq_length` from `sentence_bert_config.json` in `dir`, if the file exists.
pub fn sentence_max_seq_length(dir: &Path) -> Result<Option<usize>> {
    let path = dir.join("sentence_bert_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io { path: path.clone(), source })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.clone(), source })?;
    Ok(value.get("max_seq_length").and_then(|v| v.as_u64()).map(|v| v as usize))
}
