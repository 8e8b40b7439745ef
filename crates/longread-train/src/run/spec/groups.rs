//! The flags of each kind of run, one struct per group (`longread train --help` shows them
//! under their own headings): [`LoopSpec`] for every model trained by gradient (encoders and
//! the HAN), [`EncoderTrainSpec`] for encoder models alone, [`HanSpec`] for the HAN,
//! [`BowSpec`] for the bag of words. A run's kind ([`super::TrainPlan`]) carries only the
//! groups that apply to it; a flag of another group is refused by its group, not by a list.

use std::path::PathBuf;

use super::{MetricArg, ScheduleArg, TrainPrecision};
use crate::trainer::Keep;

/// The help section of the training-loop flags.
#[cfg(feature = "clap")]
const LOOP_HEADING: &str = "Training loop (encoder models and --arch han)";
/// The help section of the encoder-only flags.
#[cfg(feature = "clap")]
const ENCODER_HEADING: &str = "Encoder models (--arch hierarchical or sequence, or a model made by `init`)";

/// Settings of the training loop: every model trained by gradient (encoder models and the HAN;
/// not the bag of words).
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(next_help_heading = LOOP_HEADING))]
pub struct LoopSpec {
    /// Fraction of the training data held out for dev (stratified, seeded) when --dev is absent
    /// (giving both is an error). 0 holds out nothing: every document trains, no dev metrics
    /// are computed, and OUT keeps the last epoch (--keep best, --patience, --metric refused),
    /// e.g. for the final model once --cv has chosen the settings and the epochs.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.1))]
    pub dev_split: f64,
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
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub lr: Option<f64>,
    /// AdamW's decoupled weight decay (none on biases and LayerNorm weights) [default: 0.01;
    /// 0 with --arch han: plain Adam, as in the paper].
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub weight_decay: Option<f64>,
    /// Warm-up steps as a fraction of all optimizer steps [default: 0.1; 0 with --arch han].
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub warmup_ratio: Option<f64>,
    /// Warm-up in optimizer steps (instead of --warmup-ratio).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "warmup_ratio"))]
    pub warmup_steps: Option<usize>,
    /// Learning-rate shape after warm-up [default: linear; constant with --arch han].
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub schedule: Option<ScheduleArg>,
    /// Clip the global gradient norm to this, 0 = off [default: 1.0; 0.5 with --arch han].
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub max_grad_norm: Option<f64>,
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
    /// Optimizer steps in a row with NaN/inf gradients that stop the run.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 5))]
    pub max_bad_steps: usize,
    /// Stop after this epoch and keep the checkpoint, to continue later with --resume auto.
    #[cfg_attr(feature = "clap", arg(long))]
    pub stop_after_epoch: Option<usize>,
    /// Also write a resumable checkpoint in the middle of an epoch after every N optimizer
    /// steps (0 = only at epoch ends) [default: whenever 10 minutes have passed since the last
    /// checkpoint]. Resuming from one continues exactly as the uninterrupted run would.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub save_every_steps: Option<usize>,
    /// AdamW's β1 (decay of the first-moment estimate), in [0, 1).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.9))]
    pub adam_beta1: f64,
    /// AdamW's β2 (decay of the second-moment estimate), in [0, 1).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.999))]
    pub adam_beta2: f64,
    /// AdamW's ε (added to the denominator), > 0.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 1e-8))]
    pub adam_epsilon: f64,
}

