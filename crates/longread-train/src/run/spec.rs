//! What a training run is asked to do: every setting of `longread train` (the CLI's flags
//! are these fields, through clap's derive behind the `clap` feature), their defaults per
//! architecture, their checks, and the training configuration they make.

use std::path::PathBuf;

use longread_model::hierarchical::{Architecture, LongreadSection};
use longread_model::EncoderConfig;

use crate::error::{Result, TrainError};
use crate::groups::{Freezing, GroupSettings};
use crate::schedule::Decay;
use crate::trainer::{balanced_class_weights, CacheSettings, Keep, Metric, TrainConfig};
use crate::unfreeze::UnfreezeSchedule;
use crate::AdamWConfig;

/// `.with_context` for options: `None` becomes a run error with this message.
trait OrRun<T> {
    fn or_run(self, message: impl FnOnce() -> String) -> Result<T>;
}

impl<T> OrRun<T> for Option<T> {
    fn or_run(self, message: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| TrainError::Run(message()))
    }
}

impl<T, E> OrRun<T> for std::result::Result<T, E> {
    fn or_run(self, message: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|_| TrainError::Run(message()))
    }
}

/// Every setting of a training run (`longread train`'s flags).
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TrainSpec {
    /// Model directory made by `longread init` (its labels and settings are used), or a
    /// pretrained encoder (config.json, model.safetensors, tokenizer.json): then a new classifier
    /// of --arch is built on it with default settings, the labels found in the training data
    /// (sorted) and weights seeded by --seed. Not used with --arch han (see --word-vectors).
    #[cfg_attr(feature = "clap", arg(long))]
    pub model: Option<PathBuf>,
    /// The classifier built when --model is a plain encoder (default: hierarchical); with a
    /// model made by `init`, it must name that model's architecture. `han` trains the classic
    /// HAN from scratch and needs no --model.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub arch: Option<Arch>,
    /// Label names in id order, comma-separated, for a new classifier (a plain encoder as
    /// --model, or --arch han); needed when the data's labels are integers (ids into this
    /// list). Default: the label names found in the training data, sorted.
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ','))]
    pub labels: Vec<String>,
    /// Training data: JSON lines with "text" and "label" (name or index).
    #[cfg_attr(feature = "clap", arg(long))]
    pub train: PathBuf,
    /// Dev data in the same format; without it, --dev-split of the training data is held out.
    #[cfg_attr(feature = "clap", arg(long))]
    pub dev: Option<PathBuf>,
    /// Fraction of the training data held out for dev (stratified, seeded) when --dev is absent.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0.1))]
    pub dev_split: f64,
    /// Output directory: the best model (format v1) plus metrics.jsonl, trainer_state.json,
    /// training_args.json and checkpoint-last/ (to resume; removed when the run completes).
    /// Must not exist yet, unless resuming.
    #[cfg_attr(feature = "clap", arg(long))]
    pub out: PathBuf,
    /// Continue an interrupted run: `auto` (OUT/checkpoint-last) or a checkpoint directory.
    /// Use the same data and flags as the interrupted run.
    #[cfg_attr(feature = "clap", arg(long))]
    pub resume: Option<String>,
    /// Passes over the training data [default: 3; 6 for the single-chunk sequence classifier;
    /// 30 with --freeze-base (head only: seconds an epoch) and with --arch han, which stop
    /// early: see --patience].
    #[cfg_attr(feature = "clap", arg(long))]
    pub epochs: Option<usize>,
    /// Documents per batch [default: 4; 32 with --arch han].
    #[cfg_attr(feature = "clap", arg(long))]
    pub batch_size: Option<usize>,
    /// Batches per optimizer step (gradient accumulation).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub grad_accum: usize,
    /// Learning rate of the encoder [default: 2e-5; 5e-5 for the single-chunk sequence
    /// classifier], or of every HAN parameter [default with --arch han: 1e-3].
    #[cfg_attr(feature = "clap", arg(long))]
    pub lr: Option<f64>,
    /// Learning rate of pooling + head (default: 1e-3 with --freeze-base or when --unfreeze
    /// starts with 0:head, else --lr).
    #[cfg_attr(feature = "clap", arg(long))]
    pub head_lr: Option<f64>,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights) [default: 0.01;
    /// 0 with --arch han: plain Adam, as in the paper].
    #[cfg_attr(feature = "clap", arg(long))]
    pub weight_decay: Option<f64>,
    /// Warm-up steps as a fraction of all optimizer steps [default: 0.1; 0 with --arch han].
    #[cfg_attr(feature = "clap", arg(long))]
    pub warmup_ratio: Option<f64>,
    /// Learning-rate shape after warm-up [default: linear; constant with --arch han].
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub schedule: Option<ScheduleArg>,
    /// Clip the global gradient norm to this, 0 = off [default: 1.0; 0.5 with --arch han].
    #[cfg_attr(feature = "clap", arg(long))]
    pub max_grad_norm: Option<f64>,
    /// Freeze the whole encoder: only pooling and head train, on chunk vectors computed once.
    #[cfg_attr(feature = "clap", arg(long))]
    pub freeze_base: bool,
    /// Freeze the embeddings and the bottom K encoder layers (their outputs are computed once
    /// per chunk and cached, see --cache-memory).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub freeze_bottom: usize,
    /// Gradual unfreezing: EPOCH:WHAT phases, WHAT = head | topN | all, e.g. `0:head,3:top6,6:all`
    /// (from epoch 0 the head alone, after 3 epochs also the top 6 layers, after 6 everything).
    /// Before the first phase, the freezing flags apply. Newly trained parameters join the
    /// optimizer with their group's learning rate.
    #[cfg_attr(feature = "clap", arg(long))]
    pub unfreeze: Option<String>,
    /// MiB of frozen-layer outputs kept in memory; the rest goes to a scratch file in --out
    /// (or, with --vector-cache, is read from DIR).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 4096))]
    pub cache_memory: usize,
    /// Keep the chunk vectors of a frozen encoder (--freeze-base, or the head phase of
    /// --unfreeze) in DIR and reuse them in later runs and in `eval`/`predict --vector-cache`:
    /// trying other heads, poolings or seeds on the same documents skips the encoder. Keyed by
    /// the encoder's weights, chunking and precision (a change is a miss, never a stale hit).
    /// With --freeze-bottom K (or a topN phase) DIR also keeps the outputs of the frozen
    /// layers (4 bytes × hidden size per token: ~1.5 MiB per 512-token chunk of a 768-wide
    /// encoder). Both fill as the encoder goes: Ctrl-C stops the fill within ~64 chunks and the
    /// same command starts again from what was stored.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub vector_cache: Option<PathBuf>,
    /// Recompute frozen layers every epoch instead of caching their outputs (same results).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_cache: bool,
    /// Train the embeddings too (frozen by default).
    #[cfg_attr(feature = "clap", arg(long))]
    pub train_embeddings: bool,
    /// Layer-wise learning-rate decay: layer l of N gets lr·d^(N−l), embeddings lr·d^(N+1).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1.0))]
    pub layer_lr_decay: f64,
    /// Class weights of the loss: none, balanced (n / (classes · count)), or w1,w2,... in label order.
    #[cfg_attr(feature = "clap", arg(long, default_value = "none"))]
    pub class_weights: String,
    /// Dev metric that picks the best epoch.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = MetricArg::MacroF1))]
    pub metric: MetricArg,
    /// Which epoch's model OUT keeps: `best` by --metric on the dev set, or `last` — for a
    /// fixed schedule when the dev set is too small to choose between epochs (dev metrics are
    /// still logged every epoch; with --patience, the epoch the run stopped at).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Keep::Best))]
    pub keep: Keep,
    /// Stop after this many epochs without improvement, 0 = never [default: 0; 8 with
    /// --freeze-base; 3 with --arch han].
    #[cfg_attr(feature = "clap", arg(long))]
    pub patience: Option<usize>,
    /// --patience counts only after this many optimizer steps: on a small data set an epoch is
    /// a handful of steps, and a model that still predicts one class early on (a flat dev
    /// metric) is not stopped before it could learn.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 100, value_name = "STEPS"))]
    pub patience_min_steps: usize,
    /// Seed for the dev split, shuffling and dropout.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 42))]
    pub seed: u64,
    /// Stratified K-fold cross-validation on the training data (seeded by --seed). With
    /// --arch bow: the folds that choose C [default: 5]. Otherwise: K runs, each holding out
    /// one fold as its dev set, in OUT/fold-1 … OUT/fold-K, and OUT/cv.json with the mean ± std
    /// of the best dev metric over the folds (for small data, where a 10% dev split is a
    /// handful of documents); no --dev, --dev-split or --stop-after-epoch then, and
    /// --resume auto continues a stopped --cv run fold by fold.
    #[cfg_attr(feature = "clap", arg(long, value_name = "K"))]
    pub cv: Option<usize>,
    /// Most tokens per encoder batch. Training keeps one batch's graph at a time, so this
    /// sets the memory plateau: a smaller budget holds less in memory and takes somewhat more
    /// time per step (figures in BENCHMARKS.md, "Training step: memory and time vs PyTorch").
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 512))]
    pub max_batch_tokens: usize,
    /// Keep the whole graph instead of recomputing chunks (memory grows with document length).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_recompute: bool,
    /// Optimizer steps in a row with NaN/inf gradients that stop the run.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 5))]
    pub max_bad_steps: usize,
    /// A task of a multi-task model, NAME=COLUMN (repeatable): the label of task NAME is read
    /// from COLUMN of the JSON lines. The first task given is the primary one (the model's own
    /// head, labels from `init`); a task the model lacks gets a new head (pooling, LayerNorm,
    /// classifier) with the labels found in the training data. Default: one task, "label".
    #[cfg_attr(feature = "clap", arg(long = "task", value_name = "NAME=COLUMN"))]
    pub task: Vec<String>,
    /// Weight of a task's loss, NAME=W (repeatable; default 1 for every task).
    #[cfg_attr(feature = "clap", arg(long = "task-weight", value_name = "NAME=W"))]
    pub task_weight: Vec<String>,
    /// Do not train this task's head (repeatable); its loss still trains the encoder.
    #[cfg_attr(feature = "clap", arg(long = "freeze-task", value_name = "NAME"))]
    pub freeze_task: Vec<String>,
    /// Stop after this epoch and keep the checkpoint, to continue later with --resume auto.
    #[cfg_attr(feature = "clap", arg(long))]
    pub stop_after_epoch: Option<usize>,
    /// Also write a resumable checkpoint in the middle of an epoch after every N optimizer
    /// steps (0 = only at epoch ends) [default: whenever 10 minutes have passed since the last
    /// checkpoint]. Resuming from one continues exactly as the uninterrupted run would.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub save_every_steps: Option<usize>,
    /// Encoder precision: f32, or bf16 (bf16 activations and matmuls over f32 master weights;
    /// LayerNorm, softmax, pooling, heads and the optimizer in f32). Halves the activation and
    /// frozen-layer-cache memory; not faster on the CPU (candle has no fast bf16 CPU matmul,
    /// even with AVX512_BF16: measured slower than f32), only on GPUs (f32 there uses TF32
    /// products). A step with NaN/inf gradients is skipped (see --max-bad-steps).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TrainPrecision::F32))]
    pub precision: TrainPrecision,
    /// Warm-up in optimizer steps (instead of --warmup-ratio).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "warmup_ratio"))]
    pub warmup_steps: Option<usize>,
    /// AdamW's β1 (decay of the first-moment estimate), in [0, 1).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0.9))]
    pub adam_beta1: f64,
    /// AdamW's β2 (decay of the second-moment estimate), in [0, 1).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0.999))]
    pub adam_beta2: f64,
    /// AdamW's ε (added to the denominator), > 0.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1e-8))]
    pub adam_epsilon: f64,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[allow(missing_docs)]
    pub han: HanSpec,
    /// Wide and deep (encoder models): a bag of words (the flags below) is fitted on the
    /// training documents first, and its log-probabilities, times a scale fitted on its
    /// out-of-fold scores, are added to the logits while the encoder model trains, so the deep
    /// side learns what the words miss. Training documents get out-of-fold scores (from bags of
    /// words fitted without them). The model directory keeps the bag of words in `wide/`, and
    /// every front predicts with both (shown as members "deep" and "wide"). Best with
    /// --freeze-base: a fine-tuned encoder on a few hundred documents learns to overrule the
    /// words (docs/recipes.md). One task only.
    #[cfg_attr(feature = "clap", arg(long, help_heading = BOW_HEADING))]
    pub wide_bow: bool,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[allow(missing_docs)]
    pub bow: BowSpec,
    /// Where the encoder trains: the front's global `--device` (`LONGREAD_DEVICE`, Python's
    /// `device=`), resolved when the run starts. The HAN and the bag of words train on the CPU.
    #[cfg_attr(feature = "clap", arg(skip))]
    pub device: longread_model::DeviceChoice,
    /// Flags given explicitly (on the command line or in --config), filled in after parsing.
    #[cfg_attr(feature = "clap", arg(skip))]
    #[serde(skip)]
    pub given: Vec<String>,
}

