//! Splitting a whole document into overlapping windows of tokens, each wrapped in the
//! tokenizer's special tokens, with its character span in the original text.
//!
//! The rules are exact so that the PyTorch reference (`scripts/reference_hierarchical.py`)
//! reproduces them:
//! - `ids` = the document's ids without special tokens, truncation and padding disabled;
//!   `L = chunk_size − n_special`; `step = L − stride` (> 0).
//! - windows start at 0, step, 2·step, …; the last is the first that reaches the end of `ids`.
//! - with `max_chunks > 0` and more windows than that: `head` keeps the first `max_chunks`,
//!   `spread` keeps windows `floor(i·(n−1)/(m−1) + 0.5)` for i in 0..m (m = 1 keeps window 0).
//! - each chunk is `prefix + window + suffix` (`[CLS] … [SEP]`, `<s> … </s>`).

mod segmented;
mod stream;

pub use stream::ChunkStream;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TextError};
use crate::tokenizer::TextTokenizer;

/// Texts longer than this (bytes) are tokenized in segments (bounded memory; the same chunks).
pub const WHOLE_TEXT_BYTES: usize = 256 * 1024;

/// Which windows to keep when a document has more than `max_chunks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ChunkSelection {
    /// The first `max_chunks` windows.
    #[default]
    Head,
    /// `max_chunks` windows spread evenly from the first to the last.
    Spread,
}

/// How documents are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkingConfig {
    /// Tokens per chunk, special tokens included (512).
    pub chunk_size: usize,
    /// Overlap in tokens between consecutive windows (256).
    pub stride: usize,
    /// Most chunks per document; 0 = no limit (20).
    pub max_chunks: usize,
    /// Which windows to keep past `max_chunks`.
    pub selection: ChunkSelection,
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Index of the window among all of the document's windows.
    pub index: usize,
    /// Token ids with special tokens.
    pub ids: Vec<u32>,
    /// Character offset (Unicode scalar values) where the window's text starts.
    pub start: usize,
    /// Character offset where it ends (exclusive).
    pub end: usize,
}

/// A document cut into chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedDocument {
    /// The kept chunks, in document order.
    pub chunks: Vec<Chunk>,
    /// Tokens in the whole document (without special tokens).
    pub total_tokens: usize,
    /// Windows before selection.
    pub total_windows: usize,
}

/// Cuts documents into chunks with one tokenizer and configuration.
#[derive(Debug, Clone)]
pub struct Chunker {
    tokenizer: TextTokenizer,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    config: ChunkingConfig,
}

impl Chunker {
    /// Prepares a chunker; the tokenizer's truncation and padding are switched off.
    pub fn new(mut tokenizer: TextTokenizer, config: ChunkingConfig) -> Result<Self> {
        tokenizer.disable_truncation_and_padding()?;
        let (prefix, suffix) = special_layout(&tokenizer)?;
        let n_special = prefix.len() + suffix.len();
        if config.chunk_size <= n_special {
            return Err(TextError::Config(format!(
                "chunk_size {} leaves no room for text next to {n_special} special tokens",
                config.chunk_size
            )));
        }
        let window = config.chunk_size - n_special;
        if config.stride >= window {
            return Err(TextError::Config(format!(
                "stride {} must be smaller than chunk_size − special tokens = {window} (the windows would not advance)",
                config.stride
            )));
        }
        Ok(Self { tokenizer, prefix, suffix, config })
    }

    /// The configuration.
    pub fn config(&self) -> &ChunkingConfig {
        &self.config
    }

    /// Tokens of text per window (`chunk_size − n_special`).
    pub fn window_len(&self) -> usize {
        self.config.chunk_size - self.prefix.len() - self.suffix.len()
    }

    /// Cuts one document. An empty or whitespace-only document (no tokens) is an error. Texts
    /// over [`WHOLE_TEXT_BYTES`] are tokenized segment by segment in bounded memory (the same
    /// chunks: `segmented`).
    pub fn chunk(&self, text: &str) -> Result<ChunkedDocument> {
        // Checked on the text: byte-level BPE turns pure whitespace into tokens.
        if text.trim().is_empty() {
            return Err(TextError::EmptyDocument);
        }
        if text.len() > WHOLE_TEXT_BYTES {
            return self.chunk_segmented(text, segmented::SEGMENT_CHARS);
        }
        self.chunk_whole(text)
    }

