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
}
