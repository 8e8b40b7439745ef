//! A masked-language-model pretraining run on a corpus, with dynamic masking, owned by the
//! library like [`crate::run::train_run`]: of a new RoBERTa from a preset (or a config.json),
//! or continued from a pretrained BERT- or RoBERTa-family checkpoint (domain- or task-adaptive
//! pretraining, Gururangan et al. 2020). The output is a `RobertaForMaskedLM` (or
//! `BertForMaskedLM`) directory that transformers loads and `longread init --encoder` accepts.

use std::cell::RefCell;
use std::path::PathBuf;

use longread_model::checkpoint::resolve_model_dir;
use longread_model::masked_lm::MaskedLm;
use longread_model::model_dir::write_new_dir;
use longread_model::presets::{init_masked_lm, preset_config};
use longread_model::EncoderConfig;
use longread_text::mlm::{pack_sequences, split_held_out, Masker};
use longread_text::{read_corpus, TextTokenizer};

use crate::error::{Result, TrainError};
use crate::pretrain::{pretrain, PretrainConfig, PretrainLog, PretrainResume};
use crate::run::kit::{specials, Specials};
use crate::run::spec::TrainPrecision;
use crate::run::{check_resumed_run, read_checkpoint, remove_other_checkpoints, resume_from, PretrainOutput, RunHooks};
use crate::schedule::Decay;
use crate::trainer::Progress;
use crate::AdamWConfig;

/// Every setting of a pretraining run (`longread pretrain`'s flags).
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PretrainSpec {
    /// Corpus: files or directories (every .txt, .jsonl, .csv and .tsv below). A .jsonl file
    /// gives each line's "text", a .csv/.tsv file each row's "text" column; other files give
    /// each non-empty line.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "input", required = true, num_args = 1..))]
    pub corpus: Vec<PathBuf>,
    /// tokenizer.json or a directory holding one (e.g. from `longread tokenizer train`). With
    /// --model, default: the model's own tokenizer.
    #[cfg_attr(feature = "clap", arg(long))]
    pub tokenizer: Option<PathBuf>,
    /// A new model's shape: roberta-base, roberta-large, small or tiny (see `longread encoder new`).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with_all = ["config", "model"]))]
    pub preset: Option<String>,
    /// A new model's shape from a RoBERTa config.json instead of a preset.
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "model"))]
    pub config: Option<PathBuf>,
    /// Continue the pretraining of this encoder instead of starting a new one: a Hugging Face
    /// checkpoint directory (BERT or RoBERTa family; config.json, model.safetensors,
    /// tokenizer.json) or a Hugging Face Hub id. Its masked-LM head is used when it
    /// has one, else a new head is initialised (sentence-transformers models have none). Adapting
    /// an encoder to the task's own texts before fine-tuning ("task-adaptive pretraining") wants a
    /// lower --lr than from scratch: 1e-4 or less.
    #[cfg_attr(feature = "clap", arg(long))]
    pub model: Option<String>,
    /// Output directory: config.json, model.safetensors (latest weights), tokenizer.json,
    /// metrics.jsonl, trainer_state.json, training_args.json and checkpoint-last/.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "output"))]
    pub out: PathBuf,
    /// Continue an interrupted run: `auto` (OUT/checkpoint-last) or a checkpoint directory.
    #[cfg_attr(feature = "clap", arg(long))]
    pub resume: Option<String>,
    /// Optimizer steps (`--steps` is the same flag).
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "steps", default_value_t = 1000))]
    pub max_steps: usize,
    /// Sequences per step.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 16))]
    pub batch_size: usize,
    /// Tokens per packed sequence, special tokens included (≤ the model's positions).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 128))]
    pub seq_len: usize,
    /// Fraction of ordinary tokens selected for prediction (80% → <mask>, 10% random, 10% kept).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.15))]
    pub mask_prob: f64,
    /// Peak learning rate.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 5e-4))]
    pub lr: f64,
    /// Steps of linear warm-up.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 100))]
    pub warmup_steps: usize,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.01))]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (0 = off).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 1.0))]
    pub max_grad_norm: f64,
    /// Held-out MLM loss and perplexity (and a checkpoint) every this many steps.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 200))]
    pub eval_every: usize,
    /// Fraction of the packed sequences held out for evaluation.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.05))]
    pub held_out: f64,
    /// Seed of the initial weights, data order, masks and dropout.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 42))]
    pub seed: u64,
    /// Steps in a row with NaN/inf loss or gradients that stop the run.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 5))]
    pub max_bad_steps: usize,
    /// Stop after this step and keep the checkpoint, to continue with --resume auto.
    #[cfg_attr(feature = "clap", arg(long))]
    pub stop_after_step: Option<usize>,
    /// Encoder precision (as for `train`).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TrainPrecision::F32))]
    pub precision: TrainPrecision,
    /// Where the encoder trains: the front's global `--device`, resolved when the run starts.
    #[cfg_attr(feature = "clap", arg(skip))]
    pub device: longread_model::DeviceChoice,
}