/// The flags of `--arch bow` alone (clap ids).
const BOW_ONLY: [&str; 4] = ["c_values", "ngram_max", "min_df", "char_ngrams"];

/// Flags of the trained-by-gradient models (encoders and the HAN) that --arch bow cannot use
/// (clap ids).
const GRADIENT_ONLY: [&str; 30] = [
    "patience_min_steps",
    "epochs",
    "batch_size",
    "grad_accum",
    "lr",
    "head_lr",
    "weight_decay",
    "warmup_ratio",
    "schedule",
    "max_grad_norm",
    "freeze_base",
    "freeze_bottom",
    "unfreeze",
    "no_cache",
    "train_embeddings",
    "layer_lr_decay",
    "metric",
    "keep",
    "patience",
    "no_recompute",
    "max_bad_steps",
    "task",
    "task_weight",
    "freeze_task",
    "stop_after_epoch",
    "save_every_steps",
    "precision",
    "warmup_steps",
    "resume",
    "dev_split",
];

/// The help section of the bag-of-words flags.
#[cfg(feature = "clap")]
const BOW_HEADING: &str = "Bag of words (--arch bow, or the wide side of --wide-bow)";

/// Settings of the bag-of-words baseline.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(next_help_heading = BOW_HEADING))]
pub struct BowSpec {
    /// Inverse L2 regularisation strengths of the logistic regression, comma-separated; the one
    /// with the best mean macro-F1 over --cv folds of the training data (with --wide-bow: 5, or
    /// fewer when a label has fewer documents) is refitted on all of it (one value: no
    /// cross-validation).
    #[cfg_attr(feature = "clap", arg(long = "c-values", value_delimiter = ',', default_value = "0.1,1,10,100,1000"))]
    pub c_values: Vec<f64>,
    /// Longest word n-gram used as a feature (1: words; 2: words and word pairs).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2))]
    pub ngram_max: usize,
    /// Least number of training documents an n-gram must occur in to be a feature.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2))]
    pub min_df: usize,
    /// Character n-grams inside words as a second block of features, `SHORTEST-LONGEST`
    /// (scikit-learn's `char_wb`), e.g. `2-5`: robust to spelling, inflection and names; many
    /// more features than words alone, so slower to train. Default: words only.
    #[cfg_attr(feature = "clap", arg(long, value_name = "MIN-MAX", value_parser = parse_char_ngrams))]
    pub char_ngrams: Option<[usize; 2]>,
}

