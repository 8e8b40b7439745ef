//! DistilBERT, ELECTRA, MPNet, ModernBERT and DeBERTa-v3 encoders through the binary: `train`
//! (hierarchical and single-chunk, layers frozen and not), `eval`, `predict`, `serve`, `inspect`
//! and `embed`, with the saved directories under the family's own tensor names and transformers'
//! class.

mod common;

use std::path::Path;

use common::{fixture, json_lines, longread, Served};
use serde_json::Value;

/// (fixture, model_type, family as `inspect` names it, an encoder tensor as the family saves it,
/// transformers' single-chunk class)
const FAMILIES: [(&str, &str, &str, &str, &str); 5] = [
    (
        "tiny-distilbert",
        "distilbert",
        "DistilBERT",
        "distilbert.transformer.layer.1.attention.q_lin.weight",
        "DistilBertForSequenceClassification",
    ),
    ("tiny-electra", "electra", "ELECTRA", "electra.embeddings_project.weight", "ElectraForSequenceClassification"),
    ("tiny-mpnet", "mpnet", "MPNet", "mpnet.encoder.relative_attention_bias.weight", "MPNetForSequenceClassification"),
    ("tiny-modernbert", "modernbert", "ModernBERT", "model.final_norm.weight", "ModernBertForSequenceClassification"),
    (
        "tiny-deberta-v3",
        "deberta-v2",
        "DeBERTa-v2",
        "deberta.encoder.layer.1.attention.self.query_proj.weight",
        "DebertaV2ForSequenceClassification",
    ),
];

fn run(args: &[&str]) -> Vec<u8> {
    let out = longread(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

#[test]
fn each_family_trains_predicts_evaluates_and_is_inspected() {
    let tmp = tempfile::tempdir().unwrap();
    let (train_data, test_data) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let (train_data, test_data) = (train_data.to_str().unwrap(), test_data.to_str().unwrap());
    for (name, model_type, family, saved_tensor, sequence_class) in FAMILIES {
        let encoder = fixture(name);
        let encoder = encoder.to_str().unwrap();
        // Hierarchical, the top layer fine-tuned above a frozen bottom layer.
        let hier = tmp.path().join(format!("{name}-hier"));
        let hier_s = hier.to_str().unwrap();
        let common = ["--quiet", "--epochs", "2", "--dev-split", "0.25", "--seed", "3"];
        let init = tmp.path().join(format!("{name}-init"));
        let init_s = init.to_str().unwrap();
        let labels = "prices,rain";
        run(&[
            "init",
            "--encoder",
            encoder,
            "--labels",
            labels,
            "--out",
            init_s,
            "--chunk-size",
            "16",
            "--stride",
            "4",
        ]);
        let hier_args = ["train", "--model", init_s, "--train", train_data, "--out", hier_s, "--freeze-bottom", "1"];
        run(&[&hier_args[..], &common[..]].concat());
        let cfg = config(&hier);
        assert_eq!(cfg["model_type"], model_type, "{name}");
        let tensors =
            candle_core::safetensors::load(hier.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
        assert!(tensors.contains_key(saved_tensor), "{name}: {saved_tensor} saved under the family's name");
        let eval: Value =
            serde_json::from_slice(&run(&["eval", "--model", hier_s, "--data", test_data, "--json"])).unwrap();
        assert!(eval["accuracy"].as_f64().is_some(), "{name}: {eval}");
        let predictions = json_lines(&run(&["predict", "--model", hier_s, "--input", test_data]));
        assert!(!predictions.is_empty() && predictions.iter().all(|p| p["label"].is_string()), "{name}");
        // The server answers what predict wrote.
        let first: Value =
            serde_json::from_str(std::fs::read_to_string(test_data).unwrap().lines().next().unwrap()).unwrap();
        let served = Served::start(&["--model", hier_s]);
        let (status, got) = served.post("/classify", &serde_json::json!({ "inputs": first["text"] }));
        assert_eq!(status, 200, "{name}: {got}");
        assert_eq!(got["label"], predictions[0]["label"], "{name}");
        let logits =
            |v: &Value| -> Vec<f64> { v["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
        let diff = logits(&got).iter().zip(logits(&predictions[0])).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(diff <= 1e-5, "{name}: served logits differ by {diff}");
        drop(served);
        let inspect = String::from_utf8_lossy(&run(&["inspect", "--model", hier_s])).into_owned();
        assert!(inspect.contains(&format!("family           {family} (model_type {model_type}")), "{inspect}");
        let json: Value = serde_json::from_slice(&run(&["inspect", "--model", hier_s, "--json"])).unwrap();
        assert_eq!(json["family"], family);

        // The single-chunk baseline, every layer trained.
        let seq = tmp.path().join(format!("{name}-seq"));
        let seq_s = seq.to_str().unwrap();
        let seq_args = ["train", "--arch", "sequence", "--model", encoder, "--train", train_data, "--out", seq_s];
        run(&[&seq_args[..], &["--train-embeddings", "--layer-lr-decay", "0.9"], &common[..]].concat());
        assert_eq!(config(&seq)["architectures"][0], sequence_class, "{name}");
        let predictions = json_lines(&run(&["predict", "--model", seq_s, "--input", test_data]));
        assert!(predictions.iter().all(|p| p["chunks"].as_array().unwrap().len() == 1), "{name}");

        // Sentence embeddings of the plain encoder.
        let lines = json_lines(&run(&["embed", "--model", encoder, "--input", test_data, "--normalize"]));
        let norm: f32 = serde_json::from_value::<Vec<f32>>(lines[0]["embedding"].clone())
            .unwrap()
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{name}: norm {norm}");
    }
}
