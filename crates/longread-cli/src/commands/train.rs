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
use longread_train::trainer::{balanced_class_weights, train, Metric, Split, TrainConfig};
use longread_train::AdamWConfig;

use crate::io::{input_name, open_input};

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
    /// Output directory: the best model (format v1) plus metrics.jsonl and training_args.json.
    /// Must not exist yet.
    #[arg(long)]
    out: PathBuf,
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
    /// Most tokens per encoder batch.
    #[arg(long, default_value_t = 2048)]
    max_batch_tokens: usize,
    /// Keep the whole graph instead of recomputing chunks (memory grows with document length).
    #[arg(long)]
    no_recompute: bool,
    /// Optimizer steps in a row with NaN/inf gradients that stop the run.
    #[arg(long, default_value_t = 5)]
    max_bad_steps: usize,
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
    if args.out.exists() {
        bail!("{} already exists; choose another --out (resuming a run is not supported yet)", args.out.display());
    }
    if args.epochs == 0 || args.batch_size == 0 || args.grad_accum == 0 {
        bail!("--epochs, --batch-size and --grad-accum must be at least 1");
    }
    let device = Device::Cpu;
    let model = HierarchicalClassifier::load(&args.model, true, &device)
        .with_context(|| format!("loading model {}", args.model.display()))?;
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
    let logs = train(
        &model,
        Split { docs: &train_docs, labels: &train_labels },
        Split { docs: &dev_docs, labels: &dev_labels },
        &cfg,
        &device,
        |s| {
            progress.set_length(s.total_steps as u64);
            progress.set_position(s.step as u64);
            progress.set_message(format!("loss {:.4}, lr {:.2e}", s.loss, s.lr));
        },
        |log, model| {
            metrics_lines += &(serde_json::to_string(log).map_err(std::io::Error::other).map_err(model_err)? + "\n");
            if log.best {
                let extra: [(&str, &[u8]); 2] =
                    [("metrics.jsonl", metrics_lines.as_bytes()), ("training_args.json", training_args.as_bytes())];
                model.save_replacing(&args.out, &extra)?;
            } else {
                write_atomically(&args.out.join("metrics.jsonl"), metrics_lines.as_bytes()).map_err(model_err)?;
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
    if !quiet {
        if let Some(best) = logs.iter().rfind(|l| l.best) {
            eprintln!("best epoch {} (macro-F1 {:.4}); model in {}", best.epoch, best.dev.macro_f1, args.out.display());
        }
    }
    Ok(())
}

fn model_err(e: std::io::Error) -> longread_train::TrainError {
    longread_train::TrainError::Model(longread_model::ModelError::Io {
        path: PathBuf::from("metrics.jsonl"),
        source: e,
    })
}

/// Temporary file + rename in the same directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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
