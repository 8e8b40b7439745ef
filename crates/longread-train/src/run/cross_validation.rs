//! `train --cv K` for the trained-by-gradient models: K runs on stratified folds of the
//! training data (a multi-label model's: by iterative stratification), each holding one fold
//! out as its dev set (OUT/fold-1 … OUT/fold-K, each a complete run directory with its best
//! model), and OUT/cv.json with each fold's best dev metric and their mean ± std — a dev
//! estimate for small data sets, where a 10% dev split is a handful of documents — and
//! OUT/out-of-fold.jsonl, each document classified by the model of the fold that held it out,
//! scored together in cv.json. OUT/training_args.json records the settings; a run stopped
//! part-way (Ctrl-C, a kill) continues with `--resume auto`: finished folds are read back, the
//! fold in progress resumes from its checkpoint, the rest start.

use std::io::Read;
use std::path::Path;

use longread_metrics::folds::{iterative_stratified_folds, mean_std, stratified_folds};
use longread_text::multilabel::{resolve_multilabel, MultiLabelExample};
use longread_text::{resolve_labels, Example};

use crate::error::{Result, TrainError};
use crate::run::data::{read_examples, read_multilabel_examples};
use crate::run::out_of_fold::{describe, out_of_fold, out_of_fold_multilabel, OutOfFold};
use crate::run::settings::{recorded_settings, MAY_CHANGE_ON_RESUME};
use crate::run::spec::{name_value, TrainSpec};
use crate::run::start::training_labels;
use crate::run::{check_resumed_run, train_run_reading, RunHooks, RunOutput, RunSummary, CHECKPOINT};

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
    /// The epoch whose model the fold kept: the best by the run's --metric, or the last with
    /// --keep last.
    pub best_epoch: usize,
    /// Dev accuracy and macro-F1 at that epoch.
    pub accuracy: f64,
    /// See `accuracy`.
    pub macro_f1: f64,
    /// Dev micro-F1 at that epoch, for a multi-label model (whose `accuracy` is the subset
    /// accuracy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1: Option<f64>,
    /// Dev ROC-AUC at that epoch (absent where undefined, or in logs from before it was kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
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
    /// Mean and standard deviation of the folds' dev micro-F1, for a multi-label model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1_mean: Option<f64>,
    /// See `micro_f1_mean`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1_std: Option<f64>,
    /// Mean and standard deviation of the folds' dev ROC-AUC at their kept epochs, when every
    /// fold has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_mean: Option<f64>,
    /// See `roc_auc_mean`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_std: Option<f64>,
    /// Every training document classified by the model of the fold that held it out, scored
    /// together ([`crate::run::out_of_fold`]).
    pub out_of_fold: OutOfFold,
}

