//! Training a HAN from scratch: shuffled batches of word-id grids, cross-entropy (plus the
//! optional attention penalty), gradient accumulation and clipping, Adam(W) with the run's
//! schedule, evaluation on the dev set after every epoch, best-epoch tracking, early stopping
//! and exact resume — the same run mechanics as [`crate::trainer::train`].

use std::collections::HashMap;

use candle_core::{Device, Tensor, TensorId, Var};
use longread_model::han::{grid_batch, HanClassifier};
use longread_model::{DropoutRng, Mode};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::error::{Result, TrainError};
use crate::loss::{attention_penalty, cross_entropy};
use crate::optim::{AdamW, ParamGroup};
use crate::trainer::{
    accumulate, epoch_score, epoch_seed, EpochEnd, EpochLog, PhaseLog, Progress, Resume, StepLog, Stepper, TrainConfig,
    TrainerState,
};

/// Documents (as grids of the model's shape) and their gold labels.
#[derive(Debug, Clone, Copy)]
pub struct HanSplit<'a> {
    /// Row-major `[doc_size, sent_size]` word ids per document.
    pub grids: &'a [Vec<u32>],
    /// Gold label index per document.
    pub labels: &'a [usize],
}

/// Documents per forward pass when evaluating.
const EVAL_BATCH: usize = 64;

