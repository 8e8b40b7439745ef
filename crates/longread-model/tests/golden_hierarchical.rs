//! The hierarchical classifier against the PyTorch reference (`scripts/reference_hierarchical.py`,
//! fixtures by `scripts/make_hierarchical_fixtures.py`): same chunks and spans, logits and
//! attention within 1e-4, for every pooling strategy and both chunk selections.

mod common;

use std::path::Path;

use candle_core::Device;
use common::{fixture, scratch_copy};
use longread_model::hierarchical::{DocumentScores, HierarchicalClassifier};
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use serde_json::Value;

/// `trained-bert-attention` is bert-attention after `longread train` (see its provenance.json):
/// what training writes must load in the reference with the same predictions;
/// `trained-multitask` has a second task with its own head, compared too.
const CASES: [&str; 14] = [
    "bert-attention",
    "bert-label-attention",
    "bert-ordinal",
    "bert-max-logits-ordinal",
    "bert-max-logits",
    "bert-top2-sharp",
    "bert-multihead-top2",
    "bert-multihead",
    "bert-mean",
    "bert-max",
    "bert-first",
    "roberta-attention",
    "trained-bert-attention",
    "trained-multitask",
];

fn documents(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

fn set_selection(dir: &Path, selection: &str) {
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["longread"]["chunk_selection"] = selection.into();
    std::fs::write(path, cfg.to_string()).unwrap();
}

/// Chunks and scores (`[doc][task]`, primary task first) of `texts`.
fn run(
    model_dir: &Path,
    texts: &[String],
    max_batch_tokens: usize,
) -> (Vec<ChunkedDocument>, Vec<Vec<DocumentScores>>) {
    let model = HierarchicalClassifier::load(model_dir, false, &Device::Cpu).unwrap();
    let tokenizer = TextTokenizer::from_file(model.tokenizer_path()).unwrap();
    let chunker = Chunker::new(tokenizer, model.config().longread.chunking()).unwrap();
    let chunked: Vec<ChunkedDocument> = texts.iter().map(|t| chunker.chunk(t).unwrap()).collect();
    let refs: Vec<&ChunkedDocument> = chunked.iter().collect();
    let vectors = model.encode_documents(&refs, max_batch_tokens, &Device::Cpu, |_| {}).unwrap();
    // Every document's heads at once (one read-back), as predict does; each alone agrees.
    let scores = model.score_tasks_many(&vectors).unwrap();
    for (v, together) in vectors.iter().zip(&scores) {
        assert_eq!(&model.score_tasks(v).unwrap(), together, "a document alone and among others");
    }
    (chunked, scores)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn compare(case: &str, expected: &[Value], chunked: &[ChunkedDocument], scores: &[Vec<DocumentScores>]) {
    assert!(!expected.is_empty(), "{case}: no expected documents");
    assert_eq!((chunked.len(), scores.len()), (expected.len(), expected.len()), "{case}: document count");
    for ((want, doc), all) in expected.iter().zip(chunked).zip(scores) {
        let got = &all[0];
        let want_tasks = want.get("tasks").and_then(Value::as_object);
        assert_eq!(all.len(), 1 + want_tasks.map_or(0, |t| t.len()), "{case}: number of tasks");
        for (task, (name, w)) in all[1..].iter().zip(want_tasks.into_iter().flatten()) {
            let logits = max_diff(&task.logits, &floats(&w["logits"]));
            let attention = max_diff(&task.attention, &floats(&w["attention"]));
            assert!(logits <= 1e-4 && attention <= 1e-4, "{case} task {name}: logits {logits}, attention {attention}");
        }
        let id = &want["id"];
        let want_chunks = want["chunks"].as_array().unwrap();
        assert_eq!(doc.chunks.len(), want_chunks.len(), "{case} {id}: chunk count");
        for (c, w) in doc.chunks.iter().zip(want_chunks) {
            let span = (c.index as u64, c.start as u64, c.end as u64);
            let want_span = (w["index"].as_u64().unwrap(), w["start"].as_u64().unwrap(), w["end"].as_u64().unwrap());
            assert_eq!(span, want_span, "{case} {id}: chunk index/start/end");
        }
        let logits = max_diff(&got.logits, &floats(&want["logits"]));
        let want_attention: Vec<f32> = want_chunks.iter().map(|c| c["attention"].as_f64().unwrap() as f32).collect();
        let attention = max_diff(&got.attention, &want_attention);
        assert!(logits <= 1e-4 && attention <= 1e-4, "{case} {id}: logits diff {logits}, attention diff {attention}");
        // Probabilities: the softmax, or a multi-label model's sigmoid of each logit.
        let labels: Vec<&str> = want["scores"].as_object().unwrap().keys().map(String::as_str).collect();
        let order: Vec<String> = ["general", "teen", "mature"].iter().map(|l| l.to_string()).collect();
        let want_probabilities: Vec<f32> = order.iter().map(|l| want["scores"][l].as_f64().unwrap() as f32).collect();
        assert_eq!(labels.len(), order.len(), "{case} {id}");
        let probabilities = max_diff(&got.probabilities, &want_probabilities);
        assert!(probabilities <= 1e-4, "{case} {id}: probabilities diff {probabilities}");
        // Label-wise attention: each label's own weight of each chunk.
        match (&got.label_attention, want_chunks[0].get("labels")) {
            (Some(rows), Some(_)) => {
                for (l, row) in order.iter().zip(rows) {
                    let want_row: Vec<f32> =
                        want_chunks.iter().map(|c| c["labels"][l].as_f64().unwrap() as f32).collect();
                    let diff = max_diff(row, &want_row);
                    assert!(diff <= 1e-4, "{case} {id}: label {l}'s attention diff {diff}");
                }
            }
            (None, None) => {}
            (got, want) => panic!("{case} {id}: label attention {got:?} vs reference {want:?}"),
        }
    }
}

#[test]
fn every_pooling_strategy_and_selection_matches_the_reference() {
    let texts = documents(&fixture("hier/documents.jsonl"));
    for case in CASES {
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(fixture(&format!("hier/{case}/expected.json"))).unwrap())
                .unwrap();
        for selection in ["head", "spread"] {
            let dir = scratch_copy(&format!("hier/{case}"));
            set_selection(dir.path(), selection);
            // A small budget: several batches, each mixing chunks of different documents.
            let (chunked, scores) = run(dir.path(), &texts, 40);
            compare(&format!("{case}/{selection}"), expected[selection].as_array().unwrap(), &chunked, &scores);
        }
    }
}

#[test]
fn the_trained_fixture_really_was_trained() {
    let load = |case: &str| {
        candle_core::safetensors::load(fixture(&format!("hier/{case}/model.safetensors")), &Device::Cpu).unwrap()
    };
    let (before, after) = (load("bert-attention"), load("trained-bert-attention"));
    assert_eq!(before.len(), after.len(), "the same tensors");
    for name in [
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layer.0.attention.self.query.weight",
        "classifier.out_proj.weight",
    ] {
        let diff =
            before[name].sub(&after[name]).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff > 1e-4, "{name} changed by training (max change {diff})");
    }
}

