//! The `"longread"` section and labels of a hierarchical classifier's `config.json`
//! (model directory format v1, see docs/model-format.md).

use std::collections::BTreeMap;
use std::path::Path;

use longread_text::{ChunkSelection, ChunkingConfig};
use serde::{Deserialize, Serialize};

use crate::config::EncoderConfig;
use crate::error::{ModelError, Result};

/// `architectures` value that marks a longread hierarchical classifier.
pub const ARCHITECTURE: &str = "LongreadHierarchicalClassifier";
/// The model directory format this code writes.
pub const FORMAT_VERSION: u32 = 1;

/// Which model a classifier directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Chunks → encoder → pooling over chunks → LayerNorm → head (`LongreadHierarchicalClassifier`).
    #[default]
    Hierarchical,
    /// The single-chunk baseline: the first chunk only (the first `chunk_size` tokens), the
    /// `<s>`/`[CLS]` state, transformers' sequence-classification head, stored in the
    /// `RobertaForSequenceClassification` / `BertForSequenceClassification` layout.
    Sequence,
}

/// How a chunk's token states become one chunk vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ChunkPooling {
    /// Hidden state of the first token (`[CLS]`/`<s>`).
    #[default]
    Cls,
    /// Mean over all tokens of the chunk, special tokens included.
    Mean,
}

/// How a document's chunk vectors become one document vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PoolingStrategy {
    /// Additive attention with one context vector (Yang et al. 2016).
    #[default]
    Attention,
    /// K context vectors; the K document vectors are concatenated and merged by a linear layer.
    Multihead,
    /// Mean of the chunk vectors.
    Mean,
    /// Element-wise maximum of the chunk vectors.
    Max,
    /// The first chunk's vector only.
    First,
    /// Multiple-instance learning: the head scores every chunk and each label's document
    /// logit is its maximum over the chunks. For labels decided by one passage anywhere (a
    /// rating that follows its worst scene, one partisan article in a bundle), where averaging
    /// dilutes the evidence.
    #[serde(rename = "max_logits")]
    #[cfg_attr(feature = "clap", value(name = "max-logits"))]
    MaxLogits,
    /// Label-wise attention, for multi-label models: one attention query per label over the
    /// chunks (as LAAT and CAML attend over tokens), so each label reads its own document
    /// vector and has its own chunk weights — its own evidence; the head scores label l from
    /// label l's vector.
    #[serde(rename = "label_attention")]
    #[cfg_attr(feature = "clap", value(name = "label-attention"))]
    LabelAttention,
}

/// The `"longread"` object of config.json. Every field has a default (stated on the field),
/// so older or hand-written files keep loading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LongreadSection {
    /// Model directory format (1).
    pub format_version: u32,
    /// The model ("hierarchical"; "sequence" for the single-chunk baseline).
    pub architecture: Architecture,
    /// Tokens per chunk, special tokens included (512).
    pub chunk_size: usize,
    /// Overlap between consecutive windows in tokens (256).
    pub stride: usize,
    /// Most chunks per document, 0 = no limit (20).
    pub max_chunks: usize,
    /// Which windows to keep past `max_chunks` ("head").
    pub chunk_selection: ChunkSelection,
    /// Chunk vector from token states ("cls").
    pub chunk_pooling: ChunkPooling,
    /// Pooling over chunks ("attention").
    pub pooling_strategy: PoolingStrategy,
    /// Size of the attention projection (256).
    pub attention_hidden_size: usize,
    /// Context vectors K (1; ≥ 2 for "multihead"; "label_attention" has one per label).
    pub attention_heads: usize,
    /// Attention over the K highest-scoring chunks only, the others get weight 0 (0 = every
    /// chunk; "attention" and "multihead"). Keeps a long document's many ordinary chunks from
    /// diluting the few that decide its label.
    pub attention_top_k: usize,
    /// Ordered labels (false): the head gives one score per document and a cumulative link
    /// model turns it into label probabilities (see `head.rs`), so that confusing "general"
    /// with "mature" costs more than with "teen". Labels in id order are the order.
    pub ordinal: bool,
    /// Several labels per document (false): the primary task's head gives one independent
    /// sigmoid probability per label and trains with binary cross-entropy, so a document may
    /// carry any number of the labels, none included (the articles a judgment found violated).
    /// Written with transformers' `"problem_type": "multi_label_classification"` beside it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub multi_label: bool,
    /// Softmax temperature of the attention scores (1.0; "attention" and "multihead"): below
    /// 1 sharpens the weights towards the top chunks, above 1 flattens them.
    pub attention_temperature: f64,
    /// Inner size of the head (default: hidden_size / 2).
    pub classifier_hidden_size: Option<usize>,
    /// Dropout on chunk vectors (0.1).
    pub hidden_dropout: f64,
    /// Dropout on attention weights (0.1).
    pub attention_dropout: f64,
    /// Dropout inside the head (0.3).
    pub classifier_dropout: f64,
    /// Epsilon of the document LayerNorm (1e-5).
    pub layer_norm_eps: f64,
    /// The tasks of a multi-task model (empty: one task, `"label"`, with the `id2label`
    /// labels). The first task's head is stored at the top level (`pooler.`, `norm.`,
    /// `classifier.`) and its labels are `id2label`; task t ≥ 1 is stored under `tasks.NAME.`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskSpec>,
    /// The wide side of a wide-and-deep model (absent: none): a bag of words kept in the
    /// model directory's `wide/` whose log-probabilities (a multi-label model's: each label's
    /// log-odds), times `scale`, are added to the primary task's logits (`train --wide-bow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wide: Option<WideSection>,
}

