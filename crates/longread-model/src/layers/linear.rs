//! Dense layers initialised as transformers does (`normal(0, initializer_range)`, zero bias).

use candle_core::{Result, Tensor};
use candle_nn::{Init, Module, VarBuilder};

/// A dense layer (`x·Wᵀ + b`, as `torch.nn.Linear`) whose weights are cast to the input's
/// dtype: with bf16 activations it computes in bf16 while the weights (and their gradients,
/// through the cast) stay f32 — mixed precision with f32 master weights.
#[derive(Debug, Clone)]
pub struct Linear(candle_nn::Linear);

impl Linear {
    /// A layer from its weight `[out, in]` and optional bias `[out]`.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self(candle_nn::Linear::new(weight, bias))
    }
}

impl Module for Linear {
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let w = self.0.weight();
        if w.dtype() == xs.dtype() {
            return self.0.forward(xs);
        }
        let bias = self.0.bias().map(|b| b.to_dtype(xs.dtype())).transpose()?;
        candle_nn::Linear::new(w.to_dtype(xs.dtype())?, bias).forward(xs)
    }
}

/// Loads `weight [out, in]` and `bias [out]`; new weights are drawn from `N(0, std²)`.
pub fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", Init::Randn { mean: 0.0, stdev: std })?;
    let bias = vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?;
    Ok(Linear(candle_nn::Linear::new(weight, Some(bias))))
}
