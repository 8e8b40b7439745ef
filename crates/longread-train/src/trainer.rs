//! The training loop: shuffled document batches, gradients (chunk-level recomputation, or
//! cached chunk vectors when the whole encoder is frozen), accumulation, clipping, AdamW with
//! a warm-up schedule, evaluation on the dev set after every epoch, best-epoch tracking and
//! early stopping. Saving is the caller's: `on_epoch` is told when an epoch is the best.

use std::collections::HashMap;

use candle_core::{Device, Tensor, TensorId, Var};
use longread_metrics::Report;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::clip::clip_grad_norm;
use crate::error::{Result, TrainError};
use crate::groups::{param_groups, Freezing, GroupSettings};
use crate::optim::{AdamW, AdamWConfig};
use crate::recompute::{batch_gradients, cross_entropy, BatchGradients, BatchSettings};
use crate::schedule::{Decay, Schedule};

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
    /// What is frozen.
    pub freezing: Freezing,
    /// Learning rates and weight decay.
    pub groups: GroupSettings,
    /// AdamW's betas and epsilon.
    pub adamw: AdamWConfig,
    /// Optimizer steps with NaN/inf gradients in a row that stop the run.
    pub max_bad_steps: usize,
    /// Stop after this epoch (the run can be resumed later); `None` runs all epochs.
    pub stop_after_epoch: Option<usize>,
}

/// Documents and their gold labels.
#[derive(Debug, Clone, Copy)]
pub struct Split<'a> {
    /// Chunked documents.
    pub docs: &'a [ChunkedDocument],
    /// Label indices.
    pub labels: &'a [usize],
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
    /// Chunks encoded in this step.
    pub chunks: usize,
}

/// What an epoch produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochLog {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Mean dev loss.
    pub dev_loss: f64,
    /// Dev metrics.
    pub dev: Report,
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
pub struct EpochEnd<'a> {
    /// The epoch's log.
    pub log: &'a EpochLog,
    /// The model after the epoch.
    pub model: &'a HierarchicalClassifier,
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

