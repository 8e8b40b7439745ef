//! Which terms pushed a document toward a label. A bag of words scores a label linearly — the
//! sum over the document's terms of TF-IDF value × weight, plus an intercept — so each term's
//! share of the score is exact, not an approximation: the shares and the intercept add up to
//! the score ([`BowModel::contributions`]).
//!
//! What "the score of a label" is depends on the model: a one-vs-rest (multi-label) model's
//! label has its own log-odds, w·x + b; a two-label model's log-odds of one label against the
//! other, ±(w·x + b); a softmax over more labels, the label's logit minus the mean of the other
//! labels' logits (softmax is unchanged by adding one number to every logit, so only such
//! differences mean anything).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::counts::for_each_char_term;
use crate::error::{BowError, Result};
use crate::model::BowModel;
use crate::sparse::SparseRow;
use crate::terms::{for_each_ngram, words};

/// One term of a document and how far it moved a label's score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TermEvidence {
    /// The term as the vocabulary has it: a word n-gram (`"human rights"`), or a character
    /// n-gram prefixed `c:` (`"c: tor"`).
    pub term: String,
    /// value × weight: how much the term raised the label's score (log-odds units; negative:
    /// it lowered it).
    pub contribution: f64,
    /// The term's weight for the label (in the score's sense: see the module).
    pub weight: f64,
    /// Its TF-IDF value in the document.
    pub value: f64,
    /// Where a word n-gram occurs in the text: `[start, end)` in characters (Unicode scalar
    /// values); empty for character n-grams.
    pub spans: Vec<[usize; 2]>,
}

/// A document's terms, each as (column, the label's weight of it, its TF-IDF value), and the
/// intercept: [`BowModel::contributions`].
pub type Shares = (Vec<(u32, f64, f64)>, f64);

/// scikit-learn's default `token_pattern`, as [`crate::terms::words`] uses it.
static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\w\w+\b").expect("a valid pattern"));

impl BowModel {
    /// Each of the document's terms with its share of `label`'s score (see the module), and the
    /// intercept's share: the shares and the intercept add up to the score. Unsorted: (column,
    /// weight, value), the share being weight × value.
    pub fn contributions(&self, text: &str, label: usize) -> Result<Shares> {
        if label >= self.labels.len() {
            return Err(BowError::InvalidInput(format!("label {label} of {}", self.labels.len())));
        }
        Ok(self.row_contributions(&self.row(text)?, label))
    }

    /// [`Self::contributions`] of a TF-IDF row.
    fn row_contributions(&self, row: &SparseRow, label: usize) -> Shares {
        let r = &self.regression;
        let weight = |k: usize, col: usize| r.weights[k * r.features + col];
        // The label's weight of a column in the score's sense, and its intercept.
        let (of_column, intercept): (Box<dyn Fn(usize) -> f64>, f64) = match (self.multi_label, r.classes) {
            (true, _) => (Box::new(move |col| weight(label, col)), r.intercepts[label]),
            (false, 2) => {
                let sign = if label == 1 { 1.0 } else { -1.0 };
                (Box::new(move |col| sign * weight(0, col)), sign * r.intercepts[0])
            }
            (false, k) => {
                let others = (k - 1) as f64;
                let mean_other = move |values: &dyn Fn(usize) -> f64| {
                    (0..k).filter(|&j| j != label).map(values).sum::<f64>() / others
                };
                let intercept = r.intercepts[label] - mean_other(&|j| r.intercepts[j]);
                (Box::new(move |col| weight(label, col) - mean_other(&|j| weight(j, col))), intercept)
            }
        };
        let terms = row.indices.iter().zip(&row.values).map(|(&col, &value)| (col, of_column(col as usize), value));
        (terms.collect(), intercept)
    }

    /// The `top` terms of `text` that raised `label`'s score most (positive contributions only,
    /// largest first), each with where it occurs.
    pub fn term_evidence(&self, text: &str, label: usize, top: usize) -> Result<Vec<TermEvidence>> {
        if label >= self.labels.len() {
            return Err(BowError::InvalidInput(format!("label {label} of {}", self.labels.len())));
        }
        Ok(self.every_label_evidence(text, top)?.swap_remove(label))
    }

    /// [`Self::term_evidence`] of every label, in label order (the text read once).
    pub fn every_label_evidence(&self, text: &str, top: usize) -> Result<Vec<Vec<TermEvidence>>> {
        let row = self.row(text)?;
        let chosen: Vec<Vec<(u32, f64, f64)>> = (0..self.labels.len())
            .map(|label| {
                let (terms, _) = self.row_contributions(&row, label);
                let mut raised: Vec<(u32, f64, f64)> = terms.into_iter().filter(|&(_, w, v)| w * v > 0.0).collect();
                raised.sort_by(|a, b| (b.1 * b.2).total_cmp(&(a.1 * a.2)).then(a.0.cmp(&b.0)));
                raised.truncate(top);
                raised
            })
            .collect();
        let wanted: HashSet<u32> = chosen.iter().flatten().map(|&(col, _, _)| col).collect();
        let names = self.term_names(text, &wanted);
        let spans = word_spans(text, self.tfidf.ngram_max);
        Ok(chosen
            .into_iter()
            .map(|raised| {
                raised
                    .into_iter()
                    .map(|(col, weight, value)| {
                        let term = names.get(&col).cloned().unwrap_or_default();
                        let spans = spans.get(&term).cloned().unwrap_or_default();
                        TermEvidence { term, contribution: weight * value, weight, value, spans }
                    })
                    .collect()
            })
            .collect())
    }

