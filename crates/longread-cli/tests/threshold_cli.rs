//! `longread threshold`: a two-label model's decision threshold tuned on labelled documents,
//! kept in the model directory and applied by predict and eval; `--set`, `--clear`, `--dry-run`.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

/// `longread train --arch bow` on the synthetic fixture into `dir/bow`, with `extra` flags.
fn train_bow(dir: &Path, extra: &[&str]) -> std::process::Output {
    let (data, out) = (fixture("synthetic/train.jsonl"), dir.join("bow"));
    let mut args = vec!["train", "--arch", "bow", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    longread(&args)
}

/// A bag of words trained on the synthetic fixture (any kind takes a threshold; this one
/// trains in a moment).
fn bow(dir: &Path) -> String {
    let run = train_bow(dir, &["-q"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    dir.join("bow").to_str().unwrap().to_owned()
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
    let out = longread(&["threshold", "--model", three.to_str().unwrap(), "--set", "0.3"]);
    assert_clean_failure(&out, "--set 0.3: a threshold is for a model with two labels; this one has 3");
    let model = bow(tmp.path());
    assert_clean_failure(&longread(&["threshold", "--model", &model, "--set", "1.5"]), "not between 0 and 1");
    assert_clean_failure(
        &longread(&["threshold", "--model", &model, "--set", "rain=1"]),
        "label biases are for a model with three or more labels (two take a threshold)",
    );
    // A decision.json that does not fit the model is an error naming the file, not ignored.
    std::fs::write(Path::new(&model).join("decision.json"), r#"{"positive": "prices", "threshold": 0.3}"#).unwrap();
    let out = longread(&["predict", "--model", &model, "--input", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("decision.json") && stderr.contains("second label is \"rain\""), "{stderr}");
}

/// `train --tune-threshold`: small HAN sizes so that a run takes a second.
const SMALL_HAN: [&str; 8] = ["--embedding-dim", "16", "--gru-hidden", "8", "--attention-size", "16", "--seed", "3"];

/// `longread train --arch han --train synthetic/train.jsonl --out OUT` with small sizes and
/// `extra` flags.
fn train_han(out: &Path, extra: &[&str]) -> std::process::Output {
    let data = fixture("synthetic/train.jsonl");
    let mut args = vec!["train", "--arch", "han", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(&SMALL_HAN);
    args.extend_from_slice(extra);
    longread(&args)
}

#[test]
fn train_tune_threshold_keeps_what_the_threshold_command_finds_on_the_dev_set() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let dev = fixture("synthetic/test.jsonl");
    let dev = dev.to_str().unwrap();
    let run = train_han(&out, &["--dev", dev, "--epochs", "2", "--tune-threshold", "accuracy", "--log-format", "json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).into_iter().find(|e| e["event"] == "done").expect("a done event");
    let kept = &done["threshold"];
    assert_eq!((kept["positive"].as_str(), kept["metric"].as_str()), (Some("rain"), Some("accuracy")), "{done}");
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    assert_eq!(decision["threshold"].as_f64(), kept["threshold"].as_f64());
    let chosen_by = decision["chosen_by"].as_str().unwrap();
    assert!(
        chosen_by.starts_with("accuracy on ") && chosen_by.ends_with("synthetic/test.jsonl (12 documents)"),
        "{decision}"
    );

    // The same threshold as `longread threshold` finds on the same documents with the model
    // the run kept (the run classifies its dev set as predict does).
    let model = out.to_str().unwrap();
    let check =
        longread(&["threshold", "--model", model, "--data", dev, "--metric", "accuracy", "--dry-run", "--json"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let check: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(check["threshold"].as_f64(), kept["threshold"].as_f64(), "{check} vs {kept}");
    assert_eq!(check["at_threshold"]["accuracy"], kept["at_threshold"]["accuracy"]);
    assert_eq!(check["at_default"]["accuracy"], kept["at_default"]["accuracy"]);
    assert!(kept["at_threshold"]["accuracy"].as_f64() >= kept["at_default"]["accuracy"].as_f64(), "{kept}");
    // eval applies it: its accuracy on the dev set is the one found at the threshold.
    let eval = longread(&["eval", "--model", model, "--data", dev, "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let eval: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(eval["accuracy"], kept["at_threshold"]["accuracy"]);
}

#[test]
fn train_tune_threshold_waits_for_a_stopped_run_to_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let flags = ["--dev-split", "0.25", "--epochs", "2"];
    let first = train_han(&out, &[&flags[..], &["--stop-after-epoch", "1", "--tune-threshold", "macro-f1"]].concat());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(!out.join("decision.json").exists(), "a stopped run tunes nothing yet");
    // Given only when resuming: it applies to the model the completed run keeps.
    let rest = train_han(&out, &[&flags[..], &["--resume", "auto", "--tune-threshold", "macro-f1"]].concat());
    let stderr = String::from_utf8_lossy(&rest.stderr);
    assert!(rest.status.success(), "{stderr}");
    assert!(stderr.contains("tuning the decision rule on the dev set's 8 documents"), "{stderr}");
    assert!(stderr.contains("kept in") && stderr.contains("decision.json"), "{stderr}");
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    let threshold = decision["threshold"].as_f64().unwrap();
    assert!(threshold > 0.0 && threshold < 1.0, "{decision}");
    let inspect = longread(&["inspect", out.to_str().unwrap(), "--json"]);
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(inspect["decision"]["threshold"].as_f64(), Some(threshold), "{inspect}");
    let chosen_by = inspect["decision"]["chosen_by"].as_str().unwrap();
    assert!(
        chosen_by.starts_with("macro-F1 on the --dev-split 0.25 of ") && chosen_by.ends_with("(8 documents)"),
        "{chosen_by}"
    );
}

#[test]
fn train_tune_threshold_without_a_dev_set_is_refused_before_training_and_three_labels_take_biases() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let train = fixture("synthetic/train.jsonl");
    let refused = |args: &[&str], needle: &str| {
        assert_clean_failure(&longread(args), needle);
        assert!(!out.exists(), "{args:?} left {}", out.display());
    };
    let (data, o) = (train.to_str().unwrap(), out.to_str().unwrap());
    let base = ["train", "--train", data, "--out", o, "--tune-threshold", "macro-f1"];
    refused(&[&base[..], &["--arch", "han", "--dev-split", "0"]].concat(), "--dev-split 0 holds out no dev set");
    refused(&[&base[..], &["--arch", "han", "--cv", "3"]].concat(), "--cv trains one model per fold");

    let three = tmp.path().join("three.jsonl");
    let lines: String = (0..12)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"text": format!("words number {i} here"), "label": (["a", "b", "c"])[i % 3]})
            )
        })
        .collect();
    std::fs::write(&three, lines).unwrap();
    let three = three.to_str().unwrap();
    // Three labels take a bias per label.
    let run = longread(&["train", "--arch", "han", "--train", three, "--out", o, "--tune-threshold", "accuracy"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    let biased: Vec<&str> = decision["biases"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(biased, ["a", "b", "c"], "{decision}");
}

/// (id, probabilities, label) of each document `model` predicts from `input`.
fn scored(model: &str, input: &Path, labels: &[&str]) -> Vec<(String, Vec<f64>, String)> {
    let out = longread(&["predict", "--model", model, "--input", input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json_lines(&out.stdout)
        .iter()
        .map(|p| {
            let scores = labels.iter().map(|l| p["scores"][*l].as_f64().unwrap()).collect();
            (p["id"].as_str().unwrap().to_owned(), scores, p["label"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Three labels: gold labels that the most probable label gets wrong but a bias on `mature`
/// gets right; the tuned biases label every document right, predict and eval apply them, and
/// probabilities do not move.
#[test]
fn three_labels_take_label_biases_that_predict_and_eval_apply() {
    let dir = common::scratch_copy("hier/trained-bert-attention");
    let model = dir.path().to_str().unwrap().to_owned();
    let documents = fixture("hier/documents.jsonl");
    let labels = ["general", "teen", "mature"];
    let before = scored(&model, &documents, &labels);
    // The bias `mature` needs to win document d: the best other ln p minus its own.
    let switch: Vec<f64> = before.iter().map(|(_, p, _)| p[0].max(p[1]).ln() - p[2].ln()).collect();
    let mut positive: Vec<f64> = switch.iter().copied().filter(|&s| s > 0.0).collect();
    positive.sort_by(f64::total_cmp);
    assert!(positive.len() >= 2, "the fixture needs two documents mature does not win: {switch:?}");
    let bias = (positive[0] + positive[1]) / 2.0;
    let gold: Vec<&str> = before
        .iter()
        .zip(&switch)
        .map(|((_, p, _), &s)| {
            if s < bias {
                "mature"
            } else if p[1] > p[0] {
                "teen"
            } else {
                "general"
            }
        })
        .collect();
    assert_ne!(gold, before.iter().map(|(_, _, l)| l.as_str()).collect::<Vec<_>>(), "some label must change");
    let dev = dir.path().join("dev.jsonl");
    let lines: String = std::fs::read_to_string(&documents)
        .unwrap()
        .lines()
        .zip(&gold)
        .map(|(line, label)| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            v["label"] = (*label).into();
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&dev, lines).unwrap();

    let tuned =
        longread(&["threshold", "--model", &model, "--data", dev.to_str().unwrap(), "--metric", "accuracy", "--json"]);
    assert!(tuned.status.success(), "{}", String::from_utf8_lossy(&tuned.stderr));
    let tuned: Value = serde_json::from_slice(&tuned.stdout).unwrap();
    assert!(tuned["at_default"]["accuracy"].as_f64().unwrap() < 1.0, "{tuned}");
    assert_eq!(tuned["at_threshold"]["accuracy"], 1.0, "{tuned}");
    assert_eq!(tuned["biases"]["general"], 0.0, "{tuned}");
    assert!(tuned.get("threshold").is_none(), "{tuned}");

    let after = scored(&model, &documents, &labels);
    for ((id, p0, _), ((_, p1, label), want)) in before.iter().zip(after.iter().zip(&gold)) {
        assert_eq!(p0, p1, "{id}: probabilities unchanged");
        assert_eq!(label, want, "{id}");
    }
    let eval = longread(&["eval", "--model", &model, "--data", dev.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&eval.stdout).unwrap()["accuracy"], 1.0);
    let inspect = longread(&["inspect", &model]);
    let table = String::from_utf8_lossy(&inspect.stdout);
    assert!(table.contains("decision         the label with the highest ln p + bias (general +0, teen "), "{table}");
    // Biases set by hand: the labels not named get 0; unknown labels and non-numbers refused.
    let set = longread(&["threshold", "--model", &model, "--set", "teen=0.4,mature=-0.2", "--json"]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let decision: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("decision.json")).unwrap()).unwrap();
    assert_eq!(decision["biases"], serde_json::json!({"general": 0.0, "teen": 0.4, "mature": -0.2}), "{decision}");
    assert_eq!(serde_json::from_slice::<Value>(&set.stdout).unwrap()["biases"], decision["biases"]);
    for (bad, needle) in [
        ("adult=1", "the model has no label `adult` (its labels: general, teen, mature)"),
        ("teen=x", "the bias of `teen` must be a finite number"),
        ("teen", "give a threshold between 0 and 1, or label biases LABEL=B"),
        ("teen=1,mature", "`mature` is not LABEL=B"),
    ] {
        assert_clean_failure(&longread(&["threshold", "--model", &model, "--set", bad]), needle);
    }
    assert!(longread(&["threshold", "--model", &model, "--clear"]).status.success());
    let cleared: Vec<String> = scored(&model, &documents, &labels).into_iter().map(|(_, _, l)| l).collect();
    assert_eq!(cleared, before.into_iter().map(|(_, _, l)| l).collect::<Vec<_>>());
}

/// A bag of words holds out no dev set: its rule is tuned on the out-of-fold probabilities of
/// the cross-validation that chose C.
#[test]
fn train_tune_threshold_of_a_bag_of_words_uses_out_of_fold_probabilities() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bow");
    let run = train_bow(tmp.path(), &["--tune-threshold", "macro-f1", "--log-format", "json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).into_iter().find(|e| e["event"] == "done").expect("a done event");
    let kept = &done["threshold"];
    let chosen_by = kept["chosen_by"].as_str().unwrap();
    assert_eq!(chosen_by, "macro-F1 on the training documents' out-of-fold probabilities (5 folds, 32 documents)");
    assert_eq!(kept["at_default"]["examples"], 32, "{kept}");
    assert!(kept["at_threshold"]["macro_f1"].as_f64() >= kept["at_default"]["macro_f1"].as_f64(), "{kept}");
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    assert_eq!(decision["threshold"], kept["threshold"]);
    assert_eq!(decision["chosen_by"], kept["chosen_by"]);
}
