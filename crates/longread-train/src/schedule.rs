//! Learning-rate schedules: linear warm-up, then linear decay to 0, cosine decay to 0, or
//! constant (transformers' `get_linear_schedule_with_warmup`, `get_cosine_schedule_with_warmup`,
//! `get_constant_schedule_with_warmup`).

/// The shape after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decay {
    /// Linear to 0 at the last step.
    Linear,
    /// Half a cosine to 0 at the last step.
    Cosine,
    /// Stays at the base rate.
    Constant,
}

/// A schedule over `total_steps` optimizer steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Steps of linear warm-up from 0.
    pub warmup_steps: usize,
    /// All optimizer steps of the run.
    pub total_steps: usize,
    /// What follows the warm-up.
    pub decay: Decay,
}

impl Schedule {
    /// The multiplier of the base learning rate at `step` (0-based, before the update).
    pub fn factor(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return step as f64 / self.warmup_steps.max(1) as f64;
        }
        let remaining = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
        let progress = (step - self.warmup_steps) as f64 / remaining;
        match self.decay {
            Decay::Constant => 1.0,
            Decay::Linear => (1.0 - progress).max(0.0),
            Decay::Cosine => (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_decay_as_transformers() {
        let s = Schedule { warmup_steps: 10, total_steps: 110, decay: Decay::Linear };
        assert_eq!(s.factor(0), 0.0);
        assert_eq!(s.factor(5), 0.5);
        assert_eq!(s.factor(10), 1.0);
        assert_eq!(s.factor(60), 0.5);
        assert_eq!(s.factor(110), 0.0);
        let c = Schedule { decay: Decay::Cosine, ..s };
        assert!((c.factor(60) - 0.5).abs() < 1e-12);
        assert!(c.factor(35) > 0.85 && c.factor(35) < 0.86);
        let k = Schedule { decay: Decay::Constant, ..s };
        assert_eq!(k.factor(100), 1.0);
    }
}
