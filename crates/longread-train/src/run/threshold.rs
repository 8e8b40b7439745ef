//! `train --tune-threshold`: when a run completes, the decision rule of its model (a
//! two-label threshold, or label biases) tuned on the run's dev set — classified by the saved model as `predict` would, then
//! [`longread_classifier::decision::tune`] as `longread threshold` does — and kept in
//! OUT/decision.json, where every front applies it.

use longread_classifier::decision::DECISION_FILE;
use longread_classifier::evaluate::{tune_threshold_on, ThresholdMetric, TunedRule};
use longread_classifier::{Classifier, ClassifierOptions};
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

/// The error of a run that completed but whose rule could not be tuned.
fn failed(spec: &TrainSpec, why: impl std::fmt::Display) -> TrainError {
    TrainError::Run(format!(
        "training completed (the model is in {}), but tuning its decision rule failed: {why}",
        spec.out.display()
    ))
}

/// Tunes the decision rule of the model in `spec.out` on `dev` and keeps it there (`hooks` hear
/// what was found).
pub(crate) fn tune_and_keep(
    spec: &TrainSpec,
    metric: ThresholdMetric,
    dev: &DevTexts,
    hooks: &mut dyn RunHooks,
) -> Result<TunedRule> {
    hooks.note(&format!(
        "tuning the decision rule on the dev set's {} documents (--tune-threshold {})",
        dev.examples.len(),
        metric.name()
    ));
    let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
    let classifier = Classifier::load(&spec.out, options).map_err(|e| failed(spec, e))?;
    let tuned =
        tune_threshold_on(&classifier, &dev.examples, &dev.source, metric, || {}).map_err(|e| failed(spec, e))?;
    keep(spec, tuned, "dev", "optimistic: the dev set chose it", hooks)
}

/// Tunes the decision rule of the bag of words in `spec.out` on the out-of-fold probabilities
/// of its training documents (`probabilities[d]` for document d of label index `truth[d]`:
/// each scored by a model fitted without its fold) and keeps it there.
pub(crate) fn tune_out_of_fold(
    spec: &TrainSpec,
    metric: ThresholdMetric,
    labels: &[String],
    truth: &[usize],
    probabilities: &[Vec<f32>],
    folds: usize,
    hooks: &mut dyn RunHooks,
) -> Result<TunedRule> {
    let tuned = longread_classifier::decision::tune(labels, truth, probabilities, |r| metric.of(r))
        .map_err(|e| failed(spec, e))?;
    let chosen_by = format!(
        "{} on the training documents' out-of-fold probabilities ({folds} folds, {} documents)",
        metric.name(),
        truth.len()
    );
    let tuned = TunedRule::new(tuned, metric, chosen_by);
    keep(spec, tuned, "out-of-fold", "the fold models are fitted on less data than the final one", hooks)
}

/// Saves the rule `tuned` found in `spec.out` and tells `hooks` what it changed (`scored`: on
/// what, `caveat`: how far to trust the figures).
fn keep(spec: &TrainSpec, tuned: TunedRule, scored: &str, caveat: &str, hooks: &mut dyn RunHooks) -> Result<TunedRule> {
    tuned.decision.save(&spec.out).map_err(|e| failed(spec, e))?;
    let metric = tuned.metric;
    let (before, after) = (metric.of(&tuned.at_default), metric.of(&tuned.at_threshold));
    let found = if before == after {
        format!("nothing did better than the most probable label ({scored} {} {before:.4})", metric.name())
    } else {
        format!("{scored} {} {before:.4} → {after:.4} ({caveat})", metric.name())
    };
    hooks.note(&format!(
        "decision rule: {}; {found}; kept in {}",
        longread_metrics::terminal::printable(&tuned.decision.describe()),
        spec.out.join(DECISION_FILE).display()
    ));
    if let Some(warning) = tuned.decision.warning(tuned.at_default.examples) {
        hooks.note(&warning);
    }
    Ok(tuned)
}
