//! `config.json` of the encoder families longread reads (see [`crate::encoder::Family`]), with
//! Hugging Face's field names.
//!
//! Mirrors `transformers.BertConfig` / `RobertaConfig`, and reads the other families' configs
//! through their own names (DistilBERT's `dim`, `n_layers`, … are aliases); every field that may be missing has a
//! `#[serde(default)]` and its default is stated. Unknown fields are kept in `extra` so that a
//! model directory round-trips without losing them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::encoder::Family;
use crate::error::{ModelError, Result};

/// Encoder architecture parameters, as in Hugging Face `config.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EncoderConfig {
    /// The family: `"bert"`, `"roberta"` (also `"xlm-roberta"`, `"camembert"`), `"distilbert"`,
    /// `"electra"`, `"mpnet"`, `"modernbert"` or `"deberta-v2"`. Default `"bert"`.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// Vocabulary size. Required.
    pub vocab_size: usize,
    /// Hidden size (DistilBERT: `dim`). Required.
    #[serde(alias = "dim")]
    pub hidden_size: usize,
    /// Number of transformer layers (DistilBERT: `n_layers`). Required.
    #[serde(alias = "n_layers")]
    pub num_hidden_layers: usize,
    /// Number of attention heads (DistilBERT: `n_heads`). Required.
    #[serde(alias = "n_heads")]
    pub num_attention_heads: usize,
    /// Feed-forward inner size (DistilBERT: `hidden_dim`). Default `4 * hidden_size`.
    #[serde(default, alias = "hidden_dim")]
    pub intermediate_size: Option<usize>,
    /// Activation of the feed-forward layer (DistilBERT: `activation`, ModernBERT:
    /// `hidden_activation`). Default `"gelu"` (exact, erf-based).
    #[serde(default = "default_hidden_act", alias = "activation", alias = "hidden_activation")]
    pub hidden_act: String,
    /// Dropout on hidden states (DistilBERT: `dropout`). Default 0.1.
    #[serde(default = "default_dropout", alias = "dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities (DistilBERT: `attention_dropout`). Default 0.1.
    #[serde(default = "default_dropout", alias = "attention_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Number of position embeddings. Default 512.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// Number of token types. Default 2.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon (ModernBERT: `norm_eps`). Default 1e-12.
    #[serde(default = "default_layer_norm_eps", alias = "norm_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id (RoBERTa positions are counted from it). Default 0.
    #[serde(default)]
    pub pad_token_id: u32,
    /// Only `"absolute"` is supported. Default `"absolute"`.
    #[serde(default = "default_position_embedding_type")]
    pub position_embedding_type: String,
    /// Standard deviation used to initialise new weights. Default 0.02.
    #[serde(default = "default_initializer_range")]
    pub initializer_range: f64,
    /// ELECTRA: width of the embeddings, projected to `hidden_size` by `embeddings_project` when
    /// they differ. Default `hidden_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_size: Option<usize>,
    /// MPNet: buckets of the relative-position attention bias. Default 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_attention_num_buckets: Option<usize>,
    /// DistilBERT: fixed sinusoidal position embeddings instead of learnt ones. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinusoidal_pos_embds: Option<bool>,
    /// Every other field of config.json, kept so that it is written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn default_model_type() -> String {
    "bert".into()
}
fn default_hidden_act() -> String {
    "gelu".into()
}
fn default_dropout() -> f64 {
    0.1
}
fn default_max_positions() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_position_embedding_type() -> String {
    "absolute".into()
}
fn default_initializer_range() -> f64 {
    0.02
}

/// How position ids are derived from the input ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionScheme {
    /// BERT: positions 0, 1, 2, ... for every sequence.
    Absolute,
    /// RoBERTa: positions start at `padding_idx + 1` and padding tokens get `padding_idx`.
    /// (transformers `create_position_ids_from_input_ids`.)
    PaddingOffset {
        /// The padding token id, which is also the position of padding tokens.
        padding_idx: u32,
    },
}

