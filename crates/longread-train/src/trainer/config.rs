//! What shapes a training run: its settings, the data splits and their checks.

use std::path::PathBuf;

use candle_core::Tensor;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_text::ChunkedDocument;

use crate::error::{Result, TrainError};
use crate::groups::{Freezing, GroupSettings};
use crate::optim::AdamWConfig;
use crate::schedule::Decay;
use crate::unfreeze::UnfreezeSchedule;

/// Which dev metric picks the best epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Macro-averaged F1 (higher is better).
    MacroF1,
    /// Weighted F1.
    WeightedF1,
    /// Accuracy (a multi-label task's: subset accuracy).
    Accuracy,
    /// Micro-averaged F1: a multi-label task's F1 over every (document, label) pair; a
    /// single-label task's equals its accuracy.
    MicroF1,
    /// ROC-AUC of the probabilities (binary, or one-vs-rest macro; see
    /// `longread_metrics::scores`).
    RocAuc,
    /// Dev loss (lower is better).
    DevLoss,
}

/// Which epoch's model a run keeps as its output (`--keep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Keep {
    /// The best epoch by the dev metric.
    #[default]
    Best,
    /// The last epoch run: for a fixed schedule when the dev set is too small to choose
    /// between epochs (its metrics are still logged).
    Last,
}

/// Everything that shapes a run.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Passes over the training data.
    pub epochs: usize,
    /// Documents per batch.
    pub batch_size: usize,
    /// Batches whose gradients are summed before one optimizer step.
    pub grad_accum: usize,
    /// Clip the global gradient norm to this (0 = no clipping).
    pub max_grad_norm: f64,
    /// Shape of the schedule after warm-up.
    pub decay: Decay,
    /// Warm-up as a fraction of all optimizer steps.
    pub warmup_ratio: f64,
    /// Warm-up in optimizer steps; when set, it replaces `warmup_ratio`.
    pub warmup_steps: Option<usize>,
    /// Checkpoint in the middle of an epoch after every this many optimizer step groups
    /// (0 = only at epoch ends); `None`: whenever `save_every_seconds` have passed since the
    /// last checkpoint.
    pub save_every_steps: Option<usize>,
    /// With `save_every_steps` unset: seconds of training between mid-epoch checkpoints.
    pub save_every_seconds: f64,
    /// Seed for shuffling and dropout.
    pub seed: u64,
    /// Most tokens per encoder batch.
    pub max_batch_tokens: usize,
    /// Chunk-level recomputation (memory flat in document length).
    pub recompute: bool,
    /// Per-class loss weights.
    pub class_weights: Option<Vec<f32>>,
    /// A multi-label primary task's weight of each label's positive term in the binary
    /// cross-entropy (`--pos-weight`, `[labels]`).
    pub pos_weight: Option<Vec<f32>>,
    /// Metric for the best epoch.
    pub metric: Metric,
    /// Which epoch's model the run keeps.
    pub keep: Keep,
    /// Stop after this many epochs without improvement (0 = never).
    pub patience: usize,
    /// Patience only counts once this many optimizer steps have run: on small data an epoch
    /// is a few steps, and a model still predicting one class for its first epochs (a flat
    /// dev metric) must not be stopped before it could learn.
    pub patience_min_steps: usize,
    /// What is frozen (before the first phase of `unfreeze`, or throughout without it).
    pub freezing: Freezing,
    /// Gradual unfreezing: what trains from which epoch on.
    pub unfreeze: Option<UnfreezeSchedule>,
    /// Loss weight of each task (missing entries weigh 1).
    pub task_weights: Vec<f64>,
    /// Tasks whose heads (pooling, LayerNorm, classifier) do not train.
    pub frozen_tasks: Vec<usize>,
    /// Caching of what frozen layers compute.
    pub cache: CacheSettings,
    /// Learning rates and weight decay.
    pub groups: GroupSettings,
    /// AdamW's betas and epsilon.
    pub adamw: AdamWConfig,
    /// Optimizer steps with NaN/inf gradients in a row that stop the run.
    pub max_bad_steps: usize,
    /// Stop after this epoch (the run can be resumed later); `None` runs all epochs.
    pub stop_after_epoch: Option<usize>,
}

/// Caching of frozen computation: with the whole encoder frozen the chunk vectors are computed
/// once; with the embeddings and the bottom K ≥ 1 layers frozen, their outputs are.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Cache at all (off: frozen layers are recomputed every epoch, with the same results).
    pub enabled: bool,
    /// Bytes of frozen-layer outputs kept in memory; beyond, they go to a scratch file.
    pub memory_limit: usize,
    /// Directory of the scratch file.
    pub spill_dir: PathBuf,
    /// Keep chunk vectors of a frozen encoder on disk here, for later runs and evals
    /// (`--vector-cache`).
    pub vectors: Option<PathBuf>,
    /// What else changes the vectors, for the cache key (the precision).
    pub variant: String,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            memory_limit: 4 << 30,
            spill_dir: std::env::temp_dir(),
            vectors: None,
            variant: String::new(),
        }
    }
}

