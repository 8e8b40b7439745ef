//! The single-chunk baseline end to end: `train --arch sequence` on a plain encoder, then
//! `eval`, `predict`, `inspect` and `init --arch sequence`; mismatched `--arch` is refused.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

/// `longread train --arch ARCH --model MODEL --train DATA --out OUT EXTRA...`.
fn train(arch: &str, model: &Path, data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["train", "--arch", arch, "--model", model.to_str().unwrap()];
    args.extend(["--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    longread(&args)
}

fn config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

#[test]
fn a_sequence_baseline_trains_on_a_plain_encoder_and_predicts_from_the_first_chunk() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("seq");
    let (train_data, test_data) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let extra =
        ["--quiet", "--freeze-base", "--epochs", "20", "--head-lr", "3e-2", "--dev-split", "0.25", "--seed", "3"];
    let run = train("sequence", &fixture("tiny-bert"), &train_data, &out, &extra);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let cfg = config(&out);
    assert_eq!(cfg["architectures"][0], "BertForSequenceClassification");
    assert_eq!(cfg["longread"]["architecture"], "sequence");
    assert_eq!(cfg["longread"]["chunk_size"], 64, "512 clamped to the encoder's 64 positions");
    assert_eq!(cfg["id2label"]["0"], "prices", "labels from the data, sorted");

    let eval = longread(&["eval", "--model", out.to_str().unwrap(), "--data", test_data.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let accuracy = serde_json::from_slice::<Value>(&eval.stdout).unwrap()["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.75, "the baseline learns the synthetic task: accuracy {accuracy}");

    let predict = longread(&["predict", "--model", out.to_str().unwrap(), "--input", test_data.to_str().unwrap()]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    for line in json_lines(&predict.stdout) {
        let chunks = line["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), 1, "one chunk per document");
        assert_eq!(chunks[0]["start"], 0);
    }
    let inspect = longread(&["inspect", "--model", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("BertForSequenceClassification") && !text.contains("pooler unused"), "{text}");

    // A model of the other architecture is refused, naming both.
    let again = train("hierarchical", &out, &train_data, &tmp.path().join("again"), &["--epochs", "1"]);
    assert_clean_failure(&again, "--arch hierarchical does not match");
    assert!(!tmp.path().join("again").exists());
}

#[test]
fn init_builds_a_roberta_baseline_in_transformers_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("seq");
    let init = longread(&[
        "init",
        "--arch",
        "sequence",
        "--encoder",
        fixture("tiny-roberta").to_str().unwrap(),
        "--labels",
        "a,b,c",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    assert!(String::from_utf8_lossy(&init.stderr).contains("first 64 tokens"));
    let cfg = config(&out);
    assert_eq!(cfg["architectures"][0], "RobertaForSequenceClassification");
    let tensors = candle_core::safetensors::load(out.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    assert_eq!(tensors["classifier.dense.weight"].dims(), &[32, 32]);
    assert_eq!(tensors["classifier.out_proj.weight"].dims(), &[3, 32]);
    assert!(!tensors.keys().any(|k| k.starts_with("norm.") || k.starts_with("pooler.")));
}

#[test]
fn a_plain_encoder_needs_two_labels_in_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("one.jsonl");
    std::fs::write(&data, "{\"text\": \"a b c\", \"label\": \"x\"}\n{\"text\": \"d e\", \"label\": \"x\"}\n").unwrap();
    let out = train("sequence", &fixture("tiny-bert"), &data, &tmp.path().join("o"), &["--epochs", "1"]);
    assert_clean_failure(&out, "fewer than 2 distinct labels");
}
