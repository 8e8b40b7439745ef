//! Encoder families: what differs between BERT, RoBERTa, DistilBERT, ELECTRA and MPNet
//! checkpoints, in one place. Every family is built from the same blocks (embeddings, post-LN
//! transformer layers) under longread's canonical tensor names, BERT's
//! (`embeddings.…`, `encoder.layer.{i}.attention.self.query.…`); this module translates them to
//! each family's own file names, so checkpoints load and save as transformers writes them.
//!
//! References: transformers `models/{bert,roberta,distilbert,electra,mpnet}/modeling_*.py`.

use std::fmt;

/// The encoder families longread reads, by `config.json`'s `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `bert`: absolute positions, token types.
    Bert,
    /// `roberta`, `xlm-roberta`, `camembert`: positions counted after the padding id.
    Roberta,
    /// `distilbert`: no token types, its own tensor names, optional sinusoidal positions.
    DistilBert,
    /// `electra` (discriminators): BERT with embeddings of their own size, projected up.
    Electra,
    /// `mpnet`: RoBERTa positions, no token types, a relative-position attention bias shared by
    /// every layer.
    MPNet,
    /// `modernbert`: pre-norm layers without biases, rotary positions (up to 8,192), GeGLU,
    /// global attention every few layers and a sliding window in the others.
    ModernBert,
    /// `deberta-v2` (DeBERTa-v2 and v3): disentangled attention over relative positions (c2p,
    /// p2c, log buckets), usually no absolute positions and no token types.
    DebertaV2,
}

/// Every `model_type` longread reads, with its family.
pub const MODEL_TYPES: [(&str, Family); 9] = [
    ("bert", Family::Bert),
    ("roberta", Family::Roberta),
    ("xlm-roberta", Family::Roberta),
    ("camembert", Family::Roberta),
    ("distilbert", Family::DistilBert),
    ("electra", Family::Electra),
    ("mpnet", Family::MPNet),
    ("modernbert", Family::ModernBert),
    ("deberta-v2", Family::DebertaV2),
];

/// How a single-chunk (`*ForSequenceClassification`) head is shaped, as transformers has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceHeadStyle {
    /// BERT: `{prefix}.pooler.dense → tanh → dropout → classifier`.
    BertPooler,
    /// RoBERTa and MPNet: `dropout → classifier.dense → tanh → dropout → classifier.out_proj`.
    Classifier,
    /// ELECTRA: `dropout → classifier.dense → GELU → dropout → classifier.out_proj`.
    ClassifierGelu,
    /// DistilBERT: `pre_classifier → ReLU → dropout → classifier`.
    PreClassifier,
    /// ModernBERT: `head.dense → GELU → head.norm → dropout → classifier`.
    PredictionHead,
    /// DeBERTa-v2: `dropout → pooler.dense → GELU → dropout → classifier`.
    ContextPooler,
}

impl Family {
    /// The family of a `model_type`, or a message listing the ones longread reads.
    pub fn of(model_type: &str) -> Result<Self, String> {
        MODEL_TYPES.iter().find(|(name, _)| *name == model_type).map(|(_, family)| *family).ok_or_else(|| {
            format!(
                "model_type \"{model_type}\" is not an encoder family longread reads; it reads: {}",
                Self::known_list()
            )
        })
    }

    /// `"bert, roberta, …"`: the model types longread reads.
    pub fn known_list() -> String {
        MODEL_TYPES.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
    }

    /// Whether the embeddings add a token-type table.
    pub fn has_token_types(self) -> bool {
        // DeBERTa-v2's table exists when type_vocab_size > 0 (see EncoderConfig::has_token_types).
        matches!(self, Self::Bert | Self::Roberta | Self::Electra | Self::DebertaV2)
    }

    /// Whether position ids count real tokens after the padding id (RoBERTa's scheme).
    pub fn offsets_positions(self) -> bool {
        matches!(self, Self::Roberta | Self::MPNet)
    }

    /// Whether every layer's attention scores get a bias learnt per relative-position bucket.
    pub fn has_relative_attention_bias(self) -> bool {
        self == Self::MPNet
    }

