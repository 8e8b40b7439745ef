//! Attention with context vectors (Yang et al. 2016) over padded sequences:
//! `u_t = tanh(W h_t + b)`, `e_t = u_t · c`, `α = softmax(e)` over the real positions only
//! (padding gets exactly 0; a sequence with no real position gets all zeros), `s = Σ α_t h_t`.
//! With r context vectors (hops) there are r distributions and r vectors.

use candle_core::{Result, Tensor, D};
use candle_nn::{Init, Module, VarBuilder};

use crate::layers::Linear;

/// `projection` [A, in] + bias, `context` [r, A] (no bias).
#[derive(Debug, Clone)]
pub struct ContextAttention {
    projection: Linear,
    context: Tensor,
}

/// What [`ContextAttention::forward`] returns.
#[derive(Debug, Clone)]
pub struct Attended {
    /// `[N, r, in]`
    pub vectors: Tensor,
    /// `[N, r, T]`
    pub weights: Tensor,
}

impl ContextAttention {
    /// Loads (or creates: uniform(−1/√in, 1/√in) as PyTorch's Linear, context normal(0, 1/√A))
    /// `projection.weight`, `projection.bias` and `context.weight` under `vb`.
    pub fn load(vb: VarBuilder, input: usize, size: usize, hops: usize) -> Result<Self> {
        let bound = 1.0 / (input as f64).sqrt();
        let uniform = Init::Uniform { lo: -bound, up: bound };
        let weight = vb.pp("projection").get_with_hints((size, input), "weight", uniform)?;
        let bias = vb.pp("projection").get_with_hints(size, "bias", uniform)?;
        let stdev = 1.0 / (size as f64).sqrt();
        let context = vb.pp("context").get_with_hints((hops, size), "weight", Init::Randn { mean: 0.0, stdev })?;
        Ok(Self { projection: Linear::new(weight, Some(bias)), context })
    }

    /// # Shapes
    /// `h: [N, T, in]`, `mask: [N, T]` (f32, 1 = real) → vectors `[N, r, in]`, weights `[N, r, T]`
    pub fn forward(&self, h: &Tensor, mask: &Tensor) -> Result<Attended> {
        let (n, t, input) = h.dims3()?;
        let u = self.projection.forward(&h.reshape((n * t, input))?)?.tanh()?; // [N·T, A]
        let scores = u.matmul(&self.context.t()?)?.reshape((n, t, ()))?.transpose(1, 2)?.contiguous()?; // [N, r, T]
        let weights = masked_softmax(&scores, &mask.unsqueeze(1)?)?;
        Ok(Attended { vectors: weights.matmul(h)?, weights })
    }
}

/// Softmax over the last dimension restricted to `mask` (1 = real): padded positions get
/// exactly 0 and do not enter the sum; a row with no real position gets all zeros.
///
/// # Shapes
/// `scores: [..., T]`, `mask` broadcastable to it → same as `scores`
pub fn masked_softmax(scores: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let mask = mask.broadcast_as(scores.shape())?.contiguous()?;
    // Padded scores are pushed far down for the maximum only; exp then underflows to 0 and the
    // mask zeroes it exactly.
    let shifted = (scores.mul(&mask)? + ((&mask - 1.0)? * 1e9)?)?;
    let max = shifted.max_keepdim(D::Minus1)?.detach();
    let e = shifted.broadcast_sub(&max)?.exp()?.mul(&mask)?;
    let sum = e.sum_keepdim(D::Minus1)?;
    // Rows with no real position: divide by 1 instead of 0.
    let empty = mask.max_keepdim(D::Minus1)?.affine(-1.0, 1.0)?;
    e.broadcast_div(&(sum + empty)?)
}
