//! A new classifier on a pretrained encoder (`longread init`), owned by the library so that
//! every front (CLI, Python) accepts, refuses and builds the same models: [`InitSpec`] holds
//! the settings (the CLI's flags, through clap's derive behind the `clap` feature),
//! [`init_run`] checks them and writes the model directory.

use std::path::PathBuf;

use longread_model::hierarchical::{ChunkPooling, HierarchicalClassifier, LongreadSection, PoolingStrategy};
use longread_model::sentence_pooling::SentencePooling;
use longread_text::ChunkSelection;

use crate::error::{Result, TrainError};
use crate::run::spec::{sequence_section, Arch};

/// Every setting of a new classifier (`longread init`'s flags).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct InitSpec {
    /// Pretrained encoder directory (config.json, model.safetensors, tokenizer.json), or a
    /// Hugging Face Hub id such as sentence-transformers/all-MiniLM-L6-v2 (downloaded into the
    /// Hugging Face cache; HF_HOME, HF_HUB_OFFLINE and HF_ENDPOINT as Hugging Face's tools read them).
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "model"))]
    pub encoder: String,
    /// Comma-separated label names, in id order (at least two), e.g. general,teen,mature.
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', required = true))]
    pub labels: Vec<String>,
    /// Output model directory; must not exist yet.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "output"))]
    pub out: PathBuf,
    /// The classifier: `sequence` reads only the first --chunk-size tokens (at most the
    /// encoder's positions) and ignores the chunking and pooling flags below.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Arch::Hierarchical))]
    pub arch: Arch,
    /// Pooling over a document's chunks.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = PoolingStrategy::Attention))]
    pub pooling: PoolingStrategy,
    /// Context vectors for `--pooling multihead` (at least 2).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub attention_heads: usize,
    /// Size of the attention projection.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 256))]
    pub attention_hidden_size: usize,
    /// Attention over the K highest-scoring chunks only (0 = every chunk; --pooling
    /// attention/multihead). For labels that a few passages of a long document decide.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, value_name = "K"))]
    pub attention_top_k: usize,
    /// Softmax temperature of the attention scores (--pooling attention/multihead): below 1
    /// concentrates the weight on the top chunks.
    #[cfg_attr(feature = "clap", arg(long, allow_negative_numbers = true, default_value_t = 1.0, value_name = "T"))]
    pub attention_temperature: f64,
    /// The labels are ordered, in the order --labels gives them (e.g. general,teen,mature):
    /// the head scores each document once and a cumulative link model (proportional odds)
    /// turns the score into label probabilities, so a mistake costs more the further it is
    /// from the truth. With --pooling max-logits the document's score is its highest chunk's.
    #[cfg_attr(feature = "clap", arg(long))]
    pub ordinal: bool,
    /// Each document carries any number of the labels, none included (the articles a judgment
    /// found violated, a record's billing codes): one sigmoid probability per label, binary
    /// cross-entropy in training (`train --pos-weight` weighs rare labels), each label decided
    /// on its own (at 0.5, or per-label thresholds from `longread threshold`). config.json
    /// says `"problem_type": "multi_label_classification"`, as transformers does. Train it on
    /// "labels" lists (see `train --multi-label`).
    #[cfg_attr(feature = "clap", arg(long))]
    pub multi_label: bool,
    /// Tokens per chunk, special tokens included (at most the encoder's positions: 512 for BERT and
    /// RoBERTa, up to 8,192 for ModernBERT).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 512))]
    pub chunk_size: usize,
    /// Overlap in tokens between consecutive chunks. Default: half of --chunk-size (256 for
    /// 512), so that a smaller --chunk-size alone works.
    #[cfg_attr(feature = "clap", arg(long))]
    pub stride: Option<usize>,
    /// Most chunks read per document; 0 reads every chunk.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 20))]
    pub max_chunks: usize,
    /// Which chunks to keep when a document has more than --max-chunks: the first ones, or
    /// ones spread evenly from beginning to end.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = ChunkSelection::Head))]
    pub chunk_selection: ChunkSelection,
    /// How a chunk's token vectors become one chunk vector.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = ChunkPooling::Cls))]
    pub chunk_pooling: ChunkPooling,
    /// Seed for the new weights (same seed, same model).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 42))]
    pub seed: u64,
    /// Flags given explicitly (filled in after parsing): a flag that does not apply to the
    /// chosen pooling is refused only when given.
    #[cfg_attr(feature = "clap", arg(skip))]
    pub given: Vec<String>,
}

/// `--labels` (of `init` or `train`), trimmed; refuses fewer than two, empty, repeated names,
/// and names with control characters.
pub fn checked_label_names(names: &[String]) -> Result<Vec<String>> {
    let labels: Vec<String> = names.iter().map(|l| l.trim().to_owned()).collect();
    if let Some(at) = labels.iter().position(String::is_empty) {
        bail!("--labels: name {} of {} is empty (a doubled or trailing comma?)", at + 1, labels.len());
    }
    if labels.len() < 2 {
        bail!("--labels needs at least two names, e.g. --labels general,teen,mature");
    }
    if let Some(problem) = labels.iter().find_map(|l| longread_text::labelled::label_name_problem(l)) {
        bail!("--labels: {problem}");
    }
    let mut unique = labels.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != labels.len() {
        bail!("--labels contains a name twice: {}", labels.join(","));
    }
    Ok(labels)
}

impl InitSpec {
    /// The label names ([`checked_label_names`]).
    pub fn checked_labels(&self) -> Result<Vec<String>> {
        checked_label_names(&self.labels)
    }

