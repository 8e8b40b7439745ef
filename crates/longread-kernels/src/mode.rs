//! Training versus inference, and the random numbers dropout draws in training.

use std::sync::Mutex;

use candle_core::{CustomOp3, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeded random source for dropout masks, so that training runs are reproducible. It counts
/// the seeds it has drawn, so that a run checkpointed mid-epoch resumes with the same masks.
#[derive(Debug)]
pub struct DropoutRng(Mutex<DropoutState>);

/// The state of a [`DropoutRng`]: its generator and how many seeds it has drawn.
#[derive(Debug, Clone)]
pub struct DropoutState {
    rng: StdRng,
    draws: u64,
}

impl DropoutRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Mutex::new(DropoutState { rng: StdRng::seed_from_u64(seed), draws: 0 }))
    }

    /// The generator seeded with `seed` after `draws` seeds were drawn from it (a run resumed
    /// mid-epoch continues its epoch's masks).
    pub fn resumed(seed: u64, draws: u64) -> Self {
        let rng = Self::new(seed);
        for _ in 0..draws {
            rng.next_seed();
        }
        rng
    }

    /// Seeds drawn so far (as seen from the current state: a restore winds it back).
    pub fn draws(&self) -> u64 {
        self.lock().draws
    }

    /// The generator's current state, to replay the same masks later (chunk recomputation).
    pub fn snapshot(&self) -> DropoutState {
        self.lock().clone()
    }

    /// Puts the generator back into a state taken by [`DropoutRng::snapshot`].
    pub fn restore(&self, state: DropoutState) {
        *self.lock() = state;
    }

    /// The seed of one dropout mask (the mask is a hash of it: see `layers::dropout`).
    pub fn next_seed(&self) -> u64 {
        let mut state = self.lock();
        state.draws += 1;
        state.rng.random::<u64>()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DropoutState> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
    pub fn apply_op3<C: CustomOp3 + Send + Sync + 'static>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_generator_continues_where_it_was() {
        let a = DropoutRng::new(9);
        let first: Vec<u64> = (0..5).map(|_| a.next_seed()).collect();
        assert_eq!(a.draws(), 5);
        let b = DropoutRng::resumed(9, 3);
        assert_eq!((b.next_seed(), b.next_seed()), (first[3], first[4]));
        let snapshot = a.snapshot();
        let next = a.next_seed();
        a.restore(snapshot);
        assert_eq!((a.draws(), a.next_seed()), (5, next));
    }
}
