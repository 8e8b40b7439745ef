//! Dense layers initialised as transformers does (`normal(0, initializer_range)`, zero bias).

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};
use candle_nn::{Init, Module, VarBuilder};

use crate::activation::Activation;
use crate::layers::fused::{FusedBiasAdd, FusedBiasGeluErf, InferenceProduct};
use crate::layers::int8::Int8Weights;

/// A dense layer (`x·Wᵀ + b`, as `torch.nn.Linear`) whose weights are cast to the input's
/// dtype: with bf16 activations it computes in bf16 while the weights (and their gradients,
/// through the cast) stay f32 — mixed precision with f32 master weights. After
/// [`Linear::quantize_int8`], f32 inputs on the CPU go through int8 products (inference only).
#[derive(Debug, Clone)]
pub struct Linear {
    dense: candle_nn::Linear,
    int8: Option<Arc<Int8Weights>>,
}

impl Linear {
    /// A layer from its weight `[out, in]` and optional bias `[out]`.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { dense: candle_nn::Linear::new(weight, bias), int8: None }
    }

    /// Quantises the weights to int8 for inference (`--precision int8`); `false` goes back to
    /// the f32 weights, which are kept.
    pub fn quantize_int8(&mut self, on: bool) -> Result<()> {
        self.int8 = if on { Some(Arc::new(Int8Weights::new(self.dense.weight(), self.dense.bias())?)) } else { None };
        Ok(())
    }

    /// The product `x·Wᵀ` without the bias, and the bias, for kernels that add the bias
    /// themselves: `Some` for f32 input and weights on the CPU (not int8) with a bias; `None`
    /// where [`Module::forward`] is the way.
    ///
    /// # Shapes
    /// `xs: [..., in]` → `([..., out], [out])`
    pub(crate) fn forward_unbiased(&self, xs: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        let (w, bias) = (self.dense.weight(), self.dense.bias());
        let fusable = xs.device().is_cpu() && xs.dtype() == DType::F32 && w.dtype() == DType::F32;
        match bias {
            Some(bias) if fusable && self.int8.is_none() => {
                let product = if xs.track_op() || w.track_op() {
                    candle_nn::Linear::new(w.clone(), None).forward(xs)?
                } else {
                    xs.contiguous()?.apply_op2_no_bwd(&w.contiguous()?, &InferenceProduct)?
                };
                Ok(Some((product, bias.clone())))
            }
            _ => Ok(None),
        }
    }

    /// `activation(x·Wᵀ + b)`; with exact GELU on the CPU in f32, the bias and the activation
    /// are one fused op (`layers::fused::bias_gelu`).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward_activated(&self, xs: &Tensor, activation: Activation) -> Result<Tensor> {
        if activation == Activation::GeluErf {
            if let Some((product, bias)) = self.forward_unbiased(xs)? {
                return in_place_without_gradients(product, &bias, FusedBiasGeluErf);
            }
        }
        activation.forward(&self.forward(xs)?)
    }
}

impl Module for Linear {
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        if let Some(int8) = &self.int8 {
            if xs.device().is_cpu() && xs.dtype() == DType::F32 {
                return int8.forward(xs);
            }
        }
        if let Some((product, bias)) = self.forward_unbiased(xs)? {
            return in_place_without_gradients(product, &bias, FusedBiasAdd);
        }
        let w = self.dense.weight();
        if w.dtype() == xs.dtype() {
            return self.dense.forward(xs);
        }
        let bias = self.dense.bias().map(|b| b.to_dtype(xs.dtype())).transpose()?;
        candle_nn::Linear::new(w.to_dtype(xs.dtype())?, bias).forward(xs)
    }
}

/// `op(product, bias)`: where neither carries a gradient, in place on the product (a tensor
/// this layer just made and nobody else holds: no new buffer to allocate and fill), else as
/// an op with its backward pass.
fn in_place_without_gradients<Op>(product: Tensor, bias: &Tensor, op: Op) -> Result<Tensor>
where
    Op: candle_core::CustomOp2 + candle_core::InplaceOp2 + Send + Sync + 'static,
{
    if product.track_op() || bias.track_op() {
        return product.apply_op2(bias, op);
    }
    product.inplace_op2(bias, &op)?;
    Ok(product)
}

/// Loads `weight [out, in]` and `bias [out]`; new weights are drawn from `N(0, std²)`.
pub fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", Init::Randn { mean: 0.0, stdev: std })?;
    let bias = vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?;
    Ok(Linear::new(weight, Some(bias)))
}
