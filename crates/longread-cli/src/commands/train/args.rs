//! The flags of `longread train` and the training configuration they make.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::schedule::Decay;
use longread_train::trainer::{balanced_class_weights, CacheSettings, Metric, TrainConfig};
use longread_train::unfreeze::UnfreezeSchedule;
use longread_train::AdamWConfig;

use crate::commands::arch::Arch;

/// Arguments of `longread train`.
#[derive(Debug, Args, serde::Serialize)]
pub struct TrainArgs {
    /// Model directory made by `longread init` (its labels and settings are used), or a
    /// pretrained encoder (config.json, model.safetensors, tokenizer.json): then a new classifier
    /// of --arch is built on it with default settings, the labels found in the training data
    /// (sorted) and weights seeded by --seed.
    #[arg(long)]
    pub(super) model: PathBuf,
    /// The classifier built when --model is a plain encoder (default: hierarchical); with a
    /// model made by `init`, it must name that model's architecture.
    #[arg(long, value_enum)]
    pub(super) arch: Option<Arch>,
    /// Training data: JSON lines with "text" and "label" (name or index).
    #[arg(long)]
    pub(super) train: PathBuf,
    /// Dev data in the same format; without it, --dev-split of the training data is held out.
    #[arg(long)]
    pub(super) dev: Option<PathBuf>,
    /// Fraction of the training data held out for dev (stratified, seeded) when --dev is absent.
    #[arg(long, default_value_t = 0.1)]
    pub(super) dev_split: f64,
    /// Output directory: the best model (format v1) plus metrics.jsonl, trainer_state.json,
    /// training_args.json and checkpoint-last/ (to resume; removed when the run completes).
    /// Must not exist yet, unless resuming.
    #[arg(long)]
    pub(super) out: PathBuf,
    /// Continue an interrupted run: `auto` (OUT/checkpoint-last) or a checkpoint directory.
    /// Use the same data and flags as the interrupted run.
    #[arg(long)]
    pub(super) resume: Option<String>,
    /// Passes over the training data.
    #[arg(long, default_value_t = 3)]
    pub(super) epochs: usize,
    /// Documents per batch.
    #[arg(long, default_value_t = 4)]
    pub(super) batch_size: usize,
    /// Batches per optimizer step (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    pub(super) grad_accum: usize,
    /// Learning rate of the encoder.
    #[arg(long, default_value_t = 2e-5)]
    pub(super) lr: f64,
    /// Learning rate of pooling + head (default: 1e-3 with --freeze-base or when --unfreeze
    /// starts with 0:head, else --lr).
    #[arg(long)]
    pub(super) head_lr: Option<f64>,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights).
    #[arg(long, default_value_t = 0.01)]
    pub(super) weight_decay: f64,
    /// Warm-up steps as a fraction of all optimizer steps.
    #[arg(long, default_value_t = 0.1)]
    pub(super) warmup_ratio: f64,
    /// Learning-rate shape after warm-up.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Linear)]
    pub(super) schedule: ScheduleArg,
    /// Clip the global gradient norm to this (0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub(super) max_grad_norm: f64,
    /// Freeze the whole encoder: only pooling and head train, on chunk vectors computed once.
    #[arg(long)]
    pub(super) freeze_base: bool,
    /// Freeze the embeddings and the bottom K encoder layers (their outputs are computed once
    /// per chunk and cached, see --cache-memory).
    #[arg(long, default_value_t = 0)]
    pub(super) freeze_bottom: usize,
    /// Gradual unfreezing: EPOCH:WHAT phases, WHAT = head | topN | all, e.g. `0:head,3:top6,6:all`
    /// (from epoch 0 the head alone, after 3 epochs also the top 6 layers, after 6 everything).
    /// Before the first phase, the freezing flags apply. Newly trained parameters join the
    /// optimizer with their group's learning rate.
    #[arg(long)]
    pub(super) unfreeze: Option<String>,
    /// MiB of frozen-layer outputs kept in memory; the rest goes to a scratch file in --out.
    #[arg(long, default_value_t = 4096)]
    pub(super) cache_memory: usize,
    /// Recompute frozen layers every epoch instead of caching their outputs (same results).
    #[arg(long)]
    pub(super) no_cache: bool,
    /// Train the embeddings too (frozen by default).
    #[arg(long)]
    pub(super) train_embeddings: bool,
    /// Layer-wise learning-rate decay: layer l of N gets lr·d^(N−l), embeddings lr·d^(N+1).
    #[arg(long, default_value_t = 1.0)]
    pub(super) layer_lr_decay: f64,
    /// Class weights of the loss: none, balanced (n / (classes · count)), or w1,w2,... in label order.
    #[arg(long, default_value = "none")]
    pub(super) class_weights: String,
    /// Dev metric that picks the best epoch.
    #[arg(long, value_enum, default_value_t = MetricArg::MacroF1)]
    pub(super) metric: MetricArg,
    /// Stop after this many epochs without improvement (0 = never).
    #[arg(long, default_value_t = 0)]
    pub(super) patience: usize,
    /// Seed for the dev split, shuffling and dropout.
    #[arg(long, default_value_t = 42)]
    pub(super) seed: u64,
    /// Most tokens per encoder batch. Training keeps one batch's graph at a time, so this
    /// sets the memory plateau: 512 (one chunk) measured 1.8 GB on MiniLM vs 5.9 GB at 2048,
    /// for 12% more time per step.
    #[arg(long, default_value_t = 512)]
    pub(super) max_batch_tokens: usize,
    /// Keep the whole graph instead of recomputing chunks (memory grows with document length).
    #[arg(long)]
    pub(super) no_recompute: bool,
    /// Optimizer steps in a row with NaN/inf gradients that stop the run.
    #[arg(long, default_value_t = 5)]
    pub(super) max_bad_steps: usize,
    /// A task of a multi-task model, NAME=COLUMN (repeatable): the label of task NAME is read
    /// from COLUMN of the JSON lines. The first task given is the primary one (the model's own
    /// head, labels from `init`); a task the model lacks gets a new head (pooling, LayerNorm,
    /// classifier) with the labels found in the training data. Default: one task, "label".
    #[arg(long = "task", value_name = "NAME=COLUMN")]
    pub(super) task: Vec<String>,
    /// Weight of a task's loss, NAME=W (repeatable; default 1 for every task).
    #[arg(long = "task-weight", value_name = "NAME=W")]
    pub(super) task_weight: Vec<String>,
    /// Do not train this task's head (repeatable); its loss still trains the encoder.
    #[arg(long = "freeze-task", value_name = "NAME")]
    pub(super) freeze_task: Vec<String>,
    /// Stop after this epoch and keep the checkpoint, to continue later with --resume auto.
    #[arg(long)]
    pub(super) stop_after_epoch: Option<usize>,
    /// Encoder precision: f32, or bf16 (bf16 activations and matmuls over f32 master weights;
    /// LayerNorm, softmax, pooling, heads and the optimizer in f32). Halves the activation and
    /// frozen-layer-cache memory; faster only where the hardware has bf16 arithmetic (GPUs,
    /// CPUs with AVX512_BF16/AMX). A step with NaN/inf gradients is skipped (see --max-bad-steps).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub(super) precision: Precision,
    /// `text`: a progress bar and a line per epoch on stderr; `json`: one JSON object per
    /// event (phase, step, epoch, done) on stdout, no progress bar.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
}

