//! The model a run starts from: a checkpoint being resumed, a classifier made by `init`, or a
//! new classifier of `--arch` built on a plain encoder.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use longread_model::hierarchical::{is_classifier_dir, HierarchicalClassifier, LongreadSection, DEFAULT_TASK};
use longread_text::{labels_from_column, read_labelled_columns};

use super::args::{name_value, TrainArgs};
use crate::commands::arch::{sequence_section, Arch};
use crate::io::{input_name, open_input};

/// Loads `source` as a trainable classifier, or builds one on it when it is a plain encoder.
pub(super) fn starting_model(args: &TrainArgs, source: &Path, device: &Device) -> Result<HierarchicalClassifier> {
    if is_classifier_dir(source)? {
        let model = HierarchicalClassifier::load(source, true, device)
            .with_context(|| format!("loading model {}", source.display()))?;
        let arch = Arch::of(&model.config().longread);
        if let Some(wanted) = args.arch.filter(|&a| a != arch) {
            bail!(
                "--arch {} does not match the model in {}, which is {}; give a plain encoder as --model to \
                 build a new {} classifier",
                wanted.name(),
                source.display(),
                arch.name(),
                wanted.name()
            );
        }
        if !args.labels.is_empty() && args.labels != model.labels() {
            bail!(
                "--labels {} differs from the labels of the model in {} ({})",
                args.labels.join(","),
                source.display(),
                model.labels().join(",")
            );
        }
        return Ok(model);
    }
    let arch = args.arch.unwrap_or(Arch::Hierarchical);
    let checkpoint =
        longread_model::Checkpoint::open(source).with_context(|| format!("loading encoder {}", source.display()))?;
    let section = match arch {
        Arch::Hierarchical => LongreadSection::default(),
        Arch::Sequence => sequence_section(&checkpoint.config, 512),
        Arch::Han => bail!("--arch han is trained from scratch and not built on --model"),
    };
    let labels = training_labels(args)?;
    HierarchicalClassifier::init(source, labels, section, args.seed, device)
        .with_context(|| format!("building a {} classifier on {}", arch.name(), source.display()))
}

/// The labels of a new classifier: --labels, else those of the primary task (the first
/// --task's column, else "label") found in the training data, sorted.
pub(super) fn training_labels(args: &TrainArgs) -> Result<Vec<String>> {
    if !args.labels.is_empty() {
        let mut unique: Vec<&String> = args.labels.iter().collect();
        unique.sort();
        unique.dedup();
        if unique.len() != args.labels.len() || args.labels.len() < 2 || unique.iter().any(|l| l.trim().is_empty()) {
            bail!("--labels needs at least two distinct, non-empty names, e.g. --labels general,teen,mature");
        }
        return Ok(args.labels.clone());
    }
    let column = match args.task.first() {
        Some(task) => name_value("--task", task)?.1.to_string(),
        None => DEFAULT_TASK.to_string(),
    };
    let source = input_name(&args.train);
    let examples = read_labelled_columns(open_input(&args.train)?, &source, std::slice::from_ref(&column))?;
    let labels = labels_from_column(&examples, 0, &source)?;
    if labels.len() < 2 {
        bail!("column \"{column}\" of {source} has fewer than 2 distinct labels ({labels:?}); a classifier needs 2");
    }
    Ok(labels)
}
