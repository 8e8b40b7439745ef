//! `longread ensemble` end to end: members of different kinds combined into one directory that
//! `inspect`, `predict`, `report` and `eval` accept; wrong arguments are refused before anything is written.

mod common;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

#[test]
fn an_ensemble_of_a_hierarchical_model_and_a_han_predicts_with_its_members_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    let (hier, han) = (fixture("hier/roberta-attention"), fixture("han"));
    let (hier, han, o) = (hier.to_str().unwrap(), han.to_str().unwrap(), out.to_str().unwrap());
    let made = longread(&[
        "ensemble", "--model", hier, "--model", han, "--weight", "3", "--weight", "1", "--out", o, "--json",
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let spec: Value = serde_json::from_slice(&made.stdout).unwrap();
    assert_eq!(
        (spec["members"][0]["weight"].as_f64(), spec["members"][1]["weight"].as_f64()),
        (Some(0.75), Some(0.25))
    );

    let inspect = longread(&["inspect", "--model", o, "--json"]);
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let summary: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(summary["members"].as_array().unwrap().len(), 2);

    let docs = fixture("hier/documents.jsonl");
    let predict = longread(&["predict", "--model", o, "--input", docs.to_str().unwrap()]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    for line in json_lines(&predict.stdout) {
        let members = line["members"].as_array().unwrap();
        let scores = |v: &Value, label: &str| v["scores"][label].as_f64().unwrap();
        for label in ["general", "teen", "mature"] {
            let mean = 0.75 * scores(&members[0], label) + 0.25 * scores(&members[1], label);
            assert!((scores(&line, label) - mean).abs() < 1e-6, "{line}");
        }
        assert!(line["chunks"].is_array(), "the hierarchical member's evidence: {line}");
    }
    let page = tmp.path().join("report.html");
    let report =
        longread(&["report", "--model", o, "--input", docs.to_str().unwrap(), "--out", page.to_str().unwrap()]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Ensemble of members/1-roberta-attention (weight 0.75)"), "members listed in the report");

    let data = tmp.path().join("labelled.jsonl");
    let labelled: String = std::fs::read_to_string(&docs)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["label"] = "teen".into();
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&data, labelled).unwrap();
    let eval = longread(&["eval", "--model", o, "--model", hier, "--data", data.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&eval.stdout).unwrap()["models"].as_array().unwrap().len(), 2);
}

#[test]
fn wrong_ensemble_arguments_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    let (hier, han) = (fixture("hier/roberta-attention"), fixture("han"));
    let (hier, han, o) = (hier.to_str().unwrap(), han.to_str().unwrap(), out.to_str().unwrap());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--model", hier], "at least two"),
        (vec!["--model", hier, "--model", han, "--weight", "1"], "one per model"),
        (vec!["--model", hier, "--model", han, "--weight", "1", "--weight", "-2"], "weights must be positive"),
        (vec!["--model", hier, "--model", "/nonexistent/model"], "/nonexistent/model"),
    ];
    for (args, needle) in cases {
        let mut full = vec!["ensemble", "--out", o];
        full.extend(args);
        assert_clean_failure(&longread(&full), needle);
        assert!(!out.exists(), "{needle}: nothing written");
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "no temporary directory left");
}
