//! Dense layers initialised as transformers does (`normal(0, initializer_range)`, zero bias).

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};
use candle_nn::{Init, Module, VarBuilder};

use crate::activation::Activation;
use crate::layers::cuda;
use crate::layers::fused::{DenseProduct, FusedBiasAdd, FusedBiasGeluErf};
use crate::layers::int8::Int8Weights;
use crate::layers::weight_casts;
use crate::mode::Mode;
use crate::route;

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

    /// Keeps the weight matrix in `dtype` (e.g. bf16 for inference on a GPU), so that it is not
    /// cast at every product; the bias stays f32 (the kernels add it in f32). Inference only:
    /// the weight is no longer the trained variable.
    pub fn cast_weight(&mut self, dtype: DType) -> Result<()> {
        let weight = self.dense.weight().to_dtype(dtype)?.detach();
        self.dense = candle_nn::Linear::new(weight, self.dense.bias().cloned());
        Ok(())
    }

    /// The weight in `dtype` (cast unless it is stored so; within a training step's
    /// [`weight_casts::StepCasts`] scope cast once for the step), with its graph.
    pub fn weight_in(&self, dtype: DType) -> Result<Tensor> {
        weight_casts::cast(self.dense.weight(), dtype)
    }

    /// The weight `[out, in]` and the bias `[out]`, as stored.
    pub fn parts(&self) -> (&Tensor, Option<&Tensor>) {
        (self.dense.weight(), self.dense.bias())
    }

    /// The dtype the weight matrix is stored in (bf16 after [`Self::cast_weight`] for bf16).
    pub fn weight_dtype(&self) -> DType {
        self.dense.weight().dtype()
    }

    /// `x·Wᵀ` on a GPU as one two-dimensional product (one cuBLAS call over every row; bf16
    /// through cuBLASLt, [`cuda::lt_linear`]), in the weight's dtype: an f32
    /// input (the residual stream) is cast to a bf16 weight's, or read from the bf16 copy its
    /// block end wrote ([`cuda::twin`]).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn product_rows(&self, xs: &Tensor) -> Result<Tensor> {
        let w = self.dense.weight();
        let xs = &cuda::twin::product_input(xs, w.dtype())?;
        if w.dtype() == DType::BF16 {
            return cuda::lt_linear(xs, w, None);
        }
        let mut dims = xs.dims().to_vec();
        let k = dims.pop().unwrap_or(1);
        let rows = xs.elem_count() / k.max(1);
        let out = xs.reshape((rows, k))?.matmul(&w.t()?)?;
        dims.push(w.dim(0)?);
        out.reshape(dims)
    }

    /// The int8 weights, when [`Self::quantize_int8`] made them and `xs` can use them (f32 on
    /// the CPU).
    fn int8_for(&self, xs: &Tensor) -> Option<&Int8Weights> {
        self.int8.as_deref().filter(|_| route::cpu(xs.device()) && xs.dtype() == DType::F32)
    }

    /// Whether a product of `xs` with this layer can need a backward pass: when the input or a
    /// parameter carries gradients.
    fn tracks(&self, xs: &Tensor) -> bool {
        xs.track_op() || self.dense.weight().track_op() || self.dense.bias().is_some_and(Tensor::track_op)
    }

    /// Whether the product needs a backward pass in `mode`: never in inference ([`Mode::Eval`]
    /// builds no graph: the encoder's blocks end in ops without one), else as [`Self::tracks`].
    pub fn needs_graph(&self, xs: &Tensor, mode: Mode) -> bool {
        mode.is_train() && self.tracks(xs)
    }

    /// The product `x·Wᵀ` without the bias, and the bias, for kernels that add the bias
    /// themselves: `Some` for f32 input and weights on the CPU (not int8) with a bias; `None`
    /// where [`Module::forward`] is the way. The product is [`DenseProduct`], with its backward
    /// pass if `graph`.
    ///
    /// # Shapes
    /// `xs: [..., in]` → `([..., out], [out])`
    pub fn forward_unbiased(&self, xs: &Tensor, graph: bool) -> Result<Option<(Tensor, Tensor)>> {
        let (w, bias) = (self.dense.weight(), self.dense.bias());
        if xs.device().is_cuda() {
            // Inference on a GPU: the product in the input's dtype; the CUDA kernels add the bias.
            return match bias {
                Some(bias) if !graph => Ok(Some((self.product_rows(xs)?, bias.clone()))),
                _ => Ok(None),
            };
        }
        let fusable = route::cpu(xs.device()) && xs.dtype() == DType::F32 && w.dtype() == DType::F32;
        match bias {
            Some(bias) if fusable && self.int8.is_none() => {
                let (xs, w) = (xs.contiguous()?, w.contiguous()?);
                let product =
                    if graph { xs.apply_op2(&w, DenseProduct)? } else { xs.apply_op2_no_bwd(&w, &DenseProduct)? };
                Ok(Some((product, bias.clone())))
            }
            _ => Ok(None),
        }
    }

    /// `x·Wᵀ + b` in `mode`: in inference without a graph (see [`Self::needs_graph`]).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward_in(&self, xs: &Tensor, mode: Mode) -> Result<Tensor> {
        self.forward_graph(xs, self.needs_graph(xs, mode))
    }

    /// `activation(x·Wᵀ + b)` in `mode`; with exact GELU on the CPU in f32, the bias and the
    /// activation are one fused op (`layers::fused::bias_gelu`).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward_activated(&self, xs: &Tensor, activation: Activation, mode: Mode) -> Result<Tensor> {
        let graph = self.needs_graph(xs, mode);
        if graph && route::gpu(xs.device()) {
            let gelu = activation == Activation::GeluErf;
            let out = self.forward_cuda_train(xs, gelu)?;
            return if gelu { Ok(out) } else { activation.forward(&out) };
        }
        if activation == Activation::GeluErf {
            if let Some(int8) = self.int8_for(xs) {
                return int8.forward_gelu(xs);
            }
            if let Some(out) = self.gelu_in_epilogue(xs, graph)? {
                return Ok(out);
            }
            if let Some((product, bias)) = self.forward_unbiased(xs, graph)? {
                if product.device().is_cuda() {
                    return cuda::bias_activation(product, &bias, true);
                }
                return bias_op(product, &bias, FusedBiasGeluErf, graph);
            }
        }
        activation.forward(&self.forward_graph(xs, graph)?)
    }

    /// `gelu(x·Wᵀ + b)` with bias and GELU in the product's epilogue, where chosen
    /// (`LONGREAD_CUDA_GELU`, [`cuda::gelu_epilogue`]) and it applies — bf16 inference on a GPU,
    /// with a bias: `fused` (the default), longread's CUTLASS product with the exact GELU (GPUs
    /// of compute capability 9.0); `tanh`, cuBLASLt's epilogue (tanh-approximated GELU). `None`
    /// elsewhere and with `pass` (the exact GELU runs in a pass of its own).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn gelu_in_epilogue(&self, xs: &Tensor, graph: bool) -> Result<Option<Tensor>> {
        let (w, bias) = (self.dense.weight(), self.dense.bias());
        let Some(bias) = bias else { return Ok(None) };
        if graph || !xs.device().is_cuda() || w.dtype() != DType::BF16 {
            return Ok(None);
        }
        match cuda::gelu_epilogue() {
            "tanh" => {
                let xs = cuda::twin::product_input(xs, w.dtype())?;
                Ok(Some(cuda::lt_linear_gelu_tanh(&xs, w, bias)?))
            }
            "fused" => cuda::fused_linear_gelu(xs, w, bias),
            _ => Ok(None),
        }
    }

    /// `x·Wᵀ + b`, with a backward pass if `graph`.
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn forward_graph(&self, xs: &Tensor, graph: bool) -> Result<Tensor> {
        if graph && route::gpu(xs.device()) {
            return self.forward_cuda_train(xs, false);
        }
        if let Some(int8) = self.int8_for(xs) {
            return int8.forward(xs);
        }
        if let Some((product, bias)) = self.forward_unbiased(xs, graph)? {
            if product.device().is_cuda() {
                return cuda::bias_activation(product, &bias, false);
            }
            return bias_op(product, &bias, FusedBiasAdd, graph);
        }
        let (w, bias) = (self.dense.weight(), self.dense.bias());
        if w.dtype() == xs.dtype() && bias.is_none_or(|b| b.dtype() == xs.dtype()) {
            return self.dense.forward(xs);
        }
        let bias = bias.map(|b| weight_casts::cast(b, xs.dtype())).transpose()?;
        candle_nn::Linear::new(self.weight_in(xs.dtype())?, bias).forward(xs)
    }
}

