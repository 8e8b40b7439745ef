//! Every bad input (files, flags, model directories) gives one `error:` line and exit code 1.

mod common;

use common::{assert_clean_failure, fixture, longread, longread_stdin, scratch_copy};

fn embed_with(model: &std::path::Path, input: &std::path::Path) -> std::process::Output {
    longread(&["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()])
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn good_input(dir: &tempfile::TempDir) -> std::path::PathBuf {
    write(dir, "in.jsonl", b"{\"id\": 1, \"text\": \"The committee met.\"}\n")
}

#[test]
fn missing_model_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = embed_with(&tmp.path().join("nope"), &good_input(&tmp));
    assert_clean_failure(&out, "not a model directory");
}

#[test]
fn hub_id_without_the_hub_feature_says_how_to_enable_it() {
    // With the feature (the default build) a Hub id is downloaded: tests/hub_download.rs.
    if cfg!(feature = "hub") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let input = good_input(&tmp);
    let out = longread(&["inspect", "--model", "sentence-transformers/all-MiniLM-L6-v2"]);
    assert_clean_failure(&out, "--features hub");
    // A bare name, as the Hub's older ids are (the mission's own example), gets the hint too.
    let out = longread(&[
        "init",
        "--encoder",
        "roberta-base",
        "--labels",
        "a,b",
        "--out",
        tmp.path().join("m").to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "roberta-base: not a model directory");
    assert_clean_failure(&out, "if it is a Hugging Face Hub id, build longread with `--features hub`");
    let _ = input;
}

#[test]
fn missing_config() {
    let model = scratch_copy("tiny-bert");
    std::fs::remove_file(model.path().join("config.json")).unwrap();
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "config.json: file not found (model configuration)");
}

#[test]
fn missing_tokenizer() {
    let model = scratch_copy("tiny-bert");
    std::fs::remove_file(model.path().join("tokenizer.json")).unwrap();
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "tokenizer.json: file not found");
}

#[test]
fn missing_weights() {
    let model = scratch_copy("tiny-bert");
    std::fs::remove_file(model.path().join("model.safetensors")).unwrap();
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "model.safetensors: file not found");
}

#[test]
fn pickle_weights_are_refused() {
    let model = scratch_copy("tiny-bert");
    std::fs::rename(model.path().join("model.safetensors"), model.path().join("pytorch_model.bin")).unwrap();
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "refusing to load PyTorch pickle weights");
}

#[test]
fn malformed_config() {
    let model = scratch_copy("tiny-bert");
    write(&model, "config.json", b"{\"vocab_size\": ");
    let out = longread(&["inspect", "--model", model.path().to_str().unwrap()]);
    assert_clean_failure(&out, "config.json: invalid JSON");
    // Without weights too (a half-copied directory): the config is named first, where the
    // missing weights were the only complaint.
    std::fs::remove_file(model.path().join("model.safetensors")).unwrap();
    assert_clean_failure(&embed_with(model.path(), &good_input(&model)), "config.json: invalid JSON");
    let out = longread(&["inspect", "--model", model.path().to_str().unwrap()]);
    assert_clean_failure(&out, "config.json: invalid JSON");
}

#[test]
fn corrupt_tokenizer() {
    let model = scratch_copy("tiny-bert");
    write(&model, "tokenizer.json", b"{\"model\": 3}");
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "not a valid Hugging Face tokenizer.json");
}

#[test]
fn corrupt_weights() {
    let model = scratch_copy("tiny-bert");
    write(&model, "model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage");
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "not a valid safetensors file");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("model.safetensors").count(), 1, "the file named once: {stderr}");
}

#[test]
fn wrong_tensor_shape() {
    let model = scratch_copy("tiny-bert");
    let cfg = std::fs::read_to_string(model.path().join("config.json")).unwrap();
    write(&model, "config.json", cfg.replace("\"intermediate_size\": 64", "\"intermediate_size\": 96").as_bytes());
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "intermediate.dense.weight` has shape [64, 32] but config.json implies [96, 32]");
}

#[test]
fn heads_not_dividing_hidden_size() {
    let model = scratch_copy("tiny-bert");
    let cfg = std::fs::read_to_string(model.path().join("config.json")).unwrap();
    write(&model, "config.json", cfg.replace("\"num_attention_heads\": 4", "\"num_attention_heads\": 3").as_bytes());
    let out = longread(&["inspect", "--model", model.path().to_str().unwrap()]);
    assert_clean_failure(&out, "hidden_size 32 is not divisible by num_attention_heads 3");
}

