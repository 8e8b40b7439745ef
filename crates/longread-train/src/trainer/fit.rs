//! The loop every trainer shares (the hierarchical/sequence trainer, the HAN and MLM
//! pretraining): rounds of optimizer steps (epochs, or the steps between two evaluations),
//! gradient accumulation, the optimizer step, progress, an evaluation at the end of every
//! round, best-round tracking, stopping, and checkpoints at round ends and inside rounds. A
//! [`TrainingTask`] says what one kind of run does in it: which items make each step, their
//! gradients, and what a round's end evaluates and logs.

use std::time::{Duration, Instant};

use longread_model::layers::weight_casts::StepCasts;
use longread_model::DropoutRng;

use crate::error::Result;
use crate::gradients::StepGradients;
use crate::optim::{AdamW, ParamGroup};
use crate::trainer::state::EpochProgress;
use crate::trainer::stepper::Stepper;
use crate::trainer::{EpochEnd, MidEpoch, Progress, Resume, StepLog, TrainerState};

/// The optimizer steps of one round.
pub(crate) struct RoundPlan {
    /// Each step's batches, each batch a list of item indices (documents, sequences).
    pub(crate) steps: Vec<Vec<Vec<usize>>>,
    /// Seed of the round's dropout generator.
    pub(crate) dropout_seed: u64,
}

/// The step a batch belongs to.
pub(crate) struct StepAt<'a> {
    /// Steps before it in the run (0-based), skipped ones included.
    pub(crate) step: usize,
    /// The round's dropout generator.
    pub(crate) dropout: &'a DropoutRng,
}

/// What the steps of a round did, for its log.
pub(crate) struct RoundStats {
    /// 1-based round.
    pub(crate) round: usize,
    /// Steps of the run so far, skipped ones included.
    pub(crate) step: usize,
    /// Mean loss of the round's steps taken (NaN when none was).
    pub(crate) train_loss: f64,
    /// Seconds of the round's training steps (those before a mid-round resume included).
    pub(crate) train_seconds: f64,
    /// Steps skipped (NaN/inf).
    pub(crate) skipped: usize,
    /// Units (chunks, documents, tokens) of the steps taken since the round started or resumed.
    pub(crate) units: usize,
    /// The reported learning rate at the round's last step.
    pub(crate) lr: f64,
    seconds_before: f64,
    started: Instant,
}

impl RoundStats {
    /// Wall-clock seconds of the round so far (training and, once done, evaluation).
    pub(crate) fn seconds(&self) -> f64 {
        self.seconds_before + self.started.elapsed().as_secs_f64()
    }
}

/// What [`fit`] calls at the end of every round of a task `T`.
pub(crate) type OnRound<'a, T> =
    dyn FnMut(EpochEnd<<T as TrainingTask>::Model, <T as TrainingTask>::Log>) -> Result<()> + 'a;

/// What one kind of run does in [`fit`].
pub(crate) trait TrainingTask {
    /// The model trained.
    type Model;
    /// What a round's end logs.
    type Log;
    /// The model.
    fn model(&self) -> &Self::Model;
    /// The state the run starts from (`resume`'s, or a new run's); refused when nothing is
    /// left to do.
    fn start_state(&self, resume: Option<&Resume>) -> Result<TrainerState>;
    /// The run's schedule, clipping and NaN guard.
    fn stepper(&self) -> Stepper;
    /// The optimizer for a run at `state` (before any resumed moments are imported).
    fn optimizer(&self, state: &TrainerState) -> Result<AdamW>;
    /// Gets round `round` ready (a new phase of what trains, with its caches and optimizer
    /// groups, when it changes), reporting phases and caching.
    fn begin_round(&mut self, round: usize, optimizer: &mut AdamW, on_progress: &mut dyn FnMut(Progress))
        -> Result<()>;
    /// The steps of round `round`, which starts after `first_step` steps; `None` when the run
    /// is complete.
    fn plan(&self, round: usize, first_step: usize) -> Option<RoundPlan>;
    /// Loss of one batch, its gradients added into the step's `grads` (which scale its loss
    /// for a step of several batches); `None` when it has nothing to learn from (a step
    /// without any gradient is skipped).
    fn batch_gradients(&self, batch: &[usize], at: &StepAt, grads: &mut StepGradients) -> Result<Option<f32>>;
    /// What a step's progress counts for these items (chunks, documents, tokens).
    fn step_units(&self, items: &[usize]) -> usize;
    /// A group's learning rate before the schedule scales it.
    fn group_lr(&self, group: &ParamGroup) -> f64;
    /// The learning rate progress reports (before the schedule).
    fn reported_lr(&self) -> f64;
    /// Evaluates at the end of a round, records it in `state` and returns its log.
    fn end_round(&mut self, stats: &RoundStats, state: &mut TrainerState) -> Result<Self::Log>;
    /// Whether the run ends after the round just recorded in `state`.
    fn stops(&self, state: &TrainerState) -> bool;
    /// Whether a checkpoint inside the round is due after `steps_done` of its steps,
    /// `since_save` after the last one.
    fn checkpoint_due(&self, steps_done: usize, since_save: Duration) -> bool;
    /// Whether a checkpoint can be taken inside a round (a stop asked for waits for the
    /// round's end when it cannot).
    fn mid_round_checkpoints(&self) -> bool {
        true
    }
}

/// Where the running round stands.
struct RoundRun {
    steps_done: usize,
    loss_sum: f64,
    loss_count: usize,
    skipped: usize,
    units: usize,
    lr: f64,
    /// Training seconds of this round before a mid-round resume.
    seconds_before: f64,
    started: Instant,
}

