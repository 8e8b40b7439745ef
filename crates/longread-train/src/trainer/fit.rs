//! The epoch loop every classifier trainer shares (the hierarchical/sequence trainer and the
//! HAN): seeded shuffles, batches and gradient accumulation, the optimizer step, progress,
//! dev evaluation, best-epoch tracking, early stopping, and checkpoints at epoch ends and in
//! the middle of epochs. A [`TrainingTask`] says what one kind of model does in it.

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{Tensor, TensorId};
use longread_metrics::Report;
use longread_model::DropoutRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::Result;
use crate::optim::{AdamW, ParamGroup};
use crate::recompute::BatchGradients;
use crate::trainer::state::{epoch_score, epoch_seed, EpochProgress};
use crate::trainer::stepper::{accumulate, Stepper};
use crate::trainer::{EpochEnd, EpochLog, MidEpoch, Progress, Resume, StepLog, TaskLog, TrainConfig, TrainerState};

/// The dev evaluation after an epoch.
pub(crate) struct DevResult {
    /// Dev loss (weighted over tasks).
    pub(crate) dev_loss: f64,
    /// The primary task's metrics.
    pub(crate) dev: Report,
    /// Every task's, for multi-task models (empty otherwise).
    pub(crate) tasks: Vec<TaskLog>,
    /// The score that picks the best epoch (higher is better).
    pub(crate) score: f64,
}

impl DevResult {
    /// The result of tasks' logs (the primary task first): loss weighted by `task_weight`,
    /// score by `cfg.metric` averaged over the tasks.
    pub(crate) fn of_tasks(cfg: &TrainConfig, mut tasks: Vec<TaskLog>, task_weight: impl Fn(usize) -> f64) -> Self {
        let dev_loss: f64 = tasks.iter().enumerate().map(|(t, l)| task_weight(t) * l.dev_loss).sum();
        let score = epoch_score(cfg.metric, dev_loss, tasks.iter().map(|l| &l.dev));
        let dev = tasks[0].dev.clone();
        if tasks.len() == 1 {
            tasks.clear();
        }
        Self { dev_loss, dev, tasks, score }
    }
}

/// What one kind of model does in [`fit`].
pub(crate) trait TrainingTask {
    /// The model trained.
    type Model;
    /// The model.
    fn model(&self) -> &Self::Model;
    /// Training documents.
    fn documents(&self) -> usize;
    /// The optimizer for a run at `state` (before any resumed moments are imported).
    fn optimizer(&self, state: &TrainerState) -> Result<AdamW>;
    /// Gets epoch `epoch` ready (a new phase of what trains, with its caches and optimizer
    /// groups, when it changes), reporting phases and caching.
    fn begin_epoch(&mut self, epoch: usize, optimizer: &mut AdamW, on_progress: &mut dyn FnMut(Progress))
        -> Result<()>;
    /// Loss and gradients of one batch of training documents (indices).
    fn batch_gradients(&self, batch: &[usize], dropout: &DropoutRng) -> Result<BatchGradients>;
    /// What a step's progress counts for these documents (chunks, or documents).
    fn step_units(&self, docs: &[usize]) -> usize;
    /// A group's learning rate before the schedule scales it.
    fn group_lr(&self, group: &ParamGroup) -> f64;
    /// The learning rate progress reports (before the schedule).
    fn reported_lr(&self) -> f64;
    /// Evaluates on the dev documents.
    fn evaluate(&self) -> Result<DevResult>;
    /// Parameters trained now, and all of the model's.
    fn parameters(&self) -> (usize, usize);
}

/// Where the running epoch stands.
struct EpochRun {
    groups_done: usize,
    loss_sum: f64,
    loss_count: usize,
    skipped: usize,
    /// Training seconds of earlier sessions of this epoch (a mid-epoch resume).
    seconds_before: f64,
}

impl EpochRun {
    /// A new epoch, or the one a mid-epoch checkpoint was taken in; with the epoch's dropout
    /// generator (seeded with `dropout_seed`, wound forward on a resume).
    fn start(resumed: Option<EpochProgress>, dropout_seed: u64) -> (Self, DropoutRng) {
        match resumed {
            Some(p) => (
                Self {
                    groups_done: p.step_groups,
                    loss_sum: p.loss_sum,
                    loss_count: p.loss_count,
                    skipped: p.skipped,
                    seconds_before: p.train_seconds,
                },
                DropoutRng::resumed(dropout_seed, p.dropout_draws),
            ),
            None => (
                Self { groups_done: 0, loss_sum: 0.0, loss_count: 0, skipped: 0, seconds_before: 0.0 },
                DropoutRng::new(dropout_seed),
            ),
        }
    }