#[test]
fn documents_cover_one_two_many_and_more_than_max_chunks_windows() {
    let texts = documents(&fixture("hier/documents.jsonl"));
    let (chunked, _) = run(&fixture("hier/bert-attention"), &texts, 4096);
    let windows: Vec<usize> = chunked.iter().map(|d| d.total_windows).collect();
    assert_eq!(&windows[..2], &[1, 2]);
    assert!(windows[2] >= 3 && windows[3] > 4, "windows {windows:?} (max_chunks is 4)");
}

#[test]
fn scores_do_not_depend_on_batching() {
    let texts = documents(&fixture("hier/documents.jsonl"));
    let dir = fixture("hier/bert-multihead");
    let (_, together) = run(&dir, &texts, 4096);
    let (_, tight) = run(&dir, &texts, 16);
    for (i, text) in texts.iter().enumerate() {
        let (_, alone) = run(&dir, std::slice::from_ref(text), 4096);
        for other in [&together[i][0], &tight[i][0]] {
            assert!(max_diff(&alone[0][0].logits, &other.logits) <= 1e-5, "document {i}");
            assert!(max_diff(&alone[0][0].attention, &other.attention) <= 1e-5, "document {i}");
        }
    }
}

/// all-MiniLM-L6-v2 with a reference head: the model directory is assembled here (90 MB).
#[test]
fn minilm_classifier_matches_the_reference() {
    let encoder = common::repo().join("../shared/models/all-MiniLM-L6-v2");
    if !encoder.join("model.safetensors").is_file() {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI must provide ../shared");
        eprintln!("skipping: {} not found", encoder.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    std::fs::create_dir(&model_dir).unwrap();
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(encoder.join("config.json")).unwrap()).unwrap();
    let section: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("hier/minilm/section.json")).unwrap()).unwrap();
    cfg["architectures"] = serde_json::json!(["LongreadHierarchicalClassifier"]);
    cfg["id2label"] = serde_json::json!({"0": "general", "1": "teen", "2": "mature"});
    cfg["longread"] = section;
    std::fs::write(model_dir.join("config.json"), cfg.to_string()).unwrap();
    std::fs::copy(encoder.join("tokenizer.json"), model_dir.join("tokenizer.json")).unwrap();
    let mut tensors = candle_core::safetensors::load(encoder.join("model.safetensors"), &Device::Cpu).unwrap();
    tensors.retain(|k, _| !k.ends_with("position_ids") && !k.starts_with("pooler."));
    let mut all: std::collections::HashMap<String, candle_core::Tensor> =
        tensors.into_iter().map(|(k, v)| (format!("bert.{k}"), v)).collect();
    all.extend(candle_core::safetensors::load(fixture("hier/minilm/head.safetensors"), &Device::Cpu).unwrap());
    candle_core::safetensors::save(&all, model_dir.join("model.safetensors")).unwrap();

    let texts = documents(&fixture("hier/minilm/documents.jsonl"));
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("hier/minilm/expected.json")).unwrap()).unwrap();
    let (chunked, scores) = run(&model_dir, &texts, 2048);
    compare("minilm", expected["head"].as_array().unwrap(), &chunked, &scores);
}

