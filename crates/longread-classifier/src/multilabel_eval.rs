//! Evaluation of multi-label models: each document's predicted label set against its true one,
//! with scikit-learn's multi-label metrics ([`longread_metrics::multilabel`]), bootstrap
//! intervals over documents for micro- and macro-F1, and — for several models on the same
//! documents — paired bootstrap p-values against the first.

use std::collections::BTreeMap;

use longread_metrics::bootstrap::{Bootstrap, Interval};
use longread_metrics::multilabel::{evaluate_multilabel, MultiLabelReport};
use longread_model::error::{ModelError, Result};
use longread_text::multilabel::{read_multilabel, resolve_multilabel, LabelLayout, MultiLabelExample};
use longread_text::Document;

use crate::Classifier;

/// One model's multi-label evaluation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MultiLabelScores {
    /// The model directory as given.
    pub model: String,
    /// Every metric on all documents.
    pub report: MultiLabelReport,
    /// Interval of the micro-F1.
    pub micro_f1_ci: Interval,
    /// Interval of the macro-F1.
    pub macro_f1_ci: Interval,
    /// Paired p-value of the micro-F1 difference with the first model (none for the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1_p_value: Option<f64>,
    /// Paired p-value of the macro-F1 difference with the first model (none for the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macro_f1_p_value: Option<f64>,
}

/// Models evaluated on the same multi-label documents.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MultiLabelEvaluation {
    /// Documents scored.
    pub documents: usize,
    /// Resamples of the bootstrap.
    pub resamples: usize,
    /// Confidence level of the intervals.
    pub level: f64,
    /// Labels of the data that the models do not know, with how many documents carry each:
    /// left out of the scores.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_labels: BTreeMap<String, usize>,
    /// Documents that carry at least one unknown label.
    #[serde(skip_serializing_if = "is_zero")]
    pub documents_with_unknown_labels: usize,
    /// One entry per model, in the order given.
    pub models: Vec<MultiLabelScores>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What one model predicted for every document: which labels it carries, and each label's
/// probability.
struct Predicted {
    carried: Vec<Vec<bool>>,
    probabilities: Vec<Vec<f32>>,
}

/// Evaluates multi-label `models` (all with the first's labels, in any order) on the documents
/// of `reader`, laid out as `layout` says. Labels of the data that the models do not know are
/// left out of the scores and listed in the result, or refused (naming the line) when `strict`.
/// `on_document` hears each document scored by each model.
pub fn evaluate_multilabel_models(
    models: &[(String, &Classifier)],
    reader: impl std::io::BufRead,
    source_name: &str,
    layout: &LabelLayout,
    strict: bool,
    bootstrap: Bootstrap,
    mut on_document: impl FnMut(),
) -> Result<MultiLabelEvaluation> {
    let Some((first_name, first)) = models.first() else {
        return Err(ModelError::InvalidInput("no model to evaluate".into()));
    };
    for (name, classifier) in models {
        if !classifier.multi_label() {
            return Err(ModelError::InvalidInput(format!(
                "{name} predicts one label per document, {first_name} is multi-label: compare models of one kind"
            )));
        }
    }
    let labels = first.labels().to_vec();
    for (name, classifier) in &models[1..] {
        let mut theirs = classifier.labels().to_vec();
        let mut ours = labels.clone();
        theirs.sort();
        ours.sort();
        if theirs != ours {
            return Err(ModelError::InvalidInput(format!(
                "{name} has the labels {:?}, {first_name} {:?}: compare models with the same labels",
                classifier.labels(),
                labels
            )));
        }
    }
    let examples = read_multilabel(reader, source_name, layout)?;
    if examples.is_empty() {
        return Err(ModelError::InvalidInput(format!("{source_name}: no documents to evaluate")));
    }
    let (ids, unknown) = resolve_multilabel(&examples, &labels, source_name, !strict)?;
    let truth: Vec<Vec<bool>> = ids.iter().map(|doc| (0..labels.len()).map(|l| doc.contains(&l)).collect()).collect();
    let mut predicted = Vec::with_capacity(models.len());
    for (_, classifier) in models {
        predicted.push(predict(classifier, &labels, &examples, source_name, &mut on_document)?);
    }
    let n = examples.len();
    let score = |p: &Predicted, idx: &[usize]| -> Option<MultiLabelReport> {
        let t: Vec<Vec<bool>> = idx.iter().map(|&i| truth[i].clone()).collect();
        let c: Vec<Vec<bool>> = idx.iter().map(|&i| p.carried[i].clone()).collect();
        evaluate_multilabel(&labels, &t, &c).ok()
    };
    let micro = |p: &Predicted, idx: &[usize]| score(p, idx).map(|r| r.micro.f1);
    let macro_ = |p: &Predicted, idx: &[usize]| score(p, idx).map(|r| r.macro_avg.f1);
    let mut scores = Vec::with_capacity(models.len());
    for (k, ((name, _), p)) in models.iter().zip(&predicted).enumerate() {
        let report = evaluate_multilabel(&labels, &truth, &p.carried)
            .and_then(|r| r.with_scores(&truth, &p.probabilities))
            .map_err(ModelError::InvalidInput)?;
        let first = &predicted[0];
        let paired = |metric: &dyn Fn(&Predicted, &[usize]) -> Option<f64>| {
            (k > 0).then(|| bootstrap.paired_p_value_of(n, |idx| metric(first, idx), |idx| metric(p, idx)))
        };
        scores.push(MultiLabelScores {
            model: name.clone(),
            report,
            micro_f1_ci: bootstrap.interval_of(n, |idx| micro(p, idx)),
            macro_f1_ci: bootstrap.interval_of(n, |idx| macro_(p, idx)),
            micro_f1_p_value: paired(&micro),
            macro_f1_p_value: paired(&macro_),
        });
    }
    let (unknown_labels, documents_with_unknown_labels) =
        unknown.map_or((BTreeMap::new(), 0), |u| (u.names, u.documents));
    Ok(MultiLabelEvaluation {
        documents: n,
        resamples: bootstrap.resamples,
        level: bootstrap.level,
        unknown_labels,
        documents_with_unknown_labels,
        models: scores,
    })
}

