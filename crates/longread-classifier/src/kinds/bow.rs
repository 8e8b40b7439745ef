//! The bag-of-words baseline (TF-IDF + logistic regression): reads a document whole and shows
//! the terms that raised its label most.

use longread_bow::{BowModel, BowScores};
use longread_model::error::Result;
use rayon::prelude::*;

use super::whole::TextScorer;
use crate::prediction::{argmax, carried, LabelScores, Parts, Prediction, TermEvidence};

/// How many terms a bag of words' prediction names per label.
pub const TERMS_PER_LABEL: usize = 10;
use crate::{DocError, DocResult};

impl TextScorer for BowModel {
    /// In parallel: each text is independent.
    fn score(&self, texts: &[&str]) -> Result<Vec<DocResult>> {
        Ok(texts
            .par_iter()
            .map(|text| {
                let (scores, every) =
                    self.explained(text, TERMS_PER_LABEL).map_err(|e| DocError::new(e.to_string()))?;
                Ok(bow_prediction(self.labels(), self.multi_label(), scores, every))
            })
            .collect())
    }

    fn evidence_unit(&self) -> &'static str {
        "none"
    }

    fn labels(&self) -> &[String] {
        BowModel::labels(self)
    }

    fn multi_label(&self) -> bool {
        BowModel::multi_label(self)
    }
}

/// A bag-of-words prediction: its scores, and `every` label's terms (in label order) from which
/// the decided label's are shown; a multi-label model's carries each label whose probability
/// is at least [`crate::prediction::MULTI_LABEL_THRESHOLD`].
fn bow_prediction(
    labels: &[String],
    multi_label: bool,
    scores: BowScores,
    every: Vec<Vec<longread_bow::TermEvidence>>,
) -> Prediction {
    let every = labels
        .iter()
        .zip(every)
        .flat_map(|(label, terms)| {
            terms.into_iter().map(move |t| TermEvidence {
                label: label.clone(),
                term: t.term,
                contribution: t.contribution as f32,
                weight: t.weight as f32,
                value: t.value as f32,
                spans: t.spans,
            })
        })
        .collect();
    let mut prediction = Prediction {
        label: labels[argmax(&scores.probabilities)].clone(),
        labels: multi_label.then(|| carried(labels, &scores.probabilities)),
        scores: LabelScores { labels: labels.to_vec(), probabilities: scores.probabilities },
        logits: scores.logits,
        parts: Parts::Terms { terms: Vec::new(), every },
        tasks: None,
        members: None,
        tokens: None,
    };
    prediction.settle_terms();
    prediction
}
