//! Save → load → compare: a model written by `save` scores exactly as the one in memory.

mod common;

use candle_core::Device;
use common::fixture;
use longread_model::hierarchical::{HierarchicalClassifier, LongreadSection, PoolingStrategy};
use longread_text::{Chunker, TextTokenizer};

#[test]
fn saved_model_scores_like_the_one_in_memory() {
    let section = LongreadSection {
        chunk_size: 24,
        stride: 6,
        max_chunks: 0,
        pooling_strategy: PoolingStrategy::Multihead,
        attention_heads: 2,
        ..LongreadSection::default()
    };
    let labels = vec!["a".to_string(), "b".to_string()];
    let model =
        HierarchicalClassifier::init(&fixture("tiny-roberta"), labels, section.clone(), 3, &Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    model.save(&out).unwrap();
    assert!(matches!(model.save(&out), Err(longread_model::ModelError::OutputExists { .. })), "no overwrite");
    let loaded = HierarchicalClassifier::load(&out, false, &Device::Cpu).unwrap();
    assert_eq!(loaded.config(), model.config());

    let chunker = Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), section.chunking()).unwrap();
    let doc =
        chunker.chunk("Attention weights show which parts of a long document drove the decision, and why.").unwrap();
    assert!(doc.chunks.len() > 1);
    let a = model.predict(&[&doc], 4096, &Device::Cpu, |_| {}).unwrap();
    let b = loaded.predict(&[&doc], 4096, &Device::Cpu, |_| {}).unwrap();
    assert_eq!(a, b);
    // Nothing but the model directory is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("model")]);
}
