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

use serde::Serialize;

use crate::counts::CHAR_PREFIX;
use crate::error::{BowError, Result};
use crate::model::BowModel;
use crate::sparse::SparseRow;
use crate::terms::WORD;

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
        Ok(self.explained(text, top)?.1)
    }

    /// The scores of `text` ([`Self::scores`]) and every label's `top` terms
    /// ([`Self::every_label_evidence`]), the text read once.
    pub fn explained(&self, text: &str, top: usize) -> Result<(crate::BowScores, Vec<Vec<TermEvidence>>)> {
        let row = self.row(text)?;
        Ok((self.row_scores(&row), self.row_evidence(text, &row, top)))
    }

    /// Every label's `top` terms of `text`, whose TF-IDF row is `row`.
    fn row_evidence(&self, text: &str, row: &SparseRow, top: usize) -> Vec<Vec<TermEvidence>> {
        let chosen: Vec<Vec<(u32, f64, f64)>> = (0..self.labels.len())
            .map(|label| {
                let (terms, _) = self.row_contributions(row, label);
                let mut raised: Vec<(u32, f64, f64)> = terms.into_iter().filter(|&(_, w, v)| w * v > 0.0).collect();
                raised.sort_by(|a, b| (b.1 * b.2).total_cmp(&(a.1 * a.2)).then(a.0.cmp(&b.0)));
                raised.truncate(top);
                raised
            })
            .collect();
        let names = self.names.get_or_init(|| {
            let mut names = vec![String::new(); self.idf.len()];
            for (term, &col) in &self.vocabulary {
                names[col as usize] = term.clone();
            }
            names
        });
        let wanted: HashSet<&str> = chosen.iter().flatten().map(|&(col, _, _)| names[col as usize].as_str()).collect();
        let spans = word_spans(text, &wanted);
        chosen
            .into_iter()
            .map(|raised| {
                raised
                    .into_iter()
                    .map(|(col, weight, value)| {
                        let term = names[col as usize].clone();
                        let spans = spans.get(term.as_str()).cloned().unwrap_or_default();
                        TermEvidence { term, contribution: weight * value, weight, value, spans }
                    })
                    .collect()
            })
            .collect()
    }
}

/// Where each word n-gram of `wanted` occurs in `text`: `[start, end)` in characters. The
/// tokens are found in the text as written and lowercased one by one; an n-gram is n
/// consecutive tokens. (Character n-grams, `c:`-prefixed, get none.)
fn word_spans<'w>(text: &str, wanted: &HashSet<&'w str>) -> HashMap<&'w str, Vec<[usize; 2]>> {
    // Each wanted word n-gram under its first word, with its words.
    type Grams<'w> = Vec<(&'w str, Vec<&'w str>)>;
    let mut by_first: HashMap<&str, Grams<'w>> = HashMap::new();
    for &term in wanted.iter().filter(|t| !t.is_empty() && !t.starts_with(CHAR_PREFIX)) {
        let words: Vec<&str> = term.split(' ').collect();
        by_first.entry(words[0]).or_default().push((term, words));
    }
    let mut spans: HashMap<&'w str, Vec<[usize; 2]>> = HashMap::new();
    if by_first.is_empty() {
        return spans;
    }
    let mut tokens: Vec<(usize, usize, String)> = Vec::new();
    let (mut byte, mut chars) = (0, 0);
    for m in WORD.find_iter(text) {
        chars += text[byte..m.start()].chars().count();
        let start = chars;
        chars += m.as_str().chars().count();
        byte = m.end();
        tokens.push((start, chars, m.as_str().to_lowercase()));
    }
    for (i, (start, _, word)) in tokens.iter().enumerate() {
        let Some(grams) = by_first.get(word.as_str()) else { continue };
        for (term, words) in grams {
            let end = i + words.len();
            if end <= tokens.len() && words.iter().zip(&tokens[i..end]).all(|(w, t)| *w == t.2) {
                spans.entry(*term).or_default().push([*start, tokens[end - 1].1]);
            }
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