/// Runs `spec` once per fold of its training data (K = `spec.cv`).
pub(crate) fn run(
    spec: &TrainSpec,
    front: &serde_json::Map<String, serde_json::Value>,
    hooks: &mut dyn RunHooks,
) -> Result<RunSummary> {
    let k = spec.cv.unwrap_or_default();
    let resuming = check(spec, k)?;
    let labels = training_labels(spec)?;
    let (gold, source) = Gold::read(spec, &labels, k)?;
    let records = gold.records(&spec.train, &source)?;
    let settings = recorded_settings(spec, front.clone())?;
    if resuming {
        check_resumed_run(&spec.out, &settings, &MAY_CHANGE_ON_RESUME)?;
    } else {
        RunOutput::create(&spec.out, &settings)?;
    }
    let data_dir = spec.out.join("cv-data");
    std::fs::create_dir_all(&data_dir).map_err(|source| TrainError::Io { path: data_dir.clone(), source })?;
    let mut results = Vec::with_capacity(k);
    let folds = gold.folds(k, spec.seed);
    let documents = records.len();
    for (f, held_out) in folds.iter().enumerate() {
        let fold = f + 1;
        let fold_out = spec.out.join(format!("fold-{fold}"));
        let (train_path, dev_path) =
            (data_dir.join(format!("fold-{fold}-train.jsonl")), data_dir.join(format!("fold-{fold}-dev.jsonl")));
        let state = fold_state(&fold_out)?;
        hooks.note(&format!(
            "fold {fold} of {k}: {} documents held out as dev{}",
            held_out.len(),
            match state {
                FoldState::Finished(_) => ", finished before",
                FoldState::Interrupted => ", resumed from its checkpoint",
                FoldState::New => "",
            }
        ));
        let pick = |keep: &dyn Fn(usize) -> bool| -> String {
            records.iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, record)| format!("{record}\n")).collect()
        };
        write_fold_data(&train_path, &pick(&|i| held_out.binary_search(&i).is_err()), resuming)?;
        write_fold_data(&dev_path, &pick(&|i| held_out.binary_search(&i).is_ok()), resuming)?;
        let best = match state {
            FoldState::Finished(best) => best,
            FoldState::Interrupted | FoldState::New => {
                let mut fold_spec = spec.clone();
                fold_spec.cv = None;
                fold_spec.train = train_path;
                fold_spec.dev = Some(dev_path);
                fold_spec.out = fold_out.clone();
                if let Gold::Multi { .. } = gold {
                    // Every fold's model gets the run's labels, those no document of its
                    // training part carries included, so that the folds' predictions line up;
                    // the fold files give each document's labels as a list.
                    if fold_spec.labels.is_empty() && labels.len() >= 2 {
                        fold_spec.labels = labels.clone();
                    }
                    fold_spec.multi_label = true;
                    fold_spec.label_layout =
                        crate::run::LabelLayoutSpec { label_separator: ";".into(), label_columns: Vec::new() };
                }
                fold_spec.training.resume = matches!(state, FoldState::Interrupted).then(|| "auto".to_string());
                // The fold's own data are files: the whole run's kept inputs stay kept.
                train_run_reading(&mut fold_spec, front.clone(), hooks).map_err(|e| match e {
                    TrainError::Interrupted(why) => TrainError::Interrupted(format!("fold {fold} of {k}: {why}")),
                    other => other,
                })?;
                // The whole run's best, epochs before an interruption included (a fold resumed
                // from its last epoch's checkpoint runs none).
                best_logged(&fold_out)?.ok_or_else(|| TrainError::Run(format!("fold {fold} logged no best epoch")))?
            }
        };
        results.push(FoldResult {
            fold,
            out: fold_out,
            train_documents: documents - held_out.len(),
            dev_documents: held_out.len(),
            best_epoch: best.epoch,
            accuracy: best.accuracy,
            macro_f1: best.macro_f1,
            micro_f1: best.micro_f1,
            roc_auc: best.roc_auc,
        });
    }
    let (accuracy_mean, accuracy_std) = mean_std(&results.iter().map(|r| r.accuracy).collect::<Vec<_>>());
    let (macro_f1_mean, macro_f1_std) = mean_std(&results.iter().map(|r| r.macro_f1).collect::<Vec<_>>());
    let aucs: Option<Vec<f64>> = results.iter().map(|r| r.roc_auc).collect();
    let (roc_auc_mean, roc_auc_std) = match aucs.map(|a| mean_std(&a)) {
        Some((mean, std)) => (Some(mean), Some(std)),
        None => (None, None),
    };
    let auc_words = match (roc_auc_mean, roc_auc_std) {
        (Some(mean), Some(std)) => format!(", ROC-AUC {mean:.4} ± {std:.4}"),
        _ => String::new(),
    };
    let outs: Vec<&Path> = results.iter().map(|r| r.out.as_path()).collect();
    let micro: Option<Vec<f64>> = results.iter().map(|r| r.micro_f1).collect();
    let (micro_f1_mean, micro_f1_std) = match micro.map(|m| mean_std(&m)) {
        Some((mean, std)) => (Some(mean), Some(std)),
        None => (None, None),
    };
    let pooled = match &gold {
        Gold::Single { examples, ids } => out_of_fold(spec, examples, &labels, ids, &folds, &outs, &source, hooks)?,
        Gold::Multi { examples, sets } => {
            out_of_fold_multilabel(spec, examples, &labels, sets, &folds, &outs, &source, hooks)?
        }
    };
    let cv = CvSummary {
        folds: k,
        out_of_fold: pooled,
        results,
        accuracy_mean,
        accuracy_std,
        macro_f1_mean,
        macro_f1_std,
        micro_f1_mean,
        micro_f1_std,
        roc_auc_mean,
        roc_auc_std,
    };
    let words = match (micro_f1_mean, micro_f1_std) {
        (Some(micro), Some(std)) => format!(
            "dev micro-F1 {micro:.4} ± {std:.4}, macro-F1 {macro_f1_mean:.4} ± {macro_f1_std:.4}, subset accuracy \
             {accuracy_mean:.4} ± {accuracy_std:.4}"
        ),
        _ => format!(
            "dev macro-F1 {macro_f1_mean:.4} ± {macro_f1_std:.4}, accuracy {accuracy_mean:.4} ± {accuracy_std:.4}"
        ),
    };
    hooks.note(&format!("{k}-fold cross-validation: {words}{auc_words}; folds in {}", spec.out.display()));
    hooks.note(&describe(&cv.out_of_fold));
    let json = serde_json::to_string_pretty(&cv).map_err(|e| TrainError::Run(format!("cv.json: {e}")))? + "\n";
    write(&spec.out.join("cv.json"), &json)?;
    Ok(RunSummary {
        logs: Vec::new(),
        stopped_for_resume: false,
        bow: None,
        cv: Some(cv),
        threshold: None,
        calibration: None,
    })
}

