//! LayerNorm over the last dimension, composed from differentiable ops
//! (matches `torch.nn.LayerNorm`: biased variance, eps inside the square root).

use candle_core::{DType, Result, Tensor, D};
use candle_nn::VarBuilder;

/// `y = (x - mean) / sqrt(var + eps) * weight + bias` over the last dimension.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Loads `weight` and `bias` of size `size` (initialised to 1 and 0 when new).
    pub fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<Self> {
        let weight = vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?;
        let bias = vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?;
        Ok(Self { weight, bias, eps })
    }

    /// Normalises over the last dimension (computed in f32 for reduced-precision inputs).
    ///
    /// # Shapes
    /// `xs: [..., hidden]` → `[..., hidden]`
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let dtype = xs.dtype();
        let x = if dtype == DType::F32 { xs.clone() } else { xs.to_dtype(DType::F32)? };
        let mean = x.mean_keepdim(D::Minus1)?;
        let centered = x.broadcast_sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centered.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        normed.to_dtype(dtype)?.broadcast_mul(&self.weight)?.broadcast_add(&self.bias)
    }
}
