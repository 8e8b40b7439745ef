//! The training loop: shuffled document batches, gradients (chunk-level recomputation, or
//! cached chunk vectors when the whole encoder is frozen), accumulation, clipping, AdamW with
//! a warm-up schedule, phases of gradual unfreezing with frozen-prefix caches, evaluation on
//! the dev set after every epoch, best-epoch tracking and early stopping. Saving is the
//! caller's: `on_epoch` is told when an epoch is the best.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor, TensorId, Var};
use longread_metrics::Report;
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::clip::clip_grad_norm;
use crate::error::{Result, TrainError};
use crate::groups::{frozen_layers, param_groups, Freezing, GroupSettings};
use crate::loss::{cross_entropy, task_loss, TaskLoss};
use crate::optim::{AdamW, AdamWConfig, ParamGroup};
use crate::prefix::{encode_batch, Prefix, PrefixCache};
use crate::recompute::{batch_gradients, BatchGradients, BatchSettings};
use crate::schedule::{Decay, Schedule};
use crate::unfreeze::UnfreezeSchedule;

/// Which dev metric picks the best epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Macro-averaged F1 (higher is better).
    MacroF1,
    /// Weighted F1.
    WeightedF1,
    /// Accuracy.
    Accuracy,
    /// Dev loss (lower is better).
    DevLoss,
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
    /// Seed for shuffling and dropout.
    pub seed: u64,
    /// Most tokens per encoder batch.
    pub max_batch_tokens: usize,
    /// Chunk-level recomputation (memory flat in document length).
    pub recompute: bool,
    /// Per-class loss weights.
    pub class_weights: Option<Vec<f32>>,
    /// Metric for the best epoch.
    pub metric: Metric,
    /// Stop after this many epochs without improvement (0 = never).
    pub patience: usize,
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
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { enabled: true, memory_limit: 4 << 30, spill_dir: std::env::temp_dir() }
    }
}

/// Documents and their gold labels.
#[derive(Debug, Clone)]
pub struct Split<'a> {
    /// Chunked documents.
    pub docs: &'a [ChunkedDocument],
    /// Gold label indices, `labels[task][doc]`; `None` where a document has no label for a task.
    pub labels: Vec<Vec<Option<usize>>>,
}

impl<'a> Split<'a> {
    /// Documents of a single-task model, every one labelled.
    pub fn new(docs: &'a [ChunkedDocument], labels: &[usize]) -> Self {
        Self { docs, labels: vec![labels.iter().map(|&l| Some(l)).collect()] }
    }

    /// Labels of the documents in `batch`, `[task][position in batch]`.
    fn batch_labels(&self, batch: &[usize]) -> Vec<Vec<Option<usize>>> {
        self.labels.iter().map(|task| batch.iter().map(|&i| task[i]).collect()).collect()
    }
}

/// Dev loss and metrics of one task of a multi-task model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskLog {
    /// The task's name.
    pub name: String,
    /// Its dev loss (unweighted).
    pub dev_loss: f64,
    /// Its dev metrics.
    pub dev: Report,
}

/// One optimizer step, for progress displays.
#[derive(Debug, Clone, Copy)]
pub struct StepLog {
    /// Optimizer steps so far (1-based).
    pub step: usize,
    /// All optimizer steps of the run.
    pub total_steps: usize,
    /// Mean loss of the step's batches.
    pub loss: f64,
    /// Head learning rate at this step.
    pub lr: f64,
    /// Chunks of the step's documents.
    pub chunks: usize,
}

/// The start of a phase: what trains changes (the first epoch, or an `unfreeze` phase).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseLog {
    /// First epoch of the phase (1-based).
    pub epoch: usize,
    /// What trains, in words.
    pub trains: String,
    /// Trainable parameters.
    pub trainable_parameters: usize,
    /// All parameters of the model.
    pub total_parameters: usize,
    /// What is cached, in words (empty if nothing).
    pub cache: String,
}

