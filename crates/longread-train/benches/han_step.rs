//! One HAN training step (forward, backward, clipping, Adam) on a full 32 × 64 × 32 batch with
//! the default sizes, as `scripts/bench_han.py` times it in PyTorch. Run:
//! `cargo bench -p longread-train --bench han_step [-- --repeat N] [--json]` (prints seconds per
//! step, median of N runs after a warm-up, default 5; `--json`: one line with every run and the
//! peak and loaded RSS, as `scripts/bench_han.py` reads it).

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{Device, Tensor};
use longread_model::han::{HanClassifier, HanConfig};
use longread_model::{DropoutRng, Mode};
use longread_text::words::Vocabulary;
use longread_train::clip::clip_grad_norm;
use longread_train::loss::cross_entropy;
use longread_train::{AdamW, AdamWConfig, ParamGroup};

const BATCH: usize = 32;
const DOC: usize = 64;
const SENT: usize = 32;
const WORDS: usize = 12_288;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let repeat = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>().expect("--repeat takes a number"))
        .unwrap_or(5)
        .max(1);
    let json = args.iter().any(|a| a == "--json");
    let device = Device::Cpu;
    let words: Vec<String> =
        ["<pad>", "<unk>"].iter().map(|w| w.to_string()).chain((0..WORDS).map(|i| format!("w{i}"))).collect();
    let vocabulary = Vocabulary::from_words(words).expect("vocabulary");
    let labels = vec!["false".to_string(), "true".to_string()];
    let config =
        HanConfig { vocab_size: vocabulary.len(), doc_size: DOC, sent_size: SENT, labels, ..HanConfig::default() };
    let model = HanClassifier::new(config, vocabulary, 1, &device).expect("model");
    // Every word real, ids spread over the vocabulary (a fixed pseudo-random pattern).
    let ids: Vec<u32> = (0..BATCH * DOC * SENT).map(|i| 2 + ((i * 7_919) % WORDS) as u32).collect();
    let ids = Tensor::from_vec(ids, (BATCH, DOC, SENT), &device).expect("ids");
    let gold: Vec<usize> = (0..BATCH).map(|i| i % 2).collect();
    let group = ParamGroup { name: "han".into(), lr: 1e-3, weight_decay: 0.0, params: model.named_vars() };
    let mut optimizer = AdamW::new(vec![group], AdamWConfig::default()).expect("optimizer");
    let vars = model.named_vars();
    let rng = DropoutRng::new(7);
    let loaded = longread_train::bench::loaded_rss_bytes();
    let mut times = Vec::new();
    for run in 0..=repeat {
        let started = Instant::now();
        let out = model.forward(&ids, Mode::Train(&rng)).expect("forward");
        let loss = cross_entropy(&out.logits, &gold, None, &device).expect("loss");
        let grads = loss.backward().expect("backward");
        let mut grads: HashMap<_, _> = vars
            .iter()
            .filter_map(|(_, v)| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone())))
            .collect();
        clip_grad_norm(&mut grads, 0.5).expect("clip");
        optimizer.step_with(|v| grads.get(&v.as_tensor().id()).cloned()).expect("step");
        if run > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    let runs = times.clone();
    times.sort_by(f64::total_cmp);
    let threads = candle_core::utils::get_num_threads();
    if json {
        let line = serde_json::json!({
            "seconds": times[times.len() / 2], "runs": runs, "threads": threads,
            "peak_rss_bytes": longread_train::bench::peak_rss_bytes(), "loaded_rss_bytes": loaded,
        });
        println!("{line}");
        return;
    }
    println!(
        "longread HAN step, batch {BATCH} × {DOC} sentences × {SENT} words, {threads} threads: {:.3} s (median of {})",
        times[times.len() / 2],
        times.len()
    );
}
