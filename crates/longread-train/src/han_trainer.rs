//! Training a HAN from scratch: shuffled batches of word-id grids, cross-entropy (plus the
//! optional attention penalty), gradient accumulation and clipping, Adam(W) with the run's
//! schedule, evaluation on the dev set after every epoch, best-epoch tracking, early stopping
//! and exact resume — the same run mechanics as [`crate::trainer::train`].

use candle_core::{Device, Tensor, Var};
use longread_model::han::{grid_batch, HanClassifier};
use longread_model::{DropoutRng, Mode};

use crate::error::{Result, TrainError};
use crate::gradients::StepGradients;
use crate::loss::{attention_penalty, binary_cross_entropy_sum, cross_entropy, multi_hot};
use crate::optim::{AdamW, ParamGroup};
use crate::trainer::{
    dev_report, epoch_score, fit, DevResult, EpochEnd, EpochLog, EpochTask, Epochs, MidEpoch, PhaseLog, Progress,
    Resume, TrainConfig, TrainerState,
};

/// Documents (as grids of the model's shape) and their gold labels.
#[derive(Debug, Clone, Copy)]
pub struct HanSplit<'a> {
    /// Row-major `[doc_size, sent_size]` word ids per document.
    pub grids: &'a [Vec<u32>],
    /// Gold label index per document (a multi-label model: any index; `sets` holds the truth).
    pub labels: &'a [usize],
    /// A multi-label model's truth: each document's labels.
    pub sets: Option<&'a [Vec<usize>]>,
}

/// Documents per forward pass when evaluating.
const EVAL_BATCH: usize = 64;

/// Trains `model` in place, from scratch or from `resume`, under `cfg` (its learning rate is
/// `cfg.groups.lr`, its weight decay `cfg.groups.weight_decay`; the settings about encoders,
/// tasks and caches do not apply). `attention_penalty` weighs the penalty on the sentence
/// attention. `on_epoch` runs after every epoch (to save the best model and a checkpoint),
/// `on_checkpoint` when a mid-epoch checkpoint is due.
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
    mut on_checkpoint: impl FnMut(MidEpoch<HanClassifier>) -> Result<()>,
) -> Result<Vec<EpochLog>> {
    // An empty dev set is a run without one (`--dev-split 0`): no evaluation, the last epoch kept.
    if train_split.grids.is_empty() {
        return Err(TrainError::InvalidSetting("training data must not be empty".into()));
    }
    for (split, what) in [(&train_split, "training"), (&dev_split, "dev")] {
        let cells = model.config().doc_size * model.config().sent_size;
        let labels = model.labels().len();
        if split.labels.len() != split.grids.len()
            || split.labels.iter().any(|&l| l >= labels)
            || split.grids.iter().any(|g| g.len() != cells)
            || split.sets.is_some_and(|s| s.len() != split.grids.len())
            || split.sets.is_some() != model.is_multi_label()
        {
            return Err(TrainError::InvalidSetting(format!("{what} grids or labels do not fit the model")));
        }
    }
    if !(attention_penalty_weight.is_finite() && attention_penalty_weight >= 0.0) {
        return Err(TrainError::InvalidSetting("the attention penalty must be a non-negative number".into()));
    }
    let vars: Vec<Var> = model.named_vars().into_iter().map(|(_, v)| v).collect();
    let weights = cfg.class_weights.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    let pos_weight = cfg.pos_weight.as_ref().map(|w| Tensor::new(w.as_slice(), device)).transpose()?;
    let mut task = Epochs(HanTask {
        model,
        train: train_split,
        dev: dev_split,
        cfg,
        penalty: attention_penalty_weight,
        device,
        vars,
        weights,
        pos_weight,
        announced: false,
    });
    fit(&mut task, resume, &mut on_progress, &mut on_epoch, &mut on_checkpoint)
}

/// The HAN in the shared loop: every parameter trains from the start, in one group.
struct HanTask<'a> {
    model: &'a HanClassifier,
    train: HanSplit<'a>,
    dev: HanSplit<'a>,
    cfg: &'a TrainConfig,
    penalty: f64,
    device: &'a Device,
    vars: Vec<Var>,
    weights: Option<Tensor>,
    /// A multi-label model's weight of each label's positive term (`--pos-weight`).
    pos_weight: Option<Tensor>,
    /// Whether the one phase was reported.
    announced: bool,
}