/// `classifier`'s label sets and probabilities for `examples`, in the order of `labels`.
fn predict(
    classifier: &Classifier,
    labels: &[String],
    examples: &[MultiLabelExample],
    source_name: &str,
    on_document: &mut impl FnMut(),
) -> Result<Predicted> {
    let theirs = classifier.labels();
    let position: Vec<usize> = labels.iter().map(|l| theirs.iter().position(|t| t == l).unwrap_or(0)).collect();
    let mut carried = Vec::with_capacity(examples.len());
    let mut probabilities = Vec::with_capacity(examples.len());
    let documents = || examples.iter().map(|e| Document::new(e.id.clone(), e.text.clone()));
    classifier.classify_stream(documents, |document, result| {
        let prediction = result
            .map_err(|e| ModelError::InvalidInput(format!("{source_name}: document {}: {}", document.id, e.message)))?;
        let named = prediction.labels.as_deref().unwrap_or_default();
        carried.push(labels.iter().map(|l| named.contains(l)).collect());
        probabilities.push(position.iter().map(|&i| prediction.scores.probabilities[i]).collect());
        on_document();
        Ok::<(), ModelError>(())
    })?;
    Ok(Predicted { carried, probabilities })
}

/// Classifies the labelled documents of `reader` with the multi-label `classifier` and fits
/// each label's temperature there ([`crate::decision::label_temperature::fit`]); the documents
/// should be held out from training. Labels of the data that the model does not know are left
/// out, as [`evaluate_multilabel_models`] does. Nothing is saved
/// ([`crate::decision::label_temperature::keep`] does).
pub fn calibrate_multilabel(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    layout: &LabelLayout,
    on_document: impl FnMut(),
) -> Result<crate::decision::label_temperature::FittedPerLabel> {
    if !classifier.multi_label() {
        return Err(ModelError::InvalidInput("a temperature per label is for multi-label models".into()));
    }
    let examples = read_multilabel(reader, source_name, layout)?;
    let scored = score_label_sets(classifier, &examples, source_name, on_document)?;
    calibrate_scored(&scored, crate::decision::Temperature::load(classifier.dir())?.as_ref())
}

/// Each label's temperature fitted on documents already scored by a model whose calibration
/// is `current` (as [`calibrate_multilabel`]).
pub fn calibrate_scored(
    scored: &ScoredSets,
    current: Option<&crate::decision::Temperature>,
) -> Result<crate::decision::label_temperature::FittedPerLabel> {
    let chosen_by = format!("each label's log loss on {} ({} documents)", scored.source, scored.truth.len());
    crate::decision::label_temperature::fit(&scored.labels, &scored.truth, &scored.probabilities, current, chosen_by)
}

