//! A Hugging Face `tokenizer.json`, loaded with the `tokenizers` crate, with the settings
//! longread needs made explicit (truncation, no padding: batches are padded by the caller).

use std::path::{Path, PathBuf};

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::{Result, TextError};

/// One tokenized text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids, special tokens included.
    pub ids: Vec<u32>,
    /// True when the text was cut to fit.
    pub truncated: bool,
}

/// A loaded tokenizer.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer").field("path", &self.path).finish()
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(TextError::Io {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "tokenizer.json not found"),
            });
        }
        let inner = Tokenizer::from_file(path)
            .map_err(|e| TextError::TokenizerLoad { path: path.to_owned(), message: e.to_string() })?;
        Ok(Self { inner, path: path.to_owned() })
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// The truncation length set in tokenizer.json, if any.
    pub fn truncation_max_length(&self) -> Option<usize> {
        self.inner.get_truncation().map(|t| t.max_length)
    }

    /// Truncate to `max_length` tokens (special tokens included) and never pad.
    pub fn set_max_length(&mut self, max_length: usize) -> Result<()> {
        self.inner.with_padding(None);
        self.inner
            .with_truncation(Some(TruncationParams {
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| TextError::Tokenize(e.to_string()))?;
        Ok(())
    }

    /// Neither truncate nor pad (for chunking whole documents).
    pub fn disable_truncation_and_padding(&mut self) -> Result<()> {
        self.inner.with_padding(None);
        self.inner.with_truncation(None).map_err(|e| TextError::Tokenize(e.to_string()))?;
        Ok(())
    }

    /// Tokenizes texts with special tokens, in parallel.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        let encodings =
            self.inner.encode_batch(texts.to_vec(), true).map_err(|e| TextError::Tokenize(e.to_string()))?;
        Ok(encodings
            .into_iter()
            .map(|e| Encoded { truncated: !e.get_overflowing().is_empty(), ids: e.get_ids().to_vec() })
            .collect())
    }
}

/// Pads sequences to the longest one.
/// Returns `(ids, mask, seq_len)` with `ids` and `mask` row-major `[batch, seq_len]`.
pub fn pad_batch(seqs: &[&[u32]], pad_id: u32) -> (Vec<u32>, Vec<u32>, usize) {
    let seq_len = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(seqs.len() * seq_len);
    let mut mask = Vec::with_capacity(seqs.len() * seq_len);
    for s in seqs {
        ids.extend_from_slice(s);
        ids.extend(std::iter::repeat_n(pad_id, seq_len - s.len()));
        mask.extend(std::iter::repeat_n(1, s.len()));
        mask.extend(std::iter::repeat_n(0, seq_len - s.len()));
    }
    (ids, mask, seq_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_to_longest_with_mask() {
        let (ids, mask, len) = pad_batch(&[&[5, 6, 7], &[8]], 1);
        assert_eq!(len, 3);
        assert_eq!(ids, vec![5, 6, 7, 8, 1, 1]);
        assert_eq!(mask, vec![1, 1, 1, 1, 0, 0]);
    }

    #[test]
    fn corrupt_tokenizer_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, "{ not json").unwrap();
        let err = TextTokenizer::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("tokenizer.json") && err.contains("not a valid"), "{err}");
    }
}