/// `longread.wide`: how a wide-and-deep model adds its bag of words' scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WideSection {
    /// The bag of words' log-probabilities are multiplied by this before they are added to the
    /// logits (the inverse of the temperature fitted on its out-of-fold scores), > 0.
    pub scale: f64,
}

/// Where a wide-and-deep model keeps its bag of words, inside its directory.
pub const WIDE_DIR: &str = "wide";

/// One task of a multi-task model: its own pooling, LayerNorm and head over a shared encoder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Name (letters, digits, `_` and `-`).
    pub name: String,
    /// Column of the labelled JSON lines that holds this task's label.
    pub column: String,
    /// Label names in id order.
    pub labels: Vec<String>,
}

/// Name and column of the one task of a single-task model.
pub const DEFAULT_TASK: &str = "label";

impl Default for LongreadSection {
    fn default() -> Self {
        Self {
            format_version: FORMAT_VERSION,
            architecture: Architecture::Hierarchical,
            chunk_size: 512,
            stride: 256,
            max_chunks: 20,
            chunk_selection: ChunkSelection::Head,
            chunk_pooling: ChunkPooling::Cls,
            pooling_strategy: PoolingStrategy::Attention,
            attention_hidden_size: 256,
            attention_heads: 1,
            attention_top_k: 0,
            attention_temperature: 1.0,
            ordinal: false,
            multi_label: false,
            classifier_hidden_size: None,
            hidden_dropout: 0.1,
            attention_dropout: 0.1,
            classifier_dropout: 0.3,
            layer_norm_eps: 1e-5,
            tasks: Vec::new(),
            wide: None,
        }
    }
}

impl LongreadSection {
    /// The chunking settings.
    pub fn chunking(&self) -> ChunkingConfig {
        ChunkingConfig {
            chunk_size: self.chunk_size,
            stride: self.stride,
            max_chunks: self.max_chunks,
            selection: self.chunk_selection,
        }
    }

    /// The single-chunk baseline's settings: the first `chunk_size` tokens as one chunk, its
    /// `<s>`/`[CLS]` state, `dropout` in the head (transformers uses the encoder's
    /// `hidden_dropout_prob` when `classifier_dropout` is unset).
    pub fn sequence(chunk_size: usize, dropout: f64) -> Self {
        Self {
            architecture: Architecture::Sequence,
            chunk_size,
            stride: chunk_size / 2,
            max_chunks: 1,
            chunk_selection: ChunkSelection::Head,
            chunk_pooling: ChunkPooling::Cls,
            pooling_strategy: PoolingStrategy::First,
            hidden_dropout: dropout,
            classifier_dropout: dropout,
            ..Self::default()
        }
    }