#[test]
fn token_ids_beyond_the_vocabulary() {
    // A tokenizer with a larger vocabulary than the model: its high ids are out of range.
    let model = scratch_copy("tiny-bert");
    let small = scratch_copy("tiny-bert");
    let cfg = std::fs::read_to_string(small.path().join("config.json")).unwrap();
    let vocab: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    let n = vocab["vocab_size"].as_u64().unwrap();
    // Shrink the model's vocabulary: keep only the first 10 embedding rows.
    let path = model.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    let w = tensors["embeddings.word_embeddings.weight"].narrow(0, 0, 10).unwrap();
    tensors.insert("embeddings.word_embeddings.weight".into(), w);
    candle_core::safetensors::save(&tensors, &path).unwrap();
    write(&model, "config.json", cfg.replace(&format!("\"vocab_size\": {n}"), "\"vocab_size\": 10").as_bytes());
    let out = embed_with(model.path(), &good_input(&model));
    assert_clean_failure(&out, "is out of range for vocab_size 10");
}

#[test]
fn input_problems_name_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixture("tiny-bert");
    let cases: [(&[u8], &str); 5] = [
        (b"{\"text\": \"fine\"}\n{\"text\": \"caf\xe9\"}\n", "in.jsonl:2: not valid UTF-8"),
        (b"", "no input records"),
        (b"{\"id\": 3}\n", "in.jsonl:1: missing \"text\" field"),
        (b"{\"text\": \"\"}\n", "in.jsonl:1: \"text\" is empty"),
        (b"not json\n", "in.jsonl:1: invalid JSON"),
    ];
    for (bytes, needle) in cases {
        let input = write(&tmp, "in.jsonl", bytes);
        assert_clean_failure(&embed_with(&model, &input), needle);
    }
    assert_clean_failure(&embed_with(&model, &tmp.path().join("absent.jsonl")), "opening input");
}

#[test]
fn failed_run_leaves_an_existing_output_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let output = write(&tmp, "out.jsonl", b"precious\n");
    let input = write(&tmp, "in.jsonl", b"{\"text\": \"ok\"}\n{\"text\": 5}\n");
    let out = longread(&[
        "embed",
        "--model",
        fixture("tiny-bert").to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "in.jsonl:2");
    assert_eq!(std::fs::read(&output).unwrap(), b"precious\n");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".longread-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
}

#[test]
fn stdin_input_and_file_output_work() {
    let tmp = tempfile::tempdir().unwrap();
    let input = write(&tmp, "in.jsonl", b"{\"text\": \"The committee met.\"}\n{\"id\": \"b\", \"text\": \"Rain.\"}\n");
    let output = tmp.path().join("out.jsonl");
    let out = longread_stdin(
        &[
            "embed",
            "--model",
            fixture("tiny-roberta").to_str().unwrap(),
            "--input",
            "-",
            "--output",
            output.to_str().unwrap(),
            "--normalize",
        ],
        &input,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = common::json_lines(&std::fs::read(&output).unwrap());
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["id"], 0, "a missing id becomes the line's position");
    assert_eq!(lines[1]["id"], "b");
    let v: Vec<f32> = serde_json::from_value(lines[1]["embedding"].clone()).unwrap();
    assert_eq!(v.len(), 32);
    assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
}

/// An output path that is a directory is refused before anything is written: otherwise a
/// `.longread-XXXXXX` temporary file holding the whole output is left in the parent directory.
#[test]
fn an_output_path_that_is_a_directory_is_refused_and_leaves_no_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = good_input(&tmp);
    let target = tmp.path().join("out");
    std::fs::create_dir(&target).unwrap();
    let model = fixture("hier/trained-bert-attention");
    let predict_into = |output: &std::path::Path| {
        let (model, input, output) = (model.to_str().unwrap(), input.to_str().unwrap(), output.to_str().unwrap());
        longread(&["predict", "--model", model, "--input", input, "--output", output])
    };
    assert_clean_failure(&predict_into(&target), "is a directory");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".longread-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    // An output in a directory that does not exist says which directory, not what the
    // temporary file's creation ran into.
    let out = predict_into(&tmp.path().join("missing/preds.jsonl"));
    assert_clean_failure(&out, "missing/preds.jsonl: the directory ");
    assert_clean_failure(&out, "missing does not exist (create it first)");
}

