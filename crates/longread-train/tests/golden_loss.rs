//! The multi-label loss against PyTorch's `BCEWithLogitsLoss` (fixture by
//! `scripts/make_loss_fixtures.py`): mean without and with `pos_weight`, the summed form the
//! step's shares use, and the gradient with respect to the logits, at logits large enough
//! that a naive `log(sigmoid(x))` loses them.

use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use longread_train::loss::{binary_cross_entropy_sum, multi_hot};
use serde_json::Value;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/loss/bce.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn matrix(v: &Value) -> Vec<Vec<f32>> {
    serde_json::from_value(v.clone()).unwrap()
}

fn tensor(rows: &[Vec<f32>]) -> Tensor {
    Tensor::new(rows.iter().flatten().copied().collect::<Vec<_>>(), &Device::Cpu)
        .unwrap()
        .reshape((rows.len(), rows[0].len()))
        .unwrap()
}

fn close(got: f32, want: &Value, what: &str) {
    let want = want.as_f64().unwrap() as f32;
    assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{what}: {got} vs PyTorch {want}");
}

#[test]
fn binary_cross_entropy_matches_pytorch_with_and_without_pos_weight() {
    let f = fixture();
    let (logits, targets) = (matrix(&f["logits"]), matrix(&f["targets"]));
    let elements = (logits.len() * logits[0].len()) as f64;
    let pos_weight =
        Tensor::new(serde_json::from_value::<Vec<f32>>(f["pos_weight"].clone()).unwrap(), &Device::Cpu).unwrap();
    let (x, y) = (tensor(&logits), tensor(&targets));

    let plain = binary_cross_entropy_sum(&x, &y, None).unwrap().to_scalar::<f32>().unwrap() / elements as f32;
    close(plain, &f["mean"], "mean");
    let sum = binary_cross_entropy_sum(&x, &y, Some(&pos_weight)).unwrap().to_scalar::<f32>().unwrap();
    close(sum, &f["sum_weighted"], "sum with pos_weight");
    close(sum / elements as f32, &f["mean_weighted"], "mean with pos_weight");

    let var = Var::from_tensor(&x).unwrap();
    let loss = (binary_cross_entropy_sum(var.as_tensor(), &y, Some(&pos_weight)).unwrap() / elements).unwrap();
    let grads = loss.backward().unwrap();
    let grad = grads.get(var.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    for (row, want) in grad.iter().zip(matrix(&f["grad_mean_weighted"])) {
        for (g, w) in row.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6, "gradient {g} vs PyTorch {w}");
        }
    }
}

#[test]
fn label_sets_become_rows_of_ones_and_a_label_past_the_last_is_refused() {
    let sets: Vec<&[usize]> = vec![&[0, 3], &[], &[0, 1, 2, 3]];
    let rows = multi_hot(&sets, 4, &Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
    assert_eq!(rows, vec![vec![1.0, 0.0, 0.0, 1.0], vec![0.0; 4], vec![1.0; 4]]);
    let bad: Vec<&[usize]> = vec![&[4]];
    assert!(multi_hot(&bad, 4, &Device::Cpu).unwrap_err().to_string().contains("past the 4 labels"));
}

/// A multi-label single-chunk model trained by longread loads in transformers as a
/// multi-label `BertForSequenceClassification` (`problem_type` read from config.json), and
/// transformers' loss on each document's label set is ours on our logits (fixture by
/// `scripts/make_sequence_fixtures.py --cases bert-multilabel`).
#[test]
fn transformers_reads_a_multi_label_model_and_computes_our_loss() {
    use longread_model::hierarchical::HierarchicalClassifier;
    use longread_text::{Chunker, TextTokenizer};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/seq/bert-multilabel");
    let model = HierarchicalClassifier::load(&dir, false, &Device::Cpu).unwrap();
    assert!(model.is_multi_label(0));
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let documents = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hier/documents.jsonl");
    let texts: Vec<String> = std::fs::read_to_string(documents)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].as_str().unwrap().to_string())
        .collect();
    let labels = model.labels().to_vec();
    let mut with_labels = 0;
    for (want, text) in expected.iter().zip(&texts) {
        let doc = chunker.chunk(text).unwrap();
        let vectors = model.encode_documents(&[&doc], 4096, &Device::Cpu, |_| {}).unwrap();
        let logits = model.classify(&vectors[0], longread_model::Mode::Eval).unwrap().logits.unsqueeze(0).unwrap();
        let gold: Vec<usize> = want["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| labels.iter().position(|x| x == l.as_str().unwrap()).unwrap())
            .collect();
        with_labels += usize::from(!gold.is_empty());
        let targets = multi_hot(&[gold.as_slice()], labels.len(), &Device::Cpu).unwrap();
        let ours = binary_cross_entropy_sum(&logits, &targets, None).unwrap().to_scalar::<f32>().unwrap()
            / labels.len() as f32;
        close(ours, &want["loss"], &format!("{}: transformers' loss", want["id"]));
    }
    assert!(with_labels >= 2, "documents with labels and without");
}
