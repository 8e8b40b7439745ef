//! The model a run starts from: a checkpoint being resumed, a classifier made by `init`, or a
//! new classifier of `--arch` built on a plain encoder.

use std::path::Path;

use candle_core::Device;
use longread_model::hierarchical::{is_classifier_dir, HierarchicalClassifier, LongreadSection, DEFAULT_TASK};
use longread_text::labels_from_column;

use crate::error::{Result, TrainError};
use crate::run::data::{multilabel_training_labels, read_examples, read_multilabel_examples};
use crate::run::init::checked_label_names;
use crate::run::spec::{name_value, sequence_section, Arch, TrainSpec};

/// Loads `source` as a trainable classifier, or builds one on it when it is a plain encoder.
pub fn starting_model(spec: &TrainSpec, source: &Path, device: &Device) -> Result<HierarchicalClassifier> {
    if is_classifier_dir(source)? {
        let model = HierarchicalClassifier::load(source, true, device)?;
        let arch = Arch::of(&model.config().longread);
        if let Some(wanted) = spec.arch.filter(|&a| a != arch) {
            return Err(TrainError::Run(format!(
                "--arch {} does not match the model in {}, which is {}; give a plain encoder as --model to \
                 build a new {} classifier",
                wanted.name(),
                source.display(),
                arch.name(),
                wanted.name()
            )));
        }
        let given = if spec.labels.is_empty() { Vec::new() } else { checked_label_names(&spec.labels)? };
        if !given.is_empty() && given != model.labels() {
            return Err(TrainError::Run(format!(
                "--labels {} differs from the labels of the model in {} ({})",
                given.join(","),
                source.display(),
                model.labels().join(",")
            )));
        }
        if spec.is_multi_label() && !model.is_multi_label(0) {
            return Err(TrainError::Run(format!(
                "--multi-label: the model in {} predicts one label per document; make a multi-label one with \
                 `longread init --multi-label`, or give a plain encoder as --model",
                source.display()
            )));
        }
        return Ok(model);
    }
    let arch = spec.arch.unwrap_or(Arch::Hierarchical);
    let checkpoint = longread_model::Checkpoint::open(source)?;
    let section = match arch {
        Arch::Hierarchical => LongreadSection::default(),
        Arch::Sequence => sequence_section(&checkpoint.config, 512),
        Arch::Han | Arch::Bow => {
            return Err(TrainError::Run(format!(
                "--arch {} is trained from scratch and not built on --model",
                arch.name()
            )))
        }
    };
    let section = LongreadSection { multi_label: spec.is_multi_label(), ..section };
    let labels = training_labels(spec)?;
    Ok(HierarchicalClassifier::init(source, labels, section, spec.seed, device)?)
}

/// The labels of a new classifier: --labels, else those of the primary task (the first
/// --task's column, else "label") found in the training data, sorted.
pub fn training_labels(spec: &TrainSpec) -> Result<Vec<String>> {
    if !spec.labels.is_empty() {
        return checked_label_names(&spec.labels);
    }
    // A model made by `init --labels` (or trained) knows its labels: integer labels in the data
    // are ids into them, as when training that model without --cv.
    if let Some(labels) = spec.model.as_deref().map(model_labels).transpose()?.flatten() {
        return Ok(labels);
    }
    if spec.is_multi_label() {
        let layout = spec.label_layout.layout();
        let (examples, source) = read_multilabel_examples(&spec.train, &layout)?;
        return multilabel_training_labels(spec, &layout, &examples, &source);
    }
    let column = match spec.encoder.task.first() {
        Some(task) => name_value("--task", task)?.1.to_string(),
        None => DEFAULT_TASK.to_string(),
    };
    let (examples, source) = read_examples(&spec.train, std::slice::from_ref(&column))?;
    let labels = labels_from_column(&examples, 0, &source)?;
    if labels.len() < 2 {
        return Err(TrainError::Run(format!(
            "column \"{column}\" of {source} has fewer than 2 distinct labels ({labels:?}); a classifier needs 2"
        )));
    }
    Ok(labels)
}

/// The primary task's labels of a longread classifier directory (config.json `id2label`, in
/// id order), or `None` for a plain encoder.
fn model_labels(dir: &Path) -> Result<Option<Vec<String>>> {
    if !dir.is_dir() || !is_classifier_dir(dir)? {
        return Ok(None);
    }
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| TrainError::Io { path: path.clone(), source })?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TrainError::Run(format!("{}: {e}", path.display())))?;
    let Some(id2label) = config.get("id2label").and_then(serde_json::Value::as_object) else { return Ok(None) };
    let labels: Option<Vec<String>> =
        (0..id2label.len()).map(|i| id2label.get(&i.to_string()).and_then(|v| v.as_str()).map(str::to_owned)).collect();
    Ok(labels.filter(|l| l.len() >= 2))
}
