//! Chunk-level recomputation gives the gradients of back-propagating the whole graph.

use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use longread_model::hierarchical::{DocumentStore, HierarchicalClassifier};
use longread_model::DropoutRng;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::loss::TaskLoss;
use longread_train::prefix::{open_store, Prefix, PrefixCache, Storage};
use longread_train::recompute::{batch_gradients, BatchSettings};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn documents(model: &HierarchicalClassifier) -> Vec<ChunkedDocument> {
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    std::fs::read_to_string(fixture("hier/documents.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            chunker.chunk(v["text"].as_str().unwrap()).unwrap()
        })
        .collect()
}

#[test]
fn recomputed_gradients_equal_full_graph_gradients_with_dropout_on() {
    for case in ["hier/bert-attention", "hier/bert-multihead"] {
        let model = HierarchicalClassifier::load(&fixture(case), true, &Device::Cpu).unwrap();
        let docs = documents(&model);
        let refs: Vec<&ChunkedDocument> = docs.iter().collect();
        let labels = vec![vec![Some(0), Some(1), Some(2), Some(1)]];
        let vars: Vec<Var> = model.trainable_vars();
        assert!(vars.len() > 30, "encoder and head variables");
        let weights = Tensor::new(&[1.0f32, 2.0, 0.5], &Device::Cpu).unwrap();
        let run = |recompute: bool| {
            let settings = BatchSettings {
                max_batch_tokens: 40,
                recompute,
                loss: TaskLoss { task_weights: &[], class_weights: Some(&weights), offsets: None },
                prefix: Prefix::None,
            };
            batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(11), settings, &Device::Cpu).unwrap()
        };
        let (full, chunked) = (run(false), run(true));
        assert!((full.loss - chunked.loss).abs() < 1e-6, "{case}: loss {} vs {}", full.loss, chunked.loss);
        assert_eq!(full.grads.len(), vars.len(), "{case}: every variable gets a gradient");
        assert_eq!(chunked.grads.len(), vars.len());
        let mut largest = 0f32;
        for v in &vars {
            let (a, b) = (&full.grads[&v.as_tensor().id()], &chunked.grads[&v.as_tensor().id()]);
            let diff =
                a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            largest = largest.max(diff);
        }
        assert!(largest <= 1e-5, "{case}: largest gradient difference {largest}");
        // Dropout really was on: another seed gives another loss.
        let other = batch_gradients(
            &model,
            &refs,
            &labels,
            &vars,
            &DropoutRng::new(12),
            BatchSettings {
                max_batch_tokens: 40,
                recompute: true,
                loss: TaskLoss { task_weights: &[], class_weights: Some(&weights), offsets: None },
                prefix: Prefix::None,
            },
            &Device::Cpu,
        )
        .unwrap();
        assert!((other.loss - full.loss).abs() > 1e-6, "{case}: dropout must change the loss");
    }
}

