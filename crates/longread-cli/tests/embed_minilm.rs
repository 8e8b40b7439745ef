//! `longread embed` on the real all-MiniLM-L6-v2 against sentence-transformers' embeddings
//! stored by `scripts/make_encoder_fixtures.py` (≤ 1e-4 per value).

mod common;

use common::{fixture, json_lines, longread, minilm};

/// sentence-transformers' output: `key` = "embeddings" (normalised) or "raw_embeddings".
fn reference(key: &str) -> (Vec<Vec<f32>>, usize) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("minilm/expected.json")).unwrap()).unwrap();
    let emb = serde_json::from_value(v[key].clone()).unwrap();
    (emb, v["max_seq_length"].as_u64().unwrap() as usize)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn embed(model: &std::path::Path, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let input = fixture("minilm/inputs.jsonl");
    let mut args = vec!["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = longread(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (json_lines(&out.stdout), stderr)
}

#[test]
fn mean_normalized_embeddings_match_sentence_transformers() {
    let Some(model) = minilm() else { return };
    let (expected, _) = reference("embeddings");
    let (lines, stderr) = embed(&model, &["--pooling", "mean", "--normalize", "--batch-size", "4"]);
    assert_eq!(lines.len(), expected.len());
    for (i, (line, want)) in lines.iter().zip(&expected).enumerate() {
        assert_eq!(line["id"], format!("s{i}"), "order and id kept");
        assert_eq!(line["source"], "fixture", "other fields copied");
        assert!(line.get("text").is_none());
        let got: Vec<f32> = serde_json::from_value(line["embedding"].clone()).unwrap();
        let diff = max_diff(&got, want);
        assert!(diff <= 1e-4, "text {i}: max abs diff {diff}");
    }
    // The last text is longer than sentence-transformers' 256 tokens.
    assert!(stderr.contains("1 of 6 texts was longer than the model's 256 tokens"), "{stderr}");
}

#[test]
fn raw_mean_embeddings_match_and_do_not_depend_on_batch_size() {
    let Some(model) = minilm() else { return };
    let (expected, max_len) = reference("raw_embeddings");
    assert_eq!(max_len, 256);
    let (one, _) = embed(&model, &["--batch-size", "1"]);
    let (all, _) = embed(&model, &["--batch-size", "64"]);
    for (i, want) in expected.iter().enumerate() {
        let a: Vec<f32> = serde_json::from_value(one[i]["embedding"].clone()).unwrap();
        let b: Vec<f32> = serde_json::from_value(all[i]["embedding"].clone()).unwrap();
        assert!(max_diff(&a, want) <= 1e-4, "text {i} alone vs sentence-transformers");
        assert!(max_diff(&a, &b) <= 1e-5, "text {i}: batch size changed the result");
    }
}
