//! `init` → `train` → `eval`/`predict` end to end on the tiny BERT fixture, with the synthetic
//! task of `tests/fixtures/synthetic/` (by `scripts/make_synthetic_fixtures.py`).

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread};
use serde_json::Value;

/// The arguments of `longread train --model MODEL --train DATA --out OUT EXTRA...`.
fn train_args<'a>(model: &'a Path, data: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "--model", model.to_str().unwrap(), "--train", data.to_str().unwrap()];
    args.extend_from_slice(&["--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    args
}

/// Runs `longread train --model MODEL --train DATA --out OUT EXTRA...`.
fn train(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    longread(&train_args(model, data, out, extra))
}

/// `longread init` on the tiny BERT for the synthetic task (chunks of 16 tokens, stride 4).
fn init_tiny(out: &Path) {
    let encoder = fixture("tiny-bert");
    let init = longread(&[
        "init",
        "--encoder",
        encoder.to_str().unwrap(),
        "--labels",
        "rain,prices",
        "--out",
        out.to_str().unwrap(),
        "--chunk-size",
        "16",
        "--stride",
        "4",
        "--attention-hidden-size",
        "8",
        "--seed",
        "1",
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
}

/// `longread eval --json` accuracy.
fn accuracy(model: &Path, data: &Path) -> f64 {
    let out = longread(&["eval", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["accuracy"].as_f64().unwrap()
}

#[test]
fn a_trained_head_classifies_held_out_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    let (train_data, test_data) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    init_tiny(&p("init"));
    let extra = [
        "--dev-split",
        "0.25",
        "--freeze-base",
        "--epochs",
        "30",
        "--patience",
        "0",
        "--head-lr",
        "3e-2",
        "--batch-size",
        "4",
        "--seed",
        "3",
    ];
    let out = train(&p("init"), &train_data, &p("trained"), &extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("epoch 30:") && stderr.contains("best epoch"), "{stderr}");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "metrics.jsonl",
        "training_args.json",
        "trainer_state.json",
    ] {
        assert!(p("trained").join(f).is_file(), "{f} missing");
    }
    assert!(!p("trained").join("checkpoint-last").exists(), "checkpoint removed once the run is complete");
    let metrics: Vec<Value> = json_lines(&std::fs::read(p("trained").join("metrics.jsonl")).unwrap());
    assert_eq!(metrics.len(), 30);
    assert!(metrics.iter().any(|m| m["best"] == true));
    let args: Value =
        serde_json::from_str(&std::fs::read_to_string(p("trained").join("training_args.json")).unwrap()).unwrap();
    assert_eq!(args["freeze_base"], true);
    // No temporary directories left beside the output.
    let stray = std::fs::read_dir(tmp.path()).unwrap().filter_map(|e| e.ok());
    assert!(stray.filter(|e| e.file_name().to_string_lossy().starts_with(".longread")).count() == 0);

    let trained = accuracy(&p("trained"), &test_data);
    assert!(trained >= 0.75, "test accuracy {trained}");
    assert!(accuracy(&p("init"), &test_data) < trained, "training must help");
    let predict =
        longread(&["predict", "--model", p("trained").to_str().unwrap(), "--input", test_data.to_str().unwrap()]);
    assert!(predict.status.success());
    assert_eq!(json_lines(&predict.stdout).len(), 12);
}

#[test]
fn training_input_problems_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    let model = fixture("hier/bert-mean");
    std::fs::write(
        p("bad.jsonl"),
        "{\"text\": \"Rain.\", \"label\": \"teen\"}\n{\"text\": \"x\", \"label\": \"snow\"}\n",
    )
    .unwrap();
    assert_clean_failure(&train(&model, &p("bad.jsonl"), &p("o"), &[]), "bad.jsonl:2: unknown label \"snow\"");
    std::fs::create_dir(p("exists")).unwrap();
    // An existing directory with no run in it (an `init` directory, say): no --resume hint,
    // which then failed with "nothing to resume".
    assert_clean_failure(
        &train(&model, &p("bad.jsonl"), &p("exists"), &[]),
        "exists already exists; choose another --out (or remove it)",
    );
    std::fs::write(p("exists").join("metrics.jsonl"), "").unwrap();
    assert_clean_failure(
        &train(&model, &p("bad.jsonl"), &p("exists"), &[]),
        "its run has finished; to train further, start a new run from its model: --model",
    );
    std::fs::write(p("empty.jsonl"), "").unwrap();
    assert_clean_failure(&train(&model, &p("empty.jsonl"), &p("o"), &[]), "no input records");
    std::fs::write(
        p("ok.jsonl"),
        "{\"text\": \"Rain.\", \"label\": \"teen\"}\n{\"text\": \"Prices.\", \"label\": 0}\n",
    )
    .unwrap();
    let ok = p("ok.jsonl");
    // A dev set of other texts: the same file would add a warning line (dev = training texts).
    std::fs::write(p("dev.jsonl"), "{\"text\": \"Snow.\", \"label\": \"teen\"}\n").unwrap();
    let out = train(&model, &ok, &p("o"), &["--dev", p("dev.jsonl").to_str().unwrap(), "--class-weights", "1,2"]);
    assert_clean_failure(&out, "--class-weights needs 3 non-negative numbers");
    // Zero on both labels the training data has (its documents are label 0 and "teen"): every
    // step was 0/0, skipped as NaN, and the run completed untrained.
    let out = train(&model, &ok, &p("o"), &["--dev", p("dev.jsonl").to_str().unwrap(), "--class-weights", "0,0,1"]);
    assert_clean_failure(&out, "--class-weights 0,0,1: the training documents' labels all weigh 0");
    assert!(!p("o").exists());
}

/// Dev documents that are also training documents (a dev file cut from the same pool, a file
/// with repeated texts) and training texts with two labels are named at the start; data read
/// from a pipe (`--dev <(...)`) or standard input trains (read once for its fingerprint, or for
/// the labels, it was then found empty: "no input records", and `--cv` panicked).
#[test]
fn shared_dev_texts_are_warned_of_and_piped_data_trains_as_a_file_does() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let mut lines: Vec<String> = std::fs::read_to_string(&data).unwrap().lines().map(str::to_owned).collect();
    let first: Value = serde_json::from_str(&lines[0]).unwrap();
    let other = if first["label"] == "teen" { "mature" } else { "teen" };
    lines.push(serde_json::json!({"text": first["text"], "label": other}).to_string());
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let dev = tmp.path().join("dev.jsonl");
    std::fs::write(&dev, lines[2..5].join("\n") + "\n").unwrap();
    let model = fixture("hier/bert-attention");
    let script = format!(
        "exec \"$0\" train --model {} --train {} --out {} --epochs 1 --dev <(cat {})",
        model.display(),
        data.display(),
        tmp.path().join("piped").display(),
        dev.display()
    );
    let run = std::process::Command::new("bash")
        .args(["-c", &script, env!("CARGO_BIN_EXE_longread")])
        .output()
        .expect("running bash");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("warning: 3 of 3 dev documents are also training documents (first: /dev/fd/"), "{stderr}");
    assert!(stderr.contains(&format!("is {}:3)", data.display())), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: 1 training text has more than one label (first: {}:1 and line 13)",
            data.display()
        )),
        "{stderr}"
    );
    // Distinct texts: no warning.
    let clean = tmp.path().join("clean.jsonl");
    synthetic_for_fixture_models(&clean, 12);
    let run = train(&model, &clean, &tmp.path().join("clean-run"), &["--epochs", "1"]);
    assert!(run.status.success() && !String::from_utf8_lossy(&run.stderr).contains("warning"));

    // Training data from a pipe or standard input, read several times by --cv (the labels,
    // the documents, the folds' lines: a panic, then "no input records") and by the HAN: the
    // same folds and models as from the file.
    let cv_from = |input: &str, out: &str| {
        let script = format!(
            "exec \"$0\" train --model {} --train {input} --out {} --epochs 1 --cv 2",
            model.display(),
            tmp.path().join(out).display(),
        );
        let run = std::process::Command::new("bash")
            .args(["-c", &script, env!("CARGO_BIN_EXE_longread")])
            .stdin(std::fs::File::open(&clean).unwrap())
            .output()
            .expect("running bash");
        assert!(run.status.success(), "{input}: {}", String::from_utf8_lossy(&run.stderr));
        std::fs::read(tmp.path().join(out).join("fold-2/model.safetensors")).unwrap()
    };
    let from_file = cv_from(&clean.display().to_string(), "cv-file");
    assert_eq!(cv_from(&format!("<(cat {})", clean.display()), "cv-pipe"), from_file, "a pipe");
    assert_eq!(cv_from("-", "cv-stdin"), from_file, "standard input");
    let han = tmp.path().join("han");
    let run = common::longread_stdin(
        &["train", "--arch", "han", "--train", "-", "--out", han.to_str().unwrap(), "--epochs", "1"],
        &clean,
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
}

