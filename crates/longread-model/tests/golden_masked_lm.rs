//! The masked-LM head against transformers' RobertaForMaskedLM (fixture by
//! `scripts/make_mlm_fixtures.py`): logits and loss within 1e-4, gradients everywhere.

mod common;

use candle_core::{DType, Device, Tensor};
use common::fixture;
use longread_model::masked_lm::{masked_lm_loss, MaskedLm};
use longread_model::{DropoutRng, Mode};

fn expected() -> std::collections::HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture("tiny-roberta-mlm/expected.safetensors"), &Device::Cpu).unwrap()
}

/// The fixture's model (trainable or not) and its input ids, attention mask and labels.
fn model_and_inputs(trainable: bool) -> (MaskedLm, Tensor, Tensor, Vec<i64>) {
    let e = expected();
    let model = MaskedLm::load(&fixture("tiny-roberta-mlm"), trainable, &Device::Cpu).unwrap();
    let ids = e["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = e["attention_mask"].to_dtype(DType::U32).unwrap();
    let labels: Vec<i64> = e["labels"].flatten_all().unwrap().to_vec1().unwrap();
    (model, ids, mask, labels)
}

#[test]
fn logits_and_loss_match_roberta_for_masked_lm() {
    let e = expected();
    let model = MaskedLm::load(&fixture("tiny-roberta-mlm"), false, &Device::Cpu).unwrap();
    let ids = e["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = e["attention_mask"].to_dtype(DType::U32).unwrap();
    let logits = model.forward(&ids, &mask, Mode::Eval).unwrap();
    // Padding positions are not compared (transformers computes them from padding too).
    let keep = e["attention_mask"].to_dtype(DType::F32).unwrap().unsqueeze(2).unwrap();
    let diff = logits
        .sub(&e["logits"])
        .unwrap()
        .broadcast_mul(&keep)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff <= 1e-4, "logits differ by {diff}");
    let labels: Vec<i64> = e["labels"].flatten_all().unwrap().to_vec1().unwrap();
    let loss = masked_lm_loss(&logits, &labels).unwrap().to_scalar::<f32>().unwrap();
    let want = e["loss"].to_vec1::<f32>().unwrap()[0];
    assert!((loss - want).abs() <= 1e-4, "loss {loss} vs {want}");
    let at_labels = model.loss(&ids, &mask, &labels, Mode::Eval).unwrap().to_scalar::<f32>().unwrap();
    assert!((at_labels - want).abs() <= 1e-4, "loss at the labelled rows {at_labels} vs {want}");
    assert!(model.loss(&ids, &mask, &vec![-100; labels.len()], Mode::Eval).is_err());
    assert!(model.loss(&ids, &mask, &labels[1..], Mode::Eval).unwrap_err().to_string().contains("labels for"));
    assert!(masked_lm_loss(&logits, &vec![-100; labels.len()]).unwrap_err().to_string().contains("no masked position"));
}

#[test]
fn gradients_reach_every_parameter_including_the_tied_decoder() {
    let (model, ids, mask, labels) = model_and_inputs(true);
    let rng = DropoutRng::new(1);
    let logits = model.forward(&ids, &mask, Mode::Train(&rng)).unwrap();
    let grads = masked_lm_loss(&logits, &labels).unwrap().backward().unwrap();
    let named = model.named_vars();
    assert!(named.iter().any(|(n, _)| n == "lm_head.bias"));
    for (name, var) in &named {
        let g = grads.get(var.as_tensor());
        // Only token type 0 exists, so every embedding table is used.
        assert!(g.is_some(), "{name} gets no gradient");
    }
}

/// The loss computed at the labelled rows only gives the gradients of the full logits' loss.
#[test]
fn the_loss_at_labelled_rows_has_the_full_logits_gradients() {
    let (model, ids, mask, labels) = model_and_inputs(true);
    // Training mode (eval mode builds no graph); the same seed gives the same dropout masks.
    let (rng_a, rng_b) = (DropoutRng::new(3), DropoutRng::new(3));
    let full = masked_lm_loss(&model.forward(&ids, &mask, Mode::Train(&rng_a)).unwrap(), &labels).unwrap();
    let full = full.backward().unwrap();
    let rows = model.loss(&ids, &mask, &labels, Mode::Train(&rng_b)).unwrap().backward().unwrap();
    let named = model.named_vars();
    assert!(!named.is_empty());
    for (name, var) in &named {
        let (a, b) = (full.get(var.as_tensor()).unwrap(), rows.get(var.as_tensor()).unwrap());
        let diff = a.sub(b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff <= 1e-5, "{name}: gradients differ by {diff}");
    }
}

/// What `longread pretrain` wrote (fixture by `scripts/make_mlm_fixtures.py`) loads in
/// transformers' RobertaForMaskedLM with no missing keys and gives these logits.
#[test]
fn a_pretrained_output_gives_the_logits_transformers_computes_from_it() {
    let e = candle_core::safetensors::load(fixture("pretrained-mlm/expected.safetensors"), &Device::Cpu).unwrap();
    let diff = logits_diff("pretrained-mlm", &e);
    assert!(diff <= 1e-4, "logits differ by {diff}");
    // Trained, not fresh: the LM bias moved away from its zero initialisation.
    let bias = candle_core::safetensors::load(fixture("pretrained-mlm/model.safetensors"), &Device::Cpu).unwrap();
    assert!(bias["lm_head.bias"].abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap() > 1e-3);
}

/// Logits of `dir`'s masked-LM model on `expected`'s padded batch, against its `logits`
/// (padding positions not compared): the largest difference.
fn logits_diff(dir: &str, expected: &std::collections::HashMap<String, Tensor>) -> f32 {
    let model = MaskedLm::load(&fixture(dir), false, &Device::Cpu).unwrap();
    let ids = expected["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = expected["attention_mask"].to_dtype(DType::U32).unwrap();
    let logits = model.forward(&ids, &mask, Mode::Eval).unwrap();
    let keep = expected["attention_mask"].to_dtype(DType::F32).unwrap().unsqueeze(2).unwrap();
    let diff = logits.sub(&expected["logits"]).unwrap().broadcast_mul(&keep).unwrap().abs().unwrap();
    diff.max_all().unwrap().to_scalar::<f32>().unwrap()
}

/// BERT's head (`cls.predictions.…`, the config's activation — here ReLU) against
/// transformers' BertForMaskedLM.
#[test]
fn logits_and_loss_match_bert_for_masked_lm() {
    let e = candle_core::safetensors::load(fixture("tiny-bert-mlm/expected.safetensors"), &Device::Cpu).unwrap();
    let diff = logits_diff("tiny-bert-mlm", &e);
    assert!(diff <= 1e-4, "logits differ by {diff}");
    let model = MaskedLm::load(&fixture("tiny-bert-mlm"), true, &Device::Cpu).unwrap();
    let ids = e["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = e["attention_mask"].to_dtype(DType::U32).unwrap();
    let labels: Vec<i64> = e["labels"].flatten_all().unwrap().to_vec1().unwrap();
    let loss = model.loss(&ids, &mask, &labels, Mode::Eval).unwrap().to_scalar::<f32>().unwrap();
    let want = e["loss"].to_vec1::<f32>().unwrap()[0];
    assert!((loss - want).abs() <= 1e-4, "loss {loss} vs {want}");
    let names: Vec<String> = model.named_tensors().unwrap().into_keys().collect();
    for name in
        ["cls.predictions.bias", "cls.predictions.transform.dense.weight", "bert.embeddings.word_embeddings.weight"]
    {
        assert!(names.iter().any(|n| n == name), "{name} is not saved under transformers' name: {names:?}");
    }
}

/// A bare encoder (no head) does not load as a masked LM: the error names the missing head
/// and the way to start from it; `continue_from` gives it a new head (zero bias) and says so.
#[test]
fn an_encoder_without_a_head_is_refused_or_given_a_new_one() {
    let err = MaskedLm::load(&fixture("tiny-bert"), true, &Device::Cpu).err().unwrap().to_string();
    assert!(err.contains("no masked-LM head (cls.predictions.*)") && err.contains("--model"), "{err}");
    let (model, stored) = MaskedLm::continue_from(&fixture("tiny-bert"), 1, &Device::Cpu).unwrap();
    assert!(!stored);
    assert_eq!(model.config().extra["architectures"], serde_json::json!(["BertForMaskedLM"]));
    let tensors = model.named_tensors().unwrap();
    let bias = tensors["cls.predictions.bias"].abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert_eq!(bias, 0.0);
    // The encoder is the checkpoint's, not re-initialised.
    let source = candle_core::safetensors::load(fixture("tiny-bert/model.safetensors"), &Device::Cpu).unwrap();
    let name = "embeddings.word_embeddings.weight";
    let diff = tensors[&format!("bert.{name}")].sub(&source[name]).unwrap().abs().unwrap().max_all().unwrap();
    assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
    let (_, stored) = MaskedLm::continue_from(&fixture("tiny-bert-mlm"), 1, &Device::Cpu).unwrap();
    assert!(stored, "tiny-bert-mlm has a head");
}

/// What `longread pretrain --model tests/fixtures/tiny-bert` wrote (fixture by
/// `scripts/make_mlm_fixtures.py`) loads in transformers' BertForMaskedLM with no missing
/// keys and gives these logits.
#[test]
fn a_continued_pretraining_output_gives_the_logits_transformers_computes_from_it() {
    let e = candle_core::safetensors::load(fixture("continued-mlm/expected.safetensors"), &Device::Cpu).unwrap();
    let diff = logits_diff("continued-mlm", &e);
    assert!(diff <= 1e-4, "logits differ by {diff}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("continued-mlm/config.json")).unwrap()).unwrap();
    assert_eq!(
        (config["model_type"].as_str(), config["architectures"][0].as_str()),
        (Some("bert"), Some("BertForMaskedLM"))
    );
}
