//! `train --calibrate` and `--tune-threshold`: when a run completes, its model classifies the
//! run's dev set as `predict` would; a temperature fitted there, as `longread calibrate` fits
//! it, goes to OUT/calibration.json, then the decision rule (a two-label threshold, or label
//! biases) tuned on the calibrated probabilities, as `longread threshold` tunes it
//! ([`longread_classifier::decision::tune`]), to OUT/decision.json; every front applies both.

use longread_classifier::decision::label_temperature::{self, FittedPerLabel};
use longread_classifier::decision::temperature::{self, BeforeAfter, Fitted};
use longread_classifier::decision::{Temperature, CALIBRATION_FILE, DECISION_FILE};
use longread_classifier::evaluate::{primary_probabilities, TunedRule};
use longread_classifier::multilabel_eval::{
    calibrate_scored, score_label_sets, tune_scored, ScoredSets, TunedThresholds,
};
use longread_classifier::{Classifier, ClassifierOptions};
use longread_text::multilabel::MultiLabelExample;
use longread_text::Example;

use crate::error::{Result, TrainError};
use crate::run::spec::TrainSpec;
use crate::run::RunHooks;

/// The dev documents of a run as read, their primary-task label in the first column, kept
/// for tuning the threshold at the end.
pub(crate) struct DevTexts {
    /// The documents.
    pub examples: Vec<Example>,
    /// A multi-label run's documents with their label sets (`examples` is then empty).
    pub label_sets: Vec<MultiLabelExample>,
    /// Where they came from, for messages.
    pub source: String,
}

/// The dev documents to keep for tuning (read from `source`: the --dev file, or the
/// training data a --dev-split came from): `examples` when the run tunes a threshold or
/// calibrates, none otherwise (they are not held in memory for nothing).
pub(crate) fn keep_dev(spec: &TrainSpec, examples: &[Example], source: &str) -> Option<DevTexts> {
    (spec.tune_threshold.is_some() || spec.calibrate).then(|| DevTexts {
        examples: examples.to_vec(),
        label_sets: Vec::new(),
        source: dev_source(spec, source),
    })
}

/// [`keep_dev`] for a multi-label run: its dev documents with their label sets.
pub(crate) fn keep_multilabel_dev(spec: &TrainSpec, examples: &[MultiLabelExample], source: &str) -> Option<DevTexts> {
    (spec.tune_threshold.is_some() || spec.calibrate).then(|| DevTexts {
        examples: Vec::new(),
        label_sets: examples.to_vec(),
        source: dev_source(spec, source),
    })
}

/// The dev set's name for messages: the --dev file, or the --dev-split of `source`.
fn dev_source(spec: &TrainSpec, source: &str) -> String {
    match spec.dev {
        Some(_) => source.to_owned(),
        None => format!("the --dev-split {} of {source}", spec.training.dev_split),
    }
}

/// The error of a run that completed but whose model could not be calibrated or its rule
/// tuned.
fn failed(spec: &TrainSpec, why: impl std::fmt::Display) -> TrainError {
    TrainError::Run(format!(
        "training completed (the model is in {}), but calibrating it or tuning its decision rule failed: {why}",
        spec.out.display()
    ))
}

/// What a completed run kept besides its model.
#[derive(Default)]
pub(crate) struct AfterRun {
    /// `--calibrate`'s temperature (or temperatures).
    pub calibration: Option<KeptCalibration>,
    /// `--tune-threshold`'s rule.
    pub threshold: Option<KeptRule>,
}

/// The calibration `--calibrate` kept, with what it did on the documents it was fitted on.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum KeptCalibration {
    /// One temperature for a softmax over the labels.
    Softmax(Fitted),
    /// A multi-label model's temperature per label.
    PerLabel(FittedPerLabel),
}

/// The rule `--tune-threshold` kept, with what it did on the documents it was tuned on.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum KeptRule {
    /// A single-label model's threshold or biases.
    OneLabel(TunedRule),
    /// A multi-label model's per-label thresholds.
    PerLabel(TunedThresholds),
}

