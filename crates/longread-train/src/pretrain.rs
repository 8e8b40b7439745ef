//! Masked-language-model pretraining (RoBERTa's recipe): packed sequences, a fresh mask each
//! time a sequence is served, AdamW with warm-up and decay, gradient clipping, held-out MLM
//! loss and perplexity every `eval_every` steps, in the loop every trainer shares. Every
//! step's batch, mask and dropout are seeded from the run's seed and the step number, so a
//! resumed run continues exactly.

use std::collections::HashMap;
use std::time::Duration;

use candle_core::{Device, Tensor, Var};
use longread_model::masked_lm::MaskedLm;
use longread_model::{DropoutRng, Mode};
use longread_text::mlm::{Masker, IGNORE};
use longread_text::pad_batch;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::{Result, TrainError};
use crate::gradients::StepGradients;
use crate::groups::{param_groups, Freezing, GroupSettings};
use crate::optim::{AdamW, AdamWConfig, ParamGroup};
use crate::schedule::{Decay, Schedule};
use crate::trainer::{
    fit, EpochEnd, MidEpoch, Progress, Resume, RoundPlan, RoundStats, StepAt, Stepper, TrainerState, TrainingTask,
};
// The logs of a pretraining run live with the other runs' logs.
pub use crate::trainer::{PretrainLog, PretrainStep};

/// Everything that shapes a pretraining run.
#[derive(Debug, Clone)]
pub struct PretrainConfig {
    /// Optimizer steps.
    pub max_steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// How sequences are masked.
    pub masker: Masker,
    /// Peak learning rate.
    pub lr: f64,
    /// Decoupled weight decay (none on biases and LayerNorm weights).
    pub weight_decay: f64,
    /// Steps of linear warm-up.
    pub warmup_steps: usize,
    /// Shape after warm-up.
    pub decay: Decay,
    /// Global gradient-norm clip (0 = off).
    pub max_grad_norm: f64,
    /// Seed of the data order, masks and dropout.
    pub seed: u64,
    /// Held-out evaluation (and `on_eval`) every this many steps, and at the end.
    pub eval_every: usize,
    /// Steps with NaN/inf loss or gradients in a row that stop the run.
    pub max_bad_steps: usize,
    /// AdamW's betas and epsilon.
    pub adamw: AdamWConfig,
    /// Stop after this step (to resume later).
    pub stop_after_step: Option<usize>,
    /// Padding id of the batches.
    pub pad_id: u32,
}

/// A run to continue (its state, with `step` the steps taken, and the optimizer's).
pub type PretrainResume = Resume;

/// What `on_eval` receives: the evaluation's log, the model, the run's state and the optimizer.
pub type PretrainEval<'a> = EpochEnd<'a, MaskedLm, PretrainLog>;

/// AdamW's groups over every parameter of `model` (no weight decay on biases and LayerNorm
/// weights), and the variables whose gradients it takes.
fn optimizer_groups(model: &MaskedLm, cfg: &PretrainConfig) -> Result<(Vec<ParamGroup>, Vec<Var>)> {
    let named = model.named_vars();
    if named.is_empty() {
        return Err(TrainError::InvalidSetting("the model was loaded for inference only".into()));
    }
    let layers = model.config().num_hidden_layers;
    let everything = Freezing { train_embeddings: true, ..Freezing::default() };
    let settings = GroupSettings { lr: cfg.lr, head_lr: cfg.lr, weight_decay: cfg.weight_decay, layer_lr_decay: 1.0 };
    let groups = param_groups(&named, layers, everything, settings);
    let vars = groups.iter().flat_map(|g| g.params.iter().map(|(_, v)| v.clone())).collect();
    Ok((groups, vars))
}

/// The sequences (indices into the training set) of step `step`: the step's slice of its
/// epoch's shuffle, which depends only on the seed and the epoch.
fn step_sequences(order: &[usize], batch_size: usize, step: usize, steps_per_epoch: usize) -> Vec<usize> {
    order.iter().skip(step % steps_per_epoch * batch_size).take(batch_size).copied().collect()
}

/// The shuffle of the training sequences in pass `epoch` over them.
fn epoch_order(sequences: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sequences).collect();
    order.shuffle(&mut StdRng::seed_from_u64(mix(seed, epoch as u64, 1)));
    order
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ a.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ b.wrapping_mul(0x94D0_49BB_1331_11EB)
}