/// An output that is not a regular file was replaced by one: the temporary file was renamed
/// over it, so as root `--output /dev/null` put a regular file where the system's /dev/null
/// was, and a symbolic link became a file of its own. A pipe (and any device) is now written
/// in place, a write error on it fails the command, and a link is followed to its file.
#[test]
fn outputs_that_are_pipes_devices_or_links_are_written_through_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let input = good_input(&tmp);
    let model = fixture("hier/trained-bert-attention");
    let predict_into = |output: &std::path::Path| {
        let (model, input, output) = (model.to_str().unwrap(), input.to_str().unwrap(), output.to_str().unwrap());
        longread(&["predict", "--model", model, "--input", input, "--output", output])
    };
    let expected = predict_into(&tmp.path().join("plain.jsonl"));
    assert!(expected.status.success(), "{}", String::from_utf8_lossy(&expected.stderr));
    let expected = std::fs::read(tmp.path().join("plain.jsonl")).unwrap();
    assert!(!expected.is_empty());

    let fifo = tmp.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let out = predict_into(&fifo);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Before joining: a pipe replaced by a file would leave the reader waiting forever.
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the pipe is still a pipe");
    assert_eq!(reader.join().unwrap(), expected, "the predictions came through the pipe");

    std::fs::create_dir(tmp.path().join("real")).unwrap();
    let link = tmp.path().join("link.jsonl");
    std::os::unix::fs::symlink("real/preds.jsonl", &link).unwrap();
    for _ in 0..2 {
        // Dangling the first time (its file is created), then replaced through the link.
        let out = predict_into(&link);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is still a link");
        assert_eq!(std::fs::read(tmp.path().join("real/preds.jsonl")).unwrap(), expected);
    }

    // A device that takes nothing: the write error is the command's, with a non-zero exit.
    let full = std::path::Path::new("/dev/full");
    if std::fs::metadata(full).is_ok_and(|m| m.file_type().is_char_device()) {
        assert_clean_failure(&predict_into(full), "writing /dev/full: No space left on device");
        assert!(std::fs::metadata(full).unwrap().file_type().is_char_device(), "/dev/full is still a device");
    } else {
        println!("note: no /dev/full character device here; its case was skipped");
    }
}

/// `predict --input d.jsonl --output d.jsonl` replaced the documents with their predictions
/// (texts gone); report and embed likewise. The input under any name (a link, `./`) is refused
/// before anything is read, and the documents stay as they were.
#[test]
fn an_output_that_is_the_input_file_is_refused_and_the_documents_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let input = good_input(&tmp);
    let before = std::fs::read(&input).unwrap();
    let link = tmp.path().join("same.jsonl");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let model = fixture("hier/trained-bert-attention");
    let dotted = tmp.path().join(".").join(input.file_name().unwrap());
    let (m, i, l, d) =
        (model.to_str().unwrap(), input.to_str().unwrap(), link.to_str().unwrap(), dotted.to_str().unwrap());
    let encoder = fixture("tiny-bert");
    for (args, flag) in [
        (vec!["predict", "--model", m, "--input", i, "--output", d], "--output"),
        (vec!["report", "--model", m, "--input", l, "--out", i], "--out"),
        (vec!["embed", "--model", encoder.to_str().unwrap(), "--input", i, "--output", l], "--output"),
    ] {
        assert_clean_failure(&longread(&args), &format!("{flag} "));
        assert_clean_failure(&longread(&args), "is the input file: writing it would replace the documents");
        assert_eq!(std::fs::read(&input).unwrap(), before, "{args:?}: the documents are kept");
    }
}

