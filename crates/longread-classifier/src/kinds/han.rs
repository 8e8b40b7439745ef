//! The hierarchical attention network (word and sentence BiGRUs): reads a document whole, on
//! the CPU, and shows its sentences and words as evidence.

use longread_model::error::Result;
use longread_model::han::{score_texts, HanClassifier, HanScores};

use super::whole::TextScorer;
use crate::prediction::{argmax, LabelScores, Parts, Prediction, SentenceEvidence, WordEvidence};
use crate::{DocError, DocResult, HAN_BATCH};

impl TextScorer for HanClassifier {
    fn score(&self, texts: &[&str]) -> Result<Vec<DocResult>> {
        let scored = score_texts(self, texts, HAN_BATCH, &longread_model::device::host())?;
        Ok(scored
            .into_iter()
            .map(|outcome| match outcome {
                Err(message) => Err(DocError::new(message)),
                Ok(scores) => Ok(han_prediction(self.labels(), self.is_multi_label(), scores)),
            })
            .collect())
    }

    fn evidence_unit(&self) -> &'static str {
        "sentence"
    }

    fn labels(&self) -> &[String] {
        HanClassifier::labels(self)
    }

    fn multi_label(&self) -> bool {
        self.is_multi_label()
    }
}

/// A HAN's prediction, with every sentence read and its words (a `multi_label` model's also
/// with the labels it carries).
fn han_prediction(labels: &[String], multi_label: bool, scores: HanScores) -> Prediction {
    let sentences = scores
        .sentences
        .into_iter()
        .enumerate()
        .map(|(index, s)| SentenceEvidence {
            index,
            start: s.start,
            end: s.end,
            attention: s.attention,
            hops: (s.hops.len() > 1).then_some(s.hops),
            words: s
                .words
                .iter()
                .map(|w| WordEvidence { start: w.start, end: w.end, attention: w.attention })
                .collect(),
        })
        .collect();
    let carried = multi_label.then(|| crate::prediction::carried(labels, &scores.probabilities));
    Prediction {
        label: labels[argmax(&scores.probabilities)].clone(),
        scores: LabelScores { labels: labels.to_vec(), probabilities: scores.probabilities },
        logits: scores.logits,
        parts: Parts::Sentences { total_sentences: scores.total_sentences, sentences },
        labels: carried,
        tasks: None,
        members: None,
        tokens: None,
    }
}
