//! The training loop: shuffled document batches, gradients (chunk-level recomputation, or
//! cached chunk vectors when the whole encoder is frozen), accumulation, clipping, AdamW with
//! a warm-up schedule, phases of gradual unfreezing with frozen-prefix caches, evaluation on
//! the dev set after every epoch, best-epoch tracking and early stopping. Saving is the
//! caller's: `on_epoch` is told when an epoch is the best.
//!
//! The loop is here; its settings and splits are in `config`, what it reports in `logs`, the
//! state that resumes it in `state`, the optimizer step in `stepper`, what trains when in
//! `phase`, and the dev evaluation in `evaluate`.

mod config;
mod evaluate;
mod logs;
mod phase;
mod state;
mod stepper;

use std::collections::HashMap;

use candle_core::{Device, Tensor, TensorId, Var};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

pub use config::{balanced_class_weights, CacheSettings, Metric, Split, TrainConfig};
pub use logs::{EpochEnd, EpochLog, PhaseLog, Progress, StepLog, TaskLog};
pub(crate) use state::{epoch_score, epoch_seed};
pub use state::{Resume, TrainerState};
pub(crate) use stepper::{accumulate, Stepper};

use crate::error::{Result, TrainError};
use crate::groups::{param_groups, Freezing};
use crate::loss::{task_loss, TaskLoss};
use crate::optim::AdamW;
use crate::recompute::{batch_gradients, BatchGradients, BatchSettings};
use config::check_labels;
use evaluate::evaluate;
use phase::{Phase, Run};

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