    /// Context vectors actually used (1 unless "multihead").
    pub fn heads(&self) -> usize {
        if self.pooling_strategy == PoolingStrategy::Multihead {
            self.attention_heads
        } else {
            1
        }
    }

    /// Checks the section against the encoder; returns what is wrong.
    pub fn validate(&self, encoder: &EncoderConfig) -> std::result::Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "longread.format_version {} is not supported by this version of longread (it reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        if self.chunk_size > encoder.max_sequence_length() {
            return Err(format!(
                "longread.chunk_size {} exceeds the encoder's {} positions",
                self.chunk_size,
                encoder.max_sequence_length()
            ));
        }
        if !(self.attention_temperature.is_finite() && self.attention_temperature > 0.0) {
            return Err(format!("longread.attention_temperature {} must be above 0", self.attention_temperature));
        }
        if self.ordinal && (self.architecture == Architecture::Sequence || self.tasks.len() > 1) {
            return Err("longread.ordinal applies to a hierarchical model with one task".into());
        }
        if self.pooling_strategy == PoolingStrategy::LabelAttention && !self.multi_label {
            return Err("pooling_strategy \"label_attention\" gives each label its own chunk weights: it needs \
                        longread.multi_label"
                .into());
        }
        if self.multi_label && self.ordinal {
            return Err("longread.multi_label and longread.ordinal exclude each other: ordered labels are one \
                        label per document"
                .into());
        }
        if let Some(wide) = self.wide {
            if !(wide.scale.is_finite() && wide.scale > 0.0) {
                return Err(format!("longread.wide.scale {} must be above 0", wide.scale));
            }
            if self.tasks.len() > 1 {
                return Err("longread.wide applies to a model with one task".into());
            }
        }
        if self.attention_hidden_size == 0 || self.classifier_hidden_size == Some(0) {
            return Err("longread.attention_hidden_size and classifier_hidden_size must be positive".into());
        }
        match (self.pooling_strategy, self.attention_heads) {
            (PoolingStrategy::Multihead, k) if k < 2 => {
                Err(format!("pooling_strategy \"multihead\" needs attention_heads ≥ 2 (got {k})"))
            }
            (PoolingStrategy::Multihead, _) => Ok(()),
            (_, 0) => Err("longread.attention_heads must be positive".into()),
            _ => Ok(()),
        }?;
        for (name, p) in [
            ("hidden_dropout", self.hidden_dropout),
            ("attention_dropout", self.attention_dropout),
            ("classifier_dropout", self.classifier_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("longread.{name} {p} must be in [0, 1)"));
            }
        }
        if self.architecture == Architecture::Sequence {
            let single = self.max_chunks == 1
                && self.chunk_selection == ChunkSelection::Head
                && self.chunk_pooling == ChunkPooling::Cls
                && self.pooling_strategy == PoolingStrategy::First;
            if !single {
                return Err("architecture \"sequence\" reads the first chunk only: it needs max_chunks 1, \
                            chunk_selection \"head\", chunk_pooling \"cls\" and pooling_strategy \"first\""
                    .into());
            }
            if self.tasks.len() > 1 {
                return Err("architecture \"sequence\" has one task (transformers' layout has one head)".into());
            }
        }
        for (i, task) in self.tasks.iter().enumerate() {
            validate_task_name(&task.name)?;
            if self.tasks[..i].iter().any(|t| t.name == task.name) {
                return Err(format!("longread.tasks: task \"{}\" appears twice", task.name));
            }
            if task.labels.len() < 2 {
                return Err(format!("longread.tasks: task \"{}\" needs at least 2 labels", task.name));
            }
        }
        Ok(())
    }
}

/// True when the config.json in `dir` has a `"longread"` section (a classifier made by
/// `longread init`/`train`), false for a plain encoder checkpoint.
/// A bag of words, HAN or ensemble is an error that says so.
pub fn is_classifier_dir(dir: &Path) -> Result<bool> {
    crate::checkpoint::refuse_encoderless(dir)?;
    let path = dir.join("config.json");
    let text = crate::model_dir::read_config_text(&path)?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|source| ModelError::Json { path, source })?;
    Ok(value.get("longread").is_some())
}

