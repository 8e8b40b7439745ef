//! What a run writes into its output directory after every epoch: the resumable checkpoint,
//! the best model's weights, `trainer_state.json`, `metrics.jsonl` and `curves.png`; and
//! reading a checkpoint back to resume.

use std::path::{Path, PathBuf};

use longread_model::han::HanClassifier;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_report::curves::EpochPoint;
use longread_train::trainer::EpochEnd;

use crate::checkpoints::save_checkpoint;
pub(super) use crate::checkpoints::{remove_other_checkpoints, CHECKPOINT};
use crate::io::write_atomically;

/// A model a run saves: its weights alone (the best epoch's, into the output directory) or
/// the whole model directory with extra files (a checkpoint).
pub(super) trait RunModel {
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()>;
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()>;
}

impl RunModel for HierarchicalClassifier {
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()> {
        HierarchicalClassifier::save_weights(self, dir)
    }
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()> {
        HierarchicalClassifier::save_replacing(self, dir, extra)
    }
}

impl RunModel for HanClassifier {
    fn save_weights(&self, dir: &Path) -> longread_model::Result<()> {
        HanClassifier::save_weights(self, dir)
    }
    fn save_replacing(&self, dir: &Path, extra: &[(&str, &[u8])]) -> longread_model::Result<()> {
        HanClassifier::save_replacing(self, dir, extra)
    }
}

/// The output directory of a run and the epochs logged so far.
pub(super) struct RunOutput {
    out: PathBuf,
    /// metrics.jsonl's lines.
    lines: Vec<String>,
    /// What curves.png plots.
    points: Vec<EpochPoint>,
}

impl RunOutput {
    /// Output in `out`; when resuming, the first `keep_epochs` lines of its metrics.jsonl are kept.
    pub(super) fn new(out: &Path, keep_epochs: usize) -> Self {
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
    /// moment leaves a loadable model and a resumable checkpoint.
    pub(super) fn epoch_end<M: RunModel>(&mut self, end: &EpochEnd<M>) -> longread_train::Result<()> {
        let log = end.log;
        self.lines.push(serde_json::to_string(log).map_err(|e| io_err(&self.out, e.to_string()))?);
        self.points.push(EpochPoint {
            epoch: log.epoch,
            train_loss: log.train_loss,
            dev_loss: log.dev_loss,
            dev_accuracy: log.dev.accuracy,
            dev_macro_f1: log.dev.macro_f1,
        });
        let (moments, steps) = end.optimizer.export_state()?;
        let moments_bytes = safetensors::serialize(&moments, None).map_err(|e| io_err(&self.out, e.to_string()))?;
        let state = serde_json::json!({"state": end.state, "optimizer_steps": steps});
        let state_text = serde_json::to_string_pretty(&state).map_err(|e| io_err(&self.out, e.to_string()))?;
        let metrics: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        let curves = longread_report::curves::training_curves_png(&self.points);
        for (name, bytes) in [
            ("trainer_state.json", state_text.as_bytes()),
            ("metrics.jsonl", metrics.as_bytes()),
            ("curves.png", &curves),
        ] {
            let path = self.out.join(name);
            write_atomically(&path, bytes).map_err(|e| io_err(&path, format!("{e:#}")))?;
        }
        if end.log.best {
            end.model.save_weights(&self.out)?;
        }
        // The checkpoint last: a run killed before it repeats this epoch on resume (with the
        // same result), and the metrics of a repeated epoch replace the ones written here.
        let extra =
            [("optimizer.safetensors", moments_bytes.as_slice()), ("trainer_state.json", state_text.as_bytes())];
        save_checkpoint(&self.out, end.state.epoch, |dir| Ok(end.model.save_replacing(dir, &extra)?))?;
        Ok(())
    }
}

fn io_err(path: &Path, message: String) -> longread_train::TrainError {
    longread_train::TrainError::Io { path: path.to_owned(), source: std::io::Error::other(message) }
}
