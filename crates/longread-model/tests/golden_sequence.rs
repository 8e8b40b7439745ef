//! The single-chunk baseline against transformers (fixtures by `scripts/make_sequence_fixtures.py`:
//! models trained by `longread train --arch sequence`, loaded by
//! `AutoModelForSequenceClassification.from_pretrained` with no missing or unexpected keys):
//! the same truncated token ids and logits within 1e-4, in the BERT, RoBERTa, DistilBERT, ELECTRA,
//! MPNet, ModernBERT and DeBERTa-v2 layouts.

mod common;

use candle_core::{DType, Device};
use common::fixture;
use longread_model::hierarchical::{Architecture, HierarchicalClassifier, LongreadSection, TaskSpec};
use longread_model::Checkpoint;
use longread_text::{Chunker, TextTokenizer};
use serde_json::Value;

fn documents() -> Vec<String> {
    std::fs::read_to_string(fixture("hier/documents.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn sequence_classifiers_match_transformers() {
    for (case, class) in [
        ("bert", "BertForSequenceClassification"),
        ("roberta", "RobertaForSequenceClassification"),
        ("distilbert", "DistilBertForSequenceClassification"),
        ("electra", "ElectraForSequenceClassification"),
        ("mpnet", "MPNetForSequenceClassification"),
        ("modernbert", "ModernBertForSequenceClassification"),
        ("deberta", "DebertaV2ForSequenceClassification"),
        ("bert-multilabel", "BertForSequenceClassification"),
    ] {
        let dir = fixture(&format!("seq/{case}"));
        let model = HierarchicalClassifier::load(&dir, false, &Device::Cpu).unwrap();
        assert_eq!(model.config().longread.architecture, Architecture::Sequence);
        assert_eq!(model.config().hf_architecture(), class);
        let chunker =
            Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
                .unwrap();
        let expected: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
        let texts = documents();
        assert_eq!(expected.len(), texts.len());
        let chunked: Vec<_> = texts.iter().map(|t| chunker.chunk(t).unwrap()).collect();
        let refs: Vec<_> = chunked.iter().collect();
        let vectors = model.encode_documents(&refs, 4096, &Device::Cpu, |_| {}).unwrap();
        assert_eq!(vectors.len(), expected.len());
        let mut truncated = 0;
        for ((want, doc), vectors) in expected.iter().zip(&chunked).zip(&vectors) {
            let id = &want["id"];
            assert_eq!(doc.chunks.len(), 1, "{case} {id}: one chunk");
            let want_ids: Vec<u32> =
                want["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(doc.chunks[0].ids, want_ids, "{case} {id}: the first chunk is transformers' truncation");
            truncated += usize::from(doc.total_tokens + 2 > want_ids.len());
            let scores = model.score(vectors).unwrap();
            let want_logits: Vec<f32> =
                want["logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert_eq!(scores.logits.len(), want_logits.len());
            let diff = scores.logits.iter().zip(&want_logits).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(diff <= 1e-4, "{case} {id}: logits differ by {diff}");
            assert_eq!(scores.attention, vec![1.0], "{case} {id}: the one chunk carries everything");
            if let Some(want) = want.get("probabilities") {
                // Multi-label: transformers reads problem_type and so do we — a sigmoid per label.
                assert!(model.is_multi_label(0), "{case}");
                let want: Vec<f32> = want.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
                let diff = scores.probabilities.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(diff <= 1e-4, "{case} {id}: probabilities differ by {diff}");
            }
        }
        assert!(truncated >= 1, "{case}: some document must be longer than the chunk");
    }
}

#[test]
fn a_new_bert_baseline_starts_from_the_pretrained_pooler() {
    let encoder = fixture("tiny-bert");
    let checkpoint = Checkpoint::open(&encoder).unwrap();
    let section = LongreadSection::sequence(64, 0.1);
    let labels = vec!["a".to_string(), "b".to_string()];
    let model = HierarchicalClassifier::init(&encoder, labels, section, 3, &Device::Cpu).unwrap();
    let tensors = model.named_tensors().unwrap();
    let pretrained = checkpoint.store.load("pooler.dense.weight", &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let ours = &tensors["bert.pooler.dense.weight"];
    let diff = common::max_abs_diff(ours, &pretrained);
    assert_eq!(diff, 0.0, "the pooler is the checkpoint's");
    assert!(tensors.contains_key("classifier.weight") && !tensors.keys().any(|k| k.starts_with("norm.")));
}

#[test]
fn a_sequence_classifier_has_one_task_and_one_chunk() {
    let encoder = fixture("tiny-roberta");
    let labels = vec!["a".to_string(), "b".to_string()];
    let mut model =
        HierarchicalClassifier::init(&encoder, labels.clone(), LongreadSection::sequence(64, 0.1), 3, &Device::Cpu)
            .unwrap();
    let err = model
        .add_task(TaskSpec { name: "topic".into(), column: "topic".into(), labels: labels.clone() }, 1, &Device::Cpu)
        .unwrap_err();
    assert!(err.to_string().contains("one task"), "{err}");
    let section = LongreadSection { max_chunks: 4, ..LongreadSection::sequence(64, 0.1) };
    let err = HierarchicalClassifier::init(&encoder, labels, section, 3, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("first chunk only"), "{err}");
}
