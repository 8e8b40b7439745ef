//! `predict --shard I/N`: shards 0/3, 1/3 and 2/3 together give exactly the unsharded output,
//! each document once; a malformed shard is refused.

mod common;

use common::{fixture, json_lines, longread};

#[test]
fn three_shards_together_equal_the_unsharded_output() {
    let model = fixture("hier/trained-bert-attention");
    let input = fixture("hier/documents.jsonl");
    let (model, input) = (model.to_str().unwrap(), input.to_str().unwrap());
    let whole = longread(&["predict", "--model", model, "--input", input]);
    assert!(whole.status.success());
    let mut expected = json_lines(&whole.stdout);
    assert!(expected.len() >= 3, "enough documents for three shards");
    let mut sharded = Vec::new();
    for i in 0..3 {
        let out = longread(&["predict", "--model", model, "--input", input, "--shard", &format!("{i}/3")]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out.stdout);
        assert!(!lines.is_empty(), "shard {i} is empty");
        sharded.extend(lines);
    }
    let key = |v: &serde_json::Value| v["id"].to_string();
    expected.sort_by_key(key);
    sharded.sort_by_key(key);
    assert_eq!(sharded, expected, "the shards hold every document once, with the same predictions");
}

#[test]
fn a_malformed_shard_is_refused() {
    let model = fixture("hier/trained-bert-attention");
    let input = fixture("hier/documents.jsonl");
    let out = longread(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--shard",
        "3/3",
    ]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("0 <= I < N"));
}