impl EpochTask for HanTask<'_> {
    type Model = HanClassifier;

    fn device(&self) -> &candle_core::Device {
        self.device
    }

    fn config(&self) -> &TrainConfig {
        self.cfg
    }

    fn model(&self) -> &HanClassifier {
        self.model
    }

    fn documents(&self) -> usize {
        self.train.grids.len()
    }

    fn dev_documents(&self) -> usize {
        self.dev.grids.len()
    }

    fn optimizer(&self, _state: &TrainerState) -> Result<AdamW> {
        let params = self.model.named_vars();
        let group = ParamGroup {
            name: "han".into(),
            lr: self.cfg.groups.lr,
            weight_decay: self.cfg.groups.weight_decay,
            params,
        };
        AdamW::new(vec![group], self.cfg.adamw)
    }

    fn begin_epoch(&mut self, epoch: usize, _: &mut AdamW, on_progress: &mut dyn FnMut(Progress)) -> Result<()> {
        if !self.announced {
            let (parameters, _) = self.parameters();
            on_progress(Progress::Phase(PhaseLog {
                epoch,
                trains: "every HAN parameter (from scratch)".into(),
                trainable_parameters: parameters,
                total_parameters: parameters,
                cache: String::new(),
            }));
            self.announced = true;
        }
        Ok(())
    }

    fn batch_gradients(&self, batch: &[usize], dropout: &DropoutRng, grads: &mut StepGradients) -> Result<f32> {
        let shape = self.model.config().grid_shape();
        let grids: Vec<&[u32]> = batch.iter().map(|&i| self.train.grids[i].as_slice()).collect();
        let gold: Vec<usize> = batch.iter().map(|&i| self.train.labels[i]).collect();
        let out = self.model.forward(&grid_batch(&grids, shape, self.device)?, Mode::Train(dropout))?;
        let mut loss = match self.train.sets {
            // Binary cross-entropy, the mean over documents × labels (`BCEWithLogitsLoss`).
            Some(sets) => {
                let sets: Vec<&[usize]> = batch.iter().map(|&i| sets[i].as_slice()).collect();
                let labels = self.model.labels().len();
                let targets = multi_hot(&sets, labels, self.device)?;
                let sum = binary_cross_entropy_sum(&out.logits, &targets, self.pos_weight.as_ref())?;
                (sum / (batch.len() * labels) as f64)?
            }
            None => cross_entropy(&out.logits, &gold, self.weights.as_ref(), self.device)?,
        };
        if self.penalty > 0.0 {
            loss = (loss + (attention_penalty(&out.sentence_attention)? * self.penalty)?)?;
        }
        grads.backward_loss_value(&loss, &self.vars)
    }

    fn step_units(&self, docs: &[usize]) -> usize {
        docs.len()
    }

    fn group_lr(&self, _: &ParamGroup) -> f64 {
        self.cfg.groups.lr
    }

    fn reported_lr(&self) -> f64 {
        self.cfg.groups.lr
    }

    fn evaluate(&self) -> Result<DevResult> {
        let (dev_loss, dev) = evaluate(self.model, self.dev, self.device)?;
        let score = epoch_score(self.cfg.metric, dev_loss, std::iter::once(&dev))?;
        Ok(DevResult { dev_loss, dev, tasks: Vec::new(), score })
    }

    fn parameters(&self) -> (usize, usize) {
        let n = self.vars.iter().map(|v| v.elem_count()).sum();
        (n, n)
    }
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
    if let Some(sets) = split.sets {
        let sets: Vec<&[usize]> = sets.iter().map(Vec::as_slice).collect();
        return crate::trainer::multi_label_dev(model.labels(), &sets, &logits, device);
    }
    let dev_loss = cross_entropy(&logits, split.labels, None, device)?.to_scalar::<f32>()? as f64;
    Ok((dev_loss, dev_report(model.labels(), split.labels, &logits)?))
}
