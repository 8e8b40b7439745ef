//! What a run writes into its output directory after every epoch: the resumable checkpoint,
//! the best model, `trainer_state.json`, `metrics.jsonl` and `curves.png`.

use std::path::{Path, PathBuf};

use longread_model::han::HanClassifier;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::model_dir::write_file_atomically;
use longread_report::curves::EpochPoint;

use crate::error::{Result, TrainError};
use crate::run::checkpoints::save_checkpoint;
use crate::trainer::{EpochEnd, MidEpoch, TrainerState};

/// A model a run saves: its files and weights (the best epoch's, into the output directory)
/// or the whole model directory with extra files (a checkpoint).
pub trait RunModel {
    /// The model directory's files besides the weights (config.json, tokenizer or vocabulary).
    fn model_files(&self) -> Vec<(&'static str, Vec<u8>)>;
    /// Replaces `dir/model.safetensors` atomically.
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()>;
    /// Writes the model directory and `extra` files as a new version of `dir`, atomically.
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()>;
}

impl RunModel for HierarchicalClassifier {
    fn model_files(&self) -> Vec<(&'static str, Vec<u8>)> {
        HierarchicalClassifier::model_files(self)
    }
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()> {
        HierarchicalClassifier::save_weights(self, dir)
    }
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()> {
        HierarchicalClassifier::save_replacing(self, dir, extra)
    }
}

impl RunModel for HanClassifier {
    fn model_files(&self) -> Vec<(&'static str, Vec<u8>)> {
        HanClassifier::model_files(self)
    }
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()> {
        HanClassifier::save_weights(self, dir)
    }
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()> {
        HanClassifier::save_replacing(self, dir, extra)
    }
}

/// The output directory of a run and the epochs logged so far.
pub struct RunOutput {
    out: PathBuf,
    /// metrics.jsonl's lines.
    lines: Vec<String>,
    /// What curves.png plots.
    points: Vec<EpochPoint>,
}

impl RunOutput {
    /// Starts a new run in `out`, which must not exist: creates it with `training_args.json`
    /// (the run's settings, checked when it is resumed). No model is written before the first
    /// epoch ends, so `out` never holds a loadable untrained model.
    pub fn create(out: &Path, settings: &serde_json::Value) -> Result<Self> {
        if out.exists() {
            return Err(TrainError::Run(format!("{} already exists", out.display())));
        }
        std::fs::create_dir_all(out).map_err(|source| TrainError::Io { path: out.to_owned(), source })?;
        let text = serde_json::to_string_pretty(settings).map_err(|e| json_err(out, e))? + "\n";
        write_file_atomically(&out.join("training_args.json"), text.as_bytes())?;
        Ok(Self::resume(out, 0))
    }

    /// The output directory of a new run (training_args.json only: no model before the first
    /// epoch ends) or of a resumed one (`resumed_epoch` epochs of metrics kept).
    pub fn start(out: &Path, resumed_epoch: Option<usize>, settings: &serde_json::Value) -> Result<Self> {
        Ok(match resumed_epoch {
            None => Self::create(out, settings)?,
            Some(epoch) => Self::resume(out, epoch),
        })
    }

    /// Writes `value` as `name` (pretty JSON) in the run directory, atomically.
    pub fn write_json(&self, name: &str, value: &impl serde::Serialize) -> Result<()> {
        let text = serde_json::to_string_pretty(value).map_err(|e| json_err(&self.out, e))? + "\n";
        Ok(write_file_atomically(&self.out.join(name), text.as_bytes())?)
    }

