//! Training versus inference, and the random numbers dropout draws in training.

use std::sync::Mutex;

use candle_core::{CustomOp3, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeded random source for dropout masks, so that training runs are reproducible.
#[derive(Debug)]
pub struct DropoutRng(Mutex<StdRng>);

impl DropoutRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Mutex::new(StdRng::seed_from_u64(seed)))
    }

    /// The generator's current state, to replay the same masks later (chunk recomputation).
    pub fn snapshot(&self) -> StdRng {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Puts the generator back into a state taken by [`DropoutRng::snapshot`].
    pub fn restore(&self, state: StdRng) {
        *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = state;
    }

    /// The seed of one dropout mask (the mask is a hash of it: see `layers::dropout`).
    pub fn next_seed(&self) -> u64 {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).random::<u64>()
    }
}

/// Whether a forward pass trains (dropout active) or infers (dropout off).
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Inference: dropout is the identity, and softmax and LayerNorm use fused kernels that
    /// have no backward pass. To differentiate, use `Train` (with zero dropout if need be).
    Eval,
    /// Training: dropout draws its masks from the given generator.
    Train(&'a DropoutRng),
}

impl Mode<'_> {
    /// True in training mode.
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// Applies a fused op to `(a, b, c)`: with its backward pass in training, without one in
    /// inference, where the output then carries no graph (so the intermediates that produced
    /// it are freed as soon as they go out of scope).
    pub(crate) fn apply_op3<C: CustomOp3 + Send + Sync + 'static>(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        op: C,
    ) -> candle_core::Result<Tensor> {
        if self.is_train() {
            a.apply_op3(b, c, op)
        } else {
            a.apply_op3_no_bwd(b, c, &op)
        }
    }
}