#[test]
fn cached_frozen_prefix_gives_the_gradients_of_recomputing_it() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let labels = vec![vec![Some(0), Some(1), Some(2), Some(1)]];
    // Embeddings and layer 0 frozen: layer 1, pooling and head train.
    let vars: Vec<Var> = model
        .named_vars()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("encoder:embeddings") && !n.starts_with("encoder:encoder.layer.0."))
        .map(|(_, v)| v)
        .collect();
    let doc_ids: Vec<usize> = (0..docs.len()).collect();
    let spill = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = open_store(&model, store_dir.path(), 1, "F32").unwrap();
    let build = |memory_limit: usize, store: Option<&DocumentStore>| {
        let storage = Storage { memory_limit, spill_dir: spill.path(), store };
        PrefixCache::build(&model, &docs, 1, 40, storage, &Device::Cpu, |_| {}).unwrap()
    };
    let in_memory = build(usize::MAX, None);
    let on_disk = build(0, None);
    assert_eq!(on_disk.bytes_in_memory(), 0);
    assert!(on_disk.bytes_on_disk() > 0 && in_memory.bytes_on_disk() == 0);
    let stored = build(0, Some(&store));
    assert_eq!((stored.bytes_in_memory(), stored.bytes_on_disk(), stored.chunks_reused()), (0, 0, 0));
    let read_back = build(0, Some(&store));
    let chunks: usize = docs.iter().map(|d| d.chunks.len()).sum();
    assert_eq!(read_back.chunks_reused(), chunks, "the second build reads every chunk from the store");
    let run = |recompute: bool, prefix: Prefix| {
        let settings = BatchSettings {
            max_batch_tokens: 40,
            recompute,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None },
            prefix,
        };
        batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(5), settings, &Device::Cpu).unwrap()
    };
    let reference = run(false, Prefix::Frozen { layers: 1 });
    assert_eq!(reference.grads.len(), vars.len(), "every trainable variable gets a gradient");
    for (what, out) in [
        ("recomputed", run(true, Prefix::Frozen { layers: 1 })),
        ("cached in memory", run(true, Prefix::Cached { cache: &in_memory, doc_ids: &doc_ids })),
        ("cached on disk", run(true, Prefix::Cached { cache: &on_disk, doc_ids: &doc_ids })),
        ("stored", run(true, Prefix::Cached { cache: &stored, doc_ids: &doc_ids })),
        ("read back from the store", run(true, Prefix::Cached { cache: &read_back, doc_ids: &doc_ids })),
        ("cached, full graph", run(false, Prefix::Cached { cache: &in_memory, doc_ids: &doc_ids })),
    ] {
        assert!((out.loss - reference.loss).abs() < 1e-6, "{what}: loss {} vs {}", out.loss, reference.loss);
        for v in &vars {
            let (a, b) = (&reference.grads[&v.as_tensor().id()], &out.grads[&v.as_tensor().id()]);
            let diff =
                a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(diff <= 1e-5, "{what}: gradient differs by {diff}");
        }
    }
    // The comparison above is not vacuous: dropout in the trainable top is on.
    let other = batch_gradients(
        &model,
        &refs,
        &labels,
        &vars,
        &DropoutRng::new(6),
        BatchSettings {
            max_batch_tokens: 40,
            recompute: true,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None },
            prefix: Prefix::Frozen { layers: 1 },
        },
        &Device::Cpu,
    )
    .unwrap();
    assert!((other.loss - reference.loss).abs() > 1e-6, "dropout above the frozen layers is on");
}

/// The largest absolute difference between two caches' states of every chunk.
fn largest_state_difference(a: &PrefixCache, b: &PrefixCache, docs: &[ChunkedDocument]) -> f32 {
    let mut largest = 0f32;
    for (d, doc) in docs.iter().enumerate() {
        for c in 0..doc.chunks.len() {
            let (x, y) = (a.get(d, c, 0).unwrap(), b.get(d, c, 0).unwrap());
            assert_eq!(x.dims(), y.dims());
            let diff = x.sub(&y).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            largest = largest.max(diff.to_scalar::<f32>().unwrap());
        }
    }
    largest
}

#[test]
fn an_interrupted_prefix_store_fill_resumes_where_it_stopped() {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let docs = documents(&model);
    let spill = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&model, dir.path(), 1, "F32").unwrap();
    let build = |docs: &[ChunkedDocument], store: Option<&DocumentStore>, encoded: &mut usize| {
        let storage = Storage { memory_limit: usize::MAX, spill_dir: spill.path(), store };
        let mut ticks = 0;
        let cache = PrefixCache::build(&model, docs, 1, 40, storage, &Device::Cpu, |n| ticks += n).unwrap();
        assert_eq!(ticks, docs.iter().map(|d| d.chunks.len()).sum::<usize>(), "progress counts every chunk");
        *encoded = ticks - cache.chunks_reused();
        cache
    };
    let mut encoded = 0;
    // A fill stopped after the first two documents left their files in the store.
    build(&docs[..2], Some(&store), &mut encoded);
    let first_two: usize = docs[..2].iter().map(|d| d.chunks.len()).sum();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "one file per document");
    let resumed = build(&docs, Some(&store), &mut encoded);
    assert_eq!(resumed.chunks_reused(), first_two, "the rerun reads what was stored");
    assert_eq!(encoded, docs.iter().map(|d| d.chunks.len()).sum::<usize>() - first_two, "and encodes the rest");
    let fresh = build(&docs, None, &mut encoded);
    assert!(largest_state_difference(&resumed, &fresh, &docs) == 0.0, "stored states equal fresh ones");

    // A damaged file is a miss (recomputed), never a wrong hit.
    let victim = store.path(&docs[0]);
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() - 4]).unwrap();
    let repaired = build(&docs, Some(&store), &mut encoded);
    assert_eq!(encoded, docs[0].chunks.len(), "only the damaged document is encoded again");
    assert!(largest_state_difference(&repaired, &fresh, &docs) == 0.0);
    assert_eq!(std::fs::read(&victim).unwrap(), bytes, "and its file is written whole again");

    // Another number of frozen layers is another key.
    let two_layers = open_store(&model, dir.path(), 2, "F32").unwrap();
    assert_ne!(two_layers.path(&docs[0]), store.path(&docs[0]));
}