/// Documents and their gold labels.
#[derive(Debug, Clone)]
pub struct Split<'a> {
    /// Chunked documents.
    pub docs: &'a [ChunkedDocument],
    /// Gold label indices, `labels[task][doc]`; `None` where a document has no label for a task.
    /// A multi-label primary task's entries are `Some(0)` (every document is labelled, with a
    /// set, possibly empty, in [`Split::sets`]).
    pub labels: Vec<Vec<Option<usize>>>,
    /// Added to each document's primary-task logits before the loss and the dev metrics, one
    /// `[labels]` tensor per document: the wide side of a wide-and-deep model (its bag of
    /// words' scaled log-probabilities; out of fold for training documents). `None`: nothing.
    pub offsets: Option<Vec<Tensor>>,
    /// The primary task's label sets, one per document, when the model's primary task is
    /// multi-label (`None` otherwise).
    pub sets: Option<Vec<Vec<usize>>>,
}

impl<'a> Split<'a> {
    /// Documents of a single-task model, every one labelled.
    pub fn new(docs: &'a [ChunkedDocument], labels: &[usize]) -> Self {
        Self { docs, labels: vec![labels.iter().map(|&l| Some(l)).collect()], offsets: None, sets: None }
    }

    /// Documents of a single-task multi-label model: `sets[d]` holds document d's labels.
    pub fn multi_label(docs: &'a [ChunkedDocument], sets: Vec<Vec<usize>>) -> Self {
        Self { docs, labels: vec![vec![Some(0); sets.len()]], offsets: None, sets: Some(sets) }
    }

    /// Label sets of the documents in `batch`, in batch order (see [`Split::sets`]).
    pub(super) fn batch_sets(&self, batch: &[usize]) -> Option<Vec<Vec<usize>>> {
        self.sets.as_ref().map(|s| batch.iter().map(|&i| s[i].clone()).collect())
    }

    /// Labels of the documents in `batch`, `[task][position in batch]`.
    pub(super) fn batch_labels(&self, batch: &[usize]) -> Vec<Vec<Option<usize>>> {
        self.labels.iter().map(|task| batch.iter().map(|&i| task[i]).collect()).collect()
    }

    /// Logit offsets of the documents in `batch`, in batch order (see [`Split::offsets`]).
    pub(super) fn batch_offsets(&self, batch: &[usize]) -> Option<Vec<Tensor>> {
        self.offsets.as_ref().map(|o| batch.iter().map(|&i| o[i].clone()).collect())
    }
}

/// Checks that a split has one label list per task, of the right length and range, and that
/// every task has at least one labelled document (an empty split, a run without a dev set,
/// has none to check).
pub(super) fn check_labels(model: &HierarchicalClassifier, split: &Split, what: &str) -> Result<()> {
    let tasks = model.config().tasks();
    if split.offsets.as_ref().is_some_and(|o| o.len() != split.docs.len()) {
        return Err(TrainError::InvalidSetting(format!("{what} data needs one logit offset per document")));
    }
    match (&split.sets, model.is_multi_label(0)) {
        (Some(sets), true) => {
            let n = tasks[0].labels.len();
            if sets.len() != split.docs.len() || sets.iter().flatten().any(|&l| l >= n) {
                return Err(TrainError::InvalidSetting(format!("{what} label sets do not fit the model")));
            }
        }
        (None, true) => {
            return Err(TrainError::InvalidSetting(format!("the model is multi-label: {what} data needs label sets")))
        }
        (Some(_), false) => {
            return Err(TrainError::InvalidSetting(format!(
                "{what} data has label sets but the model predicts one label per document"
            )))
        }
        (None, false) => {}
    }
    if split.labels.len() != tasks.len() {
        return Err(TrainError::InvalidSetting(format!(
            "{what} data has labels for {} tasks; the model has {}",
            split.labels.len(),
            tasks.len()
        )));
    }
    for (spec, labels) in tasks.iter().zip(&split.labels) {
        if labels.len() != split.docs.len() || labels.iter().flatten().any(|&l| l >= spec.labels.len()) {
            return Err(TrainError::InvalidSetting(format!("{what} labels of task \"{}\" do not fit", spec.name)));
        }
        if !split.docs.is_empty() && labels.iter().all(Option::is_none) {
            return Err(TrainError::InvalidSetting(format!(
                "no {what} document has a label for task \"{}\" (column \"{}\")",
                spec.name, spec.column
            )));
        }
    }
    Ok(())
}

/// `n_samples / (n_classes · count_c)` per class (scikit-learn's "balanced"); a class absent
/// from the data gets weight 0.
pub fn balanced_class_weights(labels: &[usize], n_classes: usize) -> Vec<f32> {
    let mut counts = vec![0usize; n_classes];
    for &l in labels {
        counts[l] += 1;
    }
    counts.iter().map(|&c| if c == 0 { 0.0 } else { labels.len() as f32 / (n_classes * c) as f32 }).collect()
}