    /// The single-chunk head transformers puts on this family.
    pub fn sequence_head(self) -> SequenceHeadStyle {
        match self {
            Self::Bert => SequenceHeadStyle::BertPooler,
            Self::Roberta | Self::MPNet => SequenceHeadStyle::Classifier,
            Self::Electra => SequenceHeadStyle::ClassifierGelu,
            Self::DistilBert => SequenceHeadStyle::PreClassifier,
            Self::ModernBert => SequenceHeadStyle::PredictionHead,
            Self::DebertaV2 => SequenceHeadStyle::ContextPooler,
        }
    }

    /// The transformers class of a single-chunk classifier of `model_type`.
    pub fn sequence_class(model_type: &str) -> &'static str {
        match model_type {
            "roberta" => "RobertaForSequenceClassification",
            "xlm-roberta" => "XLMRobertaForSequenceClassification",
            "camembert" => "CamembertForSequenceClassification",
            "distilbert" => "DistilBertForSequenceClassification",
            "electra" => "ElectraForSequenceClassification",
            "mpnet" => "MPNetForSequenceClassification",
            "modernbert" => "ModernBertForSequenceClassification",
            "deberta-v2" => "DebertaV2ForSequenceClassification",
            _ => "BertForSequenceClassification",
        }
    }

    /// The file name of a canonical (BERT-layout) encoder tensor name, both relative to the
    /// encoder's prefix: `encoder.layer.0.attention.self.query.weight` is
    /// `transformer.layer.0.attention.q_lin.weight` in DistilBERT and
    /// `encoder.layer.0.attention.attn.q.weight` in MPNet; ModernBERT keeps its layers under
    /// `layers.{i}` (canonical `encoder.layer.{i}`, same sub-names), its word table as
    /// `embeddings.tok_embeddings`, its embedding norm as `embeddings.norm` and its final norm
    /// (canonical `encoder.layer.{last}.final_norm`, so that it trains with the top layer) as
    /// `final_norm`; other names are the same everywhere.
    pub fn file_name(self, canonical: &str) -> String {
        if self == Self::ModernBert {
            return modernbert_file_name(canonical);
        }
        let renames: &[(&str, &str)] = match self {
            Self::DistilBert => &[
                ("attention.self.query.", "attention.q_lin."),
                ("attention.self.key.", "attention.k_lin."),
                ("attention.self.value.", "attention.v_lin."),
                ("attention.output.dense.", "attention.out_lin."),
                ("attention.output.LayerNorm.", "sa_layer_norm."),
                ("intermediate.dense.", "ffn.lin1."),
                ("output.dense.", "ffn.lin2."),
                ("output.LayerNorm.", "output_layer_norm."),
            ],
            Self::MPNet => &[
                ("attention.self.query.", "attention.attn.q."),
                ("attention.self.key.", "attention.attn.k."),
                ("attention.self.value.", "attention.attn.v."),
                ("attention.output.dense.", "attention.attn.o."),
                ("attention.output.LayerNorm.", "attention.LayerNorm."),
            ],
            Self::DebertaV2 => &[
                ("attention.self.query.", "attention.self.query_proj."),
                ("attention.self.key.", "attention.self.key_proj."),
                ("attention.self.value.", "attention.self.value_proj."),
            ],
            Self::Bert | Self::Roberta | Self::Electra | Self::ModernBert => &[],
        };
        let Some((layer, tail)) = canonical.strip_prefix("encoder.layer.").and_then(|rest| rest.split_once('.')) else {
            return canonical.to_owned();
        };
        let stack = if self == Self::DistilBert { "transformer" } else { "encoder" };
        let tail = renames
            .iter()
            .find_map(|(from, to)| tail.strip_prefix(from).map(|rest| format!("{to}{rest}")))
            .unwrap_or_else(|| tail.to_owned());
        format!("{stack}.layer.{layer}.{tail}")
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bert => "BERT",
            Self::Roberta => "RoBERTa",
            Self::DistilBert => "DistilBERT",
            Self::Electra => "ELECTRA",
            Self::MPNet => "MPNet",
            Self::ModernBert => "ModernBERT",
            Self::DebertaV2 => "DeBERTa-v2",
        })
    }
}

