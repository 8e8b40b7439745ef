//! LayerNorm over the last dimension, composed from differentiable ops
//! (matches `torch.nn.LayerNorm`: biased variance, eps inside the square root).

use candle_core::{DType, Result, Tensor, D};
use candle_nn::VarBuilder;

use crate::layers::fused::FusedLayerNorm;
use crate::mode::Mode;
use crate::route;

/// `y = (x - mean) / sqrt(var + eps) * weight + bias` over the last dimension.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// A LayerNorm of these parameters (`weight`, `bias`: `[size]`).
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> Self {
        Self { weight, bias, eps }
    }

    /// Loads `weight` and `bias` of size `size` (initialised to 1 and 0 when new).
    pub fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<Self> {
        let weight = vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?;
        let bias = vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?;
        Ok(Self { weight, bias, eps })
    }

    /// Normalises over the last dimension: on the CPU with one fused op (with its backward pass
    /// in [`Mode::Train`]); elsewhere with the differentiable composition in training. In
    /// [`Mode::Eval`] the output carries no graph (no backward pass), so a layer's
    /// intermediates are freed as soon as it ends.
    ///
    /// # Shapes
    /// `xs: [..., hidden]` → `[..., hidden]`
    pub fn forward(&self, xs: &Tensor, mode: Mode) -> Result<Tensor> {
        if xs.dtype() != DType::F32 {
            // Reduced precision: normalise in f32 (as autocast does), return the input's dtype.
            return self.forward(&xs.to_dtype(DType::F32)?, mode)?.to_dtype(xs.dtype());
        }
        if route::cpu(xs.device()) {
            self.forward_fused(xs, mode)
        } else if mode.is_train() && route::gpu(xs.device()) {
            // One kernel each way (`layers::cuda::LayerNormTrain`).
            let op = crate::layers::cuda::LayerNormTrain { eps: self.eps as f32 };
            xs.contiguous()?.apply_op3(&self.weight.contiguous()?, &self.bias.contiguous()?, op)
        } else if mode.is_train() {
            self.forward_differentiable(xs)
        } else {
            candle_nn::ops::layer_norm(&xs.contiguous()?, &self.weight, &self.bias, self.eps as f32)
        }
    }

    /// `weight` (γ) and `bias` (β).
    pub fn affine(&self) -> (&Tensor, &Tensor) {
        (&self.weight, &self.bias)
    }

    /// The epsilon added to the variance.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// One fused CPU op, with its backward pass in training (gradient-checked against the
    /// composition) and without a graph in inference.
    ///
    /// # Shapes
    /// `xs: [..., hidden]` → `[..., hidden]`
    pub fn forward_fused(&self, xs: &Tensor, mode: Mode) -> Result<Tensor> {
        let op = FusedLayerNorm { eps: self.eps as f32 };
        mode.apply_op3(&xs.contiguous()?, &self.weight.contiguous()?, &self.bias.contiguous()?, op)
    }

    /// The differentiable composition, on f32 input ([`LayerNorm::forward`] casts other dtypes).
    ///
    /// # Shapes
    /// `xs: [..., hidden]` → `[..., hidden]`
    pub fn forward_differentiable(&self, xs: &Tensor) -> Result<Tensor> {
        let mean = xs.mean_keepdim(D::Minus1)?;
        let centered = xs.broadcast_sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centered.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        normed.broadcast_mul(&self.weight)?.broadcast_add(&self.bias)
    }
}