    /// Continues the run in `out` after `keep_epochs` epochs: that many lines of its
    /// metrics.jsonl are kept (a line of an epoch that is repeated is replaced).
    pub fn resume(out: &Path, keep_epochs: usize) -> Self {
        let old = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap_or_default();
        let lines: Vec<String> = old.lines().take(keep_epochs).map(str::to_owned).collect();
        let points = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                // NaN is written as null.
                let num = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
                EpochPoint {
                    epoch: v["epoch"].as_u64().unwrap_or(0) as usize,
                    train_loss: num(&v["train_loss"]),
                    dev_loss: num(&v["dev_loss"]),
                    dev_accuracy: num(&v["dev"]["accuracy"]),
                    dev_macro_f1: num(&v["dev"]["macro_f1"]),
                }
            })
            .collect();
        Self { out: out.to_owned(), lines, points }
    }

    /// Saves everything an epoch produced; each file is replaced atomically, so a kill at any
    /// moment leaves a loadable best model (once an epoch has ended) and a resumable checkpoint.
    pub fn epoch_end<M: RunModel>(&mut self, end: &EpochEnd<M>) -> Result<()> {
        let log = end.log;
        self.lines.push(serde_json::to_string(log).map_err(|e| json_err(&self.out, e))?);
        self.points.push(EpochPoint {
            epoch: log.epoch,
            train_loss: log.train_loss,
            // A run without a dev set plots its training loss alone.
            dev_loss: log.dev_loss.unwrap_or(f64::NAN),
            dev_accuracy: log.dev.as_ref().map_or(f64::NAN, |d| d.accuracy),
            dev_macro_f1: log.dev.as_ref().map_or(f64::NAN, |d| d.macro_f1),
        });
        let (moments_bytes, state_text) = self.checkpoint_files(end.state, end.optimizer)?;
        let metrics: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        let curves = longread_report::curves::training_curves_png(&self.points);
        for (name, bytes) in [
            ("trainer_state.json", state_text.as_bytes()),
            ("metrics.jsonl", metrics.as_bytes()),
            ("curves.png", &curves),
        ] {
            write_file_atomically(&self.out.join(name), bytes)?;
        }
        if end.log.saved {
            // The weights last: the model loads only once all of it is there.
            for (name, bytes) in end.model.model_files() {
                let path = self.out.join(name);
                // A name may hold a folder (a wide-and-deep model's `wide/…`).
                if let Some(folder) = path.parent() {
                    std::fs::create_dir_all(folder)
                        .map_err(|source| TrainError::Io { path: folder.to_owned(), source })?;
                }
                write_file_atomically(&path, &bytes)?;
            }
            end.model.save_weights(&self.out)?;
        }
        // The checkpoint last: a run killed before it repeats this epoch on resume (with the
        // same result), and the metrics of a repeated epoch replace the ones written here.
        let extra =
            [("optimizer.safetensors", moments_bytes.as_slice()), ("trainer_state.json", state_text.as_bytes())];
        let name = format!("checkpoint-{:05}", end.state.epoch);
        save_checkpoint(&self.out, &name, |dir| Ok(end.model.save_replacing(dir, &extra)?))
    }

    /// Saves a checkpoint taken in the middle of an epoch (`checkpoint-step-NNNNNNN`): the
    /// model, optimizer and the epoch's progress; metrics and the best model wait for the
    /// epoch's end.
    pub fn mid_epoch<M: RunModel>(&self, mid: &MidEpoch<M>) -> Result<()> {
        let (moments_bytes, state_text) = self.checkpoint_files(mid.state, mid.optimizer)?;
        let extra =
            [("optimizer.safetensors", moments_bytes.as_slice()), ("trainer_state.json", state_text.as_bytes())];
        let name = format!("checkpoint-step-{:07}", mid.state.step);
        save_checkpoint(&self.out, &name, |dir| Ok(mid.model.save_replacing(dir, &extra)?))
    }

    /// A checkpoint's optimizer.safetensors and trainer_state.json.
    fn checkpoint_files(&self, state: &TrainerState, optimizer: &crate::optim::AdamW) -> Result<(Vec<u8>, String)> {
        let (moments, steps) = optimizer.export_state()?;
        let moments_bytes = safetensors::serialize(&moments, None)
            .map_err(|e| TrainError::Run(format!("{}: serialising optimizer state: {e}", self.out.display())))?;
        let state = serde_json::json!({"state": state, "optimizer_steps": steps});
        let state_text = serde_json::to_string_pretty(&state).map_err(|e| json_err(&self.out, e))?;
        Ok((moments_bytes, state_text))
    }
}

fn json_err(path: &Path, e: serde_json::Error) -> TrainError {
    TrainError::Run(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a new run wrote its untrained model into --out before the first epoch.
    #[test]
    fn a_new_run_holds_its_settings_and_no_model() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        RunOutput::create(&out, &serde_json::json!({"epochs": 3})).unwrap();
        let names: Vec<String> =
            std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, vec!["training_args.json"]);
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("training_args.json")).unwrap()).unwrap();
        assert_eq!(saved["epochs"], 3);
        assert!(RunOutput::create(&out, &serde_json::json!({})).is_err(), "an existing --out is refused");
    }
}
