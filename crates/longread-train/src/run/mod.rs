//! A training run's output directory, owned by the library so that every front (CLI, Python)
//! runs it the same way: created with the run's settings, resumed from its newest checkpoint
//! (refusing changed settings or data), saved atomically after every epoch (best model,
//! metrics log, curves, resumable checkpoint), cleaned up when the run completes.

pub mod checkpoints;
pub mod output;
pub mod pretrain_output;
pub mod settings;

pub use checkpoints::{read_checkpoint, remove_other_checkpoints, resume_from, save_checkpoint, Saved, CHECKPOINT};
pub use output::{RunModel, RunOutput};
pub use pretrain_output::PretrainOutput;
pub use settings::{check_resume_settings, fingerprint_file};
