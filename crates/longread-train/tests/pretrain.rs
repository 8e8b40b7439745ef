//! MLM pretraining of a tiny RoBERTa on a small corpus: the held-out loss falls, and a run
//! stopped and resumed ends with the weights of an uninterrupted one.

use std::path::{Path, PathBuf};

use candle_core::Device;
use longread_model::masked_lm::MaskedLm;
use longread_model::model_dir::write_new_dir;
use longread_model::presets::{init_masked_lm, preset_config};
use longread_text::mlm::{pack_sequences, Masker};
use longread_text::{train_tokenizer, TokenizerKind, TokenizerTraining};
use longread_train::pretrain::{pretrain, PretrainConfig, PretrainResume};
use longread_train::schedule::Decay;
use longread_train::AdamWConfig;

fn corpus() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/synthetic/train.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

/// A tiny RoBERTa on a BPE tokenizer trained on the corpus, and the packed sequences.
fn setup(dir: &Path) -> (Vec<Vec<u32>>, Masker) {
    let texts = corpus();
    let cfg = TokenizerTraining { kind: TokenizerKind::Bpe, vocab_size: 400, min_frequency: 2, lowercase: false };
    let tokenizer = train_tokenizer(&texts, cfg).unwrap();
    let config = preset_config("tiny", tokenizer.get_vocab_size(true)).unwrap();
    let tensors = init_masked_lm(&config, 1).unwrap();
    let json = serde_json::to_string(&config).unwrap();
    let tok = tokenizer.to_string(false).unwrap();
    write_new_dir(dir, &tensors, &[("config.json", json.as_bytes()), ("tokenizer.json", tok.as_bytes())]).unwrap();
    let ids: Vec<Vec<u32>> =
        texts.iter().map(|t| tokenizer.encode(t.as_str(), false).unwrap().get_ids().to_vec()).collect();
    let masker = Masker { mask_prob: 0.15, mask_id: 4, vocab_size: 400, special_ids: vec![0, 1, 2, 3, 4] };
    (pack_sequences(&ids, 48, 0, 2, 2), masker)
}

fn config(masker: Masker, max_steps: usize) -> PretrainConfig {
    PretrainConfig {
        max_steps,
        batch_size: 8,
        masker,
        lr: 2e-3,
        weight_decay: 0.01,
        warmup_steps: 5,
        decay: Decay::Linear,
        max_grad_norm: 1.0,
        seed: 4,
        eval_every: 20,
        max_bad_steps: 3,
        adamw: AdamWConfig::default(),
        stop_after_step: None,
        pad_id: 1,
    }
}

#[test]
fn the_held_out_mlm_loss_falls() {
    let tmp = tempfile::tempdir().unwrap();
    let (sequences, masker) = setup(&tmp.path().join("enc"));
    let (held_out, train) = sequences.split_at(4);
    let model = MaskedLm::load(&tmp.path().join("enc"), true, &Device::Cpu).unwrap();
    let logs = pretrain(&model, train, held_out, &config(masker, 80), &Device::Cpu, None, |_| {}, |_| Ok(())).unwrap();
    assert_eq!(logs.iter().map(|l| l.step).collect::<Vec<_>>(), vec![20, 40, 60, 80]);
    let (first, last) = (&logs[0], &logs[3]);
    assert!(last.eval_loss < first.eval_loss, "held-out loss {} -> {}", first.eval_loss, last.eval_loss);
    // Far below guessing uniformly over the 400 tokens (ln 400 ≈ 6.0).
    assert!(last.eval_loss < (400f64).ln() - 1.5, "held-out loss {}", last.eval_loss);
    assert!((last.perplexity - last.eval_loss.exp()).abs() < 1e-9);
    assert!(last.tokens_per_second > 0.0);
}

#[test]
fn a_run_stopped_at_an_evaluation_and_resumed_ends_bit_identical() {
    stopped_and_resumed_ends_bit_identical(20, &[20], &[30]);
}

/// The evaluation rounds of a resumed run restart from the step it stopped at.
#[test]
fn a_run_stopped_between_evaluations_and_resumed_ends_bit_identical() {
    stopped_and_resumed_ends_bit_identical(13, &[13], &[20, 30]);
}

/// Pretrains 30 steps whole, and stopped after `stop` then resumed; the two end with the same
/// weights, the stopped run evaluating at `evaluated_first` steps, the resumed one at
/// `evaluated_then`.
fn stopped_and_resumed_ends_bit_identical(stop: usize, evaluated_first: &[usize], evaluated_then: &[usize]) {
    let tmp = tempfile::tempdir().unwrap();
    let (sequences, masker) = setup(&tmp.path().join("enc"));
    let (held_out, train) = sequences.split_at(4);
    let whole = MaskedLm::load(&tmp.path().join("enc"), true, &Device::Cpu).unwrap();
    pretrain(&whole, train, held_out, &config(masker.clone(), 30), &Device::Cpu, None, |_| {}, |_| Ok(())).unwrap();

    let first = MaskedLm::load(&tmp.path().join("enc"), true, &Device::Cpu).unwrap();
    let mut saved = None;
    let cfg = PretrainConfig { stop_after_step: Some(stop), ..config(masker.clone(), 30) };
    let stopped = pretrain(
        &first,
        train,
        held_out,
        &cfg,
        &Device::Cpu,
        None,
        |_| {},
        |e| {
            e.model.save(&tmp.path().join("ckpt"), &[])?;
            let (moments, steps) = e.optimizer.export_state()?;
            saved = Some(PretrainResume { state: e.state.clone(), moments, steps });
            Ok(())
        },
    )
    .unwrap();
    let resumed = MaskedLm::load(&tmp.path().join("ckpt"), true, &Device::Cpu).unwrap();
    let logs =
        pretrain(&resumed, train, held_out, &config(masker, 30), &Device::Cpu, saved, |_| {}, |_| Ok(())).unwrap();
    assert_eq!(stopped.iter().map(|l| l.step).collect::<Vec<_>>(), evaluated_first);
    assert_eq!(logs.iter().map(|l| l.step).collect::<Vec<_>>(), evaluated_then);
    let (a, b) = (whole.named_tensors().unwrap(), resumed.named_tensors().unwrap());
    for (name, t) in &a {
        let same = t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(same, "{name} differs after resuming");
    }
}

/// Regression: a skipped step (NaN loss or gradients, or no masked token) `continue`d past the
/// evaluation, so a run whose last steps were skipped never evaluated, saved or stopped.
#[test]
fn skipped_steps_still_evaluate_save_and_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let (sequences, masker) = setup(&tmp.path().join("enc"));
    let (held_out, train) = sequences.split_at(4);
    let model = MaskedLm::load(&tmp.path().join("enc"), true, &Device::Cpu).unwrap();
    // An absurd rate blows the weights up after the first step: every later step is NaN and skipped.
    let cfg = PretrainConfig { lr: 1e30, warmup_steps: 0, max_bad_steps: 1000, ..config(masker, 40) };
    let mut evaluated = Vec::new();
    let logs = pretrain(
        &model,
        train,
        held_out,
        &cfg,
        &Device::Cpu,
        None,
        |_| {},
        |e| {
            evaluated.push(e.state.step);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(evaluated, vec![20, 40], "evaluated and saved at every --eval-every and at the last step");
    assert_eq!(logs.iter().map(|l| l.step).collect::<Vec<_>>(), vec![20, 40]);
    assert!(logs[1].skipped_steps == 20, "{} skipped", logs[1].skipped_steps);
}
