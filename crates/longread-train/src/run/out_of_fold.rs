//! `train --cv K`'s out-of-fold predictions: when every fold has run, each training document
//! is classified by the model of the fold that held it out (as `predict` would classify it),
//! giving one prediction per document from a model that did not train on it — scikit-learn's
//! `cross_val_predict`. They are written to OUT/out-of-fold.jsonl, and scored together in
//! cv.json: on small data sets a metric pooled over every document is steadier than the mean
//! of K metrics over a handful each (a fold's macro-F1 jumps with one document of a rare label).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use longread_classifier::decision::label_temperature::probability_scores;
use longread_classifier::evaluate::primary_probabilities;
use longread_classifier::multilabel_eval::score_label_sets;
use longread_classifier::out_of_fold::OUT_OF_FOLD_FILE;
use longread_classifier::prediction::carried;
use longread_classifier::{argmax, Classifier, ClassifierOptions};
use longread_metrics::multilabel::evaluate_multilabel;
use longread_text::multilabel::MultiLabelExample;
use longread_text::Example;
use serde_json::{json, Map, Value};

use crate::error::{Result, TrainError};
use crate::run::spec::TrainSpec;
use crate::run::RunHooks;

/// The pooled metrics of the out-of-fold predictions (`cv.json`'s `out_of_fold`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutOfFold {
    /// Documents classified: every training document.
    pub documents: usize,
    /// Accuracy over every document (a multi-label model's: the subset accuracy, the share
    /// of documents whose predicted set is their true set).
    pub accuracy: f64,
    /// Macro-F1 over every document.
    pub macro_f1: f64,
    /// Micro-F1 over every document and label, for a multi-label model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1: Option<f64>,
    /// ROC-AUC over every document (absent where undefined; a multi-label model's: the mean
    /// over labels with both classes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
    /// Log loss over every document (a multi-label model's: the mean binary cross-entropy
    /// over every document and label).
    pub log_loss: f64,
    /// Expected calibration error over every document (a multi-label model's: of every
    /// document and label's probability as a yes/no forecast).
    pub ece: f64,
    /// The predictions, one JSON line per training document in the file's order.
    pub predictions: PathBuf,
}

/// Classifies the documents `examples[folds[f]]` (gold label indices `gold` into `labels`)
/// with the model kept in `outs[f]`, for every fold f; writes each document's prediction to
/// `spec.out`/[`OUT_OF_FOLD_FILE`] and returns the metrics over all of them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn out_of_fold(
    spec: &TrainSpec,
    examples: &[Example],
    labels: &[String],
    gold: &[usize],
    folds: &[Vec<usize>],
    outs: &[&Path],
    source: &str,
    hooks: &mut dyn RunHooks,
) -> Result<OutOfFold> {
    let (fold_of, probabilities) =
        classify_folds(spec, examples.len(), labels, folds, outs, hooks, |c, f, held_out| {
            let held: Vec<Example> = held_out.iter().map(|&i| examples[i].clone()).collect();
            let name = format!("fold {} of {source}", f + 1);
            let (truth, rows) = primary_probabilities(c, &held, &name, || {})?;
            debug_assert!(truth.iter().zip(held_out).all(|(&t, &i)| t == gold[i]));
            Ok(rows)
        })?;
    let predicted: Vec<usize> = probabilities.iter().map(|row| argmax(row)).collect();
    let scoring = |e: String| TrainError::Run(format!("scoring the out-of-fold predictions: {e}"));
    let report = longread_metrics::evaluate(labels, gold, &predicted).map_err(scoring)?;
    let scores = longread_metrics::scores::score_metrics(labels.len(), gold, &probabilities).map_err(scoring)?;
    let mut lines = String::new();
    for (i, example) in examples.iter().enumerate() {
        let scores: Map<String, Value> =
            labels.iter().zip(&probabilities[i]).map(|(l, &p)| (l.clone(), json!(p))).collect();
        let line = json!({
            "line": example.line,
            "id": example.id,
            "fold": fold_of[i],
            "label": labels[gold[i]],
            "predicted": labels[predicted[i]],
            "scores": scores,
        });
        let _ = writeln!(lines, "{line}");
    }
    let predictions = spec.out.join(OUT_OF_FOLD_FILE);
    longread_model::model_dir::write_file_atomically(&predictions, lines.as_bytes())?;
    Ok(OutOfFold {
        documents: examples.len(),
        accuracy: report.accuracy,
        macro_f1: report.macro_f1,
        micro_f1: None,
        roc_auc: scores.roc_auc,
        log_loss: scores.log_loss,
        ece: scores.ece,
        predictions,
    })
}

