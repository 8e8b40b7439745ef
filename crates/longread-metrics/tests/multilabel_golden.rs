//! Multi-label metrics against scikit-learn: tests/fixtures/metrics/multilabel.json holds
//! label sets, scores and scikit-learn's values for them (scripts/metric_references.py).

use longread_metrics::multilabel::evaluate_multilabel;
use serde_json::Value;

fn close(a: f64, b: &Value, what: &str) {
    let b = b.as_f64().unwrap_or_else(|| panic!("{what}: {b}"));
    assert!((a - b).abs() < 1e-9, "{what}: longread {a}, scikit-learn {b}");
}

fn matrix(v: &Value) -> Vec<Vec<bool>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|x| x.as_i64() == Some(1)).collect())
        .collect()
}

#[test]
fn multilabel_metrics_match_scikit_learn() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/metrics/multilabel.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 3);
    for (i, case) in cases.iter().enumerate() {
        let truth = matrix(&case["truth"]);
        let predicted = matrix(&case["predicted"]);
        let scores: Vec<Vec<f32>> = case["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
            .collect();
        let labels: Vec<String> = (0..truth[0].len()).map(|l| format!("l{l}")).collect();
        let r = evaluate_multilabel(&labels, &truth, &predicted).unwrap().with_scores(&truth, &scores).unwrap();
        for (name, a) in [("micro", r.micro), ("macro", r.macro_avg), ("weighted", r.weighted), ("samples", r.samples)]
        {
            close(a.precision, &case[name]["precision"], &format!("case {i} {name} precision"));
            close(a.recall, &case[name]["recall"], &format!("case {i} {name} recall"));
            close(a.f1, &case[name]["f1"], &format!("case {i} {name} f1"));
        }
        for (l, m) in r.per_label.iter().enumerate() {
            close(m.precision, &case["per_label"]["precision"][l], &format!("case {i} label {l} precision"));
            close(m.recall, &case["per_label"]["recall"][l], &format!("case {i} label {l} recall"));
            close(m.f1, &case["per_label"]["f1"][l], &format!("case {i} label {l} f1"));
            assert_eq!(m.support as i64, case["per_label"]["support"][l].as_i64().unwrap());
            match (&case["roc_auc_per_label"][l], m.roc_auc) {
                (Value::Null, None) => {}
                (expected, Some(auc)) => close(auc, expected, &format!("case {i} label {l} ROC-AUC")),
                (expected, None) => panic!("case {i} label {l}: no ROC-AUC, scikit-learn {expected}"),
            }
        }
        close(r.subset_accuracy, &case["subset_accuracy"], &format!("case {i} subset accuracy"));
        close(r.hamming_loss, &case["hamming_loss"], &format!("case {i} Hamming loss"));
        close(r.label_ranking_average_precision.unwrap(), &case["lrap"], &format!("case {i} LRAP"));
        close(r.roc_auc_micro.unwrap(), &case["roc_auc_micro"], &format!("case {i} micro ROC-AUC"));
        close(r.roc_auc_macro.unwrap(), &case["roc_auc_macro"], &format!("case {i} macro ROC-AUC"));
        let loss = (r.log_loss.unwrap() - case["log_loss"].as_f64().unwrap()).abs();
        assert!(loss < 1e-6, "case {i} log loss: longread {:?}, scikit-learn {}", r.log_loss, case["log_loss"]);
        close(r.ece.unwrap(), &case["ece"], &format!("case {i} ECE"));
        let skipped = case["roc_auc_per_label"].as_array().unwrap().iter().filter(|v| v.is_null()).count();
        assert_eq!(r.roc_auc_skipped.len(), skipped, "case {i}");
    }
}
