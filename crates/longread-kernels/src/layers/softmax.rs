//! Numerically stable softmax over the last dimension.

use candle_core::{Result, Tensor, D};

use crate::layers::fused::FusedSoftmax;
use crate::mode::Mode;

/// Softmax over the last dimension: on the CPU one fused op with a backward pass; elsewhere in
/// [`Mode::Eval`] candle's fused kernel (no backward pass), in [`Mode::Train`] the
/// differentiable [`softmax_last_dim`].
///
/// # Shapes
/// `xs: [..., n]` → `[..., n]`
pub fn softmax(xs: &Tensor, mode: Mode) -> Result<Tensor> {
    if xs.dtype() != candle_core::DType::F32 {
        // Reduced precision: exponentiate and sum in f32, return the input's dtype.
        return softmax(&xs.to_dtype(candle_core::DType::F32)?, mode)?.to_dtype(xs.dtype());
    }
    if xs.device().is_cpu() {
        // One pass forward (vectorised exp) and one backward (gradient-checked against
        // softmax_last_dim).
        return xs.contiguous()?.apply_op1(FusedSoftmax);
    }
    if mode.is_train() {
        softmax_last_dim(xs)
    } else {
        candle_nn::ops::softmax_last_dim(&xs.contiguous()?)
    }
}

/// Differentiable softmax over the last dimension. The row maximum is detached: it only
/// shifts the exponent, so it carries no gradient, and detaching it saves backward work.
///
/// # Shapes
/// `xs: [..., n]` → `[..., n]`
pub fn softmax_last_dim(xs: &Tensor) -> Result<Tensor> {
    let max = xs.max_keepdim(D::Minus1)?.detach();
    let num = xs.broadcast_sub(&max)?.exp()?;
    let den = num.sum_keepdim(D::Minus1)?;
    num.broadcast_div(&den)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DropoutRng;
    use crate::seeded::Normals;

    #[test]
    fn fused_and_differentiable_softmax_agree() {
        let normals = Normals::new(49);
        let xs = normals.tensor(0f32, 3.0, (4, 7, 33), &candle_core::Device::Cpu).unwrap();
        let rng = DropoutRng::new(0);
        let a = softmax(&xs, Mode::Eval).unwrap();
        let b = softmax(&xs, Mode::Train(&rng)).unwrap();
        let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-6, "{diff}");
    }
}
