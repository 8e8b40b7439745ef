//! Numerically stable softmax with a backward pass.

use candle_core::{Result, Tensor, D};

/// Softmax over the last dimension. The row maximum is detached: it only shifts the
/// exponent, so it carries no gradient, and detaching it saves backward work.
///
/// # Shapes
/// `xs: [..., n]` → `[..., n]`
pub fn softmax_last_dim(xs: &Tensor) -> Result<Tensor> {
    let max = xs.max_keepdim(D::Minus1)?.detach();
    let num = xs.broadcast_sub(&max)?.exp()?;
    let den = num.sum_keepdim(D::Minus1)?;
    num.broadcast_div(&den)
}
