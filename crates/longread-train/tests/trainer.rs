//! The training loop on the tiny BERT fixture with a small separable task.

use std::path::PathBuf;

use candle_core::Device;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::groups::{Freezing, GroupSettings};
use longread_train::schedule::Decay;
use longread_train::trainer::{train, CacheSettings, EpochLog, Keep, Metric, Progress, Split, TrainConfig};
use longread_train::unfreeze::UnfreezeSchedule;
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
    load_case("bert-attention")
}

fn load_case(case: &str) -> (HierarchicalClassifier, Chunker) {
    let model = HierarchicalClassifier::load(&fixture(&format!("hier/{case}")), true, &Device::Cpu).unwrap();
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
        freezing,
        unfreeze: None,
        task_weights: Vec::new(),
        frozen_tasks: Vec::new(),
        cache: CacheSettings::default(),
        groups: GroupSettings { lr, head_lr, weight_decay: 0.01, layer_lr_decay: 1.0 },
        adamw: AdamWConfig::default(),
        max_bad_steps: 3,
        stop_after_epoch: None,
        keep: Keep::Best,
    }
}

/// Trains without callbacks: the epoch logs.
fn train_quietly(
    model: &HierarchicalClassifier,
    (train_docs, train_labels): (&[ChunkedDocument], &[usize]),
    (dev_docs, dev_labels): (&[ChunkedDocument], &[usize]),
    cfg: &TrainConfig,
) -> Vec<EpochLog> {
    let (train_split, dev_split) = (Split::new(train_docs, train_labels), Split::new(dev_docs, dev_labels));
    train(model, train_split, dev_split, cfg, &Device::Cpu, None, |_| {}, |_| Ok(()), |_| Ok(())).unwrap()
}

/// Trains, noting for every epoch end whether its model was to be saved: the epoch logs and
/// those flags.
fn train_noting_saves(
    model: &HierarchicalClassifier,
    (train_docs, train_labels): (&[ChunkedDocument], &[usize]),
    (dev_docs, dev_labels): (&[ChunkedDocument], &[usize]),
    cfg: &TrainConfig,
) -> (Vec<EpochLog>, Vec<bool>) {
    let (train_split, dev_split) = (Split::new(train_docs, train_labels), Split::new(dev_docs, dev_labels));
    let mut saved = Vec::new();
    let on_epoch = |end: longread_train::trainer::EpochEnd| {
        saved.push(end.log.saved);
        Ok(())
    };
    let logs = train(model, train_split, dev_split, cfg, &Device::Cpu, None, |_| {}, on_epoch, |_| Ok(())).unwrap();
    (logs, saved)
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
    let (logs, saved) = train_noting_saves(&model, (&train_docs, &train_labels), (&dev_docs, &dev_labels), &cfg);
    assert_eq!(logs.len(), 30);
    assert!(saved.iter().any(|&s| s), "the best epoch is saved");
    let (first, last) = (&logs[0], &logs[logs.len() - 1]);
    assert!(last.train_loss < first.train_loss * 0.7, "loss {} -> {}", first.train_loss, last.train_loss);
    assert!(last.dev.as_ref().unwrap().accuracy >= 0.9, "dev accuracy {}", last.dev.as_ref().unwrap().accuracy);
    let head_params: usize =
        model.named_vars().iter().filter(|(n, _)| !n.starts_with("encoder:")).map(|(_, v)| v.elem_count()).sum();
    assert_eq!(first.trainable_parameters, head_params, "only the head trains");
}

