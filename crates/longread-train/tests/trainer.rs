//! The training loop on the tiny BERT fixture with a small separable task.

use std::path::PathBuf;

use candle_core::Device;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::schedule::Decay;
use longread_train::trainer::{train, Metric, Split, TrainConfig};
use longread_train::AdamWConfig;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// The first `n` documents of `tests/fixtures/synthetic/NAME.jsonl` (by
/// `scripts/make_synthetic_fixtures.py`): label 0 = rain, 1 = prices.
fn dataset(name: &str, n: usize) -> (Vec<String>, Vec<usize>) {
    std::fs::read_to_string(fixture(&format!("synthetic/{name}.jsonl")))
        .unwrap()
        .lines()
        .take(n)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["text"].as_str().unwrap().to_owned(), usize::from(v["label"] == "prices"))
        })
        .unzip()
}

fn load() -> (HierarchicalClassifier, Chunker) {
    let model = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu).unwrap();
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    (model, chunker)
}

fn config(freezing: Freezing, epochs: usize, lr: f64, head_lr: f64) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size: 4,
        grad_accum: 1,
        max_grad_norm: 1.0,
        decay: Decay::Linear,
        warmup_ratio: 0.1,
        seed: 3,
        max_batch_tokens: 64,
        recompute: true,
        class_weights: None,
        metric: Metric::MacroF1,
        patience: 0,
        freezing,
        groups: GroupSettings { lr, head_lr, weight_decay: 0.01, layer_lr_decay: 1.0 },
        adamw: AdamWConfig::default(),
        max_bad_steps: 3,
        stop_after_epoch: None,
    }
}

fn chunk_all(chunker: &Chunker, texts: &[String]) -> Vec<ChunkedDocument> {
    texts.iter().map(|t| chunker.chunk(t).unwrap()).collect()
}

#[test]
fn head_only_training_learns_a_separable_task() {
    let (model, chunker) = load();
    let (train_texts, train_labels) = dataset("train", 32);
    let (dev_texts, dev_labels) = dataset("test", 12);
    let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
    let cfg = config(Freezing { freeze_base: true, ..Freezing::default() }, 30, 0.0, 3e-2);
    let mut best_epochs = 0;
    let logs = train(
        &model,
        Split { docs: &train_docs, labels: &train_labels },
        Split { docs: &dev_docs, labels: &dev_labels },
        &cfg,
        &Device::Cpu,
        None,
        |_| {},
        |end| {
            best_epochs += end.log.best as usize;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(logs.len(), 30);
    assert!(best_epochs >= 1);
    let (first, last) = (&logs[0], &logs[logs.len() - 1]);
    assert!(last.train_loss < first.train_loss * 0.7, "loss {} -> {}", first.train_loss, last.train_loss);
    assert!(last.dev.accuracy >= 0.9, "dev accuracy {}", last.dev.accuracy);
    let head_params: usize =
        model.named_vars().iter().filter(|(n, _)| !n.starts_with("encoder:")).map(|(_, v)| v.elem_count()).sum();
    assert_eq!(first.trainable_parameters, head_params, "only the head trains");
}

#[test]
fn fine_tuning_with_recomputation_lowers_the_loss_and_is_reproducible() {
    let (train_texts, train_labels) = dataset("train", 16);
    let (dev_texts, dev_labels) = dataset("test", 6);
    let run = || {
        let (model, chunker) = load();
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let cfg = config(Freezing::default(), 4, 1e-3, 3e-3);
        let logs = train(
            &model,
            Split { docs: &train_docs, labels: &train_labels },
            Split { docs: &dev_docs, labels: &dev_labels },
            &cfg,
            &Device::Cpu,
            None,
            |_| {},
            |_| Ok(()),
        )
        .unwrap();
        (logs, model.named_tensors().unwrap())
    };
    let (logs, weights) = run();
    assert!(logs[3].train_loss < logs[0].train_loss, "{} -> {}", logs[0].train_loss, logs[3].train_loss);
    let head: usize =
        load().0.named_vars().iter().filter(|(n, _)| !n.starts_with("encoder:")).map(|(_, v)| v.elem_count()).sum();
    assert!(logs[0].trainable_parameters > head + 10_000, "encoder layers train");
    let (_, again) = run();
    for (name, t) in &weights {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == again[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs between two runs with the same seed");
    }
    // The embeddings are frozen by default.
    let original = HierarchicalClassifier::load(&fixture("hier/bert-attention"), true, &Device::Cpu)
        .unwrap()
        .named_tensors()
        .unwrap();
    let emb = "bert.embeddings.word_embeddings.weight";
    assert_eq!(
        weights[emb].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        original[emb].flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    let q = "bert.encoder.layer.1.attention.self.query.weight";
    assert_ne!(
        weights[q].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        original[q].flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
}

#[test]
fn a_run_killed_after_an_epoch_and_resumed_from_disk_ends_bit_identical() {
    use longread_train::trainer::Resume;
    let (train_texts, train_labels) = dataset("train", 12);
    let (dev_texts, dev_labels) = dataset("test", 4);
    let cfg = config(Freezing::default(), 3, 1e-3, 3e-3);
    let run = |model: &HierarchicalClassifier,
               resume: Option<Resume>,
               kill_after: Option<usize>,
               save: &std::path::Path| {
        let chunker =
            Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
                .unwrap();
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let mut saved: Option<Resume> = None;
        let result = train(
            model,
            Split { docs: &train_docs, labels: &train_labels },
            Split { docs: &dev_docs, labels: &dev_labels },
            &cfg,
            &Device::Cpu,
            resume,
            |_| {},
            |end| {
                if Some(end.state.epoch) == kill_after {
                    end.model.save(save)?;
                    let (moments, steps) = end.optimizer.export_state()?;
                    saved = Some(Resume { state: end.state.clone(), moments, steps });
                    return Err(longread_train::TrainError::InvalidSetting("killed".into()));
                }
                Ok(())
            },
        );
        (result, saved)
    };
    let tmp = tempfile::tempdir().unwrap();
    let (whole, _) = (load().0, ());
    run(&whole, None, None, tmp.path()).0.unwrap();

    let ckpt = tmp.path().join("after-epoch-1");
    let (first, saved) = run(&load().0, None, Some(1), &ckpt);
    assert!(first.is_err(), "the run was killed");
    let resumed = HierarchicalClassifier::load(&ckpt, true, &Device::Cpu).unwrap();
    let logs = run(&resumed, saved, None, tmp.path()).0.unwrap();
    assert_eq!(logs.iter().map(|l| l.epoch).collect::<Vec<_>>(), vec![2, 3]);

    let (a, b) = (whole.named_tensors().unwrap(), resumed.named_tensors().unwrap());
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs after resuming");
    }
}
