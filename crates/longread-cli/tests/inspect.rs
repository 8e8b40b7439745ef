//! `longread inspect` reports the configuration and a parameter breakdown that adds up.

mod common;

use common::{fixture, longread};

#[test]
fn json_breakdown_adds_up_and_matches_the_file() {
    let out = longread(&["inspect", "--model", fixture("tiny-roberta").to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model_type"], "roberta");
    assert_eq!(v["weight_prefix"], "roberta");
    assert_eq!(v["max_sequence_length"], 64);
    let p = &v["parameters"];
    let get = |k: &str| p[k].as_u64().unwrap();
    // tiny-roberta: vocab 400, 66 positions, 1 type, hidden 32, 2 layers, FFN 64, 3 labels.
    let h = 32;
    assert_eq!(get("embeddings"), (400 + 66 + 1) * h + 2 * h);
    let layer = 4 * (h * h + h) + 2 * h + (h * 64 + 64) + (64 * h + h) + 2 * h;
    assert_eq!(get("encoder_layers"), 2 * layer);
    assert_eq!(get("classifier"), (h * h + h) + (3 * h + 3));
    assert_eq!(
        get("total"),
        get("embeddings") + get("encoder_layers") + get("pooler_attention") + get("classifier") + get("other")
    );
    assert_eq!(get("trainable"), get("total") - get("embeddings"));
}

#[test]
fn table_names_every_part() {
    let out = longread(&["inspect", "--model", fixture("tiny-bert-sharded").to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "BERT (model_type bert, BertForMaskedLM)",
        "gelu_pytorch_tanh",
        "model-00001-of-00004.safetensors",
        "embeddings",
        "encoder layers",
        "total",
        "trainable",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

/// `longread inspect DIR`, as a new user types it, is `inspect --model DIR`; giving both is
/// refused, and giving neither asks for the model.
#[test]
fn the_model_may_be_given_without_the_flag() {
    let dir = fixture("tiny-bert-sharded");
    let flagged = longread(&["inspect", "--model", dir.to_str().unwrap()]);
    let bare = longread(&["inspect", dir.to_str().unwrap()]);
    assert!(bare.status.success(), "{}", String::from_utf8_lossy(&bare.stderr));
    assert_eq!(bare.stdout, flagged.stdout);
    let both = longread(&["inspect", dir.to_str().unwrap(), "--model", dir.to_str().unwrap()]);
    assert_eq!(both.status.code(), Some(2), "clap's usage error");
    let neither = longread(&["inspect"]);
    assert!(!neither.status.success() && String::from_utf8_lossy(&neither.stderr).contains("--model"));
}

/// A longread classifier's labels and how it reads a document (the table showed only the
/// encoder: a user had to open config.json to see which labels a trained model gives).
#[test]
fn a_classifier_shows_its_labels_and_how_it_reads_documents() {
    let table = |model: &str| {
        let out = longread(&["inspect", "--model", fixture(model).to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let hier = table("hier/bert-top2-sharp");
    assert!(hier.contains("\nlabels           general, teen, mature\n"), "{hier}");
    assert!(
        hier.contains(
            "\nclassifier       hierarchical: attention pooling over chunks of 16 tokens (stride 4, at most 4, head \
             selection, cls vectors), attention on the top 2 chunks\n"
        ),
        "{hier}"
    );
    let seq = table("seq/bert");
    assert!(
        seq.contains("\nclassifier       sequence: the first 64 tokens only")
            && seq.contains("labels           prices, rain")
    );
    let multi = table("hier/trained-multitask");
    assert!(!multi.contains("\nlabels "), "a multi-task model lists its tasks' labels: {multi}");
    assert!(multi.contains("size (column \"size\"): long, short"), "{multi}");
    let encoder = table("tiny-roberta");
    assert!(!encoder.contains("\nclassifier       ") && !encoder.contains("\nlabels "), "{encoder}");

    let out = longread(&["inspect", "--model", fixture("hier/bert-ordinal").to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["labels"], serde_json::json!(["general", "teen", "mature"]));
    assert_eq!((v["classifier"]["ordinal"].as_bool(), v["classifier"]["chunk_size"].as_u64()), (Some(true), Some(16)));
}

/// A sentence-transformers directory shows how `embed` pools it (its modules), a plain
/// checkpoint nothing of the kind.
#[test]
fn a_sentence_transformers_model_shows_how_embed_pools_it() {
    assert!(String::from_utf8(longread(&["inspect", fixture("tiny-bert").to_str().unwrap()]).stdout)
        .unwrap()
        .lines()
        .all(|l| !l.starts_with("embeddings ")));
    let Some(model) = common::minilm() else { return };
    let out = longread(&["inspect", model.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("embeddings       mean pooling, unit length, up to 256 tokens (sentence-transformers modules)"),
        "{text}"
    );
    let out = longread(&["inspect", model.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["sentence_transformers"],
        serde_json::json!({"pooling": "mean", "normalize": true, "max_seq_length": 256, "unapplied_modules": []})
    );
}