/// Padded ids, mask and flattened labels of `sequences`, each masked with `rng`.
fn batch(
    sequences: &[&Vec<u32>],
    masker: &Masker,
    pad_id: u32,
    rng: &mut StdRng,
    device: &Device,
) -> Result<(Tensor, Tensor, Vec<i64>, usize)> {
    let masked: Vec<_> = sequences.iter().map(|s| masker.mask(s, rng)).collect();
    let inputs: Vec<&[u32]> = masked.iter().map(|m| m.input_ids.as_slice()).collect();
    let (ids, mask, seq) = pad_batch(&inputs, pad_id);
    let mut labels = Vec::with_capacity(ids.len());
    for m in &masked {
        labels.extend_from_slice(&m.labels);
        labels.extend(std::iter::repeat_n(IGNORE, seq - m.labels.len()));
    }
    let tokens = inputs.iter().map(|s| s.len()).sum();
    let n = sequences.len();
    Ok((Tensor::from_vec(ids, (n, seq), device)?, Tensor::from_vec(mask, (n, seq), device)?, labels, tokens))
}

/// Held-out MLM loss: masks drawn from a fixed seed, so evaluations are comparable.
fn evaluate(model: &MaskedLm, held_out: &[Vec<u32>], cfg: &PretrainConfig, device: &Device) -> Result<f64> {
    let mut rng = StdRng::seed_from_u64(mix(cfg.seed, u64::MAX, 7));
    let (mut sum, mut count) = (0f64, 0usize);
    for chunk in held_out.chunks(cfg.batch_size.max(1)) {
        let refs: Vec<&Vec<u32>> = chunk.iter().collect();
        let (ids, mask, labels, _) = batch(&refs, &cfg.masker, cfg.pad_id, &mut rng, device)?;
        let n = labels.iter().filter(|&&l| l != IGNORE).count();
        if n == 0 {
            continue;
        }
        sum += model.loss(&ids, &mask, &labels, Mode::Eval)?.to_scalar::<f32>()? as f64 * n as f64;
        count += n;
    }
    if count == 0 {
        return Err(TrainError::InvalidSetting("the held-out sequences have no token to mask".into()));
    }
    Ok(sum / count as f64)
}

/// Pretrains `model` on `train` sequences (packed, with special tokens), evaluating on
/// `held_out`, in the shared loop ([`crate::trainer`]'s `fit`): a round is the steps between
/// two evaluations. `on_step` hears of every step, `on_eval` of every evaluation (to
/// checkpoint).
#[allow(clippy::too_many_arguments)]
pub fn pretrain(
    model: &MaskedLm,
    train: &[Vec<u32>],
    held_out: &[Vec<u32>],
    cfg: &PretrainConfig,
    device: &Device,
    resume: Option<PretrainResume>,
    mut on_step: impl FnMut(PretrainStep),
    mut on_eval: impl FnMut(PretrainEval) -> Result<()>,
) -> Result<Vec<PretrainLog>> {
    if train.is_empty() || held_out.is_empty() {
        return Err(TrainError::InvalidSetting("pretraining needs training and held-out sequences".into()));
    }
    if cfg.batch_size == 0 || cfg.max_steps == 0 || cfg.eval_every == 0 {
        return Err(TrainError::InvalidSetting("--batch-size, --max-steps and --eval-every must be at least 1".into()));
    }
    let (groups, vars) = optimizer_groups(model, cfg)?;
    let base_lr = groups.iter().map(|g| (g.name.clone(), g.lr)).collect();
    let mut task = PretrainTask { model, train, held_out, cfg, device, base_lr, vars };
    let mut on_progress = |p: Progress| {
        if let Progress::Step(s) = p {
            on_step(PretrainStep {
                step: s.step,
                total_steps: s.total_steps,
                loss: s.loss,
                lr: s.lr,
                tokens: s.chunks,
            });
        }
    };
    let mut no_mid_round_checkpoints = |_: MidEpoch<MaskedLm>| Ok(());
    fit(&mut task, resume, &mut on_progress, &mut on_eval, &mut no_mid_round_checkpoints).map_err(|e| match e {
        TrainError::Diverged(_) => TrainError::Diverged(format!(
            "pretraining diverged: {} steps in a row had NaN/inf loss or gradients; they were skipped and the run \
             stopped. The last checkpoint is kept. Lower --lr.",
            cfg.max_bad_steps.max(1)
        )),
        other => other,
    })
}

/// Masked-LM pretraining in the shared loop. Every step's sequences, masks and dropout are
/// seeded from the run's seed and the step number.
struct PretrainTask<'a> {
    model: &'a MaskedLm,
    train: &'a [Vec<u32>],
    held_out: &'a [Vec<u32>],
    cfg: &'a PretrainConfig,
    device: &'a Device,
    base_lr: HashMap<String, f64>,
    vars: Vec<Var>,
}

impl PretrainTask<'_> {
    fn steps_per_epoch(&self) -> usize {
        self.train.len().div_ceil(self.cfg.batch_size).max(1)
    }
}