/// [`Family::file_name`] for ModernBERT.
fn modernbert_file_name(canonical: &str) -> String {
    if let Some(rest) = canonical.strip_prefix("embeddings.word_embeddings.") {
        return format!("embeddings.tok_embeddings.{rest}");
    }
    if let Some(rest) = canonical.strip_prefix("embeddings.LayerNorm.") {
        return format!("embeddings.norm.{rest}");
    }
    match canonical.strip_prefix("encoder.layer.").and_then(|rest| rest.split_once('.')) {
        Some((_, tail)) if tail.starts_with("final_norm.") => tail.to_owned(),
        Some((layer, tail)) => format!("layers.{layer}.{tail}"),
        None => canonical.to_owned(),
    }
}

/// T5's bidirectional relative-position bucket of `relative = key − query` (MPNet's
/// `relative_position_bucket`): half the buckets for each direction, exact below
/// `buckets / 4`, logarithmic up to `max_distance`, the last bucket beyond.
pub fn relative_position_bucket(relative: i64, buckets: usize, max_distance: usize) -> usize {
    let half = (buckets / 2) as i64;
    let n = -relative;
    let mut bucket = if n < 0 { half } else { 0 };
    let n = n.abs();
    let max_exact = half / 2;
    if n < max_exact {
        bucket += n;
    } else {
        // f32 arithmetic, as transformers computes it.
        let log_ratio = (n as f32 / max_exact as f32).ln() / ((max_distance as f64 / max_exact as f64).ln() as f32);
        let large = max_exact + (log_ratio * (half - max_exact) as f32) as i64;
        bucket += large.min(half - 1);
    }
    bucket as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_model_type_lists_the_known_ones() {
        let err = Family::of("gpt2").unwrap_err();
        assert!(err.contains("\"gpt2\"") && err.contains("distilbert") && err.contains("mpnet"), "{err}");
        assert_eq!(Family::of("xlm-roberta"), Ok(Family::Roberta));
    }

    #[test]
    fn layer_names_follow_each_family() {
        let q = "encoder.layer.3.attention.self.query.weight";
        assert_eq!(Family::Bert.file_name(q), q);
        assert_eq!(Family::DistilBert.file_name(q), "transformer.layer.3.attention.q_lin.weight");
        assert_eq!(Family::MPNet.file_name(q), "encoder.layer.3.attention.attn.q.weight");
        assert_eq!(
            Family::DistilBert.file_name("encoder.layer.0.output.LayerNorm.bias"),
            "transformer.layer.0.output_layer_norm.bias"
        );
        assert_eq!(
            Family::DistilBert.file_name("encoder.layer.0.attention.output.LayerNorm.bias"),
            "transformer.layer.0.sa_layer_norm.bias"
        );
        assert_eq!(
            Family::MPNet.file_name("encoder.layer.1.output.dense.weight"),
            "encoder.layer.1.output.dense.weight"
        );
        assert_eq!(Family::MPNet.file_name("embeddings.word_embeddings.weight"), "embeddings.word_embeddings.weight");
        let modern = Family::ModernBert;
        assert_eq!(modern.file_name("embeddings.word_embeddings.weight"), "embeddings.tok_embeddings.weight");
        assert_eq!(modern.file_name("embeddings.LayerNorm.weight"), "embeddings.norm.weight");
        assert_eq!(modern.file_name("encoder.layer.2.attn.Wqkv.weight"), "layers.2.attn.Wqkv.weight");
        assert_eq!(modern.file_name("encoder.layer.2.final_norm.weight"), "final_norm.weight");
        let deberta = Family::DebertaV2;
        assert_eq!(
            deberta.file_name("encoder.layer.0.attention.self.key.bias"),
            "encoder.layer.0.attention.self.key_proj.bias"
        );
        let pos_key = "encoder.layer.0.attention.self.pos_key_proj.weight";
        assert_eq!(deberta.file_name(pos_key), pos_key);
    }

    #[test]
    fn relative_buckets_match_t5() {
        // (key − query, bucket) from transformers' MPNet relative_position_bucket(…, 32, 128).
        let cases = [
            (0, 0),
            (1, 17),
            (-1, 1),
            (7, 23),
            (-7, 7),
            (8, 24),
            (-8, 8),
            (12, 25),
            (-12, 9),
            (20, 26),
            (64, 30),
            (-64, 14),
            (127, 31),
            (128, 31),
            (-500, 15),
            (500, 31),
        ];
        for (relative, want) in cases {
            assert_eq!(relative_position_bucket(relative, 32, 128), want, "relative {relative}");
        }
    }
}
