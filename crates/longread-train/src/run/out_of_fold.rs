//! `train --cv K`'s out-of-fold predictions: when every fold has run, each training document
//! is classified by the model of the fold that held it out (as `predict` would classify it),
//! giving one prediction per document from a model that did not train on it — scikit-learn's
//! `cross_val_predict`. They are written to OUT/out-of-fold.jsonl, and scored together in
//! cv.json: on small data sets a metric pooled over every document is steadier than the mean
//! of K metrics over a handful each (a fold's macro-F1 jumps with one document of a rare label).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use longread_classifier::evaluate::primary_probabilities;
use longread_classifier::out_of_fold::OUT_OF_FOLD_FILE;
use longread_classifier::{argmax, Classifier, ClassifierOptions};
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
    /// Accuracy over every document.
    pub accuracy: f64,
    /// Macro-F1 over every document.
    pub macro_f1: f64,
    /// ROC-AUC over every document (absent where undefined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
    /// Log loss over every document.
    pub log_loss: f64,
    /// Expected calibration error over every document.
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
    hooks.note(&format!(
        "classifying each of the {} training documents with the model of the fold that held it out",
        examples.len()
    ));
    let mut fold_of = vec![0; examples.len()];
    let mut probabilities: Vec<Vec<f32>> = vec![Vec::new(); examples.len()];
    for (f, (held_out, out)) in folds.iter().zip(outs).enumerate() {
        // Ctrl-C between folds: `--resume auto` finds every fold finished and classifies again.
        if crate::interrupt::stop_requested() {
            return Err(TrainError::Interrupted(format!(
                "interrupted while classifying the out-of-fold predictions ({f} of {} folds done)",
                folds.len()
            )));
        }
        let failed = |e: &dyn std::fmt::Display| {
            TrainError::Run(format!("classifying fold {}'s held-out documents with {}: {e}", f + 1, out.display()))
        };
        let options = ClassifierOptions { device: spec.device, ..ClassifierOptions::default() };
        let mut classifier = Classifier::load(out, options).map_err(|e| failed(&e))?;
        // The run's --vector-cache: a frozen encoder's chunk vectors are not computed again
        // (a fine-tuned fold's encoder has weights of its own, and misses).
        if let Some(cache) = &spec.encoder.vector_cache {
            classifier.set_vector_cache(cache).map_err(|e| failed(&e))?;
        }
        if classifier.labels() != labels {
            return Err(failed(&format!("its labels {:?} are not the run's {labels:?}", classifier.labels())));
        }
        let held: Vec<Example> = held_out.iter().map(|&i| examples[i].clone()).collect();
        let name = format!("fold {} of {source}", f + 1);
        let (truth, rows) = primary_probabilities(&classifier, &held, &name, || {}).map_err(|e| failed(&e))?;
        if truth.len() != held.len() {
            return Err(failed(&format!("{} of its {} documents were scored", truth.len(), held.len())));
        }
        for ((&i, row), t) in held_out.iter().zip(rows).zip(truth) {
            debug_assert_eq!(t, gold[i]);
            (fold_of[i], probabilities[i]) = (f + 1, row);
        }
    }
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
        roc_auc: scores.roc_auc,
        log_loss: scores.log_loss,
        ece: scores.ece,
        predictions,
    })
}

/// One line for people about `pooled`.
pub(crate) fn describe(pooled: &OutOfFold) -> String {
    let auc = pooled.roc_auc.map(|a| format!(", ROC-AUC {a:.4}")).unwrap_or_default();
    format!(
        "out of fold (all {} documents, each classified by the model that did not train on it): macro-F1 {:.4}, \
         accuracy {:.4}{auc}, log loss {:.4}; predictions in {}",
        pooled.documents,
        pooled.macro_f1,
        pooled.accuracy,
        pooled.log_loss,
        pooled.predictions.display()
    )
}
