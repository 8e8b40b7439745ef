//! Training mode: gradients reach every parameter, and dropout is real only in training.

mod common;

use candle_core::{DType, Device};
use candle_nn::VarMap;
use common::{expected, fixture, max_abs_diff};
use longread_kernels::seeded::Normals;
use longread_model::{Checkpoint, DropoutRng, LoadOptions, Mode};

#[test]
fn every_parameter_receives_a_gradient_in_training_mode() {
    let normals = Normals::new(11);
    for name in ["tiny-bert", "tiny-roberta"] {
        let exp = expected(name);
        let checkpoint = Checkpoint::open(&fixture(name)).unwrap();
        let vars = VarMap::new();
        let options = LoadOptions { trainable: Some(vars.clone()), ..LoadOptions::default() };
        let encoder = checkpoint.load_encoder(&options, &Device::Cpu).unwrap();
        let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
        let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
        let rng = DropoutRng::new(0);
        let hidden = encoder.forward(&ids, &mask, Mode::Train(&rng)).unwrap();
        // A loss that depends on every output value with varied weights.
        let weights = normals.tensor(0f32, 1.0, hidden.shape(), &Device::Cpu).unwrap();
        let loss = hidden.mul(&weights).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let data = vars.data().lock().unwrap();
        let expected_count =
            checkpoint.store.names().filter(|n| n.contains("embeddings.") || n.contains("encoder.layer.")).count();
        assert_eq!(data.len(), expected_count, "{name}: every encoder tensor is a variable");
        for (var_name, var) in data.iter() {
            let grad = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient for {var_name}"));
            let norm = grad.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(norm > 0.0 && norm.is_finite(), "{name}: gradient of {var_name} has norm {norm}");
        }
    }
}

#[test]
fn dropout_is_off_in_eval_and_on_in_training() {
    let exp = expected("tiny-bert");
    let checkpoint = Checkpoint::open(&fixture("tiny-bert")).unwrap();
    let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let ids = exp["input_ids"].to_dtype(DType::U32).unwrap();
    let mask = exp["attention_mask"].to_dtype(DType::U32).unwrap();
    let eval_a = encoder.forward(&ids, &mask, Mode::Eval).unwrap();
    let eval_b = encoder.forward(&ids, &mask, Mode::Eval).unwrap();
    assert_eq!(max_abs_diff(&eval_a, &eval_b), 0.0);
    let rng = DropoutRng::new(1);
    let train = encoder.forward(&ids, &mask, Mode::Train(&rng)).unwrap();
    assert!(max_abs_diff(&train, &eval_a) > 1e-2, "training mode must apply dropout");
    // Same seed, same masks: training is reproducible.
    let again = encoder.forward(&ids, &mask, Mode::Train(&DropoutRng::new(1))).unwrap();
    assert_eq!(max_abs_diff(&train, &again), 0.0);
}