/// Seed of an epoch's generators.
fn epoch_seed(seed: u64, epoch: usize, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (epoch as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ stream
}

/// Trains `model` in place, from scratch or from `resume`. `on_epoch` runs after every epoch
/// (to save the best model and a checkpoint); returns the logs of the epochs run here.
#[allow(clippy::too_many_arguments)]
pub fn train(
    model: &HierarchicalClassifier,
    train_split: Split,
    dev_split: Split,
    cfg: &TrainConfig,
    device: &Device,
    resume: Option<Resume>,
    mut on_step: impl FnMut(StepLog),
    mut on_epoch: impl FnMut(EpochEnd) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    if train_split.docs.is_empty() || dev_split.docs.is_empty() {
        return Err(TrainError::InvalidSetting("training and dev data must not be empty".into()));
    }
    let named = model.named_vars();
    if named.is_empty() {
        return Err(TrainError::InvalidSetting("the model was loaded for inference only".into()));
    }
    let groups = param_groups(&named, model.config().encoder.num_hidden_layers, cfg.freezing, cfg.groups);
    let vars: Vec<Var> = groups.iter().flat_map(|g| g.params.iter().map(|(_, v)| v.clone())).collect();
    let trainable_parameters = vars.iter().map(|v| v.elem_count()).sum();
    let head_only = groups.iter().all(|g| g.name.starts_with("head"));
    let base_lr: HashMap<String, f64> = groups.iter().map(|g| (g.name.clone(), g.lr)).collect();
    let mut optimizer = AdamW::new(groups, cfg.adamw)?;
    let mut state = TrainerState { epoch: 0, step: 0, best: None, since_best: 0 };
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
        state = r.state;
        if state.epoch >= cfg.epochs {
            return Err(TrainError::InvalidSetting(format!(
                "the run to resume has completed {} of {} epochs: nothing is left to do",
                state.epoch, cfg.epochs
            )));
        }
    }

    let batch_size = cfg.batch_size.max(1);
    let accum = cfg.grad_accum.max(1);
    let steps_per_epoch = train_split.docs.len().div_ceil(batch_size).div_ceil(accum);
    let total_steps = steps_per_epoch * cfg.epochs;
    let schedule = Schedule {
        warmup_steps: (cfg.warmup_ratio * total_steps as f64).round() as usize,
        total_steps,
        decay: cfg.decay,
    };
    let weights = cfg.class_weights.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    // With the whole encoder frozen, chunk vectors never change: compute them once
    // (dropout inside frozen layers is off).
    let cache = |docs: &[ChunkedDocument]| {
        model.encode_documents(&docs.iter().collect::<Vec<_>>(), cfg.max_batch_tokens, device, |_| {})
    };
    let train_cache = if head_only { Some(cache(train_split.docs)?) } else { None };
    let dev_cache = if head_only { Some(cache(dev_split.docs)?) } else { None };

    let mut logs: Vec<EpochLog> = Vec::new();
    let mut step = state.step;
    let mut bad_in_a_row = 0usize;
    for epoch in state.epoch + 1..=cfg.epochs {
        let started = std::time::Instant::now();
        let mut shuffle = StdRng::seed_from_u64(epoch_seed(cfg.seed, epoch, 1));
        let dropout = DropoutRng::new(epoch_seed(cfg.seed, epoch, 2));
        let mut order: Vec<usize> = (0..train_split.docs.len()).collect();
        order.shuffle(&mut shuffle);
        let (mut loss_sum, mut loss_count, mut skipped) = (0f64, 0usize, 0usize);
        for step_docs in order.chunks(batch_size * accum) {
            let mut summed: HashMap<TensorId, Tensor> = HashMap::new();
            let (mut step_loss, mut chunks) = (0f64, 0usize);
            let batches: Vec<&[usize]> = step_docs.chunks(batch_size).collect();
            for batch in &batches {
                let labels: Vec<usize> = batch.iter().map(|&i| train_split.labels[i]).collect();
                let out = match &train_cache {
                    Some(vectors) => {
                        let chosen: Vec<&Tensor> = batch.iter().map(|&i| &vectors[i]).collect();
                        head_gradients(model, &chosen, &labels, &vars, &dropout, weights.as_ref(), device)?
                    }
                    None => {
                        let docs: Vec<&ChunkedDocument> = batch.iter().map(|&i| &train_split.docs[i]).collect();
                        chunks += docs.iter().map(|d| d.chunks.len()).sum::<usize>();
                        let settings = BatchSettings {
                            max_batch_tokens: cfg.max_batch_tokens,
                            recompute: cfg.recompute,
                            class_weights: weights.as_ref(),
                        };
                        batch_gradients(model, &docs, &labels, &vars, &dropout, settings, device)?
                    }
                };
                step_loss += out.loss as f64 / batches.len() as f64;
                for (id, g) in out.grads {
                    let g = (g / batches.len() as f64)?;
                    let total = match summed.remove(&id) {
                        Some(prev) => (prev + g)?,
                        None => g,
                    };
                    summed.insert(id, total);
                }
            }
            let norm = clip_grad_norm(&mut summed, cfg.max_grad_norm)?;
            if !step_loss.is_finite() || !norm.is_finite() {
                skipped += 1;
                bad_in_a_row += 1;
                if bad_in_a_row >= cfg.max_bad_steps.max(1) {
                    return Err(TrainError::InvalidSetting(format!(
                        "{bad_in_a_row} optimizer steps in a row had NaN/inf loss or gradients (epoch {epoch}, step {step}); \
                         training stopped, the best checkpoint so far is kept. Lower --lr or check the data."
                    )));
                }
                continue;
            }
            bad_in_a_row = 0;
            let factor = schedule.factor(step);
            optimizer.set_lr(|g| base_lr[&g.name] * factor);
            optimizer.step_with(|v| summed.get(&v.as_tensor().id()).cloned())?;
            step += 1;
            loss_sum += step_loss;
            loss_count += 1;
            on_step(StepLog { step, total_steps, loss: step_loss, lr: cfg.groups.head_lr * factor, chunks });
        }

        let train_seconds = started.elapsed().as_secs_f64();
        let (dev_loss, report) = evaluate(model, dev_split, dev_cache.as_deref(), cfg, device)?;
        let score = match cfg.metric {
            Metric::MacroF1 => report.macro_f1,
            Metric::WeightedF1 => report.weighted_f1,
            Metric::Accuracy => report.accuracy,
            Metric::DevLoss => -dev_loss,
        };
        let is_best = state.best.is_none_or(|b| score > b);
        if is_best {
            state.best = Some(score);
            state.since_best = 0;
        } else {
            state.since_best += 1;
        }
        state.epoch = epoch;
        state.step = step;
        let log = EpochLog {
            epoch,
            train_loss: if loss_count > 0 { loss_sum / loss_count as f64 } else { f64::NAN },
            dev_loss,
            dev: report,
            best: is_best,
            seconds: started.elapsed().as_secs_f64(),
            train_seconds,
            skipped_steps: skipped,
            trainable_parameters,
        };
        on_epoch(EpochEnd { log: &log, model, state: &state, optimizer: &optimizer })?;
        logs.push(log);
        if cfg.patience > 0 && state.since_best >= cfg.patience || cfg.stop_after_epoch == Some(epoch) {
            break;
        }
    }
    Ok(logs)
}

/// Gradients of the head only, from cached chunk vectors.
fn head_gradients(
    model: &HierarchicalClassifier,
    vectors: &[&Tensor],
    labels: &[usize],
    vars: &[Var],
    rng: &DropoutRng,
    weights: Option<&Tensor>,
    device: &Device,
) -> Result<BatchGradients> {
    let logits: Vec<Tensor> =
        vectors.iter().map(|v| Ok(model.classify(v, Mode::Train(rng))?.logits)).collect::<Result<_>>()?;
    let loss = cross_entropy(&Tensor::stack(&logits, 0)?, labels, weights, device)?;
    let grads = loss.backward()?;
    Ok(BatchGradients {
        loss: loss.to_scalar::<f32>()?,
        grads: vars.iter().filter_map(|v| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone()))).collect(),
    })
}

/// Dev loss and metrics (inference mode).
fn evaluate(
    model: &HierarchicalClassifier,
    split: Split,
    cache: Option<&[Tensor]>,
    cfg: &TrainConfig,
    device: &Device,
) -> Result<(f64, Report)> {
    let vectors = match cache {
        Some(v) => v.to_vec(),
        None => model.encode_documents(&split.docs.iter().collect::<Vec<_>>(), cfg.max_batch_tokens, device, |_| {})?,
    };
    let logits: Vec<Tensor> =
        vectors.iter().map(|v| Ok(model.classify(v, Mode::Eval)?.logits)).collect::<Result<_>>()?;
    let logits = Tensor::stack(&logits, 0)?;
    let loss = cross_entropy(&logits, split.labels, None, device)?.to_scalar::<f32>()? as f64;
    let predicted: Vec<usize> = logits.argmax(1)?.to_vec1::<u32>()?.into_iter().map(|p| p as usize).collect();
    let report =
        longread_metrics::evaluate(model.labels(), split.labels, &predicted).map_err(TrainError::InvalidSetting)?;
    Ok((loss, report))
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
