//! The HAN against PyTorch (`scripts/make_han_fixtures.py`: nn.GRU on packed sequences, masked
//! softmax attention): logits and both attention maps within 1e-4; padding changes nothing;
//! gradients reach every parameter.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{expected, fixture, max_abs_diff};
use longread_model::han::HanClassifier;
use longread_model::{DropoutRng, Mode};

#[test]
fn forward_and_attention_maps_match_pytorch() {
    let model = HanClassifier::load(&fixture("han"), &Device::Cpu).unwrap();
    let want = expected("han");
    let ids = want["ids"].to_dtype(DType::U32).unwrap();
    let out = model.forward(&ids, Mode::Eval).unwrap();
    for (name, got) in [
        ("logits", &out.logits),
        ("word_attention", &out.word_attention),
        ("sentence_attention", &out.sentence_attention),
    ] {
        let diff = max_abs_diff(got, &want[name]);
        assert!(diff <= 1e-4, "{name}: max abs diff {diff}");
    }
}

/// `ids` `[B, D, W]` placed in a larger all-padding grid `[B, D + extra_d, W + extra_w]`.
fn padded(ids: &Tensor, extra_d: usize, extra_w: usize) -> Tensor {
    let (b, d, w) = ids.dims3().unwrap();
    let big = Tensor::zeros((b, d + extra_d, w + extra_w), DType::U32, &Device::Cpu).unwrap();
    big.slice_assign(&[0..b, 0..d, 0..w], ids).unwrap()
}

#[test]
fn padding_sentences_and_words_changes_nothing() {
    let model = HanClassifier::load(&fixture("han"), &Device::Cpu).unwrap();
    let ids = expected("han")["ids"].to_dtype(DType::U32).unwrap();
    let base = model.forward(&ids, Mode::Eval).unwrap();
    let (b, d, w) = ids.dims3().unwrap();
    let more = model.forward(&padded(&ids, 3, 5), Mode::Eval).unwrap();
    assert!(max_abs_diff(&base.logits, &more.logits) <= 1e-6);
    let words = more.word_attention.narrow(1, 0, d).unwrap().narrow(2, 0, w).unwrap();
    assert!(max_abs_diff(&base.word_attention, &words) <= 1e-6);
    let hops = base.sentence_attention.dim(1).unwrap();
    assert!(max_abs_diff(&base.sentence_attention, &more.sentence_attention.narrow(2, 0, d).unwrap()) <= 1e-6);
    let padding = more.sentence_attention.narrow(2, d, 3).unwrap().abs().unwrap().sum_all().unwrap();
    assert_eq!(padding.to_scalar::<f32>().unwrap(), 0.0, "padding sentences get exactly 0");
    assert_eq!(more.sentence_attention.dims(), &[b, hops, d + 3]);
}

#[test]
fn gradients_reach_every_parameter() {
    let model = HanClassifier::load(&fixture("han"), &Device::Cpu).unwrap();
    let ids = expected("han")["ids"].to_dtype(DType::U32).unwrap();
    let rng = DropoutRng::new(3);
    let out = model.forward(&ids, Mode::Train(&rng)).unwrap();
    let target = Tensor::new(&[0u32, 2, 1], &Device::Cpu).unwrap();
    let loss = candle_nn::loss::cross_entropy(&out.logits, &target).unwrap();
    let grads = loss.backward().unwrap();
    for (name, var) in model.named_vars() {
        let grad = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient"));
        let norm = grad.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(norm > 0.0 && norm.is_finite(), "{name}: gradient norm {norm}");
    }
}