    /// The vocabulary names of the columns `wanted` among the terms of `text`.
    fn term_names(&self, text: &str, wanted: &HashSet<u32>) -> HashMap<u32, String> {
        let mut names = HashMap::new();
        let mut name = |term: &str| {
            if let Some(&col) = self.vocabulary.get(term) {
                if wanted.contains(&col) {
                    names.entry(col).or_insert_with(|| term.to_owned());
                }
            }
        };
        for_each_ngram(&words(text), self.tfidf.ngram_max, &mut name);
        if let Some(range) = self.tfidf.char_ngrams {
            for_each_char_term(text, range, &mut name);
        }
        names
    }
}

/// Every word n-gram of `text` (n up to `max_n`, as the vocabulary writes them) with the
/// character spans where it occurs.
fn word_spans(text: &str, max_n: usize) -> HashMap<String, Vec<[usize; 2]>> {
    // Byte offset → character offset, for the tokens' ends.
    let mut char_at: HashMap<usize, usize> = text.char_indices().enumerate().map(|(c, (b, _))| (b, c)).collect();
    char_at.insert(text.len(), text.chars().count());
    let tokens: Vec<(usize, usize, String)> =
        WORD.find_iter(text).map(|m| (char_at[&m.start()], char_at[&m.end()], m.as_str().to_lowercase())).collect();
    let mut spans: HashMap<String, Vec<[usize; 2]>> = HashMap::new();
    for n in 1..=max_n.max(1) {
        for window in tokens.windows(n) {
            let gram = window.iter().map(|(_, _, w)| w.as_str()).collect::<Vec<_>>().join(" ");
            spans.entry(gram).or_default().push([window[0].0, window[n - 1].1]);
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use crate::model::{train, BowOptions};
    use crate::multilabel::{train_multilabel, LabelWeights};

    fn corpus(labels: usize) -> (Vec<String>, Vec<usize>) {
        let words = ["apples orchard", "engines garage", "rivers valley"];
        let mut texts = Vec::new();
        let mut gold = Vec::new();
        for i in 0..30 {
            let label = i % labels;
            texts.push(format!("The {} of number{i}, with shared words here and {}", words[label], words[(i / 3) % 3]));
            gold.push(label);
        }
        (texts, gold)
    }

    fn options() -> BowOptions {
        BowOptions { cs: vec![10.0], folds: 3, ..BowOptions::default() }
    }

    /// The contributions and the intercept add up to the label's score, in each kind of model.
    #[test]
    fn the_shares_add_up_to_the_score() {
        for labels in [2, 3] {
            let (texts, gold) = corpus(labels);
            let names: Vec<String> = (0..labels).map(|l| format!("l{l}")).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let model = train(&refs, &gold, &names, &options(), |_, _| {}).unwrap().model;
            for text in &texts[..4] {
                let logits: Vec<f64> = model.scores(text).unwrap().logits.iter().map(|&z| z as f64).collect();
                for label in 0..labels {
                    let (terms, intercept) = model.contributions(text, label).unwrap();
                    let total = terms.iter().map(|(_, w, v)| w * v).sum::<f64>() + intercept;
                    let others = (0..labels).filter(|&j| j != label).map(|j| logits[j]).sum::<f64>();
                    let score = logits[label] - others / (labels - 1) as f64;
                    assert!((total - score).abs() < 1e-4, "{labels} labels, label {label}: {total} vs {score}");
                }
            }
        }
        let (texts, gold) = corpus(3);
        let sets: Vec<Vec<usize>> = gold.iter().map(|&l| vec![l]).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let names = vec!["a".to_string(), "b".into(), "c".into()];
        let model = train_multilabel(&refs, &sets, &names, &options(), LabelWeights::Equal, |_, _| {}).unwrap().model;
        let logits = model.scores(&texts[0]).unwrap().logits;
        for (label, &z) in logits.iter().enumerate() {
            let (terms, intercept) = model.contributions(&texts[0], label).unwrap();
            let total = terms.iter().map(|(_, w, v)| w * v).sum::<f64>() + intercept;
            assert!((total - z as f64).abs() < 1e-4, "label {label}: {total} vs {z}");
        }
    }

    #[test]
    fn the_top_terms_raise_the_label_and_say_where_they_are() {
        let (texts, gold) = corpus(3);
        let names = vec!["a".to_string(), "b".into(), "c".into()];
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let model = train(&refs, &gold, &names, &options(), |_, _| {}).unwrap().model;
        let text = "Engines, Garage engines and a garage of shared words";
        let top = model.term_evidence(text, 1, 3).unwrap();
        assert_eq!(top.len(), 3);
        assert!(top.windows(2).all(|w| w[0].contribution >= w[1].contribution), "{top:?}");
        assert!(top.iter().all(|t| t.contribution > 0.0 && (t.contribution - t.weight * t.value).abs() < 1e-12));
        let engines = top.iter().find(|t| t.term == "engines").expect("the label's own word leads");
        let chars: Vec<char> = text.chars().collect();
        for [start, end] in &engines.spans {
            let found: String = chars[*start..*end].iter().collect();
            assert_eq!(found.to_lowercase(), "engines");
        }
        assert_eq!(engines.spans, [[0, 7], [16, 23]]);
        // Another label's evidence names other terms.
        let other = model.term_evidence(text, 0, 3).unwrap();
        assert!(other.iter().all(|t| t.term != "engines"), "{other:?}");
        assert!(model.term_evidence(text, 3, 3).is_err());
    }
}
