//! Multi-label documents end to end with the bag of words and a hierarchical model on MiniLM:
//! `train --multi-label` on the descriptor examples (a labels column joined by `;`), `predict`
//! giving each document its set of labels, `eval` with micro/macro intervals; data that does
//! not fit is refused naming the line, and labels the model does not know are left out with a
//! warning (or refused).

mod common;

use common::{assert_clean_failure, json_lines, longread, repo, Served};
use serde_json::Value;
use std::path::Path;

fn descriptors(name: &str) -> String {
    repo().join("examples/descriptors").join(name).to_str().unwrap().to_string()
}

fn train(out: &Path, extra: &[&str]) -> std::process::Output {
    let out = out.to_str().unwrap();
    let train = descriptors("train.csv");
    let mut args =
        vec!["train", "--arch", "bow", "--multi-label", "--train", &train, "--c-values", "1,10", "--out", out];
    args.extend_from_slice(extra);
    longread(&args)
}

/// The set of labels in a `labels` cell joined by `;`.
fn label_set(cell: &str) -> Vec<String> {
    let mut labels: Vec<String> = cell.split(';').filter(|l| !l.is_empty()).map(str::to_string).collect();
    labels.sort();
    labels
}

/// `predict` of the multi-label model `model` on the descriptor test set: each document
/// carries exactly the labels at probability 0.5 or more, the probabilities are each label's
/// own (their sum is not 1), and every document shows its `parts` ("chunks" or "sentences").
fn predicts_each_labels_own_sigmoid(model: &str, parts: &str) {
    let predict = longread(&["predict", "--model", model, "--input", &descriptors("test.csv")]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let rows = json_lines(&predict.stdout);
    let mut sums_differ_from_one = 0;
    for row in &rows {
        let labels: Vec<&str> = row["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
        let scores = row["scores"].as_object().unwrap();
        for (name, score) in scores {
            assert_eq!(labels.contains(&name.as_str()), score.as_f64().unwrap() >= 0.5, "{row}");
        }
        let total: f64 = scores.values().map(|v| v.as_f64().unwrap()).sum();
        sums_differ_from_one += usize::from((total - 1.0).abs() > 0.01);
        assert!(!row[parts].as_array().unwrap().is_empty(), "the {parts} that drove it: {row}");
    }
    assert!(sums_differ_from_one > rows.len() / 2, "each label has its own sigmoid, not a share of a softmax");
}

#[test]
fn a_multi_label_bag_of_words_predicts_each_documents_set_of_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    let run = train(&out, &[]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let bow: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bow.json")).unwrap()).unwrap();
    assert_eq!(bow["multi_label"], Value::Bool(true), "{bow}");
    let model = out.to_str().unwrap();
    let inspect = longread(&["inspect", model]);
    assert!(String::from_utf8_lossy(&inspect.stdout).contains("multi-label"));
    let inspect: Value = serde_json::from_slice(&longread(&["inspect", model, "--json"]).stdout).unwrap();
    assert_eq!(inspect["multi_label"], Value::Bool(true), "{inspect}");

    let predict = longread(&["predict", "--model", model, "--input", &descriptors("test.csv")]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let rows = json_lines(&predict.stdout);
    let truth = csv_labels(&descriptors("test.csv"));
    assert_eq!(rows.len(), truth.len());
    let mut exact = 0;
    let mut empty_sets = 0;
    for (row, truth) in rows.iter().zip(&truth) {
        let labels: Vec<String> =
            row["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
        // Each label is predicted on its own: in the set exactly when its sigmoid score is ≥ 0.5.
        for (name, score) in row["scores"].as_object().unwrap() {
            assert_eq!(labels.contains(name), score.as_f64().unwrap() >= 0.5, "{row}");
        }
        let total: f64 = row["scores"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
        empty_sets += usize::from(labels.is_empty());
        exact += usize::from(&label_set(&labels.join(";")) == truth);
        assert!(total > 0.0);
    }
    assert!(empty_sets > 0, "some test transcripts carry no descriptor and are predicted so");
    assert!(exact * 10 >= rows.len() * 9, "{exact} of {} sets exact", rows.len());

    let table = longread(&["predict", "--model", model, "--input", &descriptors("test.csv"), "--format", "table"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap().contains("labels") && text.contains("drugs;violence"), "{text}");

    let page = tmp.path().join("report.html");
    let report =
        longread(&["report", "--model", model, "--input", &descriptors("test.csv"), "--out", page.to_str().unwrap()]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Predicted: none of the labels"), "documents without a descriptor say so");
    assert!(html.contains("<span class=\"label\">drugs</span>, <span class=\"label\">violence</span>"));

    let eval = longread(&["eval", "--model", model, "--data", &descriptors("test.csv"), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    let micro = report["micro"]["f1"].as_f64().unwrap();
    let (low, high) = (report["micro_f1_ci"]["low"].as_f64().unwrap(), report["micro_f1_ci"]["high"].as_f64().unwrap());
    assert!(micro >= 0.9 && low <= micro && micro <= high, "{report}");
    assert_eq!(report["per_label"].as_array().unwrap().len(), 3);
    assert_eq!(report["documents"].as_u64(), Some(truth.len() as u64));
}

#[test]
fn labels_the_model_does_not_know_are_left_out_with_a_warning_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let data = tmp.path().join("gore.csv");
    std::fs::write(&data, "id,text,labels\na,\"he hit him and swore\",violence;gore\nb,\"a quiet walk\",\n").unwrap();
    let (model, data) = (out.to_str().unwrap(), data.to_str().unwrap());

    let eval = longread(&["eval", "--model", model, "--data", data, "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!((report["unknown_labels"]["gore"].as_u64(), report["documents"].as_u64()), (Some(1), Some(2)));
    let warned = String::from_utf8_lossy(&eval.stderr);
    assert!(warned.contains("gore") && warned.contains("--strict-labels"), "{warned}");

    let strict = longread(&["eval", "--model", model, "--data", data, "--strict-labels"]);
    assert_clean_failure(&strict, "gore.csv:2: unknown label \"gore\"");
}

#[test]
fn data_that_does_not_fit_a_multi_label_model_is_refused_naming_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m");

    let single = tmp.path().join("single.jsonl");
    std::fs::write(&single, "{\"text\": \"a b c\", \"labels\": []}\n{\"text\": \"d e\", \"label\": \"violence\"}\n")
        .unwrap();
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--multi-label",
        "--train",
        single.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&run, "single.jsonl:2: \"label\" holds one label, but this model is multi-label");

    let both = tmp.path().join("both.jsonl");
    std::fs::write(&both, "{\"text\": \"d e\", \"label\": \"drugs\", \"labels\": [\"drugs\"]}\n").unwrap();
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--multi-label",
        "--train",
        both.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&run, "both.jsonl:1: both \"label\" and \"labels\"");

    let run = train(&out, &["--labels", "violence,drugs"]);
    assert_clean_failure(&run, "unknown label \"language\"");
    assert!(!out.exists(), "a refused run writes no model");

    let transcripts = repo().join("examples/transcripts/train.csv");
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--multi-label",
        "--train",
        transcripts.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&run, "no \"labels\" column");
}

#[test]
fn joined_labels_trained_without_multi_label_are_noted() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("joined.csv");
    std::fs::write(&data, "text,label\nhe hit him,violence;drugs\nthey hit,violence;drugs\nweed,drugs\npills,drugs\n")
        .unwrap();
    let out = tmp.path().join("m");
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--c-values",
        "1",
        "--min-df",
        "1",
        "--train",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(said.contains("\"violence;drugs\" hold `;`") && said.contains("--multi-label"), "{said}");
}

#[test]
fn flags_that_do_not_fit_multi_label_training_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m");
    let train_csv = descriptors("train.csv");
    let han = longread(&[
        "train",
        "--arch",
        "han",
        "--multi-label",
        "--class-weights",
        "balanced",
        "--train",
        &train_csv,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&han, "weighs each label's positive documents with --pos-weight");
    let weighted = longread(&[
        "train",
        "--arch",
        "bow",
        "--pos-weight",
        "auto",
        "--train",
        &train_csv,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&weighted, "--pos-weight weighs the positive documents");
    let separator = longread(&[
        "train",
        "--arch",
        "bow",
        "--label-separator",
        "|",
        "--train",
        &train_csv,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_failure(&separator, "--label-separator");
}

#[test]
fn a_multi_label_han_trains_on_label_sets_and_predicts_each_documents_set() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let out_s = out.to_str().unwrap();
    let train_csv = descriptors("train.csv");
    let run = longread(&[
        "train",
        "--arch",
        "han",
        "--multi-label",
        "--train",
        &train_csv,
        "--epochs",
        "12",
        "--keep",
        "last",
        "--pos-weight",
        "auto",
        "--metric",
        "micro-f1",
        "--tune-threshold",
        "macro-f1",
        "--out",
        out_s,
    ]);
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{said}");
    assert!(said.contains("binary cross-entropy with positive weights") && said.contains("micro-F1"), "{said}");
    assert!(said.contains("tuning each label's threshold on the dev set's"), "{said}");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["multi_label"], true, "{config}");
    let described = String::from_utf8_lossy(&longread(&["inspect", out_s]).stdout).to_string();
    assert!(described.contains("multi-label      one sigmoid per label"), "{described}");

    assert!(longread(&["threshold", "--model", out_s, "--clear"]).status.success());
    predicts_each_labels_own_sigmoid(out_s, "sentences");
    let eval = longread(&["eval", "--model", out_s, "--data", &descriptors("test.csv"), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(report["per_label"].as_array().unwrap().len(), 3, "{report}");

    // A single-label HAN's config.json says nothing of multi-label (files as before).
    let single = tmp.path().join("single");
    let examples = repo().join("examples/transcripts/train.csv");
    let run = longread(&[
        "train",
        "--arch",
        "han",
        "--train",
        examples.to_str().unwrap(),
        "--epochs",
        "1",
        "--out",
        single.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(!std::fs::read_to_string(single.join("config.json")).unwrap().contains("multi_label"));
}

#[test]
fn the_server_returns_the_set_and_tei_routes_every_labels_own_probability() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let served = Served::start(&["--model", out.to_str().unwrap()]);
    let started = std::time::Instant::now();
    while ureq::get(&format!("{}/health", served.url)).call().is_err() {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the model never loaded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let text = "He punched the guard, swore at him and they smoked weed behind the club.";
    let (status, classified) = served.post("/classify", &serde_json::json!({ "inputs": text }));
    assert_eq!(status, 200, "{classified}");
    let scores = classified["scores"].as_object().unwrap();
    let mut expected: Vec<&str> =
        scores.iter().filter(|(_, p)| p.as_f64().unwrap() >= 0.5).map(|(l, _)| l.as_str()).collect();
    expected.sort();
    let labels: Vec<&str> = classified["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(labels, expected, "{classified}");

    // TEI answers a multi-label model with every label's sigmoid score, highest first.
    let (status, tei) = served.post("/predict", &serde_json::json!({ "inputs": text }));
    assert_eq!(status, 200, "{tei}");
    let tei = tei.as_array().unwrap();
    assert_eq!(tei.len(), scores.len());
    for pair in tei.windows(2) {
        assert!(pair[0]["score"].as_f64() >= pair[1]["score"].as_f64(), "{tei:?}");
    }
    for entry in tei {
        let label = entry["label"].as_str().unwrap();
        assert!((entry["score"].as_f64().unwrap() - scores[label].as_f64().unwrap()).abs() < 1e-6, "{tei:?}");
    }
}

#[test]
fn per_label_thresholds_are_tuned_set_by_hand_applied_everywhere_and_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let (model, test) = (out.to_str().unwrap(), descriptors("test.csv"));

    let tuned = longread(&["threshold", "--model", model, "--data", &test, "--json"]);
    assert!(tuned.status.success(), "{}", String::from_utf8_lossy(&tuned.stderr));
    let tuned: Value = serde_json::from_slice(&tuned.stdout).unwrap();
    let thresholds = tuned["decision"]["thresholds"].as_object().unwrap();
    assert_eq!(thresholds.keys().collect::<Vec<_>>(), ["drugs", "language", "violence"]);
    assert!(thresholds.values().all(|t| t.as_f64().is_some_and(|t| t > 0.0 && t < 1.0)), "{tuned}");
    let f1 = |at: &str| tuned[at]["macro_avg"]["f1"].as_f64().unwrap();
    assert!(f1("at_threshold") >= f1("at_default"), "{tuned}");
    assert_eq!(tuned["written"], Value::Bool(true));

    // A threshold near 0 for one label: every document carries it, in predict and in eval.
    let set = longread(&["threshold", "--model", model, "--set", "language=0.0001"]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let rows = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    assert!(rows.iter().all(|r| r["labels"].as_array().unwrap().iter().any(|l| l == "language")));
    let eval: Value =
        serde_json::from_slice(&longread(&["eval", "--model", model, "--data", &test, "--json"]).stdout).unwrap();
    let language = eval["per_label"].as_array().unwrap().iter().find(|l| l["label"] == "language").unwrap().clone();
    assert_eq!(language["predicted"].as_u64(), Some(rows.len() as u64), "{language}");
    assert!(String::from_utf8_lossy(&longread(&["inspect", model]).stdout).contains("language 0.0001"));

    assert_clean_failure(&longread(&["threshold", "--model", model, "--set", "language=1.5"]), "not between 0 and 1");
    assert_clean_failure(&longread(&["threshold", "--model", model, "--set", "gore=0.3"]), "no label `gore`");
    assert_clean_failure(
        &longread(&["threshold", "--model", model, "--data", &test, "--metric", "accuracy"]),
        "each label's F1",
    );
    let cleared = longread(&["threshold", "--model", model, "--clear"]);
    assert!(cleared.status.success() && !out.join("decision.json").exists());
    let rows_after = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    assert!(rows_after.iter().any(|r| !r["labels"].as_array().unwrap().iter().any(|l| l == "language")));
}

#[test]
fn top_k_and_min_labels_bound_every_documents_set_in_predict_and_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let (model, test) = (out.to_str().unwrap(), descriptors("test.csv"));
    let set_of = |row: &Value| -> Vec<String> {
        row["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
    };
    // The k most probable labels, in label order, from a row's probabilities (ties: the first).
    let most_probable = |row: &Value, k: usize| -> Vec<String> {
        let probabilities = row["scores"].as_object().unwrap();
        let mut ranked: Vec<(&String, f64)> = probabilities.iter().map(|(l, p)| (l, p.as_f64().unwrap())).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<&String> = ranked.iter().take(k).map(|(l, _)| *l).collect();
        probabilities.keys().filter(|l| top.contains(l)).cloned().collect()
    };
    let before = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);

    // Exactly one label a document, whatever the thresholds.
    let exactly = longread(&["threshold", "--model", model, "--top-k", "1", "--min-labels", "1", "--json"]);
    assert!(exactly.status.success(), "{}", String::from_utf8_lossy(&exactly.stderr));
    let kept: Value = serde_json::from_slice(&exactly.stdout).unwrap();
    assert_eq!((kept["top_k"].as_u64(), kept["min_labels"].as_u64()), (Some(1), Some(1)), "{kept}");
    let rows = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    for row in &rows {
        assert_eq!(set_of(row), most_probable(row, 1), "{row}");
    }
    assert!(
        before.iter().any(|r| set_of(r).len() != 1),
        "the test set has documents with no label or several at 0.5, so the rule changes something"
    );
    let eval: Value =
        serde_json::from_slice(&longread(&["eval", "--model", model, "--data", &test, "--json"]).stdout).unwrap();
    let predicted: u64 = eval["per_label"].as_array().unwrap().iter().map(|l| l["predicted"].as_u64().unwrap()).sum();
    assert_eq!(predicted, rows.len() as u64, "eval applies the rule: one label a document");

    // Tuned thresholds with a cap of two: never more than two, and the cap is kept.
    let tuned = longread(&["threshold", "--model", model, "--data", &test, "--top-k", "2", "--json"]);
    assert!(tuned.status.success(), "{}", String::from_utf8_lossy(&tuned.stderr));
    let tuned: Value = serde_json::from_slice(&tuned.stdout).unwrap();
    assert_eq!(tuned["decision"]["top_k"].as_u64(), Some(2), "{tuned}");
    assert!(tuned["decision"].get("min_labels").is_none(), "{tuned}");
    let rows = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    assert!(rows.iter().all(|r| set_of(r).len() <= 2));
    let described = String::from_utf8_lossy(&longread(&["inspect", model]).stdout).to_string();
    assert!(described.contains("at most 2 labels a document"), "{described}");

    assert_clean_failure(
        &longread(&["threshold", "--model", model, "--top-k", "1", "--min-labels", "2"]),
        "--top-k (1) is below --min-labels (2)",
    );
    assert_clean_failure(&longread(&["threshold", "--model", model, "--min-labels", "4"]), "the model has 3 labels");
    assert_clean_failure(&longread(&["threshold", "--model", model, "--top-k", "0"]), "--top-k is 0");
}

/// The descriptor set `name` with every third document's labels taken from the next one, in
/// `dir`: data the bag of words does not separate, so that each label has a temperature to find.
fn noisy_descriptors(dir: &Path, name: &str) -> String {
    let mut reader = csv::Reader::from_path(descriptors(name)).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    let path = dir.join(format!("noisy-{name}"));
    let mut writer = csv::Writer::from_path(&path).unwrap();
    writer.write_record(["id", "text", "labels"]).unwrap();
    for (i, row) in rows.iter().enumerate() {
        let labels = if i % 3 == 0 { &rows[(i + 1) % rows.len()][2] } else { &row[2] };
        writer.write_record([&row[0], &row[1], labels]).unwrap();
    }
    writer.flush().unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_temperature_per_label_calibrates_each_sigmoid_and_keeps_every_label_carried() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let (model, test) = (out.to_str().unwrap(), descriptors("test.csv"));
    let noisy = noisy_descriptors(tmp.path(), "test.csv");
    assert!(longread(&["threshold", "--model", model, "--set", "language=0.3"]).status.success());
    let before = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);

    let fitted = longread(&["calibrate", "--model", model, "--data", &noisy, "--json"]);
    assert!(fitted.status.success(), "{}", String::from_utf8_lossy(&fitted.stderr));
    let fitted: Value = serde_json::from_slice(&fitted.stdout).unwrap();
    let temperatures = fitted["temperatures"].as_object().unwrap();
    assert_eq!(temperatures.keys().collect::<Vec<_>>(), ["drugs", "language", "violence"], "{fitted}");
    for label in fitted["labels"].as_array().unwrap() {
        assert_eq!(label["at_bound"], Value::Bool(false), "{label}");
        assert!(label["log_loss"]["after"].as_f64() < label["log_loss"]["before"].as_f64(), "{label}");
    }
    let restated = fitted["decision"]["thresholds"]["language"].as_f64().unwrap();
    assert!((restated - 0.3).abs() > 1e-3, "the threshold moved with its label's temperature: {fitted}");

    // Every document carries the labels it carried; each probability is σ(logit(p) / T).
    let after = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b["labels"], a["labels"], "{b} / {a}");
        for (label, t) in temperatures {
            let (p, t) = (b["scores"][label].as_f64().unwrap(), t.as_f64().unwrap());
            let want = 1.0 / (1.0 + (-(p / (1.0 - p)).ln() / t).exp());
            assert!((a["scores"][label].as_f64().unwrap() - want).abs() < 1e-5, "{label}: {b} / {a}");
        }
    }
    let described = String::from_utf8_lossy(&longread(&["inspect", model]).stdout).to_string();
    assert!(described.contains("a temperature per label (drugs "), "{described}");

    // Clearing gives the model's own probabilities and the threshold back.
    assert!(longread(&["calibrate", "--model", model, "--clear"]).status.success());
    let cleared = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    assert_eq!(cleared[0]["scores"], before[0]["scores"]);
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    assert!((decision["thresholds"]["language"].as_f64().unwrap() - 0.3).abs() < 1e-5, "{decision}");

    assert_clean_failure(
        &longread(&["calibrate", "--model", model, "--out-of-fold", model]),
        "no out-of-fold predictions",
    );
    std::fs::write(out.join("calibration.json"), r#"{"temperature": 2}"#).unwrap();
    assert_clean_failure(&longread(&["predict", "--model", model, "--input", &test]), "a temperature per label");
}

#[test]
fn an_ensemble_of_multi_label_models_averages_each_labels_probability() {
    let tmp = tempfile::tempdir().unwrap();
    let (words, chars) = (tmp.path().join("words"), tmp.path().join("chars"));
    assert!(train(&words, &[]).status.success());
    assert!(train(&chars, &["--char-ngrams", "2-4"]).status.success());
    let ensemble = tmp.path().join("ensemble");
    let (w, c, e) = (words.to_str().unwrap(), chars.to_str().unwrap(), ensemble.to_str().unwrap());
    let built = longread(&["ensemble", "--model", w, "--model", c, "--out", e]);
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let test = descriptors("test.csv");
    let rows = |model: &str| json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    let (mine, first, second) = (rows(e), rows(w), rows(c));
    assert_eq!(mine.len(), first.len());
    for ((row, a), b) in mine.iter().zip(&first).zip(&second) {
        let mut expected = Vec::new();
        for (label, p) in row["scores"].as_object().unwrap() {
            let mean = (a["scores"][label].as_f64().unwrap() + b["scores"][label].as_f64().unwrap()) / 2.0;
            assert!((p.as_f64().unwrap() - mean).abs() < 1e-6, "{row}");
            if mean >= 0.5 {
                expected.push(Value::String(label.clone()));
            }
        }
        assert_eq!(row["labels"].as_array().unwrap(), &expected, "{row}");
    }
    let eval = longread(&["eval", "--model", e, "--data", &test, "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));

    let single = tmp.path().join("single");
    let transcripts = repo().join("examples/transcripts/train.csv");
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        transcripts.to_str().unwrap(),
        "--out",
        single.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mixed =
        longread(&["ensemble", "--model", w, "--model", single.to_str().unwrap(), "--out", &format!("{e}-mixed")]);
    assert_clean_failure(&mixed, "all multi-label or all single-label");
}

/// σ(logit(p) / t).
fn tempered(p: f64, t: f64) -> f64 {
    1.0 / (1.0 + (-(p / (1.0 - p)).ln() / t).exp())
}

/// `predict` of a multi-label ensemble calibrated label by label: each label's probability is
/// Σ over members of its weight × σ(logit(p) / T) with that label's own weight and temperature
/// from ensemble.json, and the label is carried at 0.5.
fn predicts_each_labels_calibrated_mixture(ensemble: &Path, members: &[&str], test: &str) {
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(ensemble.join("ensemble.json")).unwrap()).unwrap();
    let labels: Vec<&str> = spec["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    let rows = |model: &str| json_lines(&longread(&["predict", "--model", model, "--input", test]).stdout);
    let own: Vec<Vec<Value>> = members.iter().map(|m| rows(m)).collect();
    let combined = rows(ensemble.to_str().unwrap());
    assert_eq!(combined.len(), own[0].len());
    for (d, row) in combined.iter().enumerate() {
        let mut expected = Vec::new();
        for (l, label) in labels.iter().enumerate() {
            let mut p = 0.0;
            for (m, member) in spec["members"].as_array().unwrap().iter().enumerate() {
                let (w, t) =
                    (member["label_weights"][l].as_f64().unwrap(), member["label_temperatures"][l].as_f64().unwrap());
                p += w * tempered(own[m][d]["scores"][label].as_f64().unwrap(), t);
            }
            assert!((row["scores"][label].as_f64().unwrap() - p).abs() < 1e-5, "{label}: {row}");
            if p >= 0.5 {
                expected.push(Value::String(label.to_string()));
            }
        }
        assert_eq!(row["labels"].as_array().unwrap(), &expected, "{row}");
    }
}

#[test]
fn a_multi_label_ensemble_is_calibrated_or_stacked_label_by_label() {
    let tmp = tempfile::tempdir().unwrap();
    let (words, chars) = (tmp.path().join("words"), tmp.path().join("chars"));
    assert!(train(&words, &[]).status.success());
    assert!(train(&chars, &["--char-ngrams", "2-4"]).status.success());
    let (w, c) = (words.to_str().unwrap(), chars.to_str().unwrap());
    let test = descriptors("test.csv");
    let noisy = noisy_descriptors(tmp.path(), "test.csv");

    // Calibrated on held-out documents: every label has each member's temperature and weight.
    let calibrated = tmp.path().join("calibrated");
    let built = longread(&[
        "ensemble",
        "--model",
        w,
        "--model",
        c,
        "--calibrate",
        &noisy,
        "--fit-weights",
        "--json",
        "--out",
        calibrated.to_str().unwrap(),
    ]);
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let spec: Value = serde_json::from_slice(&built.stdout).unwrap();
    let per_label = spec["calibration"]["per_label"].as_array().unwrap();
    let names: Vec<&str> = per_label.iter().map(|l| l["label"].as_str().unwrap()).collect();
    assert_eq!(names, ["drugs", "language", "violence"], "{spec}");
    for label in per_label {
        let losses: Vec<f64> =
            label["out_of_fold_log_loss"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(losses.len(), 3, "{label}");
        let kept = ["equal weights, uncalibrated", "equal weights, calibrated", "fitted weights, calibrated"]
            .iter()
            .position(|k| label["kept"] == *k)
            .unwrap();
        assert!(losses.iter().all(|&l| losses[kept] <= l), "the kept way has the least out-of-fold loss: {label}");
        let weights: f64 = label["weights"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).sum();
        assert!((weights - 1.0).abs() < 1e-9, "{label}");
    }
    let rows: Vec<&str> = spec["calibration"]["out_of_fold"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["combination"].as_str().unwrap())
        .collect();
    assert_eq!(rows.last(), Some(&"each label its best"), "{spec}");
    assert!(spec["calibration"]["out_of_fold"][0]["micro_f1"].is_number(), "{spec}");
    predicts_each_labels_calibrated_mixture(&calibrated, &[w, c], &test);

    // Stacked on folds of the training data: the members are retrained on each.
    let stacked = tmp.path().join("stacked");
    let train_data = descriptors("train.csv");
    let built = longread(&[
        "ensemble",
        "--model",
        w,
        "--model",
        c,
        "--stack",
        &train_data,
        "--folds",
        "3",
        "--fit-weights",
        "--out",
        stacked.to_str().unwrap(),
    ]);
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let printed = String::from_utf8_lossy(&built.stdout);
    assert!(
        printed.contains("each label (temperature × weight") && printed.contains("each label its best"),
        "{printed}"
    );
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(stacked.join("ensemble.json")).unwrap()).unwrap();
    assert_eq!(spec["calibration"]["documents"], 80, "every training document scored out of fold: {spec}");
    predicts_each_labels_calibrated_mixture(&stacked, &[w, c], &test);
    let eval = longread(&["eval", "--model", stacked.to_str().unwrap(), "--data", &test, "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));

    // A hand-edited ensemble.json that does not fit its labels is refused by name.
    let mut broken = spec.clone();
    broken["members"][0]["label_weights"] = serde_json::json!([0.5]);
    std::fs::write(stacked.join("ensemble.json"), broken.to_string()).unwrap();
    assert_clean_failure(
        &longread(&["predict", "--model", stacked.to_str().unwrap(), "--input", &test]),
        "has 1 label_weights for 3 labels",
    );
}

/// The `labels` column of a CSV file, each as a sorted set.
fn csv_labels(path: &str) -> Vec<Vec<String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let column = reader.headers().unwrap().iter().position(|h| h == "labels").unwrap();
    reader.records().map(|row| label_set(&row.unwrap()[column])).collect()
}

#[test]
fn a_multi_label_hierarchical_model_trains_on_label_sets_and_predicts_each_documents_set() {
    let Some(minilm) = common::minilm() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (init_dir, out) = (tmp.path().join("init"), tmp.path().join("trained"));
    let (init_dir_s, out_s) = (init_dir.to_str().unwrap(), out.to_str().unwrap());
    let made = longread(&[
        "init",
        "--encoder",
        minilm.to_str().unwrap(),
        "--labels",
        "drugs,language,violence",
        "--multi-label",
        "--chunk-size",
        "128",
        "--chunk-pooling",
        "mean",
        "--out",
        init_dir_s,
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let config: Value = serde_json::from_str(&std::fs::read_to_string(init_dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["problem_type"], "multi_label_classification", "transformers' key says it");
    assert_eq!(config["longread"]["multi_label"], true);

    let train_csv = descriptors("train.csv");
    let run = longread(&[
        "train",
        "--model",
        init_dir_s,
        "--train",
        &train_csv,
        "--freeze-base",
        "--epochs",
        "15",
        "--keep",
        "last",
        "--pos-weight",
        "auto",
        "--metric",
        "micro-f1",
        "--tune-threshold",
        "macro-f1",
        "--calibrate",
        "--out",
        out_s,
    ]);
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{said}");
    assert!(
        said.contains("calibrating each label's probabilities and tuning its threshold on the dev set's"),
        "{said}"
    );
    let calibration: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(calibration["temperatures"].as_object().unwrap().len(), 3, "{calibration}");
    let tuned_on_dev: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    assert_eq!(tuned_on_dev["thresholds"].as_object().unwrap().len(), 3, "{tuned_on_dev}");
    assert!(tuned_on_dev["chosen_by"].as_str().unwrap().contains("--dev-split"), "{tuned_on_dev}");
    assert!(said.contains("binary cross-entropy with positive weights") && said.contains("micro-F1"), "{said}");
    assert!(said.contains("(micro-F1 "), "the kept epoch is named by the metric that chose it: {said}");
    let first_epoch: Value =
        serde_json::from_str(std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines().next().unwrap())
            .unwrap();
    assert!(first_epoch["dev"]["micro_f1"].is_number(), "{first_epoch}");

    // The checks below are of the model's own probabilities at 0.5.
    assert!(longread(&["threshold", "--model", out_s, "--clear"]).status.success());
    assert!(longread(&["calibrate", "--model", out_s, "--clear"]).status.success());
    predicts_each_labels_own_sigmoid(out_s, "chunks");

    let eval = longread(&["eval", "--model", out_s, "--data", &descriptors("test.csv"), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    // Random scores rank at 0.5; frozen MiniLM chunk vectors carry the descriptors' words (the
    // last of 15 epochs: a dev split of 8 documents picks epochs by chance).
    let auc = report["roc_auc_micro"].as_f64().unwrap();
    assert!(auc > 0.7, "{report}");

    let cache = tmp.path().join("vectors");
    let cache_s = cache.to_str().unwrap();
    let tuned = longread(&["threshold", "--model", out_s, "--data", &train_csv, "--vector-cache", cache_s]);
    assert!(tuned.status.success(), "{}", String::from_utf8_lossy(&tuned.stderr));
    assert!(std::fs::read_dir(&cache).unwrap().next().is_some(), "threshold kept the chunk vectors it computed");
    let page = tmp.path().join("report.html");
    let report = longread(&[
        "report",
        "--model",
        out_s,
        "--input",
        &descriptors("test.csv"),
        "--vector-cache",
        cache_s,
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let decision: Value = serde_json::from_str(&std::fs::read_to_string(out.join("decision.json")).unwrap()).unwrap();
    assert_eq!(decision["thresholds"].as_object().unwrap().len(), 3, "{decision}");

    // Occlusion per label: every label's probability lost without each chunk; the predicted
    // label's is the chunk's `occlusion`, and the report names each carried label's chunk.
    let occluded = longread(&[
        "predict",
        "--model",
        out_s,
        "--input",
        &descriptors("test.csv"),
        "--vector-cache",
        cache_s,
        "--occlusion",
    ]);
    assert!(occluded.status.success(), "{}", String::from_utf8_lossy(&occluded.stderr));
    let mut checked = 0;
    for row in json_lines(&occluded.stdout) {
        for chunk in row["chunks"].as_array().unwrap().iter().filter(|c| c.get("occlusion").is_some()) {
            let each = chunk["label_occlusion"].as_object().unwrap();
            assert_eq!(each.len(), 3, "{chunk}");
            let own = each[row["label"].as_str().unwrap()].as_f64().unwrap();
            assert!((own - chunk["occlusion"].as_f64().unwrap()).abs() < 1e-6, "{chunk}");
            checked += 1;
        }
    }
    assert!(checked > 0, "the test transcripts have several chunks of 128 tokens");
    let report = longread(&[
        "report",
        "--model",
        out_s,
        "--input",
        &descriptors("test.csv"),
        "--vector-cache",
        cache_s,
        "--occlusion",
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("The chunk each label lost most without (occlusion)"), "a carried label lost something");
    // Calibrating reads the same cache.
    let calibrated = longread(&[
        "calibrate",
        "--model",
        out_s,
        "--data",
        &train_csv,
        "--vector-cache",
        cache_s,
        "--dry-run",
        "--json",
    ]);
    assert!(calibrated.status.success(), "{}", String::from_utf8_lossy(&calibrated.stderr));
    let calibrated: Value = serde_json::from_slice(&calibrated.stdout).unwrap();
    assert_eq!(calibrated["temperatures"].as_object().unwrap().len(), 3, "{calibrated}");

    // What a multi-label encoder model does not take is refused by name.
    let again = tmp.path().join("again");
    let again = again.to_str().unwrap();
    let base = ["train", "--model", init_dir_s, "--train", &train_csv, "--freeze-base", "--out", again];
    let refused = |extra: &[&str], needle: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        assert_clean_failure(&longread(&args), needle);
    };
    refused(&["--class-weights", "balanced"], "weighs each label's positive documents with --pos-weight");
    refused(&["--tune-threshold", "accuracy"], "give --tune-threshold macro-f1");
    let weights = tmp.path().join("weights.json");
    std::fs::write(&weights, r#"{"gore": 3}"#).unwrap();
    refused(&["--pos-weight", weights.to_str().unwrap()], "\"gore\" is not a label of the model");
    refused(&["--pos-weight", "often"], "--pos-weight often: not auto or none");
    let single = tmp.path().join("single");
    assert!(longread(&[
        "init",
        "--encoder",
        minilm.to_str().unwrap(),
        "--labels",
        "drugs,language,violence",
        "--chunk-size",
        "128",
        "--out",
        single.to_str().unwrap(),
    ])
    .status
    .success());
    let mixed = longread(&[
        "train",
        "--model",
        single.to_str().unwrap(),
        "--multi-label",
        "--train",
        &train_csv,
        "--out",
        again,
    ]);
    assert_clean_failure(&mixed, "predicts one label per document");
    let both = longread(&[
        "init",
        "--encoder",
        minilm.to_str().unwrap(),
        "--labels",
        "a,b",
        "--multi-label",
        "--ordinal",
        "--out",
        again,
    ]);
    assert_clean_failure(&both, "--multi-label and --ordinal exclude each other");
}

/// Micro-F1 of predicted label sets against true ones (scikit-learn's `f1_score(average="micro")`).
fn micro_f1(pairs: &[(Vec<String>, Vec<String>)]) -> f64 {
    let (mut tp, mut fp, mut fn_) = (0, 0, 0);
    for (truth, predicted) in pairs {
        tp += predicted.iter().filter(|l| truth.contains(l)).count();
        fp += predicted.iter().filter(|l| !truth.contains(l)).count();
        fn_ += truth.iter().filter(|l| !predicted.contains(l)).count();
    }
    2.0 * tp as f64 / (2 * tp + fp + fn_) as f64
}

fn names(value: &Value) -> Vec<String> {
    let mut names: Vec<String> = value.as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

#[test]
fn a_multi_label_cv_run_scores_every_document_out_of_fold_and_tunes_and_calibrates_the_final_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (cv, final_model) = (tmp.path().join("cv"), tmp.path().join("final"));
    let (cv_s, final_s) = (cv.to_str().unwrap(), final_model.to_str().unwrap());
    let train_csv = descriptors("train.csv");
    let han = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--arch",
            "han",
            "--multi-label",
            "--train",
            &train_csv,
            "--epochs",
            "4",
            "--pos-weight",
            "auto",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        longread(&args)
    };
    let run = han(cv_s, &["--cv", "2", "--metric", "micro-f1"]);
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{said}");
    assert!(said.contains("2-fold cross-validation: dev micro-F1 "), "{said}");

    // Every training document once, classified by the fold that held it out; the folds split
    // each label's documents between them (iterative stratification).
    let mut reader = csv::Reader::from_path(&train_csv).unwrap();
    let gold: Vec<Vec<String>> = reader.records().map(|r| label_set(&r.unwrap()[2])).collect();
    let rows = json_lines(&std::fs::read(cv.join("out-of-fold.jsonl")).unwrap());
    assert_eq!(rows.len(), gold.len());
    let mut per_fold = std::collections::BTreeMap::new();
    let mut pairs = Vec::new();
    for (row, truth) in rows.iter().zip(&gold) {
        assert_eq!(&names(&row["labels"]), truth, "{row}");
        let predicted = names(&row["predicted"]);
        for (label, p) in row["scores"].as_object().unwrap() {
            assert_eq!(predicted.contains(label), p.as_f64().unwrap() >= 0.5, "{row}");
        }
        for label in truth {
            *per_fold.entry((label.clone(), row["fold"].as_u64().unwrap())).or_insert(0usize) += 1;
        }
        pairs.push((truth.clone(), predicted));
    }
    for label in ["drugs", "language", "violence"] {
        let (one, two) = (per_fold[&(label.to_string(), 1)], per_fold[&(label.to_string(), 2)]);
        assert!(one.abs_diff(two) <= 2, "{label}: {one} and {two} documents in the two folds");
    }
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(cv.join("cv.json")).unwrap()).unwrap();
    let pooled = &summary["out_of_fold"];
    assert!((pooled["micro_f1"].as_f64().unwrap() - micro_f1(&pairs)).abs() < 1e-9, "{summary}");
    assert!(summary["micro_f1_mean"].as_f64().is_some() && summary["results"][1]["micro_f1"].is_number(), "{summary}");
    assert!(pooled["log_loss"].as_f64().unwrap() > 0.0 && pooled["roc_auc"].is_number(), "{summary}");

    // The final model, trained on every document with the same settings, is tuned and
    // calibrated on those predictions.
    let run = han(final_s, &["--dev-split", "0"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let tuned = longread(&["threshold", "--model", final_s, "--out-of-fold", cv_s, "--json"]);
    let said = String::from_utf8_lossy(&tuned.stderr);
    assert!(tuned.status.success(), "{said}");
    assert!(!said.contains("warning"), "same settings, same data: {said}");
    let tuned: Value = serde_json::from_slice(&tuned.stdout).unwrap();
    assert!(tuned["decision"]["chosen_by"].as_str().unwrap().contains("out-of-fold.jsonl"), "{tuned}");
    assert_eq!(tuned["documents"], gold.len(), "{tuned}");
    let thresholds = tuned["decision"]["thresholds"].as_object().unwrap();
    for (label, t) in thresholds {
        // Each label's F1 over the out-of-fold probabilities is at least that at 0.5.
        let f1 = |at: f64| {
            let each: Vec<(Vec<String>, Vec<String>)> = rows
                .iter()
                .zip(&gold)
                .map(|(row, truth)| {
                    let carried = row["scores"][label].as_f64().unwrap() >= at;
                    let only = |yes: bool| if yes { vec![label.clone()] } else { Vec::new() };
                    (only(truth.contains(label)), only(carried))
                })
                .collect();
            micro_f1(&each)
        };
        assert!(f1(t.as_f64().unwrap()) >= f1(0.5) - 1e-9, "{label}: {tuned}");
    }
    let decision: Value =
        serde_json::from_str(&std::fs::read_to_string(final_model.join("decision.json")).unwrap()).unwrap();
    assert_eq!(&decision["thresholds"], &tuned["decision"]["thresholds"]);

    let calibrated = longread(&["calibrate", "--model", final_s, "--out-of-fold", cv_s, "--json"]);
    assert!(calibrated.status.success(), "{}", String::from_utf8_lossy(&calibrated.stderr));
    let calibrated: Value = serde_json::from_slice(&calibrated.stdout).unwrap();
    assert_eq!(calibrated["temperatures"].as_object().unwrap().len(), 3, "{calibrated}");
    for label in calibrated["labels"].as_array().unwrap() {
        assert!(label["log_loss"]["after"].as_f64() <= label["log_loss"]["before"].as_f64(), "{label}");
    }
    assert!(final_model.join("calibration.json").is_file());

    // A single-label model is not tuned on a multi-label run's predictions.
    let single = tmp.path().join("single");
    let examples = repo().join("examples/transcripts/train.csv");
    let bow = ["train", "--arch", "bow", "--train", examples.to_str().unwrap(), "--c-values", "1"];
    assert!(longread(&[&bow[..], &["--out", single.to_str().unwrap()]].concat()).status.success());
    let wrong = longread(&["threshold", "--model", single.to_str().unwrap(), "--out-of-fold", cv_s]);
    assert_clean_failure(&wrong, "a multi-label run's predictions");
}

#[test]
fn a_multi_label_bag_of_words_calibrates_and_tunes_each_label_on_its_out_of_fold_probabilities() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    // Every third document mislabelled: the words no longer separate the labels perfectly.
    let noisy = noisy_descriptors(tmp.path(), "train.csv");
    let flags = ["--calibrate", "--tune-threshold", "macro-f1", "--c-values", "1"];
    let run = longread(
        &[
            &["train", "--arch", "bow", "--multi-label", "--train", &noisy][..],
            &flags,
            &["--out", out.to_str().unwrap()],
        ]
        .concat(),
    );
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{said}");
    assert!(said.contains("scoring the training documents out of fold at C "), "{said}");
    assert!(said.contains("calibration: a temperature per label") && said.contains("out-of-fold log loss"), "{said}");
    let read =
        |name: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(out.join(name)).unwrap()).unwrap() };
    let (calibration, decision) = (read("calibration.json"), read("decision.json"));
    assert_eq!(calibration["temperatures"].as_object().unwrap().len(), 3, "{calibration}");
    assert!(calibration["chosen_by"].as_str().unwrap().contains("out-of-fold probabilities (5 folds, 80"));
    let thresholds = decision["thresholds"].as_object().unwrap();
    assert_eq!(thresholds.len(), 3, "{decision}");
    assert!(thresholds.values().any(|t| (t.as_f64().unwrap() - 0.5).abs() > 1e-3), "tuned: {decision}");

    // predict carries exactly the labels whose calibrated probability reaches their threshold.
    let model = out.to_str().unwrap();
    let predict = longread(&["predict", "--model", model, "--input", &descriptors("test.csv")]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    for row in json_lines(&predict.stdout) {
        let labels = names(&row["labels"]);
        for (label, t) in thresholds {
            let p = row["scores"][label].as_f64().unwrap();
            assert_eq!(labels.contains(label), p >= t.as_f64().unwrap(), "{label} at {t}: {row}");
        }
    }
    let refused = train(&tmp.path().join("refused"), &["--tune-threshold", "accuracy"]);
    assert_clean_failure(&refused, "give --tune-threshold macro-f1");
}

#[test]
fn a_multi_label_wide_and_deep_model_adds_each_labels_bag_of_words_log_odds_to_its_logit() {
    let Some(minilm) = common::minilm() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("wide");
    let out_s = out.to_str().unwrap();
    // Every third document mislabelled, so that the bag of words does not separate the labels.
    let noisy = noisy_descriptors(tmp.path(), "train.csv");
    let run = longread(&[
        "train",
        "--model",
        minilm.to_str().unwrap(),
        "--multi-label",
        "--train",
        &noisy,
        "--freeze-base",
        "--epochs",
        "3",
        "--keep",
        "last",
        "--pos-weight",
        "auto",
        "--wide-bow",
        "--c-values",
        "1,10",
        "--out",
        out_s,
    ]);
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{said}");
    assert!(said.contains("wide side: multi-label bag of words on 72 documents"), "{said}");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    let scale = config["longread"]["wide"]["scale"].as_f64().unwrap();
    assert!(scale > 0.05 && scale < 20.0 && config["longread"]["multi_label"] == true, "{config}");
    assert!(out.join("wide").is_dir());
    let described = String::from_utf8_lossy(&longread(&["inspect", out_s]).stdout).to_string();
    assert!(described.contains("multi-label      one sigmoid per label"), "{described}");
    assert!(described.contains("each label's log-odds ×"), "{described}");

    // Each label: σ(deep logit + scale · wide logit), carried at 0.5.
    let predict = longread(&["predict", "--model", out_s, "--input", &descriptors("test.csv")]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let logit = |p: f64| (p / (1.0 - p)).ln();
    let mut checked = 0;
    for row in json_lines(&predict.stdout) {
        let members = row["members"].as_array().unwrap();
        assert_eq!(members.iter().map(|m| m["model"].as_str().unwrap()).collect::<Vec<_>>(), ["deep", "wide"]);
        let labels = names(&row["labels"]);
        for (l, label) in ["drugs", "language", "violence"].iter().enumerate() {
            let (deep, wide) =
                (members[0]["scores"][label].as_f64().unwrap(), members[1]["scores"][label].as_f64().unwrap());
            let (z, p) = (row["logits"][l].as_f64().unwrap(), row["scores"][label].as_f64().unwrap());
            assert!((p - 1.0 / (1.0 + (-z).exp())).abs() < 1e-5, "{row}");
            assert_eq!(labels.contains(&label.to_string()), p >= 0.5, "{row}");
            if [deep, wide].iter().all(|&q| q > 1e-4 && q < 1.0 - 1e-4) {
                let want = logit(deep) + scale * logit(wide);
                assert!((z - want).abs() < 1e-3 * want.abs().max(1.0), "{label}: {z} against {want}: {row}");
                checked += 1;
            }
        }
    }
    assert!(checked > 30, "only {checked} labels checked");
    let eval = longread(&["eval", "--model", out_s, "--data", &descriptors("test.csv"), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
}

#[test]
fn a_multi_label_bag_of_words_names_the_terms_of_each_carried_label_and_follows_its_thresholds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("descriptors");
    assert!(train(&out, &[]).status.success());
    let (model, test) = (out.to_str().unwrap(), descriptors("test.csv"));
    let terms_of = |rows: &[Value]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|row| {
                let mut labels: Vec<String> =
                    row["terms"].as_array().unwrap().iter().map(|t| t["label"].as_str().unwrap().to_string()).collect();
                labels.dedup();
                labels
            })
            .collect()
    };
    let carried = |rows: &[Value]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|row| row["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect())
            .collect()
    };
    let before = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    for (terms, labels) in terms_of(&before).iter().zip(carried(&before)) {
        assert!(terms.iter().all(|l| labels.contains(l)), "terms of carried labels only: {terms:?} / {labels:?}");
    }
    assert!(terms_of(&before).iter().any(|t| !t.is_empty()));
    // Every document carries "language" once its threshold is low; its terms follow.
    assert!(longread(&["threshold", "--model", model, "--set", "language=0.0001"]).status.success());
    let after = json_lines(&longread(&["predict", "--model", model, "--input", &test]).stdout);
    let newly = before.iter().zip(&after).filter(|(b, a)| {
        !b["labels"].as_array().unwrap().contains(&Value::from("language"))
            && a["terms"].as_array().unwrap().iter().any(|t| t["label"] == "language")
    });
    assert!(newly.count() > 0, "documents that now carry language show its terms");
    for (terms, labels) in terms_of(&after).iter().zip(carried(&after)) {
        assert!(terms.iter().all(|l| labels.contains(l)), "{terms:?} / {labels:?}");
    }
}