/// How a pretraining run ended.
#[derive(Debug)]
pub struct PretrainSummary {
    /// The evaluations of this call.
    pub logs: Vec<PretrainLog>,
    /// True when it stopped at `--stop-after-step` with steps left (resume later).
    pub stopped_for_resume: bool,
}

/// Settings that may differ when a pretraining run is resumed.
/// The device too: a run moved to another device continues from the same state (documented as
/// not bit-identical to staying put).
const MAY_CHANGE_ON_RESUME: [&str; 6] = ["resume", "out", "stop_after_step", "log_format", "max_bad_steps", "device"];

/// Runs `spec`: a new encoder from the preset or config, or a copy of `--model` to continue
/// (written with training_args.json, `front` adding the front's own settings), or the run in
/// `spec.out` resumed (refusing other settings); pretrains and saves at every evaluation.
pub fn pretrain_run(
    spec: &PretrainSpec,
    front: serde_json::Map<String, serde_json::Value>,
    hooks: &mut dyn RunHooks,
) -> Result<PretrainSummary> {
    let device = spec.device.resolve()?;
    let checkpoint = resume_from(&spec.out, spec.resume.as_deref())?;
    if spec.precision == TrainPrecision::Int8 {
        bail!("--precision int8 does not train an encoder: pretrain in f32 or bf16");
    }
    let in_unit = |x: f64| 0.0 < x && x < 1.0;
    if !in_unit(spec.mask_prob) || !in_unit(spec.held_out) {
        bail!("--mask-prob and --held-out must be between 0 and 1");
    }
    // A negative rate climbed the loss and NaN diverged after a few steps: both ran.
    if !(spec.lr.is_finite() && spec.lr > 0.0) {
        bail!("--lr {}: a learning rate must be a number above 0", spec.lr);
    }
    for (name, value, range) in [
        ("--weight-decay", spec.weight_decay, "[0, ∞)"),
        ("--max-grad-norm", spec.max_grad_norm, "[0, ∞) (0 turns clipping off)"),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            bail!("{name} {value}: must be in {range}");
        }
    }
    let mut settings =
        serde_json::to_value(spec).map_err(|e| TrainError::Run(format!("recording the settings: {e}")))?;
    if let Some(obj) = settings.as_object_mut() {
        obj.extend(front);
    }
    if checkpoint.is_some() {
        check_resumed_run(&spec.out, &settings, &MAY_CHANGE_ON_RESUME)?;
    }
    let continued = spec.model.as_deref().map(resolve_model_dir).transpose()?;
    let tokenizer_path = match (&spec.tokenizer, &continued) {
        (Some(path), _) => crate::run::kit::tokenizer_file(path),
        (None, Some(model)) => crate::run::kit::tokenizer_file(model),
        (None, None) => bail!("give --tokenizer (or --model, whose tokenizer is then used)"),
    };
    let mut tokenizer = TextTokenizer::from_file(&tokenizer_path)?;
    // Hub tokenizers often truncate (all-MiniLM-L6-v2's to 128 tokens): the corpus is packed
    // into sequences, so every document must be tokenized whole.
    tokenizer.disable_truncation_and_padding()?;
    let special = specials(&tokenizer)?;
    let vocab = tokenizer.inner().get_vocab_size(true);
    let texts = read_corpus(&spec.corpus)?;
    let encoded = tokenizer
        .inner()
        .encode_batch(texts.iter().map(String::as_str).collect::<Vec<_>>(), false)
        .map_err(|e| TrainError::Run(format!("tokenizing the corpus: {e}")))?;
    let ids: Vec<Vec<u32>> = encoded.iter().map(|e| e.get_ids().to_vec()).collect();
    // The data and the step counts are checked before a new run writes its directory: a run
    // refused here leaves nothing that a second try would find "already exists".
    if spec.batch_size == 0 || spec.max_steps == 0 || spec.eval_every == 0 {
        bail!("--batch-size, --max-steps and --eval-every must be at least 1");
    }
    if spec.seq_len < 3 {
        bail!("--seq-len must be at least 3 (<s>, a token and </s>)");
    }
    let sequences = pack_sequences(&ids, spec.seq_len, special.bos, special.eos, special.eos);
    let n = sequences.len();
    let (held_out, train) = split_held_out(sequences, spec.held_out, spec.seed);
    if train.is_empty() {
        bail!(
            "the corpus gives {n} sequence{} of {} tokens: too few to hold some out and train on the rest \
             (give more text, or a shorter --seq-len)",
            if n == 1 { "" } else { "s" },
            spec.seq_len
        );
    }
    if checkpoint.is_none() {
        match &continued {
            Some(model) => {
                let stored_head = continued_encoder(spec, model, &special, vocab, &tokenizer_path, &settings)?;
                let head = if stored_head { "its masked-LM head" } else { "a new masked-LM head" };
                hooks.note(&format!("continuing the pretraining of {} with {head}", model.display()));
            }
            None => new_encoder(spec, &special, vocab, &tokenizer_path, &settings)?,
        }
    }
    let source = checkpoint.clone().unwrap_or_else(|| spec.out.clone());
    let mut model = MaskedLm::load(&source, true, &device)?;
    model.set_precision(spec.precision.dtype());
    check_seq_len(spec, model.config())?;
    let resume = checkpoint
        .as_deref()
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| PretrainResume { state, moments, steps }))
        .transpose()?;

    let (held_out, train) = (held_out.as_slice(), train.as_slice());
    let cfg = pretrain_config(spec, &special, vocab);
    let tokens: usize = train.iter().map(Vec::len).sum();
    hooks.note(&format!(
        "pretraining on {} sequences ({tokens} tokens) of up to {} tokens, {} held out; {} steps of {}",
        train.len(),
        spec.seq_len,
        held_out.len(),
        spec.max_steps,
        spec.batch_size
    ));
    let mut output = PretrainOutput::new(&spec.out, resume.as_ref().map(|r| r.state.step));
    let hooks = RefCell::new(hooks);
    let logs = pretrain(
        &model,
        train,
        held_out,
        &cfg,
        &device,
        resume,
        |s| hooks.borrow_mut().progress(Progress::PretrainStep(s)),
        |e| {
            output.eval_end(&e)?;
            hooks.borrow_mut().evaluation(e.log);
            Ok(())
        },
    )
    .map_err(|e| crate::run::checkpoints::with_resume_hint(e, &spec.out, ", at an evaluation"))?;
    let stopped_for_resume =
        logs.last().is_some_and(|l| Some(l.step) == spec.stop_after_step && l.step < spec.max_steps);
    if !stopped_for_resume {
        remove_other_checkpoints(&spec.out, None)?;
    }
    Ok(PretrainSummary { logs, stopped_for_resume })
}