/// The training documents' gold labels, by which the folds are drawn.
enum Gold {
    /// One label each: stratified folds.
    Single { examples: Vec<Example>, ids: Vec<usize> },
    /// A set of labels each: folds by iterative stratification.
    Multi { examples: Vec<MultiLabelExample>, sets: Vec<Vec<usize>> },
}

impl Gold {
    /// The training data of `spec` labelled with `labels`, checked to make `k` folds; with
    /// the data's name.
    fn read(spec: &TrainSpec, labels: &[String], k: usize) -> Result<(Self, String)> {
        if spec.is_multi_label() {
            let (examples, source) = read_multilabel_examples(&spec.train, &spec.label_layout.layout())?;
            let (sets, _) = resolve_multilabel(&examples, labels, &source, false)?;
            if examples.len() < 2 * k {
                return Err(TrainError::Run(format!(
                    "--cv {k}: {} training documents are too few for {k} folds of at least 2",
                    examples.len()
                )));
            }
            return Ok((Self::Multi { examples, sets }, source));
        }
        let column = match spec.encoder.task.first() {
            Some(task) => name_value("--task", task)?.1.to_string(),
            None => "label".to_string(),
        };
        let (examples, source) = read_examples(&spec.train, std::slice::from_ref(&column))?;
        let ids = resolve_labels(&examples, labels, &source)?;
        let smallest = (0..labels.len()).map(|c| ids.iter().filter(|&&l| l == c).count()).filter(|&n| n > 0).min();
        if smallest.unwrap_or(0) < k {
            return Err(TrainError::Run(format!(
                "--cv {k}: every label needs at least {k} training documents (the rarest has {})",
                smallest.unwrap_or(0)
            )));
        }
        Ok((Self::Single { examples, ids }, source))
    }

    /// Each document as a line of the folds' JSON-lines files: a single-label document's
    /// own record (a CSV/TSV row as a JSON object), a multi-label one's id, text and
    /// `"labels"` list (whatever layout the data gave them in). `path` is the data, `source`
    /// its name.
    fn records(&self, path: &Path, source: &str) -> Result<Vec<String>> {
        match self {
            Self::Single { examples, .. } => {
                let lines = source_lines(path, source)?;
                if examples.last().is_some_and(|e| e.line > lines.len()) {
                    return Err(TrainError::Run(format!(
                        "{source} changed while it was read: run again on a file that stays put"
                    )));
                }
                let own = |e: &Example| lines[e.line - 1].trim_start_matches(longread_text::jsonl::BOM).to_owned();
                Ok(examples.iter().map(own).collect())
            }
            Self::Multi { examples, .. } => Ok(examples
                .iter()
                .map(|e| serde_json::json!({ "id": e.id, "text": e.text, "labels": e.labels }).to_string())
                .collect()),
        }
    }

    /// `k` folds of document indices, seeded: stratified by label, or for label sets by
    /// iterative stratification (Sechidis et al. 2011), so that rare labels spread over the
    /// folds in proportion.
    fn folds(&self, k: usize, seed: u64) -> Vec<Vec<usize>> {
        match self {
            Self::Single { ids, .. } => stratified_folds(ids, k, seed),
            Self::Multi { sets, .. } => iterative_stratified_folds(sets, k, seed),
        }
    }
}

/// Refuses what cross-validation cannot combine with; true when `spec` resumes a run.
fn check(spec: &TrainSpec, k: usize) -> Result<bool> {
    let refuse = |m: &str| Err(TrainError::Run(m.to_string()));
    if k < 2 {
        return refuse("--cv needs at least 2 folds");
    }
    if spec.dev.is_some() || spec.given.iter().any(|g| g == "dev_split") {
        return refuse("--cv holds each fold out as the dev set in turn: drop --dev and --dev-split");
    }
    if spec.training.stop_after_epoch.is_some() {
        return refuse("--cv runs every fold to its end: drop --stop-after-epoch (Ctrl-C stops a --cv run resumably)");
    }
    match spec.training.resume.as_deref() {
        None if spec.out.exists() => Err(TrainError::Run(format!(
            "{} already exists; choose another --out, or continue its --cv run with --resume auto",
            spec.out.display()
        ))),
        None => Ok(false),
        Some("auto") if spec.out.join("training_args.json").is_file() => Ok(true),
        Some("auto") => Err(TrainError::Run(format!(
            "nothing to resume: {} holds no --cv run (no training_args.json; runs of longread before 2026-11-25 \
             cannot be resumed)",
            spec.out.display()
        ))),
        Some(_) => refuse("--cv runs resume with --resume auto (each fold from its own checkpoint), not a checkpoint"),
    }
}