/// Task names become tensor-name prefixes: letters, digits, `_` and `-` only.
pub fn validate_task_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!("task name \"{name}\" must be letters, digits, _ or - (and not empty)"));
    }
    Ok(())
}

/// Everything in a classifier's config.json besides the encoder's own keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifierConfig {
    /// The encoder's configuration (HF keys, unchanged).
    pub encoder: EncoderConfig,
    /// The longread section.
    pub longread: LongreadSection,
    /// Label names in id order.
    pub labels: Vec<String>,
}

#[derive(Deserialize)]
struct HeadKeys {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    problem_type: Option<String>,
    #[serde(default)]
    id2label: BTreeMap<String, String>,
    longread: Option<LongreadSection>,
}

/// Keys of config.json that belong to the classifier, not to the encoder.
const HEAD_KEYS: [&str; 6] = ["architectures", "id2label", "label2id", "longread", "num_labels", "problem_type"];

/// transformers' `problem_type` of a model with one sigmoid per label (its
/// `*ForSequenceClassification` then trains with `BCEWithLogitsLoss`).
pub const MULTI_LABEL_PROBLEM: &str = "multi_label_classification";

impl ClassifierConfig {
    /// A classifier configuration; head-specific keys left in the encoder's config (a source
    /// checkpoint's own labels, say) are dropped.
    pub fn new(mut encoder: EncoderConfig, longread: LongreadSection, labels: Vec<String>) -> Self {
        for key in HEAD_KEYS {
            encoder.extra.shift_remove(key);
        }
        Self { encoder, longread, labels }
    }

    /// Reads a classifier's config.json (already validated as an encoder config).
    pub fn from_file(path: &Path, encoder: EncoderConfig) -> Result<Self> {
        let invalid = |message: String| ModelError::InvalidConfig { path: path.to_owned(), message };
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_owned(), source })?;
        let keys: HeadKeys =
            serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.to_owned(), source })?;
        let Some(mut longread) = keys.longread else {
            return Err(invalid(format!(
                "no \"longread\" section: this is a plain encoder ({}), not a longread classifier; \
                 create one with `longread init --encoder DIR --labels ...`",
                keys.architectures.join(", ")
            )));
        };
        // transformers' own key says it too (a config.json written by transformers' tools
        // keeps it and may drop unknown keys of ours).
        longread.multi_label |= keys.problem_type.as_deref() == Some(MULTI_LABEL_PROBLEM);
        longread.validate(&encoder).map_err(invalid)?;
        let labels = labels_from_id2label(&keys.id2label).map_err(invalid)?;
        if let Some(first) = longread.tasks.first() {
            if first.labels != labels {
                return Err(invalid(format!(
                    "longread.tasks[0] (\"{}\") must have the id2label labels ({})",
                    first.name,
                    longread_text::labelled::label_list(&labels)
                )));
            }
        }
        Ok(Self::new(encoder, longread, labels))
    }

    /// The tasks, first (primary) task first; a single-task model has one, `"label"`.
    pub fn tasks(&self) -> Vec<TaskSpec> {
        if self.longread.tasks.is_empty() {
            vec![TaskSpec { name: DEFAULT_TASK.into(), column: DEFAULT_TASK.into(), labels: self.labels.clone() }]
        } else {
            self.longread.tasks.clone()
        }
    }

    /// Replaces the task list (the first task's labels become `id2label`); a single task named
    /// and read as `"label"` is stored as no task list, as single-task models always were.
    pub fn set_tasks(&mut self, tasks: Vec<TaskSpec>) {
        if let Some(first) = tasks.first() {
            self.labels = first.labels.clone();
        }
        let plain = tasks.len() == 1 && tasks[0].name == DEFAULT_TASK && tasks[0].column == DEFAULT_TASK;
        self.longread.tasks = if plain { Vec::new() } else { tasks };
    }

    /// Inner size of the head.
    pub fn classifier_hidden_size(&self) -> usize {
        self.longread.classifier_hidden_size.unwrap_or(self.encoder.hidden_size / 2).max(1)
    }

    /// The `architectures` entry of config.json: longread's own name for the hierarchical
    /// model; for the single-chunk baseline the transformers class that loads it.
    pub fn hf_architecture(&self) -> &'static str {
        match self.longread.architecture {
            Architecture::Hierarchical => ARCHITECTURE,
            Architecture::Sequence => crate::encoder::Family::sequence_class(&self.encoder.model_type),
        }
    }

    /// The full config.json: encoder keys, architectures, labels and the longread section.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = self.encoder.to_json();
        let id2label: BTreeMap<String, &String> =
            self.labels.iter().enumerate().map(|(i, l)| (i.to_string(), l)).collect();
        let label2id: BTreeMap<&String, usize> = self.labels.iter().enumerate().map(|(i, l)| (l, i)).collect();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("architectures".into(), serde_json::json!([self.hf_architecture()]));
            obj.insert("id2label".into(), serde_json::json!(id2label));
            obj.insert("label2id".into(), serde_json::json!(label2id));
            obj.insert("longread".into(), serde_json::to_value(&self.longread).unwrap_or_default());
            if self.longread.multi_label {
                obj.insert("problem_type".into(), MULTI_LABEL_PROBLEM.into());
            }
            if self.longread.architecture == Architecture::Sequence
                && self.encoder.family() == crate::encoder::Family::ModernBert
            {
                // The head reads the first token's state (transformers' "cls" pooling), whatever
                // the pretrained checkpoint chose.
                obj.insert("classifier_pooling".into(), "cls".into());
            }
        }
        value
    }
}

