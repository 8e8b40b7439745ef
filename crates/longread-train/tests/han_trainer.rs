//! The HAN training loop: it learns a task carried by one word in one sentence, stops early,
//! and a run interrupted and resumed ends exactly where an uninterrupted one does.

use candle_core::Device;
use longread_model::han::{HanClassifier, HanConfig};
use longread_text::words::{split_document, GridShape, Sentence, Vocabulary};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::han_trainer::{train_han, HanSplit};
use longread_train::schedule::Decay;
use longread_train::trainer::{CacheSettings, EpochLog, Keep, Metric, Resume, TrainConfig};
use longread_train::AdamWConfig;

fn config(epochs: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size: 8,
        grad_accum: 1,
        max_grad_norm: 0.5,
        decay: Decay::Constant,
        warmup_ratio: 0.0,
        warmup_steps: None,
        save_every_steps: Some(0),
        save_every_seconds: 600.0,
        seed: 5,
        max_batch_tokens: 0,
        recompute: false,
        class_weights: None,
        pos_weight: None,
        metric: Metric::Accuracy,
        patience: 0,
        patience_min_steps: 0,
        freezing: Freezing::default(),
        unfreeze: None,
        task_weights: Vec::new(),
        frozen_tasks: Vec::new(),
        cache: CacheSettings::default(),
        groups: GroupSettings { lr: 1e-2, head_lr: 1e-2, weight_decay: 0.0, layer_lr_decay: 1.0 },
        adamw: AdamWConfig::default(),
        max_bad_steps: 3,
        stop_after_epoch: None,
        keep: Keep::Best,
    }
}

/// Documents of 3–5 filler sentences; one sentence (anywhere) says "great" (label 1) or
/// "awful" (label 0).
fn documents(n: usize, offset: usize) -> (Vec<Vec<Sentence>>, Vec<usize>) {
    let fillers = ["The cat sat on the mat", "We went to town today", "It rained all week long", "A dog ran by"];
    let mut docs = Vec::new();
    let mut labels = Vec::new();
    for i in offset..offset + n {
        let label = i % 2;
        let count = 3 + i % 3;
        let mut sentences: Vec<String> = (0..count).map(|k| fillers[(i + k) % fillers.len()].to_string()).collect();
        let key = if label == 1 { "The show was great" } else { "The show was awful" };
        sentences.insert((i * 7) % (count + 1), key.to_string());
        docs.push(split_document(&(sentences.join(". ") + ".")));
        labels.push(label);
    }
    (docs, labels)
}

/// Training grids and labels, dev grids and labels.
type Data = (Vec<Vec<u32>>, Vec<usize>, Vec<Vec<u32>>, Vec<usize>);

fn setup() -> (HanClassifier, Data) {
    let (train_docs, train_labels) = documents(48, 0);
    let (dev_docs, dev_labels) = documents(16, 1000);
    let vocab = Vocabulary::build(train_docs.iter().map(Vec::as_slice), 1, 0);
    let shape = GridShape { doc_size: 8, sent_size: 8 };
    let grids = |docs: &[Vec<Sentence>]| docs.iter().map(|d| shape.grid(d, &vocab).ids).collect::<Vec<_>>();
    let (train, dev) = (grids(&train_docs), grids(&dev_docs));
    let han = HanConfig {
        vocab_size: vocab.len(),
        embedding_dim: 16,
        word_hidden: 8,
        sentence_hidden: 8,
        word_attention_size: 16,
        sentence_attention_size: 16,
        attention_hops: 2,
        dropout: 0.1,
        doc_size: shape.doc_size,
        sent_size: shape.sent_size,
        labels: vec!["awful".into(), "great".into()],
        multi_label: false,
    };
    let model = HanClassifier::new(han, vocab, 11, &Device::Cpu).unwrap();
    (model, (train, train_labels, dev, dev_labels))
}

fn run(
    model: &HanClassifier,
    data: &Data,
    cfg: &TrainConfig,
    resume: Option<Resume>,
    saved: &mut Option<Resume>,
) -> Vec<EpochLog> {
    let train = HanSplit { grids: &data.0, labels: &data.1, sets: None };
    let dev = HanSplit { grids: &data.2, labels: &data.3, sets: None };
    train_han(
        model,
        train,
        dev,
        cfg,
        0.1,
        &Device::Cpu,
        resume,
        |_| {},
        |end| {
            let (moments, steps) = end.optimizer.export_state()?;
            *saved = Some(Resume { state: end.state.clone(), moments, steps });
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap()
}

fn weights(model: &HanClassifier) -> Vec<(String, Vec<f32>)> {
    model
        .named_tensors()
        .into_iter()
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect()
}

#[test]
fn han_training_learns_a_word_in_one_sentence_anywhere() {
    let (model, data) = setup();
    let mut saved = None;
    let logs = run(&model, &data, &config(12), None, &mut saved);
    let last = logs.last().unwrap();
    assert!(last.dev.as_ref().unwrap().accuracy >= 0.9, "dev accuracy {}", last.dev.as_ref().unwrap().accuracy);
    assert!(last.train_loss < logs[0].train_loss, "the loss falls: {} → {}", logs[0].train_loss, last.train_loss);
}

#[test]
fn a_resumed_han_run_ends_where_an_uninterrupted_one_does() {
    let (straight, data) = setup();
    let mut saved = None;
    let full = run(&straight, &data, &config(3), None, &mut saved);

    let (first, ..) = setup();
    let mut cfg = config(3);
    cfg.stop_after_epoch = Some(1);
    let mut saved = None;
    assert_eq!(run(&first, &data, &cfg, None, &mut saved).len(), 1);
    // Continue in a fresh model holding the checkpoint's weights.
    let (second, ..) = setup();
    assert_eq!(second.named_vars().len(), first.named_vars().len());
    for ((_, to), (_, from)) in second.named_vars().iter().zip(first.named_vars()) {
        to.set(from.as_tensor()).unwrap();
    }
    let mut again = None;
    let rest = run(&second, &data, &config(3), saved, &mut again);
    assert_eq!(rest.len(), 2);
    assert_eq!(rest.last().unwrap().dev_loss, full.last().unwrap().dev_loss);
    assert_eq!(weights(&second), weights(&straight));
}

#[test]
fn patience_stops_a_han_run() {
    let (model, data) = setup();
    let mut cfg = config(30);
    cfg.patience = 1;
    cfg.groups.lr = 0.0; // nothing improves after the first epoch
    let mut saved = None;
    let logs = run(&model, &data, &cfg, None, &mut saved);
    assert_eq!(logs.len(), 2, "epoch 1 is the best, epoch 2 does not improve: stop");
}