/// Regression: --resume silently ran with changed flags or data, or with another --out.
/// (That --out holds no untrained model before the first epoch ends: `run::output` tests.)
#[test]
fn a_run_resumes_only_as_it_was_started() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 8);
    let model = fixture("hier/bert-attention");
    let base = |out: &Path| -> Vec<String> {
        ["train", "--model", model.to_str().unwrap(), "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()]
            .iter()
            .chain(&[
                "--dev-split",
                "0.25",
                "--freeze-base",
                "--batch-size",
                "2",
                "--seed",
                "4",
                "--log-format",
                "json",
            ])
            .map(|s| s.to_string())
            .collect()
    };
    // A run stopped after epoch 1, then resumed with other settings or data: refused at once.
    let out = tmp.path().join("stopped");
    let run = |extra: &[&str]| {
        let mut args = base(&out);
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        longread(&refs)
    };
    assert!(run(&["--epochs", "2", "--stop-after-epoch", "1"]).status.success());
    assert!(out.join("model.safetensors").exists(), "the best model after epoch 1");
    // Run again without --resume: the hint says how to continue it.
    assert_clean_failure(
        &run(&["--epochs", "2"]),
        "already exists; choose another --out, or continue its run with --resume auto",
    );
    let changed = run(&["--epochs", "3", "--lr", "3e-5", "--resume", "auto"]);
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert_eq!(changed.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("epochs: the run used 2, this command gives 3"), "{stderr}");
    assert!(stderr.contains("lr: the run used 0.00002, this command gives 0.00003"), "{stderr}");
    std::fs::write(&data, std::fs::read_to_string(&data).unwrap().replacen("\"label\"", "\"label\" ", 1)).unwrap();
    let other_data = run(&["--epochs", "2", "--resume", "auto"]);
    assert!(String::from_utf8_lossy(&other_data.stderr).contains("data-fingerprints"), "changed data refused");
    synthetic_for_fixture_models(&data, 8);
    // A checkpoint of this run given with another --out: refused before anything is written.
    let elsewhere = tmp.path().join("elsewhere");
    let mut args = base(&elsewhere);
    args.extend(["--epochs", "2", "--resume"].map(String::from));
    args.push(out.join("checkpoint-last").display().to_string());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_clean_failure(&longread(&refs), "belongs to the run in");
    assert!(!elsewhere.exists());
    // The same settings resume and finish (the log format may change).
    let mut same = base(&out);
    same.retain(|a| a != "json" && a != "--log-format");
    same.extend(["--epochs", "2", "--resume", "auto", "-q"].map(String::from));
    let refs: Vec<&str> = same.iter().map(String::as_str).collect();
    let resumed = longread(&refs);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
}

/// Regression: flags that did not apply were silently ignored, and out-of-range numbers
/// silently changed the run.
#[test]
fn flags_that_do_not_apply_and_numbers_out_of_range_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("hier/bert-mean");
    let data = fixture("synthetic/train.jsonl");
    let out = tmp.path().join("o");
    let refused = |extra: &[&str], needle: &str| {
        assert_clean_failure(&train(&model, &data, &out, extra), needle);
        assert!(!out.exists(), "nothing written for {extra:?}");
    };
    // HAN-only flags, even at their default values.
    refused(&["--dropout", "0.5"], "--dropout applies only to --arch han");
    refused(&["--attention-penalty", "0.1"], "--attention-penalty applies only to --arch han");
    refused(&["--embedding-dim", "100"], "--embedding-dim applies only to --arch han");
    refused(&["--word-vectors", model.to_str().unwrap()], "--word-vectors applies only to --arch han");
    refused(&["--train-embeddings", "--freeze-bottom", "2"], "--train-embeddings contradicts --freeze-bottom");
    refused(&["--lr", "0"], "--lr 0: a learning rate must be a number above 0");
    refused(&["--lr=-1e-5"], "--lr -0.00001: a learning rate must be a number above 0");
    refused(&["--head-lr=-1"], "--head-lr -1");
    refused(&["--warmup-ratio", "1.5"], "--warmup-ratio 1.5: must be in [0, 1]");
    refused(&["--layer-lr-decay", "0"], "--layer-lr-decay 0: must be in (0, 1]");
    refused(&["--layer-lr-decay", "1.2"], "--layer-lr-decay 1.2");
    refused(&["--max-grad-norm=-1"], "--max-grad-norm -1");
    refused(&["--adam-beta1", "1"], "--adam-beta1 1: must be in [0, 1)");
    refused(&["--adam-epsilon", "0"], "--adam-epsilon 0");
    let both = train(&model, &data, &out, &["--warmup-ratio", "0.1", "--warmup-steps", "3"]);
    assert_eq!(both.status.code(), Some(2), "clap refuses both warm-up flags");
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
    // The HAN refuses the encoder's batching and cache flags.
    let han = |extra: &[&str]| {
        let mut args =
            vec!["train", "--arch", "han", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        longread(&args)
    };
    assert_clean_failure(&han(&["--max-batch-tokens", "512"]), "--max-batch-tokens does not apply to --arch han");
    assert_clean_failure(&han(&["--cache-memory", "10"]), "--cache-memory does not apply to --arch han");
    assert_clean_failure(&han(&["--dropout", "1.5"]), "--dropout 1.5: must be in [0, 1)");
    // init: --attention-heads only with multihead pooling.
    let init = longread(&[
        "init",
        "--encoder",
        fixture("tiny-bert").to_str().unwrap(),
        "--labels",
        "a,b",
        "--out",
        out.to_str().unwrap(),
        "--attention-heads",
        "2",
    ]);
    assert_clean_failure(&init, "--attention-heads applies only to --pooling multihead");
}

/// The first 12 synthetic training documents with their labels mapped onto the fixture model's
/// (general/teen/mature), written to `path`.
fn write_mapped_training_data(path: &Path) {
    let text: String = std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(12)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, text.replace("\"rain\"", "\"teen\"").replace("\"prices\"", "\"mature\"")).unwrap();
}

