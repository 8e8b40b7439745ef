//! bf16 mixed precision: bf16 activations and matmuls over f32 master weights.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor, Var};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::DropoutRng;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::loss::TaskLoss;
use longread_train::prefix::{Prefix, PrefixCache, Storage};
use longread_train::recompute::{batch_gradients, BatchSettings};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn model(dtype: DType) -> HierarchicalClassifier {
    let mut m = HierarchicalClassifier::load(&fixture("hier/bert-multihead"), true, &Device::Cpu).unwrap();
    m.set_precision(dtype).unwrap();
    m
}

fn documents(model: &HierarchicalClassifier) -> Vec<ChunkedDocument> {
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(6)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            chunker.chunk(v["text"].as_str().unwrap()).unwrap()
        })
        .collect()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn bf16_chunk_vectors_stay_close_to_f32() {
    let (full, half) = (model(DType::F32), model(DType::BF16));
    let docs = documents(&full);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let a = full.encode_documents(&refs, 64, &Device::Cpu, |_| {}).unwrap();
    let b = half.encode_documents(&refs, 64, &Device::Cpu, |_| {}).unwrap();
    assert!(!a.is_empty() && a.len() == b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(y.dtype(), DType::F32, "pooling and heads run in f32");
        let (x, y) = (flat(x), flat(y));
        assert_eq!(x.len(), y.len());
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = x.iter().zip(&y).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(diff / scale < 0.05, "relative difference {}", diff / scale);
        assert!(diff > 0.0, "bf16 really computed in reduced precision");
    }
    let mut other = model(DType::F32);
    assert!(other.set_precision(DType::F16).unwrap_err().to_string().contains("f32 or bf16"));
}

#[test]
fn bf16_gradients_reach_every_f32_weight_and_point_the_same_way() {
    let run = |dtype: DType| {
        let m = model(dtype);
        let docs = documents(&m);
        let refs: Vec<&ChunkedDocument> = docs.iter().collect();
        let labels = vec![vec![Some(0), Some(1), Some(2), Some(1), Some(0), Some(2)]];
        let vars: Vec<Var> = m.trainable_vars();
        let settings = BatchSettings {
            max_batch_tokens: 64,
            recompute: true,
            loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
            prefix: Prefix::None,
        };
        let out = batch_gradients(&m, &refs, &labels, &vars, &DropoutRng::new(1), settings, &Device::Cpu).unwrap();
        let grads: Vec<Vec<f32>> = vars
            .iter()
            .map(|v| {
                let g = &out.grads[&v.as_tensor().id()];
                assert_eq!((v.dtype(), g.dtype()), (DType::F32, DType::F32), "f32 master weights and gradients");
                flat(g)
            })
            .collect();
        (out.loss, grads)
    };
    let (loss32, g32) = run(DType::F32);
    let (loss16, g16) = run(DType::BF16);
    assert!((loss32 - loss16).abs() < 0.05 * loss32.abs().max(1.0), "loss {loss32} vs {loss16}");
    let (a, b): (Vec<f32>, Vec<f32>) = (g32.concat(), g16.concat());
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64) * (*y as f64)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let cosine = dot / (norm(&a) * norm(&b));
    assert!(cosine > 0.98, "cosine similarity of the gradients {cosine}");
}

#[test]
fn a_bf16_prefix_cache_takes_half_the_memory() {
    let spill = tempfile::tempdir().unwrap();
    let sizes: Vec<usize> = [DType::F32, DType::BF16]
        .iter()
        .map(|&dtype| {
            let m = model(dtype);
            let docs = documents(&m);
            let storage = Storage { memory_limit: usize::MAX, spill_dir: spill.path(), store: None };
            PrefixCache::build(&m, &docs, 1, 64, storage, &Device::Cpu, |_| {}).unwrap().bytes_in_memory()
        })
        .collect();
    assert_eq!(sizes[0], 2 * sizes[1]);
    // Spilled to disk (as f32) and read back, a bf16 cache still serves bf16 states.
    let m = model(DType::BF16);
    let docs = documents(&m);
    let storage = Storage { memory_limit: 0, spill_dir: spill.path(), store: None };
    let on_disk = PrefixCache::build(&m, &docs, 1, 64, storage, &Device::Cpu, |_| {}).unwrap();
    assert_eq!(on_disk.get(0, 0, 20).unwrap().dtype(), DType::BF16);
}