/// Writes the new, randomly initialised encoder of `spec` into `spec.out` with its tokenizer
/// and settings.
fn new_encoder(
    spec: &PretrainSpec,
    special: &Specials,
    vocab: usize,
    tokenizer_path: &std::path::Path,
    settings: &serde_json::Value,
) -> Result<()> {
    let mut config = match (&spec.preset, &spec.config) {
        (Some(name), None) => preset_config(name, vocab)?,
        (None, Some(path)) => EncoderConfig::from_file(path)?,
        _ => bail!("give --preset NAME or --config FILE (a RoBERTa config.json) for a new model, or --model DIR to continue one"),
    };
    if config.model_type != "roberta" || config.vocab_size != vocab {
        bail!(
            "the model must be a RoBERTa with the tokenizer's {vocab} tokens (config: {} with {})",
            config.model_type,
            config.vocab_size
        );
    }
    check_seq_len(spec, &config)?;
    special.set_ids(&mut config);
    let tensors = init_masked_lm(&config, spec.seed)?;
    let tokenizer =
        std::fs::read(tokenizer_path).map_err(|source| TrainError::Io { path: tokenizer_path.to_owned(), source })?;
    let files: [(&str, Vec<u8>); 4] = [
        ("config.json", pretty(&config).into_bytes()),
        ("tokenizer.json", tokenizer),
        ("training_args.json", pretty(settings).into_bytes()),
        ("metrics.jsonl", Vec::new()),
    ];
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    Ok(write_new_dir(&spec.out, &tensors, &files)?)
}