#[test]
fn a_run_stopped_and_resumed_ends_like_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    write_mapped_training_data(&p("train.jsonl"));
    let model = fixture("hier/bert-attention");
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["--dev-split", "0.25", "--epochs", "3", "--lr", "1e-3", "--batch-size", "3", "--seed", "5"];
        args.extend_from_slice(extra);
        train(&model, &p("train.jsonl"), &p(out), &args)
    };

    let whole = run("whole", &[]);
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    assert_clean_failure(&run("sliced", &["--resume", "auto"]), "nothing to resume: ");
    assert_clean_failure(
        &run("sliced", &["--resume", "auto"]),
        "sliced does not exist (start the run without --resume)",
    );
    let finished = run("whole", &["--resume", "auto"]);
    assert_clean_failure(&finished, "nothing to resume: the run in ");
    assert_clean_failure(&finished, "has finished (its checkpoint-last/ is removed at the end); to train further");
    let first = run("sliced", &["--stop-after-epoch", "1"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(p("sliced").join("checkpoint-last/optimizer.safetensors").is_file());
    assert_clean_failure(&run("sliced", &[]), "--resume auto");
    let rest = run("sliced", &["--resume", "auto"]);
    assert!(rest.status.success(), "{}", String::from_utf8_lossy(&rest.stderr));

    let load =
        |d: &str| candle_core::safetensors::load(p(d).join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let (a, b) = (load("whole"), load("sliced"));
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs");
    }
    let lines = |d: &str| std::fs::read_to_string(p(d).join("metrics.jsonl")).unwrap().lines().count();
    assert_eq!((lines("whole"), lines("sliced")), (3, 3));
}

/// A flipped byte in checkpoint weights must not be resumed from silently.
#[test]
fn a_checkpoint_with_a_flipped_byte_is_refused_not_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    write_mapped_training_data(&p("train.jsonl"));
    let model = fixture("hier/bert-attention");
    let args = ["--dev-split", "0.25", "--epochs", "2", "--lr", "1e-3", "--batch-size", "3", "--seed", "5"];
    let first = train(&model, &p("train.jsonl"), &p("run"), &[&args[..], &["--stop-after-epoch", "1"]].concat());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let checkpoint = p("run").join("checkpoint-last");
    let sums: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("checksums.json")).unwrap()).unwrap();
    assert!(sums["crc32"]["model.safetensors"].is_string() && sums["crc32"]["optimizer.safetensors"].is_string());
    // Flip one bit in the middle of the weights (still a finite number: only the checksum sees it).
    let weights = checkpoint.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&weights, &bytes).unwrap();
    let resumed = train(&model, &p("train.jsonl"), &p("run"), &[&args[..], &["--resume", "auto"]].concat());
    assert_clean_failure(&resumed, "model.safetensors does not match its checksum");
    // Put the byte back: the run resumes.
    bytes[middle] ^= 0x01;
    std::fs::write(&weights, &bytes).unwrap();
    let resumed = train(&model, &p("train.jsonl"), &p("run"), &[&args[..], &["--resume", "auto"]].concat());
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
}

