//! The labelled documents of a run: the tasks set up on the model, the documents read,
//! labelled for every task and chunked, with the dev split.

use std::io::BufRead;
use std::path::Path;

use candle_core::{Device, Tensor};
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec, DEFAULT_TASK};
use longread_text::{labels_from_column, read_labelled_columns, ChunkedDocument, Chunker, Example, LabelledDataset};

use crate::error::{Result, TrainError};
use crate::run::spec::{name_value, MetricArg, TrainPlan, TrainSpec};
use crate::run::threshold::{self, DevTexts};
use crate::run::wide::fit_wide;

/// Opens labelled data (`-` is standard input); returns it with its name for messages.
/// Standard input and pipes give the same bytes every time they are opened in a run
/// ([`super::one_shot`]).
pub fn open_data(path: &Path) -> Result<(Box<dyn BufRead>, String)> {
    if super::one_shot::is_one_shot(path) {
        let name = if path.as_os_str() == "-" { "<stdin>".into() } else { path.display().to_string() };
        return Ok((Box::new(std::io::Cursor::new(super::one_shot::bytes(path)?)), name));
    }
    let file = std::fs::File::open(path).map_err(|source| TrainError::Io { path: path.to_owned(), source })?;
    Ok((Box::new(std::io::BufReader::new(file)), path.display().to_string()))
}

/// Reads multi-label examples laid out as `layout` says (see [`longread_text::multilabel`]).
pub fn read_multilabel_examples(
    path: &Path,
    layout: &longread_text::multilabel::LabelLayout,
) -> Result<(Vec<longread_text::multilabel::MultiLabelExample>, String)> {
    let (reader, name) = open_data(path)?;
    Ok((longread_text::multilabel::read_multilabel(reader, &name, layout)?, name))
}

/// Reads labelled JSON lines with these label columns.
pub fn read_examples(path: &Path, columns: &[String]) -> Result<(Vec<Example>, String)> {
    let (reader, name) = open_data(path)?;
    Ok((read_labelled_columns(reader, &name, columns)?, name))
}

/// Chunked documents with their labels, `labels[task][doc]`.
pub struct Labelled {
    /// Chunked documents.
    pub docs: Vec<ChunkedDocument>,
    /// Gold labels per task.
    pub labels: Vec<Vec<Option<usize>>>,
    /// A wide-and-deep run's primary-task logit offsets, one `[labels]` per document.
    pub offsets: Option<Vec<Tensor>>,
}