/// Progress reports while training.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A phase starts.
    Phase(PhaseLog),
    /// Chunks passed through frozen layers while building a cache.
    Caching {
        /// Chunks done so far.
        done: usize,
        /// All chunks to cache.
        total: usize,
    },
    /// An optimizer step was taken.
    Step(StepLog),
}

/// What an epoch produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochLog {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Dev loss (Σ over tasks of weight · loss).
    pub dev_loss: f64,
    /// Dev metrics of the first task.
    pub dev: Report,
    /// Every task's dev loss and metrics (multi-task models only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskLog>,
    /// True when this epoch is the best so far by the chosen metric.
    pub best: bool,
    /// Wall-clock seconds of the epoch (training and evaluation).
    pub seconds: f64,
    /// Wall-clock seconds of the training steps alone.
    pub train_seconds: f64,
    /// Steps skipped because of NaN/inf gradients.
    pub skipped_steps: usize,
    /// Trainable parameters.
    pub trainable_parameters: usize,
    /// All parameters of the model.
    pub total_parameters: usize,
}

/// Where a run stands after an epoch: with the model's weights and the optimizer's state,
/// everything needed to continue it exactly (each epoch's shuffle and dropout are seeded from
/// the run's seed and the epoch number, so no generator state is needed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerState {
    /// Epochs completed.
    pub epoch: usize,
    /// Optimizer steps taken.
    pub step: usize,
    /// Best dev score so far (higher is better).
    pub best: Option<f64>,
    /// Epochs since the best one.
    pub since_best: usize,
}

/// What `on_epoch` receives.
pub struct EpochEnd<'a, M = HierarchicalClassifier> {
    /// The epoch's log.
    pub log: &'a EpochLog,
    /// The model after the epoch.
    pub model: &'a M,
    /// The run's state after the epoch.
    pub state: &'a TrainerState,
    /// The optimizer (its moments go into checkpoints).
    pub optimizer: &'a AdamW,
}

/// A run to continue: the state after its last completed epoch and the optimizer's
/// exported state (see [`AdamW::export_state`]).
pub struct Resume {
    /// Where the run stood.
    pub state: TrainerState,
    /// Optimizer moments by name.
    pub moments: HashMap<String, Tensor>,
    /// Optimizer steps per parameter.
    pub steps: HashMap<String, u64>,
}

impl TrainerState {
    /// The state a run starts from: `resume`'s, or a new run's; refused when the run to
    /// resume has already completed `epochs`.
    pub(crate) fn start(resume: Option<&Resume>, epochs: usize) -> Result<Self> {
        let Some(r) = resume else {
            return Ok(Self { epoch: 0, step: 0, best: None, since_best: 0 });
        };
        if r.state.epoch >= epochs {
            return Err(TrainError::InvalidSetting(format!(
                "the run to resume has completed {} of {} epochs: nothing is left to do",
                r.state.epoch, epochs
            )));
        }
        Ok(r.state.clone())
    }

    /// Records the end of `epoch` after `step` optimizer steps with a dev `score` (higher is
    /// better); returns whether the epoch is the best so far.
    pub(crate) fn record(&mut self, epoch: usize, step: usize, score: f64) -> bool {
        let is_best = self.best.is_none_or(|b| score > b);
        if is_best {
            self.best = Some(score);
            self.since_best = 0;
        } else {
            self.since_best += 1;
        }
        self.epoch = epoch;
        self.step = step;
        is_best
    }

    /// Whether the run ends after the epoch just recorded: patience ran out, or the run was
    /// asked to stop there.
    pub(crate) fn stops(&self, cfg: &TrainConfig) -> bool {
        cfg.patience > 0 && self.since_best >= cfg.patience || cfg.stop_after_epoch == Some(self.epoch)
    }
}