/// `2-5` → `[2, 5]`.
#[cfg(feature = "clap")]
fn parse_char_ngrams(text: &str) -> std::result::Result<[usize; 2], String> {
    let bad = || format!("{text:?}: give the shortest and longest length as MIN-MAX, e.g. 2-5");
    let (lo, hi) = text.split_once('-').ok_or_else(bad)?;
    let number = |v: &str| v.trim().parse::<usize>().map_err(|_| bad());
    Ok([number(lo)?, number(hi)?])
}

/// The flags of `--arch han` alone (clap ids).
const HAN_ONLY: [&str; 12] = [
    "min_count",
    "max_vocab",
    "doc_size",
    "sent_size",
    "length_percentile",
    "embedding_dim",
    "gru_hidden",
    "attention_size",
    "dropout",
    "attention_hops",
    "attention_penalty",
    "word_vectors",
];

/// Flags of the encoder models that --arch han cannot use (clap ids).
const ENCODER_ONLY: [&str; 3] = ["max_batch_tokens", "cache_memory", "vector_cache"];

/// `--some-flag` for the clap id `some_flag`.
fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

/// The settings of `--arch han` alone.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(next_help_heading = "HAN (--arch han)"))]
pub struct HanSpec {
    /// Words seen fewer times in the training documents are out of vocabulary (id 1).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2))]
    pub min_count: usize,
    /// Keep at most this many most frequent words (besides <pad> and <unk>); 0 = no limit.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 50_000))]
    pub max_vocab: usize,
    /// Sentences read per document (later ones are cut) [default: the --length-percentile
    /// of the training documents' sentence counts].
    #[cfg_attr(feature = "clap", arg(long))]
    pub doc_size: Option<usize>,
    /// Words read per sentence [default: the --length-percentile of the training sentences'
    /// word counts].
    #[cfg_attr(feature = "clap", arg(long))]
    pub sent_size: Option<usize>,
    /// Percentile of the training data's lengths that sets --doc-size and --sent-size.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 90.0))]
    pub length_percentile: f64,
    /// Word vector size (ignored with --word-vectors, which sets it to the encoder's).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 200))]
    pub embedding_dim: usize,
    /// Hidden size of each direction of the word and of the sentence GRU.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 50))]
    pub gru_hidden: usize,
    /// Size of the word and sentence attention projections (u_t = tanh(W h_t + b)).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 100))]
    pub attention_size: usize,
    /// Dropout on the word vectors and on the document vector.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0.5))]
    pub dropout: f64,
    /// Context vectors of the sentence attention, r: r distributions over the sentences whose
    /// document vectors are concatenated.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub attention_hops: usize,
    /// Weight λ of the penalty λ‖AAᵀ − I‖²_F on the sentence attention A ([r, sentences]),
    /// which pushes the hops apart (Lin et al. 2017); 0 = off.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0.0))]
    pub attention_penalty: f64,
    /// Start the word vectors from a pretrained encoder's input embeddings (a model directory
    /// with config.json, model.safetensors and tokenizer.json): each word gets the mean of its
    /// word pieces' vectors, and the vector size becomes the encoder's hidden size.
    #[cfg_attr(feature = "clap", arg(long, value_name = "ENCODER"))]
    pub word_vectors: Option<PathBuf>,
}

