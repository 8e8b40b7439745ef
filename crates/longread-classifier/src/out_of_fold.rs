//! A `train --cv` run's out-of-fold predictions (`OUT/out-of-fold.jsonl`: each training
//! document classified by the model of the fold that held it out), read back to calibrate or
//! tune the decision rule of the final model that the same settings trained on every document
//! (`train --dev-split 0`), which has no held-out documents of its own — as scikit-learn's
//! `CalibratedClassifierCV(ensemble=False)` calibrates a model fitted on all the data with its
//! cross-validated predictions.

use std::path::{Path, PathBuf};

use longread_model::error::{ModelError, Result};
use serde_json::Value;

/// The file of out-of-fold predictions in a `--cv` run's directory.
pub const OUT_OF_FOLD_FILE: &str = "out-of-fold.jsonl";

/// Out-of-fold predictions with their gold labels.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfFold {
    /// The file they came from, for messages and `chosen_by`.
    pub source: String,
    /// Each document's gold label index, in the model's label order.
    pub truth: Vec<usize>,
    /// Each document's probabilities as the fold models gave them, in the model's label order.
    pub probabilities: Vec<Vec<f32>>,
    /// Warnings for people: settings or data in which the model and the `--cv` run differ.
    pub warnings: Vec<String>,
}

/// The out-of-fold predictions at `path` (a `--cv` run's directory, or its out-of-fold.jsonl)
/// for `classifier` ([`read_out_of_fold`] with its labels), with warnings where its recorded
/// training differs from the run's ([`setting_warnings`]).
pub fn out_of_fold_for(classifier: &crate::Classifier, path: &Path) -> Result<OutOfFold> {
    let oof = read_out_of_fold(path, classifier.labels())?;
    Ok(OutOfFold { warnings: setting_warnings(classifier.dir(), path), ..oof })
}

/// Reads the out-of-fold predictions at `path` (a `--cv` run's directory, or its
/// out-of-fold.jsonl) for a model with `labels`: every line must carry a `label` among them
/// and `scores` for exactly these labels. Problems name the file and line. No warnings.
fn read_out_of_fold(path: &Path, labels: &[String]) -> Result<OutOfFold> {
    let (source, rows) = read_rows(path, labels, |value, bad| {
        let Some(gold) = value["label"].as_str() else {
            return Err(bad(match value.get("labels") {
                Some(_) => "\"labels\" lists: a multi-label run's predictions, but the model predicts one label per \
                            document"
                    .into(),
                None => "no \"label\"".into(),
            }));
        };
        labels.iter().position(|l| l == gold).ok_or_else(|| {
            bad(format!(
                "label {gold:?} is not one of the model's labels ({}): another run's predictions?",
                labels.join(", ")
            ))
        })
    })?;
    let (truth, probabilities) = rows.into_iter().unzip();
    Ok(OutOfFold { source, truth, probabilities, warnings: Vec::new() })
}

/// The out-of-fold predictions of a multi-label `--cv` run at `path` (its directory, or its
/// out-of-fold.jsonl) for the multi-label `classifier`: each document's label set (a
/// `"labels"` list of the model's labels) and its probabilities as the model gives them — the
/// fold models' probabilities tempered by the model's calibration, if it has one — ready for
/// [`crate::multilabel_eval::tune_scored`] and [`crate::multilabel_eval::calibrate_scored`];
/// with warnings where the model's recorded training differs from the run's.
pub fn multilabel_out_of_fold_for(
    classifier: &crate::Classifier,
    path: &Path,
) -> Result<(crate::multilabel_eval::ScoredSets, Vec<String>)> {
    if !classifier.multi_label() {
        return Err(ModelError::InvalidInput(format!(
            "{} predicts one label per document: its out-of-fold predictions are read as single-label ones",
            classifier.dir().display()
        )));
    }
    let labels = classifier.labels();
    let (source, rows) = read_rows(path, labels, |value, bad| {
        let Some(gold) = value["labels"].as_array() else {
            return Err(bad(match value.get("label") {
                Some(_) => "a single \"label\": a single-label run's predictions, but the model is multi-label".into(),
                None => "no \"labels\" list".into(),
            }));
        };
        let mut set = vec![false; labels.len()];
        for name in gold {
            let known = name.as_str().and_then(|name| labels.iter().position(|l| l == name));
            let Some(l) = known else {
                return Err(bad(format!(
                    "label {name} is not one of the model's labels ({}): another run's predictions?",
                    labels.join(", ")
                )));
            };
            set[l] = true;
        }
        Ok(set)
    })?;
    let current = crate::decision::Temperature::load(classifier.dir())?;
    let (truth, probabilities): (Vec<Vec<bool>>, Vec<Vec<f32>>) = rows
        .into_iter()
        .map(|(set, row)| match &current {
            Some(t) => (set, t.apply(&row)),
            None => (set, row),
        })
        .unzip();
    let scored = crate::multilabel_eval::ScoredSets { labels: labels.to_vec(), truth, probabilities, source };
    Ok((scored, setting_warnings(classifier.dir(), path)))
}

