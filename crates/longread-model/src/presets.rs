//! RoBERTa model presets and freshly initialised encoders for pretraining from scratch.
//!
//! The weights are drawn as transformers' `RobertaPreTrainedModel._init_weights` does: linear
//! and embedding weights from normal(0, initializer_range), biases 0, LayerNorm weight 1 and
//! bias 0, and the padding row of the word and position embeddings 0. They are laid out as
//! `RobertaForMaskedLM` saves them (`roberta.…` plus `lm_head.dense`, `lm_head.layer_norm`,
//! `lm_head.bias`; the decoder is tied to the word embeddings), so the directory loads with
//! `RobertaForMaskedLM.from_pretrained` and is a valid `--encoder` for `longread init`.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use candle_nn::{Init, VarMap};

use crate::checkpoint::fresh_var_builder;
use crate::config::EncoderConfig;
use crate::encoder::Encoder;
use crate::error::{ModelError, Result};
use crate::layers::{linear, LayerNorm};

/// The preset names.
pub const PRESETS: [&str; 4] = ["roberta-base", "roberta-large", "small", "tiny"];

/// A RoBERTa configuration by preset name, for a tokenizer of `vocab_size` tokens:
///
/// | preset | layers | hidden | heads | FFN |
/// |---|---|---|---|---|
/// | roberta-base (125M with 50,265 tokens) | 12 | 768 | 12 | 3072 |
/// | roberta-large (355M) | 24 | 1024 | 16 | 4096 |
/// | small | 4 | 512 | 8 | 2048 |
/// | tiny | 2 | 128 | 2 | 512 |
///
/// All: 514 positions (512 tokens), GELU, dropout 0.1, LayerNorm eps 1e-5, one token type,
/// `<pad>` = 1, `<s>` = 0, `</s>` = 2, initializer range 0.02.
pub fn preset_config(name: &str, vocab_size: usize) -> Result<EncoderConfig> {
    let (layers, hidden, heads, ffn) = match name {
        "roberta-base" => (12, 768, 12, 3072),
        "roberta-large" => (24, 1024, 16, 4096),
        "small" => (4, 512, 8, 2048),
        "tiny" => (2, 128, 2, 512),
        other => {
            return Err(ModelError::InvalidInput(format!(
                "unknown preset \"{other}\" (choose one of {})",
                PRESETS.join(", ")
            )))
        }
    };
    if vocab_size < 5 {
        return Err(ModelError::InvalidInput(format!("a vocabulary of {vocab_size} tokens is too small")));
    }
    let value = serde_json::json!({
        "architectures": ["RobertaForMaskedLM"],
        "model_type": "roberta",
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 514,
        "type_vocab_size": 1,
        "layer_norm_eps": 1e-5,
        "initializer_range": 0.02,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": true,
    });
    serde_json::from_value(value).map_err(|e| ModelError::InvalidInput(format!("preset {name}: {e}")))
}

/// Freshly initialised `RobertaForMaskedLM` tensors for `config`, reproducibly from `seed`.
pub fn init_masked_lm(config: &EncoderConfig, seed: u64) -> Result<HashMap<String, Tensor>> {
    config.validate().map_err(ModelError::InvalidInput)?;
    let vars = VarMap::new();
    let vb = fresh_var_builder(&config.model_type, seed, Some(vars.clone()), DType::F32, &crate::device::host());
    Encoder::load(vb.pp("roberta"), config)?;
    let (h, std) = (config.hidden_size, config.initializer_range);
    let head = vb.pp("lm_head");
    linear(head.pp("dense"), h, h, std)?;
    LayerNorm::load(head.pp("layer_norm"), h, config.layer_norm_eps)?;
    head.get_with_hints(config.vocab_size, "bias", Init::Const(0.0))?;

    let mut tensors: HashMap<String, Tensor> = vars
        .data()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(name, var)| Ok((name.clone(), var.as_tensor().copy()?)))
        .collect::<candle_core::Result<_>>()?;
    // transformers zeroes the padding row of embeddings built with `padding_idx`.
    let pad = config.pad_token_id as usize;
    for table in ["roberta.embeddings.word_embeddings.weight", "roberta.embeddings.position_embeddings.weight"] {
        let t = tensors.get(table).ok_or_else(|| ModelError::InvalidInput(format!("{table} was not created")))?;
        let zero = Tensor::zeros((1, h), DType::F32, &crate::device::host())?;
        let zeroed = t.slice_assign(&[pad..pad + 1, 0..h], &zero)?;
        tensors.insert(table.to_string(), zeroed);
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roberta_base_has_125m_parameters_with_its_vocabulary() {
        let cfg = preset_config("roberta-base", 50265).unwrap();
        assert_eq!(
            (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size(), cfg.max_sequence_length()),
            (768, 12, 3072, 512)
        );
        // Embeddings + 12 layers (no pooler), as transformers counts RobertaModel without pooler.
        let (h, v, f) = (768usize, 50265usize, 3072usize);
        let embeddings = v * h + 514 * h + h + 2 * h;
        let layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h;
        assert!((124_000_000..126_000_000).contains(&(embeddings + 12 * layer)));
        assert!(preset_config("huge", 100)
            .unwrap_err()
            .to_string()
            .contains("roberta-base, roberta-large, small, tiny"));
    }

    #[test]
    fn fresh_weights_follow_transformers_init() {
        let cfg = preset_config("tiny", 300).unwrap();
        let t = init_masked_lm(&cfg, 7).unwrap();
        let values = |name: &str| t[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let q = values("roberta.encoder.layer.0.attention.self.query.weight");
        let std = (q.iter().map(|x| x * x).sum::<f32>() / q.len() as f32).sqrt();
        assert!((std - 0.02).abs() < 0.002, "std {std}");
        assert!(values("roberta.encoder.layer.1.output.dense.bias").iter().all(|&x| x == 0.0));
        assert!(values("roberta.embeddings.LayerNorm.weight").iter().all(|&x| x == 1.0));
        assert!(values("lm_head.bias").iter().all(|&x| x == 0.0));
        assert_eq!(t["lm_head.bias"].dims(), [300]);
        let word = t["roberta.embeddings.word_embeddings.weight"].get(1).unwrap().to_vec1::<f32>().unwrap();
        assert!(word.iter().all(|&x| x == 0.0), "the <pad> row is zero");
        let other = t["roberta.embeddings.word_embeddings.weight"].get(5).unwrap().to_vec1::<f32>().unwrap();
        assert!(other.iter().any(|&x| x != 0.0));
        assert!(!t.contains_key("lm_head.decoder.weight"), "tied to the word embeddings");
        let again = init_masked_lm(&cfg, 7).unwrap();
        assert_eq!(
            values("lm_head.dense.weight"),
            again["lm_head.dense.weight"].flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }
}
