//! How a model's primary label is chosen from its probabilities, when not simply as the most
//! probable one. A model can rank documents well (high ROC-AUC) and still label them badly by
//! the most probable label — a shifted prior, a rare class —; `longread threshold` tunes a
//! rule on labelled held-out documents ([`tune`]) and keeps it in the model directory
//! (`decision.json`), where every front applies it ([`Adjusted`], wrapped around any kind
//! by [`crate::Classifier::load`], with the model's calibration, [`Temperature`]). Two labels take a threshold on the second label's
//! probability; three or more take a bias per label, added to the log of its probability
//! (the threshold's generalization: with two labels, a threshold t is the bias
//! ln((1 − t) / t) on the second). Probabilities are never changed, only the label chosen
//! from them.

mod adjusted;
pub mod label_temperature;
pub mod temperature;
mod tune;

use std::path::{Path, PathBuf};

use longread_model::error::{ModelError, Result};
use serde::{Deserialize, Serialize};

use crate::Prediction;
pub(crate) use adjusted::Adjusted;
pub use temperature::{Temperature, CALIBRATION_FILE};
pub use tune::{tune, tune_per_label, Tuned, F1_FLOOR, MAX_CANDIDATES};

/// The threshold of every label of a multi-label model without a tuned rule.
pub const MULTI_LABEL_DEFAULT: f32 = crate::prediction::MULTI_LABEL_THRESHOLD;

/// The file in a model directory that holds its [`Decision`].
pub const DECISION_FILE: &str = "decision.json";

/// How the label is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// Two labels: `positive` (the second) when its probability is at least `threshold`, in
    /// (0, 1); the first otherwise.
    Threshold {
        /// The model's second label.
        positive: String,
        /// In (0, 1).
        threshold: f32,
    },
    /// Three or more labels: the label whose ln(probability) + bias is highest (ties: the
    /// first); one (label, bias) per label, in the model's order.
    Biases(Vec<(String, f32)>),
    /// Multi-label models: each label is carried when its probability is at least its own
    /// threshold, in (0, 1); one (label, threshold) per label, in the model's order; then
    /// `limits` on how many labels a document carries.
    PerLabel {
        /// One (label, threshold) per label, in the model's order.
        thresholds: Vec<(String, f32)>,
        /// At least and at most how many labels a document carries.
        limits: Limits,
    },
}

/// How many labels a multi-label document carries, whatever its thresholds say: the most
/// probable labels are added up to `min_labels` (a document the model finds nothing in
/// still gets its best guess) and only the `top_k` most probable of those over their
/// threshold are kept (ICD coding's "at most k codes"). `min_labels` = `top_k` = k carries
/// exactly the k most probable labels. Ties go to the label listed first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// At least this many labels (0: no floor).
    pub min_labels: usize,
    /// At most this many labels (`None`: no cap); at least 1 and `min_labels`.
    pub top_k: Option<usize>,
}

impl Limits {
    /// Whether these limits change nothing.
    pub fn is_none(&self) -> bool {
        self.min_labels == 0 && self.top_k.is_none()
    }

    /// Why these limits do not fit a model with `labels` labels, if they do not.
    pub fn check(&self, labels: usize) -> std::result::Result<(), String> {
        if self.top_k == Some(0) {
            return Err("top_k is 0: a document would carry no label (give 1 or more, or none for no cap)".into());
        }
        if self.min_labels > labels {
            return Err(format!("min_labels is {} but the model has {labels} labels", self.min_labels));
        }
        match self.top_k {
            Some(k) if k < self.min_labels => {
                Err(format!("top_k ({k}) is below min_labels ({}): no document could meet both", self.min_labels))
            }
            _ => Ok(()),
        }
    }

    /// `over` (whether each label reached its threshold) within these limits, given the
    /// labels' `probabilities`.
    pub fn apply(&self, probabilities: &[f32], mut over: Vec<bool>) -> Vec<bool> {
        if self.is_none() {
            return over;
        }
        // Most probable first; ties: the label listed first (a stable sort).
        let mut order: Vec<usize> = (0..probabilities.len()).collect();
        order.sort_by(|&a, &b| probabilities[b].total_cmp(&probabilities[a]));
        if let Some(k) = self.top_k {
            let mut kept = 0;
            for &i in &order {
                if over[i] {
                    kept += 1;
                    over[i] = kept <= k;
                }
            }
        }
        let mut missing = self.min_labels.saturating_sub(over.iter().filter(|&&o| o).count());
        for &i in &order {
            if missing == 0 {
                break;
            }
            if !over[i] {
                over[i] = true;
                missing -= 1;
            }
        }
        over
    }

