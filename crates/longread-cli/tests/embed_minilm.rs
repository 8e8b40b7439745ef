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
    let (one, _) = embed(&model, &["--no-normalize", "--batch-size", "1"]);
    let (all, _) = embed(&model, &["--no-normalize", "--batch-size", "64"]);
    for (i, want) in expected.iter().enumerate() {
        let a: Vec<f32> = serde_json::from_value(one[i]["embedding"].clone()).unwrap();
        let b: Vec<f32> = serde_json::from_value(all[i]["embedding"].clone()).unwrap();
        assert!(max_diff(&a, want) <= 1e-4, "text {i} alone vs sentence-transformers");
        assert!(max_diff(&a, &b) <= 1e-5, "text {i}: batch size changed the result");
    }
}

fn vectors(lines: &[serde_json::Value]) -> Vec<Vec<f32>> {
    lines.iter().map(|l| serde_json::from_value(l["embedding"].clone()).unwrap()).collect()
}

/// A copy of all-MiniLM-L6-v2 (its files linked) with `modules.json` and the Pooling config
/// replaced, as other sentence-transformers models ship them.
fn variant(model: &std::path::Path, modules: &str, pooling: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json", "sentence_bert_config.json"] {
        std::os::unix::fs::symlink(model.join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("modules.json"), modules).unwrap();
    std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
    std::fs::write(dir.path().join("1_Pooling/config.json"), pooling).unwrap();
    dir
}

/// Without flags, embed computes what `SentenceTransformer(dir).encode` does: the model's
/// Pooling module's mode and its Normalize module (all-MiniLM-L6-v2's vectors came out
/// unnormalized, a BGE model's mean-pooled where it pools CLS).
#[test]
fn the_models_own_pooling_and_normalize_modules_are_the_defaults() {
    let Some(model) = minilm() else { return };
    let (expected, _) = reference("embeddings");
    let (plain, stderr) = embed(&model, &[]);
    assert!(stderr.contains(" (mean pooling, unit length)\n"), "the summary says so: {stderr}");
    for (i, (got, want)) in vectors(&plain).iter().zip(&expected).enumerate() {
        assert!(max_diff(got, want) <= 1e-4, "text {i}: the Normalize module applies by default");
    }
    let modules = std::fs::read_to_string(model.join("modules.json")).unwrap();
    let cls = variant(
        &model,
        &modules,
        r#"{"word_embedding_dimension": 384, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
    );
    let (from_config, _) = embed(cls.path(), &[]);
    let (asked, _) = embed(&model, &["--pooling", "cls", "--normalize"]);
    assert_eq!(vectors(&from_config), vectors(&asked), "CLS pooling from 1_Pooling/config.json");
    assert_ne!(vectors(&from_config), vectors(&plain));

    let max = variant(&model, &modules, r#"{"pooling_mode_max_tokens": true}"#);
    let input = fixture("minilm/inputs.jsonl");
    let refused = longread(&["embed", "--model", max.path().to_str().unwrap(), "--input", input.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("the model's pooling is `max`, which longread does not compute"),
        "{stderr}"
    );
    let (overridden, _) = embed(max.path(), &["--pooling", "mean"]);
    assert_eq!(vectors(&overridden), vectors(&plain), "--pooling overrides the model's");

    let dense = variant(
        &model,
        &modules.replace("sentence_transformers.models.Normalize", "sentence_transformers.models.Dense"),
        r#"{"pooling_mode_mean_tokens": true}"#,
    );
    let refused = longread(&["embed", "--model", dense.path().to_str().unwrap(), "--input", input.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("include a Dense module, which longread does not apply"),
        "{stderr}"
    );
}

/// sentence-transformers lowercases every text first when `sentence_bert_config.json` says
/// `do_lower_case` (a cased tokenizer: tiny-roberta's byte-level BPE).
#[test]
fn do_lower_case_lowercases_the_texts_first() {
    let model = fixture("tiny-roberta");
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::os::unix::fs::symlink(model.join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("sentence_bert_config.json"), r#"{"max_seq_length": 32, "do_lower_case": true}"#)
        .unwrap();
    let texts = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = texts.path().join(name);
        std::fs::write(&path, format!("{{\"text\": \"{text}\"}}\n")).unwrap();
        path
    };
    let (upper, lower) = (write("upper.jsonl", "The Committee MET"), write("lower.jsonl", "the committee met"));
    let run = |model: &std::path::Path, input: &std::path::Path| {
        let out = longread(&["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "-q"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        vectors(&json_lines(&out.stdout))
    };
    assert_eq!(run(dir.path(), &upper), run(&model, &lower), "lowercased as sentence-transformers does");
    assert_ne!(run(&model, &upper), run(&model, &lower), "the tokenizer itself is cased");
}
