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

#[test]
fn a_multi_task_model_saves_every_head_and_scores_every_task_after_loading() {
    use longread_model::hierarchical::TaskSpec;
    let section = LongreadSection { chunk_size: 24, stride: 6, ..LongreadSection::default() };
    let labels = vec!["a".to_string(), "b".to_string()];
    let mut model =
        HierarchicalClassifier::init(&fixture("tiny-bert"), labels, section.clone(), 3, &Device::Cpu).unwrap();
    model.rename_task(0, "rating", "rating").unwrap();
    let topic =
        TaskSpec { name: "topic".into(), column: "topic".into(), labels: vec!["x".into(), "y".into(), "z".into()] };
    model.add_task(topic.clone(), 9, &Device::Cpu).unwrap();
    assert!(model.add_task(topic.clone(), 9, &Device::Cpu).unwrap_err().to_string().contains("already has"));
    let bad = TaskSpec { name: "a b".into(), ..topic.clone() };
    assert!(model.add_task(bad, 9, &Device::Cpu).unwrap_err().to_string().contains("letters, digits"));
    assert!(model.rename_task(1, "other", "c").is_err(), "extra tasks keep their names");
    assert_eq!(model.task_count(), 2);
    let names: Vec<String> = model.named_vars().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "tasks.topic.classifier.out_proj.weight"), "{names:?}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    model.save(&out).unwrap();
    let loaded = HierarchicalClassifier::load(&out, false, &Device::Cpu).unwrap();
    assert_eq!(loaded.config(), model.config());
    assert_eq!(loaded.config().tasks()[1], topic);
    assert_eq!(loaded.config().tasks()[0].name, "rating");
    let chunker = Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), section.chunking()).unwrap();
    let doc = chunker
        .chunk("Attention weights show which parts of a long document drove the decision, and why; the rest of the text adds more chunks.")
        .unwrap();
    assert!(doc.chunks.len() > 1);
    let vectors = model.encode_documents(&[&doc], 4096, &Device::Cpu, |_| {}).unwrap();
    let (a, b) = (model.score_tasks(&vectors[0]).unwrap(), loaded.score_tasks(&vectors[0]).unwrap());
    assert_eq!(a, b);
    assert_eq!((a[0].logits.len(), a[1].logits.len()), (2, 3));
    assert_ne!(a[0].attention, a[1].attention, "each task pools with its own attention");
}
