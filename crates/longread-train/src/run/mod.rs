//! A training run, owned by the library so that every front (CLI, Python) runs it the same
//! way: [`train_run`] takes the run's settings ([`TrainSpec`]) and some hooks for progress,
//! and does the rest — the starting model, the data and its dev split, the run directory
//! (created with the settings, resumed from its newest checkpoint while refusing changed
//! settings or data, saved atomically after every epoch and mid-epoch, cleaned up when the
//! run completes).

/// Refuses with a message that says what to do (printed as it is).
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::error::TrainError::Run(format!($($t)*))) };
}

mod bow;
pub mod checkpoints;
mod classifier;
pub mod cross_validation;
pub mod data;
#[cfg(feature = "clap")]
pub mod flags;
mod han;
pub mod init;
pub mod kit;
pub mod one_shot;
pub mod out_of_fold;
pub mod output;
pub mod pretrain_output;
pub mod pretrain_run;
pub mod settings;
pub mod spec;
#[cfg(feature = "clap")]
pub mod stacking;
pub mod start;
mod threshold;
pub mod wide;

use std::path::{Path, PathBuf};

pub use bow::BowSummary;
pub use checkpoints::{read_checkpoint, remove_other_checkpoints, resume_from, save_checkpoint, Saved, CHECKPOINT};
pub use init::{init_run, InitSpec};
pub use output::{RunModel, RunOutput};
pub use pretrain_output::PretrainOutput;
pub use pretrain_run::{pretrain_run, PretrainSpec, PretrainSummary};
pub use settings::{check_resume_settings, check_resumed_run, fingerprint_file};
use settings::{recorded_settings, MAY_CHANGE_ON_RESUME};
use spec::TrainPlan as Plan;
pub use spec::{
    Arch, BowSpec, EncoderTrainSpec, HanSpec, LabelLayoutSpec, LoopSpec, TrainPlan, TrainPrecision, TrainSpec,
};
pub use threshold::{KeptCalibration, KeptRule};

use crate::error::{Result, TrainError};
use crate::trainer::{EpochLog, PretrainLog, Progress};

/// What a front hears of a run — any run: training ([`train_run`]) or pretraining
/// ([`pretrain_run`]); the CLI and Python implement this one trait.
pub trait RunHooks {
    /// Phases, cache building, fits and optimizer steps (pretraining's too).
    fn progress(&mut self, progress: Progress);
    /// An epoch of a training run ended (its outputs are saved).
    fn epoch(&mut self, _log: &EpochLog) {}
    /// A held-out evaluation of a pretraining run ended (its outputs are saved).
    fn evaluation(&mut self, _log: &PretrainLog) {}
    /// A line for people about the set-up (data sizes, tasks, the HAN's grid and vocabulary).
    fn note(&mut self, line: &str);
}

/// How a run ended.
#[derive(Debug)]
pub struct RunSummary {
    /// The epochs run by this call.
    pub logs: Vec<EpochLog>,
    /// True when it stopped at `--stop-after-epoch` with epochs left (resume later).
    pub stopped_for_resume: bool,
    /// What a bag-of-words run (no epochs) found.
    pub bow: Option<BowSummary>,
    /// The folds of a `--cv` run (its epochs are the folds' runs').
    pub cv: Option<cross_validation::CvSummary>,
    /// The decision rule `--tune-threshold` kept (when the run completed).
    pub threshold: Option<threshold::KeptRule>,
    /// The calibration `--calibrate` kept (when the run completed).
    pub calibration: Option<threshold::KeptCalibration>,
}

impl RunSummary {
    /// The log of the last epoch run here that was the best so far by the dev metric.
    pub fn best(&self) -> Option<&EpochLog> {
        self.logs.iter().rfind(|l| l.best)
    }

    /// The log of the epoch whose model is in the output directory (of those run here): the
    /// best, or the last with `--keep last`.
    pub fn kept(&self) -> Option<&EpochLog> {
        self.logs.iter().rfind(|l| l.saved)
    }
}

