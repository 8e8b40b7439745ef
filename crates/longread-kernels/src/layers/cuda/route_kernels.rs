//! The kernels the GPU route's training ops run between matrix products, by backend: the CUDA
//! launches (`launch`) and their f32 CPU references (`reference`), so that an op's forward pass
//! is written once over a storage type (`AttentionTrain`, `GeluDenseTrain`).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout, Result};

use super::reference;
use super::training::AttentionProbsTrain;

/// One backend's kernels (see the module doc).
pub(super) trait RouteKernels: BackendStorage {
    /// `SplitQkv`: `[3, batch, heads, seq, head_size]` from `[batch · seq, 3 · hidden]` + bias;
    /// `dims = (batch, seq, heads, head_size)`.
    fn split_qkv(&self, l: &Layout, bias: &Self, bias_l: &Layout, dims: (usize, usize, usize, usize)) -> Result<Self>;
    /// [`AttentionProbsTrain`] of `[rows, keys]` scores.
    fn probs(&self, l: &Layout, key_bias: &Self, key_bias_l: &Layout, op: AttentionProbsTrain) -> Result<Self>;
    /// `MergeHeads`: `[batch, heads, seq, head_size]` → `[batch, seq, heads · head_size]`.
    fn merge_heads(&self, l: &Layout, heads: usize) -> Result<Self>;
    /// Exact GELU of `x + bias` (`BiasActivationTrain { gelu: true }`).
    fn bias_gelu(&self, l: &Layout, bias: &Self, bias_l: &Layout) -> Result<Self>;
}

impl RouteKernels for CpuStorage {
    fn split_qkv(&self, l: &Layout, bias: &Self, bias_l: &Layout, dims: (usize, usize, usize, usize)) -> Result<Self> {
        reference::split_qkv(dims, (self, l), (bias, bias_l))
    }

    fn probs(&self, l: &Layout, key_bias: &Self, key_bias_l: &Layout, op: AttentionProbsTrain) -> Result<Self> {
        reference::attention_probs_train(op.scale, op.dropout, (self, l), (key_bias, key_bias_l), None)
    }

    fn merge_heads(&self, l: &Layout, _heads: usize) -> Result<Self> {
        reference::merge_heads((self, l))
    }

    fn bias_gelu(&self, l: &Layout, bias: &Self, bias_l: &Layout) -> Result<Self> {
        reference::bias_activation_train(true, (self, l), (bias, bias_l), None)
    }
}

#[cfg(feature = "cuda")]
impl RouteKernels for candle_core::CudaStorage {
    fn split_qkv(&self, l: &Layout, bias: &Self, bias_l: &Layout, dims: (usize, usize, usize, usize)) -> Result<Self> {
        super::launch::split_qkv(dims, (self, l), (bias, bias_l))
    }

    fn probs(&self, l: &Layout, key_bias: &Self, key_bias_l: &Layout, op: AttentionProbsTrain) -> Result<Self> {
        super::launch::attention_probs_train(op.scale, op.dropout, (self, l), (key_bias, key_bias_l), None)
    }

    fn merge_heads(&self, l: &Layout, heads: usize) -> Result<Self> {
        super::launch::merge_heads(heads, (self, l))
    }

    fn bias_gelu(&self, l: &Layout, bias: &Self, bias_l: &Layout) -> Result<Self> {
        super::launch::bias_activation_train(true, (self, l), (bias, bias_l), None)
    }
}