/// Floating-point precision of the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Precision {
    /// 32-bit floats throughout.
    F32,
    /// bfloat16 activations and matmuls, f32 weights.
    Bf16,
}

impl Precision {
    /// The encoder's compute dtype.
    pub fn dtype(self) -> candle_core::DType {
        match self {
            Self::F32 => candle_core::DType::F32,
            Self::Bf16 => candle_core::DType::BF16,
        }
    }
}

/// How training reports progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum LogFormat {
    /// For people: progress bar and epoch lines on stderr.
    Text,
    /// For machines: JSON lines on stdout.
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum, serde::Serialize)]
pub(super) enum ScheduleArg {
    /// Linear decay to 0.
    Linear,
    /// Cosine decay to 0.
    Cosine,
    /// Constant after warm-up.
    Constant,
}

#[derive(Debug, Clone, Copy, ValueEnum, serde::Serialize)]
pub(super) enum MetricArg {
    /// Macro-averaged F1.
    MacroF1,
    /// Weighted F1.
    WeightedF1,
    /// Accuracy.
    Accuracy,
    /// Dev loss (lower is better).
    DevLoss,
}

/// Splits `NAME=VALUE`.
pub(super) fn name_value<'a>(flag: &str, text: &'a str) -> Result<(&'a str, &'a str)> {
    match text.split_once('=') {
        Some((n, v)) if !n.trim().is_empty() && !v.trim().is_empty() => Ok((n.trim(), v.trim())),
        _ => bail!("{flag} {text}: expected NAME=VALUE"),
    }
}

