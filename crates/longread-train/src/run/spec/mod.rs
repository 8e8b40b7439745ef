//! What a training run is asked to do: every setting of `longread train` (the CLI's flags
//! are these fields, through clap's derive behind the `clap` feature), their defaults per
//! architecture, their checks, and the training configuration they make.

use std::path::PathBuf;

use longread_model::hierarchical::{Architecture, LongreadSection};
use longread_model::EncoderConfig;

use crate::error::{Result, TrainError};

mod config;
mod groups;
mod resolve;

pub use groups::{BowSpec, EncoderTrainSpec, HanSpec, LabelLayoutSpec, LoopSpec};
pub use resolve::TrainPlan;

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
    /// Training data: JSON lines with "text" and "label" (name or index), or a .csv/.tsv file
    /// with those columns (a header row; integer cells are indices, as in JSON lines).
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "input"))]
    pub train: PathBuf,
    /// Dev data in the same format; without it, --dev-split of the training data is held out.
    #[cfg_attr(feature = "clap", arg(long))]
    pub dev: Option<PathBuf>,
    /// Output directory: the best model (format v1) plus metrics.jsonl, trainer_state.json,
    /// training_args.json and checkpoint-last/ (to resume; removed when the run completes).
    /// Must not exist yet, unless resuming.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "output"))]
    pub out: PathBuf,
    /// Each document carries any number of the labels, none included (the articles a judgment
    /// found violated, a record's billing codes, a rating's content descriptors): one
    /// probability per label, each label decided on its own (at 0.5). The data gives "labels"
    /// lists (JSON lines; `[]` for none), or in CSV/TSV a labels column joined by
    /// --label-separator, or one 0/1 column per label (--label-columns, which implies it).
    /// --arch bow: one-vs-rest logistic regression, C chosen by micro-F1 over folds made by
    /// iterative stratification; --class-weights balanced weighs each label's own fit. An
    /// encoder model (a plain encoder as --model, or one made by `init --multi-label`, which
    /// needs no flag) or --arch han: a sigmoid per label and binary cross-entropy
    /// (--pos-weight), the dev split and --cv folds made by iterative stratification; with
    /// --wide-bow a one-vs-rest bag of words as the wide side. Not with --task.
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(default)]
    pub multi_label: bool,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub label_layout: LabelLayoutSpec,
    /// Class weights of the loss: none, balanced (n / (classes · count)), or w1,w2,... in label order.
    #[cfg_attr(feature = "clap", arg(long, default_value = "none"))]
    pub class_weights: String,
    /// A multi-label encoder model's weight of each label's positive documents in the binary
    /// cross-entropy (PyTorch's `BCEWithLogitsLoss(pos_weight=…)`), for labels few documents
    /// carry: none; auto (each label's negatives / positives over the training documents,
    /// capped at 10, 1 for a label no document has); or FILE, a JSON object of label → weight
    /// (labels it does not name weigh 1) [default: none].
    #[cfg_attr(feature = "clap", arg(long, value_name = "auto|none|FILE"))]
    #[serde(default)]
    pub pos_weight: Option<String>,
    /// Seed for the dev split, shuffling and dropout.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 42))]
    pub seed: u64,
    /// Stratified K-fold cross-validation on the training data (seeded by --seed; with
    /// --multi-label, iterative stratification). With --arch bow: the folds that choose C
    /// [default: 5]. Otherwise: K runs, each holding out one fold as its dev set, in
    /// OUT/fold-1 … OUT/fold-K, OUT/cv.json with the mean ± std of the best dev metric over the
    /// folds (for small data, where a 10% dev split is a handful of documents), and
    /// OUT/out-of-fold.jsonl, every document classified by the fold model that did not train
    /// on it (for `threshold`/`calibrate --out-of-fold`); no --dev, --dev-split or
    /// --stop-after-epoch then, and --resume auto continues a stopped --cv run fold by fold.
    #[cfg_attr(feature = "clap", arg(long, value_name = "K"))]
    pub cv: Option<usize>,
    /// When the run completes, tune the model's decision rule on its dev set (--dev or the
    /// --dev-split) to maximize METRIC, as `longread threshold` does — two labels: a threshold
    /// on the second label's probability; more: a bias per label; a multi-label model: a
    /// threshold per label, each maximizing its label's F1 (macro-f1 only) — and keep it in
    /// OUT/decision.json (predict, eval, report, serve and Python apply it; probabilities are
    /// unchanged). The dev set also chose the epoch, so its figures with the rule are
    /// optimistic: report a test set. --arch bow, which holds out no dev set, tunes on the
    /// out-of-fold probabilities of the training documents at the chosen C (the folds of its
    /// cross-validation; --cv K sets them). Otherwise not with --cv or --dev-split 0 (no dev
    /// set).
    #[cfg_attr(feature = "clap", arg(long, value_enum, value_name = "METRIC"))]
    pub tune_threshold: Option<longread_classifier::evaluate::ThresholdMetric>,
    /// When the run completes, calibrate the model's probabilities on its dev set, as
    /// `longread calibrate` does (temperature scaling: the temperature of least log loss),
    /// and keep it in OUT/calibration.json; labels do not change. Before --tune-threshold,
    /// which then tunes on the calibrated probabilities. --arch bow calibrates on the
    /// out-of-fold probabilities of the training documents at the chosen C (--cv K sets the
    /// folds). A multi-label model gets a temperature per label (`longread calibrate`).
    /// Otherwise not with --cv or --dev-split 0 (no dev set).
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(default)]
    pub calibrate: bool,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub training: LoopSpec,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub encoder: EncoderTrainSpec,
    #[cfg_attr(feature = "clap", command(flatten))]
    #[allow(missing_docs)]
    pub han: HanSpec,
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
    /// Accuracy (multi-label: subset accuracy, every label of a document right).
    Accuracy,
    /// Micro-averaged F1: for a multi-label model, F1 over every (document, label) pair; for
    /// one label per document it equals accuracy.
    MicroF1,
    /// ROC-AUC of the dev probabilities: for two labels, of the second's (how well the scores
    /// rank the documents, whatever the threshold); for more, the mean one-vs-rest AUC. Every
    /// label needs dev documents.
    RocAuc,
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

    /// True for `--multi-label` (or `--label-columns`, which implies it).
    pub fn is_multi_label(&self) -> bool {
        self.multi_label || !self.label_layout.label_columns.is_empty()
    }

    /// True for `--arch bow`.
    pub fn is_bow(&self) -> bool {
        self.arch == Some(Arch::Bow)
    }

    /// True when the run holds out no dev set (`--dev-split 0` without `--dev`): every
    /// training document trains, and the last epoch's model is kept.
    pub fn trains_without_dev(&self) -> bool {
        self.dev.is_none() && self.training.dev_split == 0.0
    }
}