/// Floating-point precision of the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum TrainPrecision {
    /// 32-bit floats throughout.
    F32,
    /// bfloat16 activations and matmuls, f32 weights.
    Bf16,
    /// Head-only training (--freeze-base) on the CPU with the frozen encoder's dense products
    /// in int8, as `predict --precision int8` runs them: the chunk vectors are made faster (and
    /// kept in --vector-cache under their own key); the model then predicts best with
    /// `--precision int8`.
    Int8,
}

impl TrainPrecision {
    /// As the flag names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
        }
    }

    /// The encoder's compute dtype (int8 products take f32 activations).
    pub fn dtype(self) -> candle_core::DType {
        match self {
            Self::F32 | Self::Int8 => candle_core::DType::F32,
            Self::Bf16 => candle_core::DType::BF16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
/// The learning rate's shape after warm-up (`--schedule`).
pub enum ScheduleArg {
    /// Linear decay to 0.
    Linear,
    /// Cosine decay to 0.
    Cosine,
    /// Constant after warm-up.
    Constant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
/// The dev metric that picks the best epoch (`--metric`).
pub enum MetricArg {
    /// Macro-averaged F1.
    MacroF1,
    /// Weighted F1.
    WeightedF1,
    /// Accuracy.
    Accuracy,
    /// Dev loss (lower is better).
    DevLoss,
}

/// The classifier a run trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Every chunk of the document, attention over the chunk vectors (longread's model).
    Hierarchical,
    /// The single-chunk baseline: the first chunk only (the first --chunk-size tokens),
    /// transformers' sequence-classification head, saved in the
    /// encoder family's transformers layout (BertForSequenceClassification, …).
    Sequence,
    /// The classic Hierarchical Attention Network (Yang et al. 2016): word BiGRU + attention,
    /// sentence BiGRU + attention, trained from scratch on the training data's words (no
    /// encoder; `train` only).
    Han,
    /// The bag-of-words baseline: TF-IDF word 1–2 grams and L2 logistic regression, C chosen
    /// by cross-validation on the training data (no encoder; `train` only; seconds on a CPU).
    Bow,
}

impl Arch {
    /// What a run's progress counts: documents for the models that read whole texts (HAN,
    /// bag of words), encoder chunks for the others.
    pub fn progress_unit(self) -> &'static str {
        match self {
            Self::Han | Self::Bow => "documents",
            Self::Hierarchical | Self::Sequence => "chunks",
        }
    }

    /// The architecture of a model's section.
    pub fn of(section: &LongreadSection) -> Self {
        match section.architecture {
            Architecture::Hierarchical => Self::Hierarchical,
            Architecture::Sequence => Self::Sequence,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hierarchical => "hierarchical",
            Self::Sequence => "sequence",
            Self::Han => "han",
            Self::Bow => "bow",
        }
    }
}

/// The single-chunk baseline's section: the first `chunk_size` tokens (at most the encoder's
/// positions), the head's dropout as transformers picks it.
pub fn sequence_section(encoder: &EncoderConfig, chunk_size: usize) -> LongreadSection {
    LongreadSection::sequence(chunk_size.min(encoder.max_sequence_length()), encoder.classifier_dropout())
}

/// Splits `NAME=VALUE`.
pub fn name_value<'a>(flag: &str, text: &'a str) -> Result<(&'a str, &'a str)> {
    match text.split_once('=') {
        Some((n, v)) if !n.trim().is_empty() && !v.trim().is_empty() => Ok((n.trim(), v.trim())),
        _ => bail!("{flag} {text}: expected NAME=VALUE"),
    }
}

