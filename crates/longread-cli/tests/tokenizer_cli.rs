//! `longread tokenizer train` end to end.

mod common;

use common::{assert_clean_failure, fixture, longread};
use longread_text::{Chunker, ChunkingConfig, TextTokenizer};

#[test]
fn a_trained_bpe_tokenizer_chunks_documents_with_roberta_specials() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tok");
    let corpus = fixture("synthetic/train.jsonl");
    let args = ["tokenizer", "train", "--corpus", corpus.to_str().unwrap(), "--vocab-size", "600", "--out"];
    let o = longread(&[&args[..], &[out.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tokenizer = TextTokenizer::from_file(&out.join("tokenizer.json")).unwrap();
    let config =
        ChunkingConfig { chunk_size: 16, stride: 4, max_chunks: 0, selection: longread_text::ChunkSelection::Head };
    let doc = Chunker::new(tokenizer, config)
        .unwrap()
        .chunk("Rain is expected over the weekend, with strong winds.")
        .unwrap();
    for chunk in &doc.chunks {
        assert_eq!((chunk.ids[0], *chunk.ids.last().unwrap()), (0, 2), "<s> … </s>");
    }
    assert_clean_failure(&longread(&[&args[..], &[out.to_str().unwrap()]].concat()), "already exists");
    let missing = tmp.path().join("nope.txt");
    let o = longread(&[
        "tokenizer",
        "train",
        "--corpus",
        missing.to_str().unwrap(),
        "--out",
        tmp.path().join("o").to_str().unwrap(),
    ]);
    assert_clean_failure(&o, "nope.txt");
    let o = longread(&[&args[..4], &["--vocab-size", "50", "--out", tmp.path().join("o").to_str().unwrap()]].concat());
    assert_clean_failure(&o, "too small");
}

#[test]
fn a_trained_wordpiece_tokenizer_has_bert_specials() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tok");
    let corpus = fixture("synthetic/train.jsonl");
    let o = longread(&[
        "tokenizer",
        "train",
        "--corpus",
        corpus.to_str().unwrap(),
        "--kind",
        "wordpiece",
        "--vocab-size",
        "300",
        "--lowercase",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tokenizer = TextTokenizer::from_file(&out.join("tokenizer.json")).unwrap();
    let encoded = &tokenizer.encode_batch(&["Rain"]).unwrap()[0];
    assert_eq!((encoded.ids[0], *encoded.ids.last().unwrap()), (2, 3), "[CLS] … [SEP]");

    // An encoder on it pads with [PAD] (0), not the preset's RoBERTa id (1, here [UNK]).
    let enc = tmp.path().join("enc");
    let o = longread(&[
        "encoder",
        "new",
        "--preset",
        "tiny",
        "--tokenizer",
        out.to_str().unwrap(),
        "--out",
        enc.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(enc.join("config.json")).unwrap()).unwrap();
    let ids = |name: &str| config[name].as_u64();
    assert_eq!((ids("pad_token_id"), ids("bos_token_id"), ids("eos_token_id")), (Some(0), Some(2), Some(3)));
}

#[test]
fn a_preset_encoder_on_a_trained_tokenizer_carries_a_classifier() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    let corpus = fixture("synthetic/train.jsonl");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let o = longread(&["tokenizer", "train", "--corpus", &s(&corpus), "--vocab-size", "500", "--out", &s(&p("tok"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = longread(&["encoder", "new", "--preset", "tiny", "--tokenizer", &s(&p("tok")), "--out", &s(&p("enc"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p("enc").join("config.json")).unwrap()).unwrap();
    assert_eq!((config["model_type"].as_str(), config["num_hidden_layers"].as_u64()), (Some("roberta"), Some(2)));
    assert_eq!(config["architectures"][0], "RobertaForMaskedLM");
    let ids = |name: &str| config[name].as_u64();
    assert_eq!((ids("pad_token_id"), ids("bos_token_id"), ids("eos_token_id")), (Some(1), Some(0), Some(2)));
    let again = longread(&["encoder", "new", "--preset", "tiny", "--tokenizer", &s(&p("tok")), "--out", &s(&p("enc"))]);
    assert_clean_failure(&again, "already exists");
    let bad = longread(&["encoder", "new", "--preset", "giant", "--tokenizer", &s(&p("tok")), "--out", &s(&p("e2"))]);
    assert_clean_failure(&bad, "unknown preset \"giant\"");

    let o = longread(&[
        "init",
        "--encoder",
        &s(&p("enc")),
        "--labels",
        "rain,prices",
        "--out",
        &s(&p("clf")),
        "--chunk-size",
        "32",
        "--stride",
        "8",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = longread(&["predict", "--model", &s(&p("clf")), "--input", &s(&corpus)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(common::json_lines(&o.stdout).len(), 32);
}
