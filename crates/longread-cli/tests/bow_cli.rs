//! The bag-of-words baseline end to end: `train --arch bow` (C by cross-validation, cv.json),
//! then `predict` (JSON and table), `eval` and a comparison with it; flags that do not apply
//! are refused.

mod common;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

#[test]
fn a_bag_of_words_model_trains_in_seconds_and_serves_predict_and_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bow");
    let (train, test) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        train.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--cv",
        "4",
        "--c-values",
        "0.1,10",
        "--log-format",
        "json",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).pop().unwrap();
    let cv: Value = serde_json::from_str(&std::fs::read_to_string(out.join("cv.json")).unwrap()).unwrap();
    assert_eq!(done["bow"], cv);
    assert_eq!((cv["folds"].as_u64(), cv["cv"].as_array().map(Vec::len)), (Some(4), Some(2)));
    assert!(out.join("training_args.json").is_file() && out.join("vocabulary.txt").is_file());

    let model = out.to_str().unwrap();
    let eval = longread(&["eval", "--model", model, "--data", test.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let accuracy = serde_json::from_slice::<Value>(&eval.stdout).unwrap()["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.9, "topic words separate the synthetic classes: accuracy {accuracy}");

    let predict = longread(&["predict", "--model", model, "--input", test.to_str().unwrap()]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let first = &json_lines(&predict.stdout)[0];
    let p: f64 = first["scores"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert!((p - 1.0).abs() < 1e-5 && first.get("chunks").is_none_or(Value::is_null), "{first}");
    let table = longread(&["predict", "--model", model, "--input", test.to_str().unwrap(), "--format", "table"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap().ends_with("rain") && !text.contains("attended"), "{text}");

    let compare = longread(&["eval", "--model", model, "--model", model, "--data", test.to_str().unwrap(), "--json"]);
    assert!(compare.status.success(), "{}", String::from_utf8_lossy(&compare.stderr));
    let models = serde_json::from_slice::<Value>(&compare.stdout).unwrap()["models"].as_array().unwrap().len();
    assert_eq!(models, 2);
}

#[test]
fn character_ngrams_add_a_block_of_features_that_predict_uses() {
    let tmp = tempfile::tempdir().unwrap();
    let (train, test) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let train_bow = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec!["train", "--arch", "bow", "--train", train.to_str().unwrap(), "--c-values", "10"];
        args.extend_from_slice(&["--out", out.to_str().unwrap(), "--log-format", "json"]);
        args.extend_from_slice(extra);
        let run = longread(&args);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        (out, json_lines(&run.stdout).pop().unwrap()["bow"]["features"].as_u64().unwrap())
    };
    let (_, word_features) = train_bow("words", &[]);
    let (out, features) = train_bow("chars", &["--char-ngrams", "2-4"]);
    assert!(features > word_features, "{features} features with characters, {word_features} without");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bow.json")).unwrap()).unwrap();
    assert_eq!(config["tfidf"]["char_ngrams"], serde_json::json!([2, 4]));
    let vocabulary = std::fs::read_to_string(out.join("vocabulary.txt")).unwrap();
    assert_eq!(vocabulary.lines().count() as u64, features);
    assert!(vocabulary.lines().any(|l| l.starts_with("c: ")), "character n-grams are in the vocabulary");
    let inspect = longread(&["inspect", "--model", out.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&inspect.stdout);
    assert!(table.contains("word 1–2-grams + character 2–4-grams"), "{table}");
    let eval = longread(&["eval", "--model", out.to_str().unwrap(), "--data", test.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let accuracy = serde_json::from_slice::<Value>(&eval.stdout).unwrap()["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.9, "accuracy {accuracy}");
    let out = tmp.path().join("bad");
    let args = ["train", "--arch", "bow", "--train", train.to_str().unwrap(), "--out", out.to_str().unwrap()];
    for bad in ["5-2", "0-3", "2-99", "two-five", "3"] {
        let output = longread(&[&args[..], &["--char-ngrams", bad]].concat());
        if bad.contains('-') && bad.chars().next().unwrap().is_ascii_digit() {
            assert_clean_failure(&output, "--char-ngrams");
        } else {
            // clap's own usage error: exit code 2, the value and the expected form named.
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{stderr}");
            assert!(stderr.contains("--char-ngrams") && stderr.contains("MIN-MAX, e.g. 2-5"), "{stderr}");
        }
        assert!(!out.exists(), "{bad}: nothing written");
    }
}

#[test]
fn flags_of_other_architectures_are_refused_for_bow() {
    let tmp = tempfile::tempdir().unwrap();
    let train = fixture("synthetic/train.jsonl");
    let base = ["train", "--arch", "bow", "--train", train.to_str().unwrap(), "--out"];
    let out = tmp.path().join("x");
    for (flag, value) in [("--epochs", "3"), ("--freeze-base", ""), ("--model", "m"), ("--min-count", "1")] {
        let mut args: Vec<&str> = base.to_vec();
        args.push(out.to_str().unwrap());
        args.push(flag);
        if !value.is_empty() {
            args.push(value);
        }
        let output = longread(&args);
        assert_clean_failure(&output, "does not apply to --arch bow");
        assert!(!out.exists(), "{flag}: nothing written");
    }
    let mut args: Vec<&str> = base.to_vec();
    args.extend_from_slice(&[out.to_str().unwrap(), "--c-values", "0,1"]);
    assert_clean_failure(&longread(&args), "--c-values");
    let hier = longread(&[
        "train",
        "--model",
        fixture("hier/bert-attention").to_str().unwrap(),
        "--train",
        train.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--ngram-max",
        "3",
    ]);
    assert_clean_failure(&hier, "--ngram-max applies only to --arch bow");
}

/// The words of `text` as the bag of words reads them (two or more word characters),
/// lowercased and joined by spaces.
fn joined_words(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_bag_of_words_names_the_terms_that_raised_each_documents_label() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bow");
    let transcripts = common::repo().join("examples/transcripts");
    let (train, test) = (transcripts.join("train.csv"), transcripts.join("test.csv"));
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        train.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--c-values",
        "10",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let predict = longread(&["predict", "--model", out.to_str().unwrap(), "--input", test.to_str().unwrap()]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let texts: Vec<String> =
        csv::Reader::from_path(&test).unwrap().records().map(|r| r.unwrap()[1].to_string()).collect();
    let rows = json_lines(&predict.stdout);
    assert_eq!(rows.len(), texts.len());
    for (row, text) in rows.iter().zip(&texts) {
        let terms = row["terms"].as_array().unwrap();
        assert!(!terms.is_empty() && terms.len() <= 10, "{row}");
        let chars: Vec<char> = text.chars().collect();
        let mut previous = f64::INFINITY;
        for t in terms {
            assert_eq!(t["label"], row["label"], "the terms raise the decided label: {t}");
            let (c, w, v) =
                (t["contribution"].as_f64().unwrap(), t["weight"].as_f64().unwrap(), t["value"].as_f64().unwrap());
            assert!(c > 0.0 && c <= previous && (c - w * v).abs() < 1e-5, "{t}");
            previous = c;
            let term = t["term"].as_str().unwrap();
            let spans = t["spans"].as_array().unwrap();
            assert!(!spans.is_empty(), "a word n-gram of the document occurs in it: {t}");
            for span in spans {
                let (start, end) = (span[0].as_u64().unwrap() as usize, span[1].as_u64().unwrap() as usize);
                assert_eq!(joined_words(&chars[start..end].iter().collect::<String>()), term, "{t}");
            }
        }
    }
    // The report lists each document's terms and shades where they occur.
    let page = tmp.path().join("report.html");
    let report = longread(&[
        "report",
        "--model",
        out.to_str().unwrap(),
        "--input",
        test.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    let first = &rows[0]["terms"][0];
    let listed = format!("<q>{}</q> +{:.3}", first["term"].as_str().unwrap(), first["contribution"].as_f64().unwrap());
    assert!(html.matches("The terms that raised").count() >= rows.len() && html.contains(&listed), "{listed}");
    assert!(html.contains("rgba(60,170,90,0.750)"), "the strongest term of a document is shaded darkest");
}
