//! `longread quickstart`: every step runs and writes what it says; with the defaults (the
//! README's first command) the hierarchical model clearly beats the single-chunk baseline.

mod common;

use common::{assert_clean_failure, longread};
use serde_json::Value;

fn summary(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

fn accuracy(summary: &Value, model: &str) -> f64 {
    let models = summary["models"].as_array().unwrap();
    models.iter().find(|m| m["model"] == model).unwrap()["accuracy"].as_f64().unwrap()
}

/// A quickstart sized for a test: 30 + 6 documents of up to 5 chunks of 32 tokens, 2 MLM steps.
fn small_quickstart(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["quickstart", "--out", out.to_str().unwrap(), "--train-docs", "30", "--test-docs", "6"];
    args.extend(["--pretrain-steps", "2", "--epochs", "2", "--baseline-epochs", "1"]);
    args.extend(["--max-chunks", "5", "--chunk-size", "32"]);
    args.extend_from_slice(extra);
    longread(&args)
}

#[test]
fn a_small_quickstart_runs_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("qs");
    let run = small_quickstart(&out, &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    for step in
        ["$ longread tokenizer train", "$ longread pretrain", "$ longread init --arch sequence", "$ longread report"]
    {
        assert!(stderr.contains(step), "{step} not printed: {stderr}");
    }
    for file in [
        "data/train.jsonl",
        "data/test.jsonl",
        "tokenizer/tokenizer.json",
        "encoder/model.safetensors",
        "hierarchical/model.safetensors",
        "sequence/model.safetensors",
        "report.html",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    assert!(!out.join("hierarchical-init").exists() && !out.join("sequence-init").exists());
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("sequence/config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"][0], "RobertaForSequenceClassification");
    let s = summary(&out);
    assert_eq!(s["test_documents"], 6);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("hierarchical (every chunk)") && stdout.contains("single-chunk baseline"), "{stdout}");
    for model in ["hierarchical", "sequence"] {
        assert!((0.0..=1.0).contains(&accuracy(&s, model)));
    }
    // Same seed, same documents.
    let again = tmp.path().join("again");
    let data = small_quickstart(&again, &["--pretrain-steps", "1", "--quiet"]);
    assert!(data.status.success(), "{}", String::from_utf8_lossy(&data.stderr));
    for file in ["data/train.jsonl", "data/test.jsonl"] {
        assert_eq!(std::fs::read(out.join(file)).unwrap(), std::fs::read(again.join(file)).unwrap(), "{file}");
    }
}

#[test]
fn an_existing_output_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = longread(&["quickstart", "--out", tmp.path().to_str().unwrap()]);
    assert_clean_failure(&out, "already exists");
}

/// Sizes too small to run name the one flag at fault (the message listed every bound).
#[test]
fn sizes_too_small_name_their_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("q");
    let run = |extra: &[&str]| longread(&[&["quickstart", "--out", out.to_str().unwrap()], extra].concat());
    assert_clean_failure(&run(&["--train-docs", "2"]), "--train-docs 2: must be at least 30");
    assert_clean_failure(&run(&["--epochs", "0"]), "--epochs 0: must be at least 1");
    assert!(!out.exists());
}

#[test]
fn the_default_quickstart_shows_the_hierarchical_model_reading_what_the_baseline_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("quickstart");
    let run = longread(&["--quiet", "quickstart", "--out", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = summary(&out);
    let (hierarchical, baseline) = (accuracy(&s, "hierarchical"), accuracy(&s, "sequence"));
    assert!(s["baseline_best_possible_accuracy"].as_f64().unwrap() < 0.5, "the passage is rarely in the first chunk");
    assert!(hierarchical >= 0.9, "hierarchical accuracy {hierarchical}");
    assert!(hierarchical >= baseline + 0.4, "hierarchical {hierarchical} vs baseline {baseline}");
}