/// Trains `model` in place, from scratch or from `resume`, under `cfg` (its learning rate is
/// `cfg.groups.lr`, its weight decay `cfg.groups.weight_decay`; the settings about encoders,
/// tasks and caches do not apply). `attention_penalty` weighs the penalty on the sentence
/// attention. `on_epoch` runs after every epoch (to save the best model and a checkpoint).
#[allow(clippy::too_many_arguments)]
pub fn train_han(
    model: &HanClassifier,
    train_split: HanSplit,
    dev_split: HanSplit,
    cfg: &TrainConfig,
    attention_penalty_weight: f64,
    device: &Device,
    resume: Option<Resume>,
    mut on_progress: impl FnMut(Progress),
    mut on_epoch: impl FnMut(EpochEnd<HanClassifier>) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    for (split, what) in [(&train_split, "training"), (&dev_split, "dev")] {
        if split.grids.is_empty() {
            return Err(TrainError::InvalidSetting("training and dev data must not be empty".into()));
        }
        let cells = model.config().doc_size * model.config().sent_size;
        let labels = model.labels().len();
        if split.labels.len() != split.grids.len()
            || split.labels.iter().any(|&l| l >= labels)
            || split.grids.iter().any(|g| g.len() != cells)
        {
            return Err(TrainError::InvalidSetting(format!("{what} grids or labels do not fit the model")));
        }
    }
    if !(attention_penalty_weight.is_finite() && attention_penalty_weight >= 0.0) {
        return Err(TrainError::InvalidSetting("the attention penalty must be a non-negative number".into()));
    }
    let named = model.named_vars();
    let params: Vec<(String, Var)> = named.clone();
    let group = ParamGroup { name: "han".into(), lr: cfg.groups.lr, weight_decay: cfg.groups.weight_decay, params };
    let mut state = TrainerState::start(resume.as_ref(), cfg.epochs)?;
    let mut optimizer = AdamW::new(vec![group], cfg.adamw)?;
    if let Some(r) = resume {
        optimizer.import_state(&r.moments, &r.steps)?;
    }
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let parameters: usize = vars.iter().map(|v| v.elem_count()).sum();
    on_progress(Progress::Phase(PhaseLog {
        epoch: state.epoch + 1,
        trains: "every HAN parameter (from scratch)".into(),
        trainable_parameters: parameters,
        total_parameters: parameters,
        cache: String::new(),
    }));
    let shape = model.config().grid_shape();
    let weights = cfg.class_weights.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    let mut stepper = Stepper::new(cfg, train_split.grids.len());
    let batch_size = cfg.batch_size.max(1);
    let mut step = state.step;
    let mut logs = Vec::new();
    for epoch in state.epoch + 1..=cfg.epochs {
        let started = std::time::Instant::now();
        let mut shuffle = StdRng::seed_from_u64(epoch_seed(cfg.seed, epoch, 1));
        let dropout = DropoutRng::new(epoch_seed(cfg.seed, epoch, 2));
        let mut order: Vec<usize> = (0..train_split.grids.len()).collect();
        order.shuffle(&mut shuffle);
        let (mut loss_sum, mut loss_count, mut skipped) = (0f64, 0usize, 0usize);
        for step_docs in order.chunks(batch_size * cfg.grad_accum.max(1)) {
            let mut summed: HashMap<TensorId, Tensor> = HashMap::new();
            let mut step_loss = 0f64;
            let batches: Vec<&[usize]> = step_docs.chunks(batch_size).collect();
            for batch in &batches {
                let grids: Vec<&[u32]> = batch.iter().map(|&i| train_split.grids[i].as_slice()).collect();
                let gold: Vec<usize> = batch.iter().map(|&i| train_split.labels[i]).collect();
                let out = model.forward(&grid_batch(&grids, shape, device)?, Mode::Train(&dropout))?;
                let mut loss = cross_entropy(&out.logits, &gold, weights.as_ref(), device)?;
                if attention_penalty_weight > 0.0 {
                    loss = (loss + (attention_penalty(&out.sentence_attention)? * attention_penalty_weight)?)?;
                }
                let grads = loss.backward()?;
                step_loss += loss.to_scalar::<f32>()? as f64 / batches.len() as f64;
                let grads =
                    vars.iter().filter_map(|v| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone())));
                accumulate(&mut summed, grads, batches.len())?;
            }
            let Some(factor) = stepper.step(&mut optimizer, &mut summed, step_loss, epoch, step, |_| cfg.groups.lr)?
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
                lr: cfg.groups.lr * factor,
                chunks: step_docs.len(),
            }));
        }
        let train_seconds = started.elapsed().as_secs_f64();
        let (dev_loss, dev) = evaluate(model, dev_split, device)?;
        let score = epoch_score(cfg.metric, dev_loss, std::iter::once(&dev));
        let is_best = state.record(epoch, step, score);
        let log = EpochLog {
            epoch,
            train_loss: if loss_count > 0 { loss_sum / loss_count as f64 } else { f64::NAN },
            dev_loss,
            dev,
            tasks: Vec::new(),
            best: is_best,
            seconds: started.elapsed().as_secs_f64(),
            train_seconds,
            skipped_steps: skipped,
            trainable_parameters: parameters,
            total_parameters: parameters,
        };
        on_epoch(EpochEnd { log: &log, model, state: &state, optimizer: &optimizer })?;
        logs.push(log);
        if state.stops(cfg) {
            break;
        }
    }
    Ok(logs)
}

/// Dev loss (cross-entropy, unweighted) and metrics in inference mode.
fn evaluate(model: &HanClassifier, split: HanSplit, device: &Device) -> Result<(f64, longread_metrics::Report)> {
    let shape = model.config().grid_shape();
    let mut logits = Vec::new();
    for batch in split.grids.chunks(EVAL_BATCH) {
        let grids: Vec<&[u32]> = batch.iter().map(Vec::as_slice).collect();
        logits.push(model.forward(&grid_batch(&grids, shape, device)?, Mode::Eval)?.logits);
    }
    let logits = Tensor::cat(&logits, 0)?;
    let dev_loss = cross_entropy(&logits, split.labels, None, device)?.to_scalar::<f32>()? as f64;
    let predicted: Vec<usize> = logits.argmax(1)?.to_vec1::<u32>()?.into_iter().map(|p| p as usize).collect();
    let report =
        longread_metrics::evaluate(model.labels(), split.labels, &predicted).map_err(TrainError::InvalidSetting)?;
    Ok((dev_loss, report))
}
