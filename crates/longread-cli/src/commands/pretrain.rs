//! `longread pretrain`: masked-language-model pretraining of a RoBERTa from a preset (or a
//! config.json) on a corpus, with dynamic masking; the output is a `RobertaForMaskedLM`
//! directory that transformers loads and `longread init --encoder` accepts.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use longread_model::masked_lm::MaskedLm;
use longread_model::model_dir::write_new_dir;
use longread_model::presets::{init_masked_lm, preset_config};
use longread_model::EncoderConfig;
use longread_text::mlm::{pack_sequences, split_held_out, Masker};
use longread_text::{read_corpus, TextTokenizer};
use longread_train::pretrain::{pretrain, PretrainConfig, PretrainResume};
use longread_train::run::{read_checkpoint, remove_other_checkpoints, resume_from, PretrainOutput};
use longread_train::schedule::Decay;
use longread_train::AdamWConfig;

use crate::commands::train::{LogFormat, Precision};

/// Arguments of `longread pretrain`.
#[derive(Debug, Args, serde::Serialize)]
pub struct PretrainArgs {
    /// Corpus: files or directories (every .txt and .jsonl below). A .jsonl file gives each
    /// line's "text"; other files give each non-empty line.
    #[arg(long, required = true, num_args = 1..)]
    corpus: Vec<PathBuf>,
    /// tokenizer.json or a directory holding one (e.g. from `longread tokenizer train`).
    #[arg(long)]
    tokenizer: PathBuf,
    /// Model shape: roberta-base, roberta-large, small or tiny (see `longread encoder new`).
    #[arg(long, conflicts_with = "config")]
    preset: Option<String>,
    /// Model shape from a RoBERTa config.json instead of a preset.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output directory: config.json, model.safetensors (latest weights), tokenizer.json,
    /// metrics.jsonl, trainer_state.json, training_args.json and checkpoint-last/.
    #[arg(long)]
    out: PathBuf,
    /// Continue an interrupted run: `auto` (OUT/checkpoint-last) or a checkpoint directory.
    #[arg(long)]
    resume: Option<String>,
    /// Optimizer steps.
    #[arg(long, default_value_t = 1000)]
    max_steps: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Tokens per packed sequence, special tokens included (≤ the model's positions).
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Fraction of ordinary tokens selected for prediction (80% → <mask>, 10% random, 10% kept).
    #[arg(long, default_value_t = 0.15)]
    mask_prob: f64,
    /// Peak learning rate.
    #[arg(long, default_value_t = 5e-4)]
    lr: f64,
    /// Steps of linear warm-up.
    #[arg(long, default_value_t = 100)]
    warmup_steps: usize,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights).
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f64,
    /// Clip the global gradient norm to this (0 = off).
    #[arg(long, default_value_t = 1.0)]
    max_grad_norm: f64,
    /// Held-out MLM loss and perplexity (and a checkpoint) every this many steps.
    #[arg(long, default_value_t = 200)]
    eval_every: usize,
    /// Fraction of the packed sequences held out for evaluation.
    #[arg(long, default_value_t = 0.05)]
    held_out: f64,
    /// Seed of the initial weights, data order, masks and dropout.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Steps in a row with NaN/inf loss or gradients that stop the run.
    #[arg(long, default_value_t = 5)]
    max_bad_steps: usize,
    /// Stop after this step and keep the checkpoint, to continue with --resume auto.
    #[arg(long)]
    stop_after_step: Option<usize>,
    /// Encoder precision (as for `train`).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// `text`: progress bar and a line per evaluation on stderr; `json`: JSON lines on stdout.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Token ids the masking and packing need.
struct Specials {
    bos: u32,
    eos: u32,
    pad: u32,
    mask: u32,
    all: Vec<u32>,
}

fn specials(tokenizer: &TextTokenizer) -> Result<Specials> {
    let inner = tokenizer.inner();
    let find = |names: [&str; 2]| names.iter().find_map(|n| inner.token_to_id(n));
    let (Some(bos), Some(eos), Some(pad), Some(mask)) =
        (find(["<s>", "[CLS]"]), find(["</s>", "[SEP]"]), find(["<pad>", "[PAD]"]), find(["<mask>", "[MASK]"]))
    else {
        bail!("the tokenizer needs <s> </s> <pad> <mask> (or [CLS] [SEP] [PAD] [MASK]) for masked-LM pretraining");
    };
    let mut all = vec![bos, eos, pad, mask];
    all.extend(find(["<unk>", "[UNK]"]));
    Ok(Specials { bos, eos, pad, mask, all })
}

/// Runs `longread pretrain`.
pub fn run(args: PretrainArgs, quiet: bool) -> Result<()> {
    let device = Device::Cpu;
    let checkpoint = resume_from(&args.out, args.resume.as_deref())?;
    let in_unit = |x: f64| 0.0 < x && x < 1.0;
    if !in_unit(args.mask_prob) || !in_unit(args.held_out) {
        bail!("--mask-prob and --held-out must be between 0 and 1");
    }
    let tokenizer_path =
        if args.tokenizer.is_dir() { args.tokenizer.join("tokenizer.json") } else { args.tokenizer.clone() };
    let tokenizer = TextTokenizer::from_file(&tokenizer_path)?;
    let special = specials(&tokenizer)?;
    let vocab = tokenizer.inner().get_vocab_size(true);
    let texts = read_corpus(&args.corpus)?;
    let encoded = tokenizer
        .inner()
        .encode_batch(texts.iter().map(String::as_str).collect::<Vec<_>>(), false)
        .map_err(|e| anyhow::anyhow!("tokenizing the corpus: {e}"))?;
    let ids: Vec<Vec<u32>> = encoded.iter().map(|e| e.get_ids().to_vec()).collect();
    if checkpoint.is_none() {
        let mut config = match (&args.preset, &args.config) {
            (Some(name), None) => preset_config(name, vocab)?,
            (None, Some(path)) => EncoderConfig::from_file(path)?,
            _ => bail!("give --preset NAME or --config FILE (a RoBERTa config.json)"),
        };
        if config.model_type != "roberta" || config.vocab_size != vocab {
            bail!(
                "the model must be a RoBERTa with the tokenizer's {vocab} tokens (config: {} with {})",
                config.model_type,
                config.vocab_size
            );
        }
        if args.seq_len < 3 || args.seq_len > config.max_sequence_length() {
            bail!("--seq-len must be between 3 and the model's {} positions", config.max_sequence_length());
        }
        config.pad_token_id = special.pad;
        config.extra.insert("bos_token_id".into(), special.bos.into());
        config.extra.insert("eos_token_id".into(), special.eos.into());
        let tensors = init_masked_lm(&config, args.seed)?;
        let files: [(&str, Vec<u8>); 4] = [
            ("config.json", (serde_json::to_string_pretty(&config)? + "\n").into_bytes()),
            ("tokenizer.json", std::fs::read(&tokenizer_path)?),
            ("training_args.json", (serde_json::to_string_pretty(&args)? + "\n").into_bytes()),
            ("metrics.jsonl", Vec::new()),
        ];
        let files: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        write_new_dir(&args.out, &tensors, &files)?;
    }
    let source = checkpoint.clone().unwrap_or_else(|| args.out.clone());
    let mut model = MaskedLm::load(&source, true, &device).with_context(|| format!("loading {}", source.display()))?;
    model.set_precision(args.precision.dtype());
    if args.seq_len < 3 || args.seq_len > model.config().max_sequence_length() {
        bail!("--seq-len must be between 3 and the model's {} positions", model.config().max_sequence_length());
    }
    let resume = checkpoint
        .as_deref()
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| PretrainResume { state, moments, steps }))
        .transpose()?;

    let sequences = pack_sequences(&ids, args.seq_len, special.bos, special.eos, special.eos);
    let n = sequences.len();
    let (held_out, train) = split_held_out(sequences, args.held_out, args.seed);
    if train.is_empty() {
        bail!("the corpus gives only {n} sequences of {} tokens: too few to hold some out", args.seq_len);
    }
    let (held_out, train) = (held_out.as_slice(), train.as_slice());
    let cfg = PretrainConfig {
        max_steps: args.max_steps,
        batch_size: args.batch_size,
        masker: Masker {
            mask_prob: args.mask_prob,
            mask_id: special.mask,
            vocab_size: vocab as u32,
            special_ids: special.all.clone(),
        },
        lr: args.lr,
        weight_decay: args.weight_decay,
        warmup_steps: args.warmup_steps,
        decay: Decay::Linear,
        max_grad_norm: args.max_grad_norm,
        seed: args.seed,
        eval_every: args.eval_every,
        max_bad_steps: args.max_bad_steps,
        adamw: AdamWConfig::default(),
        stop_after_step: args.stop_after_step,
        pad_id: special.pad,
    };
    let json = args.log_format == LogFormat::Json;
    let text = !quiet && !json;
    if text {
        let tokens: usize = train.iter().map(Vec::len).sum();
        eprintln!(
            "pretraining on {} sequences ({tokens} tokens) of up to {} tokens, {} held out; {} steps of {}",
            train.len(),
            args.seq_len,
            held_out.len(),
            args.max_steps,
            args.batch_size
        );
    }
    let bar = if text { ProgressBar::new(args.max_steps as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} step {pos}/{len} [{elapsed_precise}, eta {eta}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut output = PretrainOutput::new(&args.out, resume.as_ref().map(|r| r.state.step));
    let mut since = std::time::Instant::now();
    let logs = pretrain(
        &model,
        train,
        held_out,
        &cfg,
        &device,
        resume,
        |s| {
            let tps = s.tokens as f64 / since.elapsed().as_secs_f64().max(1e-9);
            since = std::time::Instant::now();
            bar.set_position(s.step as u64);
            bar.set_message(format!("loss {:.4}, lr {:.2e}, {tps:.0} tokens/s", s.loss, s.lr));
            if json {
                let line = serde_json::json!({"event": "step", "step": s.step, "loss": s.loss, "lr": s.lr, "tokens_per_second": tps});
                println!("{line}");
            }
        },
        |e| {
            output.eval_end(&e)?;
            if json {
                let mut v = serde_json::to_value(e.log).unwrap_or_default();
                v["event"] = "eval".into();
                println!("{v}");
            }
            if text {
                bar.suspend(|| {
                    eprintln!(
                        "step {}: train loss {:.4}, held-out loss {:.4}, perplexity {:.2}, {:.0} tokens/s",
                        e.log.step, e.log.train_loss, e.log.eval_loss, e.log.perplexity, e.log.tokens_per_second
                    )
                });
            }
            Ok(())
        },
    );
    bar.finish_and_clear();
    let logs = logs?;
    let stopped = logs.last().is_some_and(|l| Some(l.step) == args.stop_after_step && l.step < args.max_steps);
    if !stopped {
        remove_other_checkpoints(&args.out, None)?;
    }
    if text {
        if let Some(last) = logs.last() {
            eprintln!(
                "{} at step {}: held-out perplexity {:.2}; encoder in {}",
                if stopped { "stopped (continue with --resume auto)" } else { "done" },
                last.step,
                last.perplexity,
                args.out.display()
            );
        }
    }
    Ok(())
}