impl TrainSpec {
    /// What this run's progress counts (see [`Arch::progress_unit`]; a run that takes its
    /// architecture from the model directory trains an encoder model: chunks).
    pub fn progress_unit(&self) -> &'static str {
        self.arch.map_or("chunks", Arch::progress_unit)
    }

    /// True for `--arch han`.
    pub fn is_han(&self) -> bool {
        self.arch == Some(Arch::Han)
    }

    /// True for `--arch bow`.
    pub fn is_bow(&self) -> bool {
        self.arch == Some(Arch::Bow)
    }

    /// Checks the flags of `--arch bow`, which trains no network: no training-loop, encoder or
    /// HAN flag applies.
    fn check_bow(&self) -> Result<()> {
        if self.model.is_some() {
            bail!("--model does not apply to --arch bow, which learns from the training data's words alone");
        }
        if self.wide_bow {
            bail!("--wide-bow adds a bag of words to an encoder model; --arch bow is the bag of words alone");
        }
        let refused = GRADIENT_ONLY.iter().chain(&ENCODER_ONLY).chain(&HAN_ONLY).find(|id| self.given(id));
        if let Some(id) = refused {
            bail!(
                "{} does not apply to --arch bow (TF-IDF + logistic regression, C chosen by --cv folds; see \
                 --c-values, --ngram-max, --min-df, --char-ngrams)",
                flag(id)
            );
        }
        if self.bow.ngram_max == 0 || self.bow.min_df == 0 {
            bail!("--ngram-max and --min-df must be at least 1");
        }
        if let Some(range @ [lo, hi]) = self.bow.char_ngrams {
            if !longread_bow::model::char_ngrams_in_range(range) {
                let longest = longread_bow::model::MAX_CHAR_NGRAM;
                bail!("--char-ngrams {lo}-{hi}: give 1 <= MIN <= MAX <= {longest}, e.g. 2-5");
            }
        }
        if self.bow.c_values.is_empty() || self.bow.c_values.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
            bail!("--c-values {:?}: give numbers above 0, e.g. --c-values 0.1,1,10", self.bow.c_values);
        }
        Ok(())
    }

    /// Whether the run trains the single-chunk sequence classifier: `--arch sequence`, or a
    /// model made by `init --arch sequence` (its config.json says so).
    fn trains_sequence(&self) -> bool {
        if self.arch == Some(Arch::Sequence) {
            return true;
        }
        let Some(dir) = self.model.as_deref() else { return false };
        let config = std::fs::read_to_string(dir.join("config.json")).ok();
        let value: Option<serde_json::Value> = config.and_then(|t| serde_json::from_str(&t).ok());
        value.is_some_and(|v| v["longread"]["architecture"] == "sequence")
    }

    /// `han` with --arch han, else `other`.
    fn pick<T>(&self, han: T, other: T) -> T {
        if self.is_han() {
            han
        } else {
            other
        }
    }

    /// Fills in the flags whose defaults depend on --arch (so that training_args.json records
    /// what the run used) and refuses flags that do not apply to the architecture.
    pub fn resolve_defaults(&mut self) -> Result<()> {
        if self.is_bow() {
            return self.check_bow();
        }
        if self.wide_bow && self.is_han() {
            bail!(
                "--wide-bow applies to encoder models; for a HAN beside a bag of words, build an ensemble of the two"
            );
        }
        if let Some(id) = BOW_ONLY.iter().find(|id| self.given(id)).filter(|_| !self.wide_bow) {
            bail!("{} applies only to --arch bow or with --wide-bow", flag(id));
        }
        // Defaults chosen on data (issue 37): head-only runs take seconds an epoch and stop
        // early (hyperpartisan, MiniLM and MPNet heads, 3 seeds each: 30 epochs with patience
        // 8 kept epochs 3–17; 3 epochs undertrained, 30 without early stopping overfit); the
        // single-chunk baseline trained to a loss of 1.05 in 3 epochs at 2e-5 on transcripts,
        // and scored better with 6 at 5e-5.
        let head_only = self.freeze_base && !self.is_han();
        let sequence = !self.is_han() && self.trains_sequence();
        let (epochs, patience, lr) = match (self.is_han(), head_only, sequence) {
            (true, _, _) => (30, 3, 1e-3),
            (false, true, _) => (30, 8, 2e-5),
            (false, false, true) => (6, 0, 5e-5),
            (false, false, false) => (3, 0, 2e-5),
        };
        self.epochs = Some(self.epochs.unwrap_or(epochs));
        self.batch_size = Some(self.batch_size.unwrap_or(self.pick(32, 4)));
        self.lr = Some(self.lr.unwrap_or(lr));
        self.weight_decay = Some(self.weight_decay.unwrap_or(self.pick(0.0, 0.01)));
        self.warmup_ratio = Some(self.warmup_ratio.unwrap_or(self.pick(0.0, 0.1)));
        self.schedule = Some(self.schedule.unwrap_or(self.pick(ScheduleArg::Constant, ScheduleArg::Linear)));
        self.max_grad_norm = Some(self.max_grad_norm.unwrap_or(self.pick(0.5, 1.0)));
        self.patience = Some(self.patience.unwrap_or(patience));
        if self.is_han() {
            let encoder_only = [
                ("--model", self.model.is_some()),
                ("--freeze-base", self.freeze_base),
                ("--freeze-bottom", self.freeze_bottom > 0),
                ("--unfreeze", self.unfreeze.is_some()),
                ("--train-embeddings", self.train_embeddings),
                ("--layer-lr-decay", self.layer_lr_decay != 1.0),
                ("--head-lr", self.head_lr.is_some()),
                ("--task", !self.task.is_empty()),
                ("--task-weight", !self.task_weight.is_empty()),
                ("--freeze-task", !self.freeze_task.is_empty()),
                ("--precision", self.precision != TrainPrecision::F32),
                ("--no-recompute", self.no_recompute),
                ("--no-cache", self.no_cache),
            ];
            if let Some((flag, _)) = encoder_only.iter().find(|(_, given)| *given) {
                bail!(
                    "{flag} does not apply to --arch han, which trains every parameter from scratch on one label \
                     column (to start its word vectors from an encoder, use --word-vectors ENCODER)"
                );
            }
            if let Some(id) = ENCODER_ONLY.iter().find(|id| self.given(id)) {
                bail!("{} does not apply to --arch han (it has no encoder)", flag(id));
            }
        } else {
            if let Some(id) = HAN_ONLY.iter().find(|id| self.given(id)) {
                bail!("{} applies only to --arch han", flag(id));
            }
            if self.model.is_none() {
                bail!("--model is required (a model made by `longread init`, or a pretrained encoder)");
            }
        }
        if self.precision == TrainPrecision::Int8 && !self.is_bow() && !self.freeze_base {
            bail!(
                "--precision int8 trains the head only: give --freeze-base (int8 products have no backward pass; to \
                 fine-tune the encoder use --precision f32 or bf16)"
            );
        }
        if self.train_embeddings && self.freeze_bottom > 0 {
            bail!(
                "--train-embeddings contradicts --freeze-bottom, which freezes the embeddings with the bottom layers"
            );
        }
        self.validate_numbers()
    }

    /// True when flag `id` was given rather than left at its default.
    fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }

    /// Refuses numbers outside their meaningful range, naming the flag.
    fn validate_numbers(&self) -> Result<()> {
        let positive = [("--lr", self.lr), ("--head-lr", self.head_lr)];
        for (name, value) in positive {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                bail!("{name} {v}: a learning rate must be a number above 0");
            }
        }
        let in_range = |name: &str, v: f64, ok: bool, range: &str| -> Result<()> {
            if !(v.is_finite() && ok) {
                bail!("{name} {v}: must be in {range}");
            }
            Ok(())
        };
        if let Some(v) = self.warmup_ratio {
            in_range("--warmup-ratio", v, (0.0..=1.0).contains(&v), "[0, 1]")?;
        }
        in_range(
            "--layer-lr-decay",
            self.layer_lr_decay,
            self.layer_lr_decay > 0.0 && self.layer_lr_decay <= 1.0,
            "(0, 1]",
        )?;
        if let Some(v) = self.max_grad_norm {
            in_range("--max-grad-norm", v, v >= 0.0, "[0, ∞) (0 turns clipping off)")?;
        }
        if let Some(v) = self.weight_decay {
            in_range("--weight-decay", v, v >= 0.0, "[0, ∞)")?;
        }
        if self.dev.is_none() {
            in_range("--dev-split", self.dev_split, self.dev_split > 0.0 && self.dev_split < 1.0, "(0, 1)")?;
        }
        in_range("--adam-beta1", self.adam_beta1, (0.0..1.0).contains(&self.adam_beta1), "[0, 1)")?;
        in_range("--adam-beta2", self.adam_beta2, (0.0..1.0).contains(&self.adam_beta2), "[0, 1)")?;
        in_range("--adam-epsilon", self.adam_epsilon, self.adam_epsilon > 0.0, "(0, ∞)")?;
        if self.is_han() {
            let h = &self.han;
            in_range("--dropout", h.dropout, (0.0..1.0).contains(&h.dropout), "[0, 1)")?;
            in_range("--attention-penalty", h.attention_penalty, h.attention_penalty >= 0.0, "[0, ∞)")?;
            in_range(
                "--length-percentile",
                h.length_percentile,
                h.length_percentile > 0.0 && h.length_percentile <= 100.0,
                "(0, 100]",
            )?;
        }
        Ok(())
    }

    /// The training configuration; `train_labels` (the primary task's, where present) and
    /// `labels` resolve `--class-weights`, `tasks` (names in task order) the task flags.
    pub fn config(&self, train_labels: &[usize], labels: &[String], tasks: &[String]) -> Result<TrainConfig> {
        let (task_weights, frozen_tasks) = self.task_settings(tasks)?;
        let (epochs, batch_size) = (self.epochs.unwrap_or(1), self.batch_size.unwrap_or(1));
        if epochs == 0 || batch_size == 0 || self.grad_accum == 0 {
            bail!("--epochs, --batch-size and --grad-accum must be at least 1");
        }
        let class_weights = self.loss_class_weights(train_labels, labels)?;
        let unfreeze = self.unfreeze.as_deref().map(UnfreezeSchedule::parse).transpose()?;
        let lr = self.lr.unwrap_or_default();
        let starts_frozen = self.freeze_base
            || unfreeze
                .as_ref()
                .and_then(|u| u.phases().first())
                .is_some_and(|&(e, w)| e == 0 && w == crate::unfreeze::Unfreeze::Head);
        Ok(TrainConfig {
            epochs,
            batch_size,
            grad_accum: self.grad_accum,
            max_grad_norm: self.max_grad_norm.unwrap_or_default(),
            decay: match self.schedule.unwrap_or(ScheduleArg::Linear) {
                ScheduleArg::Linear => Decay::Linear,
                ScheduleArg::Cosine => Decay::Cosine,
                ScheduleArg::Constant => Decay::Constant,
            },
            warmup_ratio: self.warmup_ratio.unwrap_or_default(),
            warmup_steps: self.warmup_steps,
            save_every_steps: self.save_every_steps,
            save_every_seconds: 600.0,
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
            keep: self.keep,
            patience: self.patience.unwrap_or_default(),
            patience_min_steps: self.patience_min_steps,
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
                vectors: self.vector_cache.clone(),
                variant: format!("{:?}", self.precision),
            },
            groups: GroupSettings {
                lr,
                head_lr: self.head_lr.unwrap_or(if starts_frozen { 1e-3 } else { lr }),
                weight_decay: self.weight_decay.unwrap_or_default(),
                layer_lr_decay: self.layer_lr_decay,
            },
            adamw: AdamWConfig { beta1: self.adam_beta1, beta2: self.adam_beta2, eps: self.adam_epsilon },
            max_bad_steps: self.max_bad_steps,
            stop_after_epoch: self.stop_after_epoch,
        })
    }
}

