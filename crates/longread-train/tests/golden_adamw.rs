//! AdamW against `torch.optim.AdamW` (fixture by `scripts/make_optimizer_fixtures.py`): two
//! groups, weight decay in one, a parameter without a gradient at step 2, four steps.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use longread_train::{AdamW, AdamWConfig, ParamGroup};

fn fixture() -> HashMap<String, Tensor> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/optim/adamw.safetensors");
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn four_steps_match_torch() {
    let t = fixture();
    let vars: HashMap<&str, Var> =
        ["a", "b", "c"].iter().map(|k| (*k, Var::from_tensor(&t[&format!("init.{k}")]).unwrap())).collect();
    let group = |name: &str, lr, wd, keys: &[&str]| ParamGroup {
        name: name.into(),
        lr,
        weight_decay: wd,
        params: keys.iter().map(|k| (k.to_string(), vars[k].clone())).collect(),
    };
    let mut opt = AdamW::new(
        vec![group("decay", 1e-2, 0.1, &["a", "b"]), group("plain", 3e-3, 0.0, &["c"])],
        AdamWConfig::default(),
    )
    .unwrap();
    for step in 0..4 {
        let grads: HashMap<candle_core::TensorId, Tensor> = vars
            .iter()
            .filter_map(|(k, var)| t.get(&format!("grad.{step}.{k}")).map(|g| (var.as_tensor().id(), g.clone())))
            .collect();
        opt.step_with(|var| grads.get(&var.as_tensor().id()).cloned()).unwrap();
        for (k, var) in &vars {
            let diff = max_diff(var.as_tensor(), &t[&format!("after.{step}.{k}")]);
            assert!(diff <= 1e-6, "step {step}, parameter {k}: max abs diff {diff}");
        }
    }
    assert_eq!(opt.state("b").unwrap().step, 3, "no gradient, no step");
    assert_eq!(opt.state("a").unwrap().step, 4);
}

#[test]
fn bad_hyper_parameters_are_refused() {
    assert!(AdamW::new(vec![], AdamWConfig { beta1: 1.0, ..AdamWConfig::default() }).is_err());
    assert!(AdamW::new(vec![], AdamWConfig { eps: 0.0, ..AdamWConfig::default() }).is_err());
}
