//! `longread train`: fine-tune a hierarchical classifier made by `longread init`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_text::{read_labelled, resolve_labels, stratified_split, ChunkedDocument, Chunker, TextTokenizer};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::schedule::Decay;
use longread_train::trainer::{balanced_class_weights, train, Metric, Resume, Split, TrainConfig, TrainerState};
use longread_train::AdamWConfig;

use crate::io::{input_name, open_input, write_atomically};

/// Arguments of `longread train`.
#[derive(Debug, Args, serde::Serialize)]
pub struct TrainArgs {
    /// Model directory made by `longread init` (its labels and settings are used).
    #[arg(long)]
    model: PathBuf,
    /// Training data: JSON lines with "text" and "label" (name or index).
    #[arg(long)]
    train: PathBuf,
    /// Dev data in the same format; without it, --dev-split of the training data is held out.
    #[arg(long)]
    dev: Option<PathBuf>,
    /// Fraction of the training data held out for dev (stratified, seeded) when --dev is absent.
    #[arg(long, default_value_t = 0.1)]
    dev_split: f64,
    /// Output directory: the best model (format v1) plus metrics.jsonl, trainer_state.json,
    /// training_args.json and checkpoint-last/ (to resume; removed when the run completes).
    /// Must not exist yet, unless resuming.
    #[arg(long)]
    out: PathBuf,
    /// Continue an interrupted run: `auto` (OUT/checkpoint-last) or a checkpoint directory.
    /// Use the same data and flags as the interrupted run.
    #[arg(long)]
    resume: Option<String>,
    /// Passes over the training data.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Documents per batch.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    /// Batches per optimizer step (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    grad_accum: usize,
    /// Learning rate of the encoder.
    #[arg(long, default_value_t = 2e-5)]
    lr: f64,
    /// Learning rate of pooling + head (default: 1e-3 with --freeze-base, else --lr).
    #[arg(long)]
    head_lr: Option<f64>,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights).
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f64,
    /// Warm-up steps as a fraction of all optimizer steps.
    #[arg(long, default_value_t = 0.1)]
    warmup_ratio: f64,
    /// Learning-rate shape after warm-up.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Linear)]
    schedule: ScheduleArg,
    /// Clip the global gradient norm to this (0 = off).
    #[arg(long, default_value_t = 1.0)]
    max_grad_norm: f64,
    /// Freeze the whole encoder: only pooling and head train, on chunk vectors computed once.
    #[arg(long)]
    freeze_base: bool,
    /// Freeze the embeddings and the bottom K encoder layers.
    #[arg(long, default_value_t = 0)]
    freeze_bottom: usize,
    /// Train the embeddings too (frozen by default).
    #[arg(long)]
    train_embeddings: bool,
    /// Layer-wise learning-rate decay: layer l of N gets lr·d^(N−l), embeddings lr·d^(N+1).
    #[arg(long, default_value_t = 1.0)]
    layer_lr_decay: f64,
    /// Class weights of the loss: none, balanced (n / (classes · count)), or w1,w2,... in label order.
    #[arg(long, default_value = "none")]
    class_weights: String,
    /// Dev metric that picks the best epoch.
    #[arg(long, value_enum, default_value_t = MetricArg::MacroF1)]
    metric: MetricArg,
    /// Stop after this many epochs without improvement (0 = never).
    #[arg(long, default_value_t = 0)]
    patience: usize,
    /// Seed for the dev split, shuffling and dropout.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Most tokens per encoder batch. Training keeps one batch's graph at a time, so this
    /// sets the memory plateau: 512 (one chunk) measured 1.8 GB on MiniLM vs 5.9 GB at 2048,
    /// for 12% more time per step.
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// Keep the whole graph instead of recomputing chunks (memory grows with document length).
    #[arg(long)]
    no_recompute: bool,
    /// Optimizer steps in a row with NaN/inf gradients that stop the run.
    #[arg(long, default_value_t = 5)]
    max_bad_steps: usize,
    /// Stop after this epoch and keep the checkpoint, to continue later with --resume auto.
    #[arg(long)]
    stop_after_epoch: Option<usize>,
}

#[derive(Debug, Clone, Copy, ValueEnum, serde::Serialize)]
enum ScheduleArg {
    /// Linear decay to 0.
    Linear,
    /// Cosine decay to 0.
    Cosine,
    /// Constant after warm-up.
    Constant,
}

#[derive(Debug, Clone, Copy, ValueEnum, serde::Serialize)]
enum MetricArg {
    /// Macro-averaged F1.
    MacroF1,
    /// Weighted F1.
    WeightedF1,
    /// Accuracy.
    Accuracy,
    /// Dev loss (lower is better).
    DevLoss,
}

