//! A document as a `doc_size × sent_size` grid of word ids: the first `doc_size` sentences,
//! each cut to its first `sent_size` words, padded with `PAD`.

use serde::{Deserialize, Serialize};

use crate::words::split::Sentence;
use crate::words::vocabulary::{Vocabulary, PAD};

/// Sentences per document and words per sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridShape {
    /// Most sentences read per document.
    pub doc_size: usize,
    /// Most words read per sentence.
    pub sent_size: usize,
}

/// One document's grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentGrid {
    /// Row-major `[doc_size, sent_size]` ids.
    pub ids: Vec<u32>,
    /// Sentences kept (rows with at least one word).
    pub sentences: usize,
}

impl GridShape {
    /// The grid of `sentences`.
    pub fn grid(&self, sentences: &[Sentence], vocabulary: &Vocabulary) -> DocumentGrid {
        let mut ids = vec![PAD; self.doc_size * self.sent_size];
        let kept = sentences.len().min(self.doc_size);
        for (row, sentence) in sentences.iter().take(kept).enumerate() {
            for (col, word) in sentence.words.iter().take(self.sent_size).enumerate() {
                ids[row * self.sent_size + col] = vocabulary.id(&word.text);
            }
        }
        DocumentGrid { ids, sentences: kept }
    }

    /// Defaults from training documents: the `p`-th percentile of sentences per document and
    /// of words per sentence (at least 1 each).
    pub fn from_percentile(documents: &[Vec<Sentence>], p: f64) -> Self {
        let sentences: Vec<usize> = documents.iter().map(Vec::len).collect();
        let words: Vec<usize> = documents.iter().flatten().map(|s| s.words.len()).collect();
        Self { doc_size: percentile(&sentences, p).max(1), sent_size: percentile(&words, p).max(1) }
    }
}

/// The `p`-th percentile (0–100, nearest rank) of `values`; 0 for none.
pub fn percentile(values: &[usize], p: f64) -> usize {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split::split_document;

    #[test]
    fn long_documents_are_cut_and_short_ones_padded() {
        let doc = split_document("A b c d. E f. G.");
        let vocab = Vocabulary::build([doc.as_slice()], 1, 0);
        let grid = GridShape { doc_size: 2, sent_size: 3 }.grid(&doc, &vocab);
        let (a, b, c, e, f) = (vocab.id("a"), vocab.id("b"), vocab.id("c"), vocab.id("e"), vocab.id("f"));
        assert_eq!(grid.ids, vec![a, b, c, e, f, PAD]);
        assert_eq!(grid.sentences, 2);
        let grid = GridShape { doc_size: 4, sent_size: 5 }.grid(&doc, &vocab);
        assert_eq!(grid.sentences, 3);
        assert_eq!(&grid.ids[15..], &[PAD; 5]);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<usize> = (1..=100).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 90.0), percentile(&v, 100.0)), (50, 90, 100));
        assert_eq!(percentile(&[7], 90.0), 7);
        assert_eq!(percentile(&[], 90.0), 0);
    }
}
