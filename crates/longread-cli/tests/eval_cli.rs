//! `longread eval` agrees with `predict`'s own labels, and reports label problems by line.

mod common;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;
use std::path::Path;

/// Gold labels of the fixture documents, chosen so that some predictions are right and some wrong.
const GOLD: [&str; 4] = ["general", "teen", "mature", "general"];

/// `dir/dev.jsonl`: the fixture documents labelled with [`GOLD`].
fn labelled_documents(dir: &std::path::Path) -> std::path::PathBuf {
    let docs = std::fs::read_to_string(fixture("hier/documents.jsonl")).unwrap();
    assert_eq!(docs.lines().count(), GOLD.len());
    let data: String = docs
        .lines()
        .zip(GOLD)
        .map(|(l, g)| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["label"] = g.into();
            v.to_string() + "\n"
        })
        .collect();
    let path = dir.join("dev.jsonl");
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn eval_metrics_agree_with_predict_output() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("hier/bert-mean");
    let path = labelled_documents(tmp.path());

    let predicted = json_lines(
        &longread(&["predict", "--model", model.to_str().unwrap(), "--input", path.to_str().unwrap()]).stdout,
    );
    assert_eq!(predicted.len(), GOLD.len(), "one prediction per document");
    let correct = predicted.iter().zip(GOLD).filter(|(p, g)| p["label"] == *g).count();

    let out = longread(&["eval", "--model", model.to_str().unwrap(), "--data", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!((report["accuracy"].as_f64().unwrap() - correct as f64 / 4.0).abs() < 1e-12);
    let cm: Vec<Vec<u64>> = serde_json::from_value(report["confusion_matrix"].clone()).unwrap();
    assert_eq!(cm.iter().flatten().sum::<u64>(), 4);
    assert_eq!(cm.iter().enumerate().map(|(i, r)| r[i]).sum::<u64>(), correct as u64);
    for key in ["macro_f1", "weighted_f1", "per_class", "labels"] {
        assert!(report.get(key).is_some(), "{key}");
    }
    // The probabilities' metrics from predict's scores, computed here by counting pairs.
    let labels = ["general", "teen", "mature"];
    let p = |doc: &Value, label: &str| doc["scores"][label].as_f64().unwrap() as f32 as f64;
    let log_loss = predicted.iter().zip(GOLD).map(|(d, g)| -p(d, g).ln()).sum::<f64>() / 4.0;
    assert!((report["log_loss"].as_f64().unwrap() - log_loss).abs() < 1e-9, "{report}");
    let auc = |label: &str| {
        let (pos, neg): (Vec<_>, Vec<_>) = predicted.iter().zip(GOLD).partition(|(_, g)| *g == label);
        let wins: f64 = pos
            .iter()
            .flat_map(|(a, _)| neg.iter().map(move |(b, _)| (p(a, label), p(b, label))))
            .map(|(a, b)| {
                if a > b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                }
            })
            .sum();
        wins / (pos.len() * neg.len()) as f64
    };
    for (c, label) in labels.iter().enumerate() {
        assert!((report["per_class"][c]["roc_auc"].as_f64().unwrap() - auc(label)).abs() < 1e-12, "{report}");
    }
    let macro_auc = labels.iter().map(|l| auc(l)).sum::<f64>() / 3.0;
    assert!((report["roc_auc"].as_f64().unwrap() - macro_auc).abs() < 1e-12, "{report}");

    let table = longread(&["eval", "--model", model.to_str().unwrap(), "--data", path.to_str().unwrap()]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("confusion matrix (rows: true, columns: predicted)") && text.contains("mature"), "{text}");
    assert!(text.contains("(one-vs-rest, macro)") && text.contains(&format!("{log_loss:.4}")), "{text}");
    // `--input`, as predict and report call it, is the same flag.
    let aliased = longread(&["eval", "--model", model.to_str().unwrap(), "--input", path.to_str().unwrap()]);
    assert!(aliased.status.success(), "{}", String::from_utf8_lossy(&aliased.stderr));
    assert_eq!(String::from_utf8(aliased.stdout).unwrap(), text);
}