/// Runs `spec`: fills in the defaults of its architecture (`given`: the settings given
/// explicitly, so that ones that do not apply are refused), starts or resumes its run
/// directory (`front` adds settings of the front to training_args.json, e.g. its log format),
/// trains and saves. The best model is in `spec.out` at the end.
pub fn train_run(
    spec: &mut TrainSpec,
    front: serde_json::Map<String, serde_json::Value>,
    hooks: &mut dyn RunHooks,
) -> Result<RunSummary> {
    let result = train_run_reading(spec, front, hooks);
    // Standard input and pipes were kept for this run's reads; the next run reads anew.
    one_shot::forget();
    result
}

/// [`train_run`], its one-shot inputs kept meanwhile (a `--cv` run's folds run here too).
pub(crate) fn train_run_reading(
    spec: &mut TrainSpec,
    front: serde_json::Map<String, serde_json::Value>,
    hooks: &mut dyn RunHooks,
) -> Result<RunSummary> {
    spec.resolve_defaults()?;
    spec.resolve_hub_model()?;
    if spec.cv.is_some() && !spec.is_bow() {
        return cross_validation::run(spec, &front, hooks);
    }
    let checkpoint = resume_from(&spec.out, spec.training.resume.as_deref())?;
    let new_output = checkpoint.is_none() && !spec.out.exists();
    let result = run_from(spec, front, checkpoint, hooks);
    if result.is_err() && new_output {
        // A run that failed before it kept anything (bad data, say) leaves no --out behind: a
        // rerun with the fix would otherwise be refused as "already exists".
        remove_if_nothing_kept(&spec.out);
    }
    result
}

/// [`train_run`] once the checkpoint to resume from (if any) is known.
fn run_from(
    spec: &mut TrainSpec,
    front: serde_json::Map<String, serde_json::Value>,
    checkpoint: Option<PathBuf>,
    hooks: &mut dyn RunHooks,
) -> Result<RunSummary> {
    let settings = recorded_settings(spec, front)?;
    if checkpoint.is_some() {
        check_resumed_run(&spec.out, &settings, &MAY_CHANGE_ON_RESUME)?;
    }
    let ran = match spec.plan() {
        Plan::Bow(bow) => {
            let (summary, after) = bow::run(spec, bow, &settings, hooks)?;
            return Ok(RunSummary {
                logs: Vec::new(),
                stopped_for_resume: false,
                bow: Some(summary),
                cv: None,
                threshold: after.threshold,
                calibration: after.calibration,
            });
        }
        Plan::Han { han, .. } => han::run(spec, han, checkpoint.as_deref(), &settings, hooks),
        Plan::Encoder { .. } => classifier::run(spec, checkpoint.as_deref(), &settings, hooks),
    };
    let (logs, dev_texts) = match ran {
        Ok((logs, dev_texts)) => (Ok(logs), dev_texts),
        Err(e) => (Err(e), None),
    };
    let mut summary = finish(spec, logs)?;
    if let (Some(dev), false) = (dev_texts, summary.stopped_for_resume) {
        let after = threshold::calibrate_and_tune(spec, &dev, hooks)?;
        (summary.threshold, summary.calibration) = (after.threshold, after.calibration);
    }
    Ok(summary)
}

/// Removes a run directory that holds nothing but its settings and logs (no model, no
/// checkpoint, no cross-validation folds).
fn remove_if_nothing_kept(out: &Path) {
    let Ok(entries) = std::fs::read_dir(out) else { return };
    let kept = entries.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with("checkpoint") || name == "model.safetensors" || name.starts_with("fold")
    });
    if !kept {
        let _ = std::fs::remove_dir_all(out);
    }
}

/// How a run ended: a divergence names the checkpoint kept; a completed run's resumable
/// checkpoint is removed.
fn finish(spec: &TrainSpec, logs: Result<Vec<EpochLog>>) -> Result<RunSummary> {
    let logs = logs.map_err(|e| match e {
        TrainError::Diverged(why) => {
            TrainError::Diverged(format!("{why} Checkpoint: {}", spec.out.join(CHECKPOINT).display()))
        }
        other => checkpoints::with_resume_hint(other, &spec.out, ""),
    })?;
    let epochs = spec.training.epochs.unwrap_or_default();
    let stopped_for_resume =
        logs.last().is_some_and(|l| Some(l.epoch) == spec.training.stop_after_epoch && l.epoch < epochs);
    if !stopped_for_resume {
        remove_other_checkpoints(&spec.out, None)?;
    }
    Ok(RunSummary { logs, stopped_for_resume, bow: None, cv: None, threshold: None, calibration: None })
}