/// An epoch's dev score, higher is better: −dev loss, or the mean of the metric over the tasks.
pub(crate) fn epoch_score<'a>(
    metric: Metric,
    dev_loss: f64,
    reports: impl ExactSizeIterator<Item = &'a Report>,
) -> f64 {
    let n = reports.len().max(1) as f64;
    match metric {
        Metric::DevLoss => -dev_loss,
        Metric::MacroF1 => reports.map(|r| r.macro_f1).sum::<f64>() / n,
        Metric::WeightedF1 => reports.map(|r| r.weighted_f1).sum::<f64>() / n,
        Metric::Accuracy => reports.map(|r| r.accuracy).sum::<f64>() / n,
    }
}

/// How a run turns summed gradients into optimizer steps, shared by the training loops:
/// clipping, the NaN/inf guard (a run stops after `max_bad_steps` skipped steps in a row) and
/// the learning-rate schedule.
pub(crate) struct Stepper {
    /// The run's schedule.
    pub(crate) schedule: Schedule,
    max_grad_norm: f64,
    bad_in_a_row: usize,
    max_bad: usize,
}

impl Stepper {
    /// The stepper of a run over `documents` training documents.
    pub(crate) fn new(cfg: &TrainConfig, documents: usize) -> Self {
        let steps_per_epoch = documents.div_ceil(cfg.batch_size.max(1)).div_ceil(cfg.grad_accum.max(1));
        let total_steps = steps_per_epoch * cfg.epochs;
        let warmup_steps = (cfg.warmup_ratio * total_steps as f64).round() as usize;
        Self {
            schedule: Schedule { warmup_steps, total_steps, decay: cfg.decay },
            max_grad_norm: cfg.max_grad_norm,
            bad_in_a_row: 0,
            max_bad: cfg.max_bad_steps.max(1),
        }
    }

    /// Clips `summed`, then steps `optimizer` with each group's rate `lr_of(group)` times the
    /// schedule's factor at `step`; returns that factor, or `None` when a NaN/inf loss or
    /// gradient made it skip the step (an error when too many were skipped in a row).
    pub(crate) fn step(
        &mut self,
        optimizer: &mut AdamW,
        summed: &mut HashMap<TensorId, Tensor>,
        step_loss: f64,
        epoch: usize,
        step: usize,
        lr_of: impl Fn(&ParamGroup) -> f64,
    ) -> Result<Option<f64>> {
        let norm = clip_grad_norm(summed, self.max_grad_norm)?;
        if !(step_loss.is_finite() && norm.is_finite()) {
            self.bad_in_a_row += 1;
            if self.bad_in_a_row >= self.max_bad {
                return Err(TrainError::Diverged(format!(
                    "training diverged: {} optimizer steps in a row had NaN/inf loss or gradients \
                     (epoch {epoch}, after step {step}); they were skipped and the run stopped. The last \
                     checkpoint and the best model so far are kept. Lower --lr, or check the data.",
                    self.bad_in_a_row
                )));
            }
            return Ok(None);
        }
        self.bad_in_a_row = 0;
        let factor = self.schedule.factor(step);
        optimizer.set_lr(|g| lr_of(g) * factor);
        optimizer.step_with(|v| summed.get(&v.as_tensor().id()).cloned())?;
        Ok(Some(factor))
    }
}

/// Adds `grads` (each divided by `parts`) into `summed`.
pub(crate) fn accumulate(
    summed: &mut HashMap<TensorId, Tensor>,
    grads: impl IntoIterator<Item = (TensorId, Tensor)>,
    parts: usize,
) -> Result<()> {
    for (id, g) in grads {
        let g = (g / parts as f64)?;
        let total = match summed.remove(&id) {
            Some(prev) => (prev + g)?,
            None => g,
        };
        summed.insert(id, total);
    }
    Ok(())
}