impl TrainingTask for PretrainTask<'_> {
    type Model = MaskedLm;
    type Log = PretrainLog;

    fn model(&self) -> &MaskedLm {
        self.model
    }

    fn start_state(&self, resume: Option<&Resume>) -> Result<TrainerState> {
        let Some(r) = resume else { return Ok(TrainerState::new()) };
        if r.state.step >= self.cfg.max_steps {
            return Err(TrainError::InvalidSetting(format!(
                "the run to resume has taken {} of {} steps: nothing is left to do",
                r.state.step, self.cfg.max_steps
            )));
        }
        Ok(r.state.clone())
    }

    fn stepper(&self) -> Stepper {
        let cfg = self.cfg;
        let schedule = Schedule { warmup_steps: cfg.warmup_steps, total_steps: cfg.max_steps, decay: cfg.decay };
        Stepper::from_schedule(schedule, cfg.max_grad_norm, cfg.max_bad_steps)
    }

    fn optimizer(&self, _: &TrainerState) -> Result<AdamW> {
        AdamW::new(optimizer_groups(self.model, self.cfg)?.0, self.cfg.adamw)
    }

    fn begin_round(&mut self, _: usize, _: &mut AdamW, _: &mut dyn FnMut(Progress)) -> Result<()> {
        Ok(())
    }

    /// The steps up to the next evaluation: the next multiple of `eval_every`, the last step,
    /// or `stop_after_step`, whichever comes first.
    fn plan(&self, _round: usize, first_step: usize) -> Option<RoundPlan> {
        let cfg = self.cfg;
        if first_step >= cfg.max_steps {
            return None;
        }
        let mut end = ((first_step / cfg.eval_every + 1) * cfg.eval_every).min(cfg.max_steps);
        if let Some(stop) = cfg.stop_after_step.filter(|&s| s > first_step) {
            end = end.min(stop);
        }
        let per_epoch = self.steps_per_epoch();
        let mut order: Option<(usize, Vec<usize>)> = None;
        let steps = (first_step..end).map(|step| {
            let epoch = step / per_epoch;
            if order.as_ref().is_none_or(|(e, _)| *e != epoch) {
                order = Some((epoch, epoch_order(self.train.len(), cfg.seed, epoch)));
            }
            let (_, order) = order.as_ref().expect("set above");
            vec![step_sequences(order, cfg.batch_size, step, per_epoch)]
        });
        // Dropout comes from each step's own generator (see `batch_gradients`).
        Some(RoundPlan { steps: steps.collect(), dropout_seed: 0 })
    }

    /// The step's sequences masked with the step's generator; `None` when no token was
    /// masked (tiny batches), which skips the step.
    fn batch_gradients(&self, sequences: &[usize], at: &StepAt, grads: &mut StepGradients) -> Result<Option<f32>> {
        let cfg = self.cfg;
        let chosen: Vec<&Vec<u32>> = sequences.iter().map(|&i| &self.train[i]).collect();
        let mut mask_rng = StdRng::seed_from_u64(mix(cfg.seed, at.step as u64, 2));
        let (ids, mask, labels, _) = batch(&chosen, &cfg.masker, cfg.pad_id, &mut mask_rng, self.device)?;
        if labels.iter().all(|&l| l == IGNORE) {
            return Ok(None);
        }
        let dropout = DropoutRng::new(mix(cfg.seed, at.step as u64, 3));
        let loss = self.model.loss(&ids, &mask, &labels, Mode::Train(&dropout))?;
        grads.backward_loss_value(&loss, &self.vars).map(Some)
    }

    /// Tokens of the sequences (padding excluded).
    fn step_units(&self, sequences: &[usize]) -> usize {
        sequences.iter().map(|&i| self.train[i].len()).sum()
    }

    fn group_lr(&self, group: &ParamGroup) -> f64 {
        self.base_lr[&group.name]
    }

    fn reported_lr(&self) -> f64 {
        self.cfg.lr
    }

    fn end_round(&mut self, stats: &RoundStats, state: &mut TrainerState) -> Result<PretrainLog> {
        let eval_loss = evaluate(self.model, self.held_out, self.cfg, self.device)?;
        state.record(stats.round, stats.step, Some(-eval_loss));
        Ok(PretrainLog {
            step: stats.step,
            train_loss: stats.train_loss,
            eval_loss,
            perplexity: eval_loss.exp(),
            lr: stats.lr,
            tokens_per_second: stats.units as f64 / stats.train_seconds.max(1e-9),
            skipped_steps: stats.skipped,
        })
    }

    fn stops(&self, state: &TrainerState) -> bool {
        self.cfg.stop_after_step == Some(state.step)
    }

    fn checkpoint_due(&self, _: usize, _: Duration) -> bool {
        false // every evaluation saves one
    }

    fn mid_round_checkpoints(&self) -> bool {
        false
    }
}