/// Writes `model` (a pretrained encoder, with its masked-LM head or a new one) into `spec.out`
/// with the tokenizer and settings; returns whether the head was the checkpoint's.
fn continued_encoder(
    spec: &PretrainSpec,
    model: &std::path::Path,
    special: &Specials,
    vocab: usize,
    tokenizer_path: &std::path::Path,
    settings: &serde_json::Value,
) -> Result<bool> {
    if spec.preset.is_some() || spec.config.is_some() {
        bail!("--model continues a pretrained encoder: give no --preset or --config with it");
    }
    let (lm, stored_head) = MaskedLm::continue_from(model, spec.seed, &longread_model::device::host())?;
    let config = lm.config();
    if vocab > config.vocab_size {
        bail!(
            "the tokenizer has {vocab} tokens, more than the {} rows of {}'s embeddings: give the model's own tokenizer",
            config.vocab_size,
            model.display()
        );
    }
    if config.pad_token_id != special.pad {
        bail!(
            "the tokenizer pads with id {} but {} pads with {}: give the model's own tokenizer",
            special.pad,
            model.display(),
            config.pad_token_id
        );
    }
    check_seq_len(spec, config)?;
    let tokenizer =
        std::fs::read(tokenizer_path).map_err(|source| TrainError::Io { path: tokenizer_path.to_owned(), source })?;
    let args = pretty(settings);
    let files: [(&str, &[u8]); 3] =
        [("tokenizer.json", &tokenizer), ("training_args.json", args.as_bytes()), ("metrics.jsonl", b"")];
    lm.save(&spec.out, &files)?;
    Ok(stored_head)
}

/// Refuses a `--seq-len` the model's positions cannot hold (checked before a new run writes
/// anything, and again on the loaded model, resumed runs included).
fn check_seq_len(spec: &PretrainSpec, config: &EncoderConfig) -> Result<()> {
    if spec.seq_len < 3 || spec.seq_len > config.max_sequence_length() {
        bail!("--seq-len must be between 3 and the model's {} positions", config.max_sequence_length());
    }
    Ok(())
}

/// Pretty JSON with a final newline.
pub(crate) fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// The loop's settings from the run's.
fn pretrain_config(spec: &PretrainSpec, special: &Specials, vocab: usize) -> PretrainConfig {
    PretrainConfig {
        max_steps: spec.max_steps,
        batch_size: spec.batch_size,
        masker: Masker {
            mask_prob: spec.mask_prob,
            mask_id: special.mask,
            vocab_size: vocab as u32,
            special_ids: special.all.clone(),
        },
        lr: spec.lr,
        weight_decay: spec.weight_decay,
        warmup_steps: spec.warmup_steps,
        decay: Decay::Linear,
        max_grad_norm: spec.max_grad_norm,
        seed: spec.seed,
        eval_every: spec.eval_every,
        max_bad_steps: spec.max_bad_steps,
        adamw: AdamWConfig::default(),
        stop_after_step: spec.stop_after_step,
        pad_id: special.pad,
    }
}