/// Seed of an epoch's generators.
pub(crate) fn epoch_seed(seed: u64, epoch: usize, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (epoch as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ stream
}

/// What trains during a phase, and the caches of what does not.
struct Phase {
    freezing: Freezing,
    /// Trainable variables.
    vars: Vec<Var>,
    /// Frozen layers above the embeddings (`None` when the embeddings train).
    frozen: Option<usize>,
    /// Chunk vectors, when only the head trains.
    vectors: Option<(Vec<Tensor>, Vec<Tensor>)>,
    /// Outputs of the frozen layers (train, dev), when some but not all are frozen.
    prefix: Option<(PrefixCache, PrefixCache)>,
}

impl Phase {
    /// How the training documents' chunks are encoded (`doc_ids` index the training split).
    fn train_prefix<'a>(&'a self, doc_ids: &'a [usize]) -> Prefix<'a> {
        match (&self.prefix, self.frozen) {
            (Some((cache, _)), _) => Prefix::Cached { cache, doc_ids },
            (None, Some(layers)) => Prefix::Frozen { layers },
            (None, None) => Prefix::None,
        }
    }
}

/// Everything about the run that does not change between epochs.
struct Run<'a> {
    model: &'a HierarchicalClassifier,
    train: &'a Split<'a>,
    dev: &'a Split<'a>,
    cfg: &'a TrainConfig,
    device: &'a Device,
    named: Vec<(String, Var)>,
    num_layers: usize,
}

impl Run<'_> {
    /// What is frozen during the epoch after `done` completed ones.
    fn freezing_at(&self, done: usize) -> Freezing {
        match &self.cfg.unfreeze {
            Some(s) => s.freezing_at(done, self.cfg.freezing, self.num_layers),
            None => self.cfg.freezing,
        }
    }

    /// Parameter groups under `freezing`, without the heads of frozen tasks.
    fn groups(&self, freezing: Freezing) -> Vec<crate::optim::ParamGroup> {
        let tasks = self.model.config().tasks();
        let frozen: Vec<String> = self
            .cfg
            .frozen_tasks
            .iter()
            .filter(|&&t| t > 0)
            .filter_map(|&t| tasks.get(t).map(|spec| format!("tasks.{}.", spec.name)))
            .collect();
        let primary_frozen = self.cfg.frozen_tasks.contains(&0);
        let mut groups = param_groups(&self.named, self.num_layers, freezing, self.cfg.groups);
        for g in &mut groups {
            g.params.retain(|(name, _)| {
                let in_frozen_task = frozen.iter().any(|p| name.starts_with(p.as_str()));
                let primary_head = !name.starts_with("encoder:") && !name.starts_with("tasks.");
                !(in_frozen_task || primary_frozen && primary_head)
            });
        }
        groups.retain(|g| !g.params.is_empty());
        groups
    }

    /// Sets up a phase: its variables and caches.
    fn phase(&self, freezing: Freezing, on_progress: &mut impl FnMut(Progress)) -> Result<Phase> {
        let groups = self.groups(freezing);
        let vars: Vec<Var> = groups.iter().flat_map(|g| g.params.iter().map(|(_, v)| v.clone())).collect();
        let frozen = frozen_layers(freezing, self.num_layers);
        let mut phase = Phase { freezing, vars, frozen, vectors: None, prefix: None };
        if !self.cfg.cache.enabled {
            return Ok(phase);
        }
        let total: usize = self.train.docs.iter().chain(self.dev.docs).map(|d| d.chunks.len()).sum();
        let mut done = 0;
        let mut tick = |n: usize| {
            done += n;
            on_progress(Progress::Caching { done, total });
        };
        let tokens = self.cfg.max_batch_tokens;
        match frozen {
            Some(k) if k >= self.num_layers => {
                let (model, device) = (self.model, self.device);
                let mut encode = |docs: &[ChunkedDocument]| {
                    model.encode_documents(&docs.iter().collect::<Vec<_>>(), tokens, device, &mut tick)
                };
                phase.vectors = Some((encode(self.train.docs)?, encode(self.dev.docs)?));
            }
            Some(k) if k >= 1 => {
                let c = &self.cfg.cache;
                let mut build = |docs: &[ChunkedDocument], limit: usize| {
                    PrefixCache::build(self.model, docs, k, tokens, limit, &c.spill_dir, self.device, &mut tick)
                };
                let train = build(self.train.docs, c.memory_limit)?;
                let dev = build(self.dev.docs, c.memory_limit.saturating_sub(train.bytes_in_memory()))?;
                phase.prefix = Some((train, dev));
            }
            _ => {}
        }
        Ok(phase)
    }

    fn phase_log(&self, phase: &Phase, epoch: usize) -> PhaseLog {
        let trains = match phase.frozen {
            Some(k) if k >= self.num_layers => "pooling and head (encoder frozen)".to_string(),
            Some(0) => "all encoder layers (embeddings frozen), pooling and head".to_string(),
            Some(k) => format!("top {} of {} encoder layers, pooling and head", self.num_layers - k, self.num_layers),
            None => "embeddings, all encoder layers, pooling and head".to_string(),
        };
        let cache = match (&phase.vectors, &phase.prefix) {
            (Some(_), _) => "chunk vectors".to_string(),
            (None, Some((t, d))) => format!(
                "outputs of embeddings + {} frozen layers: {:.1} MiB in memory, {:.1} MiB on disk",
                t.layers(),
                (t.bytes_in_memory() + d.bytes_in_memory()) as f64 / (1 << 20) as f64,
                (t.bytes_on_disk() + d.bytes_on_disk()) as f64 / (1 << 20) as f64
            ),
            (None, None) => String::new(),
        };
        PhaseLog {
            epoch,
            trains,
            trainable_parameters: phase.vars.iter().map(|v| v.elem_count()).sum(),
            total_parameters: self.named.iter().map(|(_, v)| v.elem_count()).sum(),
            cache,
        }
    }
}

