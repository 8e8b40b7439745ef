//! The training loop: shuffled document batches, gradients (chunk-level recomputation, or
//! cached chunk vectors when the whole encoder is frozen), accumulation, clipping, AdamW with
//! a warm-up schedule, phases of gradual unfreezing with frozen-prefix caches, evaluation on
//! the dev set after every epoch, best-epoch tracking and early stopping. Saving is the
//! caller's: `on_epoch` is told when an epoch's model is to be kept (the best, or
//! every epoch with `Keep::Last`).
//!
//! The loop is here; its settings and splits are in `config`, what it reports in `logs`, the
//! state that resumes it in `state`, the optimizer step in `stepper`, what trains when in
//! `phase`, and the dev evaluation in `evaluate`.

mod config;
mod epochs;
mod evaluate;
mod fit;
mod logs;
mod phase;
mod state;
mod stepper;

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;

pub use config::{balanced_class_weights, CacheSettings, Keep, Metric, Split, TrainConfig};
pub(crate) use epochs::{DevResult, EpochTask, Epochs};
pub(crate) use evaluate::{dev_report, multi_label_dev};
pub(crate) use fit::{fit, RoundPlan, RoundStats, StepAt, TrainingTask};
pub use logs::{EpochEnd, EpochLog, MidEpoch, PhaseLog, PretrainLog, PretrainStep, Progress, StepLog, TaskLog};
pub(crate) use state::{epoch_score, roc_auc_without};
pub use state::{EpochProgress, Resume, TrainerState};
pub(crate) use stepper::Stepper;

use crate::error::{Result, TrainError};
use crate::gradients::StepGradients;
use crate::groups::{param_groups, Freezing};
use crate::loss::{task_loss, MultiLabelGold, TaskLoss};
use crate::optim::{AdamW, ParamGroup};
use crate::recompute::{add_batch_gradients, BatchSettings};
use config::check_labels;
use evaluate::evaluate;
use phase::{Phase, Run};

/// Trains `model` in place, from scratch or from `resume` (an epoch end or the middle of an
/// epoch). `on_progress` hears of phases, cache building and steps; `on_epoch` runs after every
/// epoch (to save the best model and a checkpoint), `on_checkpoint` when a mid-epoch checkpoint
/// is due (`cfg.save_every_steps`). Returns the logs of the epochs run here.
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
    mut on_checkpoint: impl FnMut(MidEpoch) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    // An empty dev set is a run without one (`--dev-split 0`): no evaluation, the last epoch kept.
    if train_split.docs.is_empty() {
        return Err(TrainError::InvalidSetting("training data must not be empty".into()));
    }
    let named = model.named_vars();
    if named.is_empty() {
        return Err(TrainError::InvalidSetting("the model was loaded for inference only".into()));
    }
    let num_layers = model.config().encoder.num_hidden_layers;
    if cfg.freezing.freeze_bottom > num_layers {
        return Err(TrainError::InvalidSetting(format!(
            "--freeze-bottom {}: the encoder has {num_layers} layers (--freeze-base freezes all of it)",
            cfg.freezing.freeze_bottom
        )));
    }
    if let Some(schedule) = &cfg.unfreeze {
        schedule.check_layers(num_layers)?;
    }
    check_labels(model, &train_split, "training")?;
    check_labels(model, &dev_split, "dev")?;
    let run = Run { model, train: &train_split, dev: &dev_split, cfg, device, named, num_layers };
    // Every group's learning rate before the schedule scales it.
    let everything = Freezing { train_embeddings: true, ..Freezing::default() };
    let base_lr: HashMap<String, f64> =
        param_groups(&run.named, num_layers, everything, cfg.groups).into_iter().map(|g| (g.name, g.lr)).collect();
    let weights = cfg.class_weights.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    let pos_weight = cfg.pos_weight.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    let mut task = Epochs(ClassifierTask { run, base_lr, weights, pos_weight, phase: None });
    fit(&mut task, resume, &mut on_progress, &mut on_epoch, &mut on_checkpoint)
}

/// The hierarchical (or sequence) classifier in the shared loop: phases of what trains, with
/// their caches; gradients from cached chunk vectors or by chunk recomputation.
struct ClassifierTask<'a> {
    run: Run<'a>,
    base_lr: HashMap<String, f64>,
    weights: Option<Tensor>,
    /// A multi-label primary task's `--pos-weight` (`[labels]`).
    pos_weight: Option<Tensor>,
    phase: Option<Phase>,
}

