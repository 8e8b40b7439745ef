//! Masked-language-model pretraining (RoBERTa's recipe): packed sequences, a fresh mask each
//! time a sequence is served, AdamW with warm-up and decay, gradient clipping, held-out MLM
//! loss and perplexity every `eval_every` steps. Every step's batch, mask and dropout are
//! seeded from the run's seed and the step number, so a resumed run continues exactly.

use std::collections::HashMap;

use candle_core::{Device, Tensor, TensorId};
use longread_model::masked_lm::{masked_lm_loss, MaskedLm};
use longread_model::{DropoutRng, Mode};
use longread_text::mlm::{Masker, IGNORE};
use longread_text::pad_batch;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::{Result, TrainError};
use crate::groups::{param_groups, Freezing, GroupSettings};
use crate::optim::{AdamW, AdamWConfig};
use crate::schedule::{Decay, Schedule};
use crate::trainer::Stepper;

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

/// Where a run stands (saved in checkpoints).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PretrainState {
    /// Optimizer steps taken.
    pub step: usize,
}

/// One evaluation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PretrainLog {
    /// Steps taken.
    pub step: usize,
    /// Mean training MLM loss since the previous evaluation.
    pub train_loss: f64,
    /// Held-out MLM loss (the same masks every time).
    pub eval_loss: f64,
    /// `exp(eval_loss)`.
    pub perplexity: f64,
    /// Learning rate at the last step.
    pub lr: f64,
    /// Training tokens per second since the previous evaluation (padding excluded).
    pub tokens_per_second: f64,
    /// Steps skipped for NaN/inf since the previous evaluation.
    pub skipped_steps: usize,
}

/// One optimizer step, for progress displays.
#[derive(Debug, Clone, Copy)]
pub struct PretrainStep {
    /// Steps taken (1-based).
    pub step: usize,
    /// All steps.
    pub total_steps: usize,
    /// The step's MLM loss.
    pub loss: f64,
    /// Its learning rate.
    pub lr: f64,
    /// Tokens in the step's batch (padding excluded).
    pub tokens: usize,
}

/// A run to continue.
pub struct PretrainResume {
    /// Where it stood.
    pub state: PretrainState,
    /// AdamW moments (see [`AdamW::export_state`]).
    pub moments: HashMap<String, Tensor>,
    /// AdamW steps per parameter.
    pub steps: HashMap<String, u64>,
}

/// What `on_eval` receives.
pub struct PretrainEval<'a> {
    /// The evaluation.
    pub log: &'a PretrainLog,
    /// The model now.
    pub model: &'a MaskedLm,
    /// The run's state.
    pub state: &'a PretrainState,
    /// The optimizer (its moments go into checkpoints).
    pub optimizer: &'a AdamW,
}

/// AdamW over every parameter of `model` (no weight decay on biases and LayerNorm weights),
/// each group's base learning rate, and the variables whose gradients it takes.
fn optimizer_for(
    model: &MaskedLm,
    cfg: &PretrainConfig,
) -> Result<(AdamW, HashMap<String, f64>, Vec<candle_core::Var>)> {
    let named = model.named_vars();
    if named.is_empty() {
        return Err(TrainError::InvalidSetting("the model was loaded for inference only".into()));
    }
    let layers = model.config().num_hidden_layers;
    let everything = Freezing { train_embeddings: true, ..Freezing::default() };
    let settings = GroupSettings { lr: cfg.lr, head_lr: cfg.lr, weight_decay: cfg.weight_decay, layer_lr_decay: 1.0 };
    let groups = param_groups(&named, layers, everything, settings);
    let base_lr: HashMap<String, f64> = groups.iter().map(|g| (g.name.clone(), g.lr)).collect();
    let vars: Vec<candle_core::Var> = groups.iter().flat_map(|g| g.params.iter().map(|(_, v)| v.clone())).collect();
    Ok((AdamW::new(groups, cfg.adamw)?, base_lr, vars))
}

/// The masked batch of optimizer step `step`: it depends only on the seed and the step number
/// (the epoch's shuffle, then the step's slice of it, masked with the step's generator).
///
/// # Shapes
/// → `ids, mask: [batch, seq]`, labels per position, and the batch's real tokens
fn step_batch(
    train: &[Vec<u32>],
    cfg: &PretrainConfig,
    step: usize,
    steps_per_epoch: usize,
    device: &Device,
) -> Result<(Tensor, Tensor, Vec<i64>, usize)> {
    let (epoch, k) = (step / steps_per_epoch, step % steps_per_epoch);
    let mut order: Vec<usize> = (0..train.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(mix(cfg.seed, epoch as u64, 1)));
    let chosen: Vec<&Vec<u32>> =
        order.iter().skip(k * cfg.batch_size).take(cfg.batch_size).map(|&i| &train[i]).collect();
    let mut mask_rng = StdRng::seed_from_u64(mix(cfg.seed, step as u64, 2));
    batch(&chosen, &cfg.masker, cfg.pad_id, &mut mask_rng, device)
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
        let logits = model.forward(&ids, &mask, Mode::Eval)?;
        sum += masked_lm_loss(&logits, &labels)?.to_scalar::<f32>()? as f64 * n as f64;
        count += n;
    }
    if count == 0 {
        return Err(TrainError::InvalidSetting("the held-out sequences have no token to mask".into()));
    }
    Ok(sum / count as f64)
}