#[test]
fn a_model_that_predicts_one_label_for_every_document_gets_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    // One text three times with three gold labels: whatever the model predicts, it is the same.
    let text = std::fs::read_to_string(fixture("hier/documents.jsonl")).unwrap().lines().next().unwrap().to_string();
    let data: String = ["general", "teen", "mature"]
        .iter()
        .map(|g| {
            let mut v: Value = serde_json::from_str(&text).unwrap();
            v["label"] = (*g).into();
            v.to_string() + "\n"
        })
        .collect();
    let path = tmp.path().join("same.jsonl");
    std::fs::write(&path, data).unwrap();
    let model = fixture("hier/bert-mean");
    let (model, path) = (model.to_str().unwrap(), path.to_str().unwrap());
    for args in [
        vec!["eval", "--model", model, "--data", path, "--json"],
        vec!["eval", "--model", model, "--model", model, "--data", path],
    ] {
        let out = longread(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let notes = stderr.lines().filter(|l| l.starts_with("note: ") && l.contains("for all 3 documents")).count();
        assert_eq!(notes, args.iter().filter(|a| **a == "--model").count(), "one note per model: {stderr}");
    }
    // Documents it tells apart (labelled_documents: four texts) get no such note unless it collapsed.
    let varied = labelled_documents(tmp.path());
    let out = longread(&["eval", "--model", model, "--data", varied.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let predicted_labels =
        (0..3).filter(|&c| report["confusion_matrix"].as_array().unwrap().iter().any(|r| r[c] != 0)).count();
    assert_eq!(String::from_utf8_lossy(&out.stderr).contains("note: "), predicted_labels == 1);
}

#[test]
fn unknown_labels_name_the_line_and_the_model_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("dev.jsonl");
    std::fs::write(&path, "{\"text\": \"fine\", \"label\": \"teen\"}\n{\"text\": \"x\", \"label\": \"adult\"}\n")
        .unwrap();
    let out =
        longread(&["eval", "--model", fixture("hier/bert-mean").to_str().unwrap(), "--data", path.to_str().unwrap()]);
    assert_clean_failure(&out, "dev.jsonl:2: unknown label \"adult\" (the model's labels: general, teen, mature)");
}

#[test]
fn several_models_are_compared_with_bootstrap_intervals_and_paired_p_values() {
    let tmp = tempfile::tempdir().unwrap();
    let path = labelled_documents(tmp.path());
    let (a, b) = (fixture("hier/bert-mean"), fixture("hier/bert-attention"));
    let run = |models: &[&std::path::Path], json: bool| {
        let mut args = vec!["eval".to_string(), "--data".into(), path.display().to_string()];
        for m in models {
            args.extend(["--model".to_string(), m.display().to_string()]);
        }
        if json {
            args.push("--json".into());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = longread(&refs);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let v: Value = serde_json::from_slice(&run(&[&a, &b], true)).unwrap();
    assert_eq!((v["documents"].as_u64(), v["resamples"].as_u64()), (Some(4), Some(1000)));
    let models = v["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    assert!(models[0]["accuracy_p_value"].is_null(), "the first model is the reference");
    for m in models {
        let (acc, ci) = (m["report"]["accuracy"].as_f64().unwrap(), &m["accuracy_ci"]);
        assert!(ci["low"].as_f64().unwrap() <= acc && acc <= ci["high"].as_f64().unwrap(), "{m}");
        assert_eq!(m["recall_ci"].as_array().unwrap().len(), 3);
    }
    let p = models[1]["macro_f1_p_value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p));
    // ROC-AUC with its interval (over the resamples where every label is drawn) and p-value.
    for m in models {
        let (low, high) = (m["roc_auc_ci"]["low"].as_f64().unwrap(), m["roc_auc_ci"]["high"].as_f64().unwrap());
        assert!((0.0..=1.0).contains(&low) && low <= high && high <= 1.0, "{m}");
        assert!(m["report"]["roc_auc"].is_f64(), "{m}");
    }
    assert!(models[0].get("roc_auc_p_value").is_none(), "the first model is the reference");
    assert!((0.0..=1.0).contains(&models[1]["roc_auc_p_value"].as_f64().unwrap()));
    // Log loss with its interval and p-value (lower is better: a calibrated copy is compared
    // with its model on it).
    for m in models {
        let (low, high) = (m["log_loss_ci"]["low"].as_f64().unwrap(), m["log_loss_ci"]["high"].as_f64().unwrap());
        let log_loss = m["report"]["log_loss"].as_f64().unwrap();
        assert!(0.0 < low && low <= log_loss && log_loss <= high, "{m}");
    }
    assert!(models[0].get("log_loss_p_value").is_none(), "the first model is the reference");
    assert!((0.0..=1.0).contains(&models[1]["log_loss_p_value"].as_f64().unwrap()));
    // A model against itself: no difference at all.
    let same: Value = serde_json::from_slice(&run(&[&a, &a], true)).unwrap();
    assert_eq!(same["models"][1]["accuracy_p_value"], 1.0);
    assert_eq!(same["models"][1]["roc_auc_p_value"], 1.0);
    assert_eq!(same["models"][1]["log_loss_p_value"], 1.0);
    let table = String::from_utf8(run(&[&a, &b], false)).unwrap();
    assert!(table.contains("95% bootstrap intervals") && table.contains("recall mature"), "{table}");
    assert!(table.contains("ROC-AUC") && table.contains("p(AUC)"), "{table}");
    assert!(table.contains("log loss") && table.contains("p(LL)"), "{table}");
    assert_eq!(table.lines().filter(|l| l.starts_with(&a.display().to_string())).count(), 1);
}

/// A model whose config.json (one from the Hub, or made before labels were checked) has a
/// label name with an escape sequence: `eval`'s tables, `inspect` and `predict --format table`
/// show it escaped (eval and inspect printed it raw, recolouring the terminal).
#[test]
fn label_names_with_control_characters_are_printed_escaped() {
    let model = common::scratch_copy("hier/bert-attention");
    let config = model.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap().replace("\"mature\"", "\"mat\\u001b[31mure\"");
    std::fs::write(&config, text).unwrap();
    let docs = std::fs::read_to_string(fixture("hier/documents.jsonl")).unwrap();
    let data: String = docs
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["label"] = (i % 3).into();
            v.to_string() + "\n"
        })
        .collect();
    let path = model.path().join("dev.jsonl");
    std::fs::write(&path, data).unwrap();
    let (m, p) = (model.path().to_str().unwrap(), path.to_str().unwrap());
    for args in [
        vec!["eval", "--model", m, "--data", p],
        vec!["eval", "--model", m, "--model", m, "--data", p, "--bootstrap", "100"],
        vec!["inspect", "--model", m],
        vec!["predict", "--model", m, "--input", p, "--format", "table"],
    ] {
        let out = longread(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let shown = String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap();
        assert!(!shown.contains('\u{1b}'), "{args:?} printed the escape raw: {shown}");
        // predict's table cuts a column header to its width.
        let escaped = if args[0] == "predict" { "mat\\u{1" } else { "mat\\u{1b}[31mure" };
        assert!(shown.contains(escaped), "{args:?}: {shown}");
    }
}

/// Models whose labels are the same names in another order (a bag of words sorts them, `init
/// --labels` keeps the order given) are compared label by label: a model's scores do not
/// depend on where it stands in the comparison.
#[test]
fn models_with_the_same_labels_in_another_order_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data.jsonl");
    let mut lines = String::new();
    for i in 0..12 {
        let (label, text) =
            if i % 2 == 0 { ("zeta", "storm rain wind cloud") } else { ("alpha", "sun heat dry desert") };
        lines.push_str(&format!("{{\"text\": \"{text} {i}\", \"label\": \"{label}\"}}\n"));
    }
    std::fs::write(&data, lines).unwrap();
    let bow = tmp.path().join("bow");
    let out = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        data.to_str().unwrap(),
        "--out",
        bow.to_str().unwrap(),
        "--min-df",
        "1",
        "--cv",
        "2",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hier = tmp.path().join("hier");
    let out = longread(&[
        "init",
        "--encoder",
        fixture("tiny-bert").to_str().unwrap(),
        "--labels",
        "zeta,alpha",
        "--chunk-size",
        "32",
        "--out",
        hier.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let compare = |first: &Path, second: &Path| -> serde_json::Value {
        let out = longread(&[
            "eval",
            "--model",
            first.to_str().unwrap(),
            "--model",
            second.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (a, b) = (compare(&bow, &hier), compare(&hier, &bow));
    let scores = |v: &serde_json::Value, name: &Path| -> serde_json::Value {
        v["models"].as_array().unwrap().iter().find(|m| m["model"] == name.to_str().unwrap()).unwrap()["report"].clone()
    };
    for model in [&bow, &hier] {
        let (x, y) = (scores(&a, model), scores(&b, model));
        for key in ["accuracy", "macro_f1", "log_loss"] {
            assert_eq!(x[key], y[key], "{key} of {}", model.display());
        }
    }
    assert_eq!(a["labels"], serde_json::json!(["alpha", "zeta"]));
    assert_eq!(b["labels"], serde_json::json!(["zeta", "alpha"]));
}