    /// The limits in words ("at least 1 and at most 3 labels a document"); empty without any.
    pub fn describe(&self) -> String {
        let label_s = |n: usize| if n == 1 { "label" } else { "labels" };
        match (self.min_labels, self.top_k) {
            (0, None) => String::new(),
            (m, Some(k)) if m == k => format!("exactly the {k} most probable {}", label_s(k)),
            (0, Some(k)) => format!("at most {k} {} a document", label_s(k)),
            (m, None) => format!("at least {m} {} a document", label_s(m)),
            (m, Some(k)) => format!("at least {m} and at most {k} labels a document"),
        }
    }
}

/// A model's decision rule (`decision.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DecisionFile", into = "DecisionFile")]
pub struct Decision {
    /// The rule.
    pub rule: Rule,
    /// How it was chosen, for people ("macro-F1 on dev.jsonl (120 documents)").
    pub chosen_by: String,
}

/// `decision.json` as written: `{"positive", "threshold"}`, `{"biases": {label: bias}}` or
/// (multi-label) `{"thresholds": {label: threshold}}`, with `"chosen_by"`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    positive: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    biases: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    thresholds: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_labels: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    top_k: Option<usize>,
    #[serde(default)]
    chosen_by: String,
}

impl TryFrom<DecisionFile> for Decision {
    type Error = String;

    fn try_from(file: DecisionFile) -> std::result::Result<Self, String> {
        let numbers = |map: serde_json::Map<String, serde_json::Value>, what: &str| {
            map.into_iter()
                .map(|(label, value)| match value.as_f64().map(|b| b as f32) {
                    Some(b) if b.is_finite() => Ok((label, b)),
                    _ => Err(format!("the {what} of \"{label}\" is {value}, not a finite (32-bit) number")),
                })
                .collect::<std::result::Result<Vec<_>, _>>()
        };
        let rule = match (file.positive, file.threshold, file.biases, file.thresholds) {
            (Some(positive), Some(threshold), None, None) => Rule::Threshold { positive, threshold: threshold as f32 },
            (None, None, Some(biases), None) => Rule::Biases(numbers(biases, "bias")?),
            (None, None, None, Some(thresholds)) => Rule::PerLabel {
                thresholds: numbers(thresholds, "threshold")?,
                limits: Limits { min_labels: file.min_labels.unwrap_or(0), top_k: file.top_k },
            },
            _ => {
                return Err("give \"positive\" and \"threshold\" (two labels), \"biases\" (one per label) or \
                            \"thresholds\" (multi-label: one per label), one of them"
                    .into())
            }
        };
        if !matches!(rule, Rule::PerLabel { .. }) && (file.min_labels.is_some() || file.top_k.is_some()) {
            return Err("\"min_labels\" and \"top_k\" are for multi-label models (with \"thresholds\")".into());
        }
        Ok(Self { rule, chosen_by: file.chosen_by })
    }
}

impl From<Decision> for DecisionFile {
    fn from(decision: Decision) -> Self {
        let map = |pairs: Vec<(String, f32)>| pairs.into_iter().map(|(l, v)| (l, as_json_number(v).into())).collect();
        let (positive, threshold, biases, thresholds, limits) = match decision.rule {
            Rule::Threshold { positive, threshold } => {
                (Some(positive), Some(as_json_number(threshold)), None, None, Limits::default())
            }
            Rule::Biases(biases) => (None, None, Some(map(biases)), None, Limits::default()),
            Rule::PerLabel { thresholds, limits } => (None, None, None, Some(map(thresholds)), limits),
        };
        let min_labels = (limits.min_labels > 0).then_some(limits.min_labels);
        Self { positive, threshold, biases, thresholds, min_labels, top_k: limits.top_k, chosen_by: decision.chosen_by }
    }
}

impl Decision {
    /// The decision kept in `dir`, if any; one that does not fit `labels` ([`Decision::check`])
    /// is an error.
    pub fn load(dir: &Path, labels: &[String]) -> Result<Option<Self>> {
        let path = dir.join(DECISION_FILE);
        let Some(text) = longread_model::model_dir::read_if_present(&path)? else { return Ok(None) };
        let decision: Self =
            serde_json::from_str(&text).map_err(|e| ModelError::InvalidInput(format!("{}: {e}", path.display())))?;
        decision.check(labels).map_err(|why| ModelError::InvalidInput(format!("{}: {why}", path.display())))?;
        Ok(Some(decision))
    }