impl RoundRun {
    /// A new round, or the one a mid-round checkpoint was taken in; with the round's dropout
    /// generator (seeded with `dropout_seed`, wound forward on a resume).
    fn start(resumed: Option<EpochProgress>, dropout_seed: u64, started: Instant) -> (Self, DropoutRng) {
        let fresh = Self {
            steps_done: 0,
            loss_sum: 0.0,
            loss_count: 0,
            skipped: 0,
            units: 0,
            lr: f64::NAN,
            seconds_before: 0.0,
            started,
        };
        match resumed {
            Some(p) => (
                Self {
                    steps_done: p.step_groups,
                    loss_sum: p.loss_sum,
                    loss_count: p.loss_count,
                    skipped: p.skipped,
                    seconds_before: p.train_seconds,
                    ..fresh
                },
                DropoutRng::resumed(dropout_seed, p.dropout_draws),
            ),
            None => (fresh, DropoutRng::new(dropout_seed)),
        }
    }

    /// The run's state for a checkpoint now: `state` after `step` steps, with this round's
    /// progress.
    fn checkpoint_state(&self, state: &TrainerState, step: usize, dropout: &DropoutRng) -> TrainerState {
        let mut now = state.clone();
        now.step = step;
        now.in_epoch = Some(EpochProgress {
            step_groups: self.steps_done,
            loss_sum: self.loss_sum,
            loss_count: self.loss_count,
            skipped: self.skipped,
            dropout_draws: dropout.draws(),
            train_seconds: self.seconds_before + self.started.elapsed().as_secs_f64(),
        });
        now
    }

    /// The round's figures once its steps are done, `step` steps into the run.
    fn stats(self, round: usize, step: usize) -> RoundStats {
        RoundStats {
            round,
            step,
            train_loss: if self.loss_count > 0 { self.loss_sum / self.loss_count as f64 } else { f64::NAN },
            train_seconds: self.seconds_before + self.started.elapsed().as_secs_f64(),
            skipped: self.skipped,
            units: self.units,
            lr: self.lr,
            seconds_before: self.seconds_before,
            started: self.started,
        }
    }
}

/// Runs the rounds of `task` from scratch or from `resume` (a round's end or its middle).
/// `on_round` runs after every round (to save the model and a checkpoint), `on_checkpoint`
/// whenever the task says a checkpoint inside a round is due. Returns the logs of the rounds
/// run here.
pub(crate) fn fit<T: TrainingTask>(
    task: &mut T,
    resume: Option<Resume>,
    on_progress: &mut dyn FnMut(Progress),
    on_round: &mut OnRound<T>,
    on_checkpoint: &mut dyn FnMut(MidEpoch<T::Model>) -> Result<()>,
) -> Result<Vec<T::Log>> {
    let mut state = task.start_state(resume.as_ref())?;
    let mut optimizer = task.optimizer(&state)?;
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
    }
    let mut stepper = task.stepper();
    let mut logs = Vec::new();
    let mut step = state.step;
    let mut last_save = Instant::now();
    let mut round = state.epoch;
    loop {
        round += 1;
        let Some(plan) = task.plan(round, step) else { break };
        let started = Instant::now();
        task.begin_round(round, &mut optimizer, on_progress)?;
        let (mut run, dropout) = RoundRun::start(state.in_epoch.take(), plan.dropout_seed, started);
        for (g, batches) in plan.steps.iter().enumerate().skip(run.steps_done) {
            let at = StepAt { step, dropout: &dropout };
            // The step's gradient is the mean of its batches': each adds its own, scaled, as
            // back-propagation reaches each weight (`StepGradients`).
            let mut grads = StepGradients::scaled(1.0 / batches.len() as f64);
            let (mut step_loss, mut learned) = (0f64, false);
            // Mixed precision's weight casts made once for the step's batches, dropped before
            // the update changes the weights.
            let casts = StepCasts::begin();
            for batch in batches {
                if let Some(loss) = task.batch_gradients(batch, &at, &mut grads)? {
                    step_loss += loss as f64 / batches.len() as f64;
                    learned = true;
                }
            }
            drop(casts);
            let summed = grads.into_map()?;
            run.lr = task.reported_lr() * stepper.schedule.factor(step);
            let stepped = match learned {
                true => stepper.step(&mut optimizer, &summed, step_loss, round, step, |gr| task.group_lr(gr))?,
                false => None,
            };
            step += 1;
            run.steps_done = g + 1;
            match stepped {
                None => run.skipped += 1,
                Some(_) => {
                    let units = task.step_units(&batches.concat());
                    run.loss_sum += step_loss;
                    run.loss_count += 1;
                    run.units += units;
                    on_progress(Progress::Step(StepLog {
                        step,
                        total_steps: stepper.schedule.total_steps,
                        loss: step_loss,
                        lr: run.lr,
                        chunks: units,
                    }));
                }
            }
            let stop = task.mid_round_checkpoints() && crate::interrupt::stop_requested();
            if run.steps_done < plan.steps.len() && (stop || task.checkpoint_due(run.steps_done, last_save.elapsed())) {
                let now = run.checkpoint_state(&state, step, &dropout);
                on_checkpoint(MidEpoch { model: task.model(), state: &now, optimizer: &optimizer })?;
                last_save = Instant::now();
                crate::interrupt::check(step)?;
            }
        }
        let stats = run.stats(round, step);
        let log = task.end_round(&stats, &mut state)?;
        on_round(EpochEnd { log: &log, model: task.model(), state: &state, optimizer: &optimizer })?;
        logs.push(log);
        last_save = Instant::now();
        if task.stops(&state) {
            break;
        }
        // A stop asked for during the round's last step or its evaluation: the round's end is
        // saved.
        crate::interrupt::check(step)?;
    }
    Ok(logs)
}
