//! CUDA kernels of the inference path (`cuda` feature), beside the CPU kernels of
//! `layers::fused`: `kernels.cu`, compiled to PTX at build time by nvcc (build.rs) and loaded
//! once per GPU by candle. Each is an in-place candle op over a tensor the caller just made:
//! - [`AttentionSoftmax`]: scale + key mask + softmax of attention scores, in one pass (candle's
//!   composition takes six passes over the `[batch, heads, seq, seq]` scores);
//! - [`residual_layer_norm`]: bias + residual + LayerNorm at the end of a transformer block;
//! - [`bias_activation`]: a dense layer's bias, with exact GELU or without.
//!
//! All accumulate in f32 for f32 and bf16 tensors. Built with nvcc rather than NVRTC at run
//! time: the GPU machine then needs no compiler library, and a syntax error fails the build.

#[cfg(feature = "cuda")]
mod launch;

use candle_core::{InplaceOp2, InplaceOp3, Layout, Result, Tensor};

/// In place: `scores = softmax(scores · scale + key_bias)` over the last dimension.
/// `scores: [items, rows_per_item…, keys]` (f32 or bf16, contiguous), `key_bias: [items, keys]`
/// (f32: 0 for a real key, a large negative number for padding).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct AttentionSoftmax {
    pub(crate) scale: f32,
}

impl InplaceOp2 for AttentionSoftmax {
    fn name(&self) -> &'static str {
        "cuda-attention-softmax"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        candle_core::bail!("{} runs on CUDA only", InplaceOp2::name(self))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        scores: &mut candle_core::CudaStorage,
        scores_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<()> {
        launch::attention_softmax(self.scale, (scores, scores_l), (bias, bias_l))
    }
}

/// In place: `x = LayerNorm(x + bias + residual) · γ + β` over rows of the last dimension;
/// `params = [bias, γ, β]` (`[3, n]`, f32).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct ResidualLayerNorm {
    pub(crate) eps: f32,
}

impl InplaceOp3 for ResidualLayerNorm {
    fn name(&self) -> &'static str {
        "cuda-residual-layer-norm"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        candle_core::bail!("{} runs on CUDA only", InplaceOp3::name(self))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &mut candle_core::CudaStorage,
        x_l: &Layout,
        residual: &candle_core::CudaStorage,
        residual_l: &Layout,
        params: &candle_core::CudaStorage,
        params_l: &Layout,
    ) -> Result<()> {
        launch::residual_layer_norm(self.eps, (x, x_l), (residual, residual_l), (params, params_l))
    }
}

/// In place: `x = x + bias`, or `gelu_erf(x + bias)` with `gelu`; `bias: [n]` (f32) over rows
/// of `n`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct BiasActivation {
    pub(crate) gelu: bool,
}

impl InplaceOp2 for BiasActivation {
    fn name(&self) -> &'static str {
        "cuda-bias-activation"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        candle_core::bail!("{} runs on CUDA only", InplaceOp2::name(self))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &mut candle_core::CudaStorage,
        x_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<()> {
        launch::bias_activation(self.gelu, (x, x_l), (bias, bias_l))
    }
}

/// `LayerNorm(x + bias + residual)` into `x` (a tensor the caller made and holds alone).
///
/// # Shapes
/// `x, residual: [..., n]`, `bias, gamma, beta: [n]` → `x`
pub(crate) fn residual_layer_norm(
    x: Tensor,
    residual: &Tensor,
    bias: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    let params = Tensor::stack(&[bias, gamma, beta], 0)?.to_dtype(candle_core::DType::F32)?;
    x.inplace_op3(&residual.contiguous()?, &params, &ResidualLayerNorm { eps: eps as f32 })?;
    Ok(x)
}

/// `x + bias` or `gelu_erf(x + bias)` into `x` (a tensor the caller made and holds alone).
///
/// # Shapes
/// `x: [..., n]`, `bias: [n]` → `x`
pub(crate) fn bias_activation(x: Tensor, bias: &Tensor, gelu: bool) -> Result<Tensor> {
    x.inplace_op2(&bias.to_dtype(candle_core::DType::F32)?, &BiasActivation { gelu })?;
    Ok(x)
}