impl Module for Linear {
    /// With a backward pass wherever the input or a parameter carries gradients.
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.forward_graph(xs, self.tracks(xs))
    }
}

impl Linear {
    /// Training on a GPU: one two-dimensional product over every row in the input's dtype (the
    /// f32 weight cast to it; the weight's gradient is then one GEMM, where candle's product
    /// with a broadcast weight sums per-sequence gradients in the input's dtype), then the bias
    /// and, with `gelu`, exact GELU as one op whose bias gradient is summed in f32
    /// (`layers::cuda::BiasActivationTrain`).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    fn forward_cuda_train(&self, xs: &Tensor, gelu: bool) -> Result<Tensor> {
        let (product, mut dims) = self.product_rows_train(xs)?;
        let out = match self.dense.bias() {
            Some(bias) => product.apply_op2(&bias.to_dtype(DType::F32)?, cuda::BiasActivationTrain { gelu })?,
            None if gelu => product.gelu_erf()?,
            None => product,
        };
        dims.push(self.dense.weight().dim(0)?);
        out.reshape(dims)
    }

    /// The product without the bias as training on a GPU makes it (see
    /// `Linear::forward_cuda_train`), with its graph, for ops that add the bias themselves
    /// (`layers::cuda::ResidualNormTrain`).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn product_train(&self, xs: &Tensor) -> Result<Tensor> {
        let (product, mut dims) = self.product_rows_train(xs)?;
        dims.push(self.dense.weight().dim(0)?);
        product.reshape(dims)
    }

    /// One two-dimensional product over every row, in the input's dtype, and the input's
    /// leading dimensions.
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[rows, out]`
    fn product_rows_train(&self, xs: &Tensor) -> Result<(Tensor, Vec<usize>)> {
        let w = self.weight_in(xs.dtype())?;
        let mut dims = xs.dims().to_vec();
        let k = dims.pop().unwrap_or(1);
        let rows = xs.elem_count() / k.max(1);
        let x = xs.reshape((rows, k))?;
        // The weight's gradient in its own layout (no transpose to copy per kept group).
        if cuda::train_product_op() && w.is_contiguous() {
            return Ok((x.contiguous()?.apply_op2(&w, cuda::ProductTrain)?, dims));
        }
        Ok((x.matmul(&w.t()?)?, dims))
    }
}

/// `op(product, bias)`: as an op with its backward pass if `graph`, else in place on the
/// product (a tensor this layer just made and nobody else holds: no new buffer to allocate
/// and fill).
fn bias_op<Op>(product: Tensor, bias: &Tensor, op: Op, graph: bool) -> Result<Tensor>
where
    Op: candle_core::CustomOp2 + candle_core::InplaceOp2 + Send + Sync + 'static,
{
    if graph {
        return product.apply_op2(bias, op);
    }
    product.inplace_op2(bias, &op)?;
    Ok(product)
}

/// Loads `weight [out, in]` and `bias [out]`; new weights are drawn from `N(0, std²)`.
pub fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64) -> Result<Linear> {
    linear_with_bias(vb, in_dim, out_dim, std, true)
}

/// [`linear`], or without a bias (`weight` only) when `bias` is false (ModernBERT's layers and
/// head, DeBERTa's `embed_proj`).
pub fn linear_with_bias(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64, bias: bool) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", Init::Randn { mean: 0.0, stdev: std })?;
    let bias = if bias { Some(vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?) } else { None };
    Ok(Linear::new(weight, bias))
}
