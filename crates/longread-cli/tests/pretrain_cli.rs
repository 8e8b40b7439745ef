//! `longread pretrain` end to end on a very small RoBERTa.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// `pretrain` with a 2×32 RoBERTa on the synthetic corpus and tiny-roberta's tokenizer.
fn pretrain(tmp: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    let config = tmp.join("config.json");
    if !config.exists() {
        let c = serde_json::json!({"model_type": "roberta", "vocab_size": 400, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 66, "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1});
        std::fs::write(&config, c.to_string()).unwrap();
    }
    let mut args = vec![
        "pretrain".to_string(),
        "--corpus".into(),
        s(&fixture("synthetic")),
        "--tokenizer".into(),
        s(&fixture("tiny-roberta")),
        "--config".into(),
        s(&config),
        "--out".into(),
        s(&tmp.join(out)),
    ];
    for a in ["--max-steps", "30", "--batch-size", "4", "--seq-len", "48", "--eval-every", "10", "--lr", "3e-3"] {
        args.push(a.into());
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    longread(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `longread init --encoder` accepts the pretrained `encoder` (a classifier beside it).
fn assert_feeds_a_classifier(encoder: &Path) {
    let clf = s(&encoder.with_file_name("clf"));
    let init = longread(&[
        "init",
        "--encoder",
        &s(encoder),
        "--labels",
        "rain,prices",
        "--out",
        &clf,
        "--chunk-size",
        "32",
        "--stride",
        "8",
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
}

/// Both directories' model.safetensors hold the same tensors, bit for bit.
fn assert_same_weights(a: &Path, b: &Path) {
    let load =
        |d: &Path| candle_core::safetensors::load(d.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let (a, b) = (load(a), load(b));
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs after resuming");
    }
}

#[test]
fn pretraining_logs_perplexity_resumes_exactly_and_feeds_a_classifier() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = pretrain(tmp.path(), "whole", &["--log-format", "json"]);
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    let evals: Vec<serde_json::Value> =
        json_lines(&whole.stdout).into_iter().filter(|e| e["event"] == "eval").collect();
    assert_eq!(evals.len(), 3);
    assert!(evals.iter().all(|e| e["perplexity"].as_f64().unwrap() > 1.0));
    assert!(evals[2]["eval_loss"].as_f64().unwrap() < evals[0]["eval_loss"].as_f64().unwrap() + 0.5);

    assert_clean_failure(&pretrain(tmp.path(), "whole", &[]), "already exists");
    assert_clean_failure(&pretrain(tmp.path(), "sliced", &["--resume", "auto"]), "nothing to resume");
    let first = pretrain(tmp.path(), "sliced", &["--stop-after-step", "10"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(tmp.path().join("sliced/checkpoint-last/optimizer.safetensors").is_file());
    let rest = pretrain(tmp.path(), "sliced", &["--resume", "auto"]);
    assert!(rest.status.success(), "{}", String::from_utf8_lossy(&rest.stderr));
    assert_same_weights(&tmp.path().join("whole"), &tmp.path().join("sliced"));
    let lines = std::fs::read_to_string(tmp.path().join("sliced/metrics.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 3);
    assert!(!tmp.path().join("whole/checkpoint-last").exists(), "checkpoints removed once complete");

    assert_feeds_a_classifier(&tmp.path().join("whole"));
}

#[test]
fn pretraining_input_problems_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = s(&tmp.path().join("o"));
    // Every run is capped at 2 steps, in case a check is missing.
    let run = |extra: &[&str]| {
        let mut args = vec!["pretrain", "--out", &out, "--max-steps", "2"];
        args.extend_from_slice(extra);
        longread(&args)
    };
    let (corpus, roberta) = (s(&fixture("synthetic")), s(&fixture("tiny-roberta")));
    assert_clean_failure(&run(&["--corpus", &corpus, "--tokenizer", &roberta]), "give --preset NAME or --config FILE");
    let o = run(&["--corpus", &corpus, "--tokenizer", &roberta, "--preset", "tiny", "--seq-len", "1000"]);
    assert_clean_failure(&o, "--seq-len must be between 3 and the model's 512 positions");
    let bert = s(&fixture("tiny-bert/config.json"));
    let o = run(&["--corpus", &corpus, "--tokenizer", &s(&fixture("tiny-bert")), "--config", &bert]);
    assert_clean_failure(&o, "must be a RoBERTa");
    let o = run(&["--corpus", &s(&tmp.path().join("none")), "--tokenizer", &roberta, "--preset", "tiny"]);
    assert_clean_failure(&o, "none");
    assert!(!tmp.path().join("o").exists(), "nothing is written for bad input");
}

/// A corpus too small to split, or a step count of 0, was found after the new run had written
/// its directory, which then blocked the next try ("o already exists"), for new and continued
/// encoders alike.
#[test]
fn pretraining_refused_for_its_data_or_counts_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small.txt");
    std::fs::write(&small, "one short line\n").unwrap();
    let out = s(&tmp.path().join("o"));
    let (roberta, bert) = (s(&fixture("tiny-roberta")), s(&fixture("tiny-bert")));
    let corpus = s(&fixture("synthetic"));
    for start in [vec!["--tokenizer", roberta.as_str(), "--preset", "tiny"], vec!["--model", bert.as_str()]] {
        for (extra, needle) in [
            (vec!["--corpus", small.to_str().unwrap()], "the corpus gives 1 sequence of 128 tokens: too few"),
            (vec!["--corpus", corpus.as_str(), "--batch-size", "0"], "--batch-size, --max-steps and --eval-every"),
            (vec!["--corpus", corpus.as_str(), "--eval-every", "0"], "--batch-size, --max-steps and --eval-every"),
            (vec!["--corpus", corpus.as_str(), "--seq-len", "2"], "--seq-len must be at least 3"),
            // A negative rate ran (climbing the loss), NaN diverged after five steps.
            (vec!["--corpus", corpus.as_str(), "--lr", "-1"], "--lr -1: a learning rate must be a number above 0"),
            (vec!["--corpus", corpus.as_str(), "--lr", "nan"], "--lr NaN: a learning rate must be a number above 0"),
            (vec!["--corpus", corpus.as_str(), "--weight-decay", "-0.1"], "--weight-decay -0.1: must be in [0, ∞)"),
            (vec!["--corpus", corpus.as_str(), "--max-grad-norm", "inf"], "--max-grad-norm inf: must be in [0, ∞)"),
        ] {
            let mut args = vec!["pretrain", "--out", &out, "--steps", "2", "-q"];
            args.extend_from_slice(&start);
            args.extend_from_slice(&extra);
            assert_clean_failure(&longread(&args), needle);
            assert!(!tmp.path().join("o").exists(), "{args:?}: nothing written");
        }
    }
}

/// `pretrain --model` with tiny-bert (a bare BertModel: a new head) on the synthetic corpus,
/// its own WordPiece tokenizer.
fn continue_pretraining(tmp: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    let (corpus, model, out) = (s(&fixture("synthetic")), s(&fixture("tiny-bert")), s(&tmp.join(out)));
    let mut args = vec!["pretrain", "--corpus", &corpus, "--model", &model, "--out", &out];
    args.extend_from_slice(&["--max-steps", "20", "--batch-size", "4", "--seq-len", "48", "--eval-every", "10"]);
    args.extend_from_slice(&["--lr", "1e-3", "--warmup-steps", "2"]);
    args.extend_from_slice(extra);
    longread(&args)
}

#[test]
fn continued_pretraining_starts_from_the_checkpoint_resumes_exactly_and_feeds_a_classifier() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = continue_pretraining(tmp.path(), "whole", &["--log-format", "json"]);
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    let evals: Vec<serde_json::Value> =
        json_lines(&whole.stdout).into_iter().filter(|e| e["event"] == "eval").collect();
    assert_eq!(evals.len(), 2);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("whole/config.json")).unwrap()).unwrap();
    assert_eq!(
        (config["model_type"].as_str(), config["architectures"][0].as_str()),
        (Some("bert"), Some("BertForMaskedLM"))
    );
    // Trained from the checkpoint's weights: moved, but not far (a re-initialised encoder
    // would differ by the size of the weights themselves).
    let load = |p: &Path| candle_core::safetensors::load(p, &candle_core::Device::Cpu).unwrap();
    let (source, trained) =
        (load(&fixture("tiny-bert/model.safetensors")), load(&tmp.path().join("whole/model.safetensors")));
    let name = "encoder.layer.0.attention.self.query.weight";
    let moved = trained[&format!("bert.{name}")].sub(&source[name]).unwrap().abs().unwrap();
    let moved = moved.max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(moved > 1e-5 && moved < 0.1, "query weights moved by {moved}");

    let first = continue_pretraining(tmp.path(), "sliced", &["--stop-after-step", "10"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(String::from_utf8_lossy(&first.stderr).contains("with a new masked-LM head"));
    let changed = continue_pretraining(tmp.path(), "sliced", &["--resume", "auto", "--weight-decay", "0.05"]);
    assert_eq!(changed.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&changed.stderr).contains("weight-decay: the run used 0.01, this command gives 0.05")
    );
    let rest = continue_pretraining(tmp.path(), "sliced", &["--resume", "auto"]);
    assert!(rest.status.success(), "{}", String::from_utf8_lossy(&rest.stderr));
    assert_same_weights(&tmp.path().join("whole"), &tmp.path().join("sliced"));

    assert_feeds_a_classifier(&tmp.path().join("whole"));
}

#[test]
fn continued_pretraining_problems_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, bert, roberta) = (s(&fixture("synthetic")), s(&fixture("tiny-bert")), s(&fixture("tiny-roberta")));
    let out = s(&tmp.path().join("o"));
    let run = |extra: &[&str]| {
        let mut args = vec!["pretrain", "--corpus", &corpus, "--out", &out, "--max-steps", "2"];
        args.extend_from_slice(extra);
        longread(&args)
    };
    assert_clean_failure(&run(&[]), "give --tokenizer (or --model");
    let usage = run(&["--model", &bert, "--preset", "tiny"]);
    assert_eq!(usage.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&usage.stderr).contains("'--model <MODEL>' cannot be used with '--preset <PRESET>'")
    );
    // tiny-roberta's tokenizer has 400 tokens, tiny-bert's embeddings 300 rows.
    assert_clean_failure(&run(&["--model", &bert, "--tokenizer", &roberta]), "more than the 300 rows");
    assert_clean_failure(&run(&["--model", &s(&tmp.path().join("missing"))]), "missing");
    assert_clean_failure(
        &run(&["--model", &bert, "--seq-len", "65"]),
        "--seq-len must be between 3 and the model's 64",
    );
    assert!(!tmp.path().join("o").exists(), "nothing is written for bad input");
}

/// A tokenizer.json that truncates (as many on the Hub do: all-MiniLM-L6-v2's stops at 128
/// tokens) still gives pretraining whole documents to pack.
#[test]
fn pretraining_reads_whole_documents_whatever_the_tokenizer_truncates_to() {
    let tmp = tempfile::tempdir().unwrap();
    let truncating = tmp.path().join("truncating");
    std::fs::create_dir(&truncating).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("tiny-bert").join(file), truncating.join(file)).unwrap();
    }
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny-bert/tokenizer.json")).unwrap()).unwrap();
    tokenizer["truncation"] =
        serde_json::json!({"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0});
    std::fs::write(truncating.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let corpus = s(&fixture("synthetic"));
    let setup = |model: &Path, out: &str| {
        let (model, out) = (s(model), s(&tmp.path().join(out)));
        let o = longread(&[
            "pretrain",
            "--corpus",
            &corpus,
            "--model",
            &model,
            "--out",
            &out,
            "--max-steps",
            "1",
            "--eval-every",
            "1",
            "--seq-len",
            "48",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        stderr.lines().find(|l| l.starts_with("pretraining on")).unwrap().to_owned()
    };
    let (whole, truncated) = (setup(&fixture("tiny-bert"), "a"), setup(&truncating, "b"));
    assert_eq!(whole, truncated);
    assert!(whole.starts_with("pretraining on 50 sequences"), "{whole}");
}

/// With stderr not a terminal (a log file, a job scheduler) the bar draws nothing; `pretrain`
/// and `embed` write plain progress lines (every 10 s, here every step).
#[test]
fn pretrain_and_embed_report_progress_when_stderr_is_not_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.json");
    let c = serde_json::json!({"model_type": "roberta", "vocab_size": 400, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "max_position_embeddings": 66, "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1});
    std::fs::write(&config, c.to_string()).unwrap();
    let out = tmp.path().join("mlm");
    let pretrained = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(["pretrain", "--corpus", &s(&fixture("synthetic")), "--tokenizer", &s(&fixture("tiny-roberta"))])
        .args(["--config", &s(&config), "--out", &s(&out), "--max-steps", "6", "--batch-size", "2"])
        .args(["--seq-len", "32", "--eval-every", "6"])
        .env("LONGREAD_PROGRESS_SECONDS", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&pretrained.stderr);
    assert!(pretrained.status.success(), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("step 3 of 6: loss ")), "{stderr}");

    let embedded = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(["embed", "--model", &s(&fixture("tiny-bert")), "--input", &s(&fixture("synthetic/train.jsonl"))])
        .args(["--batch-size", "4"])
        .env("LONGREAD_PROGRESS_SECONDS", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&embedded.stderr);
    assert!(embedded.status.success(), "{stderr}");
    assert!(stderr.lines().any(|l| l.contains("of 32 documents done")), "{stderr}");
}
