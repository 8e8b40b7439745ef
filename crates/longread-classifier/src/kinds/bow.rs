//! The bag-of-words baseline (TF-IDF + logistic regression): reads a document whole and shows
//! no parts.

use longread_bow::{BowModel, BowScores};
use longread_model::error::Result;
use rayon::prelude::*;

use super::whole::TextScorer;
use crate::prediction::{argmax, carried, LabelScores, Parts, Prediction};
use crate::{DocError, DocResult};

impl TextScorer for BowModel {
    /// In parallel: each text is independent.
    fn score(&self, texts: &[&str]) -> Result<Vec<DocResult>> {
        Ok(texts
            .par_iter()
            .map(|text| {
                self.scores(text)
                    .map(|s| bow_prediction(self.labels(), self.multi_label(), s))
                    .map_err(|e| DocError::new(e.to_string()))
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

/// A bag-of-words prediction: scores only; a multi-label model's carries each label whose
/// probability is at least [`crate::prediction::MULTI_LABEL_THRESHOLD`].
fn bow_prediction(labels: &[String], multi_label: bool, scores: BowScores) -> Prediction {
    Prediction {
        label: labels[argmax(&scores.probabilities)].clone(),
        labels: multi_label.then(|| carried(labels, &scores.probabilities)),
        scores: LabelScores { labels: labels.to_vec(), probabilities: scores.probabilities },
        logits: scores.logits,
        parts: Parts::Whole {},
        tasks: None,
        members: None,
        tokens: None,
    }
}