impl MultiLabelEvaluation {
    /// For people: one model's full report, or a comparison row per model.
    pub fn to_table(&self) -> String {
        let ci = |v: f64, i: &Interval| format!("{v:.3} [{:.3}, {:.3}]", i.low, i.high);
        let mut out = String::new();
        if let [one] = self.models.as_slice() {
            out += &one.report.to_table();
            out += &format!(
                "\n{:.0}% bootstrap intervals ({} resamples): micro-F1 {}, macro-F1 {}\n",
                self.level * 100.0,
                self.resamples,
                ci(one.report.micro.f1, &one.micro_f1_ci),
                ci(one.report.macro_avg.f1, &one.macro_f1_ci)
            );
            return out;
        }
        let width = self.models.iter().map(|m| m.model.chars().count()).max().unwrap_or(5).max(5);
        out += &format!(
            "{} documents; {:.0}% bootstrap intervals from {} resamples; p: paired bootstrap against the first model\n\n",
            self.documents,
            self.level * 100.0,
            self.resamples
        );
        out += &format!(
            "{:<width$}  {:<22}  {:<22}  {:>8}  {:>8}  {:>8}  {:>8}\n",
            "model", "micro-F1", "macro-F1", "p(micro)", "p(macro)", "subset", "hamming"
        );
        let p = |v: Option<f64>| v.map_or("-".to_string(), |p| format!("{p:.3}"));
        for m in &self.models {
            out += &format!(
                "{:<width$}  {:<22}  {:<22}  {:>8}  {:>8}  {:>8.3}  {:>8.4}\n",
                m.model,
                ci(m.report.micro.f1, &m.micro_f1_ci),
                ci(m.report.macro_avg.f1, &m.macro_f1_ci),
                p(m.micro_f1_p_value),
                p(m.macro_f1_p_value),
                m.report.subset_accuracy,
                m.report.hamming_loss
            );
        }
        out
    }

    /// For machines: one model's report with its intervals and the labels left out (`eval
    /// --json`), or for several models the whole comparison.
    pub fn to_json(&self) -> serde_json::Value {
        match self.models.as_slice() {
            [one] => {
                let mut value = serde_json::to_value(&one.report).expect("a report serializes");
                value["micro_f1_ci"] = serde_json::json!(one.micro_f1_ci);
                value["macro_f1_ci"] = serde_json::json!(one.macro_f1_ci);
                value["unknown_labels"] = serde_json::json!(self.unknown_labels);
                value["documents_with_unknown_labels"] = self.documents_with_unknown_labels.into();
                value
            }
            _ => serde_json::to_value(self).expect("an evaluation serializes"),
        }
    }

    /// The warning for people about labels left out, if any.
    pub fn unknown_note(&self) -> Option<String> {
        (!self.unknown_labels.is_empty()).then(|| {
            let names: Vec<String> = self.unknown_labels.iter().map(|(name, n)| format!("{name} ({n})")).collect();
            format!(
                "warning: {} label{} the model does not know, on {} document{}, left out of the scores: {} \
                 (--strict-labels refuses such data)",
                self.unknown_labels.len(),
                if self.unknown_labels.len() == 1 { "" } else { "s" },
                self.documents_with_unknown_labels,
                if self.documents_with_unknown_labels == 1 { "" } else { "s" },
                names.join(", ")
            )
        })
    }
}

/// What [`tune_multilabel_thresholds`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TunedThresholds {
    /// The rule: a threshold per label.
    pub decision: crate::decision::Decision,
    /// Documents tuned on.
    pub documents: usize,
    /// The scores with every threshold at 0.5.
    pub at_default: MultiLabelReport,
    /// The scores with the tuned thresholds (on the same documents: an optimistic figure).
    pub at_threshold: MultiLabelReport,
    /// Labels that some documents carry but no threshold gave an F1 of
    /// [`crate::decision::F1_FLOOR`]: their thresholds are above every probability they have
    /// here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub floored: Vec<String>,
}

impl TunedThresholds {
    /// A note for people naming the [`Self::floored`] labels, if any.
    pub fn floored_note(&self) -> Option<String> {
        (!self.floored.is_empty()).then(|| {
            format!(
                "note: no threshold gives {} an F1 of {} on these documents: carried only above their highest \
                 probability here",
                self.floored.iter().map(|l| longread_metrics::terminal::printable(l)).collect::<Vec<_>>().join(", "),
                crate::decision::F1_FLOOR
            )
        })
    }
}