/// [`out_of_fold`] for a multi-label model: the documents `examples` (label ids `sets` into
/// `labels`) of each fold scored by its model, every label carried at 0.5 as the fold models
/// decide; each line of the file gives the document's `labels` and `predicted` as lists.
#[allow(clippy::too_many_arguments)]
pub(crate) fn out_of_fold_multilabel(
    spec: &TrainSpec,
    examples: &[MultiLabelExample],
    labels: &[String],
    sets: &[Vec<usize>],
    folds: &[Vec<usize>],
    outs: &[&Path],
    source: &str,
    hooks: &mut dyn RunHooks,
) -> Result<OutOfFold> {
    let (fold_of, probabilities) =
        classify_folds(spec, examples.len(), labels, folds, outs, hooks, |c, f, held_out| {
            let held: Vec<MultiLabelExample> = held_out.iter().map(|&i| examples[i].clone()).collect();
            let name = format!("fold {} of {source}", f + 1);
            Ok(score_label_sets(c, &held, &name, || {})?.probabilities)
        })?;
    let truth: Vec<Vec<bool>> = sets.iter().map(|set| (0..labels.len()).map(|l| set.contains(&l)).collect()).collect();
    let predicted: Vec<Vec<String>> = probabilities.iter().map(|p| carried(labels, p)).collect();
    let flags: Vec<Vec<bool>> =
        predicted.iter().map(|names| labels.iter().map(|l| names.contains(l)).collect()).collect();
    let scoring = |e: String| TrainError::Run(format!("scoring the out-of-fold predictions: {e}"));
    let report = evaluate_multilabel(labels, &truth, &flags).and_then(|r| r.with_scores(&truth, &probabilities));
    let report = report.map_err(scoring)?;
    let (log_loss, ece) = probability_scores(&truth, &probabilities);
    let mut lines = String::new();
    for (i, example) in examples.iter().enumerate() {
        let scores: Map<String, Value> =
            labels.iter().zip(&probabilities[i]).map(|(l, &p)| (l.clone(), json!(p))).collect();
        let gold: Vec<&String> = sets[i].iter().map(|&l| &labels[l]).collect();
        let line = json!({
            "line": example.line,
            "id": example.id,
            "fold": fold_of[i],
            "labels": gold,
            "predicted": predicted[i],
            "scores": scores,
        });
        let _ = writeln!(lines, "{line}");
    }
    let predictions = spec.out.join(OUT_OF_FOLD_FILE);
    longread_model::model_dir::write_file_atomically(&predictions, lines.as_bytes())?;
    Ok(OutOfFold {
        documents: examples.len(),
        accuracy: report.subset_accuracy,
        macro_f1: report.macro_avg.f1,
        micro_f1: Some(report.micro.f1),
        roc_auc: report.roc_auc_macro,
        log_loss,
        ece,
        predictions,
    })
}

/// Each of the `documents` training documents' fold (1-based) and probabilities, those of
/// fold f's held-out documents `folds[f]` from the model kept in `outs[f]` (`score` gives
/// them, one row per held-out document in order).
fn classify_folds(
    spec: &TrainSpec,
    documents: usize,
    labels: &[String],
    folds: &[Vec<usize>],
    outs: &[&Path],
    hooks: &mut dyn RunHooks,
    mut score: impl FnMut(&Classifier, usize, &[usize]) -> longread_model::error::Result<Vec<Vec<f32>>>,
) -> Result<(Vec<usize>, Vec<Vec<f32>>)> {
    hooks.note(&format!(
        "classifying each of the {documents} training documents with the model of the fold that held it out"
    ));
    let mut fold_of = vec![0; documents];
    let mut probabilities: Vec<Vec<f32>> = vec![Vec::new(); documents];
    for (f, (held_out, out)) in folds.iter().zip(outs).enumerate() {
        let classifier = fold_classifier(spec, f, folds.len(), out, labels)?;
        let rows = score(&classifier, f, held_out).map_err(|e| fold_failed(f, out, &e))?;
        if rows.len() != held_out.len() {
            let why = format!("{} of its {} documents were scored", rows.len(), held_out.len());
            return Err(fold_failed(f, out, &why));
        }
        for (&i, row) in held_out.iter().zip(rows) {
            (fold_of[i], probabilities[i]) = (f + 1, row);
        }
    }
    Ok((fold_of, probabilities))
}

/// The model kept in `out`, the run's fold `f` of `k`, ready to classify its held-out
/// documents: on the run's device, with the run's vector cache, its labels checked.
fn fold_classifier(spec: &TrainSpec, f: usize, k: usize, out: &Path, labels: &[String]) -> Result<Classifier> {
    // Ctrl-C between folds: `--resume auto` finds every fold finished and classifies again.
    if crate::interrupt::stop_requested() {
        return Err(TrainError::Interrupted(format!(
            "interrupted while classifying the out-of-fold predictions ({f} of {k} folds done)"
        )));
    }
    let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
    let mut classifier = Classifier::load(out, options).map_err(|e| fold_failed(f, out, &e))?;
    // The run's --vector-cache: a frozen encoder's chunk vectors are not computed again
    // (a fine-tuned fold's encoder has weights of its own, and misses).
    if let Some(cache) = &spec.encoder.vector_cache {
        classifier.set_vector_cache(cache).map_err(|e| fold_failed(f, out, &e))?;
    }
    if classifier.labels() != labels {
        let theirs = format!("its labels {:?} are not the run's {labels:?}", classifier.labels());
        return Err(fold_failed(f, out, &theirs));
    }
    Ok(classifier)
}

/// An error classifying fold `f`'s held-out documents with the model in `out`.
fn fold_failed(f: usize, out: &Path, e: &dyn std::fmt::Display) -> TrainError {
    TrainError::Run(format!("classifying fold {}'s held-out documents with {}: {e}", f + 1, out.display()))
}

/// One line for people about `pooled`.
pub(crate) fn describe(pooled: &OutOfFold) -> String {
    let auc = pooled.roc_auc.map(|a| format!(", ROC-AUC {a:.4}")).unwrap_or_default();
    let scores = match pooled.micro_f1 {
        Some(micro) => format!(
            "micro-F1 {micro:.4}, macro-F1 {:.4}, subset accuracy {:.4}{auc}, binary log loss {:.4}",
            pooled.macro_f1, pooled.accuracy, pooled.log_loss
        ),
        None => format!(
            "macro-F1 {:.4}, accuracy {:.4}{auc}, log loss {:.4}",
            pooled.macro_f1, pooled.accuracy, pooled.log_loss
        ),
    };
    format!(
        "out of fold (all {} documents, each classified by the model that did not train on it): {scores}; \
         predictions in {}",
        pooled.documents,
        pooled.predictions.display()
    )
}
