//! From summed gradients to optimizer steps: clipping, the NaN/inf guard and the schedule.

use std::collections::HashMap;

use candle_core::{Tensor, TensorId};

use crate::clip::{clip_factor, grad_norm};
use crate::error::{Result, TrainError};
use crate::optim::{AdamW, ParamGroup};
use crate::schedule::Schedule;
use crate::trainer::TrainConfig;

/// How a run turns summed gradients into optimizer steps, shared by the training loops:
/// clipping, the NaN/inf guard (a run stops after `max_bad_steps` skipped steps in a row) and
/// the learning-rate schedule.
pub(crate) struct Stepper {
    /// The run's schedule.
    pub(crate) schedule: Schedule,
    max_grad_norm: f64,
    bad_in_a_row: usize,
    max_bad: usize,
}

impl Stepper {
    /// The stepper of a run over `documents` training documents.
    pub(crate) fn new(cfg: &TrainConfig, documents: usize) -> Self {
        let steps_per_epoch = documents.div_ceil(cfg.batch_size.max(1)).div_ceil(cfg.grad_accum.max(1));
        let total_steps = steps_per_epoch * cfg.epochs;
        let warmup_steps = warmup_steps(cfg.warmup_ratio, cfg.warmup_steps, total_steps);
        Self::from_schedule(
            Schedule { warmup_steps, total_steps, decay: cfg.decay },
            cfg.max_grad_norm,
            cfg.max_bad_steps,
        )
    }

    /// A stepper with this schedule, clipping (0 = off) and limit of skipped steps in a row.
    pub(crate) fn from_schedule(schedule: Schedule, max_grad_norm: f64, max_bad_steps: usize) -> Self {
        Self { schedule, max_grad_norm, bad_in_a_row: 0, max_bad: max_bad_steps.max(1) }
    }

    /// Clips `summed` (the optimizer scales each gradient as it reads it), then steps
    /// `optimizer` with each group's rate `lr_of(group)` times the schedule's factor at `step`;
    /// returns that factor, or `None` when a NaN/inf loss or gradient made it skip the step (an
    /// error when too many were skipped in a row).
    pub(crate) fn step(
        &mut self,
        optimizer: &mut AdamW,
        summed: &HashMap<TensorId, Tensor>,
        step_loss: f64,
        epoch: usize,
        step: usize,
        lr_of: impl Fn(&ParamGroup) -> f64,
    ) -> Result<Option<f64>> {
        let norm = grad_norm(summed.values())?;
        if !(step_loss.is_finite() && norm.is_finite()) {
            self.bad_in_a_row += 1;
            if self.bad_in_a_row >= self.max_bad {
                return Err(TrainError::Diverged(format!(
                    "training diverged: {} optimizer steps in a row had NaN/inf loss or gradients \
                     (epoch {epoch}, after step {step}); they were skipped and the run stopped. The last \
                     checkpoint and the best model so far are kept. Lower --lr, or check the data.",
                    self.bad_in_a_row
                )));
            }
            return Ok(None);
        }
        self.bad_in_a_row = 0;
        let factor = self.schedule.factor(step);
        optimizer.set_lr(|g| lr_of(g) * factor);
        let clip = clip_factor(norm, self.max_grad_norm) as f32;
        optimizer.step_scaled(clip, |v| summed.get(&v.as_tensor().id()).cloned())?;
        Ok(Some(factor))
    }
}

/// Warm-up steps of a run of `total` optimizer steps: `steps` when given, else `ratio · total`
/// rounded.
fn warmup_steps(ratio: f64, steps: Option<usize>, total: usize) -> usize {
    steps.unwrap_or((ratio * total as f64).round() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_steps_replace_the_ratio_when_given() {
        assert_eq!(warmup_steps(0.1, None, 95), 10);
        assert_eq!(warmup_steps(0.1, Some(7), 95), 7);
        assert_eq!(warmup_steps(0.0, Some(0), 95), 0);
    }
}