/// A model.safetensors written with mode 0600 makes another user's `predict` fail. Every file
/// of a trained model directory is readable by all (less the umask).
#[test]
fn a_trained_model_is_readable_by_other_users() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("trained");
    let model = fixture("hier/bert-attention");
    // The fixture model's labels are general/teen/mature: map the synthetic labels onto them.
    let text = std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap();
    let data =
        write(&tmp, "train.jsonl", text.replace("\"rain\"", "\"teen\"").replace("\"prices\"", "\"mature\"").as_bytes());
    let run = longread(&[
        "train",
        "--model",
        model.to_str().unwrap(),
        "--train",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--epochs",
        "1",
        "--dev-split",
        "0.25",
        "-q",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    for name in ["model.safetensors", "config.json", "tokenizer.json"] {
        let mode = std::fs::metadata(out.join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o044, 0o044, "{name}: mode {mode:o}");
    }
}

/// `--threads 100000` spent minutes starting threads and never exited: absurd counts are
/// refused at once, as 0 is.
#[test]
fn an_absurd_thread_count_is_refused() {
    for n in ["0", "100000"] {
        let out = longread(&["--threads", n, "inspect", "--model", fixture("tiny-bert").to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "--threads {n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("error: --threads {n}: must be between 1 and ")), "{err}");
    }
    let out = longread(&["--threads", "1", "inspect", "--model", fixture("tiny-bert").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--version` names the optional features of the build, so that a problem report says
/// whether the binary that ran could use a GPU.
#[test]
fn version_names_the_features_built_in() {
    let out = longread(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = match (cfg!(feature = "cuda"), cfg!(feature = "hub")) {
        (false, false) => "(features: none)",
        (true, false) => "(features: cuda)",
        (false, true) => "(features: hub)",
        (true, true) => "(features: cuda, hub)",
    };
    assert!(text.starts_with(&format!("longread {} ", env!("CARGO_PKG_VERSION"))) && text.contains(expected), "{text}");
}

/// predict's closing line counts in words ("1 document", not "1 documents") and names the
/// precision as its flag does (`f32`, not `F32`).
#[test]
fn predict_summary_line_reads_as_english() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("one.jsonl");
    std::fs::write(&input, "{\"text\": \"Rain is expected.\"}\n").unwrap();
    let model = fixture("hier/bert-attention");
    let out = longread(&[
        "--device",
        "cpu",
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr.lines().find(|l| l.starts_with("classified ")).expect("the summary line");
    assert!(line.starts_with("classified 1 document (") && line.ends_with(" on cpu, f32"), "{line}");
}

/// A bag of words or a HAN given where a transformer checkpoint is read (`embed`, `init
/// --encoder`, `train --model`) was "config.json: file not found" or "missing field
/// `hidden_size`"; the error now says what the directory is.
#[test]
fn models_without_an_encoder_are_named_where_a_checkpoint_is_needed() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"text\": \"Rain is expected.\", \"label\": \"rain\"}\n").unwrap();
    let out = tmp.path().join("out");
    let (input, out_s) = (input.to_str().unwrap(), out.to_str().unwrap());
    let bow = tmp.path().join("bow");
    let synthetic = fixture("synthetic/train.jsonl");
    let made = longread(&[
        "-q",
        "train",
        "--arch",
        "bow",
        "--train",
        synthetic.to_str().unwrap(),
        "--out",
        bow.to_str().unwrap(),
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    for (model, kind) in
        [(bow, "a bag-of-words model (bow.json)"), (fixture("han"), "a HAN classifier (word vectors and GRUs)")]
    {
        let model = model.to_str().unwrap();
        for args in [
            vec!["embed", "--model", model, "--input", input],
            vec!["init", "--encoder", model, "--labels", "a,b", "--out", out_s],
            vec!["train", "--model", model, "--train", input, "--out", out_s, "-q"],
        ] {
            assert_clean_failure(&longread(&args), &format!("{kind}, which has no transformer encoder"));
            assert!(!out.exists(), "{args:?}: nothing written");
        }
    }
}

/// `serve` names the flag whose model failed to load (it printed the path twice, and an
/// embedding model's failure read like the classifier's).
#[test]
fn serve_names_the_flag_whose_model_failed_to_load() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let model = fixture("hier/bert-attention");
    for (args, needle) in [
        (vec!["--model", missing.to_str().unwrap()], "the model failed to load: --model: "),
        (
            vec!["--model", model.to_str().unwrap(), "--embedding-model", missing.to_str().unwrap()],
            "the model failed to load: --embedding-model: ",
        ),
    ] {
        let out = longread(&[&["serve", "--port", "0"], &args[..]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("error: ") && last.contains(needle), "{needle:?} not in {stderr}");
        assert_eq!(last.matches(missing.to_str().unwrap()).count(), 1, "the path once: {last}");
        assert_eq!(stderr.matches(missing.to_str().unwrap()).count(), 1, "the reason once: {stderr}");
    }
}