/// A fold's best epoch and its dev metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Best {
    epoch: usize,
    accuracy: f64,
    macro_f1: f64,
    micro_f1: Option<f64>,
    roc_auc: Option<f64>,
}

/// Where a fold's run stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FoldState {
    /// Not started, or killed before it saved anything (its directory is removed).
    New,
    /// Stopped with a checkpoint to resume.
    Interrupted,
    /// Done: its best epoch.
    Finished(Best),
}

/// The state of the fold run in `out`.
fn fold_state(out: &Path) -> Result<FoldState> {
    if !out.exists() {
        return Ok(FoldState::New);
    }
    if out.join(CHECKPOINT).join("trainer_state.json").is_file() {
        return Ok(FoldState::Interrupted);
    }
    if let Some(best) = best_logged(out)? {
        return Ok(FoldState::Finished(best));
    }
    if out.join("model.safetensors").exists() {
        return Err(TrainError::Run(format!(
            "{}: a model without a checkpoint or logged epochs; move it away and resume again",
            out.display()
        )));
    }
    // Killed before its first checkpoint: only its settings were written.
    std::fs::remove_dir_all(out).map_err(|source| TrainError::Io { path: out.to_owned(), source })?;
    Ok(FoldState::New)
}

/// The last epoch whose model was kept (marked `saved`) in `out/metrics.jsonl`, if any.
fn best_logged(out: &Path) -> Result<Option<Best>> {
    let path = out.join("metrics.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TrainError::Io { path, source }),
    };
    let mut best = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let log: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| TrainError::Run(format!("{} line {}: {e}", path.display(), i + 1)))?;
        // The epoch whose model the fold kept (logs before `saved` existed: the best one).
        let kept = if log.get("saved").is_some() { &log["saved"] } else { &log["best"] };
        if kept == true {
            let (epoch, accuracy, macro_f1) =
                (log["epoch"].as_u64(), log["dev"]["accuracy"].as_f64(), log["dev"]["macro_f1"].as_f64());
            let (Some(epoch), Some(accuracy), Some(macro_f1)) = (epoch, accuracy, macro_f1) else {
                return Err(TrainError::Run(format!("{} line {}: not an epoch's log", path.display(), i + 1)));
            };
            let (roc_auc, micro_f1) = (log["dev"]["roc_auc"].as_f64(), log["dev"]["micro_f1"].as_f64());
            best = Some(Best { epoch: epoch as usize, accuracy, macro_f1, micro_f1, roc_auc });
        }
    }
    Ok(best)
}

/// Writes a fold's data, or on a resumed run checks that it is what the run trained on.
/// The training data's lines as the folds' JSON lines copy them, by 1-based line number: a
/// JSON-lines file's own lines, or each row of a CSV/TSV file as a JSON line at the line it
/// starts on.
fn source_lines(path: &Path, source: &str) -> Result<Vec<String>> {
    let io = |source| TrainError::Io { path: path.to_owned(), source };
    let (mut file, _) = crate::run::data::open_data(path)?;
    if longread_text::delimited::delimiter_of(source).is_none() {
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        return Ok(text.lines().map(str::to_owned).collect());
    }
    let mut lines = Vec::new();
    for record in longread_text::read_records(file, source)? {
        lines.resize(record.line, String::new());
        let mut object = serde_json::Map::new();
        object.insert("text".into(), record.text.into());
        object.extend(record.fields);
        lines[record.line - 1] = serde_json::Value::Object(object).to_string();
    }
    Ok(lines)
}

fn write_fold_data(path: &Path, text: &str, resuming: bool) -> Result<()> {
    if resuming && path.is_file() {
        let saved = std::fs::read_to_string(path).map_err(|source| TrainError::Io { path: path.to_owned(), source })?;
        if saved != text {
            return Err(TrainError::Run(format!(
                "--resume: {} differs from the fold this command draws; the training data or --seed changed",
                path.display()
            )));
        }
        return Ok(());
    }
    write(path, text)
}

/// Writes a file atomically.
fn write(path: &Path, text: &str) -> Result<()> {
    Ok(longread_model::model_dir::write_file_atomically(path, text.as_bytes())?)
}
