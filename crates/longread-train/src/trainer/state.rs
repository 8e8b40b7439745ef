//! Where a run stands between epochs, what resumes it, and the per-epoch seeds and scores.

use std::collections::HashMap;

use candle_core::Tensor;
use longread_metrics::Report;

use crate::error::{Result, TrainError};
use crate::trainer::{Metric, TrainConfig};

/// Where a run stands after an epoch: with the model's weights and the optimizer's state,
/// everything needed to continue it exactly (each epoch's shuffle and dropout are seeded from
/// the run's seed and the epoch number, so no generator state is needed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerState {
    /// Epochs completed (for pretraining: evaluations).
    #[serde(default)]
    pub epoch: usize,
    /// Optimizer steps taken, skipped ones (NaN/inf) included.
    pub step: usize,
    /// Best dev score so far (higher is better).
    #[serde(default)]
    pub best: Option<f64>,
    /// Epochs since the best one.
    #[serde(default)]
    pub since_best: usize,
    /// Set in a checkpoint taken in the middle of epoch `epoch + 1`: how far that epoch got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_epoch: Option<EpochProgress>,
}

/// How far an epoch got when a mid-epoch checkpoint was taken: resuming skips the step
/// groups done (the epoch's order is a function of the seed), restores the dropout generator
/// and the epoch's running sums, and continues bit-identically.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochProgress {
    /// Optimizer step groups (batches × accumulation) of the epoch done, skipped ones included.
    pub step_groups: usize,
    /// Sum of the steps' losses so far.
    pub loss_sum: f64,
    /// Steps taken so far.
    pub loss_count: usize,
    /// Steps skipped (NaN/inf) so far.
    pub skipped: usize,
    /// Seeds drawn from the epoch's dropout generator.
    pub dropout_draws: u64,
    /// Training seconds of the epoch so far.
    pub train_seconds: f64,
}

/// A run to continue: the state after its last completed epoch and the optimizer's
/// exported state (see [`crate::optim::AdamW::export_state`]).
pub struct Resume {
    /// Where the run stood.
    pub state: TrainerState,
    /// Optimizer moments by name.
    pub moments: HashMap<String, Tensor>,
    /// Optimizer steps per parameter.
    pub steps: HashMap<String, u64>,
}

impl TrainerState {
    /// A new run's state.
    pub(crate) fn new() -> Self {
        Self { epoch: 0, step: 0, best: None, since_best: 0, in_epoch: None }
    }

    /// The state a run starts from: `resume`'s, or a new run's; refused when the run to
    /// resume has already completed `epochs`.
    pub(crate) fn start(resume: Option<&Resume>, epochs: usize) -> Result<Self> {
        let Some(r) = resume else { return Ok(Self::new()) };
        if r.state.epoch >= epochs {
            return Err(TrainError::InvalidSetting(format!(
                "the run to resume has completed {} of {} epochs: nothing is left to do",
                r.state.epoch, epochs
            )));
        }
        Ok(r.state.clone())
    }

    /// Records the end of `epoch` after `step` optimizer steps with a dev `score` (higher is
    /// better; `None` without a dev set); returns whether the epoch is the best so far (never
    /// without a dev set).
    pub(crate) fn record(&mut self, epoch: usize, step: usize, score: Option<f64>) -> bool {
        let is_best = score.is_some_and(|s| self.best.is_none_or(|b| s > b));
        if is_best {
            self.best = score;
            self.since_best = 0;
        } else if score.is_some() {
            self.since_best += 1;
        }
        self.epoch = epoch;
        self.step = step;
        self.in_epoch = None;
        is_best
    }

    /// Whether the run ends after the epoch just recorded: patience ran out, or the run was
    /// asked to stop there.
    pub(crate) fn stops(&self, cfg: &TrainConfig) -> bool {
        let patience_ran_out =
            cfg.patience > 0 && self.step >= cfg.patience_min_steps && self.since_best >= cfg.patience;
        patience_ran_out || cfg.stop_after_epoch == Some(self.epoch)
    }
}

/// An epoch's dev score, higher is better: −dev loss, or the mean of the metric over the tasks.
/// ROC-AUC is an error where a dev set lacks a label (undefined there).
pub(crate) fn epoch_score<'a>(
    metric: Metric,
    dev_loss: f64,
    reports: impl ExactSizeIterator<Item = &'a Report>,
) -> Result<f64> {
    let n = reports.len().max(1) as f64;
    Ok(match metric {
        Metric::DevLoss => -dev_loss,
        Metric::MacroF1 => reports.map(|r| r.macro_f1).sum::<f64>() / n,
        Metric::WeightedF1 => reports.map(|r| r.weighted_f1).sum::<f64>() / n,
        Metric::Accuracy => reports.map(|r| r.accuracy).sum::<f64>() / n,
        // A single-label task's micro-F1 is its accuracy.
        Metric::MicroF1 => reports.map(|r| r.micro_f1.unwrap_or(r.accuracy)).sum::<f64>() / n,
        Metric::RocAuc => {
            let mut sum = 0.0;
            for r in reports {
                sum += r.roc_auc.ok_or_else(|| {
                    // With two labels or more, a label without dev documents is why, or
                    // probabilities that are not numbers.
                    let missing: Vec<&str> =
                        r.per_class.iter().filter(|c| c.support == 0).map(|c| c.label.as_str()).collect();
                    TrainError::InvalidSetting(match missing.is_empty() {
                        true => "--metric roc-auc: the dev probabilities are not finite numbers (the model \
                                 diverged: lower --lr, or keep --max-grad-norm)"
                            .to_string(),
                        false => roc_auc_without(&missing),
                    })
                })?;
            }
            sum / n
        }
    })
}

/// Why `--metric roc-auc` cannot score a dev set whose documents have none of the labels
/// `missing` (checked before training, and at each epoch).
pub(crate) fn roc_auc_without(missing: &[&str]) -> String {
    format!(
        "--metric roc-auc: ROC-AUC is undefined on this dev set: no dev document has the label {}; give a dev set \
         with every label (--dev, or a larger --dev-split) or another --metric",
        missing.join(", ")
    )
}

/// Seed of an epoch's generators.
pub(crate) fn epoch_seed(seed: u64, epoch: usize, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (epoch as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ stream
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--metric roc-auc` scores an epoch by its dev ROC-AUC, and says why when it has none: a
    /// label without dev documents, or probabilities that are not numbers (a diverged model).
    #[test]
    fn roc_auc_scores_an_epoch_or_says_why_it_cannot() {
        let labels = ["a".to_string(), "b".to_string()];
        let report = longread_metrics::evaluate(&labels, &[0, 1, 1], &[0, 1, 0]).unwrap();
        let scored = report.clone().with_scores(&[0, 1, 1], &[vec![0.8, 0.2], vec![0.3, 0.7], vec![0.6, 0.4]]).unwrap();
        let score = epoch_score(Metric::RocAuc, 0.5, std::iter::once(&scored)).unwrap();
        assert_eq!(score, 1.0, "every b above every a");
        let err = epoch_score(Metric::RocAuc, 0.5, std::iter::once(&report)).unwrap_err().to_string();
        assert!(err.contains("not finite numbers"), "{err}");
        let one_label = longread_metrics::evaluate(&labels, &[1, 1], &[1, 0]).unwrap();
        let one_label = one_label.with_scores(&[1, 1], &[vec![0.2, 0.8], vec![0.6, 0.4]]).unwrap();
        let err = epoch_score(Metric::RocAuc, 0.5, std::iter::once(&one_label)).unwrap_err().to_string();
        assert!(err.contains("no dev document has the label a;"), "{err}");
    }
}