#[test]
fn flags_come_from_a_toml_file_and_the_command_line_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("run.toml");
    std::fs::write(&config, "freeze_base = true\nepochs = 3\nhead-lr = 0.01\nschedule = \"cosine\"\nseed = 9\n")
        .unwrap();
    let text: String = std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(8)
        .map(|l| format!("{l}\n"))
        .collect();
    let data = tmp.path().join("train.jsonl");
    std::fs::write(&data, text.replace("\"rain\"", "\"teen\"").replace("\"prices\"", "\"mature\"")).unwrap();
    let out = tmp.path().join("out");
    let o = train(
        &fixture("hier/bert-mean"),
        &data,
        &out,
        &["--config", config.to_str().unwrap(), "--epochs", "2", "--dev-split", "0.25"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let args: Value = serde_json::from_str(&std::fs::read_to_string(out.join("training_args.json")).unwrap()).unwrap();
    assert_eq!(
        (args["freeze_base"].clone(), args["head_lr"].clone(), args["seed"].clone()),
        (true.into(), 0.01.into(), 9.into())
    );
    assert_eq!(args["schedule"], "cosine", "recorded as spelled on the command line");
    assert_eq!(args["epochs"], 2, "the command line overrides the file");
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "epochs = { n = 1 }\n").unwrap();
    let o = train(&fixture("hier/bert-mean"), &data, &tmp.path().join("o2"), &["--config", bad.to_str().unwrap()]);
    assert_clean_failure(&o, "`epochs` must be a string, number, boolean or a list of them");
    // The file may hold the required flags too.
    let whole = tmp.path().join("whole.toml");
    let (model, out3) = (fixture("hier/bert-mean"), tmp.path().join("o3"));
    std::fs::write(
        &whole,
        format!(
            "model = {:?}\ntrain = {:?}\nout = {:?}\nepochs = 1\nfreeze-base = true\ndev-split = 0.25\n",
            model.to_str().unwrap(),
            data.to_str().unwrap(),
            out3.to_str().unwrap()
        ),
    )
    .unwrap();
    let o = longread(&["-q", "train", "--config", whole.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out3.join("model.safetensors").is_file());
    // --config belongs to `train` alone: clap refuses it elsewhere.
    let o = longread(&["predict", "--model", "train", "--input", "train", "--config", whole.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unexpected argument '--config'"));
}

/// A misspelt or mistyped key in a `--config` file read as a flag the user never typed
/// ("unexpected argument '--epoch'"): a note now says the file gave it.
#[test]
fn a_bad_key_in_the_config_file_is_named_with_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("run.toml");
    let (model, data, out) = (fixture("hier/bert-mean"), fixture("synthetic/train.jsonl"), tmp.path().join("o"));
    for (toml, clap_says, note) in [
        ("epoch = 3\n", "unexpected argument '--epoch'", "`--epoch` came from"),
        ("epochs = \"three\"\n", "invalid value 'three' for '--epochs <EPOCHS>'", "`--epochs` came from"),
    ] {
        std::fs::write(&config, toml).unwrap();
        let o = train(&model, &data, &out, &["--config", config.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(clap_says), "{stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with(&format!("note: {note} {}", config.display())), "{stderr}");
        assert!(!out.exists());
    }
    // An error in the command line's own flags gets no such note.
    std::fs::write(&config, "epochs = 3\n").unwrap();
    let o = train(&model, &data, &out, &["--config", config.to_str().unwrap(), "--lr", "fast"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("note:"), "{stderr}");
}

/// The first `n` synthetic training documents with labels mapped onto the fixture models'
/// general/teen/mature.
fn synthetic_for_fixture_models(path: &Path, n: usize) {
    let text: String = std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(n)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, text.replace("\"rain\"", "\"teen\"").replace("\"prices\"", "\"mature\"")).unwrap();
}

#[test]
fn json_logs_report_phases_steps_and_epochs_and_curves_are_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let out = tmp.path().join("out");
    let args = [
        "--dev-split",
        "0.25",
        "--epochs",
        "3",
        "--unfreeze",
        "0:head,1:top1,2:all",
        "--log-format",
        "json",
        "--seed",
        "2",
    ];
    let o = train(&fixture("hier/bert-attention"), &data, &out, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let events = json_lines(&o.stdout);
    let of = |kind: &str| events.iter().filter(|e| e["event"] == kind).cloned().collect::<Vec<Value>>();
    let phases = of("phase");
    assert_eq!(phases.len(), 3, "{events:?}");
    let trainable: Vec<u64> = phases.iter().map(|p| p["trainable_parameters"].as_u64().unwrap()).collect();
    assert!(trainable[0] < trainable[1] && trainable[1] < trainable[2], "{trainable:?}");
    assert!(phases[2]["total_parameters"].as_u64().unwrap() > trainable[2], "embeddings stay frozen");
    assert_eq!(phases[0]["cache"], "chunk vectors");
    let steps = of("step");
    assert!(!steps.is_empty() && steps.iter().all(|s| s["chunks_per_second"].as_f64().unwrap() > 0.0));
    assert_eq!(of("epoch").len(), 3);
    assert!(of("epoch").iter().all(|e| e["dev"]["macro_f1"].is_number()));
    assert_eq!(of("done")[0]["epochs_run"], 3);
    let png = std::fs::read(out.join("curves.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_clean_failure(
        &train(&fixture("hier/bert-attention"), &data, &tmp.path().join("o2"), &["--unfreeze", "0:all,1:head"]),
        "would freeze again",
    );
}

#[test]
fn killing_a_run_at_any_moment_leaves_a_loadable_model_and_checkpoint() {
    use longread_model::hierarchical::HierarchicalClassifier;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 8);
    let out = tmp.path().join("run");
    // About 30 ms an epoch: a kill lands in the middle of some checkpoint write.
    let epochs = "150";
    let command = |resume: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_longread"));
        c.args(["--quiet", "train", "--model", fixture("hier/bert-attention").to_str().unwrap()]);
        c.args(["--train", data.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dev-split", "0.25"]);
        c.args(["--epochs", epochs, "--patience", "0", "--freeze-base", "--batch-size", "2", "--seed", "4"]);
        if resume {
            c.args(["--resume", "auto"]);
        }
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        c
    };
    let epoch_of = |dir: &Path| -> u64 {
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("trainer_state.json")).unwrap()).unwrap();
        state["state"]["epoch"].as_u64().unwrap()
    };
    let checkpoint = out.join("checkpoint-last");
    let mut last_epoch = 0;
    let mut completed = false;
    // Kills spread over start-up, the first epochs and the middle of the run; on a loaded
    // machine where no epoch finished in time, longer runs follow until one has.
    let delays = [30u64, 150, 260, 410, 330, 520, 90, 700, 460, 610];
    let extra = [1_000u64, 2_000, 4_000, 8_000, 16_000];
    for (i, &delay_ms) in delays.iter().chain(&extra).enumerate() {
        if i >= delays.len() && last_epoch > 0 {
            break;
        }
        let resume = checkpoint.exists();
        if !resume && out.exists() {
            std::fs::remove_dir_all(&out).unwrap(); // killed before its first checkpoint
        }
        let mut child = command(resume).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        if child.try_wait().unwrap().is_some_and(|status| status.success()) {
            completed = true; // the whole run finished before the kill
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
        // Before the first epoch ends --out holds no model; from then on it holds a whole one.
        if out.join("model.safetensors").exists() {
            HierarchicalClassifier::load(&out, false, &candle_core::Device::Cpu)
                .unwrap_or_else(|e| panic!("model after a kill at {delay_ms} ms: {e}"));
        }
        if checkpoint.exists() {
            HierarchicalClassifier::load(&checkpoint, true, &candle_core::Device::Cpu)
                .unwrap_or_else(|e| panic!("checkpoint after a kill at {delay_ms} ms: {e}"));
            candle_core::safetensors::load(checkpoint.join("optimizer.safetensors"), &candle_core::Device::Cpu)
                .unwrap();
            let epoch = epoch_of(&checkpoint);
            assert!(epoch >= last_epoch, "the checkpoint never goes back");
            last_epoch = epoch;
        }
    }
    assert!(last_epoch > 0 || completed, "some epochs completed between the kills");
    if !completed {
        let finish = command(checkpoint.exists()).status().unwrap();
        assert!(finish.success());
    }
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let epochs_logged: Vec<u64> =
        metrics.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["epoch"].as_u64().unwrap()).collect();
    assert_eq!(epochs_logged, (1..=150).collect::<Vec<_>>(), "one line per epoch, none lost or repeated");
    assert!(
        !checkpoint.exists()
            && std::fs::read_dir(&out).unwrap().flatten().all(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                !name.starts_with("checkpoint-") && !name.starts_with(".longread")
            })
    );
}

#[test]
fn multi_task_training_evaluates_and_predicts_every_task() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    // Task "topic" (the model's own labels, from the "label" column) and task "size" (a new
    // head; labels from the data), which every third document lacks.
    let lines: Vec<Value> = std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(16)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut lengths: Vec<usize> = lines.iter().map(|v| v["text"].as_str().unwrap().len()).collect();
    lengths.sort_unstable();
    let median = lengths[lengths.len() / 2];
    let mut text = String::new();
    for (i, v) in lines.iter().enumerate() {
        let label = if v["label"] == "rain" { "teen" } else { "mature" };
        let mut line = serde_json::json!({"text": v["text"], "label": label});
        if i % 3 != 0 {
            line["size"] = if v["text"].as_str().unwrap().len() >= median { "long" } else { "short" }.into();
        }
        text += &format!("{line}\n");
    }
    std::fs::write(p("train.jsonl"), &text).unwrap();
    let model = fixture("hier/bert-attention");
    let data = p("train.jsonl");
    let common = ["--dev", data.to_str().unwrap(), "--epochs", "2", "--seed", "3", "--log-format", "json"];
    let bad = |extra: &[&str]| train(&model, &data, &p("bad"), &[&common[..], extra].concat());
    assert_clean_failure(&bad(&["--task", "topic=label", "--task-weight", "nope=2"]), "--task-weight nope");
    assert_clean_failure(&bad(&["--task", "topic=label", "--freeze-task", "nope"]), "--freeze-task nope");
    assert_clean_failure(&bad(&["--task", "topic"]), "expected NAME=VALUE");
    assert_clean_failure(
        &bad(&["--task", "topic=label", "--task", "x=missing_column"]),
        "fewer than 2 distinct labels",
    );

    let extra = ["--task", "topic=label", "--task", "size=size", "--task-weight", "size=0.5"];
    let out = train(&model, &data, &p("multi"), &[&common[..], &extra[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let epochs: Vec<Value> = json_lines(&out.stdout).into_iter().filter(|e| e["event"] == "epoch").collect();
    let names: Vec<&str> = epochs[1]["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["topic", "size"]);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(p("multi").join("config.json")).unwrap()).unwrap();
    assert_eq!(config["longread"]["tasks"][1]["column"], "size");
    assert_eq!(config["longread"]["tasks"][1]["labels"], serde_json::json!(["long", "short"]));

    let eval = longread(&["eval", "--model", p("multi").to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"]);
    assert!(eval.status.success(), "{}", String::from_utf8_lossy(&eval.stderr));
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(report["tasks"]["size"]["examples"], 10, "documents without a size label are not counted");
    assert_eq!(report["tasks"]["topic"]["examples"], 16);
    assert_eq!(report["accuracy"], report["tasks"]["topic"]["accuracy"]);
    let table = longread(&["eval", "--model", p("multi").to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("task size (column \"size\", 10 documents)"));

    let predict = longread(&["predict", "--model", p("multi").to_str().unwrap(), "--input", data.to_str().unwrap()]);
    assert!(predict.status.success());
    let first = &json_lines(&predict.stdout)[0];
    assert!(["long", "short"].contains(&first["tasks"]["size"]["label"].as_str().unwrap()), "{first}");
    assert_eq!(
        first["tasks"]["size"]["attention"].as_array().unwrap().len(),
        first["chunks"].as_array().unwrap().len()
    );
}

#[test]
fn bf16_training_and_prediction_run_and_stay_close_to_f32() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let out = tmp.path().join("bf16");
    let args = ["--dev-split", "0.25", "--epochs", "2", "--precision", "bf16", "--freeze-bottom", "1", "--seed", "2"];
    let o = train(&fixture("hier/bert-attention"), &data, &out, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let args: Value = serde_json::from_str(&std::fs::read_to_string(out.join("training_args.json")).unwrap()).unwrap();
    assert_eq!(args["precision"], "bf16");
    let weights = candle_core::safetensors::load(out.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    assert!(weights.values().all(|t| t.dtype() == candle_core::DType::F32), "master weights stay f32");

    let predict = |precision: &str| {
        let o = longread(&[
            "predict",
            "--model",
            out.to_str().unwrap(),
            "--input",
            data.to_str().unwrap(),
            "--precision",
            precision,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        json_lines(&o.stdout)
    };
    let (full, half) = (predict("f32"), predict("bf16"));
    assert!(!full.is_empty() && full.len() == half.len(), "both precisions score every document");
    let largest = full
        .iter()
        .zip(&half)
        .flat_map(|(a, b)| {
            let (a, b) = (a["scores"].as_object().unwrap(), b["scores"].as_object().unwrap());
            a.iter().map(|(k, v)| (v.as_f64().unwrap() - b[k].as_f64().unwrap()).abs()).collect::<Vec<_>>()
        })
        .fold(0.0, f64::max);
    assert!(largest < 0.05, "probabilities differ by {largest}");
}

/// `train` fills its cache with the int8 encoder that makes `predict` faster. Head-only
/// training with `--precision int8` encodes the chunks with int8 products,
/// keeps them in the vector cache under their own key, and `predict --precision int8` then
/// reuses them; fine-tuning and pretraining in int8 are refused with the way out.
#[test]
fn head_only_training_fills_the_vector_cache_with_the_int8_encoder() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let (out, cache) = (tmp.path().join("int8"), tmp.path().join("vectors"));
    let args = [
        "--dev-split",
        "0.25",
        "--epochs",
        "2",
        "--precision",
        "int8",
        "--freeze-base",
        "--seed",
        "2",
        "--vector-cache",
        cache.to_str().unwrap(),
    ];
    let o = train(&fixture("hier/bert-attention"), &data, &out, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = |dir: &Path| -> usize { walk(dir).into_iter().filter(|p| p.is_file()).count() };
    let filled = files(&cache);
    assert!(filled > 0, "the cache was filled");
    let predict = |precision: &str| {
        let o = longread(&[
            "predict",
            "--model",
            out.to_str().unwrap(),
            "--input",
            data.to_str().unwrap(),
            "--precision",
            precision,
            "--vector-cache",
            cache.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        json_lines(&o.stdout)
    };
    let int8 = predict("int8");
    assert!(!int8.is_empty());
    assert_eq!(files(&cache), filled, "predict --precision int8 read the vectors training made");
    let full = predict("f32");
    assert_eq!(full.len(), int8.len());
    assert!(files(&cache) > filled, "f32 vectors are kept apart from int8 ones");

    let refused = train(&fixture("hier/bert-attention"), &data, &tmp.path().join("x"), &["--precision", "int8"]);
    assert_clean_failure(&refused, "--freeze-base");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("f32 or bf16"));
    assert!(!tmp.path().join("x").exists());
    let tokenizer = fixture("tiny-roberta/tokenizer.json");
    let y = tmp.path().join("y");
    let pretrain = longread(&[
        "pretrain",
        "--corpus",
        data.to_str().unwrap(),
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--preset",
        "tiny",
        "--out",
        y.to_str().unwrap(),
        "--precision",
        "int8",
    ]);
    assert_clean_failure(&pretrain, "f32 or bf16");
    assert!(!y.exists(), "nothing written");
}

/// Every long phase is resumable. With `--freeze-bottom K` and `--vector-cache DIR`
/// the frozen layers' outputs are kept in DIR document by document as they are computed, so a
/// run stopped while filling them (or any later run on the same encoder) reads them back; the
/// model trained is the one trained without the store.
#[test]
fn frozen_layer_outputs_are_kept_in_the_vector_cache_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let store = tmp.path().join("store");
    let base = ["--dev-split", "0.25", "--epochs", "2", "--freeze-bottom", "1", "--seed", "3"];
    let run = |name: &str, with_store: bool| {
        let out = tmp.path().join(name);
        let mut args = base.to_vec();
        if with_store {
            args.extend(["--vector-cache", store.to_str().unwrap()]);
        }
        let o = train(&fixture("hier/bert-attention"), &data, &out, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (std::fs::read(out.join("model.safetensors")).unwrap(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let reused_chunks = |log: &str| -> usize {
        let before = log.split(" chunks reused)").next().unwrap();
        before.rsplit('(').next().unwrap().parse().unwrap_or_else(|_| panic!("no reuse count in {log}"))
    };
    let cached_chunks = |log: &str| -> usize {
        let after = log.split("cached ").nth(1).unwrap();
        after.split(' ').next().unwrap().parse().unwrap()
    };
    let (plain, _) = run("plain", false);
    let (filled, log) = run("filled", true);
    // The synthetic documents repeat texts: a repeated document is read back even in the
    // first run, the others are computed.
    let total = cached_chunks(&log);
    assert!(reused_chunks(&log) < total / 2, "the first run computes most chunks: {log}");
    let stored = walk(&store).into_iter().filter(|p| p.extension().is_some_and(|e| e == "pfx")).count();
    assert!(stored > 0 && stored <= 12, "one file per distinct document: {stored}");
    let (reused, log) = run("reused", true);
    assert_eq!(reused_chunks(&log), total, "the second run reads every chunk back: {log}");
    assert!(plain == filled && filled == reused, "the store does not change the model trained");
}

/// Fixed defaults do not fit every run: 3 epochs at 2e-5 undertrained the single-chunk baseline,
/// and head-only runs need an epoch count of their own. The defaults depend on what trains,
/// and training_args.json records them.
#[test]
fn defaults_depend_on_what_trains_and_are_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("train.jsonl");
    synthetic_for_fixture_models(&data, 12);
    let raw = fixture("synthetic/train.jsonl");
    // (model, data, flags, expected (epochs, patience, lr))
    type Case<'a> = (&'a str, &'a Path, &'a [&'a str], (u64, u64, f64));
    let cases: [Case; 3] = [
        ("hier/bert-attention", &data, &["--freeze-base"], (30, 8, 2e-5)),
        ("seq/bert", &raw, &[], (6, 0, 5e-5)),
        ("hier/bert-attention", &data, &[], (3, 0, 2e-5)),
    ];
    for (i, (model, data, extra, (epochs, patience, lr))) in cases.into_iter().enumerate() {
        let out = tmp.path().join(format!("run{i}"));
        let mut args = vec!["--stop-after-epoch", "1", "--dev-split", "0.25"];
        args.extend_from_slice(extra);
        let o = train(&fixture(model), data, &out, &args);
        assert!(o.status.success(), "{model}: {}", String::from_utf8_lossy(&o.stderr));
        let recorded: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("training_args.json")).unwrap()).unwrap();
        assert_eq!(recorded["epochs"], epochs, "{model} {extra:?}: {recorded}");
        assert_eq!(recorded["patience"], patience, "{model} {extra:?}");
        assert_eq!(recorded["lr"].as_f64(), Some(lr), "{model} {extra:?}");
    }
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

#[test]
fn cross_validation_trains_one_run_per_fold_and_summarises_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cv");
    let model = tmp.path().join("init");
    init_tiny(&model);
    let run = train(
        &model,
        &fixture("synthetic/train.jsonl"),
        &out,
        &["--cv", "3", "--freeze-base", "--epochs", "20", "--head-lr", "3e-2", "--seed", "3", "--log-format", "json"],
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let lines = json_lines(&run.stdout);
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    let cv: Value = serde_json::from_str(&std::fs::read_to_string(out.join("cv.json")).unwrap()).unwrap();
    assert_eq!(done["cv"], cv);
    let results = cv["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let total = std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap().lines().count() as u64;
    let held_out: u64 = results.iter().map(|r| r["dev_documents"].as_u64().unwrap()).sum();
    assert_eq!(held_out, total, "every document is held out exactly once");
    let f1: Vec<f64> = results.iter().map(|r| r["macro_f1"].as_f64().unwrap()).collect();
    let mean = f1.iter().sum::<f64>() / 3.0;
    assert!((cv["macro_f1_mean"].as_f64().unwrap() - mean).abs() < 1e-12);
    // Each fold's ROC-AUC at its kept epoch is the one its log has, and cv.json their mean.
    let aucs: Vec<f64> = results.iter().map(|r| r["roc_auc"].as_f64().unwrap()).collect();
    assert!((cv["roc_auc_mean"].as_f64().unwrap() - aucs.iter().sum::<f64>() / 3.0).abs() < 1e-12, "{cv}");
    for (fold, auc) in results.iter().zip(&aucs) {
        let logs = std::fs::read_to_string(Path::new(fold["out"].as_str().unwrap()).join("metrics.jsonl")).unwrap();
        let kept: Vec<Value> =
            logs.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|l| l["saved"] == true).collect();
        assert_eq!(kept.last().unwrap()["dev"]["roc_auc"].as_f64(), Some(*auc), "{fold}");
    }
    for fold in 1..=3 {
        let dir = out.join(format!("fold-{fold}"));
        assert!(dir.join("model.safetensors").is_file() && dir.join("metrics.jsonl").is_file(), "{}", dir.display());
    }
    // Each fold's best model is a model like any other.
    assert!(accuracy(&out.join("fold-1"), &fixture("synthetic/test.jsonl")) > 0.5);
    // Out of fold: every training document, in the file's order, as `predict` with the model
    // of the fold that held it out classifies it; cv.json scores them together.
    let oof = json_lines(&std::fs::read(out.join("out-of-fold.jsonl")).unwrap());
    assert_eq!(oof.len() as u64, total);
    let ids: Vec<&str> = oof.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, (0..total).map(|i| format!("d{i}")).collect::<Vec<_>>(), "in the training file's order");
    for fold in 1..=3 {
        let dir = out.join(format!("fold-{fold}"));
        let dev = out.join(format!("cv-data/fold-{fold}-dev.jsonl"));
        let predicted = longread(&["predict", "--model", dir.to_str().unwrap(), "--input", dev.to_str().unwrap()]);
        assert!(predicted.status.success(), "{}", String::from_utf8_lossy(&predicted.stderr));
        let predicted = json_lines(&predicted.stdout);
        let mine: Vec<&Value> = oof.iter().filter(|l| l["fold"] == fold).collect();
        assert_eq!(mine.len(), predicted.len(), "fold {fold}");
        for (line, prediction) in mine.iter().zip(&predicted) {
            assert_eq!((&line["id"], &line["predicted"]), (&prediction["id"], &prediction["label"]));
            for (label, p) in prediction["scores"].as_object().unwrap() {
                let diff = (line["scores"][label].as_f64().unwrap() - p.as_f64().unwrap()).abs();
                assert!(diff < 1e-6, "{line} against {prediction}");
            }
        }
    }
    let right = oof.iter().filter(|l| l["label"] == l["predicted"]).count();
    let pooled = &cv["out_of_fold"];
    assert_eq!(pooled["documents"].as_u64(), Some(total));
    assert!((pooled["accuracy"].as_f64().unwrap() - right as f64 / total as f64).abs() < 1e-12, "{pooled}");
    let log_loss = oof.iter().map(|l| -l["scores"][l["label"].as_str().unwrap()].as_f64().unwrap().ln()).sum::<f64>();
    assert!((pooled["log_loss"].as_f64().unwrap() - log_loss / total as f64).abs() < 1e-5, "{pooled}");
    assert!(pooled["macro_f1"].as_f64().is_some() && pooled["roc_auc"].as_f64().is_some(), "{pooled}");
    // With a --vector-cache the out-of-fold pass reads the frozen encoder's vectors from it:
    // the same predictions.
    let (cached, cache) = (tmp.path().join("cv-cached"), tmp.path().join("vc"));
    let flags = ["--cv", "3", "--freeze-base", "--epochs", "20", "--head-lr", "3e-2", "--seed", "3", "--vector-cache"];
    let run =
        train(&model, &fixture("synthetic/train.jsonl"), &cached, &[&flags[..], &[cache.to_str().unwrap()]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let predictions = |d: &Path| std::fs::read(d.join("out-of-fold.jsonl")).unwrap();
    assert!(predictions(&cached) == predictions(&out), "the same out-of-fold predictions from the vector cache");
    let refused =
        train(&model, &fixture("synthetic/train.jsonl"), &tmp.path().join("x"), &["--cv", "3", "--dev-split", "0.2"]);
    assert_clean_failure(&refused, "drop --dev and --dev-split");
}

#[test]
fn keep_last_keeps_the_last_epoch_in_runs_and_cv_folds() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let head = ["--freeze-base", "--epochs", "4", "--head-lr", "3e-2", "--seed", "3", "--keep", "last"];
    let run = train(&model, &data, &tmp.path().join("last"), &[&head[..], &["--log-format", "json"]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).pop().unwrap();
    assert_eq!((done["event"].as_str(), done["kept_epoch"].as_u64()), (Some("done"), Some(4)));
    let metrics = json_lines(&std::fs::read(tmp.path().join("last/metrics.jsonl")).unwrap());
    assert_eq!(metrics.len(), 4);
    assert!(metrics.iter().all(|m| m["saved"] == true), "every epoch saved in turn: {metrics:?}");
    // For people, the last line names the epoch in OUT: the last, best or not.
    let run = train(&model, &data, &tmp.path().join("last-text"), &head);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("best epoch 4 (") || stderr.contains("last epoch (--keep last) 4 ("), "{stderr}");
    // A --cv fold reports the epoch it kept: the last, with its dev metrics.
    let cv = tmp.path().join("cv");
    let run = train(&model, &data, &cv, &[&head[..], &["--cv", "2"]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(cv.join("cv.json")).unwrap()).unwrap();
    for fold in summary["results"].as_array().unwrap() {
        assert_eq!(fold["best_epoch"], 4, "{fold}");
        let dir = fold["out"].as_str().unwrap();
        let last = json_lines(&std::fs::read(Path::new(dir).join("metrics.jsonl")).unwrap()).pop().unwrap();
        assert_eq!(fold["macro_f1"], last["dev"]["macro_f1"]);
    }
    let (data, bow) = (data.to_str().unwrap(), tmp.path().join("bow"));
    let bow = longread(&["train", "--arch", "bow", "--train", data, "--out", bow.to_str().unwrap(), "--keep", "last"]);
    assert_clean_failure(&bow, "--keep does not apply to --arch bow");
}

/// `--dev-split 0` trains on every document (a final model after --cv chose the settings):
/// every epoch is kept, the logs carry no dev results, and OUT classifies as any model; the
/// HAN too. Dev-metric flags are refused by name, and `--cv` still holds out its folds.
#[test]
fn a_run_without_a_dev_set_trains_on_every_document_and_keeps_the_last_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let documents = std::fs::read_to_string(&data).unwrap().lines().count();
    let head = ["--freeze-base", "--epochs", "30", "--head-lr", "3e-2", "--seed", "3", "--dev-split", "0"];
    let out = tmp.path().join("all");
    let run = train(&model, &data, &out, &[&head[..], &["--log-format", "json"]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let done = json_lines(&run.stdout).pop().unwrap();
    assert_eq!((done["kept_epoch"].as_u64(), done["best_epoch"].is_null()), (Some(30), true), "{done}");
    let metrics = json_lines(&std::fs::read(out.join("metrics.jsonl")).unwrap());
    assert_eq!(metrics.len(), 30);
    for m in &metrics {
        assert!(m.get("dev").is_none() && m.get("dev_loss").is_none() && m["saved"] == true, "{m}");
    }
    assert!(accuracy(&out, &fixture("synthetic/test.jsonl")) > 0.5, "the kept model classifies");
    let text = train(&model, &data, &tmp.path().join("all-text"), &head);
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(stderr.contains(&format!("with {documents} documents")) && stderr.contains("no dev set"), "{stderr}");
    assert!(stderr.contains("epoch 30: train loss") && stderr.contains("last epoch 30 (no dev set)"), "{stderr}");

    let han = tmp.path().join("han");
    let (d, h) = (data.to_str().unwrap(), han.to_str().unwrap());
    let run = longread(&["train", "--arch", "han", "--train", d, "--out", h, "--epochs", "2", "--dev-split", "0"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(json_lines(&std::fs::read(han.join("metrics.jsonl")).unwrap()).len(), 2);
    assert!(han.join("model.safetensors").exists());

    let refused = train(&model, &data, &tmp.path().join("best"), &[&head[..], &["--keep", "best"]].concat());
    assert_clean_failure(&refused, "--keep best picks the epoch with the best dev metric, but --dev-split 0");
    let cv = train(&model, &data, &tmp.path().join("cv"), &[&head[..], &["--cv", "2"]].concat());
    assert_clean_failure(&cv, "--dev-split");
}

/// Starts `longread ARGS`, sends it SIGINT once `metrics` has `lines` lines, and returns its
/// output (stderr captured).
#[cfg(unix)]
fn interrupt_when(args: &[&str], metrics: &Path, lines: usize) -> std::process::Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(metrics).map_or(0, |m| m.lines().count()) < lines {
        assert!(started.elapsed().as_secs() < 120, "no epoch recorded in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: sends SIGINT to the child this function spawned and has not waited for yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    child.wait_with_output().unwrap()
}

/// Ctrl-C while a frozen encoder fills `--vector-cache` stops the fill between groups (not at
/// the end, however long); what the cache holds is kept, and the
/// same command starts again from there (nothing had trained, so there is no checkpoint and
/// the message says so).
#[cfg(unix)]
#[test]
fn ctrl_c_while_filling_the_vector_cache_stops_and_the_rerun_reads_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("init");
    init_tiny(&model);
    // Thousands of distinct documents of many chunks: seconds of encoding on one thread.
    let words = ["rain", "prices", "wind", "market", "coast", "budget", "storm", "shares", "cloud", "rates"];
    let data = dir.path().join("many.jsonl");
    let lines: String = (0..2000)
        .map(|i| {
            let text: Vec<&str> = (0..300).map(|k| words[(i * 7 + k * (i % 5 + 1)) % words.len()]).collect();
            let label = if i % 2 == 0 { "rain" } else { "prices" };
            format!("{}\n", serde_json::json!({"id": i, "text": format!("{i} {}", text.join(" ")), "label": label}))
        })
        .collect();
    std::fs::write(&data, lines).unwrap();
    let (out, cache) = (dir.path().join("head"), dir.path().join("vectors"));
    let flags = ["--freeze-base", "--epochs", "1", "--threads", "1", "--vector-cache", cache.to_str().unwrap()];
    let args = train_args(&model, &data, &out, &flags);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let stored = || std::fs::read_dir(&cache).map_or(0, |d| d.count());
    while stored() == 0 {
        assert!(started.elapsed().as_secs() < 120, "nothing cached in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: sends SIGINT to the child spawned above, not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let stopped = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted while filling the chunk-vector cache"), "{stderr}");
    assert!(stderr.contains("the same command starts the run again") && !stderr.contains("--resume auto"), "{stderr}");
    let kept = stored();
    assert!(kept > 0 && kept < 2000, "the fill stopped part-way: {kept} documents stored");
    assert!(!out.exists(), "nothing trained: no run directory left to refuse the rerun");

    let rerun = train(&model, &data, &out, &flags);
    assert!(rerun.status.success(), "{}", String::from_utf8_lossy(&rerun.stderr));
    assert!(stored() > kept, "the rerun filled the rest");
}

/// Ctrl-C in a `--cv` run stops it resumably: `--resume auto` reads back the finished fold,
/// resumes the interrupted one and ends with the folds and summary of an uninterrupted run.
#[cfg(unix)]
#[test]
fn ctrl_c_in_a_cv_run_resumes_to_the_same_folds() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let flags = ["--cv", "2", "--epochs", "40", "--batch-size", "2", "--seed", "5", "--threads", "1"];
    let full = dir.path().join("full");
    let done = train(&model, &data, &full, &flags);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));

    let out = dir.path().join("cv");
    // Interrupt in the second fold, once it has logged an epoch: the first is finished.
    let stopped = interrupt_when(&train_args(&model, &data, &out, &flags), &out.join("fold-2/metrics.jsonl"), 1);
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("fold 2 of 2: interrupted after optimizer step") && stderr.contains("--resume auto"),
        "{stderr}"
    );
    assert!(!out.join("cv.json").exists());

    let mut changed = flags.to_vec();
    changed.extend_from_slice(&["--resume", "auto", "--lr", "1e-3"]);
    let refused = train(&model, &data, &out, &changed);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lr: the run used 0.00002, this command gives 0.001"), "{stderr}");
    let mut resumed_flags = flags.to_vec();
    resumed_flags.extend_from_slice(&["--resume", "auto"]);
    let resumed = train(&model, &data, &out, &resumed_flags);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("fold 1 of 2") && stderr.contains("finished before"), "{stderr}");
    assert!(stderr.contains("resumed from its checkpoint"), "{stderr}");
    for fold in ["fold-1", "fold-2"] {
        let weights = |d: &Path| std::fs::read(d.join(fold).join("model.safetensors")).unwrap();
        assert!(weights(&full) == weights(&out), "{fold}: interrupted + resumed differs from the uninterrupted run");
    }
    let summary = |d: &Path| {
        let mut cv: Value = serde_json::from_str(&std::fs::read_to_string(d.join("cv.json")).unwrap()).unwrap();
        cv["results"].as_array_mut().unwrap().iter_mut().for_each(|r| r["out"] = Value::Null);
        cv["out_of_fold"]["predictions"] = Value::Null;
        cv
    };
    assert_eq!(summary(&full), summary(&out));
    let predictions = |d: &Path| std::fs::read(d.join("out-of-fold.jsonl")).unwrap();
    assert!(predictions(&full) == predictions(&out), "the same out-of-fold predictions");
    let again = train(&model, &data, &dir.path().join("nothing"), &resumed_flags);
    assert_clean_failure(&again, "nothing to resume");
}

/// Ctrl-C in the middle of a run saves a checkpoint and exits 130; `--resume auto` then ends
/// with exactly the model of a run that was never interrupted.
#[cfg(unix)]
#[test]
fn ctrl_c_saves_a_checkpoint_that_resumes_to_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let flags = ["--epochs", "80", "--batch-size", "2", "--seed", "1", "--threads", "1"];
    let full = dir.path().join("full");
    let done = train(&model, &data, &full, &flags);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));

    let part = dir.path().join("part");
    // Interrupt once two epochs are recorded (well before the 80th).
    let metrics = part.join("metrics.jsonl");
    let stopped = interrupt_when(&train_args(&model, &data, &part, &flags), &metrics, 2);
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted after optimizer step") && stderr.contains("--resume auto"), "{stderr}");
    let epochs_before = std::fs::read_to_string(&metrics).unwrap().lines().count();
    assert!(epochs_before < 80, "the run stopped early ({epochs_before} epochs)");
    assert!(part.join("checkpoint-last").exists(), "{stderr}");

    let mut resumed_flags = flags.to_vec();
    resumed_flags.extend_from_slice(&["--resume", "auto"]);
    let resumed = train(&model, &data, &part, &resumed_flags);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let weights = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(weights(&full) == weights(&part), "interrupted + resumed differs from the uninterrupted run");
    assert_eq!(std::fs::read_to_string(&metrics).unwrap().lines().count(), 80);
}

/// Filling the frozen-encoder cache takes minutes (27 on 2 cores) and must say so when stderr is
/// not a terminal, and not as one `--log-format json` event at the end. Plain lines come at most
/// every LONGREAD_PROGRESS_SECONDS (10 s by default; 0 here), and JSON `caching` events.
#[test]
fn progress_is_reported_when_stderr_is_not_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let run = |out: &str, extra: &[&str]| {
        let out = tmp.path().join(out);
        std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
            .args(train_args(&model, &data, &out, extra))
            .env("LONGREAD_PROGRESS_SECONDS", "0")
            .output()
            .unwrap()
    };
    let flags = ["--freeze-base", "--epochs", "1", "--dev-split", "0.25", "--max-batch-tokens", "16"];
    let text = run("text", &flags);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(stderr.contains("caching frozen layers: ") && stderr.contains("cached "), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("step ")), "{stderr}");
    let json = run("json", &[&flags[..], &["--log-format", "json"]].concat());
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let events = json_lines(&json.stdout);
    let caching = events.iter().filter(|e| e["event"] == "caching").count();
    assert!(caching >= 1, "{events:?}");
    assert!(events.iter().any(|e| e["event"] == "cached"));
}

/// A failed `train --arch bow` (integer labels, no `--labels`) leaves no
/// `OUT/training_args.json`, so that the rerun with `--labels` is not refused ("already exists").
#[test]
fn a_run_that_fails_before_keeping_anything_leaves_no_output_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap();
    let data = tmp.path().join("int.jsonl");
    std::fs::write(&data, text.replace("\"rain\"", "0").replace("\"prices\"", "1")).unwrap();
    let out = tmp.path().join("bow");
    let args = |extra: &[&str]| {
        let mut a = vec!["train", "--arch", "bow", "--train", data.to_str().unwrap(), "--out", out.to_str().unwrap()];
        a.extend_from_slice(extra);
        longread(&a)
    };
    assert_clean_failure(&args(&[]), "an integer label needs the label names");
    assert!(!out.exists(), "nothing kept, nothing left");
    let rerun = args(&["--labels", "rain,prices"]);
    assert!(rerun.status.success(), "{}", String::from_utf8_lossy(&rerun.stderr));
    assert!(out.join("bow.json").exists() && out.join("model.safetensors").exists());
}

/// `train --cv` on a model made by `init --labels` with integer labels in the data reads the
/// labels through the model's, as training does, and does not ask for `--labels`.
#[test]
fn cross_validation_reads_integer_labels_through_the_models_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("init");
    init_tiny(&model);
    let text = std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap();
    let config: Value = serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    let (zero, one) = (config["id2label"]["0"].as_str().unwrap(), config["id2label"]["1"].as_str().unwrap());
    let data = tmp.path().join("int.jsonl");
    std::fs::write(&data, text.replace(&format!("\"{zero}\""), "0").replace(&format!("\"{one}\""), "1")).unwrap();
    let out = tmp.path().join("cv");
    let run = train(&model, &data, &out, &["--cv", "2", "--freeze-base", "--epochs", "1", "-q"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let cv: Value = serde_json::from_str(&std::fs::read_to_string(out.join("cv.json")).unwrap()).unwrap();
    assert_eq!(cv["results"].as_array().unwrap().len(), 2);
}

/// When the bag of words' cross-validation picks the edge of its grid (C = 1000, or 0.1) it
/// says so; and `init` names top-k and ordinal models as such, not "pooling attention".
#[test]
fn an_edge_of_the_c_grid_is_warned_and_init_names_top_k_and_ordinal() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bow");
    let data = fixture("synthetic/train.jsonl");
    let run = longread(&[
        "train",
        "--arch",
        "bow",
        "--train",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--c-values",
        "1000,10000",
        "--cv",
        "2",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("is at the edge of --c-values [1000.0, 10000.0]"), "{stderr}");
    let cv: Value = serde_json::from_str(&std::fs::read_to_string(out.join("cv.json")).unwrap()).unwrap();
    assert_eq!(cv["chosen_at_edge"], true);

    let encoder = fixture("tiny-bert");
    let made = tmp.path().join("ordinal");
    let init = longread(&[
        "init",
        "--encoder",
        encoder.to_str().unwrap(),
        "--labels",
        "general,teen,mature",
        "--out",
        made.to_str().unwrap(),
        "--chunk-size",
        "16",
        "--stride",
        "4",
        "--ordinal",
        "--attention-top-k",
        "2",
    ]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let said = String::from_utf8_lossy(&init.stderr);
    assert!(said.contains("pooling attention over the top 2 chunks, ordinal head"), "{said}");
}

/// The labelled JSON lines as CSV (a header, quoted texts with their quotes doubled).
fn as_csv(jsonl: &Path, csv: &Path) {
    let mut out = String::from("label,text\n");
    for row in json_lines(&std::fs::read(jsonl).unwrap()) {
        let label = match &row["label"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!("{label},\"{}\"\n", row["text"].as_str().unwrap().replace('"', "\"\"")));
    }
    std::fs::write(csv, out).unwrap();
}

/// A CSV file trains, cross-validates and evaluates exactly as the same rows in JSON lines do.
#[test]
fn csv_data_trains_and_evaluates_as_its_json_lines_do() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    write_mapped_training_data(&p("train.jsonl"));
    as_csv(&p("train.jsonl"), &p("train.csv"));
    let model = fixture("hier/bert-attention");
    let flags = ["--epochs", "2", "--lr", "1e-3", "--batch-size", "3", "--seed", "5", "--threads", "1"];
    for (data, out) in [("train.jsonl", "from-jsonl"), ("train.csv", "from-csv")] {
        let run = train(&model, &p(data), &p(out), &[&flags[..], &["--dev-split", "0.25"]].concat());
        assert!(run.status.success(), "{data}: {}", String::from_utf8_lossy(&run.stderr));
        let cv = train(&model, &p(data), &p(&format!("{out}-cv")), &[&flags[..], &["--cv", "2"]].concat());
        assert!(cv.status.success(), "{data} --cv: {}", String::from_utf8_lossy(&cv.stderr));
    }
    let weights = |d: &str| std::fs::read(p(d).join("model.safetensors")).unwrap();
    assert!(weights("from-jsonl") == weights("from-csv"), "the same rows give the same model");
    for fold in ["fold-1", "fold-2"] {
        assert!(weights(&format!("from-jsonl-cv/{fold}")) == weights(&format!("from-csv-cv/{fold}")), "{fold}");
    }
    let eval = |data: &str| {
        let out = longread(&[
            "eval",
            "--model",
            p("from-csv").to_str().unwrap(),
            "--data",
            p(data).to_str().unwrap(),
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    assert_eq!(eval("train.jsonl"), eval("train.csv"));
}

/// A newcomer's first `train --arch bow` on two documents: `--input`/`--output` (as `predict`
/// takes) name `--train`/`--out`, and each refusal names the flag that fixes it (the fold
/// message said "give fewer folds" with no flag for it; a vocabulary with no feature trained a
/// model that ignored every text).
#[test]
fn tiny_bag_of_words_runs_are_refused_naming_the_flag_to_change() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("two.jsonl");
    std::fs::write(
        &data,
        "{\"text\":\"red apples\",\"label\":\"fruit\"}\n{\"text\":\"fast engines\",\"label\":\"cars\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("bow");
    let args = |extra: &[&str]| {
        let mut a =
            vec!["-q", "train", "--arch", "bow", "--input", data.to_str().unwrap(), "--output", out.to_str().unwrap()];
        a.extend_from_slice(extra);
        longread(&a)
    };
    assert_clean_failure(&args(&[]), "`--cv K` sets the folds, `--c-values C` gives one C");
    assert_clean_failure(&args(&["--c-values", "1"]), "would have no features");
    assert_clean_failure(&args(&["--c-values", "1"]), "(`--min-df`)");
    assert!(!out.exists(), "nothing kept, nothing left");
    let run = args(&["--c-values", "1", "--min-df", "1"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(out.join("bow.json").exists());
}

/// `--lr -1` was a clap usage error ("unexpected argument '-1' found") instead of the range
/// check that names the flag; `--freeze-bottom` and `--unfreeze topN` beyond the encoder's
/// layers froze or trained every layer without a word.
#[test]
fn negative_numbers_and_layer_counts_beyond_the_encoder_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("init");
    init_tiny(&model);
    let data = fixture("synthetic/train.jsonl");
    let out = tmp.path().join("out");
    let refused = |extra: &[&str], needle: &str| {
        let run = train(&model, &data, &out, &[&["-q", "--epochs", "1"], extra].concat());
        assert_clean_failure(&run, needle);
        assert!(!out.exists(), "{extra:?}: nothing kept");
    };
    refused(&["--lr", "-1"], "--lr -1: a learning rate must be a number above 0");
    refused(&["--weight-decay", "-0.5"], "--weight-decay -0.5: must be in [0, ∞)");
    refused(&["--dev-split", "-1"], "--dev-split -1: must be in [0, 1)");
    // tiny-bert has 2 layers.
    refused(&["--freeze-bottom", "3"], "--freeze-bottom 3: the encoder has 2 layers");
    refused(&["--unfreeze", "0:head,1:top3", "--epochs", "2"], "--unfreeze 1:top3: the encoder has 2 layers");
    let all = train(&model, &data, &out, &["-q", "--epochs", "1", "--freeze-bottom", "2"]);
    assert!(all.status.success(), "every layer is a valid count: {}", String::from_utf8_lossy(&all.stderr));
}

/// `train --labels` with a control character was refused by `init --labels` but not by
/// `train` (bag of words, HAN, a plain encoder): the escape code went into the model's labels.
#[test]
fn train_labels_are_checked_as_init_labels_are() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bow");
    let data = fixture("synthetic/train.jsonl");
    let run = |labels: &str| {
        longread(&[
            "-q",
            "train",
            "--arch",
            "bow",
            "--labels",
            labels,
            "--train",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    assert_clean_failure(&run("rain\u{1b}[31m,prices"), "holds a control character");
    assert_clean_failure(&run("rain,,prices"), "--labels: name 2 of 3 is empty");
    assert_clean_failure(&run("rain,rain"), "contains a name twice");
    assert!(!out.exists());
    let ok = run("rain, prices");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let bow: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bow.json")).unwrap()).unwrap();
    assert_eq!(bow["labels"], serde_json::json!(["rain", "prices"]), "names trimmed as init trims them");
}
