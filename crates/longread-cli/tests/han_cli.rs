//! The HAN baseline end to end: `train --arch han` (preprocessing printed, vocabulary in the
//! model directory, arch defaults recorded), `predict`/`eval`/`report`/`inspect` on the result,
//! exact resume, word vectors from an encoder, and refused flags.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread, minilm};
use serde_json::Value;

/// Small sizes so that a run takes a second.
const SMALL: [&str; 10] =
    ["--embedding-dim", "16", "--gru-hidden", "8", "--attention-size", "16", "--dev-split", "0.25", "--seed", "3"];

/// `longread train --arch han --train DATA --out OUT` with [`SMALL`] sizes and `extra` flags.
fn train_han(out: &Path, extra: &[&str]) -> std::process::Output {
    let data = fixture("synthetic/train.jsonl");
    let mut args = vec!["train", "--arch", "han", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(extra);
    longread(&args)
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_han_trains_from_scratch_and_serves_predict_eval_report_and_inspect() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let run =
        train_han(&out, &["--epochs", "25", "--patience", "0", "--attention-hops", "2", "--attention-penalty", "0.1"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("HAN grid: ") && stderr.contains("90th percentile of the training data"), "{stderr}");
    assert!(stderr.contains("vocabulary: ") && stderr.contains("--min-count 2"), "{stderr}");

    let cfg = json_file(&out.join("config.json"));
    assert_eq!(cfg["architectures"][0], "LongreadHAN");
    assert_eq!((cfg["embedding_dim"].as_u64(), cfg["attention_hops"].as_u64()), (Some(16), Some(2)));
    let vocab = json_file(&out.join("vocab.json"));
    assert_eq!(vocab.as_array().map(Vec::len), cfg["vocab_size"].as_u64().map(|n| n as usize), "vocab.json: {vocab}");
    let args = json_file(&out.join("training_args.json"));
    assert_eq!((args["lr"].as_f64(), args["max_grad_norm"].as_f64()), (Some(1e-3), Some(0.5)), "HAN defaults: {args}");
    assert_eq!((args["batch_size"].as_u64(), args["schedule"].as_str()), (Some(32), Some("constant")));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 25);
    assert!(!out.join("checkpoint-last").exists(), "a completed run keeps no checkpoint");

    let test = fixture("synthetic/test.jsonl");
    let model = out.to_str().unwrap();
    let eval = longread(&["eval", "--model", model, "--data", test.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let accuracy = serde_json::from_slice::<Value>(&eval.stdout).unwrap()["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.75, "test accuracy {accuracy}");

    let predict = longread(&["predict", "--model", model, "--input", test.to_str().unwrap()]);
    assert!(predict.status.success(), "{}", String::from_utf8_lossy(&predict.stderr));
    let texts: Vec<String> =
        json_lines(&std::fs::read(&test).unwrap()).iter().map(|l| l["text"].as_str().unwrap().to_string()).collect();
    let lines = json_lines(&predict.stdout);
    assert_eq!(lines.len(), texts.len());
    for (line, text) in lines.iter().zip(&texts) {
        let chars: Vec<char> = text.chars().collect();
        let sentences = line["sentences"].as_array().unwrap();
        let total: f64 = sentences.iter().map(|s| s["attention"].as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-4, "sentence attention sums to 1: {total}");
        for s in sentences {
            assert_eq!(s["hops"].as_array().map(Vec::len), Some(2));
            let words = s["words"].as_array().unwrap();
            let total: f64 = words.iter().map(|w| w["attention"].as_f64().unwrap()).sum();
            assert!((total - 1.0).abs() < 1e-4, "word attention sums to 1 in a sentence: {total}");
            for w in words {
                let (a, b) = (w["start"].as_u64().unwrap() as usize, w["end"].as_u64().unwrap() as usize);
                let word: String = chars[a..b].iter().collect();
                assert!(word.chars().all(|c| c.is_alphanumeric() || c == '.' || c == '\''), "offsets: {word:?}");
            }
        }
    }
    let table = longread(&["predict", "--model", model, "--input", test.to_str().unwrap(), "--format", "table"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("most attended sentence"));

    let html = tmp.path().join("report.html");
    let report =
        longread(&["report", "--model", model, "--input", test.to_str().unwrap(), "--out", html.to_str().unwrap()]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("attention per sentence") && page.contains("word attention"), "HAN shading");

    let inspect = longread(&["inspect", "--model", model, "--json"]);
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let summary: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(summary["architectures"][0], "LongreadHAN");
    assert!(summary["parameters"]["total"].as_u64().unwrap() > 0);
}

#[test]
fn an_interrupted_han_run_resumes_to_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (straight, split) = (tmp.path().join("straight"), tmp.path().join("split"));
    let flags = ["--epochs", "3", "--patience", "0", "--quiet"];
    assert!(train_han(&straight, &flags).status.success());
    let first = train_han(&split, &[&flags[..], &["--stop-after-epoch", "1"]].concat());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(split.join("checkpoint-last/trainer_state.json").is_file());
    let second = train_han(&split, &[&flags[..], &["--resume", "auto"]].concat());
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let weights = |dir: &Path| std::fs::read(dir.join("model.safetensors")).unwrap();
    assert_eq!(weights(&split), weights(&straight), "same best model");
    let metrics = |dir: &Path| std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap().lines().count();
    assert_eq!(metrics(&split), 3);
}

#[test]
fn han_word_vectors_come_from_an_encoders_embeddings() {
    let Some(encoder) = minilm() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let run = train_han(&out, &["--epochs", "1", "--word-vectors", encoder.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("word vectors from") && stderr.contains("384 dimensions"), "{stderr}");
    assert_eq!(json_file(&out.join("config.json"))["embedding_dim"], 384);
}

#[test]
fn encoder_flags_and_bad_data_are_refused_for_the_han() {
    let tmp = tempfile::tempdir().unwrap();
    assert_clean_failure(&train_han(&tmp.path().join("a"), &["--freeze-base"]), "--freeze-base does not apply");
    let model = fixture("tiny-bert");
    assert_clean_failure(
        &train_han(&tmp.path().join("b"), &["--model", model.to_str().unwrap()]),
        "--model does not apply to --arch han",
    );
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"A good day.\", \"label\": \"x\"}\n{\"text\": \" ... \", \"label\": \"y\"}\n")
        .unwrap();
    let out = tmp.path().join("c");
    let run = longread(&["train", "--arch", "han", "--train", bad.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_clean_failure(&run, "bad.jsonl:2: the text has no words");
    assert!(!out.exists(), "nothing written");
    let data = fixture("synthetic/train.jsonl");
    let run = longread(&["train", "--arch", "sequence", "--train", data.to_str().unwrap(), "--out", "x"]);
    assert_clean_failure(&run, "--model is required");
    let init =
        longread(&["init", "--arch", "han", "--encoder", model.to_str().unwrap(), "--labels", "a,b", "--out", "y"]);
    assert_clean_failure(&init, "--arch han is not built on an encoder");
}

/// Documents of 40 filler sentences; "teen" and "mature" ones also hold three cue sentences
/// with their own words, placed by a fixed pattern. Labels 60% / 30% / 10%.
fn imbalanced_three_class(path: &Path, n: usize, offset: usize) {
    const FILLER: [&str; 12] = [
        "the council met on tuesday to discuss the budget",
        "rain is expected over the weekend along the coast",
        "prices rose slightly in the last quarter of the year",
        "the team announced a new schedule for the season",
        "a report on local schools was published this morning",
        "traffic was heavy on the bridge during the evening",
        "the museum opened a new wing for modern art",
        "farmers expect a good harvest after the warm spring",
        "the library will extend its opening hours next month",
        "officials said the road works would finish soon",
        "the festival drew large crowds to the old town",
        "a new bakery opened near the central station",
    ];
    const CUES: [&str; 2] =
        ["then came a scary fight with a bruise and a kiss", "then came brutal gore with drugs and slaughter"];
    let mut lines = String::new();
    for i in 0..n {
        let k = (i + offset) % 10;
        let label = if k < 6 {
            0
        } else if k < 9 {
            1
        } else {
            2
        };
        let mut sentences: Vec<&str> = (0..40).map(|j| FILLER[(i * 7 + j * 5) % FILLER.len()]).collect();
        if label > 0 {
            for c in 0..3 {
                sentences.insert((i * 11 + c * 13) % 40, CUES[label - 1]);
            }
        }
        let text = sentences.join(". ") + ".";
        let name = ["general", "teen", "mature"][label];
        let record = serde_json::json!({"text": text, "label": name});
        lines += &format!("{record}\n");
    }
    std::fs::write(path, lines).unwrap();
}

#[test]
fn han_on_small_imbalanced_three_class_data_is_not_stopped_before_it_learns() {
    // A regression: with 3 steps per epoch, the HAN predicted one class for its first ~9
    // epochs (a flat dev macro-F1), patience 3 stopped it at epoch 4 and the saved model gave
    // every document the majority class. Patience now counts only after --patience-min-steps.
    let tmp = tempfile::tempdir().unwrap();
    let (train, test) = (tmp.path().join("train.jsonl"), tmp.path().join("test.jsonl"));
    imbalanced_three_class(&train, 90, 0);
    imbalanced_three_class(&test, 60, 3);
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--arch",
            "han",
            "--train",
            train.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--labels",
            "general,teen,mature",
            "--class-weights",
            "balanced",
            "--epochs",
            "40",
            "--dev-split",
            "0.25",
            "--seed",
            "3",
        ];
        // The HAN's default sizes: the small ones of the other tests learn too slowly here.
        args.extend_from_slice(extra);
        let output = longread(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines().count()
    };
    let (old, fixed) = (tmp.path().join("old"), tmp.path().join("fixed"));
    assert!(run(&old, &["--patience-min-steps", "0"]) <= 10, "the old rule stops within a few epochs");
    run(&fixed, &[]);
    let eval = longread(&["eval", "--model", fixed.to_str().unwrap(), "--data", test.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    let predicted_classes = report["confusion_matrix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>())
        .fold(vec![0u64; 3], |acc, row| acc.iter().zip(&row).map(|(a, b)| a + b).collect())
        .iter()
        .filter(|&&n| n > 0)
        .count();
    assert_eq!(predicted_classes, 3, "{report}");
    assert!(report["macro_f1"].as_f64().unwrap() >= 0.8, "{report}");
}

/// `--metric roc-auc` picks the epoch whose dev probabilities rank best (every epoch's log has
/// the dev ROC-AUC and log loss), and the summary names the metric that chose (it said
/// macro-F1 whatever `--metric` was); a dev set without one of the labels is refused by name.
#[test]
fn metric_roc_auc_picks_the_best_ranking_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("han");
    let run = train_han(&out, &["--epochs", "12", "--patience", "0", "--metric", "roc-auc"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let logs: Vec<Value> = json_lines(std::fs::read(out.join("metrics.jsonl")).unwrap().as_slice());
    let aucs: Vec<f64> = logs.iter().map(|l| l["dev"]["roc_auc"].as_f64().unwrap()).collect();
    for (log, auc) in logs.iter().zip(&aucs) {
        assert!((0.0..=1.0).contains(auc), "{log}");
        // On the dev set the log loss of the probabilities is the dev loss (both cross-entropy).
        let (loss, log_loss) = (log["dev_loss"].as_f64().unwrap(), log["dev"]["log_loss"].as_f64().unwrap());
        assert!((loss - log_loss).abs() < 1e-5, "{log}");
    }
    let best = aucs.iter().enumerate().fold(0, |b, (i, a)| if *a > aucs[b] { i } else { b });
    let summary = format!("best epoch {} (ROC-AUC {:.4})", best + 1, aucs[best]);
    assert!(stderr.contains(&summary), "expected {summary:?} in {stderr}");
    assert!(stderr.contains(", ROC-AUC "), "each epoch line shows it: {stderr}");

    let rain_only: String = std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"label\": \"rain\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!rain_only.is_empty());
    let dev = tmp.path().join("rain.jsonl");
    std::fs::write(&dev, rain_only).unwrap();
    let (data, refused) = (fixture("synthetic/train.jsonl"), tmp.path().join("refused"));
    let refused = longread(&[
        "train",
        "--arch",
        "han",
        "--train",
        data.to_str().unwrap(),
        "--dev",
        dev.to_str().unwrap(),
        "--out",
        refused.to_str().unwrap(),
        "--epochs",
        "1",
        "--metric",
        "roc-auc",
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("ROC-AUC is undefined on this dev set: no dev document has the label prices;"), "{stderr}");
    assert!(!stderr.contains("epoch 1:") && !tmp.path().join("refused").exists(), "refused before training: {stderr}");
}
