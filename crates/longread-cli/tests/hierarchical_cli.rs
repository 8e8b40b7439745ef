//! `init`, `predict` and `report` end to end, on the tiny fixtures.

mod common;

use std::path::Path;

use common::{assert_clean_failure, fixture, json_lines, longread, longread_stdin};
use serde_json::Value;

fn init(encoder: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["init", "--encoder", encoder, "--labels", "general,teen,mature", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    longread(&args)
}

fn tensors(dir: &Path) -> std::collections::HashMap<String, candle_core::Tensor> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu).unwrap()
}

fn same(a: &candle_core::Tensor, b: &candle_core::Tensor) -> bool {
    a.dims() == b.dims() && a.sub(b).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() == 0.0
}

#[test]
fn init_writes_format_v1_reproducibly_from_the_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let encoder = fixture("tiny-roberta");
    let (a, b, c) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"));
    for (out, seed) in [(&a, "5"), (&b, "5"), (&c, "6")] {
        let o = init(
            encoder.to_str().unwrap(),
            out,
            &[
                "--seed",
                seed,
                "--pooling",
                "multihead",
                "--attention-heads",
                "2",
                "--chunk-size",
                "32",
                "--stride",
                "8",
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(a.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"][0], "LongreadHierarchicalClassifier");
    assert_eq!(cfg["id2label"]["2"], "mature");
    assert_eq!(cfg["label2id"]["teen"], 1);
    assert_eq!(cfg["longread"]["format_version"], 1);
    assert_eq!(cfg["longread"]["pooling_strategy"], "multihead");
    assert_eq!(cfg["model_type"], "roberta");
    assert_eq!(cfg["hidden_act"], "gelu_new", "encoder keys unchanged");

    let (ta, tb, tc) = (tensors(&a), tensors(&b), tensors(&c));
    let source = tensors(&encoder);
    // Names and shapes as the format says; encoder tensors under the `roberta.` prefix, unchanged.
    assert_eq!(ta["pooler.projection.weight"].dims(), &[256, 32]);
    assert_eq!(ta["pooler.context.weight"].dims(), &[2, 256]);
    assert_eq!(ta["pooler.merge.weight"].dims(), &[32, 64]);
    assert_eq!(ta["classifier.dense.weight"].dims(), &[16, 32]);
    assert_eq!(ta["classifier.out_proj.weight"].dims(), &[3, 16]);
    assert!(same(
        &ta["roberta.embeddings.word_embeddings.weight"],
        &source["roberta.embeddings.word_embeddings.weight"]
    ));
    // The source's own HF classifier head is not reused.
    assert!(!same(&ta["classifier.dense.weight"], &source["classifier.dense.weight"]));
    // Same seed, same model; another seed, another head.
    assert_eq!(ta.len(), tb.len());
    assert!(ta.iter().all(|(k, v)| same(v, &tb[k])));
    assert!(!same(&ta["pooler.projection.weight"], &tc["pooler.projection.weight"]));
    // transformers' initialisation: zero biases, LayerNorm 1/0, weights ~ N(0, 0.02).
    assert_eq!(ta["classifier.dense.bias"].abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    assert_eq!(ta["norm.weight"].mean_all().unwrap().to_scalar::<f32>().unwrap(), 1.0);
    let std = ta["pooler.projection.weight"].sqr().unwrap().mean_all().unwrap().to_scalar::<f32>().unwrap().sqrt();
    assert!((std - 0.02).abs() < 0.002, "std {std}");
}

#[test]
fn init_refuses_bad_settings_and_existing_output() {
    let tmp = tempfile::tempdir().unwrap();
    let enc = fixture("tiny-bert");
    let enc = enc.to_str().unwrap();
    let out = tmp.path().join("m");
    assert_clean_failure(&init(enc, &out, &["--chunk-size", "128"]), "exceeds the encoder's 64 positions");
    assert_clean_failure(&init(enc, &out, &["--chunk-size", "16", "--stride", "14"]), "stride 14 must be smaller");
    assert_clean_failure(
        &init(enc, &out, &["--chunk-size", "32", "--pooling", "multihead"]),
        "needs attention_heads ≥ 2",
    );
    let o = longread(&["init", "--encoder", enc, "--labels", "a,a", "--out", out.to_str().unwrap()]);
    assert_clean_failure(&o, "contains a name twice");
    // Two names and an empty one: the message said "needs at least two non-empty names".
    let o = longread(&["init", "--encoder", enc, "--labels", "a,,b", "--out", out.to_str().unwrap()]);
    assert_clean_failure(&o, "--labels: name 2 of 3 is empty (a doubled or trailing comma?)");
    let o = longread(&["init", "--encoder", enc, "--labels", "a", "--out", out.to_str().unwrap()]);
    assert_clean_failure(&o, "--labels needs at least two names");
    assert!(!out.exists(), "nothing written on failure");
    std::fs::create_dir(&out).unwrap();
    assert_clean_failure(&init(enc, &out, &["--chunk-size", "32", "--stride", "8"]), "already exists");
}

#[test]
fn predict_matches_the_reference_through_the_binary() {
    let model = fixture("hier/bert-attention");
    let out = longread(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--input",
        fixture("hier/documents.jsonl").to_str().unwrap(),
        "--max-batch-tokens",
        "64",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = json_lines(&out.stdout);
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap()).unwrap();
    assert_eq!(got.len(), expected["head"].as_array().unwrap().len(), "one line per document");
    for (g, w) in got.iter().zip(expected["head"].as_array().unwrap()) {
        assert_eq!(g["id"], w["id"]);
        assert_eq!(g["label"], w["label"]);
        assert_eq!(g["logits"].as_array().unwrap().len(), w["logits"].as_array().unwrap().len());
        for (a, b) in g["logits"].as_array().unwrap().iter().zip(w["logits"].as_array().unwrap()) {
            assert!((a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= 1e-4);
        }
        let sum: f64 = g["scores"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-5);
        assert_eq!(g["chunks"].as_array().unwrap().len(), w["chunks"].as_array().unwrap().len());
    }
}

#[test]
fn predict_reads_txt_files_directories_and_stdin_and_reports_bad_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("docs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("b.txt"), "Rain is expected over the weekend.").unwrap();
    std::fs::write(dir.join("a.txt"), "   \n").unwrap();
    std::fs::write(dir.join("c.txt"), b"caf\xe9 society").unwrap();
    let model = fixture("hier/roberta-attention");
    let m = model.to_str().unwrap();

    let out = longread(&["predict", "--model", m, "--input", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "some documents failed: exit 2");
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.iter().map(|l| l["id"].as_str().unwrap()).collect::<Vec<_>>(), ["a.txt", "b.txt", "c.txt"]);
    assert!(lines[0]["error"].as_str().unwrap().contains("empty or whitespace-only"));
    assert!(lines[1]["label"].is_string() && lines[1].get("error").is_none());
    assert!(lines[2]["error"].as_str().unwrap().contains("not valid UTF-8"));

    let out = longread(&["predict", "--model", m, "--input", dir.join("b.txt").to_str().unwrap(), "--format", "table"]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("id ") && table.contains("b.txt") && table.contains("most attended chunk"), "{table}");

    let out = longread_stdin(&["predict", "--model", m, "--input", "-"], &fixture("hier/documents.jsonl"));
    assert!(out.status.success());
    assert_eq!(json_lines(&out.stdout).len(), 4);
}

/// Regression: one malformed JSON line aborted a whole `predict` run, writing nothing.
#[test]
fn a_malformed_line_gets_its_own_error_record_unless_strict() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"id\": \"a\", \"text\": \"Rain is expected.\"}\n{\"id\": \"b\", \"text\n{\"id\": \"c\"}\n{\"id\": \"d\", \"text\": \"Sun.\"}\n")
        .unwrap();
    let output = tmp.path().join("out.jsonl");
    let model = fixture("hier/roberta-attention");
    let args = ["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()];
    let out = longread(&[&args[..], &["--output", output.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&std::fs::read(&output).unwrap());
    assert_eq!(lines.len(), 4);
    assert_eq!((lines[0]["id"].as_str(), lines[3]["id"].as_str()), (Some("a"), Some("d")));
    assert!(lines[0]["label"].is_string() && lines[3]["label"].is_string());
    assert_eq!(lines[1]["line"], 2);
    assert!(lines[1]["error"].as_str().unwrap().starts_with("invalid JSON"), "{}", lines[1]);
    assert!(lines[1].get("id").is_none());
    assert_eq!(lines[2]["line"], 3);
    assert!(lines[2]["error"].as_str().unwrap().contains("missing \"text\""));

    let strict_out = tmp.path().join("strict.jsonl");
    let out = longread(&[&args[..], &["--strict", "--output", strict_out.to_str().unwrap()]].concat());
    assert_clean_failure(&out, "in.jsonl:2: invalid JSON");
    assert!(!strict_out.exists(), "nothing written");
}

/// `--format csv` says per document what the JSON lines say: the label, each label's
/// probability, the most attended chunk; a failed line has its id ("line N") and error.
#[test]
fn csv_output_holds_what_the_json_lines_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    let docs = std::fs::read_to_string(fixture("hier/documents.jsonl")).unwrap();
    std::fs::write(&input, format!("{docs}not json\n")).unwrap();
    let model = fixture("hier/roberta-attention");
    let args = ["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()];
    let json = longread(&args);
    let csv = longread(&[&args[..], &["--format", "csv"]].concat());
    assert_eq!((json.status.code(), csv.status.code()), (Some(2), Some(2)), "{}", String::from_utf8_lossy(&csv.stderr));
    let lines = json_lines(&json.stdout);
    let mut reader = csv::Reader::from_reader(&csv.stdout[..]);
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
    let labels: Vec<String> = lines[0]["scores"].as_object().unwrap().keys().cloned().collect();
    let mut expected = vec!["id".to_string(), "label".into()];
    expected.extend(labels.iter().map(|l| format!("p_{l}")));
    expected.extend(["evidence_start", "evidence_end", "evidence_attention", "error"].map(String::from));
    assert_eq!(header, expected);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), lines.len());
    let cell = |row: &csv::StringRecord, column: &str| row[header.iter().position(|h| h == column).unwrap()].to_owned();
    for (row, line) in rows.iter().zip(&lines) {
        if let Some(error) = line.get("error") {
            assert_eq!(cell(row, "id"), format!("line {}", line["line"]));
            assert_eq!(cell(row, "error"), error.as_str().unwrap());
            assert_eq!(cell(row, "label"), "");
            continue;
        }
        let id = match &line["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!((cell(row, "id"), cell(row, "label")), (id, line["label"].as_str().unwrap().to_owned()));
        for label in &labels {
            let p: f64 = cell(row, &format!("p_{label}")).parse().unwrap();
            assert!((p - line["scores"][label].as_f64().unwrap()).abs() < 1e-6, "{label}");
        }
        let chunks = line["chunks"].as_array().unwrap();
        // The first of the most attended (ties go to the earlier chunk).
        let attention = |c: &Value| c["attention"].as_f64().unwrap();
        let top = chunks.iter().fold(&chunks[0], |best, c| if attention(c) > attention(best) { c } else { best });
        assert_eq!(cell(row, "evidence_start"), top["start"].to_string());
        assert_eq!(cell(row, "evidence_end"), top["end"].to_string());
        assert_eq!(cell(row, "error"), "");
    }
}

/// As README says: a document without an "id" gets its 0-based position among the records
/// (blank lines not counted), an unreadable line its 1-based line number in the file (blank
/// lines counted, as editors count).
#[test]
fn missing_ids_are_record_positions_and_error_lines_are_file_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "\n{\"text\": \"Rain is expected.\"}\n\nnot json\n{\"text\": \"Sun.\"}\n").unwrap();
    let model = fixture("hier/roberta-attention");
    let out = longread(&["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["id"], 0);
    assert_eq!(lines[1]["line"], 4);
    assert_eq!(lines[2]["id"], 2);
}

#[test]
fn predict_on_a_plain_encoder_says_to_run_init() {
    let out = longread(&[
        "predict",
        "--model",
        fixture("tiny-bert").to_str().unwrap(),
        "--input",
        fixture("hier/documents.jsonl").to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "not a longread classifier; create one with `longread init");
}

#[test]
fn report_writes_one_self_contained_page() {
    let tmp = tempfile::tempdir().unwrap();
    let html_path = tmp.path().join("report.html");
    let out = longread(&[
        "report",
        "--model",
        fixture("hier/bert-multihead").to_str().unwrap(),
        "--input",
        fixture("hier/documents.jsonl").to_str().unwrap(),
        "--out",
        html_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();
    for id in ["one-window", "two-windows", "many-windows", "beyond-max"] {
        assert!(html.contains(&format!("<h2>{id}</h2>")), "{id}");
    }
    assert!(html.contains("<svg") && html.contains("Predicted: <span class=\"label\">"));
    assert!(html.contains("Ünïcödé 🙂"), "text kept verbatim");
}

/// A JSON line that cannot be read fails its own entry of the page, as in `predict` (exit code
/// 2, the other documents classified); `--strict` stops at it and writes no page.
#[test]
fn report_shows_an_unreadable_line_as_a_failed_document_unless_strict() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    std::fs::write(&input, "{\"id\": \"first\", \"text\": \"The committee met.\"}\nnot json\n{\"id\": \"third\", \"text\": \"Rain again.\"}\n").unwrap();
    let model = fixture("hier/trained-bert-attention");
    let page = tmp.path().join("report.html");
    let run = |extra: &[&str]| {
        let mut args = vec!["report", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()];
        args.extend(["--out", page.to_str().unwrap()]);
        args.extend(extra);
        longread(&args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    for id in ["first", "line 2", "third"] {
        assert!(html.contains(&format!("<h2>{id}</h2>")), "{id} missing from the page");
    }
    assert!(html.contains("invalid JSON"), "the page says why line 2 failed");
    assert_eq!(html.matches("Predicted: <span class=\"label\">").count(), 2, "the other documents are classified");
    std::fs::remove_file(&page).unwrap();
    let out = run(&["--strict"]);
    assert_clean_failure(&out, "docs.jsonl:2: invalid JSON");
    assert!(!page.exists(), "--strict writes no page");
}

/// The report's summary counted "1 documents".
#[test]
fn report_of_one_document_says_one_document() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("one.jsonl");
    std::fs::write(&input, "{\"text\": \"The committee met.\"}\n").unwrap();
    let page = tmp.path().join("report.html");
    let model = fixture("hier/trained-bert-attention");
    let out = longread(&[
        "report",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(1 document, 0 failed)"), "{stderr}");
}

/// With stderr not a terminal the progress bar draws nothing; plain lines say how far
/// `predict` is (every 10 s by default; LONGREAD_PROGRESS_SECONDS=0 here).
#[test]
fn predict_reports_progress_in_plain_lines_when_stderr_is_not_a_terminal() {
    let model = fixture("hier/trained-bert-attention");
    let documents = fixture("hier/documents.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(["predict", "--model", model.to_str().unwrap(), "--input", documents.to_str().unwrap()])
        .env("LONGREAD_PROGRESS_SECONDS", "0")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().any(|l| l.contains(" documents done (")), "{stderr}");
    // From standard input there is no total: the first line counts one document in words.
    let piped = std::process::Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(["predict", "--model", model.to_str().unwrap(), "--input", "-"])
        .env("LONGREAD_PROGRESS_SECONDS", "0")
        .stdin(std::fs::File::open(&documents).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success());
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.lines().any(|l| l.starts_with("1 document done (")), "{stderr}");
}

/// `init --chunk-size 32` alone was refused: the stride stayed at 256, more than a 32-token
/// window. The stride now defaults to half the chunk size; given, it is kept.
#[test]
fn a_smaller_chunk_size_alone_gets_half_of_it_as_the_stride() {
    let tmp = tempfile::tempdir().unwrap();
    let enc = fixture("tiny-bert");
    let stride_of = |out: &Path| {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        (config["longread"]["chunk_size"].as_u64().unwrap(), config["longread"]["stride"].as_u64().unwrap())
    };
    let half = tmp.path().join("half");
    let o = init(enc.to_str().unwrap(), &half, &["--chunk-size", "32"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stride_of(&half), (32, 16));
    let given = tmp.path().join("given");
    let o = init(enc.to_str().unwrap(), &given, &["--chunk-size", "32", "--stride", "4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stride_of(&given), (32, 4));
}

/// CSV injection: a document id that a spreadsheet runs as a formula (`=HYPERLINK(...)`,
/// `@SUM(...)`) was written as it came; it is now text (a leading `'`), and numeric ids stay.
#[test]
fn csv_cells_that_look_like_formulas_stay_text() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\": \"=HYPERLINK(\\\"http://x\\\",\\\"y\\\")\", \"text\": \"Rain is expected.\"}\n\
         {\"id\": \"@SUM(A1)\", \"text\": \"Prices rose.\"}\n{\"id\": -7, \"text\": \"Wind.\"}\n",
    )
    .unwrap();
    let model = fixture("hier/roberta-attention");
    let out = longread(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut reader = csv::Reader::from_reader(&out.stdout[..]);
    let ids: Vec<String> = reader.records().map(|r| r.unwrap()[0].to_owned()).collect();
    assert_eq!(ids, ["'=HYPERLINK(\"http://x\",\"y\")", "'@SUM(A1)", "-7"]);
}

/// A sentence-embedding encoder read by mean pooling (all-MiniLM-L6-v2's Pooling module) gets a
/// note when chunks are left to the default CLS pooling; not when the flag is given, nor for an
/// encoder without that module.
#[test]
fn init_notes_a_mean_pooled_encoder_left_to_cls_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let note = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr).lines().any(|l| {
            l.starts_with("note: ") && l.contains("is read by mean pooling") && l.contains("--chunk-pooling mean")
        })
    };
    let plain = init(fixture("tiny-bert").to_str().unwrap(), &tmp.path().join("plain"), &["--chunk-size", "64"]);
    assert!(plain.status.success() && !note(&plain), "{}", String::from_utf8_lossy(&plain.stderr));
    let Some(minilm) = common::minilm() else { return };
    let minilm = minilm.to_str().unwrap();
    let default = init(minilm, &tmp.path().join("default"), &[]);
    assert!(default.status.success() && note(&default), "{}", String::from_utf8_lossy(&default.stderr));
    for (name, extra) in [("cls", ["--chunk-pooling", "cls"]), ("mean", ["--chunk-pooling", "mean"])] {
        let chosen = init(minilm, &tmp.path().join(name), &extra);
        assert!(chosen.status.success() && !note(&chosen), "{}", String::from_utf8_lossy(&chosen.stderr));
    }
}

/// `predict --occlusion` adds each chunk's occlusion (the label's probability lost without
/// it) and changes nothing else; models without chunks to leave out are refused by name.
#[test]
fn predict_occlusion_adds_each_chunks_effect_on_the_label() {
    let model = fixture("hier/trained-bert-attention");
    let input = fixture("hier/documents.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec!["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = longread(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json_lines(&out.stdout)
    };
    let (plain, occluded) = (run(&[]), run(&["--occlusion"]));
    let mut several = 0;
    for (plain, occluded) in plain.iter().zip(&occluded) {
        let chunks = occluded["chunks"].as_array().unwrap();
        let mut stripped = occluded.clone();
        stripped["chunks"].as_array_mut().unwrap().iter_mut().for_each(|c| {
            c.as_object_mut().unwrap().remove("occlusion");
        });
        assert_eq!(&stripped, plain);
        if chunks.len() > 1 {
            several += 1;
            assert!(chunks.iter().all(|c| c["occlusion"].as_f64().is_some_and(|o| o.abs() <= 1.0)), "{occluded}");
        } else {
            assert!(chunks[0].get("occlusion").is_none(), "{occluded}");
        }
    }
    assert!(several > 0);
    let han = fixture("han");
    let refused =
        longread(&["predict", "--model", han.to_str().unwrap(), "--input", input.to_str().unwrap(), "--occlusion"]);
    assert_clean_failure(&refused, "occlusion reads a hierarchical model without each of its chunks");
    // `report --occlusion` draws each document's occlusion chart, with the values predict gave.
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("report.html");
    let (model, input) = (model.to_str().unwrap(), input.to_str().unwrap());
    let report =
        longread(&["report", "--model", model, "--input", input, "--out", page.to_str().unwrap(), "--occlusion"]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("aria-label=\"occlusion per chunk\"").count(),
        several,
        "a chart per document of several chunks"
    );
    let first = occluded.iter().find(|o| o["chunks"].as_array().unwrap().len() > 1).unwrap();
    let value = first["chunks"][0]["occlusion"].as_f64().unwrap();
    assert!(html.contains(&format!("chunk #0 chars 0–{}: {value:+.4}", first["chunks"][0]["end"])), "{value}");
}