/// Elements held by the storage behind `t` (a view can hold far more than it shows).
fn storage_elements(t: &candle_core::Tensor) -> usize {
    match &*t.storage_and_layout().0 {
        candle_core::Storage::Cpu(s) => s.as_slice::<f32>().unwrap().len(),
        _ => unreachable!("CPU tests"),
    }
}

#[test]
fn cls_chunk_vectors_do_not_keep_the_token_states_alive() {
    // A head-only run keeps every chunk vector of the training set in memory: a [CLS] vector
    // that is a view of its chunk's [1, seq, hidden] states kept them all (5.6 GB for 6,800
    // chunks of 512 tokens).
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), false, &Device::Cpu).unwrap();
    assert_eq!(model.config().longread.chunk_pooling, longread_model::hierarchical::ChunkPooling::Cls);
    let hidden = model.config().encoder.hidden_size;
    for chunks in [1u32, 3] {
        let ids =
            candle_core::Tensor::arange(0u32, 8 * chunks, &Device::Cpu).unwrap().reshape((chunks as usize, 8)).unwrap();
        let mask = ids.ones_like().unwrap();
        let vectors = model.chunk_vectors(&ids, &mask, longread_model::Mode::Eval).unwrap();
        assert_eq!(vectors.dims(), [chunks as usize, hidden]);
        assert_eq!(storage_elements(&vectors), chunks as usize * hidden, "{chunks} chunk(s)");
    }
}
