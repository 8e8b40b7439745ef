//! Timed workloads for `longread bench`: an encoder's forward pass, a training step and an
//! AdamW step, on deterministic inputs, a classifier's predict ([`predict`]) and whole
//! training step ([`train_step`]), the HAN's training step ([`han_step`]) and one encoder
//! layer's GPU kernels alone ([`kernels`]), for comparison with PyTorch on the same workload.

mod han_step;
mod host_profile;
mod kernels;
mod predict;
mod train_step;

pub use han_step::{run_han_step, HAN_SENTENCE_WORDS};
pub use host_profile::HostProfile;
pub use kernels::{run_kernels, KernelRow, KernelShape};
pub use predict::{run_predict, synthetic_documents};
pub use train_step::{
    run_train_step, GpuTimeline, HeadStart, OpRow, SpanRow, StepProfile, StepTime, TrainStepResult, TrainStepSettings,
};

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Tensor, TensorId, Var};
use candle_nn::VarMap;
use longread_model::checkpoint::fresh_var_builder;
use longread_model::presets::preset_config;
use longread_model::{Checkpoint, DropoutRng, Encoder, LoadOptions, Mode};

use crate::error::{Result, TrainError};
use crate::optim::{AdamW, AdamWConfig, ParamGroup};

/// Vocabulary of the preset encoders (RoBERTa's).
pub const PRESET_VOCAB: usize = 50_265;

/// What to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Encoder forward pass in inference mode (no dropout, no graph).
    EncoderForward,
    /// Forward in training mode (dropout) + backward of mean(last hidden state) + AdamW step
    /// over every encoder parameter.
    TrainStep,
    /// One AdamW step over every encoder parameter, every gradient 1.
    OptimizerStep,
}

/// The encoder a workload runs.
#[derive(Debug, Clone)]
pub enum EncoderSource {
    /// A preset shape with random weights (seed 0, vocabulary [`PRESET_VOCAB`]).
    Preset(String),
    /// A pretrained encoder directory.
    Dir(PathBuf),
}

/// A workload's timings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    /// Median seconds of the timed runs.
    pub seconds: f64,
    /// Every timed run, in order (after one untimed warm-up run).
    pub runs: Vec<f64>,
    /// Encoder parameters.
    pub parameters: usize,
    /// Threads of candle's pool.
    pub threads: usize,
    /// Resident memory once the encoder, inputs and optimizer were set up, before the first
    /// run (where the system reports it): peak minus this is what the workload itself took.
    pub loaded_rss_bytes: Option<u64>,
    /// Seconds of the untimed first run: the warm-up a user waits for (on a GPU, loading the
    /// kernels and filling the memory pool; there is no compilation step).
    pub warmup_seconds: f64,
}

/// Runs `workload` once untimed, then `repeat` times timed, on a `batch × tokens` batch of
/// deterministic ids without padding.
pub fn run_workload(
    source: &EncoderSource,
    workload: Workload,
    batch: usize,
    tokens: usize,
    repeat: usize,
) -> Result<BenchResult> {
    let device = longread_model::device::host();
    let vars = VarMap::new();
    let encoder = match source {
        EncoderSource::Dir(dir) => {
            let options = LoadOptions { trainable: Some(vars.clone()), ..LoadOptions::default() };
            Checkpoint::open(dir)?.load_encoder(&options, &device)?
        }
        EncoderSource::Preset(name) => {
            let config = preset_config(name, PRESET_VOCAB)?;
            Encoder::load(fresh_var_builder("roberta", 0, Some(vars.clone()), DType::F32, &device), &config)?
        }
    };
    let max = encoder.config().max_sequence_length();
    if batch == 0 || tokens == 0 || tokens > max || repeat == 0 {
        return Err(TrainError::InvalidSetting(format!(
            "a {batch}x{tokens} batch repeated {repeat} times does not fit: the encoder takes 1 to {max} tokens"
        )));
    }
    let vocab = encoder.config().vocab_size as u64;
    // Deterministic ids that avoid the first few (special) tokens.
    let ids: Vec<u32> = (0..batch * tokens).map(|i| (5 + (i as u64 * 7_919) % (vocab - 5)) as u32).collect();
    let ids = Tensor::from_vec(ids, (batch, tokens), &device)?;
    let mask = ids.ones_like()?;
    let params: Vec<(String, Var)> = {
        let data = vars.data().lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    };
    let parameters = params.iter().map(|(_, v)| v.elem_count()).sum();
    let group = ParamGroup { name: "encoder".into(), lr: 1e-5, weight_decay: 0.01, params: params.clone() };
    let mut optimizer = AdamW::new(vec![group], AdamWConfig::default())?;
    let ones: HashMap<TensorId, Tensor> = match workload {
        Workload::OptimizerStep => params
            .iter()
            .map(|(_, v)| Ok((v.as_tensor().id(), v.as_tensor().ones_like()?)))
            .collect::<candle_core::Result<_>>()?,
        _ => HashMap::new(),
    };
    let loaded_rss_bytes = memory_bytes("VmRSS:");
    let rng = DropoutRng::new(1);
    let (warmup_seconds, runs) = warm_then_time(repeat, || {
        match workload {
            Workload::EncoderForward => {
                encoder.forward(&ids, &mask, Mode::Eval)?;
            }
            Workload::TrainStep => {
                let loss = encoder.forward(&ids, &mask, Mode::Train(&rng))?.mean_all()?;
                optimizer.step(&loss.backward()?)?;
            }
            Workload::OptimizerStep => optimizer.step_with(|v| ones.get(&v.as_tensor().id()).cloned())?,
        }
        Ok(())
    })?;
    Ok(BenchResult::of_runs(runs, parameters, loaded_rss_bytes, warmup_seconds))
}

/// Runs `run` once untimed, then `repeat` times timed: (the first run's seconds, each timed
/// run's seconds).
pub(crate) fn warm_then_time(repeat: usize, mut run: impl FnMut() -> Result<()>) -> Result<(f64, Vec<f64>)> {
    let mut seconds = || -> Result<f64> {
        let started = Instant::now();
        run()?;
        Ok(started.elapsed().as_secs_f64())
    };
    let warmup = seconds()?;
    let runs = (0..repeat).map(|_| seconds()).collect::<Result<Vec<f64>>>()?;
    Ok((warmup, runs))
}

impl BenchResult {
    /// The result of timed `runs` (at least one): their median, the pool's threads.
    pub(crate) fn of_runs(
        runs: Vec<f64>,
        parameters: usize,
        loaded_rss_bytes: Option<u64>,
        warmup_seconds: f64,
    ) -> Self {
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        Self {
            seconds: sorted[sorted.len() / 2],
            runs,
            parameters,
            threads: candle_core::utils::get_num_threads(),
            loaded_rss_bytes,
            warmup_seconds,
        }
    }
}

/// The process's peak resident memory so far (VmHWM), where the system reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    memory_bytes("VmHWM:")
}

/// A memory figure of `/proc/self/status` (`VmRSS:`, `VmHWM:`) in bytes, where there is one.
fn memory_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
