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
    // The same weights comma-separated, as --labels and --c-values take lists.
    let comma = tmp.path().join("comma");
    let again = longread(&[
        "ensemble",
        "--model",
        hier,
        "--model",
        han,
        "--weight",
        "3,1",
        "--out",
        comma.to_str().unwrap(),
        "--json",
    ]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap()["members"],
        serde_json::from_slice::<Value>(&made.stdout).unwrap()["members"]
    );
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    assert!(String::from_utf8_lossy(&made.stderr).contains("--calibrate DEV.jsonl"), "uncalibrated: a note");
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
        (vec!["--model", hier, "--model", han, "--weight", "1,-2"], "weights must be positive"),
        (vec!["--model", hier, "--model", han, "--weight", "1,2,3"], "one per model"),
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

/// With equal weights the confident member decides (the bag of words' probabilities are near
/// uniform): members are calibrated on held-out documents first, each
/// tempered by its fitted temperature, and the weights fitted when they beat equal weights out
/// of fold.
#[test]
fn calibrated_ensembles_temper_each_member_before_averaging() {
    let tmp = tempfile::tempdir().unwrap();
    let train = fixture("synthetic/train.jsonl");
    let dev = fixture("synthetic/test.jsonl");
    let bow = tmp.path().join("bow");
    let trained = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        train.to_str().unwrap(),
        "--out",
        bow.to_str().unwrap(),
        "--c-values",
        "1",
    ]);
    assert!(trained.status.success(), "{}", String::from_utf8_lossy(&trained.stderr));
    let seq = fixture("seq/roberta");
    let out = tmp.path().join("ens");
    let (bow, seq, o) = (bow.to_str().unwrap(), seq.to_str().unwrap(), out.to_str().unwrap());
    let made = longread(&[
        "ensemble",
        "--model",
        seq,
        "--model",
        bow,
        "--out",
        o,
        "--calibrate",
        dev.to_str().unwrap(),
        "--fit-weights",
        "--folds",
        "3",
        "--json",
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let spec: Value = serde_json::from_slice(&made.stdout).unwrap();
    let temperatures: Vec<f64> =
        spec["members"].as_array().unwrap().iter().map(|m| m["temperature"].as_f64().unwrap()).collect();
    assert!(temperatures.iter().all(|t| *t > 0.0) && temperatures.iter().any(|t| (t - 1.0).abs() > 1e-3), "{spec}");
    let calibration = &spec["calibration"];
    assert_eq!(calibration["documents"], 12);
    assert_eq!(calibration["out_of_fold"].as_array().unwrap().len(), 3, "{calibration}");
    let weights: Vec<f64> = spec["members"].as_array().unwrap().iter().map(|m| m["weight"].as_f64().unwrap()).collect();
    assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    if calibration["weights_fitted"] == false {
        assert_eq!(weights, vec![0.5, 0.5], "equal weights unless the fitted ones won");
    }

    // Predictions: each member's shown scores are its own tempered, the ensemble's their
    // weighted mean.
    let docs = tmp.path().join("docs.jsonl");
    std::fs::copy(&dev, &docs).unwrap();
    let ensemble = json_lines(&longread(&["predict", "--model", o, "--input", docs.to_str().unwrap()]).stdout);
    let raw = json_lines(&longread(&["predict", "--model", seq, "--input", docs.to_str().unwrap()]).stdout);
    assert_eq!(ensemble.len(), 12);
    for (line, own) in ensemble.iter().zip(&raw) {
        let members = line["members"].as_array().unwrap();
        let p: Vec<f64> = ["prices", "rain"].iter().map(|l| own["scores"][l].as_f64().unwrap()).collect();
        let t = temperatures[0];
        let logs: Vec<f64> = p.iter().map(|x| x.max(1e-12).ln() / t).collect();
        let z: f64 = logs.iter().map(|l| l.exp()).sum();
        for (k, label) in ["prices", "rain"].iter().enumerate() {
            let tempered = logs[k].exp() / z;
            assert!((members[0]["scores"][label].as_f64().unwrap() - tempered).abs() < 1e-5, "{line}");
            let mean: f64 = members.iter().zip(&weights).map(|(m, w)| w * m["scores"][label].as_f64().unwrap()).sum();
            assert!((line["scores"][label].as_f64().unwrap() - mean).abs() < 1e-5, "{line}");
        }
    }

    // Refusals that name the way out.
    let again = tmp.path().join("again");
    let a = again.to_str().unwrap();
    // Flag combinations are usage errors, as clap reports them (exit code 2).
    let usage = |out: std::process::Output, needle: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{stderr}");
    };
    usage(longread(&["ensemble", "--model", seq, "--model", bow, "--out", a, "--fit-weights"]), "--calibrate");
    usage(
        longread(&[
            "ensemble",
            "--model",
            seq,
            "--model",
            bow,
            "--out",
            a,
            "--calibrate",
            dev.to_str().unwrap(),
            "--fit-weights",
            "--weight",
            "1",
            "--weight",
            "2",
        ]),
        "--weight",
    );
    assert_clean_failure(
        &longread(&[
            "ensemble",
            "--model",
            seq,
            "--model",
            bow,
            "--out",
            a,
            "--calibrate",
            dev.to_str().unwrap(),
            "--folds",
            "10",
        ]),
        "too few to calibrate",
    );
    assert!(!again.exists(), "nothing written");
}