impl TrainSpec {
    /// Each task's loss weight (`--task-weight`) and the tasks whose heads stay frozen
    /// (`--freeze-task`), for the model's `tasks` (names in task order).
    fn task_settings(&self, tasks: &[String]) -> Result<(Vec<f64>, Vec<usize>)> {
        let task_index = |flag: &str, name: &str| {
            tasks
                .iter()
                .position(|t| t == name)
                .or_run(|| format!("{flag} {name}: the model has no such task (its tasks: {})", tasks.join(", ")))
        };
        let mut task_weights = vec![1.0; tasks.len()];
        for text in &self.task_weight {
            let (name, w) = name_value("--task-weight", text)?;
            let w: f64 = w
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .or_run(|| format!("--task-weight {text}: the weight must be a non-negative number"))?;
            task_weights[task_index("--task-weight", name)?] = w;
        }
        if task_weights.iter().all(|&w| w == 0.0) {
            bail!("--task-weight: at least one task needs a weight above 0");
        }
        let frozen_tasks =
            self.freeze_task.iter().map(|name| task_index("--freeze-task", name)).collect::<Result<Vec<_>>>()?;
        Ok((task_weights, frozen_tasks))
    }

    /// The loss's class weights (`--class-weights`): none, balanced over `train_labels`, or
    /// one given per label.
    pub(crate) fn loss_class_weights(&self, train_labels: &[usize], labels: &[String]) -> Result<Option<Vec<f32>>> {
        Ok(match self.class_weights.as_str() {
            "none" => None,
            "balanced" => Some(balanced_class_weights(train_labels, labels.len())),
            list => {
                let w: Vec<f32> = list
                    .split(',')
                    .map(|x| x.trim().parse::<f32>())
                    .collect::<std::result::Result<_, _>>()
                    .or_run(|| format!("--class-weights {list}: expected none, balanced or numbers"))?;
                if w.len() != labels.len() || w.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    bail!(
                        "--class-weights needs {} non-negative numbers, one per label ({})",
                        labels.len(),
                        labels.join(", ")
                    );
                }
                Some(w)
            }
        })
    }
}
