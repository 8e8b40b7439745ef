//! `longread threshold`: a two-label model's decision threshold tuned on labelled documents,
//! kept in the model directory and applied by predict and eval; `--set`, `--clear`, `--dry-run`.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

/// A bag of words trained on the synthetic fixture (any kind takes a threshold; this one
/// trains in a moment).
fn bow(dir: &Path) -> String {
    let out = dir.join("bow");
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        fixture("synthetic/train.jsonl").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    out.to_str().unwrap().to_owned()
}

/// (id, P(rain), label) of each test document.
fn predictions(model: &str) -> Vec<(String, f64, String)> {
    let out = longread(&["predict", "--model", model, "--input", fixture("synthetic/test.jsonl").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json_lines(&out.stdout)
        .iter()
        .map(|p| {
            let id = p["id"].as_str().unwrap().to_owned();
            (id, p["scores"]["rain"].as_f64().unwrap(), p["label"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn a_tuned_threshold_is_kept_in_the_model_and_applied_by_predict_and_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let model = bow(tmp.path());
    let before = predictions(&model);
    // Gold labels that only a threshold above 0.5 separates: `rain` for the documents with the
    // highest P(rain), from a gap in the scores above another document's P(rain) > 0.5.
    let mut sorted: Vec<f64> = before.iter().map(|(_, p, _)| *p).collect();
    sorted.sort_by(f64::total_cmp);
    let k = (2..sorted.len()).rev().find(|&k| sorted[k - 1] < sorted[k] && sorted[k - 1] > 0.5);
    let k = k.unwrap_or_else(|| panic!("the fixture's scores have no such gap: {sorted:?}"));
    let (below, cut) = (sorted[k - 1], sorted[k]);
    let dev = tmp.path().join("dev.jsonl");
    let texts: Vec<Value> = std::fs::read_to_string(fixture("synthetic/test.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: String = texts
        .iter()
        .zip(&before)
        .map(|(t, (_, p, _))| {
            let mut t = t.clone();
            t["label"] = if *p >= cut { "rain" } else { "prices" }.into();
            t.to_string() + "\n"
        })
        .collect();
    std::fs::write(&dev, lines).unwrap();
    let dev = dev.to_str().unwrap();

    let eval = |model: &str| -> Value {
        let out = longread(&["eval", "--model", model, "--data", dev, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let accuracy_before = eval(&model)["accuracy"].as_f64().unwrap();
    assert!(accuracy_before < 1.0, "at 0.5 some documents are mislabelled");

    // --dry-run finds it and writes nothing.
    let dry = longread(&["threshold", "--model", &model, "--data", dev, "--dry-run", "--json"]);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    let found: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(found["written"], false);
    assert!(!Path::new(&model).join("decision.json").exists());
    let threshold = found["threshold"].as_f64().unwrap();
    assert!(threshold < cut && threshold > below, "{found}");
    assert_eq!(found["at_threshold"]["accuracy"], 1.0, "{found}");
    assert_eq!(found["at_default"]["accuracy"].as_f64(), Some(accuracy_before), "{found}");

    let run = longread(&["threshold", "--model", &model, "--data", dev]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let table = String::from_utf8(run.stdout).unwrap();
    assert!(table.contains("maximizing macro-F1") && table.contains("tuned threshold"), "{table}");
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&model).join("decision.json")).unwrap()).unwrap();
    assert_eq!(kept["positive"], "rain", "{kept}");
    assert_eq!(kept["threshold"].as_f64().unwrap() as f32, threshold as f32, "{kept}");

    // predict labels by it (probabilities unchanged), eval scores those labels.
    for ((id, p, label), (_, p_before, _)) in predictions(&model).iter().zip(&before) {
        assert_eq!(p, p_before, "{id}: probabilities do not move");
        let want = if *p as f32 >= threshold as f32 { "rain" } else { "prices" };
        assert_eq!(label, want, "{id}: P(rain) {p}, threshold {threshold}");
    }
    assert_eq!(eval(&model)["accuracy"], 1.0);

    // --set keeps a given one; --clear goes back to the most probable label.
    let set = longread(&["threshold", "--model", &model, "--set", "0.999"]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    assert!(predictions(&model).iter().all(|(_, _, l)| l == "prices"));
    let clear = longread(&["threshold", "--model", &model, "--clear"]);
    assert!(clear.status.success(), "{}", String::from_utf8_lossy(&clear.stderr));
    let labels: Vec<String> = predictions(&model).into_iter().map(|(_, _, l)| l).collect();
    assert_eq!(labels, before.into_iter().map(|(_, _, l)| l).collect::<Vec<_>>());
    assert!(!Path::new(&model).join("decision.json").exists());
}

#[test]
fn thresholds_that_cannot_apply_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let three = fixture("hier/trained-bert-attention");
    let data = fixture("synthetic/test.jsonl");
    let out = longread(&["threshold", "--model", three.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert_clean_failure(&out, "a decision threshold is for a model with two labels");
    let model = bow(tmp.path());
    assert_clean_failure(&longread(&["threshold", "--model", &model, "--set", "1.5"]), "not between 0 and 1");
    // A decision.json that does not fit the model is an error naming the file, not ignored.
    std::fs::write(Path::new(&model).join("decision.json"), r#"{"positive": "prices", "threshold": 0.3}"#).unwrap();
    let out = longread(&["predict", "--model", &model, "--input", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("decision.json") && stderr.contains("second label is \"rain\""), "{stderr}");
}
