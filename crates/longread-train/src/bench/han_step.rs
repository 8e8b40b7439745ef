//! The HAN's training step as a timed workload (`longread bench --workload han-step`): forward
//! in training mode, cross-entropy, backward, clipping at 0.5 and Adam, with the default sizes,
//! on the batch `scripts/bench_han.py` gives PyTorch.

use candle_core::{Device, Tensor};
use longread_model::han::{HanClassifier, HanConfig};
use longread_model::{DropoutRng, Mode};
use longread_text::words::Vocabulary;

use super::{memory_bytes, warm_then_time, BenchResult};
use crate::clip::{clip_factor, grad_norm};
use crate::error::{Result, TrainError};
use crate::gradients::StepGradients;
use crate::loss::cross_entropy;
use crate::optim::{AdamW, AdamWConfig, ParamGroup};

/// Words per sentence of the workload's batch.
pub const HAN_SENTENCE_WORDS: usize = 32;
/// Vocabulary of the workload's HAN (besides `<pad>` and `<unk>`).
pub const HAN_WORDS: usize = 12_288;

/// Runs one HAN training step untimed, then `repeat` timed, on `documents` documents of
/// `sentences` sentences of [`HAN_SENTENCE_WORDS`] words, every word real (ids spread over the
/// vocabulary in a fixed pattern), labels alternating, on `device`: the CPU (where `train --arch
/// han` runs: the GRU's time loop is one fused op) or a GPU (the time loop composed of candle
/// ops, step by step; each step is waited for before the clock stops).
pub fn run_han_step(documents: usize, sentences: usize, repeat: usize, device: &Device) -> Result<BenchResult> {
    if documents == 0 || sentences == 0 || repeat == 0 || documents * sentences > 1 << 20 {
        return Err(TrainError::InvalidSetting(format!(
            "{documents} documents of {sentences} sentences repeated {repeat} times: each must be at least 1 \
             and documents × sentences at most 1,048,576"
        )));
    }
    let device = device.clone();
    let words = ["<pad>", "<unk>"].iter().map(|w| w.to_string()).chain((0..HAN_WORDS).map(|i| format!("w{i}")));
    let vocabulary = Vocabulary::from_words(words.collect())?;
    let labels = vec!["false".to_string(), "true".to_string()];
    let config = HanConfig {
        vocab_size: vocabulary.len(),
        doc_size: sentences,
        sent_size: HAN_SENTENCE_WORDS,
        labels,
        ..HanConfig::default()
    };
    let model = HanClassifier::new(config, vocabulary, 1, &device)?;
    let n = documents * sentences * HAN_SENTENCE_WORDS;
    let ids: Vec<u32> = (0..n).map(|i| 2 + ((i * 7_919) % HAN_WORDS) as u32).collect();
    let ids = Tensor::from_vec(ids, (documents, sentences, HAN_SENTENCE_WORDS), &device)?;
    let gold: Vec<usize> = (0..documents).map(|i| i % 2).collect();
    let named = model.named_vars();
    let parameters = named.iter().map(|(_, v)| v.elem_count()).sum();
    let vars: Vec<_> = named.iter().map(|(_, v)| v.clone()).collect();
    let group = ParamGroup { name: "han".into(), lr: 1e-3, weight_decay: 0.0, params: named };
    let mut optimizer = AdamW::new(vec![group], AdamWConfig::default())?;
    let rng = DropoutRng::new(7);
    let loaded_rss_bytes = memory_bytes("VmRSS:");
    let (warmup_seconds, runs) = warm_then_time(repeat, || {
        let out = model.forward(&ids, Mode::Train(&rng))?;
        let loss = cross_entropy(&out.logits, &gold, None, &device)?;
        let mut step = StepGradients::new();
        step.backward_loss(&loss, &vars)?;
        let grads = step.into_map()?;
        let clip = clip_factor(grad_norm(grads.values())?, 0.5) as f32;
        optimizer.step_scaled(clip, |v| grads.get(&v.as_tensor().id()).cloned())?;
        Ok(device.synchronize()?)
    })?;
    Ok(BenchResult::of_runs(runs, parameters, loaded_rss_bytes, warmup_seconds))
}