/// Runs `longread train`.
pub fn run(args: TrainArgs, quiet: bool) -> Result<()> {
    let checkpoint = match args.resume.as_deref() {
        None if args.out.exists() => {
            bail!("{} already exists; choose another --out, or continue its run with --resume auto", args.out.display())
        }
        None => None,
        Some("auto") => {
            let dir = args.out.join(CHECKPOINT);
            if !dir.join("trainer_state.json").is_file() {
                bail!(
                    "nothing to resume: {} has no checkpoint (no {CHECKPOINT}/trainer_state.json)",
                    args.out.display()
                );
            }
            Some(dir)
        }
        Some(dir) => Some(PathBuf::from(dir)),
    };
    if args.epochs == 0 || args.batch_size == 0 || args.grad_accum == 0 {
        bail!("--epochs, --batch-size and --grad-accum must be at least 1");
    }
    let device = Device::Cpu;
    let source = checkpoint.as_deref().unwrap_or(&args.model);
    let model = HierarchicalClassifier::load(source, true, &device)
        .with_context(|| format!("loading model {}", source.display()))?;
    let resume = checkpoint.as_deref().map(read_checkpoint).transpose()?;
    let labels = model.labels().to_vec();
    let chunker = Chunker::new(TextTokenizer::from_file(model.tokenizer_path())?, model.config().longread.chunking())?;

    let (train_docs, train_labels, dev_docs, dev_labels) = load_data(&args, &labels, &chunker)?;
    let class_weights = match args.class_weights.as_str() {
        "none" => None,
        "balanced" => Some(balanced_class_weights(&train_labels, labels.len())),
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
    let cfg = TrainConfig {
        epochs: args.epochs,
        batch_size: args.batch_size,
        grad_accum: args.grad_accum,
        max_grad_norm: args.max_grad_norm,
        decay: match args.schedule {
            ScheduleArg::Linear => Decay::Linear,
            ScheduleArg::Cosine => Decay::Cosine,
            ScheduleArg::Constant => Decay::Constant,
        },
        warmup_ratio: args.warmup_ratio,
        seed: args.seed,
        max_batch_tokens: args.max_batch_tokens,
        recompute: !args.no_recompute,
        class_weights,
        metric: match args.metric {
            MetricArg::MacroF1 => Metric::MacroF1,
            MetricArg::WeightedF1 => Metric::WeightedF1,
            MetricArg::Accuracy => Metric::Accuracy,
            MetricArg::DevLoss => Metric::DevLoss,
        },
        patience: args.patience,
        freezing: Freezing {
            train_embeddings: args.train_embeddings,
            freeze_base: args.freeze_base,
            freeze_bottom: args.freeze_bottom,
        },
        groups: GroupSettings {
            lr: args.lr,
            head_lr: args.head_lr.unwrap_or(if args.freeze_base { 1e-3 } else { args.lr }),
            weight_decay: args.weight_decay,
            layer_lr_decay: args.layer_lr_decay,
        },
        adamw: AdamWConfig::default(),
        max_bad_steps: args.max_bad_steps,
        stop_after_epoch: args.stop_after_epoch,
    };
    let training_args = serde_json::to_string_pretty(&args)? + "\n";
    if !quiet {
        eprintln!(
            "training on {} documents ({} chunks), dev {} documents; labels: {}",
            train_docs.len(),
            train_docs.iter().map(|d| d.chunks.len()).sum::<usize>(),
            dev_docs.len(),
            labels.join(", ")
        );
    }

    let progress = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    progress.set_style(
        ProgressStyle::with_template("{spinner} step {pos}/{len} [{elapsed_precise}, eta {eta}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut metrics_lines = String::new();
    match &resume {
        None => {
            model.save_replacing(&args.out, &[("training_args.json", training_args.as_bytes())])?;
        }
        Some(r) => {
            // Keep the metrics of the epochs the checkpoint has seen.
            let old = std::fs::read_to_string(args.out.join("metrics.jsonl")).unwrap_or_default();
            metrics_lines = old.lines().take(r.state.epoch).map(|l| format!("{l}\n")).collect();
        }
    }
    let logs = train(
        &model,
        Split { docs: &train_docs, labels: &train_labels },
        Split { docs: &dev_docs, labels: &dev_labels },
        &cfg,
        &device,
        resume,
        |s| {
            progress.set_length(s.total_steps as u64);
            progress.set_position(s.step as u64);
            progress.set_message(format!("loss {:.4}, lr {:.2e}", s.loss, s.lr));
        },
        |end| {
            let log = end.log;
            metrics_lines += &(serde_json::to_string(log).map_err(std::io::Error::other).map_err(io_err)? + "\n");
            // The checkpoint first: weights, optimizer moments and the run's state.
            let (moments, steps) = end.optimizer.export_state()?;
            let moments_bytes =
                safetensors::serialize(&moments, None).map_err(|e| io_err(std::io::Error::other(e.to_string())))?;
            let state = serde_json::json!({"state": end.state, "optimizer_steps": steps});
            let state_text = serde_json::to_string_pretty(&state).map_err(std::io::Error::other).map_err(io_err)?;
            end.model.save_replacing(
                &args.out.join(CHECKPOINT),
                &[("optimizer.safetensors", &moments_bytes), ("trainer_state.json", state_text.as_bytes())],
            )?;
            if log.best {
                end.model.save_weights(&args.out)?;
            }
            for (name, text) in [("trainer_state.json", &state_text), ("metrics.jsonl", &metrics_lines)] {
                write_atomically(&args.out.join(name), text.as_bytes())
                    .map_err(|e| io_err(std::io::Error::other(format!("{e:#}"))))?;
            }
            progress.suspend(|| {
                if !quiet {
                    eprintln!(
                        "epoch {}: train loss {:.4}, dev loss {:.4}, accuracy {:.4}, macro-F1 {:.4}{} ({:.0} s)",
                        log.epoch,
                        log.train_loss,
                        log.dev_loss,
                        log.dev.accuracy,
                        log.dev.macro_f1,
                        if log.best { ", best so far: saved" } else { "" },
                        log.seconds
                    );
                }
            });
            Ok(())
        },
    )?;
    progress.finish_and_clear();
    let stopped_early = logs.last().is_some_and(|l| Some(l.epoch) == args.stop_after_epoch && l.epoch < args.epochs);
    if stopped_early {
        if !quiet {
            eprintln!("stopped after epoch {}; continue with --resume auto", logs.last().map_or(0, |l| l.epoch));
        }
    } else {
        // The run is complete: the resumable checkpoint is no longer needed.
        let _ = std::fs::remove_dir_all(args.out.join(CHECKPOINT));
    }
    if !quiet {
        if let Some(best) = logs.iter().rfind(|l| l.best) {
            eprintln!("best epoch {} (macro-F1 {:.4}); model in {}", best.epoch, best.dev.macro_f1, args.out.display());
        }
    }
    Ok(())
}

/// The resumable checkpoint inside the output directory.
const CHECKPOINT: &str = "checkpoint-last";

fn io_err(e: std::io::Error) -> longread_train::TrainError {
    longread_train::TrainError::Model(longread_model::ModelError::Io {
        path: PathBuf::from("training output"),
        source: e,
    })
}

/// The run state and optimizer moments saved in a checkpoint directory.
fn read_checkpoint(dir: &Path) -> Result<Resume> {
    #[derive(serde::Deserialize)]
    struct Saved {
        state: TrainerState,
        optimizer_steps: std::collections::HashMap<String, u64>,
    }
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let saved: Saved =
        serde_json::from_str(&text).with_context(|| format!("{}: not a trainer state", path.display()))?;
    let moments = candle_core::safetensors::load(dir.join("optimizer.safetensors"), &Device::Cpu)
        .with_context(|| format!("reading {}", dir.join("optimizer.safetensors").display()))?;
    Ok(Resume { state: saved.state, moments, steps: saved.optimizer_steps })
}

type Data = (Vec<ChunkedDocument>, Vec<usize>, Vec<ChunkedDocument>, Vec<usize>);

/// Reads, labels and chunks the training and dev documents.
fn load_data(args: &TrainArgs, labels: &[String], chunker: &Chunker) -> Result<Data> {
    let read = |path: &Path| -> Result<(Vec<ChunkedDocument>, Vec<usize>)> {
        let name = input_name(path);
        let examples = read_labelled(open_input(path)?, &name)?;
        let y = resolve_labels(&examples, labels, &name)?;
        let docs = examples
            .iter()
            .map(|e| chunker.chunk(&e.text).with_context(|| format!("{name}:{}", e.line)))
            .collect::<Result<Vec<_>>>()?;
        Ok((docs, y))
    };
    let (docs, y) = read(&args.train)?;
    match &args.dev {
        Some(dev) => {
            let (dev_docs, dev_y) = read(dev)?;
            Ok((docs, y, dev_docs, dev_y))
        }
        None => {
            if !(0.0 < args.dev_split && args.dev_split < 1.0) {
                bail!("--dev-split must be between 0 and 1 (or give --dev FILE)");
            }
            let (train_idx, dev_idx) = stratified_split(&y, args.dev_split, args.seed);
            if dev_idx.is_empty() || train_idx.is_empty() {
                bail!("--dev-split {} leaves an empty training or dev set", args.dev_split);
            }
            let pick = |idx: &[usize]| -> (Vec<ChunkedDocument>, Vec<usize>) {
                (idx.iter().map(|&i| docs[i].clone()).collect(), idx.iter().map(|&i| y[i]).collect())
            };
            let (t, ty) = pick(&train_idx);
            let (d, dy) = pick(&dev_idx);
            Ok((t, ty, d, dy))
        }
    }
}