/// Calibrates the model in `spec.out` on `dev` (with --calibrate) and tunes its decision
/// rule on the calibrated probabilities (with --tune-threshold), keeping both there (`hooks`
/// hear what was found). The dev set is classified once.
pub(crate) fn calibrate_and_tune(spec: &TrainSpec, dev: &DevTexts, hooks: &mut dyn RunHooks) -> Result<AfterRun> {
    let (what, flags) = match (spec.calibrate, spec.tune_threshold) {
        (true, Some(metric)) => (
            "calibrating the probabilities and tuning the decision rule",
            format!("--calibrate, --tune-threshold {}", metric.name()),
        ),
        (true, None) => ("calibrating the probabilities", "--calibrate".to_owned()),
        (false, Some(metric)) => ("tuning the decision rule", format!("--tune-threshold {}", metric.name())),
        (false, None) => return Ok(AfterRun::default()),
    };
    if !dev.label_sets.is_empty() {
        return calibrate_and_tune_per_label(spec, dev, hooks);
    }
    hooks.note(&format!("{what} on the dev set's {} documents ({flags})", dev.examples.len()));
    let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
    let classifier = Classifier::load(&spec.out, options).map_err(|e| failed(spec, e))?;
    let (truth, probabilities) =
        primary_probabilities(&classifier, &dev.examples, &dev.source, || {}).map_err(|e| failed(spec, e))?;
    let labels = classifier.labels().to_vec();
    let current = Temperature::load(&spec.out).map_err(|e| failed(spec, e))?;
    let scored = Scored { labels: &labels, truth: &truth, probabilities, current };
    let chosen_on = format!("{} ({} documents)", dev.source, truth.len());
    after_run(spec, scored, &chosen_on, ("dev", "optimistic: the dev set chose it"), hooks)
}

/// Labelled documents' probabilities for [`after_run`].
pub(crate) struct Scored<'a> {
    /// The model's labels.
    pub labels: &'a [String],
    /// Each document's label index.
    pub truth: &'a [usize],
    /// Each document's probabilities, in label order (as the model in OUT gives them).
    pub probabilities: Vec<Vec<f32>>,
    /// The calibration the model in OUT has, if any (the probabilities are tempered by it).
    pub current: Option<Temperature>,
}

/// Calibrates (with --calibrate) and tunes the rule (with --tune-threshold) on `scored`,
/// keeping both in `spec.out`. `chosen_on` says on what for the files' `chosen_by`; `scored`
/// and `caveat` say how far to trust the rule's figures.
pub(crate) fn after_run(
    spec: &TrainSpec,
    scored: Scored,
    chosen_on: &str,
    (on, caveat): (&str, &str),
    hooks: &mut dyn RunHooks,
) -> Result<AfterRun> {
    let Scored { labels, truth, mut probabilities, current } = scored;
    let mut kept = AfterRun::default();
    if spec.calibrate {
        let chosen_by = format!("log loss on {chosen_on}");
        let mut fitted = temperature::fit(labels.len(), truth, &probabilities, current.as_ref(), chosen_by)
            .map_err(|e| failed(spec, e))?;
        temperature::keep(&spec.out, &fitted, labels).map_err(|e| failed(spec, e))?;
        // The rule is tuned on the probabilities the calibrated model gives.
        probabilities = std::mem::take(&mut fitted.calibrated);
        let said = (fitted.log_loss, fitted.ece, temperature::warnings(&fitted));
        note_calibration(spec, hooks, &fitted.calibration.describe(), on, said);
        kept.calibration = Some(KeptCalibration::Softmax(fitted));
    }
    if let Some(metric) = spec.tune_threshold {
        let tuned = longread_classifier::decision::tune(labels, truth, &probabilities, |r| metric.of(r))
            .map_err(|e| failed(spec, e))?;
        let tuned = TunedRule::new(tuned, metric, format!("{} on {chosen_on}", metric.name()));
        kept.threshold = Some(KeptRule::OneLabel(keep(spec, tuned, on, caveat, hooks)?));
    }
    Ok(kept)
}