/// Trains `model` in place, from scratch or from `resume`. `on_progress` hears of phases,
/// cache building and steps; `on_epoch` runs after every epoch (to save the best model and a
/// checkpoint). Returns the logs of the epochs run here.
#[allow(clippy::too_many_arguments)]
pub fn train(
    model: &HierarchicalClassifier,
    train_split: Split,
    dev_split: Split,
    cfg: &TrainConfig,
    device: &Device,
    resume: Option<Resume>,
    mut on_progress: impl FnMut(Progress),
    mut on_epoch: impl FnMut(EpochEnd) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    if train_split.docs.is_empty() || dev_split.docs.is_empty() {
        return Err(TrainError::InvalidSetting("training and dev data must not be empty".into()));
    }
    let named = model.named_vars();
    if named.is_empty() {
        return Err(TrainError::InvalidSetting("the model was loaded for inference only".into()));
    }
    let num_layers = model.config().encoder.num_hidden_layers;
    check_labels(model, &train_split, "training")?;
    check_labels(model, &dev_split, "dev")?;
    let run = Run { model, train: &train_split, dev: &dev_split, cfg, device, named, num_layers };
    let mut state = TrainerState::start(resume.as_ref(), cfg.epochs)?;
    // The optimizer holds what trained in the last completed epoch (its moments are in the
    // checkpoint); each epoch then adds what its phase unfreezes.
    let held = run.freezing_at(state.epoch.saturating_sub(1));
    let mut optimizer = AdamW::new(run.groups(held), cfg.adamw)?;
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
    }
    // Every group's learning rate before the schedule scales it.
    let everything = Freezing { train_embeddings: true, ..Freezing::default() };
    let base_lr: HashMap<String, f64> =
        param_groups(&run.named, num_layers, everything, cfg.groups).into_iter().map(|g| (g.name, g.lr)).collect();

    let batch_size = cfg.batch_size.max(1);
    let accum = cfg.grad_accum.max(1);
    let mut stepper = Stepper::new(cfg, train_split.docs.len());
    let weights = cfg.class_weights.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;

    let mut logs: Vec<EpochLog> = Vec::new();
    let mut phase: Option<Phase> = None;
    let mut step = state.step;
    for epoch in state.epoch + 1..=cfg.epochs {
        let started = std::time::Instant::now();
        let freezing = run.freezing_at(epoch - 1);
        if phase.as_ref().is_none_or(|p| p.freezing != freezing) {
            drop(phase.take()); // free the previous phase's caches first
            let next = run.phase(freezing, &mut on_progress)?;
            optimizer.add_params(run.groups(freezing));
            on_progress(Progress::Phase(run.phase_log(&next, epoch)));
            phase = Some(next);
        }
        let phase = phase.as_ref().expect("a phase was set up above");
        let mut shuffle = StdRng::seed_from_u64(epoch_seed(cfg.seed, epoch, 1));
        let dropout = DropoutRng::new(epoch_seed(cfg.seed, epoch, 2));
        let mut order: Vec<usize> = (0..train_split.docs.len()).collect();
        order.shuffle(&mut shuffle);
        let (mut loss_sum, mut loss_count, mut skipped) = (0f64, 0usize, 0usize);
        for step_docs in order.chunks(batch_size * accum) {
            let mut summed: HashMap<TensorId, Tensor> = HashMap::new();
            let mut step_loss = 0f64;
            let chunks = step_docs.iter().map(|&i| train_split.docs[i].chunks.len()).sum();
            let batches: Vec<&[usize]> = step_docs.chunks(batch_size).collect();
            for batch in &batches {
                let labels = train_split.batch_labels(batch);
                let how = TaskLoss { task_weights: &cfg.task_weights, class_weights: weights.as_ref() };
                let out = match &phase.vectors {
                    Some((vectors, _)) => {
                        let chosen: Vec<&Tensor> = batch.iter().map(|&i| &vectors[i]).collect();
                        head_gradients(model, &chosen, &labels, &phase.vars, &dropout, how, device)?
                    }
                    None => {
                        let docs: Vec<&ChunkedDocument> = batch.iter().map(|&i| &train_split.docs[i]).collect();
                        let settings = BatchSettings {
                            max_batch_tokens: cfg.max_batch_tokens,
                            recompute: cfg.recompute,
                            loss: how,
                            prefix: phase.train_prefix(batch),
                        };
                        batch_gradients(model, &docs, &labels, &phase.vars, &dropout, settings, device)?
                    }
                };
                step_loss += out.loss as f64 / batches.len() as f64;
                accumulate(&mut summed, out.grads, batches.len())?;
            }
            let Some(factor) =
                stepper.step(&mut optimizer, &mut summed, step_loss, epoch, step, |g| base_lr[&g.name])?
            else {
                skipped += 1;
                continue;
            };
            step += 1;
            loss_sum += step_loss;
            loss_count += 1;
            on_progress(Progress::Step(StepLog {
                step,
                total_steps: stepper.schedule.total_steps,
                loss: step_loss,
                lr: cfg.groups.head_lr * factor,
                chunks,
            }));
        }

        let train_seconds = started.elapsed().as_secs_f64();
        let mut task_logs = evaluate(&run, phase)?;
        let dev_loss: f64 = task_logs.iter().enumerate().map(|(t, l)| task_weight(cfg, t) * l.dev_loss).sum();
        // The best epoch by the mean of the metric over the tasks.
        let score = epoch_score(cfg.metric, dev_loss, task_logs.iter().map(|l| &l.dev));
        let report = task_logs[0].dev.clone();
        if task_logs.len() == 1 {
            task_logs.clear();
        }
        let is_best = state.record(epoch, step, score);
        let log = EpochLog {
            epoch,
            train_loss: if loss_count > 0 { loss_sum / loss_count as f64 } else { f64::NAN },
            dev_loss,
            dev: report,
            tasks: task_logs,
            best: is_best,
            seconds: started.elapsed().as_secs_f64(),
            train_seconds,
            skipped_steps: skipped,
            trainable_parameters: phase.vars.iter().map(|v| v.elem_count()).sum(),
            total_parameters: run.named.iter().map(|(_, v)| v.elem_count()).sum(),
        };
        on_epoch(EpochEnd { log: &log, model, state: &state, optimizer: &optimizer })?;
        logs.push(log);
        if state.stops(cfg) {
            break;
        }
    }
    Ok(logs)
}