    /// Refuses flags that do not apply to the chosen pooling or architecture, and values out
    /// of range that the model's own validation would not name by flag.
    pub fn check(&self) -> Result<()> {
        let given = |id: &str| self.given.iter().any(|g| g == id);
        if given("attention_heads") && self.pooling != PoolingStrategy::Multihead {
            bail!("--attention-heads applies only to --pooling multihead");
        }
        let attention = matches!(
            self.pooling,
            PoolingStrategy::Attention | PoolingStrategy::Multihead | PoolingStrategy::LabelAttention
        );
        if let Some(flag) = ["attention_top_k", "attention_temperature"].iter().find(|f| given(f)) {
            if !attention {
                bail!("--{} applies only to --pooling attention, multihead or label-attention", flag.replace('_', "-"));
            }
        }
        if self.pooling == PoolingStrategy::LabelAttention && !self.multi_label {
            bail!("--pooling label-attention gives each label its own chunk weights: add --multi-label");
        }
        if self.multi_label && self.ordinal {
            bail!("--multi-label and --ordinal exclude each other: ordered labels are one label per document");
        }
        if !(self.attention_temperature.is_finite() && self.attention_temperature > 0.0) {
            bail!("--attention-temperature {}: must be above 0", self.attention_temperature);
        }
        match self.arch {
            Arch::Hierarchical | Arch::Sequence => Ok(()),
            Arch::Han => bail!(
                "--arch han is not built on an encoder: `longread train --arch han --train DATA --out DIR` builds it \
                 (its vocabulary and grid come from the training data)"
            ),
            Arch::Bow => bail!(
                "--arch bow is not built on an encoder: `longread train --arch bow --train DATA --out DIR` builds it \
                 (TF-IDF + logistic regression, in seconds)"
            ),
        }
    }

    /// The hierarchical model's section from the settings.
    fn hierarchical_section(&self) -> LongreadSection {
        LongreadSection {
            chunk_size: self.chunk_size,
            stride: self.stride.unwrap_or(self.chunk_size / 2),
            max_chunks: self.max_chunks,
            chunk_selection: self.chunk_selection,
            chunk_pooling: self.chunk_pooling,
            pooling_strategy: self.pooling,
            attention_heads: self.attention_heads,
            attention_hidden_size: self.attention_hidden_size,
            attention_top_k: self.attention_top_k,
            attention_temperature: self.attention_temperature,
            ordinal: self.ordinal,
            ..LongreadSection::default()
        }
    }
}

/// Checks `spec` and writes the new classifier's directory (`spec.out`, which must not exist);
/// returns the model as loaded from it.
pub fn init_run(spec: &InitSpec) -> Result<HierarchicalClassifier> {
    spec.check()?;
    let labels = spec.checked_labels()?;
    let encoder = longread_model::resolve_model_dir(&spec.encoder)?;
    let section = match spec.arch {
        Arch::Sequence => {
            let checkpoint = longread_model::Checkpoint::open(&encoder)
                .map_err(|e| TrainError::Run(format!("reading encoder {}: {e}", encoder.display())))?;
            sequence_section(&checkpoint.config, spec.chunk_size)
        }
        _ => spec.hierarchical_section(),
    };
    let section = LongreadSection { multi_label: spec.multi_label, ..section };
    HierarchicalClassifier::create(&encoder, labels, section, spec.seed, &spec.out)
        .map_err(|e| TrainError::Run(format!("creating a classifier on {}: {e}", encoder.display())))
}

/// Advice on settings left at their defaults that do not suit the encoder: a sentence-embedding
/// encoder trained with mean pooling (its sentence-transformers Pooling module, as
/// all-MiniLM-L6-v2's) was not trained to put the text's meaning in its first token, which the
/// default `--chunk-pooling cls` reads. `None` when nothing needs saying.
pub fn advice(spec: &InitSpec) -> Option<String> {
    let chosen = spec.given.iter().any(|g| g == "chunk_pooling");
    if chosen || spec.arch != Arch::Hierarchical || spec.chunk_pooling != ChunkPooling::Cls {
        return None;
    }
    let encoder = longread_model::resolve_model_dir(&spec.encoder).ok()?;
    let modules = longread_model::checkpoint::sentence_modules(&encoder).ok()?;
    (modules.pooling == Some(Ok(SentencePooling::Mean))).then(|| {
        format!(
            "{} is read by mean pooling (its sentence-transformers Pooling module), not by its first \
             token as the default --chunk-pooling cls reads chunks: --chunk-pooling mean reads them the way \
             it was trained (docs/recipes.md)",
            encoder.display()
        )
    })
}

/// One line for people about a model `init_run` made: its labels and how it reads a document.
pub fn describe(model: &HierarchicalClassifier) -> String {
    let config = model.config();
    let section = &config.longread;
    let shape = if section.architecture == longread_model::hierarchical::Architecture::Hierarchical {
        let pooling = serde_json::to_value(section.pooling_strategy).ok();
        let mut pooling = pooling.as_ref().and_then(|v| v.as_str()).unwrap_or_default().to_string();
        if section.attention_top_k > 0 {
            pooling.push_str(&format!(" over the top {} chunks", section.attention_top_k));
        }
        if section.ordinal {
            pooling.push_str(", ordinal head");
        }
        if section.multi_label {
            pooling.push_str(", multi-label (a sigmoid per label)");
        }
        format!(
            "pooling {pooling}, chunks of {} tokens, stride {}, max {}",
            section.chunk_size, section.stride, section.max_chunks
        )
    } else {
        let multi = if section.multi_label { ", multi-label" } else { "" };
        format!("single chunk: the first {} tokens, {}{multi}", section.chunk_size, config.hf_architecture())
    };
    format!("{} labels: {}, {shape}", model.labels().len(), model.labels().join(", "))
}
