//! The labelled documents of a run: the tasks set up on the model, the documents read,
//! labelled for every task and chunked, with the dev split.

use std::io::BufRead;
use std::path::Path;

use candle_core::{Device, Tensor};
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec, DEFAULT_TASK};
use longread_text::multilabel::{multilabel_names, resolve_multilabel, LabelLayout, MultiLabelExample};
use longread_text::{labels_from_column, read_labelled_columns, ChunkedDocument, Chunker, Example, LabelledDataset};

use crate::error::{Result, TrainError};
use crate::run::spec::{name_value, MetricArg, TrainPlan, TrainSpec};
use crate::run::threshold::{self, DevTexts};
use crate::run::wide::{fit_wide, fit_wide_multilabel};

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
    /// A multi-label model's label sets, one per document (see [`crate::trainer::Split::sets`]).
    pub sets: Option<Vec<Vec<usize>>>,
}

impl Labelled {
    /// The dataset's documents chunked (an empty or untokenisable one is an error naming its
    /// line), with its labels.
    fn chunk(data: LabelledDataset, chunker: &Chunker) -> Result<Self> {
        let docs = chunk_texts(data.examples.iter().map(|e| (e.line, e.text.as_str())), &data.source, chunker)?;
        Ok(Self { docs, labels: data.labels, offsets: None, sets: None })
    }

    /// Multi-label documents chunked (an empty or untokenisable one is an error naming its
    /// line), with their label sets.
    fn chunk_multilabel(
        examples: &[MultiLabelExample],
        sets: Vec<Vec<usize>>,
        source: &str,
        chunker: &Chunker,
    ) -> Result<Self> {
        let docs = chunk_texts(examples.iter().map(|e| (e.line, e.text.as_str())), source, chunker)?;
        Ok(Self { labels: vec![vec![Some(0); docs.len()]], docs, offsets: None, sets: Some(sets) })
    }
}

/// `(line, text)` pairs of `source` chunked; an empty or untokenisable text is an error
/// naming its line.
fn chunk_texts<'t>(
    texts: impl Iterator<Item = (usize, &'t str)>,
    source: &str,
    chunker: &Chunker,
) -> Result<Vec<ChunkedDocument>> {
    texts
        .map(|(line, text)| chunker.chunk(text).map_err(|err| TrainError::Run(format!("{source}:{line}: {err}"))))
        .collect()
}

/// A new multi-label model's labels: --labels, else the --label-columns, else every label the
/// training `examples` (read from `source`) name, sorted; none at all is an error.
pub(crate) fn multilabel_training_labels(
    spec: &TrainSpec,
    layout: &LabelLayout,
    examples: &[MultiLabelExample],
    source: &str,
) -> Result<Vec<String>> {
    let labels = match (layout, spec.labels.is_empty()) {
        (LabelLayout::Columns(columns), true) => columns.clone(),
        (_, false) => crate::run::init::checked_label_names(&spec.labels)?,
        (LabelLayout::Joined { .. }, true) => multilabel_names(examples),
    };
    if labels.is_empty() {
        return Err(TrainError::Run(format!(
            "{source}: no document carries a label, so there is nothing to learn (give --labels, or data whose \
             \"labels\" lists name some)"
        )));
    }
    Ok(labels)
}

/// The (training, dev) document indices of a multi-label `--dev-split fraction`: one of
/// round(1 / fraction) folds (at least 2) made by iterative stratification, seeded, so that
/// rare labels reach the dev set in proportion.
pub(crate) fn multilabel_dev_split(sets: &[Vec<usize>], fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    if !(0.0 < fraction && fraction < 1.0) {
        return Err(TrainError::Run("--dev-split must be between 0 and 1 (or give --dev FILE)".into()));
    }
    let k = ((1.0 / fraction).round() as usize).max(2);
    let folds = longread_metrics::folds::iterative_stratified_folds(sets, k, seed);
    let dev = folds[0].clone();
    let mut train = folds[1..].concat();
    train.sort_unstable();
    if train.is_empty() || dev.is_empty() {
        return Err(TrainError::Run(format!("--dev-split {fraction} leaves an empty training or dev set")));
    }
    Ok((train, dev))
}