/// Gradients of the heads only, from cached chunk vectors.
fn head_gradients(
    model: &HierarchicalClassifier,
    vectors: &[&Tensor],
    labels: &[Vec<Option<usize>>],
    vars: &[Var],
    rng: &DropoutRng,
    how: TaskLoss,
    device: &Device,
) -> Result<BatchGradients> {
    let loss = task_loss(model, vectors, labels, how, Mode::Train(rng), device)?;
    let grads = loss.backward()?;
    Ok(BatchGradients {
        loss: loss.to_scalar::<f32>()?,
        grads: vars.iter().filter_map(|v| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone()))).collect(),
    })
}

/// The weight of task `t`'s loss.
fn task_weight(cfg: &TrainConfig, t: usize) -> f64 {
    cfg.task_weights.get(t).copied().unwrap_or(1.0)
}

/// Checks that a split has one label list per task, of the right length and range, and that
/// every task has at least one labelled document.
fn check_labels(model: &HierarchicalClassifier, split: &Split, what: &str) -> Result<()> {
    let tasks = model.config().tasks();
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
        if labels.iter().all(Option::is_none) {
            return Err(TrainError::InvalidSetting(format!(
                "no {what} document has a label for task \"{}\" (column \"{}\")",
                spec.name, spec.column
            )));
        }
    }
    Ok(())
}