    /// Why this decision does not fit a model with `labels`, if it does not: a threshold needs
    /// two labels, its positive label the second, and a value in (0, 1); biases need three or
    /// more labels, one bias each, in the model's order.
    pub fn check(&self, labels: &[String]) -> std::result::Result<(), String> {
        match &self.rule {
            Rule::Threshold { positive, threshold } => {
                if labels.len() != 2 {
                    return Err(format!("a decision threshold needs a model with two labels, not {}", labels.len()));
                }
                if *positive != labels[1] {
                    return Err(format!(
                        "the threshold is for label \"{positive}\" but the model's second label is \"{}\"",
                        labels[1]
                    ));
                }
                if !(*threshold > 0.0 && *threshold < 1.0) {
                    return Err(format!("threshold {threshold} is not between 0 and 1"));
                }
            }
            Rule::Biases(biases) => {
                if labels.len() < 3 {
                    return Err(format!(
                        "label biases are for a model with three or more labels (two take a threshold), not {}",
                        labels.len()
                    ));
                }
                let named: Vec<&str> = biases.iter().map(|(l, _)| l.as_str()).collect();
                if named != labels.iter().map(String::as_str).collect::<Vec<_>>() {
                    return Err(format!(
                        "the biases are for the labels {named:?} but the model's labels are {labels:?} (one bias per \
                         label, in that order)"
                    ));
                }
            }
            Rule::PerLabel { thresholds, limits } => {
                limits.check(labels.len())?;
                let named: Vec<&str> = thresholds.iter().map(|(l, _)| l.as_str()).collect();
                if named != labels.iter().map(String::as_str).collect::<Vec<_>>() {
                    return Err(format!(
                        "the thresholds are for the labels {named:?} but the model's labels are {labels:?} (one \
                         threshold per label, in that order)"
                    ));
                }
                if let Some((label, t)) = thresholds.iter().find(|(_, t)| !(*t > 0.0 && *t < 1.0)) {
                    return Err(format!("the threshold of \"{label}\", {t}, is not between 0 and 1"));
                }
            }
        }
        Ok(())
    }

    /// Why this rule does not fit a model that is (or is not) `multi_label`, if it does not:
    /// per-label thresholds are for multi-label models, a threshold or biases for the others.
    pub fn check_fits(&self, multi_label: bool) -> std::result::Result<(), String> {
        match (&self.rule, multi_label) {
            (Rule::PerLabel { .. }, false) => {
                Err("per-label thresholds are for multi-label models; this model predicts one label".into())
            }
            (Rule::Threshold { .. } | Rule::Biases(_), true) => {
                Err("a multi-label model decides each label on its own: its rule is a threshold per label \
                 (\"thresholds\")"
                    .into())
            }
            _ => Ok(()),
        }
    }