impl EncoderConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::model_dir::read_config_text(path)?;
        let config: Self =
            serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.to_owned(), source })?;
        config.validate().map_err(|message| ModelError::InvalidConfig { path: path.to_owned(), message })?;
        Ok(config)
    }

    /// Checks that the numbers are consistent; returns a message naming the problem.
    pub fn validate(&self) -> std::result::Result<(), String> {
        Family::of(&self.model_type)?;
        let positive = [
            ("vocab_size", self.vocab_size),
            ("embedding_size", self.embedding_size()),
            ("relative_attention_num_buckets", self.relative_attention_num_buckets()),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", if self.model_type == "deberta-v2" { 1 } else { self.type_vocab_size }),
            ("intermediate_size", self.intermediate_size()),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("{name} must be positive"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        for (name, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            ("attention_probs_dropout_prob", self.attention_probs_dropout_prob),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("{name} {p} must be in [0, 1)"));
            }
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return Err(format!("layer_norm_eps {} must be positive", self.layer_norm_eps));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type \"{}\" is not supported (only \"absolute\")",
                self.position_embedding_type
            ));
        }
        Activation::from_hf_name(&self.hidden_act)?;
        if let PositionScheme::PaddingOffset { padding_idx } = self.position_scheme() {
            if padding_idx as usize + 1 >= self.max_position_embeddings {
                return Err(format!(
                    "pad_token_id {padding_idx} leaves no positions in max_position_embeddings {}",
                    self.max_position_embeddings
                ));
            }
        }
        Ok(())
    }

    /// Feed-forward inner size (`4 * hidden_size` when absent).
    pub fn intermediate_size(&self) -> usize {
        self.intermediate_size.unwrap_or(4 * self.hidden_size)
    }

    /// Size of one attention head.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// The feed-forward activation (validated in [`Self::validate`]).
    pub fn activation(&self) -> Activation {
        Activation::from_hf_name(&self.hidden_act).unwrap_or(Activation::GeluErf)
    }

    /// The encoder family of `model_type` ([`Self::validate`] refuses a model type of no known
    /// family; an unvalidated config of an unknown one reads as BERT).
    pub fn family(&self) -> Family {
        Family::of(&self.model_type).unwrap_or(Family::Bert)
    }

    /// True for RoBERTa-style models (XLM-R and CamemBERT included).
    pub fn is_roberta(&self) -> bool {
        self.family() == Family::Roberta
    }

    /// Whether the embeddings add a token-type table (DeBERTa-v2: when `type_vocab_size` > 0).
    pub fn has_token_types(&self) -> bool {
        let family = self.family();
        family.has_token_types() && (family != Family::DebertaV2 || self.type_vocab_size > 0)
    }

    /// Width of the embedding tables (ELECTRA's `embedding_size`; else `hidden_size`).
    pub fn embedding_size(&self) -> usize {
        self.embedding_size.unwrap_or(self.hidden_size)
    }

    /// Buckets of MPNet's relative-position attention bias (default 32).
    pub fn relative_attention_num_buckets(&self) -> usize {
        self.relative_attention_num_buckets.unwrap_or(32)
    }

    /// How position ids are computed.
    pub fn position_scheme(&self) -> PositionScheme {
        if self.family().offsets_positions() {
            PositionScheme::PaddingOffset { padding_idx: self.pad_token_id }
        } else {
            PositionScheme::Absolute
        }
    }

    /// The longest sequence (special tokens included) the position embeddings allow.
    pub fn max_sequence_length(&self) -> usize {
        match self.position_scheme() {
            PositionScheme::Absolute => self.max_position_embeddings,
            PositionScheme::PaddingOffset { padding_idx } => self.max_position_embeddings - padding_idx as usize - 1,
        }
    }

    /// config.json's encoder keys under the family's own names (DistilBERT's `dim`, `n_layers`,
    /// `n_heads`, `hidden_dim`, `activation`, `dropout`, `attention_dropout`), so that
    /// transformers reads back the same model.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        let renames: &[(&str, &str)] = match self.family() {
            Family::DistilBert => &[
                ("hidden_size", "dim"),
                ("num_hidden_layers", "n_layers"),
                ("num_attention_heads", "n_heads"),
                ("intermediate_size", "hidden_dim"),
                ("hidden_act", "activation"),
                ("hidden_dropout_prob", "dropout"),
                ("attention_probs_dropout_prob", "attention_dropout"),
            ],
            Family::ModernBert => &[
                ("hidden_act", "hidden_activation"),
                ("layer_norm_eps", "norm_eps"),
                ("attention_probs_dropout_prob", "attention_dropout"),
            ],
            _ => return value,
        };
        if let Some(obj) = value.as_object_mut() {
            obj.insert("intermediate_size".into(), self.intermediate_size().into());
            for &(ours, theirs) in renames {
                if let Some(v) = obj.remove(ours) {
                    obj.insert(theirs.into(), v);
                }
            }
        }
        value
    }

    /// Dropout of a transformers classification head: `classifier_dropout` when config.json
    /// sets it, else `hidden_dropout_prob` (as transformers decides).
    pub fn classifier_dropout(&self) -> f64 {
        let key = match self.model_type.as_str() {
            "distilbert" => "seq_classif_dropout",
            "deberta-v2" => "cls_dropout",
            _ => "classifier_dropout",
        };
        self.extra.get(key).and_then(serde_json::Value::as_f64).unwrap_or(self.hidden_dropout_prob)
    }

    /// The prefix under which `*ForSequenceClassification` checkpoints store the encoder.
    pub fn weight_prefix(&self) -> &str {
        match self.model_type.as_str() {
            "xlm-roberta" | "camembert" => "roberta",
            "modernbert" => "model",
            "deberta-v2" => "deberta",
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> serde_json::Value {
        serde_json::json!({
            "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4
        })
    }

    #[test]
    fn missing_fields_take_documented_defaults() {
        let c: EncoderConfig = serde_json::from_value(minimal()).unwrap();
        assert_eq!(c.model_type, "bert");
        assert_eq!(c.intermediate_size(), 128);
        assert_eq!(c.hidden_act, "gelu");
        assert_eq!(c.max_position_embeddings, 512);
        assert_eq!(c.type_vocab_size, 2);
        assert_eq!(c.layer_norm_eps, 1e-12);
        assert_eq!(c.pad_token_id, 0);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn heads_must_divide_hidden_size() {
        let mut v = minimal();
        v["num_attention_heads"] = 7.into();
        let c: EncoderConfig = serde_json::from_value(v).unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.contains("hidden_size 32 is not divisible by num_attention_heads 7"), "{err}");
    }

    #[test]
    fn unknown_activation_is_rejected() {
        let mut v = minimal();
        v["hidden_act"] = "swoosh".into();
        let c: EncoderConfig = serde_json::from_value(v).unwrap();
        assert!(c.validate().unwrap_err().contains("swoosh"));
    }

    #[test]
    fn roberta_positions_are_offset_by_padding() {
        let mut v = minimal();
        v["model_type"] = "roberta".into();
        v["pad_token_id"] = 1.into();
        v["max_position_embeddings"] = 514.into();
        let c: EncoderConfig = serde_json::from_value(v).unwrap();
        assert_eq!(c.position_scheme(), PositionScheme::PaddingOffset { padding_idx: 1 });
        assert_eq!(c.max_sequence_length(), 512);
    }

    #[test]
    fn distilbert_configs_are_read_and_written_in_distilberts_names() {
        let v = serde_json::json!({
            "model_type": "distilbert", "vocab_size": 100, "dim": 32, "n_layers": 2, "n_heads": 4,
            "hidden_dim": 64, "activation": "relu", "dropout": 0.2, "attention_dropout": 0.3, "qa_dropout": 0.1
        });
        let c: EncoderConfig = serde_json::from_value(v).unwrap();
        assert_eq!((c.hidden_size, c.num_hidden_layers, c.num_attention_heads), (32, 2, 4));
        assert_eq!((c.intermediate_size(), c.hidden_act.as_str()), (64, "relu"));
        assert_eq!((c.hidden_dropout_prob, c.attention_probs_dropout_prob), (0.2, 0.3));
        let back = c.to_json();
        for (key, want) in [("dim", 32.0), ("n_layers", 2.0), ("n_heads", 4.0), ("hidden_dim", 64.0), ("dropout", 0.2)]
        {
            assert_eq!(back[key].as_f64(), Some(want), "{key}");
        }
        assert!(back.get("hidden_size").is_none() && back.get("intermediate_size").is_none());
        assert_eq!(back["qa_dropout"], 0.1);
        assert_eq!(serde_json::from_value::<EncoderConfig>(back).unwrap(), c);
    }

    #[test]
    fn unknown_fields_round_trip() {
        let mut v = minimal();
        v["architectures"] = serde_json::json!(["BertModel"]);
        let c: EncoderConfig = serde_json::from_value(v).unwrap();
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["architectures"], serde_json::json!(["BertModel"]));
    }
}