/// Label names ordered by id; ids must be 0..n.
fn labels_from_id2label(map: &BTreeMap<String, String>) -> std::result::Result<Vec<String>, String> {
    let mut pairs = map
        .iter()
        .map(|(k, v)| {
            k.parse::<usize>().map(|i| (i, v.clone())).map_err(|_| format!("id2label key \"{k}\" is not a number"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    pairs.sort();
    if pairs.len() < 2 || pairs.iter().enumerate().any(|(i, (id, _))| *id != i) {
        return Err("id2label must name at least 2 labels with ids 0, 1, 2, …".into());
    }
    Ok(pairs.into_iter().map(|(_, l)| l).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_take_the_documented_defaults() {
        let s: LongreadSection = serde_json::from_str("{}").unwrap();
        assert_eq!(s, LongreadSection::default());
        assert_eq!((s.chunk_size, s.stride, s.max_chunks), (512, 256, 20));
        assert_eq!((s.attention_hidden_size, s.classifier_dropout, s.layer_norm_eps), (256, 0.3, 1e-5));
        let s: LongreadSection =
            serde_json::from_str(r#"{"pooling_strategy": "multihead", "attention_heads": 4}"#).unwrap();
        assert_eq!(s.heads(), 4);
    }

    #[test]
    fn a_single_task_is_stored_as_before_and_task_lists_round_trip() {
        let json = serde_json::to_value(LongreadSection::default()).unwrap();
        assert!(json.get("tasks").is_none(), "single-task configs keep their old form");
        let s: LongreadSection = serde_json::from_str(
            r#"{"tasks": [{"name": "rating", "column": "label", "labels": ["a", "b"]},
                          {"name": "topic", "column": "topic", "labels": ["x", "y", "z"]}]}"#,
        )
        .unwrap();
        assert_eq!(s.tasks[1].labels.len(), 3);
        let back: LongreadSection = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let mut bad = s.clone();
        bad.tasks[1].name = "to pic".into();
        let encoder: EncoderConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4
        }))
        .unwrap();
        assert!(bad.validate(&encoder).unwrap_err().contains("letters, digits"));
        bad.tasks[1].name = "rating".into();
        assert!(bad.validate(&encoder).unwrap_err().contains("twice"));
    }

    #[test]
    fn labels_must_be_dense_from_zero() {
        let mut m = BTreeMap::new();
        m.insert("0".to_string(), "a".to_string());
        m.insert("2".to_string(), "c".to_string());
        assert!(labels_from_id2label(&m).is_err());
        m.insert("1".to_string(), "b".to_string());
        assert_eq!(labels_from_id2label(&m).unwrap(), vec!["a", "b", "c"]);
    }
}