/// A stacked ensemble's temperatures and weights are fitted by cross-validation on
/// the training set: every member is retrained on K − 1 folds with its recorded settings and
/// scores the fold it did not see; no held-out set is spent. Members without a recorded run
/// are refused with the way out.
#[test]
fn stacked_ensembles_are_fitted_on_out_of_fold_scores_of_the_training_data() {
    let tmp = tempfile::tempdir().unwrap();
    let train = fixture("synthetic/train.jsonl");
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_owned();
    let run = |args: &[&str]| {
        let out = longread(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let encoder = fixture("tiny-bert");
    run(&[
        "init",
        "--encoder",
        encoder.to_str().unwrap(),
        "--labels",
        "prices,rain",
        "--out",
        &p("init"),
        "--chunk-size",
        "64",
        "--stride",
        "16",
    ]);
    let t = train.to_str().unwrap();
    run(&["train", "--model", &p("init"), "--train", t, "--out", &p("head"), "--freeze-base", "--epochs", "3"]);
    run(&["train", "--arch", "bow", "--train", t, "--out", &p("bow"), "--c-values", "1"]);
    // A HAN with settings of its own: the refits must rebuild them from training_args.json.
    let han =
        ["--arch", "han", "--labels", "prices,rain", "--epochs", "2", "--embedding-dim", "16", "--gru-hidden", "8"];
    run(&[&["train", "--train", t, "--out", &p("han")][..], &han].concat());
    let made = run(&[
        "ensemble",
        "--model",
        &p("head"),
        "--model",
        &p("bow"),
        "--model",
        &p("han"),
        "--out",
        &p("stacked"),
        "--stack",
        t,
        "--folds",
        "3",
        "--fit-weights",
        "--vector-cache",
        &p("vectors"),
        "--json",
    ]);
    let spec: Value = serde_json::from_slice(&made.stdout).unwrap();
    let calibration = &spec["calibration"];
    assert_eq!(calibration["documents"], 32, "every training document scored out of fold: {calibration}");
    assert_eq!(calibration["out_of_fold"].as_array().unwrap().len(), 3);
    let weights: Vec<f64> = spec["members"].as_array().unwrap().iter().map(|m| m["weight"].as_f64().unwrap()).collect();
    assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-9 && weights.iter().all(|w| *w > 0.0), "{spec}");
    let stderr = String::from_utf8_lossy(&made.stderr);
    assert_eq!(stderr.matches("retrained and scored").count(), 9, "3 folds for each of 3 members: {stderr}");
    assert!(std::fs::read_dir(tmp.path().join("vectors")).unwrap().count() > 0, "the head's refits used the cache");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".longread-stack"))
        .collect();
    assert!(left.is_empty(), "the refits' scratch directory is removed: {left:?}");
    let predicted =
        run(&["predict", "--model", &p("stacked"), "--input", fixture("synthetic/test.jsonl").to_str().unwrap()]);
    assert_eq!(json_lines(&predicted.stdout).len(), 12);

    // A member made without `longread train` has no recipe to retrain.
    let seq = fixture("seq/roberta");
    let refused =
        longread(&["ensemble", "--model", seq.to_str().unwrap(), "--model", &p("bow"), "--out", &p("x"), "--stack", t]);
    assert_clean_failure(&refused, "--calibrate DEV.jsonl");
    assert!(!tmp.path().join("x").exists());
}