impl Labelled {
    /// The dataset's documents chunked (an empty or untokenisable one is an error naming its
    /// line), with its labels.
    fn chunk(data: LabelledDataset, chunker: &Chunker) -> Result<Self> {
        let docs = data
            .examples
            .iter()
            .map(|e| {
                chunker.chunk(&e.text).map_err(|err| TrainError::Run(format!("{}:{}: {err}", data.source, e.line)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { docs, labels: data.labels, offsets: None })
    }
}

/// The training and dev sets of a run: `--dev`, the stratified, seeded `--dev-split` of the
/// training data, or (`--dev-split 0`) every document for training and an empty dev set.
pub fn train_and_dev(
    train: LabelledDataset,
    spec: &TrainSpec,
    read_dev: impl FnOnce(&Path) -> Result<LabelledDataset>,
) -> Result<(LabelledDataset, LabelledDataset)> {
    match &spec.dev {
        Some(dev) => Ok((train, read_dev(dev)?)),
        None if spec.trains_without_dev() => {
            let none = train.pick(&[]);
            Ok((train, none))
        }
        None => Ok(train.split_dev(spec.training.dev_split, spec.seed)?),
    }
}

/// Notes (`note`) what the dev set shares with the training set, and training texts with two
/// labels (encoder runs and the HAN).
pub(crate) fn warn_of_overlap(train: &LabelledDataset, dev: &LabelledDataset, note: &mut dyn FnMut(&str)) {
    for line in longread_text::overlap::check_overlap(train, dev).warnings(train, dev) {
        note(&line);
    }
}

/// Refuses `--metric roc-auc` before training when the dev set lacks one of a task's labels
/// (`names`, per task): its ROC-AUC is undefined, and the run would stop at its first epoch's
/// end. An empty dev set (no dev) is left to the run.
pub(crate) fn check_dev_for_metric(spec: &TrainSpec, dev: &LabelledDataset, names: &[&[String]]) -> Result<()> {
    if spec.training.metric != MetricArg::RocAuc || dev.examples.is_empty() {
        return Ok(());
    }
    for (column, labels) in dev.labels.iter().zip(names) {
        let missing: Vec<&str> =
            (0..labels.len()).filter(|&c| !column.contains(&Some(c))).map(|c| labels[c].as_str()).collect();
        if !missing.is_empty() && column.iter().any(Option::is_some) {
            return Err(TrainError::Run(crate::trainer::roc_auc_without(&missing)));
        }
    }
    Ok(())
}

/// How a run's start names its dev set.
pub(crate) fn dev_set_words(documents: usize) -> String {
    match documents {
        0 => "no dev set (--dev-split 0: every epoch's model is kept, the last in OUT)".to_string(),
        n => format!("dev {n} documents"),
    }
}

/// Sets up the tasks named by `--task` on `model` (renaming the primary task, adding heads for
/// new ones with labels from the training data), then reads, labels and chunks the training
/// and dev documents; with `--wide-bow`, fits the wide side on the training documents, gives
/// it to `model` and the documents their logit offsets (`note` hears what it fitted).
/// Returns (train, dev, the dev texts kept for `--tune-threshold`).
pub(crate) fn load_data(
    spec: &TrainSpec,
    model: &mut HierarchicalClassifier,
    chunker: &Chunker,
    device: &Device,
    note: &mut dyn FnMut(&str),
) -> Result<(Labelled, Labelled, Option<DevTexts>)> {
    let requested: Vec<(&str, &str)> =
        spec.encoder.task.iter().map(|t| name_value("--task", t)).collect::<Result<Vec<_>>>()?;
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
    let task_labels: Vec<Vec<String>> = model.config().tasks().into_iter().map(|t| t.labels).collect();
    let names: Vec<&[String]> = task_labels.iter().map(Vec::as_slice).collect();
    let train = LabelledDataset::resolve(examples, &names, &source)?;
    let (train, dev) = train_and_dev(train, spec, |path| {
        let (examples, source) = read_examples(path, &columns)?;
        Ok(LabelledDataset::resolve(examples, &names, &source)?)
    })?;
    warn_of_overlap(&train, &dev, note);
    check_dev_for_metric(spec, &dev, &names)?;
    let dev_texts = threshold::keep_dev(spec, &dev.examples, &dev.source);
    let wide_bow = match spec.plan() {
        TrainPlan::Encoder { wide, .. } => wide,
        TrainPlan::Han { .. } | TrainPlan::Bow(_) => None,
    };
    let wide = match (wide_bow, model.config().longread.wide) {
        (Some(_), _) if model.task_count() > 1 => {
            return Err(TrainError::Run(
                "--wide-bow applies to a model with one task (its bag of words scores the primary task)".into(),
            ))
        }
        (Some(bow), _) => Some(fit_wide(spec, bow, &train, &dev, model.labels(), note)?),
        (None, Some(_)) => {
            return Err(TrainError::Run(format!(
                "{} is a wide-and-deep model (a bag of words in its wide/): train it again with --wide-bow, which \
                 refits its bag of words on this training data",
                spec.model.as_deref().unwrap_or(Path::new("--model")).display()
            )))
        }
        (None, None) => None,
    };
    let (mut train, mut dev) = (Labelled::chunk(train, chunker)?, Labelled::chunk(dev, chunker)?);
    if let Some(wide) = wide {
        let files = wide.bow.files().map_err(|e| TrainError::Run(format!("--wide-bow: {e}")))?;
        model.set_wide(files, wide.bow.labels(), wide.scale)?;
        let labels = model.labels().len();
        let tensors = |rows: Vec<Vec<f32>>| -> Result<Vec<Tensor>> {
            Ok(rows.into_iter().map(|r| Tensor::from_vec(r, labels, device)).collect::<candle_core::Result<_>>()?)
        };
        train.offsets = Some(tensors(wide.train)?);
        dev.offsets = Some(tensors(wide.dev)?);
    }
    Ok((train, dev, dev_texts))
}
