//! A decision threshold for a two-label model: the second label is predicted when its
//! probability is at least the threshold, instead of when it is the larger of the two. A model
//! can rank documents well (high ROC-AUC) and still label them badly at 0.5 — a shifted prior,
//! a rare positive class —; `longread threshold` tunes the threshold on labelled held-out
//! documents ([`tune`]) and keeps it in the model directory (`decision.json`), where every
//! front applies it ([`Thresholded`], wrapped around any kind by [`crate::Classifier::load`]).
//! Probabilities are never changed, only the label chosen from them.

use std::path::Path;

use longread_metrics::Report;
use longread_model::error::{ModelError, Result};
use serde::{Deserialize, Serialize};

use crate::kinds::{DocumentModel, PreparedDocument, UnitOutput};
use crate::{DocError, DocResult, Prediction};
use longread_model::batching::UnitKey;
use longread_model::hierarchical::TaskSpec;

/// The file in a model directory that holds its [`Decision`].
pub const DECISION_FILE: &str = "decision.json";

/// A two-label model's decision threshold (`decision.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The label predicted when its probability is at least `threshold`: the model's second.
    pub positive: String,
    /// In (0, 1).
    #[serde(serialize_with = "shortest")]
    pub threshold: f32,
    /// How it was chosen, for people ("macro-F1 on dev.jsonl (120 documents)").
    #[serde(default)]
    pub chosen_by: String,
}

impl Decision {
    /// The decision kept in `dir`, if any; one that does not fit `labels` (not two labels, a
    /// positive label other than the second, a threshold outside (0, 1)) is an error.
    pub fn load(dir: &Path, labels: &[String]) -> Result<Option<Self>> {
        let path = dir.join(DECISION_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ModelError::Io { path, source }),
        };
        let decision: Self =
            serde_json::from_str(&text).map_err(|e| ModelError::InvalidInput(format!("{}: {e}", path.display())))?;
        decision.check(labels).map_err(|why| ModelError::InvalidInput(format!("{}: {why}", path.display())))?;
        Ok(Some(decision))
    }

    /// Why this decision does not fit a model with `labels`, if it does not.
    pub fn check(&self, labels: &[String]) -> std::result::Result<(), String> {
        if labels.len() != 2 {
            return Err(format!("a decision threshold needs a model with two labels, not {}", labels.len()));
        }
        if self.positive != labels[1] {
            return Err(format!(
                "the threshold is for label \"{}\" but the model's second label is \"{}\"",
                self.positive, labels[1]
            ));
        }
        if !(self.threshold > 0.0 && self.threshold < 1.0) {
            return Err(format!("threshold {} is not between 0 and 1", self.threshold));
        }
        Ok(())
    }

    /// Writes it as `dir/decision.json`, atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(|e| ModelError::InvalidInput(e.to_string()))? + "\n";
        longread_model::model_dir::write_file_atomically(&dir.join(DECISION_FILE), json.as_bytes())
    }

    /// Removes `dir/decision.json`; whether there was one.
    pub fn clear(dir: &Path) -> Result<bool> {
        let path = dir.join(DECISION_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(ModelError::Io { path, source }),
        }
    }

    /// The label index this decision gives for a document whose second label has probability
    /// `positive`.
    pub fn label_index(&self, positive: f32) -> usize {
        label_at(positive, self.threshold)
    }

    /// `prediction` with its primary label chosen by the threshold.
    fn relabel(&self, mut prediction: Prediction) -> Prediction {
        if let [_, positive] = prediction.scores.probabilities[..] {
            prediction.label = prediction.scores.labels[self.label_index(positive)].clone();
        }
        prediction
    }
}

/// `t` as the f64 of its shortest decimal, so that JSON shows the threshold as decision.json
/// does (0.58575845, not 0.5857584476470947) wherever it goes through a `serde_json::Value`.
pub fn as_json_number(t: f32) -> f64 {
    t.to_string().parse().unwrap_or(f64::from(t))
}

/// Serializes an f32 threshold as [`as_json_number`].
pub fn shortest<S: serde::Serializer>(t: &f32, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_f64(as_json_number(*t))
}

/// The label index (0 or 1) of a document whose second label has probability `positive`, at
/// `threshold`.
fn label_at(positive: f32, threshold: f32) -> usize {
    usize::from(positive >= threshold)
}

