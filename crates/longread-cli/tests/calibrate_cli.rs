//! `longread calibrate`: a temperature fitted on labelled documents, kept in the model
//! directory and applied by predict and eval without changing a label; a decision rule the
//! model keeps restated; `--dry-run`, `--clear`, refitting, a broken calibration.json.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

/// A bag of words trained on the synthetic fixture, in `dir/bow`.
fn bow(dir: &Path) -> String {
    let (data, out) = (fixture("synthetic/train.jsonl"), dir.join("bow"));
    let run = longread(&["train", "--arch", "bow", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    out.to_str().unwrap().to_owned()
}

/// (label, [P(prices), P(rain)]) of each test document.
fn predictions(model: &str) -> Vec<(String, [f64; 2])> {
    let out = longread(&["predict", "--model", model, "--input", fixture("synthetic/test.jsonl").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json_lines(&out.stdout)
        .iter()
        .map(|p| {
            let score = |label: &str| p["scores"][label].as_f64().unwrap();
            (p["label"].as_str().unwrap().to_owned(), [score("prices"), score("rain")])
        })
        .collect()
}

/// The test documents with every third gold label swapped.
fn noisy_dev(dir: &Path) -> String {
    let lines: String = std::fs::read_to_string(fixture("synthetic/test.jsonl"))
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            if i % 3 == 0 {
                row["label"] = if row["label"] == "rain" { "prices" } else { "rain" }.into();
            }
            row.to_string() + "\n"
        })
        .collect();
    let path = dir.join("dev.jsonl");
    std::fs::write(&path, lines).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `p` tempered by `t`: softmax(ln p / t).
fn tempered(p: [f64; 2], t: f64) -> [f64; 2] {
    let e = p.map(|x| (x.ln() / t).exp());
    [e[0] / (e[0] + e[1]), e[1] / (e[0] + e[1])]
}

fn calibrate(args: &[&str]) -> Value {
    let mut all = vec!["calibrate"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = longread(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_fitted_temperature_is_kept_and_applied_by_predict_and_eval_without_changing_a_label() {
    let tmp = tempfile::tempdir().unwrap();
    let model = bow(tmp.path());
    // The bag of words is timid (probabilities near 0.5) and right on two documents in
    // three: the temperature that fits is below 1.
    let dev = noisy_dev(tmp.path());
    let before = predictions(&model);

    let dry = calibrate(&["--model", &model, "--data", &dev, "--dry-run"]);
    assert_eq!(dry["written"], false);
    assert!(!Path::new(&model).join("calibration.json").exists());
    let t = dry["temperature"].as_f64().unwrap();
    assert!(t < 0.8 && dry["at_bound"] == false, "a timid model is sharpened: {dry}");
    let (ll, ece) = (&dry["log_loss"], &dry["ece"]);
    assert!(ll["after"].as_f64() < ll["before"].as_f64(), "{dry}");
    // The reliability diagrams hold every document, and the ECE is theirs.
    for (when, bins) in [("before", &dry["reliability"]["before"]), ("after", &dry["reliability"]["after"])] {
        let bins = bins.as_array().unwrap();
        let count = |b: &Value| b["examples"].as_u64().unwrap() as f64;
        assert_eq!(bins.iter().map(count).sum::<f64>(), 12.0, "{when}: {dry}");
        let from_bins: f64 = bins
            .iter()
            .map(|b| count(b) / 12.0 * (b["accuracy"].as_f64().unwrap() - b["confidence"].as_f64().unwrap()).abs())
            .sum();
        assert!((from_bins - ece[when].as_f64().unwrap()).abs() < 1e-9, "{when}: {dry}");
    }
    let text = longread(&["calibrate", "--model", &model, "--data", &dev, "--dry-run"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("reliability: documents by their top probability"), "{text}");
    let rows = text.lines().filter(|l| l.starts_with("(0.") || l.starts_with("(1.")).count();
    let bins = |when: &str| dry["reliability"][when].as_array().unwrap().len();
    assert!(rows >= bins("before").max(bins("after")), "a row per bin: {text}");

    let kept = calibrate(&["--model", &model, "--data", &dev]);
    assert_eq!((kept["written"].as_bool(), kept["temperature"].as_f64()), (Some(true), Some(t)));
    for ((label, p), (now_label, now)) in before.iter().zip(predictions(&model)) {
        assert_eq!(label, &now_label, "labels do not change");
        let want = tempered(*p, t);
        assert!((now[0] - want[0]).abs() < 1e-6 && (now[1] - want[1]).abs() < 1e-6, "{now:?} vs {want:?}");
    }
    // eval scores the calibrated probabilities: the log loss and ECE the fit reported.
    let out = longread(&["eval", "--model", &model, "--data", &dev, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!((report["log_loss"].as_f64().unwrap() - ll["after"].as_f64().unwrap()).abs() < 1e-5, "{report}");
    assert!((report["ece"].as_f64().unwrap() - ece["after"].as_f64().unwrap()).abs() < 1e-5, "{report}");
    let inspect = longread(&["inspect", &model]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("calibration      temperature") && text.contains("log loss on "), "{text}");

    // Calibrating again fits anew from the model's own probabilities: the same temperature,
    // not its square.
    let again = calibrate(&["--model", &model, "--data", &dev]);
    assert!((again["temperature"].as_f64().unwrap() - t).abs() < 1e-3 * t, "{again}");
    assert!((again["previous"].as_f64().unwrap() - t).abs() < 1e-9 * t, "{again}");
    assert!((again["log_loss"]["before"].as_f64().unwrap() - ll["after"].as_f64().unwrap()).abs() < 1e-5);

    // --clear gives the model's own probabilities back.
    assert_eq!(calibrate(&["--model", &model, "--clear"])["cleared"], true);
    assert_eq!(predictions(&model), before);
    assert_eq!(calibrate(&["--model", &model, "--clear"])["cleared"], false);
}

#[test]
fn a_fit_at_the_end_of_its_range_is_warned_of() {
    let tmp = tempfile::tempdir().unwrap();
    let model = bow(tmp.path());
    // Every document of the fixture is labelled right: sharper is always better.
    let dev = fixture("synthetic/test.jsonl");
    let out = longread(&["calibrate", "--model", &model, "--data", dev.to_str().unwrap(), "--dry-run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("temperature 0.05"), "{stdout}");
    assert!(stderr.contains("stopped at the end of its range (0.05)") && stderr.contains("harder"), "{stderr}");
    assert!(stderr.contains("a temperature fitted on 12 documents (under 100) is noisy"), "{stderr}");
    assert_eq!(calibrate(&["--model", &model, "--data", dev.to_str().unwrap(), "--dry-run"])["at_bound"], true);
}

#[test]
fn a_decision_rule_is_restated_so_that_every_document_keeps_its_label() {
    let tmp = tempfile::tempdir().unwrap();
    let model = bow(tmp.path());
    let dev = noisy_dev(tmp.path());
    // A threshold that labels some documents differently from the most probable label.
    let plain = predictions(&model);
    let mut rain: Vec<f64> = plain.iter().map(|(_, p)| p[1]).collect();
    rain.sort_by(f64::total_cmp);
    let cut = (rain[rain.len() / 2] + rain[rain.len() / 2 + 1]) / 2.0;
    let set = longread(&["threshold", "--model", &model, "--set", &cut.to_string()]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let before = predictions(&model);
    assert_ne!(before.iter().map(|(l, _)| l).collect::<Vec<_>>(), plain.iter().map(|(l, _)| l).collect::<Vec<_>>());

    let kept = calibrate(&["--model", &model, "--data", &dev]);
    let t = kept["temperature"].as_f64().unwrap();
    let restated = kept["decision"]["threshold"].as_f64().unwrap();
    let logit = (cut / (1.0 - cut)).ln();
    assert!((restated - 1.0 / (1.0 + (-logit / t).exp())).abs() < 1e-6, "{kept}");
    let decision: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&model).join("decision.json")).unwrap()).unwrap();
    assert_eq!(decision["threshold"], kept["decision"]["threshold"]);
    let after = predictions(&model);
    assert_eq!(after.iter().map(|(l, _)| l).collect::<Vec<_>>(), before.iter().map(|(l, _)| l).collect::<Vec<_>>());
    // --clear restates it back: the threshold set by hand, and the labels, again.
    assert_eq!(calibrate(&["--model", &model, "--clear"])["cleared"], true);
    let decision: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&model).join("decision.json")).unwrap()).unwrap();
    assert!((decision["threshold"].as_f64().unwrap() - cut).abs() < 1e-6, "{decision} vs {cut}");
    assert_eq!(decision["chosen_by"], "set by hand");
    assert_eq!(predictions(&model), before);
}

#[test]
fn bad_calibrations_and_data_are_refused_naming_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let model = bow(tmp.path());
    let input = fixture("synthetic/test.jsonl");
    let file = Path::new(&model).join("calibration.json");
    for (content, needle) in [
        (r#"{"temperature": -1}"#, "temperature -1 is not a positive number"),
        (r#"{"temperature": 0}"#, "temperature 0 is not a positive number"),
        (r#"{"temperature": "hot"}"#, "calibration.json: invalid type"),
        (r#"{"temprature": 2}"#, "calibration.json: unknown field `temprature`"),
        ("{", "calibration.json: EOF"),
    ] {
        std::fs::write(&file, content).unwrap();
        let out = longread(&["predict", "--model", &model, "--input", input.to_str().unwrap()]);
        assert_clean_failure(&out, needle);
    }
    std::fs::remove_file(&file).unwrap();
    let unknown = tmp.path().join("unknown.jsonl");
    std::fs::write(&unknown, "{\"text\": \"rain\", \"label\": \"snow\"}\n").unwrap();
    let out = longread(&["calibrate", "--model", &model, "--data", unknown.to_str().unwrap()]);
    assert_clean_failure(&out, "unknown label \"snow\"");
    let out = longread(&["calibrate", "--model", &model]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--data"));
    assert!(!file.exists(), "nothing written");
}

/// `train --calibrate --tune-threshold`: the temperature `calibrate` finds on the run's dev
/// set with the model the run kept, then the rule `threshold` finds on the calibrated model.
#[test]
fn train_calibrate_keeps_what_the_calibrate_command_finds_and_tunes_the_rule_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, data, dev) = (tmp.path().join("han"), fixture("synthetic/train.jsonl"), noisy_dev(tmp.path()));
    let run = longread(&[
        "train",
        "--arch",
        "han",
        "--train",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--embedding-dim",
        "16",
        "--gru-hidden",
        "8",
        "--attention-size",
        "16",
        "--seed",
        "3",
        "--epochs",
        "2",
        "--dev",
        &dev,
        "--calibrate",
        "--tune-threshold",
        "accuracy",
        "--log-format",
        "json",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).into_iter().find(|e| e["event"] == "done").expect("a done event");
    let (calibration, rule) = (&done["calibration"], &done["threshold"]);
    let t = calibration["temperature"].as_f64().unwrap();
    assert_eq!(calibration["previous"], 1.0, "{done}");
    assert!(calibration["chosen_by"].as_str().unwrap().starts_with("log loss on "), "{done}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(out.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(file["temperature"].as_f64(), Some(t));

    let model = out.to_str().unwrap();
    let check = calibrate(&["--model", model, "--data", &dev, "--dry-run"]);
    assert!((check["temperature"].as_f64().unwrap() - t).abs() < 1e-4 * t, "{check} vs {calibration}");
    assert!(
        (check["log_loss"]["before"].as_f64().unwrap() - calibration["log_loss"]["after"].as_f64().unwrap()).abs()
            < 1e-5
    );
    // The rule was tuned on the calibrated probabilities: `threshold` on the calibrated model
    // finds it again.
    let again =
        longread(&["threshold", "--model", model, "--data", &dev, "--metric", "accuracy", "--dry-run", "--json"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["threshold"].as_f64(), rule["threshold"].as_f64(), "{again} vs {rule}");
    assert_eq!(again["at_threshold"]["accuracy"], rule["at_threshold"]["accuracy"]);
}

#[test]
fn train_calibrate_of_a_bag_of_words_uses_out_of_fold_probabilities_and_needs_a_dev_set_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, data) = (tmp.path().join("bow"), fixture("synthetic/train.jsonl"));
    let (data, out_str) = (data.to_str().unwrap(), out.to_str().unwrap());
    let run =
        longread(&["train", "--arch", "bow", "--train", data, "--out", out_str, "--calibrate", "--log-format", "json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).into_iter().find(|e| e["event"] == "done").expect("a done event");
    assert_eq!(
        done["calibration"]["chosen_by"],
        "log loss on the training documents' out-of-fold probabilities (5 folds, 32 documents)"
    );
    assert!(out.join("calibration.json").exists() && !out.join("decision.json").exists());
    for (flags, needle) in [
        (&["--cv", "2"][..], "--calibrate calibrates on the run's dev set, but --cv trains one model per fold"),
        (
            &["--dev-split", "0"][..],
            "--calibrate calibrates on the run's dev set, but --dev-split 0 holds out no dev set",
        ),
    ] {
        let other = tmp.path().join("han");
        let mut args = vec!["train", "--arch", "han", "--train", data, "--out", other.to_str().unwrap(), "--calibrate"];
        args.extend_from_slice(flags);
        assert_clean_failure(&longread(&args), needle);
        assert!(!other.exists(), "refused before anything is written");
    }
}

/// A final model trained on every document (`--dev-split 0`) is calibrated and its rule tuned
/// on the out-of-fold predictions of the `--cv` run with its settings: the same rows cv.json
/// scored; another run's settings or labels are named.
#[test]
fn a_final_model_is_calibrated_and_tuned_on_the_out_of_fold_predictions_of_its_cv_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = fixture("synthetic/train.jsonl");
    let train = |out: &str, flags: &[&str]| {
        let out = tmp.path().join(out);
        let mut args = vec!["train", "--arch", "han", "--labels", "rain,prices", "--epochs", "3", "--seed", "4"];
        args.extend_from_slice(&["--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        args.extend_from_slice(flags);
        let run = longread(&args);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        out.to_str().unwrap().to_owned()
    };
    let cv = train("cv", &["--cv", "2"]);
    let final_model = train("final", &["--dev-split", "0"]);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&cv).join("cv.json")).unwrap()).unwrap();
    let pooled = &summary["out_of_fold"];

    let run = longread(&["calibrate", "--model", &final_model, "--out-of-fold", &cv, "--json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(!String::from_utf8_lossy(&run.stderr).contains("trained with"), "same settings: no warning");
    let fitted: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(fitted["documents"], pooled["documents"]);
    let before = fitted["log_loss"]["before"].as_f64().unwrap();
    assert!((before - pooled["log_loss"].as_f64().unwrap()).abs() < 1e-12, "{fitted} vs {pooled}");
    assert!(fitted["log_loss"]["after"].as_f64().unwrap() <= before);
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&final_model).join("calibration.json")).unwrap())
            .unwrap();
    assert_eq!(kept["temperature"], fitted["temperature"]);
    assert!(kept["chosen_by"].as_str().unwrap().contains("out-of-fold predictions"), "{kept}");

    let oof = Path::new(&cv).join("out-of-fold.jsonl");
    let run = longread(&["threshold", "--model", &final_model, "--out-of-fold", oof.to_str().unwrap(), "--json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let rule: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(rule["at_default"]["accuracy"], pooled["accuracy"], "the most probable label of the same rows");
    assert!(Path::new(&final_model).join("decision.json").is_file());

    let other = train("other", &["--dev-split", "0", "--lr", "7e-3"]);
    let run = longread(&["calibrate", "--model", &other, "--out-of-fold", &cv, "--dry-run"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success() && stderr.contains("warning: lr: ") && stderr.contains("the --cv run with"),
        "{stderr}"
    );
    let bow = bow(tmp.path());
    std::fs::write(&oof, std::fs::read_to_string(&oof).unwrap().replace("\"rain\"", "\"snow\"")).unwrap();
    for command in ["calibrate", "threshold"] {
        let refused = longread(&[command, "--model", &bow, "--out-of-fold", &cv]);
        assert_clean_failure(&refused, "is not one of the model's labels (prices, rain): another run's predictions?");
        let missing = longread(&[command, "--model", &bow, "--out-of-fold", &final_model]);
        assert_clean_failure(&missing, "no out-of-fold predictions there");
    }
}
