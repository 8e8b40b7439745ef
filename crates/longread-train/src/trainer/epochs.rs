//! Epoch-based runs in the shared loop ([`fit`](super::fit)): the classifier trainers (the
//! hierarchical/sequence one and the HAN) step through the training documents in a seeded
//! shuffle each epoch, evaluate on the dev documents at its end, keep the best epoch and stop
//! early. An [`EpochTask`] says what one kind of classifier does; [`Epochs`] makes it a
//! [`TrainingTask`].

use std::time::Duration;

use longread_metrics::Report;
use longread_model::DropoutRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::Result;
use crate::gradients::StepGradients;
use crate::optim::{AdamW, ParamGroup};
use crate::trainer::fit::{RoundPlan, RoundStats, StepAt, TrainingTask};
use crate::trainer::state::{epoch_score, epoch_seed};
use crate::trainer::{EpochLog, Keep, Progress, Resume, Stepper, TaskLog, TrainConfig, TrainerState};

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
    pub(crate) fn of_tasks(
        cfg: &TrainConfig,
        mut tasks: Vec<TaskLog>,
        task_weight: impl Fn(usize) -> f64,
    ) -> Result<Self> {
        let dev_loss: f64 = tasks.iter().enumerate().map(|(t, l)| task_weight(t) * l.dev_loss).sum();
        let score = epoch_score(cfg.metric, dev_loss, tasks.iter().map(|l| &l.dev))?;
        let dev = tasks[0].dev.clone();
        if tasks.len() == 1 {
            tasks.clear();
        }
        Ok(Self { dev_loss, dev, tasks, score })
    }
}

/// What one kind of classifier does in an epoch-based run.
pub(crate) trait EpochTask {
    /// The model trained.
    type Model;
    /// The model.
    fn model(&self) -> &Self::Model;
    /// The run's settings.
    fn config(&self) -> &TrainConfig;
    /// Training documents.
    fn documents(&self) -> usize;
    /// Dev documents (0: a run without a dev set, which evaluates nothing).
    fn dev_documents(&self) -> usize;
    /// The optimizer for a run at `state` (before any resumed moments are imported).
    fn optimizer(&self, state: &TrainerState) -> Result<AdamW>;
    /// Gets epoch `epoch` ready (see [`TrainingTask::begin_round`]).
    fn begin_epoch(&mut self, epoch: usize, optimizer: &mut AdamW, on_progress: &mut dyn FnMut(Progress))
        -> Result<()>;
    /// Loss of one batch of training documents (indices), its gradients added into `grads`.
    fn batch_gradients(&self, batch: &[usize], dropout: &DropoutRng, grads: &mut StepGradients) -> Result<f32>;
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
    /// Where the model trains (for the epoch's peak GPU memory).
    fn device(&self) -> &candle_core::Device;
}

/// An [`EpochTask`] in the shared loop: a round is an epoch.
pub(crate) struct Epochs<T>(pub(crate) T);

impl<T: EpochTask> TrainingTask for Epochs<T> {
    type Model = T::Model;
    type Log = EpochLog;

    fn model(&self) -> &T::Model {
        self.0.model()
    }

    fn start_state(&self, resume: Option<&Resume>) -> Result<TrainerState> {
        TrainerState::start(resume, self.0.config().epochs)
    }

    fn stepper(&self) -> Stepper {
        Stepper::new(self.0.config(), self.0.documents())
    }

    fn optimizer(&self, state: &TrainerState) -> Result<AdamW> {
        self.0.optimizer(state)
    }

    fn begin_round(
        &mut self,
        epoch: usize,
        optimizer: &mut AdamW,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<()> {
        self.0.begin_epoch(epoch, optimizer, on_progress)?;
        longread_model::device::reset_peak_memory(self.0.device());
        Ok(())
    }

    /// The epoch's documents in a shuffle seeded by the run's seed and the epoch, in steps of
    /// `batch_size · grad_accum` documents, each split into batches of `batch_size`.
    fn plan(&self, epoch: usize, _first_step: usize) -> Option<RoundPlan> {
        let cfg = self.0.config();
        if epoch > cfg.epochs {
            return None;
        }
        let (batch_size, accum) = (cfg.batch_size.max(1), cfg.grad_accum.max(1));
        let mut order: Vec<usize> = (0..self.0.documents()).collect();
        order.shuffle(&mut StdRng::seed_from_u64(epoch_seed(cfg.seed, epoch, 1)));
        let steps = order.chunks(batch_size * accum).map(|s| s.chunks(batch_size).map(<[usize]>::to_vec).collect());
        Some(RoundPlan { steps: steps.collect(), dropout_seed: epoch_seed(cfg.seed, epoch, 2) })
    }

    fn batch_gradients(&self, batch: &[usize], at: &StepAt, grads: &mut StepGradients) -> Result<Option<f32>> {
        self.0.batch_gradients(batch, at.dropout, grads).map(Some)
    }

    fn step_units(&self, docs: &[usize]) -> usize {
        self.0.step_units(docs)
    }

    fn group_lr(&self, group: &ParamGroup) -> f64 {
        self.0.group_lr(group)
    }

    fn reported_lr(&self) -> f64 {
        self.0.reported_lr()
    }

    fn end_round(&mut self, stats: &RoundStats, state: &mut TrainerState) -> Result<EpochLog> {
        let dev = if self.0.dev_documents() == 0 { None } else { Some(self.0.evaluate()?) };
        let best = state.record(stats.round, stats.step, dev.as_ref().map(|d| d.score));
        let saved = best || self.0.config().keep == Keep::Last;
        let (trainable_parameters, total_parameters) = self.0.parameters();
        let (dev_loss, dev, tasks) = match dev {
            Some(d) => (Some(d.dev_loss), Some(d.dev), d.tasks),
            None => (None, None, Vec::new()),
        };
        Ok(EpochLog {
            epoch: stats.round,
            train_loss: stats.train_loss,
            dev_loss,
            dev,
            tasks,
            best,
            saved,
            seconds: stats.seconds(),
            train_seconds: stats.train_seconds,
            skipped_steps: stats.skipped,
            trainable_parameters,
            total_parameters,
            peak_gpu_bytes: longread_model::device::peak_memory_bytes(self.0.device()),
        })
    }

    fn stops(&self, state: &TrainerState) -> bool {
        state.stops(self.0.config())
    }

    fn checkpoint_due(&self, steps_done: usize, since_save: Duration) -> bool {
        let cfg = self.0.config();
        match cfg.save_every_steps {
            Some(0) => false,
            Some(n) => steps_done.is_multiple_of(n),
            None => since_save.as_secs_f64() >= cfg.save_every_seconds,
        }
    }
}