    /// Writes it as `dir/decision.json`, atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        longread_model::model_dir::write_files_atomically(&[self.file(dir)?])
    }

    /// Its file: `dir/decision.json` and the JSON it holds.
    pub(crate) fn file(&self, dir: &Path) -> Result<(PathBuf, Vec<u8>)> {
        let json = serde_json::to_string_pretty(self).map_err(|e| ModelError::InvalidInput(e.to_string()))? + "\n";
        Ok((dir.join(DECISION_FILE), json.into_bytes()))
    }

    /// Removes `dir/decision.json`; whether there was one.
    pub fn clear(dir: &Path) -> Result<bool> {
        longread_model::model_dir::remove_if_present(&dir.join(DECISION_FILE))
    }

    /// The label index this decision gives a document with these label `probabilities` (as
    /// many as the model's labels, which [`Decision::check`] has matched).
    pub fn label_index(&self, probabilities: &[f32]) -> usize {
        match &self.rule {
            Rule::Threshold { threshold, .. } => label_at(probabilities[1], *threshold),
            Rule::Biases(biases) => {
                let biases: Vec<f64> = biases.iter().map(|(_, b)| f64::from(*b)).collect();
                biased_argmax(&log_probabilities(probabilities), &biases)
            }
            Rule::PerLabel { .. } => crate::prediction::argmax(probabilities),
        }
    }

    /// Per-label thresholds, in the model's label order, when the rule has them.
    pub fn thresholds(&self) -> Option<Vec<f32>> {
        match &self.rule {
            Rule::PerLabel { thresholds, .. } => Some(thresholds.iter().map(|(_, t)| *t).collect()),
            _ => None,
        }
    }

    /// The labels a multi-label document with these `probabilities` (one per label, in the
    /// model's order) carries by this rule, in label order; `None` for a single-label rule.
    pub fn carried(&self, labels: &[String], probabilities: &[f32]) -> Option<Vec<String>> {
        let Rule::PerLabel { thresholds, limits } = &self.rule else { return None };
        let over = probabilities.iter().zip(thresholds).map(|(p, (_, t))| p >= t).collect();
        let kept = limits.apply(probabilities, over);
        Some(labels.iter().zip(kept).filter(|(_, k)| *k).map(|(l, _)| l.clone()).collect())
    }

    /// The rule in words: "`rain` when its probability is at least 0.31" or "the label with
    /// the highest ln p + bias (general 0, teen +0.35, mature −0.2)".
    pub fn describe(&self) -> String {
        match &self.rule {
            Rule::Threshold { positive, threshold } => {
                format!("`{positive}` when its probability is at least {}", as_json_number(*threshold))
            }
            Rule::Biases(biases) => {
                let each: Vec<String> =
                    biases.iter().map(|(label, b)| format!("{label} {:+}", as_json_number(*b))).collect();
                format!("the label with the highest ln p + bias ({})", each.join(", "))
            }
            Rule::PerLabel { thresholds, limits } => {
                let each: Vec<String> =
                    thresholds.iter().map(|(label, t)| format!("{label} {}", as_json_number(*t))).collect();
                let rule = format!("each label whose probability is at least its threshold ({})", each.join(", "));
                match limits.is_none() {
                    true => rule,
                    false => format!("{rule}; {}", limits.describe()),
                }
            }
        }
    }

    /// The largest change the rule makes to a label's log-odds: |ln((1 − t) / t)| for a
    /// threshold t, the largest |bias| for biases.
    pub fn largest_shift(&self) -> f32 {
        match &self.rule {
            Rule::Threshold { threshold, .. } => ((1.0 - threshold) / threshold).ln().abs(),
            Rule::Biases(biases) => biases.iter().map(|(_, b)| b.abs()).fold(0.0, f32::max),
            Rule::PerLabel { thresholds, .. } => {
                thresholds.iter().map(|(_, t)| ((1.0 - t) / t).ln().abs()).fold(0.0, f32::max)
            }
        }
    }

    /// A warning for people when a rule tuned on only `documents` moves far (a threshold
    /// outside [0.1, 0.9], or a bias beyond ±ln 9): on hyperpartisan, 65-document dev splits
    /// gave thresholds of 0.007 and 0.98, and the first cost 3 points of test macro-F1.
    pub fn warning(&self, documents: usize) -> Option<String> {
        const FEW: usize = 200;
        (documents < FEW && self.largest_shift() > 9f32.ln()).then(|| {
            format!(
                "warning: a rule this far from the most probable label, tuned on {documents} documents (under {FEW}), \
                 may not hold on new ones: check it on a test set (`eval`), or tune on more documents"
            )
        })
    }

    /// `prediction` with its primary label chosen by this decision.
    fn relabel(&self, mut prediction: Prediction) -> Prediction {
        let probabilities = &prediction.scores.probabilities;
        if let (Some(thresholds), Some(_)) = (self.thresholds(), &prediction.labels) {
            if probabilities.len() == thresholds.len() {
                prediction.labels = self.carried(&prediction.scores.labels, probabilities);
            }
            return prediction;
        }
        if probabilities.len() == prediction.scores.labels.len() && !probabilities.is_empty() {
            prediction.label = prediction.scores.labels[self.label_index(probabilities)].clone();
        }
        prediction
    }
}

/// `t` as the f64 of its shortest decimal, so that JSON shows the number as decision.json
/// does (0.58575845, not 0.5857584476470947) wherever it goes through a `serde_json::Value`.
pub fn as_json_number(t: f32) -> f64 {
    t.to_string().parse().unwrap_or(f64::from(t))
}

/// The label index (0 or 1) of a document whose second label has probability `positive`, at
/// `threshold`.
fn label_at(positive: f32, threshold: f32) -> usize {
    usize::from(positive >= threshold)
}

/// ln of each probability (a zero taken as the smallest positive f32, so that a bias can
/// still lift it).
fn log_probabilities(probabilities: &[f32]) -> Vec<f64> {
    probabilities.iter().map(|&p| f64::from(p.max(f32::MIN_POSITIVE)).ln()).collect()
}

/// The index of the highest `log_p[i] + biases[i]` (ties: the first).
fn biased_argmax(log_p: &[f64], biases: &[f64]) -> usize {
    let mut best = 0;
    for i in 1..log_p.len() {
        if log_p[i] + biases[i] > log_p[best] + biases[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests;