/// The training and dev documents of a multi-label model (its primary task's labels, one
/// task): the data laid out as --label-separator / --label-columns say, the training labels
/// checked against the model's, the dev set's unknown labels left out with a note; the dev set
/// is --dev, a --dev-split by iterative stratification, or none. With --wide-bow, the wide bag
/// of words is fitted on the training part and kept in `model`, its offsets on both parts.
pub(crate) fn load_multilabel_data(
    spec: &TrainSpec,
    model: &mut HierarchicalClassifier,
    chunker: &Chunker,
    device: &Device,
    note: &mut dyn FnMut(&str),
) -> Result<(Labelled, Labelled, Option<DevTexts>)> {
    if !spec.encoder.task.is_empty() || model.task_count() > 1 {
        return Err(TrainError::Run(
            "--task and multi-task models take one label per document per task; a multi-label model has one task"
                .into(),
        ));
    }
    let layout = spec.label_layout.layout();
    let labels = model.labels().to_vec();
    let (examples, source) = read_multilabel_examples(&spec.train, &layout)?;
    let (sets, _) = resolve_multilabel(&examples, &labels, &source, false)?;
    // (training examples and sets, dev examples and sets, the dev set's name, its kept texts)
    let (train, dev, dev_source, dev_texts) = match &spec.dev {
        Some(path) => {
            let (dev_examples, dev_source) = read_multilabel_examples(path, &layout)?;
            let (dev_sets, unknown) = resolve_multilabel(&dev_examples, &labels, &dev_source, true)?;
            if let Some(unknown) = unknown {
                note(&format!("warning: {dev_source}: {unknown}"));
            }
            let kept = threshold::keep_multilabel_dev(spec, &dev_examples, &dev_source);
            ((examples, sets), (dev_examples, dev_sets), dev_source, kept)
        }
        None if spec.trains_without_dev() => ((examples, sets), (Vec::new(), Vec::new()), source.clone(), None),
        None => {
            let (train, dev) = multilabel_dev_split(&sets, spec.training.dev_split, spec.seed)?;
            let pick = |idx: &[usize]| -> (Vec<MultiLabelExample>, Vec<Vec<usize>>) {
                (idx.iter().map(|&i| examples[i].clone()).collect(), idx.iter().map(|&i| sets[i].clone()).collect())
            };
            let (train, dev) = (pick(&train), pick(&dev));
            let kept = threshold::keep_multilabel_dev(spec, &dev.0, &source);
            (train, dev, source.clone(), kept)
        }
    };
    let wide = match (wide_spec(spec), model.config().longread.wide) {
        (Some(bow), _) => Some(fit_wide_multilabel(spec, bow, &train.0, &train.1, &dev.0, &labels, note)?),
        (None, Some(_)) => return Err(wide_without_flag(spec)),
        (None, None) => None,
    };
    let mut train = Labelled::chunk_multilabel(&train.0, train.1, &source, chunker)?;
    let mut dev = Labelled::chunk_multilabel(&dev.0, dev.1, &dev_source, chunker)?;
    if let Some(wide) = wide {
        keep_wide(model, wide, (&mut train, &mut dev), device)?;
    }
    Ok((train, dev, dev_texts))
}

/// The bag of words of `--wide-bow`, if the run trains an encoder model with one.
fn wide_spec(spec: &TrainSpec) -> Option<&crate::run::spec::BowSpec> {
    match spec.plan() {
        TrainPlan::Encoder { wide, .. } => wide,
        TrainPlan::Han { .. } | TrainPlan::Bow(_) => None,
    }
}

/// A wide-and-deep `--model` trained again without `--wide-bow`.
fn wide_without_flag(spec: &TrainSpec) -> TrainError {
    TrainError::Run(format!(
        "{} is a wide-and-deep model (a bag of words in its wide/): train it again with --wide-bow, which refits its \
         bag of words on this training data",
        spec.model.as_deref().unwrap_or(Path::new("--model")).display()
    ))
}

/// Keeps the fitted wide side in `model` and its offsets with the training and dev documents.
fn keep_wide(
    model: &mut HierarchicalClassifier,
    wide: crate::run::wide::WideSide,
    (train, dev): (&mut Labelled, &mut Labelled),
    device: &Device,
) -> Result<()> {
    let files = wide.bow.files().map_err(|e| TrainError::Run(format!("--wide-bow: {e}")))?;
    model.set_wide(files, wide.bow.labels(), wide.scale)?;
    let labels = model.labels().len();
    let tensors = |rows: Vec<Vec<f32>>| -> Result<Vec<Tensor>> {
        Ok(rows.into_iter().map(|r| Tensor::from_vec(r, labels, device)).collect::<candle_core::Result<_>>()?)
    };
    train.offsets = Some(tensors(wide.train)?);
    dev.offsets = Some(tensors(wide.dev)?);
    Ok(())
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
    let wide = match (wide_spec(spec), model.config().longread.wide) {
        (Some(_), _) if model.task_count() > 1 => {
            return Err(TrainError::Run(
                "--wide-bow applies to a model with one task (its bag of words scores the primary task)".into(),
            ))
        }
        (Some(bow), _) => Some(fit_wide(spec, bow, &train, &dev, model.labels(), note)?),
        (None, Some(_)) => return Err(wide_without_flag(spec)),
        (None, None) => None,
    };
    let (mut train, mut dev) = (Labelled::chunk(train, chunker)?, Labelled::chunk(dev, chunker)?);
    if let Some(wide) = wide {
        keep_wide(model, wide, (&mut train, &mut dev), device)?;
    }
    Ok((train, dev, dev_texts))
}