impl TrainArgs {
    /// The training configuration; `train_labels` (the primary task's, where present) and
    /// `labels` resolve `--class-weights`, `tasks` (names in task order) the task flags.
    pub(super) fn config(&self, train_labels: &[usize], labels: &[String], tasks: &[String]) -> Result<TrainConfig> {
        let task_index = |flag: &str, name: &str| {
            tasks
                .iter()
                .position(|t| t == name)
                .with_context(|| format!("{flag} {name}: the model has no such task (its tasks: {})", tasks.join(", ")))
        };
        let mut task_weights = vec![1.0; tasks.len()];
        for text in &self.task_weight {
            let (name, w) = name_value("--task-weight", text)?;
            let w: f64 = w
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .with_context(|| format!("--task-weight {text}: the weight must be a non-negative number"))?;
            task_weights[task_index("--task-weight", name)?] = w;
        }
        if task_weights.iter().all(|&w| w == 0.0) {
            bail!("--task-weight: at least one task needs a weight above 0");
        }
        let frozen_tasks =
            self.freeze_task.iter().map(|name| task_index("--freeze-task", name)).collect::<Result<Vec<_>>>()?;
        if self.epochs == 0 || self.batch_size == 0 || self.grad_accum == 0 {
            bail!("--epochs, --batch-size and --grad-accum must be at least 1");
        }
        let class_weights = match self.class_weights.as_str() {
            "none" => None,
            "balanced" => Some(balanced_class_weights(train_labels, labels.len())),
            list => {
                let w: Vec<f32> = list
                    .split(',')
                    .map(|x| x.trim().parse::<f32>())
                    .collect::<std::result::Result<_, _>>()
                    .with_context(|| format!("--class-weights {list}: expected none, balanced or numbers"))?;
                if w.len() != labels.len() || w.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    bail!(
                        "--class-weights needs {} non-negative numbers, one per label ({})",
                        labels.len(),
                        labels.join(", ")
                    );
                }
                Some(w)
            }
        };
        let unfreeze = self.unfreeze.as_deref().map(UnfreezeSchedule::parse).transpose()?;
        let starts_frozen = self.freeze_base
            || unfreeze
                .as_ref()
                .and_then(|u| u.phases().first())
                .is_some_and(|&(e, w)| e == 0 && w == longread_train::unfreeze::Unfreeze::Head);
        Ok(TrainConfig {
            epochs: self.epochs,
            batch_size: self.batch_size,
            grad_accum: self.grad_accum,
            max_grad_norm: self.max_grad_norm,
            decay: match self.schedule {
                ScheduleArg::Linear => Decay::Linear,
                ScheduleArg::Cosine => Decay::Cosine,
                ScheduleArg::Constant => Decay::Constant,
            },
            warmup_ratio: self.warmup_ratio,
            seed: self.seed,
            max_batch_tokens: self.max_batch_tokens,
            recompute: !self.no_recompute,
            class_weights,
            metric: match self.metric {
                MetricArg::MacroF1 => Metric::MacroF1,
                MetricArg::WeightedF1 => Metric::WeightedF1,
                MetricArg::Accuracy => Metric::Accuracy,
                MetricArg::DevLoss => Metric::DevLoss,
            },
            patience: self.patience,
            freezing: Freezing {
                train_embeddings: self.train_embeddings,
                freeze_base: self.freeze_base,
                freeze_bottom: self.freeze_bottom,
            },
            unfreeze,
            task_weights,
            frozen_tasks,
            cache: CacheSettings {
                enabled: !self.no_cache,
                memory_limit: self.cache_memory.saturating_mul(1 << 20),
                spill_dir: self.out.clone(),
            },
            groups: GroupSettings {
                lr: self.lr,
                head_lr: self.head_lr.unwrap_or(if starts_frozen { 1e-3 } else { self.lr }),
                weight_decay: self.weight_decay,
                layer_lr_decay: self.layer_lr_decay,
            },
            adamw: AdamWConfig::default(),
            max_bad_steps: self.max_bad_steps,
            stop_after_epoch: self.stop_after_epoch,
        })
    }
}