/// The most thresholds [`tune`] tries.
pub const MAX_CANDIDATES: usize = 1000;

/// What [`tune`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Tuned {
    /// The threshold on the second label's probability.
    #[serde(serialize_with = "shortest")]
    pub threshold: f32,
    /// The metrics with the most probable label (the threshold 0.5).
    pub at_default: Report,
    /// The metrics at `threshold`.
    pub at_threshold: Report,
}

/// The threshold on the second label's probability (`positive[i]` for document i, whose label
/// index is `truth[i]`) that maximizes `metric` on these documents. The candidates lie halfway
/// between consecutive distinct probabilities (each splits the documents differently; at most
/// [`MAX_CANDIDATES`], evenly spaced among them, so that a large set costs seconds, not
/// minutes); ties go to the one nearest 0.5, so that a threshold moves only as far as the data
/// asks.
pub fn tune(labels: &[String], truth: &[usize], positive: &[f32], metric: impl Fn(&Report) -> f64) -> Result<Tuned> {
    let invalid = |m: String| ModelError::InvalidInput(m);
    if labels.len() != 2 {
        return Err(invalid(format!("a decision threshold needs a model with two labels, not {}", labels.len())));
    }
    if truth.len() != positive.len() || truth.is_empty() {
        return Err(invalid(format!("{} labels for {} probabilities", truth.len(), positive.len())));
    }
    if positive.iter().any(|p| !p.is_finite()) {
        return Err(invalid("a probability is not a finite number".into()));
    }
    let report_at = |t: f32| {
        let predicted: Vec<usize> = positive.iter().map(|&p| label_at(p, t)).collect();
        longread_metrics::evaluate(labels, truth, &predicted).map_err(invalid)
    };
    let mut values: Vec<f32> = positive.to_vec();
    values.sort_by(f32::total_cmp);
    values.dedup();
    let midpoints: Vec<f32> = values.windows(2).map(|w| w[0] + (w[1] - w[0]) / 2.0).collect();
    let step = midpoints.len().div_ceil(MAX_CANDIDATES).max(1);
    let candidates = midpoints.into_iter().step_by(step).filter(|&t| t > 0.0 && t < 1.0);
    let mut best = (0.5f32, metric(&report_at(0.5)?));
    for t in candidates {
        let score = metric(&report_at(t)?);
        let nearer = (t - 0.5).abs() < (best.0 - 0.5).abs();
        if score > best.1 || (score == best.1 && nearer) {
            best = (t, score);
        }
    }
    Ok(Tuned { threshold: best.0, at_default: report_at(0.5)?, at_threshold: report_at(best.0)? })
}

/// A model whose primary label is chosen by a [`Decision`] (everything else is the inner
/// model's).
pub(crate) struct Thresholded {
    inner: Box<dyn DocumentModel>,
    decision: Decision,
}

impl Thresholded {
    pub(crate) fn new(inner: Box<dyn DocumentModel>, decision: Decision) -> Self {
        Self { inner, decision }
    }

    fn relabel(&self, result: DocResult) -> DocResult {
        result.map(|p| self.decision.relabel(p))
    }
}

