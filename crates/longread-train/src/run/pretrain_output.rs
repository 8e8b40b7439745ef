//! What MLM pretraining writes into its output directory at every evaluation: the weights,
//! `metrics.jsonl`, `trainer_state.json` and a resumable checkpoint, each replaced atomically.

use std::path::{Path, PathBuf};

use longread_model::model_dir::write_file_atomically;

use crate::error::{Result, TrainError};
use crate::pretrain::PretrainEval;
use crate::run::checkpoints::save_checkpoint;

/// The output directory of a pretraining run and its evaluations so far.
pub struct PretrainOutput {
    out: PathBuf,
    /// metrics.jsonl's contents.
    metrics: String,
}

impl PretrainOutput {
    /// Output in `out`; when resuming from step `resumed_step`, the evaluations after it are
    /// dropped from metrics.jsonl (they are repeated).
    pub fn new(out: &Path, resumed_step: Option<usize>) -> Self {
        let old = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap_or_default();
        let metrics = match resumed_step {
            None => old,
            Some(step) => old
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["step"].as_u64() <= Some(step as u64))
                })
                .map(|l| format!("{l}\n"))
                .collect(),
        };
        Self { out: out.to_owned(), metrics }
    }

    /// Saves one evaluation: metrics, state and weights in the output directory, then the
    /// checkpoint (a run killed before it repeats the steps since the last one).
    pub fn eval_end(&mut self, e: &PretrainEval) -> Result<()> {
        let err = |what: &str, x: String| TrainError::Run(format!("{}: {what}: {x}", self.out.display()));
        let line = serde_json::to_string(e.log).map_err(|x| err("metrics", x.to_string()))?;
        self.metrics += &format!("{line}\n");
        let (moments, steps) = e.optimizer.export_state()?;
        let moments = safetensors::serialize(&moments, None).map_err(|x| err("optimizer state", x.to_string()))?;
        let state = serde_json::to_string_pretty(&serde_json::json!({"state": e.state, "optimizer_steps": steps}))
            .map_err(|x| err("trainer state", x.to_string()))?;
        let weights =
            safetensors::serialize(&e.model.named_tensors()?, None).map_err(|x| err("weights", x.to_string()))?;
        for (name, bytes) in [
            ("metrics.jsonl", self.metrics.as_bytes()),
            ("trainer_state.json", state.as_bytes()),
            ("model.safetensors", weights.as_slice()),
        ] {
            write_file_atomically(&self.out.join(name), bytes)?;
        }
        let extra = [("optimizer.safetensors", moments.as_slice()), ("trainer_state.json", state.as_bytes())];
        save_checkpoint(&self.out, &format!("checkpoint-{:05}", e.state.step), |dir| Ok(e.model.save(dir, &extra)?))
    }
}
