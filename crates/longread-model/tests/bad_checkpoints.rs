//! Bad checkpoints and bad inputs give errors that name the problem, never a panic.

mod common;

use candle_core::{Device, Tensor};
use common::{fixture, scratch_copy};
use longread_model::{Checkpoint, LoadOptions, Mode, ModelError};

fn load_err(dir: &std::path::Path) -> String {
    match Checkpoint::open(dir).and_then(|c| c.load_encoder(&LoadOptions::default(), &Device::Cpu).map(|_| ())) {
        Ok(()) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

fn edit_config(dir: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

#[test]
fn malformed_config_json_names_the_file_and_position() {
    let dir = scratch_copy("tiny-bert");
    std::fs::write(dir.path().join("config.json"), "{\"hidden_size\": 32,").unwrap();
    let err = load_err(dir.path());
    assert!(err.contains("config.json") && err.contains("invalid JSON") && err.contains("line 1"), "{err}");
}

#[test]
fn heads_not_dividing_hidden_size_is_a_config_error() {
    let dir = scratch_copy("tiny-bert");
    edit_config(dir.path(), |v| v["num_attention_heads"] = 5.into());
    let err = load_err(dir.path());
    assert!(err.contains("hidden_size 32 is not divisible by num_attention_heads 5"), "{err}");
}

#[test]
fn wrong_tensor_shape_names_the_tensor_and_both_shapes() {
    let dir = scratch_copy("tiny-bert");
    edit_config(dir.path(), |v| v["intermediate_size"] = 48.into());
    let err = load_err(dir.path());
    assert!(
        err.contains("encoder.layer.0.intermediate.dense.weight")
            && err.contains("[48, 32]")
            && err.contains("[64, 32]"),
        "{err}"
    );
}

#[test]
fn truncated_weights_file_is_reported_as_corrupt() {
    let dir = scratch_copy("tiny-bert");
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_err(dir.path());
    assert!(err.contains("model.safetensors") && err.contains("not a valid safetensors file"), "{err}");
}

#[test]
fn missing_tensor_is_named() {
    let dir = scratch_copy("tiny-bert");
    edit_config(dir.path(), |v| v["num_hidden_layers"] = 3.into());
    let err = load_err(dir.path());
    assert!(err.contains("encoder.layer.2.") && err.contains("no tensor"), "{err}");
}

#[test]
fn legacy_layer_norm_gamma_beta_names_load() {
    let dir = scratch_copy("tiny-bert");
    let path = dir.path().join("model.safetensors");
    let tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let renamed: std::collections::HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(k, v)| (k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"), v))
        .collect();
    candle_core::safetensors::save(&renamed, &path).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).is_ok());
}

#[test]
fn out_of_range_inputs_are_errors() {
    let checkpoint = Checkpoint::open(&fixture("tiny-bert")).unwrap();
    let encoder = checkpoint.load_encoder(&LoadOptions::default(), &Device::Cpu).unwrap();
    let vocab = checkpoint.config.vocab_size as u32;
    let ids = Tensor::new(&[[2u32, vocab, 3]], &Device::Cpu).unwrap();
    let err = encoder.forward(&ids, &ids.ones_like().unwrap(), Mode::Eval).unwrap_err();
    assert!(matches!(err, ModelError::InvalidInput(_)));
    assert!(err.to_string().contains(&format!("token id {vocab} is out of range for vocab_size {vocab}")), "{err}");

    let long = Tensor::zeros((1, checkpoint.config.max_position_embeddings + 1), candle_core::DType::U32, &Device::Cpu)
        .unwrap();
    let err = encoder.forward(&long, &long.ones_like().unwrap(), Mode::Eval).unwrap_err().to_string();
    assert!(err.contains("exceeds the model's 64 positions"), "{err}");
}

#[test]
fn nan_bytes_in_the_weights_are_refused_at_load_naming_the_tensor() {
    // Unchecked, NaN bytes written into model.safetensors gave exit 0, label "general" and null
    // scores. Overwrite one value of a layer's weight in place, as a corrupting write would.
    let dir = scratch_copy("tiny-bert");
    let path = dir.path().join("model.safetensors");
    let name = "encoder.layer.1.output.dense.weight";
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let w = &tensors[name];
    let mut values = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[7] = f32::NAN;
    tensors.insert(name.into(), Tensor::from_vec(values, w.shape(), &Device::Cpu).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let err = load_err(dir.path());
    assert!(err.contains(name) && err.contains("NaN or infinite"), "{err}");
    // And an infinity in the embeddings.
    let name = "embeddings.word_embeddings.weight";
    let mut tensors =
        candle_core::safetensors::load(fixture("tiny-bert").join("model.safetensors"), &Device::Cpu).unwrap();
    let w = &tensors[name];
    let mut values = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[0] = f32::INFINITY;
    tensors.insert(name.into(), Tensor::from_vec(values, w.shape(), &Device::Cpu).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    assert!(load_err(dir.path()).contains(name));
}

/// A pickle named model.safetensors is named as a pickle, not only as "header too large".
#[test]
fn a_pytorch_pickle_named_model_safetensors_is_refused_as_pickle() {
    let dir = scratch_copy("tiny-bert");
    // The first bytes of a protocol-2 pickle, then anything.
    let mut bytes = vec![0x80, 0x02, b'}', b'q', 0x00];
    bytes.extend(std::iter::repeat_n(b'x', 4096));
    std::fs::write(dir.path().join("model.safetensors"), &bytes).unwrap();
    let err = load_err(dir.path());
    assert!(err.contains("refusing to load PyTorch pickle weights") && err.contains("model.safetensors"), "{err}");
    // torch.save's zip format too.
    std::fs::write(dir.path().join("model.safetensors"), b"PK\x03\x04archive/data.pkl").unwrap();
    assert!(load_err(dir.path()).contains("refusing to load PyTorch pickle weights"));
}
