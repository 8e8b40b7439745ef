//! DistilBERT, ELECTRA, MPNet, ModernBERT and DeBERTa-v2/v3 encoders against transformers (fixtures from
//! `scripts/make_family_fixtures.py`): the same token ids, the same last hidden states to 1e-4 on
//! a padded batch, and in training mode (dropout 0) the same loss and parameter gradients.

mod common;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use common::{expected, fixture, max_abs_diff};
use longread_model::encoder::Family;
use longread_model::{Checkpoint, DropoutRng, LoadOptions, Mode};
use longread_text::{pad_batch, TextTokenizer};

const FIXTURES: [(&str, Family); 6] = [
    ("tiny-distilbert", Family::DistilBert),
    ("tiny-electra", Family::Electra),
    ("tiny-mpnet", Family::MPNet),
    ("tiny-modernbert", Family::ModernBert),
    ("tiny-deberta-v3", Family::DebertaV2),
    ("tiny-deberta-v2", Family::DebertaV2),
];

fn texts(name: &str) -> Vec<String> {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("texts.json")).unwrap()).unwrap()
}

#[test]
fn each_family_is_read_by_its_model_type() {
    for (name, family) in FIXTURES {
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        assert_eq!(checkpoint.config.family(), family, "{name}");
    }
}

#[test]
fn tokenizer_ids_match_the_reference() {
    for (name, _) in FIXTURES {
        let exp = expected(name);
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        let tokenizer = TextTokenizer::from_file(&fixture(name).join("tokenizer.json")).unwrap();
        let texts = texts(name);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encoded = tokenizer.encode_batch(&refs).unwrap();
        let seqs: Vec<&[u32]> = encoded.iter().map(|e| e.ids.as_slice()).collect();
        let (ids, mask, len) = pad_batch(&seqs, checkpoint.config.pad_token_id);
        let ids = Tensor::from_vec(ids, (refs.len(), len), &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(mask, (refs.len(), len), &Device::Cpu).unwrap();
        assert_eq!(
            ids.to_vec2::<u32>().unwrap(),
            exp["input_ids"].to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap()
        );
        assert_eq!(
            mask.to_vec2::<u32>().unwrap(),
            exp["attention_mask"].to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap()
        );
    }
}

/// A fixture's encoder (inference), its padded batch and transformers' outputs.
fn inference_case(name: &str) -> (longread_model::Encoder, Tensor, Tensor, HashMap<String, Tensor>) {
    let exp = expected(name);
    let encoder =
        Checkpoint::open(&fixture(name)).unwrap().load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
    (encoder, ids, mask, exp)
}

#[test]
fn hidden_states_match_transformers_on_a_padded_batch() {
    for (name, _) in FIXTURES {
        let (encoder, ids, mask, exp) = inference_case(name);
        let hidden = encoder.forward(&ids, &mask, Mode::Eval).unwrap();
        let diff = max_abs_diff(&hidden, &exp["last_hidden_state"]);
        assert!(diff <= 1e-4, "{name}: max abs diff {diff}");
    }
}

#[test]
fn a_frozen_prefix_then_the_rest_equals_the_whole_pass() {
    for (name, _) in FIXTURES {
        let (encoder, ids, mask, exp) = inference_case(name);
        let prefix = encoder.prefix(&ids, &mask, 1).unwrap();
        let hidden = encoder.forward_from(&prefix, &mask, 1, Mode::Eval).unwrap();
        let diff = max_abs_diff(&hidden, &exp["last_hidden_state"]);
        assert!(diff <= 1e-4, "{name}: max abs diff {diff}");
    }
}

#[test]
fn loss_and_gradients_match_transformers_in_training_mode() {
    for (name, family) in FIXTURES {
        let exp = expected(name);
        let mut checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        checkpoint.config.hidden_dropout_prob = 0.0;
        checkpoint.config.attention_probs_dropout_prob = 0.0;
        let vars = VarMap::new();
        let options = LoadOptions { trainable: Some(vars.clone()), ..LoadOptions::default() };
        let encoder = checkpoint.load_encoder(&options, &Device::Cpu).unwrap();
        let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
        let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
        let rng = DropoutRng::new(0);
        let hidden = encoder.forward(&ids, &mask, Mode::Train(&rng)).unwrap();
        let loss = hidden.mul(&exp["probe"]).unwrap().sum_all().unwrap();
        let want_loss = exp["loss"].to_vec1::<f32>().unwrap()[0];
        let got_loss = loss.to_scalar::<f32>().unwrap();
        assert!(
            (got_loss - want_loss).abs() <= 1e-4 * want_loss.abs().max(1.0),
            "{name}: loss {got_loss} vs {want_loss}"
        );
        let grads = loss.backward().unwrap();
        let data = vars.data().lock().unwrap();
        let mut checked = 0;
        for (key, want) in exp.iter().filter_map(|(k, v)| k.strip_prefix("grad.").map(|file| (file, v))) {
            let (_, var) = data
                .iter()
                .find(|(canonical, _)| family.file_name(canonical) == key)
                .unwrap_or_else(|| panic!("{name}: no variable for {key}"));
            let got = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient for {key}"));
            let diff = max_abs_diff(got, want);
            assert!(diff <= 1e-4, "{name}: gradient of {key}: max abs diff {diff}");
            checked += 1;
        }
        assert_eq!(checked, 4, "{name}: gradients checked");
    }
}

#[test]
fn an_unknown_model_type_is_one_error_listing_the_families() {
    let dir = common::scratch_copy("tiny-bert");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["model_type"] = "gpt2".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("\"gpt2\"") && err.contains("distilbert, electra, mpnet"), "{err}");
}

#[test]
fn distilbert_computes_its_sinusoidal_positions_when_the_checkpoint_has_none() {
    let dir = common::scratch_copy("tiny-distilbert");
    let weights = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    assert!(tensors.remove("embeddings.position_embeddings.weight").is_some());
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let exp = expected("tiny-distilbert");
    let encoder = Checkpoint::open(dir.path()).unwrap().load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
    let diff = max_abs_diff(&encoder.forward(&ids, &mask, Mode::Eval).unwrap(), &exp["last_hidden_state"]);
    assert!(diff <= 1e-4, "max abs diff {diff}");
}
