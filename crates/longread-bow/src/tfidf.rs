//! TF-IDF weights as scikit-learn's `TfidfVectorizer(sublinear_tf=True)` computes them:
//! tf = 1 + ln(count), idf = ln((1 + n) / (1 + df)) + 1 (smooth), rows L2-normalised.

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
}

impl Default for TfidfSettings {
    fn default() -> Self {
        Self { ngram_max: 2, min_df: 2, sublinear_tf: true }
    }
}

/// The features fitted on some documents: a column per kept term and its idf.
#[derive(Debug, Clone)]
pub struct Columns {
    /// Term id (of the [`crate::counts::Interner`]) → column.
    pub of_term: HashMap<u32, u32>,
    /// idf per column.
    pub idf: Vec<f64>,
}

impl Columns {
    /// Keeps the terms found in at least `settings.min_df` of `docs`, columns in term-id order.
    pub fn fit(docs: &[&TermCounts], settings: &TfidfSettings) -> Self {
        let mut df: HashMap<u32, usize> = HashMap::new();
        for doc in docs {
            for &(term, _) in &doc.terms {
                *df.entry(term).or_default() += 1;
            }
        }
        let mut kept: Vec<(u32, usize)> = df.into_iter().filter(|&(_, d)| d >= settings.min_df.max(1)).collect();
        kept.sort_unstable();
        let n = docs.len() as f64;
        let idf = kept.iter().map(|&(_, d)| ((1.0 + n) / (1.0 + d as f64)).ln() + 1.0).collect();
        let of_term = kept.iter().enumerate().map(|(col, &(term, _))| (term, col as u32)).collect();
        Self { of_term, idf }
    }

    /// The TF-IDF row of a document's term counts (terms without a column are dropped).
    pub fn row(&self, doc: &TermCounts, sublinear_tf: bool) -> SparseRow {
        let pairs = doc.terms.iter().filter_map(|&(term, count)| self.of_term.get(&term).map(|&c| (c, count)));
        weigh(pairs, &self.idf, sublinear_tf)
    }
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