/// Pretrains `model` on `train` sequences (packed, with special tokens), evaluating on
/// `held_out`. `on_step` hears of every step, `on_eval` of every evaluation (to checkpoint).
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
    let (mut optimizer, base_lr, vars) = optimizer_for(model, cfg)?;
    let mut state = PretrainState { step: 0 };
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
        state = r.state;
        if state.step >= cfg.max_steps {
            return Err(TrainError::InvalidSetting(format!(
                "the run to resume has taken {} of {} steps: nothing is left to do",
                state.step, cfg.max_steps
            )));
        }
    }
    let schedule = Schedule { warmup_steps: cfg.warmup_steps, total_steps: cfg.max_steps, decay: cfg.decay };
    let mut stepper = Stepper::from_schedule(schedule, cfg.max_grad_norm, cfg.max_bad_steps);
    let steps_per_epoch = train.len().div_ceil(cfg.batch_size).max(1);
    let mut logs = Vec::new();
    let (mut loss_sum, mut loss_count, mut skipped, mut tokens) = (0f64, 0usize, 0usize, 0usize);
    let mut lr: f64;
    let mut since = std::time::Instant::now();
    while state.step < cfg.max_steps {
        let step = state.step;
        let epoch = step / steps_per_epoch;
        let (ids, mask, labels, n_tokens) = step_batch(train, cfg, step, steps_per_epoch, device)?;
        let dropout = DropoutRng::new(mix(cfg.seed, step as u64, 3));
        state.step += 1;
        lr = cfg.lr * stepper.schedule.factor(step);
        // A batch without any masked token (tiny batches) has nothing to learn from.
        let stepped = if labels.iter().all(|&l| l == IGNORE) {
            None
        } else {
            let loss = masked_lm_loss(&model.forward(&ids, &mask, Mode::Train(&dropout))?, &labels)?;
            let grads = loss.backward()?;
            let loss = loss.to_scalar::<f32>()? as f64;
            let mut grads: HashMap<TensorId, Tensor> =
                vars.iter().filter_map(|v| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone()))).collect();
            let factor = stepper.step(&mut optimizer, &mut grads, loss, epoch, step, |g| base_lr[&g.name]).map_err(
                |e| match e {
                    TrainError::Diverged(_) => TrainError::Diverged(format!(
                        "pretraining diverged: {} steps in a row had NaN/inf loss or gradients (step {}); they were \
                         skipped and the run stopped. The last checkpoint is kept. Lower --lr.",
                        cfg.max_bad_steps.max(1),
                        state.step
                    )),
                    other => other,
                },
            )?;
            factor.map(|_| loss)
        };
        match stepped {
            Some(loss) => {
                loss_sum += loss;
                loss_count += 1;
                tokens += n_tokens;
                on_step(PretrainStep { step: state.step, total_steps: cfg.max_steps, loss, lr, tokens: n_tokens });
            }
            // Skipped steps still reach the evaluation, checkpoint and stop below.
            None => skipped += 1,
        }

        let stop = cfg.stop_after_step == Some(state.step);
        if state.step.is_multiple_of(cfg.eval_every) || state.step == cfg.max_steps || stop {
            let train_seconds = since.elapsed().as_secs_f64();
            let eval_loss = evaluate(model, held_out, cfg, device)?;
            let log = PretrainLog {
                step: state.step,
                train_loss: if loss_count > 0 { loss_sum / loss_count as f64 } else { f64::NAN },
                eval_loss,
                perplexity: eval_loss.exp(),
                lr,
                tokens_per_second: tokens as f64 / train_seconds.max(1e-9),
                skipped_steps: skipped,
            };
            on_eval(PretrainEval { log: &log, model, state: &state, optimizer: &optimizer })?;
            logs.push(log);
            (loss_sum, loss_count, skipped, tokens) = (0.0, 0, 0, 0);
            since = std::time::Instant::now();
            if stop {
                break;
            }
        }
    }
    Ok(logs)
}