/// Tells `hooks` what calibrating kept in `spec.out`: the calibration (`what`, in words), its
/// log loss and ECE before and after `on` the documents it was fitted on, and its warnings.
fn note_calibration(
    spec: &TrainSpec,
    hooks: &mut dyn RunHooks,
    what: &str,
    on: &str,
    (log_loss, ece, warnings): (BeforeAfter, BeforeAfter, Vec<String>),
) {
    hooks.note(&format!(
        "calibration: {}; {on} log loss {:.4} → {:.4}, ECE {:.4} → {:.4}; kept in {}",
        longread_metrics::terminal::printable(what),
        log_loss.before,
        log_loss.after,
        ece.before,
        ece.after,
        spec.out.join(CALIBRATION_FILE).display()
    ));
    for warning in warnings {
        hooks.note(&warning);
    }
}

/// `--calibrate` and `--tune-threshold` of a multi-label run: each label's temperature fitted
/// on the dev set's label sets, then each label's threshold tuned on the calibrated
/// probabilities, as `longread calibrate` and `longread threshold` do; both kept in
/// `spec.out`. The dev set is classified once.
fn calibrate_and_tune_per_label(spec: &TrainSpec, dev: &DevTexts, hooks: &mut dyn RunHooks) -> Result<AfterRun> {
    let documents = dev.label_sets.len();
    let what = match (spec.calibrate, spec.tune_threshold.is_some()) {
        (true, true) => "calibrating each label's probabilities and tuning its threshold",
        (true, false) => "calibrating each label's probabilities",
        _ => "tuning each label's threshold",
    };
    hooks.note(&format!("{what} on the dev set's {documents} documents"));
    let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
    let classifier = Classifier::load(&spec.out, options).map_err(|e| failed(spec, e))?;
    let scored = score_label_sets(&classifier, &dev.label_sets, &dev.source, || {}).map_err(|e| failed(spec, e))?;
    after_run_per_label(spec, scored, ("dev", "optimistic: the dev set chose it"), hooks)
}

/// Each label's temperature (with --calibrate) and then threshold (with --tune-threshold)
/// fitted on `scored`, the documents as the model in `spec.out` scores them, and kept there;
/// `on` names them and `caveat` says how far to trust the figures with the thresholds.
pub(crate) fn after_run_per_label(
    spec: &TrainSpec,
    mut scored: ScoredSets,
    (on, caveat): (&str, &str),
    hooks: &mut dyn RunHooks,
) -> Result<AfterRun> {
    let documents = scored.truth.len();
    let mut kept = AfterRun::default();
    if spec.calibrate {
        let current = Temperature::load(&spec.out).map_err(|e| failed(spec, e))?;
        let mut fitted = calibrate_scored(&scored, current.as_ref()).map_err(|e| failed(spec, e))?;
        label_temperature::keep(&spec.out, &fitted, &scored.labels).map_err(|e| failed(spec, e))?;
        let said = (fitted.log_loss, fitted.ece, label_temperature::warnings(&fitted));
        note_calibration(spec, hooks, &fitted.calibration.describe(), on, said);
        // The thresholds are tuned on the probabilities the calibrated model gives.
        scored.probabilities = std::mem::take(&mut fitted.calibrated);
        kept.calibration = Some(KeptCalibration::PerLabel(fitted));
    }
    if spec.tune_threshold.is_some() {
        let tuned = tune_scored(&scored, Default::default()).map_err(|e| failed(spec, e))?;
        tuned.decision.save(&spec.out).map_err(|e| failed(spec, e))?;
        let (before, after) = (&tuned.at_default, &tuned.at_threshold);
        hooks.note(&format!(
            "decision rule: {}; {on} micro-F1 {:.4} → {:.4}, macro-F1 {:.4} → {:.4} ({caveat}); kept in {}",
            longread_metrics::terminal::printable(&tuned.decision.describe()),
            before.micro.f1,
            after.micro.f1,
            before.macro_avg.f1,
            after.macro_avg.f1,
            spec.out.join(DECISION_FILE).display()
        ));
        if let Some(note) = tuned.floored_note() {
            hooks.note(&note);
        }
        if let Some(warning) = tuned.decision.warning(documents) {
            hooks.note(&warning);
        }
        kept.threshold = Some(KeptRule::PerLabel(tuned));
    }
    Ok(kept)
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
