//! `longread embed` on the real sentence-transformers/all-mpnet-base-v2 (MPNet, 110M
//! parameters) against sentence-transformers' embeddings stored by
//! `scripts/make_family_fixtures.py --mpnet` (≤ 1e-4 per value). Runs where the model is
//! installed (`../shared/models/fetch-all-mpnet-base-v2.sh`); says how to get it otherwise.

mod common;

use common::{all_mpnet, fixture, json_lines, longread};

#[test]
fn all_mpnet_base_v2_embeddings_match_sentence_transformers() {
    let Some(model) = all_mpnet() else { return };
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("mpnet/expected.json")).unwrap()).unwrap();
    let expected: Vec<Vec<f32>> = serde_json::from_value(reference["embeddings"].clone()).unwrap();
    assert_eq!(reference["max_seq_length"], 384);
    let input = fixture("mpnet/inputs.jsonl");
    let out = longread(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--pooling",
        "mean",
        "--normalize",
        "--batch-size",
        "4",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), expected.len());
    for (i, (line, want)) in lines.iter().zip(&expected).enumerate() {
        let got: Vec<f32> = serde_json::from_value(line["embedding"].clone()).unwrap();
        assert_eq!(got.len(), 768);
        let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff <= 1e-4, "text {i}: max abs diff {diff}");
    }
    // The last text is longer than sentence-transformers' 384 tokens.
    assert!(stderr.contains("1 of 6 texts was longer than the model's 384 tokens"), "{stderr}");
}
