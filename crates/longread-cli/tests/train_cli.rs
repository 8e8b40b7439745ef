//! `init` → `train` → `eval`/`predict` end to end on the tiny BERT fixture.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::{json, Value};

const RAIN: [&str; 3] = [
    "Rain is expected over the weekend, with strong winds along the coast.",
    "Rain and strong winds along the coast this weekend.",
    "The weekend rain is expected along the coast.",
];
const PRICES: [&str; 3] = [
    "Prices rose by 3.5% in October; analysts had expected 2.9%.",
    "Analysts expected prices to rise in October.",
    "Prices rose in October, analysts said.",
];
const FILLER: [&str; 3] = [
    "The committee met on Tuesday to discuss the budget for next year.",
    "She said the results were surprising, but the method was sound.",
    "The quick brown fox jumps over the lazy dog while the cat watches.",
];

/// Labelled JSON lines: filler with one telling sentence placed anywhere.
fn write_data(path: &Path, n: usize, offset: usize) {
    let lines: String = (0..n)
        .map(|i| {
            let k = i + offset;
            let (label, telling) =
                if k.is_multiple_of(2) { ("rain", RAIN[k % 3]) } else { ("prices", PRICES[(k / 2) % 3]) };
            let mut parts: Vec<&str> = (0..(k % 3) + 1).map(|j| FILLER[(k + j) % 3]).collect();
            parts.insert(k % (parts.len() + 1), telling);
            json!({"id": format!("d{k}"), "text": parts.join(" "), "label": label}).to_string() + "\n"
        })
        .collect();
    std::fs::write(path, lines).unwrap();
}

#[test]
fn a_trained_head_classifies_held_out_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    write_data(&p("train.jsonl"), 32, 0);
    write_data(&p("test.jsonl"), 12, 100);
    let init = longread(&[
        "init",
        "--encoder",
        fixture("tiny-bert").to_str().unwrap(),
        "--labels",
        "rain,prices",
        "--out",
        p("init").to_str().unwrap(),
        "--chunk-size",
        "16",
        "--stride",
        "4",
        "--attention-hidden-size",
        "8",
        "--seed",
        "1",
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let out = longread(&[
        "train",
        "--model",
        p("init").to_str().unwrap(),
        "--train",
        p("train.jsonl").to_str().unwrap(),
        "--dev-split",
        "0.25",
        "--out",
        p("trained").to_str().unwrap(),
        "--freeze-base",
        "--epochs",
        "30",
        "--head-lr",
        "3e-2",
        "--batch-size",
        "4",
        "--seed",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("epoch 30:") && stderr.contains("best epoch"), "{stderr}");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "metrics.jsonl",
        "training_args.json",
        "trainer_state.json",
    ] {
        assert!(p("trained").join(f).is_file(), "{f} missing");
    }
    assert!(!p("trained").join("checkpoint-last").exists(), "checkpoint removed once the run is complete");
    let metrics: Vec<Value> = json_lines(&std::fs::read(p("trained").join("metrics.jsonl")).unwrap());
    assert!(!metrics.is_empty() && metrics.iter().any(|m| m["best"] == true));
    let args: Value =
        serde_json::from_str(&std::fs::read_to_string(p("trained").join("training_args.json")).unwrap()).unwrap();
    assert_eq!(args["freeze_base"], true);
    // No temporary directories left beside the output.
    let stray: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".longread"))
        .collect();
    assert!(stray.is_empty());

    let eval = longread(&[
        "eval",
        "--model",
        p("trained").to_str().unwrap(),
        "--data",
        p("test.jsonl").to_str().unwrap(),
        "--json",
    ]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert!(report["accuracy"].as_f64().unwrap() >= 0.75, "{report}");
    let before = longread(&[
        "eval",
        "--model",
        p("init").to_str().unwrap(),
        "--data",
        p("test.jsonl").to_str().unwrap(),
        "--json",
    ]);
    let untrained: Value = serde_json::from_slice(&before.stdout).unwrap();
    assert!(untrained["accuracy"].as_f64().unwrap() < report["accuracy"].as_f64().unwrap());

    let predict =
        longread(&["predict", "--model", p("trained").to_str().unwrap(), "--input", p("test.jsonl").to_str().unwrap()]);
    assert!(predict.status.success());
    assert_eq!(json_lines(&predict.stdout).len(), 12);
}

