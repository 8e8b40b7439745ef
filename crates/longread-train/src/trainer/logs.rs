//! What a training run reports: progress while it runs and a log per epoch.

use longread_metrics::Report;
use longread_model::hierarchical::HierarchicalClassifier;

use crate::optim::AdamW;
use crate::trainer::TrainerState;

/// Dev loss and metrics of one task of a multi-task model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskLog {
    /// The task's name.
    pub name: String,
    /// Its dev loss (unweighted).
    pub dev_loss: f64,
    /// Its dev metrics.
    pub dev: Report,
}

/// One optimizer step, for progress displays.
#[derive(Debug, Clone, Copy)]
pub struct StepLog {
    /// Optimizer steps so far (1-based).
    pub step: usize,
    /// All optimizer steps of the run.
    pub total_steps: usize,
    /// Mean loss of the step's batches.
    pub loss: f64,
    /// Head learning rate at this step.
    pub lr: f64,
    /// Chunks of the step's documents.
    pub chunks: usize,
}

/// The start of a phase: what trains changes (the first epoch, or an `unfreeze` phase).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseLog {
    /// First epoch of the phase (1-based).
    pub epoch: usize,
    /// What trains, in words.
    pub trains: String,
    /// Trainable parameters.
    pub trainable_parameters: usize,
    /// All parameters of the model.
    pub total_parameters: usize,
    /// What is cached, in words (empty if nothing).
    pub cache: String,
}

/// Progress reports while training.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A phase starts.
    Phase(PhaseLog),
    /// Chunks passed through frozen layers while building a cache.
    Caching {
        /// Chunks done so far.
        done: usize,
        /// All chunks to cache.
        total: usize,
    },
    /// An optimizer step was taken.
    Step(StepLog),
    /// An optimizer step of a pretraining run (its loss and tokens).
    PretrainStep(PretrainStep),
    /// A model of a cross-validation was fitted (the bag-of-words baseline).
    Fits {
        /// Fits done so far.
        done: usize,
        /// All fits.
        total: usize,
    },
}

/// What an epoch produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochLog {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Dev loss (Σ over tasks of weight · loss); absent in a run without a dev set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_loss: Option<f64>,
    /// Dev metrics of the first task; absent in a run without a dev set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<Report>,
    /// Every task's dev loss and metrics (multi-task models only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskLog>,
    /// True when this epoch is the best so far by the chosen metric (never in a run without a
    /// dev set).
    pub best: bool,
    /// True when this epoch's model was saved as the run's output: the best so far, or every
    /// epoch with `Keep::Last`.
    pub saved: bool,
    /// Wall-clock seconds of the epoch (training and evaluation).
    pub seconds: f64,
    /// Wall-clock seconds of the training steps alone.
    pub train_seconds: f64,
    /// Steps skipped because of NaN/inf gradients.
    pub skipped_steps: usize,
    /// Trainable parameters.
    pub trainable_parameters: usize,
    /// All parameters of the model.
    pub total_parameters: usize,
    /// Peak GPU memory of the epoch (training and evaluation), in bytes; absent on the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_gpu_bytes: Option<u64>,
}

impl EpochLog {
    /// The epoch's dev results for people: "dev loss L, accuracy A, macro-F1 F, ROC-AUC R"
    /// (ROC-AUC where defined; a multi-label model's micro-F1, macro-F1 and subset accuracy),
    /// or "no dev set" in a run without one.
    pub fn dev_words(&self) -> String {
        match (self.dev_loss, &self.dev) {
            (Some(loss), Some(dev)) => {
                let auc = dev.roc_auc.map_or(String::new(), |auc| format!(", ROC-AUC {auc:.4}"));
                match dev.micro_f1 {
                    // A multi-label task: its accuracy is the subset accuracy, which says little.
                    Some(micro) => format!(
                        "dev loss {loss:.4}, micro-F1 {micro:.4}, macro-F1 {:.4}, subset accuracy {:.4}{auc}",
                        dev.macro_f1, dev.accuracy
                    ),
                    None => {
                        format!("dev loss {loss:.4}, accuracy {:.4}, macro-F1 {:.4}{auc}", dev.accuracy, dev.macro_f1)
                    }
                }
            }
            _ => "no dev set".to_string(),
        }
    }
}

/// What `on_epoch` receives (and pretraining's `on_eval`: a round's end, with its log `L`).
pub struct EpochEnd<'a, M = HierarchicalClassifier, L = EpochLog> {
    /// The epoch's log.
    pub log: &'a L,
    /// The model after the epoch.
    pub model: &'a M,
    /// The run's state after the epoch.
    pub state: &'a TrainerState,
    /// The optimizer (its moments go into checkpoints).
    pub optimizer: &'a AdamW,
}

/// A checkpoint in the middle of an epoch (see `TrainConfig::save_every_steps`): the model,
/// the run's state (with the epoch's progress) and the optimizer.
pub struct MidEpoch<'a, M = HierarchicalClassifier> {
    /// The model now.
    pub model: &'a M,
    /// The run's state, `in_epoch` set.
    pub state: &'a TrainerState,
    /// The optimizer (its moments go into the checkpoint).
    pub optimizer: &'a AdamW,
}

/// One evaluation of a pretraining run (masked-token loss on the held-out sequences).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PretrainLog {
    /// Steps taken.
    pub step: usize,
    /// Mean training MLM loss since the previous evaluation.
    pub train_loss: f64,
    /// Held-out MLM loss (the same masks every time).
    pub eval_loss: f64,
    /// `exp(eval_loss)`.
    pub perplexity: f64,
    /// Learning rate at the last step.
    pub lr: f64,
    /// Training tokens per second since the previous evaluation (padding excluded).
    pub tokens_per_second: f64,
    /// Steps skipped for NaN/inf since the previous evaluation.
    pub skipped_steps: usize,
}

/// One optimizer step of a pretraining run, for progress displays.
#[derive(Debug, Clone, Copy)]
pub struct PretrainStep {
    /// Steps taken (1-based).
    pub step: usize,
    /// All steps.
    pub total_steps: usize,
    /// The step's MLM loss.
    pub loss: f64,
    /// Its learning rate.
    pub lr: f64,
    /// Tokens in the step's batch (padding excluded).
    pub tokens: usize,
}
