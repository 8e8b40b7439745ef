//! The labelled documents of a run: the tasks set up on the model, the documents read,
//! labelled for every task and chunked, with the dev split.

use std::io::BufRead;
use std::path::Path;

use candle_core::Device;
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec, DEFAULT_TASK};
use longread_text::{
    labels_from_column, read_labelled_columns, resolve_column, stratified_split, ChunkedDocument, Chunker, Example,
};

use crate::error::{Result, TrainError};
use crate::run::spec::{name_value, TrainSpec};

/// Opens labelled data (`-` is standard input); returns it with its name for messages.
pub fn open_data(path: &Path) -> Result<(Box<dyn BufRead>, String)> {
    if path.as_os_str() == "-" {
        return Ok((Box::new(std::io::BufReader::new(std::io::stdin())), "<stdin>".into()));
    }
    let file = std::fs::File::open(path).map_err(|source| TrainError::Io { path: path.to_owned(), source })?;
    Ok((Box::new(std::io::BufReader::new(file)), path.display().to_string()))
}

/// Reads labelled JSON lines with these label columns.
pub fn read_examples(path: &Path, columns: &[String]) -> Result<(Vec<Example>, String)> {
    let (reader, name) = open_data(path)?;
    Ok((read_labelled_columns(reader, &name, columns)?, name))
}

/// Documents with their labels, `labels[task][doc]`.
pub struct Labelled {
    /// Chunked documents.
    pub docs: Vec<ChunkedDocument>,
    /// Gold labels per task.
    pub labels: Vec<Vec<Option<usize>>>,
}

impl Labelled {
    fn pick(&self, idx: &[usize]) -> Self {
        Self {
            docs: idx.iter().map(|&i| self.docs[i].clone()).collect(),
            labels: self.labels.iter().map(|task| idx.iter().map(|&i| task[i]).collect()).collect(),
        }
    }
}

/// The train and dev indices of `labels` (per document; `None` where it has no label of the
/// primary task) under `--dev-split` (stratified, seeded; unlabelled documents form a stratum
/// of their own).
pub fn dev_split(labels: &[Option<usize>], n_labels: usize, spec: &TrainSpec) -> Result<(Vec<usize>, Vec<usize>)> {
    if !(0.0 < spec.dev_split && spec.dev_split < 1.0) {
        return Err(TrainError::Run("--dev-split must be between 0 and 1 (or give --dev FILE)".into()));
    }
    let strata: Vec<usize> = labels.iter().map(|l| l.unwrap_or(n_labels)).collect();
    let (train, dev) = stratified_split(&strata, spec.dev_split, spec.seed);
    if dev.is_empty() || train.is_empty() {
        return Err(TrainError::Run(format!("--dev-split {} leaves an empty training or dev set", spec.dev_split)));
    }
    Ok((train, dev))
}

/// Sets up the tasks named by `--task` on `model` (renaming the primary task, adding heads for
/// new ones with labels from the training data), then reads, labels and chunks the training
/// and dev documents. Returns (train, dev).
pub fn load_data(
    spec: &TrainSpec,
    model: &mut HierarchicalClassifier,
    chunker: &Chunker,
    device: &Device,
) -> Result<(Labelled, Labelled)> {
    let requested: Vec<(&str, &str)> = spec.task.iter().map(|t| name_value("--task", t)).collect::<Result<Vec<_>>>()?;
    let mut new_tasks: Vec<(String, String)> = Vec::new();
    for (i, &(name, column)) in requested.iter().enumerate() {
        if requested[..i].iter().any(|(n, _)| *n == name) {
            return Err(TrainError::Run(format!("--task {name} is given twice")));
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

    let (examples, source) = read_examples(&spec.train, &columns)?;
    let known = model.task_count();
    for (k, (name, column)) in new_tasks.into_iter().enumerate() {
        let labels = labels_from_column(&examples, known + k, &source)?;
        if labels.len() < 2 {
            return Err(TrainError::Run(format!(
                "task {name}: column \"{column}\" of {source} has fewer than 2 distinct labels ({labels:?})"
            )));
        }
        model.add_task(TaskSpec { name, column, labels }, spec.seed.wrapping_add(1000 + k as u64), device)?;
    }
    let label_chunk = |examples: &[Example], source: &str| -> Result<Labelled> {
        let labels = model
            .config()
            .tasks()
            .iter()
            .enumerate()
            .map(|(t, task)| Ok(resolve_column(examples, t, &task.labels, source)?))
            .collect::<Result<Vec<_>>>()?;
        let docs = examples
            .iter()
            .map(|e| chunker.chunk(&e.text).map_err(|err| TrainError::Run(format!("{source}:{}: {err}", e.line))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Labelled { docs, labels })
    };
    let train = label_chunk(&examples, &source)?;
    if let Some(dev) = &spec.dev {
        let (dev_examples, dev_source) = read_examples(dev, &columns)?;
        return Ok((train, label_chunk(&dev_examples, &dev_source)?));
    }
    let (train_idx, dev_idx) = dev_split(&train.labels[0], model.labels().len(), spec)?;
    Ok((train.pick(&train_idx), train.pick(&dev_idx)))
}