/// Settings of encoder models alone (not the HAN, not the bag of words).
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(next_help_heading = ENCODER_HEADING))]
pub struct EncoderTrainSpec {
    /// Learning rate of pooling + head (default: 1e-3 with --freeze-base or when --unfreeze
    /// starts with 0:head, else --lr).
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true))]
    pub head_lr: Option<f64>,
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
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 1.0))]
    pub layer_lr_decay: f64,
    /// Most tokens per encoder batch (padded). Training keeps one batch's graph at a time, so
    /// this sets the memory plateau: a smaller budget holds less in memory and takes somewhat
    /// more time per step (figures in BENCHMARKS.md, "Training step memory"). Documents that fit a batch are encoded once; longer ones are recomputed.
    /// Default: 512 on the CPU (one chunk: the least memory); on a GPU what half of its memory
    /// holds beside the model's weights, gradients and AdamW moments, in whole chunks of 512,
    /// up to 65,536 (the run's first line says what it chose).
    #[cfg_attr(feature = "clap", arg(long, value_name = "TOKENS"))]
    pub max_batch_tokens: Option<usize>,
    /// Keep the whole step's graph instead of one batch's (no chunk recomputation; memory grows
    /// with document length).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_recompute: bool,
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
    /// Encoder precision: f32, or bf16 (bf16 activations and matmuls over f32 master weights;
    /// LayerNorm, softmax, pooling, heads and the optimizer in f32). Halves the activation and
    /// frozen-layer-cache memory; not faster on the CPU (candle has no fast bf16 CPU matmul,
    /// even with AVX512_BF16: measured slower than f32), only on GPUs (f32 there uses TF32
    /// products). A step with NaN/inf gradients is skipped (see --max-bad-steps).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TrainPrecision::F32))]
    pub precision: TrainPrecision,
    /// Wide and deep (encoder models): a bag of words (the flags below) is fitted on the
    /// training documents first, and its log-probabilities, times a scale fitted on its
    /// out-of-fold scores, are added to the logits while the encoder model trains, so the deep
    /// side learns what the words miss. Training documents get out-of-fold scores (from bags of
    /// words fitted without them). The model directory keeps the bag of words in `wide/`, and
    /// every front predicts with both (shown as members "deep" and "wide"). Best with
    /// --freeze-base: a fine-tuned encoder on a few hundred documents learns to overrule the
    /// words (docs/recipes.md). One task only. With --multi-label: a one-vs-rest bag of words
    /// whose per-label log-odds (times one fitted scale) are added to each label's logit, each
    /// label's fit balanced when --pos-weight auto weighs the deep side's positives.
    #[cfg_attr(feature = "clap", arg(long, help_heading = BOW_HEADING))]
    pub wide_bow: bool,
}

/// The help section of the bag-of-words flags.
#[cfg(feature = "clap")]
pub(super) const BOW_HEADING: &str = "Bag of words (--arch bow, or the wide side of --wide-bow)";

/// Settings of the bag-of-words baseline.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(next_help_heading = BOW_HEADING))]
pub struct BowSpec {
    /// Inverse L2 regularisation strengths of the logistic regression, comma-separated; the one
    /// with the best mean macro-F1 (multi-label: micro-F1) over --cv folds of the training data (with --wide-bow: 5, or
    /// fewer when a label has fewer documents) is refitted on all of it (one value: no
    /// cross-validation to choose C; --calibrate and --tune-threshold still fit the folds).
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "c-values",
            allow_negative_numbers = true,
            value_delimiter = ',',
            default_value = "0.1,1,10,100,1000"
        )
    )]
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

/// How multi-label data gives each document's labels in CSV/TSV (JSON lines give a "labels"
/// list): shared by `train --multi-label` and `eval`.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct LabelLayoutSpec {
    /// Multi-label CSV/TSV: what joins the label names in a `labels` cell (`3;6`; an empty
    /// cell: none).
    #[cfg_attr(feature = "clap", arg(long, default_value = ";", value_name = "TEXT"))]
    pub label_separator: String,
    /// Multi-label data with one 0/1 column per label (the layout of most public multi-label
    /// sets), comma-separated, instead of a `labels` list or cell; for training, they are the
    /// new model's labels, in this order.
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', value_name = "A,B,..."))]
    pub label_columns: Vec<String>,
}

impl LabelLayoutSpec {
    /// The layout these flags describe.
    pub fn layout(&self) -> longread_text::multilabel::LabelLayout {
        use longread_text::multilabel::LabelLayout;
        match self.label_columns.is_empty() {
            true => LabelLayout::Joined { separator: self.label_separator.clone() },
            false => LabelLayout::Columns(self.label_columns.clone()),
        }
    }
}

/// `2-5` → `[2, 5]`.
#[cfg(feature = "clap")]
fn parse_char_ngrams(text: &str) -> std::result::Result<[usize; 2], String> {
    let bad = || format!("{text:?}: give the shortest and longest length as MIN-MAX, e.g. 2-5");
    let (lo, hi) = text.split_once('-').ok_or_else(bad)?;
    let number = |v: &str| v.trim().parse::<usize>().map_err(|_| bad());
    Ok([number(lo)?, number(hi)?])
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
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 90.0))]
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
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.5))]
    pub dropout: f64,
    /// Context vectors of the sentence attention, r: r distributions over the sentences whose
    /// document vectors are concatenated.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub attention_hops: usize,
    /// Weight λ of the penalty λ‖AAᵀ − I‖²_F on the sentence attention A ([r, sentences]),
    /// which pushes the hops apart (Lin et al. 2017); 0 = off.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 0.0))]
    pub attention_penalty: f64,
    /// Start the word vectors from a pretrained encoder's input embeddings (a model directory
    /// with config.json, model.safetensors and tokenizer.json): each word gets the mean of its
    /// word pieces' vectors, and the vector size becomes the encoder's hidden size.
    #[cfg_attr(feature = "clap", arg(long, value_name = "ENCODER"))]
    pub word_vectors: Option<PathBuf>,
}