#[test]
fn keep_last_saves_every_epoch_and_trains_the_same() {
    // `Keep::Best` saves the epochs that beat every earlier one; `Keep::Last` every epoch, so
    // the output holds the last. Which epoch is kept must not change the training itself.
    let (train_texts, train_labels) = dataset("train", 32);
    let (dev_texts, dev_labels) = dataset("test", 12);
    let flags = |keep: Keep| {
        let (model, chunker) = load();
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let cfg = TrainConfig { keep, ..config(Freezing { freeze_base: true, ..Freezing::default() }, 8, 0.0, 3e-2) };
        let (logs, saved) = train_noting_saves(&model, (&train_docs, &train_labels), (&dev_docs, &dev_labels), &cfg);
        let best: Vec<bool> = logs.iter().map(|l| l.best).collect();
        let losses: Vec<f64> = logs.iter().map(|l| l.train_loss).collect();
        (best, saved, losses)
    };
    let (best, saved, losses) = flags(Keep::Best);
    assert_eq!(saved, best, "--keep best saves exactly the best epochs");
    assert!(best.iter().any(|b| !b), "some epoch is not the best, or the test shows nothing: {best:?}");
    let (last_best, last_saved, last_losses) = flags(Keep::Last);
    assert!(last_saved.iter().all(|&s| s), "--keep last saves every epoch: {last_saved:?}");
    assert_eq!((last_best, last_losses), (best, losses), "the same run either way");
}

#[test]
fn a_run_without_a_dev_set_trains_exactly_as_one_with_and_keeps_every_epoch() {
    // `--dev-split 0`: an empty dev split. Evaluation draws nothing from the run's generators,
    // so the weights after each epoch are the same bits as with a dev set; the logs carry no
    // dev results, no epoch is "best", and every epoch is saved. Fine-tuning (recomputation)
    // and a frozen-layer cache, whose dev side is then empty.
    let (train_texts, train_labels) = dataset("train", 8);
    let (dev_texts, dev_labels) = dataset("test", 4);
    for freezing in [Freezing::default(), Freezing { freeze_bottom: 1, ..Freezing::default() }] {
        let cfg = TrainConfig { keep: Keep::Last, ..config(freezing, 2, 1e-3, 1e-2) };
        let run = |with_dev: bool| {
            let (model, chunker) = load();
            let train_docs = chunk_all(&chunker, &train_texts);
            let dev_docs = if with_dev { chunk_all(&chunker, &dev_texts) } else { Vec::new() };
            let dev = if with_dev { dev_labels.as_slice() } else { &[] };
            let (logs, saved) = train_noting_saves(&model, (&train_docs, &train_labels), (&dev_docs, dev), &cfg);
            (snapshot(&model), logs, saved)
        };
        let (with, with_logs, _) = run(true);
        let (without, logs, saved) = run(false);
        assert_eq!(max_weight_diff(&with, &without), 0.0, "{freezing:?}: the same training either way");
        assert_eq!(logs.len(), 2);
        for (a, b) in with_logs.iter().zip(&logs) {
            assert_eq!(a.train_loss.to_bits(), b.train_loss.to_bits(), "epoch {} train loss", a.epoch);
            assert!(a.dev.is_some() && a.dev_loss.is_some(), "the run with a dev set evaluates");
            assert!(b.dev.is_none() && b.dev_loss.is_none() && !b.best, "epoch {}: nothing to evaluate", b.epoch);
        }
        assert_eq!(saved, vec![true, true], "every epoch is saved: the last is the run's output");
        let line = serde_json::to_value(&logs[0]).unwrap();
        assert!(line.get("dev").is_none() && line.get("dev_loss").is_none(), "metrics.jsonl has no dev fields");
    }
}