    /// [`Chunker::chunk`] with the whole text tokenized at once.
    fn chunk_whole(&self, text: &str) -> Result<ChunkedDocument> {
        let encoding =
            self.tokenizer.inner().encode_char_offsets(text, false).map_err(|e| TextError::Tokenize(e.to_string()))?;
        let ids = encoding.get_ids();
        if ids.is_empty() {
            return Err(TextError::EmptyDocument);
        }
        let offsets = encoding.get_offsets();
        let window = self.window_len();
        let starts = window_starts(ids.len(), window, window - self.config.stride);
        let keep = select_windows(starts.len(), self.config.max_chunks, self.config.selection);
        let chunks = keep
            .into_iter()
            .map(|index| {
                let start = starts[index];
                let end = (start + window).min(ids.len());
                let mut chunk_ids = Vec::with_capacity(end - start + self.prefix.len() + self.suffix.len());
                chunk_ids.extend_from_slice(&self.prefix);
                chunk_ids.extend_from_slice(&ids[start..end]);
                chunk_ids.extend_from_slice(&self.suffix);
                Chunk { index, ids: chunk_ids, start: offsets[start].0, end: offsets[end - 1].1 }
            })
            .collect();
        Ok(ChunkedDocument { chunks, total_tokens: ids.len(), total_windows: starts.len() })
    }
}

/// Start positions of the windows over `n` tokens: 0, step, … up to the first window that
/// reaches the end.
pub fn window_starts(n: usize, window: usize, step: usize) -> Vec<usize> {
    let mut starts = vec![0];
    while starts[starts.len() - 1] + window < n {
        let next = starts[starts.len() - 1] + step;
        starts.push(next);
    }
    starts
}

/// Indices of the windows kept out of `n`.
pub fn select_windows(n: usize, max_chunks: usize, selection: ChunkSelection) -> Vec<usize> {
    if max_chunks == 0 || n <= max_chunks {
        return (0..n).collect();
    }
    match selection {
        ChunkSelection::Head => (0..max_chunks).collect(),
        ChunkSelection::Spread if max_chunks == 1 => vec![0],
        ChunkSelection::Spread => {
            (0..max_chunks).map(|i| ((i * (n - 1)) as f64 / (max_chunks - 1) as f64 + 0.5).floor() as usize).collect()
        }
    }
}

/// The special tokens the post-processor puts before and after a single sequence,
/// found by encoding a probe with and without them.
fn special_layout(tokenizer: &TextTokenizer) -> Result<(Vec<u32>, Vec<u32>)> {
    let probe = "hello world";
    let encode = |special: bool| -> Result<Vec<u32>> {
        Ok(tokenizer.inner().encode(probe, special).map_err(|e| TextError::Tokenize(e.to_string()))?.get_ids().to_vec())
    };
    let (with, without) = (encode(true)?, encode(false)?);
    let at =
        (0..=with.len().saturating_sub(without.len())).find(|&i| with[i..].starts_with(&without)).ok_or_else(|| {
            TextError::Config("cannot find where the tokenizer's post-processor adds special tokens".into())
        })?;
    Ok((with[..at].to_vec(), with[at + without.len()..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_step_and_end_at_the_first_that_reaches_the_end() {
        assert_eq!(window_starts(5, 10, 6), vec![0]);
        assert_eq!(window_starts(10, 10, 6), vec![0]);
        assert_eq!(window_starts(11, 10, 6), vec![0, 6]);
        assert_eq!(window_starts(16, 10, 6), vec![0, 6]);
        assert_eq!(window_starts(17, 10, 6), vec![0, 6, 12]);
    }

    #[test]
    fn selection_head_and_spread() {
        assert_eq!(select_windows(5, 0, ChunkSelection::Head), vec![0, 1, 2, 3, 4]);
        assert_eq!(select_windows(5, 8, ChunkSelection::Spread), vec![0, 1, 2, 3, 4]);
        assert_eq!(select_windows(10, 3, ChunkSelection::Head), vec![0, 1, 2]);
        // floor(i·9/3 + 0.5) for i in 0..4
        assert_eq!(select_windows(10, 4, ChunkSelection::Spread), vec![0, 3, 6, 9]);
        // floor(i·6/4 + 0.5): 0, 2 (1.5 rounds up), 3, 5 (4.5 rounds up), 6
        assert_eq!(select_windows(7, 5, ChunkSelection::Spread), vec![0, 2, 3, 5, 6]);
        assert_eq!(select_windows(10, 1, ChunkSelection::Spread), vec![0]);
    }
}
