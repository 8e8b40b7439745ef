//! `train --cv K` for the trained-by-gradient models: K runs on stratified folds of the
//! training data, each holding one fold out as its dev set (OUT/fold-1 … OUT/fold-K, each a
//! complete run directory with its best model), and OUT/cv.json with each fold's best dev
//! metric and their mean ± std — a dev estimate for small data sets, where a 10% dev split is
//! a handful of documents.

use std::path::Path;

use longread_metrics::folds::{mean_std, stratified_folds};
use longread_text::resolve_labels;

use crate::error::{Result, TrainError};
use crate::run::data::read_examples;
use crate::run::spec::{name_value, TrainSpec};
use crate::run::start::training_labels;
use crate::run::{train_run, RunHooks, RunSummary};
use crate::trainer::EpochLog;

/// One fold's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FoldResult {
    /// 1-based fold.
    pub fold: usize,
    /// Its run directory.
    pub out: std::path::PathBuf,
    /// Training and held-out documents.
    pub train_documents: usize,
    /// Held-out (dev) documents.
    pub dev_documents: usize,
    /// The best epoch (by the run's --metric).
    pub best_epoch: usize,
    /// Dev accuracy and macro-F1 at the best epoch.
    pub accuracy: f64,
    /// See `accuracy`.
    pub macro_f1: f64,
}

/// The folds and their summary (`OUT/cv.json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CvSummary {
    /// Number of folds.
    pub folds: usize,
    /// Every fold's result.
    pub results: Vec<FoldResult>,
    /// Mean and standard deviation of the folds' best dev accuracy.
    pub accuracy_mean: f64,
    /// See `accuracy_mean`.
    pub accuracy_std: f64,
    /// Mean and standard deviation of the folds' best dev macro-F1.
    pub macro_f1_mean: f64,
    /// See `macro_f1_mean`.
    pub macro_f1_std: f64,
}

/// Runs `spec` once per fold of its training data (K = `spec.cv`).
pub(crate) fn run(
    spec: &TrainSpec,
    front: &serde_json::Map<String, serde_json::Value>,
    hooks: &mut dyn RunHooks,
) -> Result<RunSummary> {
    let k = spec.cv.unwrap_or_default();
    check(spec, k)?;
    let column = match spec.task.first() {
        Some(task) => name_value("--task", task)?.1.to_string(),
        None => "label".to_string(),
    };
    let labels = training_labels(spec)?;
    let (examples, source) = read_examples(&spec.train, std::slice::from_ref(&column))?;
    let ids = resolve_labels(&examples, &labels, &source)?;
    let smallest = (0..labels.len()).map(|c| ids.iter().filter(|&&l| l == c).count()).filter(|&n| n > 0).min();
    if smallest.unwrap_or(0) < k {
        return Err(TrainError::Run(format!(
            "--cv {k}: every label needs at least {k} training documents (the rarest has {})",
            smallest.unwrap_or(0)
        )));
    }
    let text =
        std::fs::read_to_string(&spec.train).map_err(|source| TrainError::Io { path: spec.train.clone(), source })?;
    let lines: Vec<&str> = text.lines().collect();
    std::fs::create_dir_all(&spec.out).map_err(|source| TrainError::Io { path: spec.out.clone(), source })?;
    let data_dir = spec.out.join("cv-data");
    std::fs::create_dir_all(&data_dir).map_err(|source| TrainError::Io { path: data_dir.clone(), source })?;
    let mut results = Vec::with_capacity(k);
    for (f, held_out) in stratified_folds(&ids, k, spec.seed).iter().enumerate() {
        let fold = f + 1;
        hooks.note(&format!("fold {fold} of {k}: {} documents held out as dev", held_out.len()));
        let (train_path, dev_path) =
            (data_dir.join(format!("fold-{fold}-train.jsonl")), data_dir.join(format!("fold-{fold}-dev.jsonl")));
        let pick = |keep: &dyn Fn(usize) -> bool| -> String {
            examples
                .iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .map(|(_, e)| format!("{}\n", lines[e.line - 1]))
                .collect()
        };
        write(&train_path, &pick(&|i| held_out.binary_search(&i).is_err()))?;
        write(&dev_path, &pick(&|i| held_out.binary_search(&i).is_ok()))?;
        let mut fold_spec = spec.clone();
        fold_spec.cv = None;
        fold_spec.train = train_path;
        fold_spec.dev = Some(dev_path);
        fold_spec.out = spec.out.join(format!("fold-{fold}"));
        let summary = train_run(&mut fold_spec, front.clone(), hooks).map_err(|e| match e {
            TrainError::Interrupted(_) => TrainError::Interrupted(format!(
                "interrupted in fold {fold} of {k}: a --cv run cannot be resumed; run it again with a new --out"
            )),
            other => other,
        })?;
        let best = best_of(&summary.logs).ok_or_else(|| TrainError::Run(format!("fold {fold} ran no epoch")))?;
        results.push(FoldResult {
            fold,
            out: fold_spec.out.clone(),
            train_documents: examples.len() - held_out.len(),
            dev_documents: held_out.len(),
            best_epoch: best.epoch,
            accuracy: best.dev.accuracy,
            macro_f1: best.dev.macro_f1,
        });
    }
    let (accuracy_mean, accuracy_std) = mean_std(&results.iter().map(|r| r.accuracy).collect::<Vec<_>>());
    let (macro_f1_mean, macro_f1_std) = mean_std(&results.iter().map(|r| r.macro_f1).collect::<Vec<_>>());
    let cv = CvSummary { folds: k, results, accuracy_mean, accuracy_std, macro_f1_mean, macro_f1_std };
    hooks.note(&format!(
        "{k}-fold cross-validation: dev macro-F1 {macro_f1_mean:.4} ± {macro_f1_std:.4}, accuracy {accuracy_mean:.4} ± \
         {accuracy_std:.4}; folds in {}",
        spec.out.display()
    ));
    let json = serde_json::to_string_pretty(&cv).map_err(|e| TrainError::Run(format!("cv.json: {e}")))? + "\n";
    write(&spec.out.join("cv.json"), &json)?;
    Ok(RunSummary { logs: Vec::new(), stopped_for_resume: false, bow: None, cv: Some(cv) })
}

/// Refuses what cross-validation cannot combine with.
fn check(spec: &TrainSpec, k: usize) -> Result<()> {
    let refuse = |m: &str| Err(TrainError::Run(m.to_string()));
    if k < 2 {
        return refuse("--cv needs at least 2 folds");
    }
    if spec.dev.is_some() || spec.given.iter().any(|g| g == "dev_split") {
        return refuse("--cv holds each fold out as the dev set in turn: drop --dev and --dev-split");
    }
    if spec.resume.is_some() {
        return refuse("--cv runs cannot be resumed; resume a fold's run (OUT/fold-N) with --resume auto instead");
    }
    if spec.train.as_os_str() == "-" {
        return refuse("--cv reads the training data twice: give a file, not standard input");
    }
    if spec.out.exists() {
        return Err(TrainError::Run(format!("{} already exists", spec.out.display())));
    }
    Ok(())
}

/// The best epoch of a run.
fn best_of(logs: &[EpochLog]) -> Option<&EpochLog> {
    logs.iter().rfind(|l| l.best)
}

/// Writes a file atomically.
fn write(path: &Path, text: &str) -> Result<()> {
    Ok(longread_model::model_dir::write_file_atomically(path, text.as_bytes())?)
}
