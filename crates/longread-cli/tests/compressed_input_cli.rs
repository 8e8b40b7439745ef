//! Gzip-compressed inputs (`docs.jsonl.gz`, a compressed standard input) read as their text:
//! `predict` and `train` give what the plain file gives.

mod common;

use std::io::Write;

use common::{fixture, longread, longread_stdin};

fn gzip_file(plain: &std::path::Path, to: &std::path::Path) {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&std::fs::read(plain).unwrap()).unwrap();
    std::fs::write(to, encoder.finish().unwrap()).unwrap();
}

#[test]
fn predict_reads_a_compressed_file_and_standard_input() {
    let model = fixture("hier/trained-bert-attention");
    let plain = fixture("hier/documents.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let compressed = dir.path().join("documents.jsonl.gz");
    gzip_file(&plain, &compressed);
    let predict = |input: &std::path::Path| {
        let out = longread(&["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let expected = predict(&plain);
    assert!(!expected.is_empty());
    assert_eq!(predict(&compressed), expected);
    let piped = longread_stdin(&["predict", "--model", model.to_str().unwrap(), "--input", "-"], &compressed);
    assert_eq!(piped.stdout, expected);
}

#[test]
fn train_reads_compressed_csv_as_the_plain_file() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("train.csv");
    let mut csv = String::from("text,label\n");
    for line in std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        csv += &format!("\"{}\",{}\n", record["text"].as_str().unwrap().replace('"', "\"\""), record["label"]);
    }
    std::fs::write(&plain, csv).unwrap();
    let compressed = dir.path().join("train.csv.gz");
    gzip_file(&plain, &compressed);
    let train = |data: &std::path::Path, out: &str| {
        let out = dir.path().join(out);
        let run = longread(&[
            "train",
            "--arch",
            "bow",
            "--c-values",
            "1",
            "-q",
            "--train",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        std::fs::read(out.join("model.safetensors")).unwrap()
    };
    assert_eq!(train(&compressed, "from-gz"), train(&plain, "from-csv"), "the same weights");
}