#[test]
fn max_logits_top_k_attention_and_ordinal_heads_train() {
    // Gradients reach the head through the per-label max over chunks, through the top-k mask
    // and temperature of attention, and through an ordinal head's thresholds.
    for case in ["bert-max-logits", "bert-top2-sharp", "bert-ordinal", "bert-max-logits-ordinal"] {
        let (model, chunker) = load_case(case);
        let (train_texts, train_labels) = dataset("train", 32);
        let (dev_texts, dev_labels) = dataset("test", 12);
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let cfg = config(Freezing { freeze_base: true, ..Freezing::default() }, 60, 0.0, 3e-2);
        let logs = train_quietly(&model, (&train_docs, &train_labels), (&dev_docs, &dev_labels), &cfg);
        let (first, last) = (&logs[0], &logs[logs.len() - 1]);
        assert!(last.train_loss < first.train_loss * 0.7, "{case}: loss {} -> {}", first.train_loss, last.train_loss);
        // Chance is 0.5 on these 12 dev documents.
        assert!(
            last.dev.as_ref().unwrap().accuracy >= 0.8,
            "{case}: dev accuracy {}",
            last.dev.as_ref().unwrap().accuracy
        );
    }
}

#[test]
fn fine_tuning_with_recomputation_lowers_the_loss_and_is_reproducible() {
    let (train_texts, train_labels) = dataset("train", 16);
    let (dev_texts, dev_labels) = dataset("test", 6);
    let run = || {
        let (model, chunker) = load();
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let cfg = config(Freezing::default(), 4, 1e-3, 3e-3);
        let logs = train_quietly(&model, (&train_docs, &train_labels), (&dev_docs, &dev_labels), &cfg);
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
    resume_case(config(Freezing::default(), 3, 1e-3, 3e-3));
}

#[test]
fn resuming_across_an_unfreezing_phase_ends_bit_identical() {
    // Epoch 1 trains the head on cached vectors, epoch 2 the top layer, epoch 3 everything:
    // the resumed optimizer holds the head's moments and adds the rest as the run did.
    let mut cfg = config(Freezing::default(), 3, 1e-3, 3e-3);
    cfg.unfreeze = Some(UnfreezeSchedule::parse("0:head,1:top1,2:all").unwrap());
    resume_case(cfg);
}

fn resume_case(cfg: TrainConfig) {
    use longread_train::trainer::Resume;
    let (train_texts, train_labels) = dataset("train", 12);
    let (dev_texts, dev_labels) = dataset("test", 4);
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
            Split::new(&train_docs, &train_labels),
            Split::new(&dev_docs, &dev_labels),
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
            |_| Ok(()),
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

/// Regression: checkpoints only at epoch ends lost up to an epoch of work. A run killed after a
/// mid-epoch checkpoint (epoch 2 of 3, inside an unfreezing phase, dropout in the head) and
/// resumed from it ends with the weights and logs of the uninterrupted run.
#[test]
fn resuming_from_the_middle_of_an_epoch_ends_bit_identical() {
    use longread_train::trainer::Resume;
    let mut cfg = config(Freezing::default(), 3, 1e-3, 3e-3);
    cfg.unfreeze = Some(UnfreezeSchedule::parse("0:head,1:top1,2:all").unwrap());
    cfg.save_every_steps = Some(1);
    let (train_texts, train_labels) = dataset("train", 12);
    let (dev_texts, dev_labels) = dataset("test", 4);
    let tmp = tempfile::tempdir().unwrap();
    let run = |model: &HierarchicalClassifier, resume: Option<Resume>, kill_at_step: Option<usize>| {
        let chunker =
            Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
                .unwrap();
        let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
        let mut saved: Option<Resume> = None;
        let mut checkpoints = 0;
        let result = train(
            model,
            Split::new(&train_docs, &train_labels),
            Split::new(&dev_docs, &dev_labels),
            &cfg,
            &Device::Cpu,
            resume,
            |_| {},
            |_| Ok(()),
            |mid| {
                checkpoints += 1;
                assert!(mid.state.in_epoch.is_some());
                if Some(mid.state.step) == kill_at_step {
                    mid.model.save(&tmp.path().join("mid"))?;
                    let (moments, steps) = mid.optimizer.export_state()?;
                    saved = Some(Resume { state: mid.state.clone(), moments, steps });
                    return Err(longread_train::TrainError::InvalidSetting("killed".into()));
                }
                Ok(())
            },
        );
        (result, saved, checkpoints)
    };
    let whole = load().0;
    let (whole_logs, _, checkpoints) = run(&whole, None, None);
    let whole_logs = whole_logs.unwrap();
    // 12 documents in steps of 4: 3 steps an epoch, checkpoints after the first two of each.
    assert_eq!(checkpoints, 6);
    let (killed, saved, _) = run(&load().0, None, Some(4));
    assert!(killed.is_err(), "the run was killed");
    let progress = saved.as_ref().unwrap().state.in_epoch.clone().unwrap();
    assert_eq!((saved.as_ref().unwrap().state.epoch, progress.step_groups), (1, 1), "in epoch 2, after 1 step");
    let resumed = HierarchicalClassifier::load(&tmp.path().join("mid"), true, &Device::Cpu).unwrap();
    let (logs, _, _) = run(&resumed, saved, None);
    let logs = logs.unwrap();
    assert_eq!(logs.iter().map(|l| l.epoch).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(whole_logs.len(), logs.len() + 1);
    for (a, b) in whole_logs[1..].iter().zip(&logs) {
        assert_eq!(a.train_loss.to_bits(), b.train_loss.to_bits(), "epoch {} train loss", a.epoch);
        assert_eq!(a.dev_loss.unwrap().to_bits(), b.dev_loss.unwrap().to_bits(), "epoch {} dev loss", a.epoch);
    }
    let (a, b) = (whole.named_tensors().unwrap(), resumed.named_tensors().unwrap());
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs after resuming mid-epoch");
    }
}

/// Final weights and epoch logs of a run on the synthetic task.
fn run_with(
    cfg: &TrainConfig,
    n_train: usize,
) -> (std::collections::HashMap<String, Vec<f32>>, Vec<EpochLog>, Vec<Progress>) {
    let (model, chunker) = load();
    let (train_texts, train_labels) = dataset("train", n_train);
    let (dev_texts, dev_labels) = dataset("test", 6);
    let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
    let mut events = Vec::new();
    let logs = train(
        &model,
        Split::new(&train_docs, &train_labels),
        Split::new(&dev_docs, &dev_labels),
        cfg,
        &Device::Cpu,
        None,
        |p| events.push(p),
        |_| Ok(()),
        |_| Ok(()),
    )
    .unwrap();
    let weights = snapshot(&model);
    (weights, logs, events)
}

/// Every weight, copied out (the saved tensors share storage with the variables the optimizer
/// updates in place).
fn snapshot(model: &HierarchicalClassifier) -> std::collections::HashMap<String, Vec<f32>> {
    model
        .named_tensors()
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

fn max_weight_diff(
    a: &std::collections::HashMap<String, Vec<f32>>,
    b: &std::collections::HashMap<String, Vec<f32>>,
) -> f32 {
    assert!(!a.is_empty() && a.len() == b.len(), "the same tensors");
    assert!(a.iter().all(|(n, x)| b[n].len() == x.len()), "the same sizes");
    a.iter().flat_map(|(n, x)| x.iter().zip(&b[n]).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max)
}

#[test]
fn caching_frozen_layers_gives_the_results_of_recomputing_them() {
    let spill = tempfile::tempdir().unwrap();
    for freezing in
        [Freezing { freeze_bottom: 1, ..Freezing::default() }, Freezing { freeze_base: true, ..Freezing::default() }]
    {
        let mut cfg = config(freezing, 2, 1e-3, 3e-3);
        cfg.cache = CacheSettings {
            enabled: false,
            memory_limit: 0,
            spill_dir: spill.path().to_owned(),
            ..CacheSettings::default()
        };
        let (plain, plain_logs, _) = run_with(&cfg, 10);
        cfg.cache.enabled = true;
        cfg.cache.memory_limit = usize::MAX;
        let (in_memory, memory_logs, events) = run_with(&cfg, 10);
        let Some(Progress::Phase(phase)) = events.iter().find(|e| matches!(e, Progress::Phase(_))) else {
            panic!("no phase reported")
        };
        assert!(!phase.cache.is_empty(), "{freezing:?}: something is cached");
        cfg.cache.memory_limit = 0;
        let (on_disk, _, _) = run_with(&cfg, 10);
        for (what, weights) in [("in memory", &in_memory), ("on disk", &on_disk)] {
            let diff = max_weight_diff(&plain, weights);
            assert!(diff <= 1e-5, "{freezing:?}, cache {what}: weights differ by {diff}");
        }
        assert_eq!(plain_logs.len(), memory_logs.len());
        for (a, b) in plain_logs.iter().zip(&memory_logs) {
            assert!(
                (a.dev_loss.unwrap() - b.dev_loss.unwrap()).abs() <= 1e-5,
                "dev loss {} vs {}",
                a.dev_loss.unwrap(),
                b.dev_loss.unwrap()
            );
        }
        // The frozen layers did not move.
        let original = load().0.named_tensors().unwrap();
        let layer0 = "bert.encoder.layer.0.output.dense.weight";
        assert_eq!(plain[layer0], original[layer0].flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
}

#[test]
fn gradual_unfreezing_adds_layers_phase_by_phase() {
    let mut cfg = config(Freezing::default(), 3, 1e-3, 3e-3);
    cfg.unfreeze = Some(UnfreezeSchedule::parse("0:head,1:top1,2:all").unwrap());
    let (model, chunker) = load();
    let original = snapshot(&model);
    let (train_texts, train_labels) = dataset("train", 8);
    let (dev_texts, dev_labels) = dataset("test", 4);
    let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
    let mut phases = Vec::new();
    let mut moved: Vec<(bool, bool, bool)> = Vec::new();
    let changed = |m: &longread_model::hierarchical::HierarchicalClassifier, name: &str| {
        m.named_tensors().unwrap()[name].flatten_all().unwrap().to_vec1::<f32>().unwrap() != original[name]
    };
    let logs = train(
        &model,
        Split::new(&train_docs, &train_labels),
        Split::new(&dev_docs, &dev_labels),
        &cfg,
        &Device::Cpu,
        None,
        |p| {
            if let Progress::Phase(p) = p {
                phases.push(p)
            }
        },
        |end| {
            moved.push((
                changed(end.model, "classifier.out_proj.weight"),
                changed(end.model, "bert.encoder.layer.1.output.dense.weight"),
                changed(end.model, "bert.encoder.layer.0.output.dense.weight"),
            ));
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap();
    assert_eq!(phases.iter().map(|p| p.epoch).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(phases[0].trainable_parameters < phases[1].trainable_parameters);
    assert!(phases[1].trainable_parameters < phases[2].trainable_parameters);
    assert!(phases[2].trainable_parameters < phases[2].total_parameters, "the embeddings stay frozen");
    assert_eq!(phases[0].cache, "chunk vectors");
    assert!(phases[1].cache.contains("1 frozen layers"), "{}", phases[1].cache);
    assert_eq!(moved, vec![(true, false, false), (true, true, false), (true, true, true)]);
    assert_eq!(
        logs.iter().map(|l| l.trainable_parameters).collect::<Vec<_>>(),
        phases.iter().map(|p| p.trainable_parameters).collect::<Vec<_>>()
    );
}

#[test]
fn nan_steps_are_skipped_and_counted_and_too_many_in_a_row_stop_the_run() {
    let (_, labels) = dataset("train", 12);
    let rain = labels.iter().filter(|&&l| l == 0).count();
    assert!(rain > 0 && rain < labels.len());
    // A NaN class weight makes the loss of every "rain" document NaN.
    let mut cfg = config(Freezing { freeze_base: true, ..Freezing::default() }, 1, 0.0, 1e-2);
    cfg.batch_size = 1;
    cfg.class_weights = Some(vec![f32::NAN, 1.0]);
    cfg.max_bad_steps = 100;
    let (weights, logs, _) = run_with(&cfg, 12);
    assert_eq!(logs[0].skipped_steps, rain, "one skipped step per rain document");
    assert!(weights.values().flatten().all(|w| w.is_finite()), "skipped steps leave no NaN behind");

    // Every step NaN: the run stops after max_bad_steps with an error that says so, and the
    // model is untouched.
    cfg.class_weights = Some(vec![f32::NAN, f32::NAN]);
    cfg.max_bad_steps = 3;
    let (model, chunker) = load();
    let before = snapshot(&model);
    let (texts, labels) = dataset("train", 12);
    let docs = chunk_all(&chunker, &texts);
    let mut epochs_ended = 0;
    let err = train(
        &model,
        Split::new(&docs, &labels),
        Split::new(&docs, &labels),
        &cfg,
        &Device::Cpu,
        None,
        |_| {},
        |_| {
            epochs_ended += 1;
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(matches!(err, longread_train::TrainError::Diverged(_)), "{err}");
    assert!(err.to_string().contains("3 optimizer steps in a row"), "{err}");
    assert_eq!(epochs_ended, 0);
    for (name, t) in model.named_tensors().unwrap() {
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), before[&name], "{name} changed");
    }
}

#[test]
fn logit_offsets_enter_the_loss_and_the_dev_metrics() {
    // A wide-and-deep run adds each document's bag-of-words scores to its logits: the loss and
    // the dev metrics must see them. Offsets of +20 on the gold label make the training loss
    // vanish; −20 on the dev set's gold labels make every dev prediction wrong.
    let (model, chunker) = load();
    let (train_texts, train_labels) = dataset("train", 8);
    let (dev_texts, dev_labels) = dataset("test", 8);
    let (train_docs, dev_docs) = (chunk_all(&chunker, &train_texts), chunk_all(&chunker, &dev_texts));
    let n = model.labels().len();
    let offsets = |labels: &[usize], push: f32| -> Vec<candle_core::Tensor> {
        labels
            .iter()
            .map(|&l| {
                let mut v = vec![0f32; n];
                v[l] = push;
                candle_core::Tensor::from_vec(v, n, &Device::Cpu).unwrap()
            })
            .collect()
    };
    let cfg = config(Freezing { freeze_base: true, ..Freezing::default() }, 1, 0.0, 1e-6);
    let run = |train_offsets, dev_offsets| {
        let train_split = Split { offsets: train_offsets, ..Split::new(&train_docs, &train_labels) };
        let dev_split = Split { offsets: dev_offsets, ..Split::new(&dev_docs, &dev_labels) };
        train(&model, train_split, dev_split, &cfg, &Device::Cpu, None, |_| {}, |_| Ok(()), |_| Ok(())).unwrap()
    };
    let plain = run(None, None);
    let offset = run(Some(offsets(&train_labels, 20.0)), Some(offsets(&dev_labels, -20.0)));
    assert!(plain[0].train_loss > 0.3, "an untrained head is unsure: {}", plain[0].train_loss);
    assert!(offset[0].train_loss < 1e-3, "the offsets decide: {}", offset[0].train_loss);
    assert_eq!(offset[0].dev.as_ref().unwrap().accuracy, 0.0);
    assert!(offset[0].dev_loss.unwrap() > 10.0, "dev loss {}", offset[0].dev_loss.unwrap());
    // One offset per document, or a clear refusal.
    let short = Split { offsets: Some(offsets(&train_labels[..3], 1.0)), ..Split::new(&train_docs, &train_labels) };
    let err = train(
        &model,
        short,
        Split::new(&dev_docs, &dev_labels),
        &cfg,
        &Device::Cpu,
        None,
        |_| {},
        |_| Ok(()),
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("one logit offset per document"), "{err}");
}
