//! Multi-task training: one encoder, a head per task, loss = Σ weight_t · loss_t.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor};
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec};
use longread_model::Mode;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::loss::{task_loss, TaskLoss};
use longread_train::schedule::Decay;
use longread_train::trainer::{train, CacheSettings, EpochLog, Keep, Metric, Split, TrainConfig};
use longread_train::AdamWConfig;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Synthetic documents; task 0 = rain (0) / prices (1); task 1 ("length") = short (0) / long
/// (1), labelled on every other document only.
fn data(model: &HierarchicalClassifier, n: usize) -> (Vec<ChunkedDocument>, Vec<Vec<Option<usize>>>) {
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    let mut docs = Vec::new();
    let mut labels = vec![Vec::new(), Vec::new()];
    for (i, line) in std::fs::read_to_string(fixture("synthetic/train.jsonl")).unwrap().lines().take(n).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let doc = chunker.chunk(v["text"].as_str().unwrap()).unwrap();
        labels[0].push(Some(usize::from(v["label"] == "prices")));
        labels[1].push((i % 2 == 0).then_some(usize::from(doc.chunks.len() > 2)));
        docs.push(doc);
    }
    (docs, labels)
}

fn two_task_model() -> HierarchicalClassifier {
    let mut model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    model.rename_task(0, "topic", "label").unwrap();
    let length =
        TaskSpec { name: "length".into(), column: "length".into(), labels: vec!["short".into(), "long".into()] };
    model.add_task(length, 5, &Device::Cpu).unwrap();
    model
}

fn config(epochs: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size: 4,
        grad_accum: 1,
        max_grad_norm: 1.0,
        decay: Decay::Linear,
        warmup_ratio: 0.0,
        warmup_steps: None,
        save_every_steps: Some(0),
        save_every_seconds: 600.0,
        seed: 3,
        max_batch_tokens: 64,
        recompute: true,
        class_weights: None,
        pos_weight: None,
        metric: Metric::MacroF1,
        patience: 0,
        patience_min_steps: 0,
        freezing: Freezing::default(),
        unfreeze: None,
        task_weights: Vec::new(),
        frozen_tasks: Vec::new(),
        cache: CacheSettings::default(),
        groups: GroupSettings { lr: 1e-3, head_lr: 3e-3, weight_decay: 0.01, layer_lr_decay: 1.0 },
        adamw: AdamWConfig::default(),
        max_bad_steps: 3,
        stop_after_epoch: None,
        keep: Keep::Best,
    }
}

fn snapshot(model: &HierarchicalClassifier) -> HashMap<String, Vec<f32>> {
    model
        .named_tensors()
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

fn run(
    model: &HierarchicalClassifier,
    cfg: &TrainConfig,
    labels_of: impl Fn(Vec<Vec<Option<usize>>>) -> Vec<Vec<Option<usize>>>,
) -> Vec<EpochLog> {
    let (docs, labels) = data(model, 12);
    let (dev_docs, dev_labels) = (docs[8..].to_vec(), labels.iter().map(|l| l[8..].to_vec()).collect::<Vec<_>>());
    let train_split = Split {
        docs: &docs[..8],
        labels: labels_of(labels.iter().map(|l| l[..8].to_vec()).collect()),
        offsets: None,
        sets: None,
    };
    let dev_split = Split { docs: &dev_docs, labels: labels_of(dev_labels), offsets: None, sets: None };
    train(model, train_split, dev_split, cfg, &Device::Cpu, None, |_| {}, |_| Ok(()), |_| Ok(())).unwrap()
}

#[test]
fn the_loss_is_the_weighted_sum_of_the_task_losses() {
    let model = two_task_model();
    let (docs, labels) = data(&model, 6);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let vectors = model.encode_documents(&refs, 64, &Device::Cpu, |_| {}).unwrap();
    let chunks: Vec<&Tensor> = vectors.iter().collect();
    let loss = |w: &[f64]| {
        task_loss(
            &model,
            &chunks,
            &labels,
            TaskLoss { task_weights: w, class_weights: None, offsets: None, multi_label: None },
            Mode::Eval,
            &Device::Cpu,
        )
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
    };
    let (first, second, both) = (loss(&[1.0, 0.0]), loss(&[0.0, 1.0]), loss(&[1.0, 2.0]));
    assert!((both - (first + 2.0 * second)).abs() < 1e-5, "{both} vs {first} + 2·{second}");
    assert!(first > 0.0 && second > 0.0);
}

#[test]
fn tasks_train_their_own_heads_report_their_own_metrics_and_can_be_frozen() {
    let model = two_task_model();
    let before = snapshot(&model);
    let logs = run(&model, &config(2), |l| l);
    assert_eq!(logs[1].tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["topic", "length"]);
    assert_eq!(logs[1].tasks[1].dev.per_class.len(), 2);
    let after = snapshot(&model);
    for name in [
        "classifier.out_proj.weight",
        "tasks.length.classifier.out_proj.weight",
        "tasks.length.pooler.projection.weight",
    ] {
        assert_ne!(before[name], after[name], "{name} trains");
    }

    let model = two_task_model();
    let before = snapshot(&model);
    let cfg = TrainConfig { frozen_tasks: vec![1], ..config(2) };
    run(&model, &cfg, |l| l);
    let after = snapshot(&model);
    assert_eq!(before["tasks.length.classifier.out_proj.weight"], after["tasks.length.classifier.out_proj.weight"]);
    assert_eq!(before["tasks.length.norm.weight"], after["tasks.length.norm.weight"]);
    assert_ne!(before["classifier.out_proj.weight"], after["classifier.out_proj.weight"]);
}

#[test]
fn a_second_task_with_weight_zero_changes_nothing_for_the_first() {
    // Two tasks, the second weighing 0, train exactly like the first task alone.
    let single = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let alone = run(&single, &config(2), |l| vec![l[0].clone()]);
    let multi = two_task_model();
    let cfg = TrainConfig { task_weights: vec![1.0, 0.0], frozen_tasks: vec![1], ..config(2) };
    let together = run(&multi, &cfg, |l| l);
    let (a, b) = (snapshot(&single), snapshot(&multi));
    for (name, values) in &a {
        assert_eq!(values, &b[name], "{name}");
    }
    assert_eq!(alone[1].train_loss, together[1].train_loss);
    assert!(alone[1].tasks.is_empty() && together[1].tasks.len() == 2);
}
