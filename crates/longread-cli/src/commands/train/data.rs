//! The labelled documents of a run: the tasks set up on the model, the documents read,
//! labelled for every task and chunked, with the dev split.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec, DEFAULT_TASK};
use longread_text::{
    labels_from_column, read_labelled_columns, resolve_column, stratified_split, ChunkedDocument, Chunker, Example,
};

use super::args::{name_value, TrainArgs};
use crate::io::{input_name, open_input};

/// Documents with their labels, `labels[task][doc]`.
pub(super) struct Labelled {
    pub(super) docs: Vec<ChunkedDocument>,
    pub(super) labels: Vec<Vec<Option<usize>>>,
}

impl Labelled {
    fn pick(&self, idx: &[usize]) -> Self {
        Self {
            docs: idx.iter().map(|&i| self.docs[i].clone()).collect(),
            labels: self.labels.iter().map(|task| idx.iter().map(|&i| task[i]).collect()).collect(),
        }
    }
}

/// Sets up the tasks named by `--task` on `model` (renaming the primary task, adding heads for
/// new ones with labels from the training data), then reads, labels and chunks the training
/// and dev documents. Returns (train, dev).
pub(super) fn load_data(
    args: &TrainArgs,
    model: &mut HierarchicalClassifier,
    chunker: &Chunker,
    device: &Device,
) -> Result<(Labelled, Labelled)> {
    let requested: Vec<(&str, &str)> = args.task.iter().map(|t| name_value("--task", t)).collect::<Result<Vec<_>>>()?;
    let mut new_tasks: Vec<(String, String)> = Vec::new();
    for (i, &(name, column)) in requested.iter().enumerate() {
        if requested[..i].iter().any(|(n, _)| *n == name) {
            bail!("--task {name} is given twice");
        }
        let tasks = model.config().tasks();
        let plain =
            tasks.len() == 1 && tasks[0].name == DEFAULT_TASK && !requested.iter().any(|(n, _)| *n == DEFAULT_TASK);
        match tasks.iter().position(|t| t.name == name) {
            Some(t) => model.rename_task(t, name, column)?,
            None if i == 0 && plain => model.rename_task(0, name, column)?,
            None => new_tasks.push((name.to_string(), column.to_string())),
        }
    }
    let mut columns: Vec<String> = model.config().tasks().iter().map(|t| t.column.clone()).collect();
    columns.extend(new_tasks.iter().map(|(_, c)| c.clone()));

    let read = |path: &Path| -> Result<(Vec<Example>, String)> {
        let name = input_name(path);
        Ok((read_labelled_columns(open_input(path)?, &name, &columns)?, name))
    };
    let (examples, source) = read(&args.train)?;
    let known = model.task_count();
    for (k, (name, column)) in new_tasks.into_iter().enumerate() {
        let labels = labels_from_column(&examples, known + k, &source)?;
        if labels.len() < 2 {
            bail!("task {name}: column \"{column}\" of {source} has fewer than 2 distinct labels ({labels:?})");
        }
        model.add_task(TaskSpec { name, column, labels }, args.seed.wrapping_add(1000 + k as u64), device)?;
    }
    let label_chunk = |examples: &[Example], source: &str| -> Result<Labelled> {
        let labels = model
            .config()
            .tasks()
            .iter()
            .enumerate()
            .map(|(t, spec)| Ok(resolve_column(examples, t, &spec.labels, source)?))
            .collect::<Result<Vec<_>>>()?;
        let docs = examples
            .iter()
            .map(|e| chunker.chunk(&e.text).with_context(|| format!("{source}:{}", e.line)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Labelled { docs, labels })
    };
    let train = label_chunk(&examples, &source)?;
    if let Some(dev) = &args.dev {
        let (dev_examples, dev_source) = read(dev)?;
        return Ok((train, label_chunk(&dev_examples, &dev_source)?));
    }
    if !(0.0 < args.dev_split && args.dev_split < 1.0) {
        bail!("--dev-split must be between 0 and 1 (or give --dev FILE)");
    }
    // Stratified by the primary task; documents without its label form a stratum of their own.
    let n_labels = model.labels().len();
    let strata: Vec<usize> = train.labels[0].iter().map(|l| l.unwrap_or(n_labels)).collect();
    let (train_idx, dev_idx) = stratified_split(&strata, args.dev_split, args.seed);
    if dev_idx.is_empty() || train_idx.is_empty() {
        bail!("--dev-split {} leaves an empty training or dev set", args.dev_split);
    }
    Ok((train.pick(&train_idx), train.pick(&dev_idx)))
}