/// The per-label thresholds that maximize each label's F1 on the labelled documents of
/// `reader` ([`crate::decision::tune_per_label`]), for the multi-label `classifier`. Labels of
/// the data that the model does not know are left out, as [`evaluate_multilabel_models`]
/// does. The rule keeps `limits` on how many labels a document carries (the thresholds are
/// tuned label by label, without them; the scores with the rule apply both).
pub fn tune_multilabel_thresholds(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    layout: &LabelLayout,
    limits: crate::decision::Limits,
    on_document: impl FnMut(),
) -> Result<TunedThresholds> {
    if !classifier.multi_label() {
        return Err(ModelError::InvalidInput("per-label thresholds are for multi-label models".into()));
    }
    let examples = read_multilabel(reader, source_name, layout)?;
    tune_scored(&score_label_sets(classifier, &examples, source_name, on_document)?, limits)
}

/// Labelled multi-label documents as a model scored them.
#[derive(Debug, Clone)]
pub struct ScoredSets {
    /// The model's labels.
    pub labels: Vec<String>,
    /// Each document's label set: one bool per label (labels the model does not know left out).
    pub truth: Vec<Vec<bool>>,
    /// Each document's probabilities, in label order, as the model gives them.
    pub probabilities: Vec<Vec<f32>>,
    /// Where the documents came from, for messages.
    pub source: String,
}

/// `examples` with their label sets, scored by the multi-label `classifier` (`on_document`
/// is called after each).
pub fn score_label_sets(
    classifier: &Classifier,
    examples: &[MultiLabelExample],
    source_name: &str,
    mut on_document: impl FnMut(),
) -> Result<ScoredSets> {
    if !classifier.multi_label() {
        return Err(ModelError::InvalidInput("label sets are scored by multi-label models".into()));
    }
    let labels = classifier.labels().to_vec();
    if examples.is_empty() {
        return Err(ModelError::InvalidInput(format!("{source_name}: no documents")));
    }
    let (ids, _) = resolve_multilabel(examples, &labels, source_name, true)?;
    let truth: Vec<Vec<bool>> = ids.iter().map(|doc| (0..labels.len()).map(|l| doc.contains(&l)).collect()).collect();
    let predicted = predict(classifier, &labels, examples, source_name, &mut on_document)?;
    Ok(ScoredSets { labels, truth, probabilities: predicted.probabilities, source: source_name.to_owned() })
}

/// The per-label thresholds that maximize each label's F1 on documents already scored, with
/// `limits` (as [`tune_multilabel_thresholds`]).
pub fn tune_scored(scored: &ScoredSets, limits: crate::decision::Limits) -> Result<TunedThresholds> {
    let ScoredSets { labels, truth, probabilities, source } = scored;
    let rule = match crate::decision::tune_per_label(labels, truth, probabilities) {
        crate::decision::Rule::PerLabel { thresholds, .. } => crate::decision::Rule::PerLabel { thresholds, limits },
        other => other,
    };
    let decision = crate::decision::Decision {
        rule,
        chosen_by: format!("each label's F1 on {source} ({} documents)", truth.len()),
    };
    decision.check(labels).map_err(ModelError::InvalidInput)?;
    let report = |decision: Option<&crate::decision::Decision>| {
        let carried: Vec<Vec<bool>> = probabilities
            .iter()
            .map(|p| {
                let named = match decision {
                    Some(decision) => decision.carried(labels, p).unwrap_or_default(),
                    None => crate::prediction::carried(labels, p),
                };
                labels.iter().map(|l| named.contains(l)).collect()
            })
            .collect();
        evaluate_multilabel(labels, truth, &carried).map_err(ModelError::InvalidInput)
    };
    let thresholds = decision.thresholds().unwrap_or_default();
    let floored = labels
        .iter()
        .enumerate()
        .filter(|&(l, _)| {
            truth.iter().any(|t| t[l]) && probabilities.iter().all(|p| p[l] < thresholds[l]) && thresholds[l] > 0.5
        })
        .map(|(_, label)| label.clone())
        .collect();
    Ok(TunedThresholds {
        floored,
        documents: truth.len(),
        at_default: report(None)?,
        at_threshold: report(Some(&decision))?,
        decision,
    })
}
