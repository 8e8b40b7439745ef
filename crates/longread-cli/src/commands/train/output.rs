//! What a run writes into its output directory after every epoch: the resumable checkpoint,
//! the best model's weights, `trainer_state.json`, `metrics.jsonl` and `curves.png`; and
//! reading a checkpoint back to resume.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::Device;
use longread_report::curves::EpochPoint;
use longread_train::trainer::{EpochEnd, Resume, TrainerState};

use crate::io::write_atomically;

/// The resumable checkpoint inside the output directory.
pub(super) const CHECKPOINT: &str = "checkpoint-last";

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
    pub(super) fn epoch_end(&mut self, end: &EpochEnd) -> longread_train::Result<()> {
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
        save_checkpoint(end.model, &self.out, end.state.epoch, &extra)?;
        Ok(())
    }
}

/// Writes the checkpoint of `epoch` as `out/checkpoint-EPOCH` (assembled in a temporary
/// directory, synced, renamed), then points the symbolic link `out/checkpoint-last` at it
/// (a new link renamed over the old one: atomic), and only then removes older checkpoints.
/// A kill at any moment leaves `checkpoint-last` naming a complete checkpoint.
fn save_checkpoint(
    model: &longread_model::hierarchical::HierarchicalClassifier,
    out: &Path,
    epoch: usize,
    extra: &[(&str, &[u8])],
) -> longread_train::Result<()> {
    let name = format!("checkpoint-{epoch:05}");
    let dir = out.join(&name);
    let link = out.join(CHECKPOINT);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| longread_train::TrainError::Io { path, source }
    };
    // Left over by a run killed before it linked this epoch's checkpoint: not in use.
    if dir.exists() && std::fs::read_link(&link).ok().as_deref() != Some(Path::new(&name)) {
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    model.save_replacing(&dir, extra)?;
    if link.is_dir() && std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) {
        // A checkpoint directory from an older version of longread.
        std::fs::remove_dir_all(&link).map_err(io(&link))?;
    }
    let tmp_link = out.join(format!(".{CHECKPOINT}-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&name, &tmp_link).map_err(io(&tmp_link))?;
    std::fs::rename(&tmp_link, &link).map_err(io(&link))?;
    if let Ok(d) = std::fs::File::open(out) {
        let _ = d.sync_all();
    }
    remove_other_checkpoints(out, Some(&name))
}

/// Removes `out/checkpoint-*` directories other than `keep` (and the link itself when
/// `keep` is `None`), and the temporary files and directories of writes a killed run left
/// unfinished in `out` (called when no write of this run is under way).
pub(super) fn remove_other_checkpoints(out: &Path, keep: Option<&str>) -> longread_train::Result<()> {
    let entries =
        std::fs::read_dir(out).map_err(|source| longread_train::TrainError::Io { path: out.to_owned(), source })?;
    let temporary = [".longread-".to_string(), ".model-".to_string(), format!(".{CHECKPOINT}-")];
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let result = if name == CHECKPOINT {
            if keep.is_some() {
                continue;
            }
            std::fs::remove_file(&path)
        } else if (name.starts_with("checkpoint-") && Some(name.as_str()) != keep)
            || temporary.iter().any(|t| name.starts_with(t.as_str()))
        {
            if is_dir {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
        } else {
            continue;
        };
        result.map_err(|source| longread_train::TrainError::Io { path, source })?;
    }
    Ok(())
}

fn io_err(path: &Path, message: String) -> longread_train::TrainError {
    longread_train::TrainError::Io { path: path.to_owned(), source: std::io::Error::other(message) }
}

/// The run state and optimizer moments saved in a checkpoint directory.
pub(super) fn read_checkpoint(dir: &Path) -> Result<Resume> {
    #[derive(serde::Deserialize)]
    struct Saved {
        state: TrainerState,
        optimizer_steps: std::collections::HashMap<String, u64>,
    }
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let saved: Saved =
        serde_json::from_str(&text).with_context(|| format!("{}: not a trainer state", path.display()))?;
    let moments = candle_core::safetensors::load(dir.join("optimizer.safetensors"), &Device::Cpu)
        .with_context(|| format!("reading {}", dir.join("optimizer.safetensors").display()))?;
    Ok(Resume { state: saved.state, moments, steps: saved.optimizer_steps })
}