/// Every task's dev loss and metrics (inference mode), from the phase's caches where it has them.
fn evaluate(run: &Run, phase: &Phase) -> Result<Vec<TaskLog>> {
    let (model, split, device, tokens) = (run.model, run.dev, run.device, run.cfg.max_batch_tokens);
    let docs: Vec<&ChunkedDocument> = split.docs.iter().collect();
    let vectors = match (&phase.vectors, &phase.prefix) {
        (Some((_, dev)), _) => dev.clone(),
        (None, Some((_, cache))) => {
            let doc_ids: Vec<usize> = (0..docs.len()).collect();
            let prefix = Prefix::Cached { cache, doc_ids: &doc_ids };
            let (refs, batches) = chunk_batches(&docs, tokens);
            gather_chunk_vectors(&docs, &refs, &batches, |batch| {
                encode_batch(model, &docs, &refs, batch, prefix, Mode::Eval, device)
            })?
        }
        (None, None) => model.encode_documents(&docs, tokens, device, |_| {})?,
    };
    let tasks = model.config().tasks();
    tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let chosen: Vec<(usize, usize)> =
                split.labels[t].iter().enumerate().filter_map(|(d, l)| l.map(|l| (d, l))).collect();
            let logits: Vec<Tensor> = chosen
                .iter()
                .map(|&(d, _)| Ok(model.classify_task(&vectors[d], t, Mode::Eval)?.logits))
                .collect::<Result<_>>()?;
            let logits = Tensor::stack(&logits, 0)?;
            let gold: Vec<usize> = chosen.iter().map(|&(_, l)| l).collect();
            let dev_loss = cross_entropy(&logits, &gold, None, device)?.to_scalar::<f32>()? as f64;
            let predicted: Vec<usize> = logits.argmax(1)?.to_vec1::<u32>()?.into_iter().map(|p| p as usize).collect();
            let dev =
                longread_metrics::evaluate(&spec.labels, &gold, &predicted).map_err(TrainError::InvalidSetting)?;
            Ok(TaskLog { name: spec.name.clone(), dev_loss, dev })
        })
        .collect()
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