#[test]
fn training_input_problems_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    std::fs::write(
        p("bad.jsonl"),
        "{\"text\": \"Rain.\", \"label\": \"teen\"}\n{\"text\": \"x\", \"label\": \"snow\"}\n",
    )
    .unwrap();
    let model = fixture("hier/bert-mean");
    let m = model.to_str().unwrap();
    let out = longread(&[
        "train",
        "--model",
        m,
        "--train",
        p("bad.jsonl").to_str().unwrap(),
        "--out",
        p("o").to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "bad.jsonl:2: unknown label \"snow\"");
    std::fs::create_dir(p("exists")).unwrap();
    let out = longread(&[
        "train",
        "--model",
        m,
        "--train",
        p("bad.jsonl").to_str().unwrap(),
        "--out",
        p("exists").to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "already exists");
    std::fs::write(p("empty.jsonl"), "").unwrap();
    let out = longread(&[
        "train",
        "--model",
        m,
        "--train",
        p("empty.jsonl").to_str().unwrap(),
        "--out",
        p("o").to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "no input records");
    std::fs::write(
        p("ok.jsonl"),
        "{\"text\": \"Rain.\", \"label\": \"teen\"}\n{\"text\": \"Prices.\", \"label\": 0}\n",
    )
    .unwrap();
    let out = longread(&[
        "train",
        "--model",
        m,
        "--train",
        p("ok.jsonl").to_str().unwrap(),
        "--dev",
        p("ok.jsonl").to_str().unwrap(),
        "--out",
        p("o").to_str().unwrap(),
        "--class-weights",
        "1,2",
    ]);
    assert_clean_failure(&out, "--class-weights needs 3 non-negative numbers");
}

#[test]
fn a_run_stopped_and_resumed_ends_like_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    write_data(&p("train.jsonl"), 12, 0);
    let model = fixture("hier/bert-attention");
    let data = p("train.jsonl");
    let base = |out: &str, extra: &[&str]| {
        let out = p(out);
        let mut a = vec![
            "train",
            "--model",
            model.to_str().unwrap(),
            "--train",
            data.to_str().unwrap(),
            "--dev-split",
            "0.25",
            "--out",
            out.to_str().unwrap(),
            "--epochs",
            "3",
            "--lr",
            "1e-3",
            "--batch-size",
            "3",
            "--seed",
            "5",
        ];
        a.extend_from_slice(extra);
        let o = longread(&a);
        assert!(o.status.success() || o.status.code() == Some(1), "crash");
        o
    };
    // Labels of the fixture model are general/teen/mature: map the data onto them.
    let text = std::fs::read_to_string(p("train.jsonl"))
        .unwrap()
        .replace("\"rain\"", "\"teen\"")
        .replace("\"prices\"", "\"mature\"");
    std::fs::write(p("train.jsonl"), text).unwrap();

    let whole = base("whole", &[]);
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    assert_clean_failure(&base("sliced", &["--resume", "auto"]), "nothing to resume");
    let first = base("sliced", &["--stop-after-epoch", "1"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(p("sliced").join("checkpoint-last/optimizer.safetensors").is_file());
    assert_clean_failure(&base("sliced", &[]), "--resume auto");
    let rest = base("sliced", &["--resume", "auto"]);
    assert!(rest.status.success(), "{}", String::from_utf8_lossy(&rest.stderr));

    let load =
        |d: &str| candle_core::safetensors::load(p(d).join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let (a, b) = (load("whole"), load("sliced"));
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs");
    }
    let lines = |d: &str| std::fs::read_to_string(p(d).join("metrics.jsonl")).unwrap().lines().count();
    assert_eq!((lines("whole"), lines("sliced")), (3, 3));
}