impl EpochTask for ClassifierTask<'_> {
    type Model = HierarchicalClassifier;

    fn device(&self) -> &candle_core::Device {
        self.run.device
    }

    fn config(&self) -> &TrainConfig {
        self.run.cfg
    }

    fn model(&self) -> &HierarchicalClassifier {
        self.run.model
    }

    fn documents(&self) -> usize {
        self.run.train.docs.len()
    }

    fn dev_documents(&self) -> usize {
        self.run.dev.docs.len()
    }

    fn optimizer(&self, state: &TrainerState) -> Result<AdamW> {
        // The optimizer holds what trained when the checkpoint was taken: in the last
        // completed epoch, or in the epoch in progress (its moments are in the checkpoint);
        // each epoch then adds what its phase unfreezes.
        let at = if state.in_epoch.is_some() { state.epoch } else { state.epoch.saturating_sub(1) };
        AdamW::new(self.run.groups(self.run.freezing_at(at)), self.run.cfg.adamw)
    }

    fn begin_epoch(
        &mut self,
        epoch: usize,
        optimizer: &mut AdamW,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<()> {
        let freezing = self.run.freezing_at(epoch - 1);
        if self.phase.as_ref().is_none_or(|p| p.freezing != freezing) {
            drop(self.phase.take()); // free the previous phase's caches first
            let next = self.run.phase(freezing, &mut &mut *on_progress)?;
            optimizer.add_params(self.run.groups(freezing));
            on_progress(Progress::Phase(self.run.phase_log(&next, epoch)));
            self.phase = Some(next);
        }
        Ok(())
    }

    fn batch_gradients(&self, batch: &[usize], dropout: &DropoutRng, grads: &mut StepGradients) -> Result<f32> {
        let (run, phase) = (&self.run, self.phase.as_ref().expect("begin_epoch sets the phase"));
        let labels = run.train.batch_labels(batch);
        let offsets = run.train.batch_offsets(batch);
        let sets = run.train.batch_sets(batch);
        let how = TaskLoss {
            task_weights: &run.cfg.task_weights,
            class_weights: self.weights.as_ref(),
            offsets: offsets.as_deref(),
            multi_label: sets.as_deref().map(|sets| MultiLabelGold {
                sets,
                labels: run.model.labels().len(),
                pos_weight: self.pos_weight.as_ref(),
            }),
        };
        match &phase.vectors {
            Some((vectors, _)) => {
                let chosen: Vec<&Tensor> = batch.iter().map(|&i| &vectors[i]).collect();
                // The heads alone, from cached chunk vectors.
                let loss = task_loss(run.model, &chosen, &labels, how, Mode::Train(dropout), run.device)?;
                grads.backward_loss_value(&loss, &phase.vars)
            }
            None => {
                let docs: Vec<&ChunkedDocument> = batch.iter().map(|&i| &run.train.docs[i]).collect();
                let settings = BatchSettings {
                    max_batch_tokens: run.cfg.max_batch_tokens,
                    recompute: run.cfg.recompute,
                    loss: how,
                    prefix: phase.train_prefix(batch),
                };
                add_batch_gradients(run.model, &docs, &labels, &phase.vars, dropout, settings, run.device, grads)
            }
        }
    }

    fn step_units(&self, docs: &[usize]) -> usize {
        docs.iter().map(|&i| self.run.train.docs[i].chunks.len()).sum()
    }

    fn group_lr(&self, group: &ParamGroup) -> f64 {
        self.base_lr[&group.name]
    }

    fn reported_lr(&self) -> f64 {
        self.run.cfg.groups.head_lr
    }

    fn evaluate(&self) -> Result<DevResult> {
        let phase = self.phase.as_ref().expect("begin_epoch sets the phase");
        let tasks = evaluate(&self.run, phase)?;
        DevResult::of_tasks(self.run.cfg, tasks, |t| task_weight(self.run.cfg, t))
    }

    fn parameters(&self) -> (usize, usize) {
        let trainable = self.phase.as_ref().map_or(0, |p| p.vars.iter().map(|v| v.elem_count()).sum());
        (trainable, self.run.named.iter().map(|(_, v)| v.elem_count()).sum())
    }
}

/// The weight of task `t`'s loss.
fn task_weight(cfg: &TrainConfig, t: usize) -> f64 {
    cfg.task_weights.get(t).copied().unwrap_or(1.0)
}
