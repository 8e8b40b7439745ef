//! `evaluate`, `compare` and `ensemble`: the CLI's `eval` and `ensemble`.

use std::path::PathBuf;

use longread_classifier::ensemble::{build_calibrated_ensemble, build_ensemble};
use longread_classifier::evaluate::evaluate_reader;
use longread_classifier::out_of_fold::out_of_fold_for;
use longread_classifier::Classifier as RustClassifier;
use longread_train::run::stacking::{build_stacked_ensemble, StackSettings};
use pyo3::prelude::*;

use crate::classifier::Classifier;
use crate::convert::{from_json, off_gil};
use crate::{InvalidDocumentError, LongreadError, ModelLoadError};

/// evaluate(model_dir, data, threads=None, precision=None, max_batch_tokens=None, device="auto") -> dict
///
/// `longread eval` on one model: classifies the labelled JSON lines in `data` (each task's
/// label in its column) and returns {"documents": n, "tasks": [{"name", "labels", "report"}]}
/// with accuracy, per-class precision/recall/F1, macro/weighted F1, the confusion matrix,
/// "roc_auc" and "log_loss" of the probabilities (as scikit-learn's `roc_auc_score` and
/// `log_loss`; "roc_auc" absent when a label has no documents), and "constant_prediction" (the
/// label) when the model predicted one label for every document while the gold labels vary.
///
/// A multi-label model reads "labels" lists (CSV: a labels column joined by ";") and returns
/// `longread eval --json`'s object instead: {"documents", "micro", "macro_avg", "weighted",
/// "samples", "subset_accuracy", "hamming_loss", "per_label", ..., "micro_f1_ci",
/// "macro_f1_ci", "unknown_labels"} (labels the model does not know are left out of the scores).
#[pyfunction]
#[pyo3(signature = (model_dir, data, threads=None, precision=None, max_batch_tokens=None, device="auto"))]
pub(crate) fn evaluate(
    py: Python<'_>,
    model_dir: PathBuf,
    data: PathBuf,
    threads: Option<usize>,
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    device: &str,
) -> PyResult<PyObject> {
    let classifier = Classifier::new(py, model_dir, threads, precision, max_batch_tokens, device, false)?.inner;
    let result = off_gil(py, move || -> Result<String, String> {
        let file = std::fs::File::open(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        if classifier.multi_label() {
            let bootstrap = longread_metrics::bootstrap::Bootstrap::new(1000, 0)?;
            let evaluation = longread_classifier::multilabel_eval::evaluate_multilabel_models(
                &[(String::new(), &classifier)],
                std::io::BufReader::new(file),
                &data.display().to_string(),
                &Default::default(),
                false,
                bootstrap,
                || {},
            )
            .map_err(|e| e.to_string())?;
            return Ok(evaluation.to_json().to_string());
        }
        let mut documents = 0usize;
        let reports =
            evaluate_reader(&classifier, std::io::BufReader::new(file), &data.display().to_string(), || documents += 1)
                .map_err(|e| e.to_string())?;
        let tasks: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| serde_json::json!({"name": r.task.name, "labels": r.task.labels, "report": r.report}))
            .collect();
        Ok(serde_json::json!({"documents": documents, "tasks": tasks}).to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// compare(models, data, threads=None, precision=None, max_batch_tokens=None, bootstrap=1000,
/// seed=0, device="auto") -> dict
///
/// `longread eval --model A --model B ... --json`: the models (directories, same labels) on the
/// same labelled documents: accuracy, macro-F1, ROC-AUC and per-label recall with 95% bootstrap
/// intervals (`bootstrap` resamples, seeded), and paired bootstrap p-values against the first
/// model. Returns the JSON the command line prints; for multi-label models {"documents",
/// "models": [{"model", "report", "micro_f1_ci", "macro_f1_ci", "micro_f1_p_value",
/// "macro_f1_p_value"}], ...}.
#[pyfunction]
#[pyo3(signature = (models, data, threads=None, precision=None, max_batch_tokens=None, bootstrap=1000, seed=0, device="auto"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn compare(
    py: Python<'_>,
    models: Vec<PathBuf>,
    data: PathBuf,
    threads: Option<usize>,
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    bootstrap: usize,
    seed: u64,
    device: &str,
) -> PyResult<PyObject> {
    let settings = longread_metrics::bootstrap::Bootstrap::new(bootstrap, seed).map_err(LongreadError::new_err)?;
    let loaded = models
        .iter()
        .map(|dir| {
            Ok((
                dir.display().to_string(),
                Classifier::new(py, dir.clone(), threads, precision, max_batch_tokens, device, false)?.inner,
            ))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let result = off_gil(py, move || -> Result<String, String> {
        let named: Vec<(String, &RustClassifier)> = loaded.iter().map(|(n, c)| (n.clone(), c.as_ref())).collect();
        let file = std::fs::File::open(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        if named.first().is_some_and(|(_, c)| c.multi_label()) {
            let evaluation = longread_classifier::multilabel_eval::evaluate_multilabel_models(
                &named,
                std::io::BufReader::new(file),
                &data.display().to_string(),
                &Default::default(),
                false,
                settings,
                || {},
            )
            .map_err(|e| e.to_string())?;
            return Ok(evaluation.to_json().to_string());
        }
        let comparison = longread_classifier::evaluate::compare(
            &named,
            std::io::BufReader::new(file),
            &data.display().to_string(),
            settings,
            || {},
        )
        .map_err(|e| e.to_string())?;
        serde_json::to_string(&comparison).map_err(|e| e.to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// tune_threshold(model_dir, data=None, metric="macro-f1", write=True, threads=None, device="auto",
///                out_of_fold=None, top_k=None, min_labels=None) -> dict
///
/// `longread threshold`: the decision rule that maximizes `metric` ("macro-f1", "accuracy" or
/// "weighted-f1") on the labelled held-out documents in `data` — for a two-label model the
/// threshold on its second label's probability, for more labels a bias per label added to
/// ln(probability); with `write=True` it is kept in the model directory (decision.json), and
/// every Classifier (and the command line, the server) loaded from it then labels by it.
/// Returns {"positive" and "threshold", or "biases" ({label: bias}); "chosen_by", "metric",
/// "at_default", "at_threshold" (reports with the most probable label and with the rule),
/// "written", "warnings"}. `out_of_fold` instead of `data`: the out-of-fold predictions of a
/// `train --cv` run (its out directory, or its out-of-fold.jsonl), for a final model trained
/// on every document with that run's settings; "warnings" names settings or data in which
/// they differ. A multi-label model gets a threshold per label, each maximizing its label's
/// F1 on `data` or `out_of_fold` (metric "macro-f1"): {"decision": {"thresholds": {label: t}, "chosen_by"},
/// "documents", "at_default", "at_threshold" (multi-label reports), "written", "warnings",
/// "floored" when some labels reach no F1 of 0.1 and are carried only above their highest
/// probability there};
/// `top_k` and `min_labels` (multi-label only, as `threshold --top-k/--min-labels`) bound how
/// many labels a document carries and are kept with the thresholds ("top_k", "min_labels").
#[pyfunction]
#[pyo3(signature = (
    model_dir, data=None, metric="macro-f1", write=true, threads=None, device="auto", out_of_fold=None, top_k=None,
    min_labels=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn tune_threshold(
    py: Python<'_>,
    model_dir: PathBuf,
    data: Option<PathBuf>,
    metric: &str,
    write: bool,
    threads: Option<usize>,
    device: &str,
    out_of_fold: Option<PathBuf>,
    top_k: Option<usize>,
    min_labels: Option<usize>,
) -> PyResult<PyObject> {
    use longread_classifier::evaluate::ThresholdMetric;
    let limits = longread_classifier::decision::Limits { min_labels: min_labels.unwrap_or(0), top_k };
    let metric = match metric {
        "macro-f1" => ThresholdMetric::MacroF1,
        "accuracy" => ThresholdMetric::Accuracy,
        "weighted-f1" => ThresholdMetric::WeightedF1,
        other => {
            return Err(LongreadError::new_err(format!(
                "metric {other:?}: expected \"macro-f1\", \"accuracy\" or \"weighted-f1\""
            )))
        }
    };
    let held_out = HeldOut::of(data, out_of_fold)?;
    let classifier = Classifier::new(py, model_dir.clone(), threads, None, None, device, false)?.inner;
    let result = off_gil(py, move || -> Result<String, String> {
        if classifier.multi_label() {
            return tune_multilabel(&classifier, &model_dir, held_out, metric, limits, write);
        }
        if !limits.is_none() {
            return Err("top_k and min_labels are for multi-label models; this one predicts one label".into());
        }
        let (tuned, warnings) = match held_out {
            HeldOut::Data(data) => {
                let (reader, source) = open_labelled(&data)?;
                let tuned = longread_classifier::evaluate::tune_threshold(&classifier, reader, &source, metric, || {});
                (tuned.map_err(|e| e.to_string())?, Vec::new())
            }
            HeldOut::OutOfFold(run) => {
                let oof = out_of_fold_for(&classifier, &run).map_err(|e| e.to_string())?;
                let tuned = longread_classifier::evaluate::tune_threshold_out_of_fold(&classifier, &oof, metric);
                (tuned.map_err(|e| e.to_string())?, oof.warnings)
            }
        };
        if write {
            tuned.decision.save(&model_dir).map_err(|e| e.to_string())?;
        }
        let mut value = serde_json::to_value(&tuned).map_err(|e| e.to_string())?;
        value["written"] = write.into();
        value["warnings"] = warnings.into();
        Ok(value.to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// `tune_threshold` of a multi-label model: per-label thresholds on held-out data.
fn tune_multilabel(
    classifier: &RustClassifier,
    model_dir: &std::path::Path,
    held_out: HeldOut,
    metric: longread_classifier::evaluate::ThresholdMetric,
    limits: longread_classifier::decision::Limits,
    write: bool,
) -> Result<String, String> {
    limits.check(classifier.labels().len())?;
    if metric != longread_classifier::evaluate::ThresholdMetric::MacroF1 {
        return Err("a multi-label model's thresholds maximize each label's F1 (metric \"macro-f1\")".into());
    }
    let (scored, warnings) = label_sets_scored(classifier, held_out)?;
    let tuned = longread_classifier::multilabel_eval::tune_scored(&scored, limits).map_err(|e| e.to_string())?;
    if write {
        tuned.decision.save(model_dir).map_err(|e| e.to_string())?;
    }
    let mut value = serde_json::to_value(&tuned).map_err(|e| e.to_string())?;
    value["written"] = write.into();
    value["warnings"] = warnings.into();
    Ok(value.to_string())
}

/// The held-out documents of a multi-label `classifier`, scored: `data` classified now, or the
/// out-of-fold predictions of a `train --cv` run (with its warnings).
fn label_sets_scored(
    classifier: &RustClassifier,
    held_out: HeldOut,
) -> Result<(longread_classifier::multilabel_eval::ScoredSets, Vec<String>), String> {
    match held_out {
        HeldOut::Data(data) => {
            let (reader, source) = open_labelled(&data)?;
            let examples = longread_text::multilabel::read_multilabel(reader, &source, &Default::default())
                .map_err(|e| e.to_string())?;
            let scored = longread_classifier::multilabel_eval::score_label_sets(classifier, &examples, &source, || {});
            Ok((scored.map_err(|e| e.to_string())?, Vec::new()))
        }
        HeldOut::OutOfFold(run) => {
            longread_classifier::out_of_fold::multilabel_out_of_fold_for(classifier, &run).map_err(|e| e.to_string())
        }
    }
}

/// calibrate(model_dir, data=None, write=True, threads=None, device="auto", out_of_fold=None) -> dict
///
/// `longread calibrate`: the temperature of least log loss on the labelled held-out documents
/// in `data` (temperature scaling: the primary task's probabilities become
/// softmax(ln p / T)); with `write=True` it is kept in the model directory (calibration.json),
/// with the model's decision rule restated so that no label changes, and every Classifier (and
/// the command line, the server) loaded from it then gives calibrated probabilities. Returns
/// {"temperature", "chosen_by", "previous" (the temperature it replaces, 1 for none), "at_bound", "documents", "log_loss" and
/// "ece" ({"before", "after"}), "written", "warnings", and "decision" when a rule was
/// restated}. `out_of_fold` instead of `data`: as for `tune_threshold`. A multi-label model
/// gets a temperature per label (each label's probability becomes σ(logit(p) / T)):
/// {"temperatures" ({label: T}), "chosen_by", "documents", "labels" (each label's fit),
/// "log_loss", "ece", "written", "warnings", "decision" when its thresholds were restated}.
#[pyfunction]
#[pyo3(signature = (model_dir, data=None, write=true, threads=None, device="auto", out_of_fold=None))]
pub(crate) fn calibrate(
    py: Python<'_>,
    model_dir: PathBuf,
    data: Option<PathBuf>,
    write: bool,
    threads: Option<usize>,
    device: &str,
    out_of_fold: Option<PathBuf>,
) -> PyResult<PyObject> {
    let held_out = HeldOut::of(data, out_of_fold)?;
    let classifier = Classifier::new(py, model_dir.clone(), threads, None, None, device, false)?.inner;
    let result = off_gil(py, move || -> Result<String, String> {
        if classifier.multi_label() {
            return calibrate_multilabel(&classifier, &model_dir, held_out, write);
        }
        let (fitted, warnings) = match held_out {
            HeldOut::Data(data) => {
                let (reader, source) = open_labelled(&data)?;
                let fitted = longread_classifier::evaluate::calibrate_temperature(&classifier, reader, &source, || {});
                (fitted.map_err(|e| e.to_string())?, Vec::new())
            }
            HeldOut::OutOfFold(run) => {
                let oof = out_of_fold_for(&classifier, &run).map_err(|e| e.to_string())?;
                let fitted = longread_classifier::evaluate::calibrate_out_of_fold(&classifier, &oof);
                (fitted.map_err(|e| e.to_string())?, oof.warnings)
            }
        };
        let restated = match write {
            true => longread_classifier::decision::temperature::keep(&model_dir, &fitted, classifier.labels())
                .map_err(|e| e.to_string())?,
            false => None,
        };
        let mut value = serde_json::to_value(&fitted).map_err(|e| e.to_string())?;
        value["written"] = write.into();
        value["warnings"] = warnings.into();
        if let Some(decision) = restated {
            value["decision"] = serde_json::to_value(&decision).map_err(|e| e.to_string())?;
        }
        Ok(value.to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// `calibrate` of a multi-label model: a temperature per label on held-out data.
fn calibrate_multilabel(
    classifier: &RustClassifier,
    model_dir: &std::path::Path,
    held_out: HeldOut,
    write: bool,
) -> Result<String, String> {
    let (scored, mut warnings) = label_sets_scored(classifier, held_out)?;
    let current = longread_classifier::decision::Temperature::load(model_dir).map_err(|e| e.to_string())?;
    let fitted = longread_classifier::multilabel_eval::calibrate_scored(&scored, current.as_ref())
        .map_err(|e| e.to_string())?;
    let label_temperature = longread_classifier::decision::label_temperature::keep;
    let restated = match write {
        true => label_temperature(model_dir, &fitted, classifier.labels()).map_err(|e| e.to_string())?,
        false => None,
    };
    let mut value = serde_json::to_value(&fitted).map_err(|e| e.to_string())?;
    value["written"] = write.into();
    warnings.extend(longread_classifier::decision::label_temperature::warnings(&fitted));
    value["warnings"] = warnings.into();
    if let Some(decision) = restated {
        value["decision"] = serde_json::to_value(&decision).map_err(|e| e.to_string())?;
    }
    Ok(value.to_string())
}

/// What `tune_threshold` and `calibrate` fit on: labelled held-out documents, or a --cv run's
/// out-of-fold predictions.
enum HeldOut {
    Data(PathBuf),
    OutOfFold(PathBuf),
}

impl HeldOut {
    /// Exactly one of `data` and `out_of_fold`.
    fn of(data: Option<PathBuf>, out_of_fold: Option<PathBuf>) -> PyResult<Self> {
        match (data, out_of_fold) {
            (Some(data), None) => Ok(Self::Data(data)),
            (None, Some(run)) => Ok(Self::OutOfFold(run)),
            _ => Err(LongreadError::new_err(
                "give either data (labelled held-out documents) or out_of_fold (a --cv run)",
            )),
        }
    }
}

/// The labelled documents in `data`, and its name for messages.
fn open_labelled(data: &std::path::Path) -> Result<(std::io::BufReader<std::fs::File>, String), String> {
    let file = std::fs::File::open(data).map_err(|e| format!("{}: {e}", data.display()))?;
    Ok((std::io::BufReader::new(file), data.display().to_string()))
}

/// ensemble(models, out, weights=None, calibrate=None, fit_weights=False, folds=5, stack=None,
///          vector_cache=None, seed=42) -> dict
///
/// `longread ensemble`: copies the model directories `models` (any kinds, the same labels,
/// one task each) into the new directory `out`, a model whose probabilities are their weighted
/// mean (`weights`, one per model, divided by their sum; default equal). With `calibrate` (a
/// labelled held-out JSON lines file) each member's temperature is fitted on it first, and
/// with `fit_weights=True` the weights too, kept when they beat equal weights over `folds`
/// folds (`calibration` in the result says how each way scored). With `stack` (the members'
/// labelled training data) they are fitted instead on out-of-fold scores: every member is
/// retrained `folds` times with its recorded settings on stratified folds (seeded by `seed`)
/// and scores the fold it did not see. `vector_cache` lets encoder members reuse chunk
/// vectors. Returns ensemble.json as a dict; `Classifier(out)` loads it.
#[pyfunction]
#[pyo3(signature = (models, out, weights=None, calibrate=None, fit_weights=false, folds=5, stack=None, vector_cache=None, seed=42))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ensemble(
    py: Python<'_>,
    models: Vec<PathBuf>,
    out: PathBuf,
    weights: Option<Vec<f64>>,
    calibrate: Option<PathBuf>,
    fit_weights: bool,
    folds: usize,
    stack: Option<PathBuf>,
    vector_cache: Option<PathBuf>,
    seed: u64,
) -> PyResult<PyObject> {
    let scored = calibrate.is_some() || stack.is_some();
    if fit_weights && (!scored || weights.is_some()) {
        return Err(LongreadError::new_err("fit_weights=True needs calibrate=DEV or stack=TRAIN, and no weights"));
    }
    if calibrate.is_some() && stack.is_some() {
        return Err(LongreadError::new_err("give calibrate=DEV or stack=TRAIN, not both"));
    }
    if vector_cache.is_some() && !scored {
        return Err(LongreadError::new_err("vector_cache needs calibrate=DEV or stack=TRAIN"));
    }
    if folds < 2 {
        return Err(LongreadError::new_err(format!("folds={folds}: at least 2")));
    }
    let weights = weights.unwrap_or_else(|| vec![1.0; models.len()]);
    if weights.len() != models.len() {
        return Err(LongreadError::new_err(format!(
            "{} weights for {} models: give one per model, or none",
            weights.len(),
            models.len()
        )));
    }
    let members: Vec<(PathBuf, f64)> = models.into_iter().zip(weights).collect();
    let cache = vector_cache.as_deref();
    let built = off_gil(py, || match (&calibrate, &stack) {
        (Some(data), _) => build_calibrated_ensemble(&members, &out, data, fit_weights, folds, cache, |_| {})
            .map_err(|e| e.to_string()),
        (None, Some(train)) => {
            let settings = StackSettings { folds, seed, vector_cache: cache };
            build_stacked_ensemble(&members, &out, train, fit_weights, settings, |_, _| {}).map_err(|e| e.to_string())
        }
        (None, None) => build_ensemble(&members, &out).map_err(|e| e.to_string()),
    });
    let spec = built.map_err(|e| ModelLoadError::new_err(format!("building ensemble {}: {e}", out.display())))?;
    from_json(py, &serde_json::to_string(&spec).unwrap_or_default())
}
