//! `train --tune-threshold`: when a run completes, the decision rule of its model (a
//! two-label threshold, or label biases) tuned on the run's dev set — classified by the saved model as `predict` would, then
//! [`longread_classifier::decision::tune`] as `longread threshold` does — and kept in
//! OUT/decision.json, where every front applies it.

use longread_classifier::decision::{Decision, DECISION_FILE};
use longread_classifier::evaluate::{tune_threshold_on, ThresholdMetric};
use longread_classifier::{Classifier, ClassifierOptions};
use longread_metrics::Report;
use longread_text::Example;

use crate::error::{Result, TrainError};
use crate::run::spec::TrainSpec;
use crate::run::RunHooks;

/// The dev documents of a run as read, their primary-task label in the first column, kept
/// for tuning the threshold at the end.
pub(crate) struct DevTexts {
    /// The documents.
    pub examples: Vec<Example>,
    /// Where they came from, for messages.
    pub source: String,
}

/// What `--tune-threshold` found and kept.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThresholdSummary {
    /// The rule (`positive` and `threshold` for two labels, `biases` for more; `chosen_by`).
    #[serde(flatten)]
    pub decision: Decision,
    /// What it maximizes.
    pub metric: ThresholdMetric,
    /// The dev metrics with the most probable label.
    pub at_default: Report,
    /// The dev metrics with the rule (optimistic: the dev set chose it, and the epoch).
    pub at_threshold: Report,
}

/// The dev documents to keep for tuning (read from `source`: the --dev file, or the
/// training data a --dev-split came from): `examples` when the run tunes a threshold, none
/// otherwise (they are not held in memory for nothing).
pub(crate) fn keep_dev(spec: &TrainSpec, examples: &[Example], source: &str) -> Option<DevTexts> {
    let source = match spec.dev {
        Some(_) => source.to_owned(),
        None => format!("the --dev-split {} of {source}", spec.training.dev_split),
    };
    spec.tune_threshold.map(|_| DevTexts { examples: examples.to_vec(), source })
}

/// Tunes the decision rule of the model in `spec.out` on `dev` and keeps it there (`hooks` hear
/// what was found).
pub(crate) fn tune_and_keep(
    spec: &TrainSpec,
    metric: ThresholdMetric,
    dev: &DevTexts,
    hooks: &mut dyn RunHooks,
) -> Result<ThresholdSummary> {
    let failed = |why: String| {
        TrainError::Run(format!(
            "training completed (the model is in {}), but tuning its decision rule failed: {why}",
            spec.out.display()
        ))
    };
    hooks.note(&format!(
        "tuning the decision rule on the dev set's {} documents (--tune-threshold {})",
        dev.examples.len(),
        metric.name()
    ));
    let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
    let classifier = Classifier::load(&spec.out, options).map_err(|e| failed(e.to_string()))?;
    let (tuned, decision) =
        tune_threshold_on(&classifier, &dev.examples, &dev.source, metric, || {}).map_err(|e| failed(e.to_string()))?;
    decision.save(&spec.out).map_err(|e| failed(e.to_string()))?;
    let summary = ThresholdSummary { decision, metric, at_default: tuned.at_default, at_threshold: tuned.at_threshold };
    let (before, after) = (metric.of(&summary.at_default), metric.of(&summary.at_threshold));
    let found = if before == after {
        format!("nothing did better than the most probable label (dev {} {before:.4})", metric.name())
    } else {
        format!("dev {} {before:.4} → {after:.4} (optimistic: the dev set chose it)", metric.name())
    };
    hooks.note(&format!(
        "decision rule: {}; {found}; kept in {}",
        longread_metrics::terminal::printable(&summary.decision.describe()),
        spec.out.join(DECISION_FILE).display()
    ));
    Ok(summary)
}