/// One line of out-of-fold predictions: its gold label(s) and its scores in label order.
type Row<G> = (G, Vec<f32>);

/// The lines of the out-of-fold predictions at `path`, each as its gold label(s) (read by
/// `gold`, given the line and a maker of errors naming it) and its `scores` in the order of
/// `labels`; with the file's name.
fn read_rows<G>(
    path: &Path,
    labels: &[String],
    gold: impl Fn(&Value, &dyn Fn(String) -> ModelError) -> Result<G>,
) -> Result<(String, Vec<Row<G>>)> {
    let (_, file) = run_and_file(path);
    let text = std::fs::read_to_string(&file).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ModelError::InvalidInput(format!(
            "{}: no out-of-fold predictions there (a `train --cv K` run writes {OUT_OF_FOLD_FILE} in its --out)",
            file.display()
        )),
        _ => ModelError::Io { path: file.clone(), source },
    })?;
    let source = file.display().to_string();
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |why: String| ModelError::InvalidInput(format!("{source} line {}: {why}", i + 1));
        let value: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let gold = gold(&value, &bad)?;
        let scores = value["scores"].as_object().ok_or_else(|| bad("no \"scores\"".into()))?;
        if scores.len() != labels.len() || !labels.iter().all(|l| scores.contains_key(l)) {
            let theirs: Vec<&str> = scores.keys().map(String::as_str).collect();
            return Err(bad(format!(
                "scores for {} where the model has {}: another run's predictions?",
                theirs.join(", "),
                labels.join(", ")
            )));
        }
        let row = labels
            .iter()
            .map(|l| match scores[l].as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(p as f32),
                _ => Err(bad(format!("the score of {l:?} is not a probability: {}", scores[l]))),
            })
            .collect::<Result<Vec<f32>>>()?;
        rows.push((gold, row));
    }
    if rows.is_empty() {
        return Err(ModelError::InvalidInput(format!("{source}: no predictions")));
    }
    Ok((source, rows))
}

/// The recorded training settings (training_args.json) that make a model what it is: a
/// final model calibrated on a `--cv` run's predictions should share them with that run.
/// Epochs may differ (the folds chose them), and so may what only concerns the run itself.
/// (`model` is compared by its last path component: the two runs may name one directory
/// from different places.)
const SETTINGS_THAT_MATTER: [&str; 19] = [
    "model",
    "arch",
    "labels",
    "class_weights",
    "batch_size",
    "grad_accum",
    "lr",
    "head_lr",
    "weight_decay",
    "schedule",
    "freeze_base",
    "freeze_bottom",
    "unfreeze",
    "layer_lr_decay",
    "train_embeddings",
    "task",
    "wide_bow",
    "han",
    "bow",
];

