//! Chunk-level recomputation gives the gradients of back-propagating the whole graph.

use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::DropoutRng;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
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
        let labels = [0, 1, 2, 1];
        let vars: Vec<Var> = model.trainable_vars();
        assert!(vars.len() > 30, "encoder and head variables");
        let weights = Tensor::new(&[1.0f32, 2.0, 0.5], &Device::Cpu).unwrap();
        let run = |recompute: bool| {
            let settings = BatchSettings { max_batch_tokens: 40, recompute, class_weights: Some(&weights) };
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
            BatchSettings { max_batch_tokens: 40, recompute: true, class_weights: Some(&weights) },
            &Device::Cpu,
        )
        .unwrap();
        assert!((other.loss - full.loss).abs() > 1e-6, "{case}: dropout must change the loss");
    }
}