    /// The run's state for a checkpoint now: `state` after `step` optimizer steps, with this
    /// epoch's progress.
    fn checkpoint_state(
        &self,
        state: &TrainerState,
        step: usize,
        dropout: &DropoutRng,
        started: &Instant,
    ) -> TrainerState {
        let mut now = state.clone();
        now.step = step;
        now.in_epoch = Some(EpochProgress {
            step_groups: self.groups_done,
            loss_sum: self.loss_sum,
            loss_count: self.loss_count,
            skipped: self.skipped,
            dropout_draws: dropout.draws(),
            train_seconds: self.seconds_before + started.elapsed().as_secs_f64(),
        });
        now
    }
}

/// Runs the epochs of `task` from scratch or from `resume` (an epoch end or the middle of an
/// epoch). `on_epoch` runs after every epoch (to save the best model and a checkpoint),
/// `on_checkpoint` whenever a mid-epoch checkpoint is due (`cfg.save_every_steps`).
pub(crate) fn fit<T: TrainingTask>(
    task: &mut T,
    cfg: &TrainConfig,
    resume: Option<Resume>,
    on_progress: &mut dyn FnMut(Progress),
    on_epoch: &mut dyn FnMut(EpochEnd<T::Model>) -> Result<()>,
    on_checkpoint: &mut dyn FnMut(MidEpoch<T::Model>) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    let mut state = TrainerState::start(resume.as_ref(), cfg.epochs)?;
    let mut optimizer = task.optimizer(&state)?;
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
    }
    let batch_size = cfg.batch_size.max(1);
    let accum = cfg.grad_accum.max(1);
    let mut stepper = Stepper::new(cfg, task.documents());
    let mut logs: Vec<EpochLog> = Vec::new();
    let mut step = state.step;
    let mut last_save = Instant::now();
    for epoch in state.epoch + 1..=cfg.epochs {
        let started = Instant::now();
        task.begin_epoch(epoch, &mut optimizer, on_progress)?;
        let mut shuffle = StdRng::seed_from_u64(epoch_seed(cfg.seed, epoch, 1));
        let mut order: Vec<usize> = (0..task.documents()).collect();
        order.shuffle(&mut shuffle);
        let (mut run, dropout) = EpochRun::start(state.in_epoch.take(), epoch_seed(cfg.seed, epoch, 2));
        let groups: Vec<&[usize]> = order.chunks(batch_size * accum).collect();
        for (g, step_docs) in groups.iter().enumerate().skip(run.groups_done) {
            let mut summed: HashMap<TensorId, Tensor> = HashMap::new();
            let mut step_loss = 0f64;
            let batches: Vec<&[usize]> = step_docs.chunks(batch_size).collect();
            for batch in &batches {
                let out = task.batch_gradients(batch, &dropout)?;
                step_loss += out.loss as f64 / batches.len() as f64;
                accumulate(&mut summed, out.grads, batches.len())?;
            }
            let stepped = stepper.step(&mut optimizer, &mut summed, step_loss, epoch, step, |gr| task.group_lr(gr))?;
            run.groups_done = g + 1;
            match stepped {
                None => run.skipped += 1,
                Some(factor) => {
                    step += 1;
                    run.loss_sum += step_loss;
                    run.loss_count += 1;
                    on_progress(Progress::Step(StepLog {
                        step,
                        total_steps: stepper.schedule.total_steps,
                        loss: step_loss,
                        lr: task.reported_lr() * factor,
                        chunks: task.step_units(step_docs),
                    }));
                }
            }
            if run.groups_done < groups.len() && checkpoint_due(cfg, run.groups_done, &last_save) {
                let now = run.checkpoint_state(&state, step, &dropout, &started);
                on_checkpoint(MidEpoch { model: task.model(), state: &now, optimizer: &optimizer })?;
                last_save = Instant::now();
            }
        }

        let train_seconds = run.seconds_before + started.elapsed().as_secs_f64();
        let dev = task.evaluate()?;
        let is_best = state.record(epoch, step, dev.score);
        let (trainable_parameters, total_parameters) = task.parameters();
        let log = EpochLog {
            epoch,
            train_loss: if run.loss_count > 0 { run.loss_sum / run.loss_count as f64 } else { f64::NAN },
            dev_loss: dev.dev_loss,
            dev: dev.dev,
            tasks: dev.tasks,
            best: is_best,
            seconds: run.seconds_before + started.elapsed().as_secs_f64(),
            train_seconds,
            skipped_steps: run.skipped,
            trainable_parameters,
            total_parameters,
        };
        on_epoch(EpochEnd { log: &log, model: task.model(), state: &state, optimizer: &optimizer })?;
        logs.push(log);
        last_save = Instant::now();
        if state.stops(cfg) {
            break;
        }
    }
    Ok(logs)
}

/// Whether a mid-epoch checkpoint is due after `groups_done` step groups of the epoch.
fn checkpoint_due(cfg: &TrainConfig, groups_done: usize, last_save: &Instant) -> bool {
    match cfg.save_every_steps {
        Some(0) => false,
        Some(n) => groups_done.is_multiple_of(n),
        None => last_save.elapsed().as_secs_f64() >= cfg.save_every_seconds,
    }
}