/// Warnings for people when the model in `model_dir` was trained with other settings or data
/// than the `--cv` run whose out-of-fold predictions are at `path` (both as their
/// training_args.json record them; nothing to say where either has none).
fn setting_warnings(model_dir: &Path, path: &Path) -> Vec<String> {
    let (run_dir, _) = run_and_file(path);
    let run_dir = run_dir.as_path();
    let read = |dir: &Path| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(dir.join("training_args.json")).ok()?).ok()
    };
    let (Some(cv), Some(model)) = (read(run_dir), read(model_dir)) else { return Vec::new() };
    let mut warnings: Vec<String> = SETTINGS_THAT_MATTER
        .iter()
        .filter(|&&key| match key {
            "model" => last_component(&cv[key]) != last_component(&model[key]),
            _ => cv[key] != model[key],
        })
        .map(|key| {
            format!(
                "warning: {key}: {} trained with {}, the --cv run with {}",
                model_dir.display(),
                model[key],
                cv[key]
            )
        })
        .collect();
    let data = |v: &Value| v["data_fingerprints"]["train"].clone();
    if data(&cv) != data(&model) {
        warnings.push(format!(
            "warning: {} was trained on other data than the --cv run ({} against {})",
            model_dir.display(),
            model["train"],
            cv["train"]
        ));
    }
    if cv["cv"].is_null() {
        warnings.push(format!("warning: {} is not a --cv run", run_dir.display()));
    }
    warnings
}

/// The `--cv` run's directory and its out-of-fold file, from `path`: either of the two.
fn run_and_file(path: &Path) -> (PathBuf, PathBuf) {
    match path.is_dir() {
        true => (path.to_owned(), path.join(OUT_OF_FOLD_FILE)),
        false => (path.parent().unwrap_or(Path::new(".")).to_owned(), path.to_owned()),
    }
}

/// The last component of a path recorded as a JSON string (a hub id stays whole).
fn last_component(value: &Value) -> Option<String> {
    let path = Path::new(value.as_str()?);
    Some(path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["rain".into(), "prices".into()]
    }

    #[test]
    fn reads_a_runs_directory_or_its_file_in_the_models_label_order() {
        let dir = tempfile::tempdir().unwrap();
        let lines = "{\"line\":1,\"id\":\"a\",\"fold\":1,\"label\":\"prices\",\"predicted\":\"prices\",\"scores\":{\"prices\":0.75,\"rain\":0.25}}\n\n\
                     {\"line\":2,\"id\":\"b\",\"fold\":2,\"label\":\"rain\",\"predicted\":\"prices\",\"scores\":{\"rain\":0.5,\"prices\":0.5}}\n";
        std::fs::write(dir.path().join(OUT_OF_FOLD_FILE), lines).unwrap();
        let read = read_out_of_fold(dir.path(), &labels()).unwrap();
        assert_eq!(read.truth, [1, 0]);
        assert_eq!(read.probabilities, [vec![0.25, 0.75], vec![0.5, 0.5]]);
        assert_eq!(read_out_of_fold(&dir.path().join(OUT_OF_FOLD_FILE), &labels()).unwrap(), read);
    }

    #[test]
    fn refuses_what_is_not_this_models_predictions_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_out_of_fold(dir.path(), &labels()).unwrap_err().to_string();
        assert!(missing.contains("a `train --cv K` run writes out-of-fold.jsonl"), "{missing}");
        let good = r#"{"label":"rain","scores":{"rain":0.9,"prices":0.1}}"#;
        for (bad, why) in [
            (
                r#"{"label":"snow","scores":{"rain":0.9,"prices":0.1}}"#,
                "label \"snow\" is not one of the model's labels",
            ),
            (
                r#"{"label":"rain","scores":{"rain":0.9,"snow":0.1}}"#,
                "scores for rain, snow where the model has rain, prices",
            ),
            (
                r#"{"label":"rain","scores":{"rain":1.5,"prices":0.1}}"#,
                "the score of \"rain\" is not a probability: 1.5",
            ),
            (r#"{"label":"rain"}"#, "no \"scores\""),
            ("not json", "line 2: expected"),
        ] {
            std::fs::write(dir.path().join(OUT_OF_FOLD_FILE), format!("{good}\n{bad}\n")).unwrap();
            let error = read_out_of_fold(dir.path(), &labels()).unwrap_err().to_string();
            assert!(error.contains(why) && error.contains("line 2"), "{error}");
        }
        std::fs::write(dir.path().join(OUT_OF_FOLD_FILE), "\n").unwrap();
        assert!(read_out_of_fold(dir.path(), &labels()).unwrap_err().to_string().contains("no predictions"));
    }
}
