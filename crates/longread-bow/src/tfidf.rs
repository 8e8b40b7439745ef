//! TF-IDF weights as scikit-learn's `TfidfVectorizer(sublinear_tf=True)` computes them:
//! tf = 1 + ln(count), idf = ln((1 + n) / (1 + df)) + 1 (smooth), rows L2-normalised. With
//! character n-grams too, a row is two blocks, each normalised on its own, as scikit-learn's
//! `make_union(word_vectorizer, char_wb_vectorizer)` gives: the word columns, then the
//! character columns.

use std::collections::HashMap;

use crate::counts::TermCounts;
use crate::sparse::SparseRow;

/// Which n-grams become features.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TfidfSettings {
    /// Longest n-gram (1: words only; 2: words and pairs of words).
    pub ngram_max: usize,
    /// Least number of training documents a term must occur in.
    pub min_df: usize,
    /// tf = 1 + ln(count) instead of the count.
    pub sublinear_tf: bool,
    /// Character n-grams inside word boundaries, `[shortest, longest]` (scikit-learn's
    /// `char_wb`), as a second block of features; `None`: words only.
    #[serde(default)]
    pub char_ngrams: Option<[usize; 2]>,
}

impl Default for TfidfSettings {
    fn default() -> Self {
        Self { ngram_max: 2, min_df: 2, sublinear_tf: true, char_ngrams: None }
    }
}

/// The features fitted on some documents: a column per kept term and its idf.
#[derive(Debug, Clone)]
pub struct Columns {
    /// Term id (of the [`crate::counts::Interner`]) → column.
    pub of_term: HashMap<u32, u32>,
    /// idf per column (the word block's columns, then the character block's).
    pub idf: Vec<f64>,
}

impl Columns {
    /// Keeps the terms found in at least `settings.min_df` of `docs`: the word block's columns
    /// in term-id order, then the character block's.
    pub fn fit(docs: &[&TermCounts], settings: &TfidfSettings) -> Self {
        let mut of_term = HashMap::new();
        let mut idf = Vec::new();
        let words = kept_terms(docs.iter().map(|d| &d.words), settings.min_df);
        let chars = kept_terms(docs.iter().map(|d| &d.chars), settings.min_df);
        let n = docs.len() as f64;
        for (term, df) in words.iter().chain(&chars) {
            of_term.insert(*term, idf.len() as u32);
            idf.push(((1.0 + n) / (1.0 + *df as f64)).ln() + 1.0);
        }
        Self { of_term, idf }
    }

    /// The TF-IDF row of a document's term counts (terms without a column are dropped).
    pub fn row(&self, doc: &TermCounts, sublinear_tf: bool) -> SparseRow {
        let columns = |terms: &[(u32, u32)]| -> Vec<(u32, u32)> {
            terms.iter().filter_map(|&(term, count)| self.of_term.get(&term).map(|&c| (c, count))).collect()
        };
        blocks(columns(&doc.words), columns(&doc.chars), &self.idf, sublinear_tf)
    }
}

/// (term, document frequency) of the terms in at least `min_df` documents, terms ascending.
fn kept_terms<'a>(docs: impl Iterator<Item = &'a Vec<(u32, u32)>>, min_df: usize) -> Vec<(u32, usize)> {
    let mut df: HashMap<u32, usize> = HashMap::new();
    for doc in docs {
        for &(term, _) in doc {
            *df.entry(term).or_default() += 1;
        }
    }
    let mut kept: Vec<(u32, usize)> = df.into_iter().filter(|&(_, d)| d >= min_df.max(1)).collect();
    kept.sort_unstable();
    kept
}

/// The row of a document whose word-block and character-block (column, count) pairs are given
/// (every word column below every character column): each block weighed and normalised alone.
pub fn blocks(words: Vec<(u32, u32)>, chars: Vec<(u32, u32)>, idf: &[f64], sublinear_tf: bool) -> SparseRow {
    let mut row = weigh(words.into_iter(), idf, sublinear_tf);
    let tail = weigh(chars.into_iter(), idf, sublinear_tf);
    row.indices.extend(tail.indices);
    row.values.extend(tail.values);
    row
}

/// TF-IDF of (column, count) pairs, L2-normalised, columns ascending.
pub fn weigh(pairs: impl Iterator<Item = (u32, u32)>, idf: &[f64], sublinear_tf: bool) -> SparseRow {
    let mut pairs: Vec<(u32, u32)> = pairs.collect();
    pairs.sort_unstable();
    let values: Vec<f64> = pairs
        .iter()
        .map(|&(col, count)| {
            let tf = if sublinear_tf { 1.0 + (count as f64).ln() } else { count as f64 };
            tf * idf[col as usize]
        })
        .collect();
    let norm = values.iter().map(|v| v * v).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    SparseRow { indices: pairs.iter().map(|p| p.0).collect(), values: values.iter().map(|v| v * scale).collect() }
}