impl DocumentModel for Thresholded {
    fn tasks(&self) -> &[TaskSpec] {
        self.inner.tasks()
    }
    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        self.inner.prepare(text)
    }
    fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey {
        self.inner.unit_key(doc, unit)
    }
    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        self.inner.encode_units(units)
    }
    fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        self.inner.finish(doc, outputs).map(|r| self.relabel(r))
    }
    fn finish_many(&self, docs: Vec<(&PreparedDocument, Vec<UnitOutput>)>) -> Result<Vec<DocResult>> {
        Ok(self.inner.finish_many(docs)?.into_iter().map(|r| self.relabel(r)).collect())
    }
    fn evidence_unit(&self) -> &'static str {
        self.inner.evidence_unit()
    }
    fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        self.inner.recall(doc)
    }
    fn remember(&self, doc: &PreparedDocument, outputs: &[UnitOutput], fresh: &[bool]) -> Result<()> {
        self.inner.remember(doc, outputs, fresh)
    }
    fn set_vector_cache(&mut self, dir: &Path) -> Result<()> {
        self.inner.set_vector_cache(dir)
    }
    fn streams(&self, text: &str) -> bool {
        self.inner.streams(text)
    }
    fn classify_streamed(&self, text: &str) -> Result<DocResult> {
        self.inner.classify_streamed(text).map(|r| self.relabel(r))
    }
    fn chunk_layout(&self) -> Option<(usize, usize)> {
        self.inner.chunk_layout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["neutral".into(), "partisan".into()]
    }

    /// Every positive scores above every negative, but below 0.5: the most probable label
    /// is always "neutral" (macro-F1 1/3); a threshold between the groups labels all right.
    #[test]
    fn the_threshold_separates_documents_the_default_mislabels() {
        let truth = [0, 0, 0, 1, 1];
        let positive = [0.05, 0.1, 0.2, 0.3, 0.4];
        let tuned = tune(&labels(), &truth, &positive, |r| r.macro_f1).unwrap();
        assert!((tuned.threshold - 0.25).abs() < 1e-6, "{tuned:?}");
        assert_eq!(tuned.at_threshold.accuracy, 1.0);
        assert!((tuned.at_default.macro_f1 - 0.375).abs() < 1e-12, "{:?}", tuned.at_default);
    }

    /// Many distinct probabilities: at most MAX_CANDIDATES thresholds are tried, and the best
    /// of them still separates two groups that a gap splits.
    #[test]
    fn many_documents_are_tuned_over_a_bounded_number_of_candidates() {
        let n = 20_000;
        let positive: Vec<f32> = (0..n).map(|i| 0.1 + 0.3 * i as f32 / n as f32).collect();
        let truth: Vec<usize> = (0..n).map(|i| usize::from(i >= n / 2)).collect();
        let tuned = tune(&labels(), &truth, &positive, |r| r.accuracy).unwrap();
        assert!(tuned.at_threshold.accuracy > 0.99, "{}", tuned.at_threshold.accuracy);
        assert!((tuned.threshold - 0.25).abs() < 0.01, "{}", tuned.threshold);
    }

    /// Where several thresholds score the same, the nearest to 0.5 wins; where 0.5 is already
    /// best, it stays.
    #[test]
    fn ties_keep_the_threshold_near_one_half() {
        let truth = [0, 0, 1, 1];
        let positive = [0.1, 0.2, 0.8, 0.9];
        let tuned = tune(&labels(), &truth, &positive, |r| r.accuracy).unwrap();
        assert_eq!(tuned.threshold, 0.5);
        let decision = Decision { positive: "partisan".into(), threshold: 0.3, chosen_by: String::new() };
        assert_eq!((decision.label_index(0.3), decision.label_index(0.29)), (1, 0));
    }

    #[test]
    fn decisions_that_do_not_fit_the_model_are_refused() {
        let d = |positive: &str, threshold: f32| Decision {
            positive: positive.into(),
            threshold,
            chosen_by: String::new(),
        };
        assert!(d("partisan", 0.3).check(&labels()).is_ok());
        assert!(d("neutral", 0.3).check(&labels()).unwrap_err().contains("second label is \"partisan\""));
        assert!(d("partisan", 1.0).check(&labels()).unwrap_err().contains("not between 0 and 1"));
        let three = vec!["a".to_string(), "b".into(), "c".into()];
        assert!(d("b", 0.3).check(&three).unwrap_err().contains("two labels, not 3"));
        assert!(tune(&three, &[0], &[0.5], |r| r.accuracy).is_err());
        assert!(tune(&labels(), &[0], &[f32::NAN], |r| r.accuracy).is_err());
    }

    #[test]
    fn a_decision_is_saved_loaded_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Decision::load(dir.path(), &labels()).unwrap(), None);
        let decision = Decision { positive: "partisan".into(), threshold: 0.3, chosen_by: "test".into() };
        decision.save(dir.path()).unwrap();
        assert_eq!(Decision::load(dir.path(), &labels()).unwrap(), Some(decision));
        let swapped = vec!["partisan".to_string(), "neutral".into()];
        assert!(Decision::load(dir.path(), &swapped).unwrap_err().to_string().contains("decision.json"));
        assert!(Decision::clear(dir.path()).unwrap());
        assert!(!Decision::clear(dir.path()).unwrap());
    }
}
