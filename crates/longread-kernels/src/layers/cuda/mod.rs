//! CUDA kernels of the inference path (`cuda` feature), beside the CPU kernels of
//! `layers::fused`: `kernels.cu`, compiled to PTX at build time by nvcc (build.rs) and loaded
//! once per GPU by candle. Most are in-place candle ops over a tensor the caller just made:
//! - [`fused_attention`]: [`SplitQkv`] (bias of one fused q/k/v product + the heads split),
//!   scores by cuBLAS, [`AttentionSoftmax`] (scale + key mask + softmax in one pass, where
//!   candle's composition takes six over the `[batch, heads, seq, seq]` scores; the row in
//!   registers when it is 256 to 1024 keys), the second product, [`MergeHeads`];
//! - [`residual_layer_norm`]: bias + residual + LayerNorm at the end of a transformer block (in
//!   bf16 mode from a bf16 product and the f32 residual stream into f32, as under autocast,
//!   with the bf16 copy the next product reads: [`twin`]);
//! - [`EmbeddingTables`]: the embeddings' lookups, sum and LayerNorm as one kernel;
//! - [`bias_activation`]: a dense layer's bias, with exact GELU or without.
//!
//! The LayerNorm kernels hold each row in registers where it fits (rows of 128 to 1,024
//! features in steps of 128); other widths run row-strided kernels.
//! All accumulate in f32 for f32 and bf16 tensors. The training path's ops, with their backward
//! passes: in [`training`] the pieces (dropout masks, attention probabilities, LayerNorm, bias
//! and GELU, AdamW), and three ops that keep only their inputs between the passes and recompute
//! the rest — [`AttentionTrain`] (a layer's self-attention over one q/k/v product),
//! [`ResidualNormTrain`] (a block's end), [`GeluDenseTrain`] (a feed-forward block's GELU and
//! second product). The ops the training path runs have f32 CPU implementations in `reference`,
//! so that `crate::route::emulate_gpu` runs the route on the CPU in tests; the kernels
//! themselves are tested on the CPU under emulation (`tests/kernels_emulated.rs`). Built with
//! nvcc rather than NVRTC at run time: the GPU machine then needs no compiler library, and a
//! syntax error fails the build.

mod add_into;
mod attention_train;
mod cublaslt;
mod embedding_norm;
mod embedding_train;
mod flash;
mod gelu_dense_train;
mod gemm_gelu;
mod gpu_clock;
#[cfg(feature = "cuda")]
mod launch;
mod linear_train;
mod multi_tensor;
mod reference;
mod residual_norm_train;
mod route_kernels;
mod training;
pub mod twin;
mod waves;

pub use add_into::{accumulate_cast, cast_accumulate_in_place, install_cast_accumulate, AddInto};
pub use attention_train::AttentionTrain;
pub use cublaslt::{gelu_epilogue, lt_linear, lt_linear_gelu_tanh, LtProduct};
pub use embedding_norm::EmbeddingTables;
pub use embedding_train::{embedding_lookup, EmbeddingTrain, GroupedIds};
pub use flash::{
    cudnn_unavailable, flash2_enabled, flash2_runs_on, fused_attention_ran, fused_attention_ran_in_training,
    train_attention_fa2, Backend, FlashAttention2, FlashAttentionTrain, KeyLengths,
};
pub use gelu_dense_train::GeluDenseTrain;
pub use gemm_gelu::fused_linear_gelu;
pub use gpu_clock::{hold_gpu, GpuMark};
pub use linear_train::{train_product_op, train_qkv_bias_in_product, LinearBiasTrain, ProductTrain};
pub use multi_tensor::{adamw_multi, adamw_multi_kernel, sum_of_squares, AdamWParts};
pub use residual_norm_train::ResidualNormTrain;
pub use training::AdamWStep;
pub use training::{column_sum, AttentionProbsTrain, BiasActivationTrain, ColumnSum, DropoutMask, LayerNormTrain};

/// `fn cpu_fwd` of an op that runs on CUDA only, for a custom op of 1, 2 or 3 inputs: an error
/// naming the op.
macro_rules! cuda_only {
    (CustomOp1) => {
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            candle_core::bail!("{} runs on CUDA only", CustomOp1::name(self))
        }
    };
    (CustomOp2) => {
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            candle_core::bail!("{} runs on CUDA only", CustomOp2::name(self))
        }
    };
    (CustomOp3) => {
        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> Result<(CpuStorage, Shape)> {
            candle_core::bail!("{} runs on CUDA only", CustomOp3::name(self))
        }
    };
    (InplaceOp2) => {
        fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<()> {
            candle_core::bail!("{} runs on CUDA only", InplaceOp2::name(self))
        }
    };
    (InplaceOp3) => {
        fn cpu_fwd(
            &self,
            _: &mut CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> Result<()> {
            candle_core::bail!("{} runs on CUDA only", InplaceOp3::name(self))
        }
    };
}
pub(crate) use cuda_only;

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, InplaceOp2, InplaceOp3, Layout, Result, Shape, Tensor};

/// In place: `scores = softmax(scores · scale + key_bias)` over the last dimension.
/// `scores: [items, rows_per_item…, keys]` (f32 or bf16, contiguous), `key_bias: [items, keys]`
/// (f32: 0 for a real key, a large negative number for padding).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct AttentionSoftmax {
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
}

impl InplaceOp2 for AttentionSoftmax {
    fn name(&self) -> &'static str {
        "cuda-attention-softmax"
    }

    cuda_only!(InplaceOp2);

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
pub struct ResidualLayerNorm {
    /// LayerNorm epsilon, inside the square root.
    pub eps: f32,
}

impl InplaceOp3 for ResidualLayerNorm {
    fn name(&self) -> &'static str {
        "cuda-residual-layer-norm"
    }

    cuda_only!(InplaceOp3);

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
pub struct BiasActivation {
    /// Apply GELU (erf) after adding the bias.
    pub gelu: bool,
}

impl InplaceOp2 for BiasActivation {
    fn name(&self) -> &'static str {
        "cuda-bias-activation"
    }

    cuda_only!(InplaceOp2);

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

/// `LayerNorm(x + bias + residual)`: into `x` (a tensor the caller made and holds alone) when
/// both have one dtype; into a new f32 tensor for a bf16 `x` and an f32 `residual`.
///
/// # Shapes
/// `x, residual: [..., n]`, `bias, gamma, beta: [n]` → `[..., n]`
pub fn residual_layer_norm(
    x: Tensor,
    residual: &Tensor,
    bias: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    let params = Tensor::stack(&[bias, gamma, beta], 0)?.to_dtype(candle_core::DType::F32)?;
    let residual = residual.contiguous()?;
    if x.dtype() != residual.dtype() {
        return residual_layer_norm_into(&x, &residual, &params, eps as f32);
    }
    x.inplace_op3(&residual, &params, &ResidualLayerNorm { eps: eps as f32 })?;
    Ok(x)
}

/// `LayerNorm(x + bias + residual) · γ + β` of a bf16 `x` and an f32 `residual` into a new f32
/// tensor (the residual stream stays f32 between layers, as under PyTorch's autocast), its bf16
/// copy written beside it by the same kernel for the next product ([`twin`]); `params = [bias,
/// γ, β]` (`[3, n]`, f32).
///
/// # Shapes
/// `x, residual: [..., n]`, `params: [3, n]` → `[..., n]` (f32)
#[cfg(feature = "cuda")]
fn residual_layer_norm_into(x: &Tensor, residual: &Tensor, params: &Tensor, eps: f32) -> Result<Tensor> {
    use candle_core::Storage;
    let (out, copy) = {
        let ((x_s, x_l), (r_s, r_l), (p_s, p_l)) =
            (x.storage_and_layout(), residual.storage_and_layout(), params.storage_and_layout());
        let (Storage::Cuda(x_s), Storage::Cuda(r_s), Storage::Cuda(p_s)) = (&*x_s, &*r_s, &*p_s) else {
            candle_core::bail!("cuda-residual-layer-norm-into runs on CUDA only")
        };
        launch::residual_layer_norm_into(eps, (x_s, x_l), (r_s, r_l), (p_s, p_l))?
    };
    let out = untracked(out, x.shape());
    if let Some(copy) = copy {
        twin::keep(&out, untracked(copy, x.shape()));
    }
    Ok(out)
}

/// A tensor of a storage a kernel of this module wrote, with no graph (inference, or a backward
/// pass's output).
#[cfg(feature = "cuda")]
pub(crate) fn untracked(storage: candle_core::CudaStorage, shape: impl Into<Shape>) -> Tensor {
    Tensor::from_storage(candle_core::Storage::Cuda(storage), shape, candle_core::op::BackpropOp::none(), false)
}

#[cfg(not(feature = "cuda"))]
fn residual_layer_norm_into(_: &Tensor, _: &Tensor, _: &Tensor, _: f32) -> Result<Tensor> {
    candle_core::bail!("cuda-residual-layer-norm-into runs on CUDA only")
}

/// `x + bias` or `gelu_erf(x + bias)` into `x` (a tensor the caller made and holds alone).
///
/// # Shapes
/// `x: [..., n]`, `bias: [n]` → `x`
pub fn bias_activation(x: Tensor, bias: &Tensor, gelu: bool) -> Result<Tensor> {
    x.inplace_op2(&bias.to_dtype(candle_core::DType::F32)?, &BiasActivation { gelu })?;
    Ok(x)
}

/// q, k, v `[3, batch, heads, seq, head_size]` from a fused projection `[batch · seq, 3 · hidden]`
/// and its f32 bias `[3 · hidden]`.
#[derive(Debug, Clone, Copy)]
pub struct SplitQkv {
    /// Sequences in the batch.
    pub batch: usize,
    /// Tokens per sequence (padded).
    pub seq: usize,
    /// Attention heads.
    pub heads: usize,
    /// Size of one head.
    pub head_size: usize,
}

impl CustomOp2 for SplitQkv {
    fn name(&self) -> &'static str {
        "cuda-split-qkv"
    }

    /// The same layout on the CPU (f32; `reference`), for tests of compositions of it.
    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout, bias: &CpuStorage, bias_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let out = reference::split_qkv((self.batch, self.seq, self.heads, self.head_size), (x, x_l), (bias, bias_l))?;
        Ok((out, self.shape()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let out = launch::split_qkv((self.batch, self.seq, self.heads, self.head_size), (x, x_l), (bias, bias_l))?;
        Ok((out, self.shape()))
    }
}

impl SplitQkv {
    /// `[3, batch, heads, seq, head_size]`.
    fn shape(&self) -> Shape {
        Shape::from((3, self.batch, self.heads, self.seq, self.head_size))
    }
}

/// `[batch, heads, seq, head_size]` → `[batch, seq, heads · head_size]`.
#[derive(Debug, Clone, Copy)]
pub struct MergeHeads;

impl CustomOp1 for MergeHeads {
    fn name(&self) -> &'static str {
        "cuda-merge-heads"
    }

    /// The same layout on the CPU (f32; `reference`), for tests of compositions of it.
    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (b, h, s, d) = x_l.shape().dims4()?;
        Ok((reference::merge_heads((x, x_l))?, Shape::from((b, s, h * d))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, x: &candle_core::CudaStorage, x_l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        let (b, h, s, d) = x_l.shape().dims4()?;
        Ok((launch::merge_heads(h, (x, x_l))?, Shape::from((b, s, h * d))))
    }
}

/// How bf16 attention of GPU inference runs, from LONGREAD_CUDA_ATTENTION: `fa2` (the default:
/// [`FlashAttention2`] where the GPU runs it, [`flash2_runs_on`]; 160 against 136 documents/s
/// on an H200, BENCHMARKS.md "GPU"), `cudnn` (the same op on cuDNN, [`Backend`]) or
/// `materialized` (the scores as a tensor between two cuBLAS products; also where
/// FlashAttention-2 does not apply). Also what benchmark rows report.
pub fn inference_attention() -> &'static str {
    static MODE: OnceLock<&'static str> = OnceLock::new();
    env_choice(&MODE, "LONGREAD_CUDA_ATTENTION", &["materialized", "cudnn"], "fa2")
}

/// The attention kernel GPU inference ran since the last call (of this or
/// [`fused_attention_ran`]), for benchmark rows: `fa2` or `cudnn` if [`FlashAttention2`] ran
/// (on that backend), else `materialized`.
pub fn inference_attention_ran() -> &'static str {
    fused_attention_ran().unwrap_or("materialized")
}

/// How training on a GPU runs self-attention, from LONGREAD_CUDA_TRAIN_ATTENTION: `fa2` (the
/// default: [`FlashAttentionTrain`] over one q/k/v product where it applies and the GPU runs
/// it, [`flash2_runs_on`]; 17.2 against 15.2 documents/s at less memory on an H200,
/// BENCHMARKS.md "GPU"), `cudnn` (the same op on cuDNN, [`Backend`]) or `fused`
/// ([`AttentionTrain`] over the same product; also where FlashAttention-2 does not apply).
/// Where the projections have no bias, the heads do not fit the kernels' 16-byte vectors or the
/// model adds a position bias, the attention is composed of separate projections and ops
/// whatever this says.
pub(crate) fn train_attention() -> &'static str {
    static MODE: OnceLock<&'static str> = OnceLock::new();
    env_choice(&MODE, "LONGREAD_CUDA_TRAIN_ATTENTION", &["fused", "cudnn"], "fa2")
}

/// Whether the fused attention's backward pass (FlashAttention-2's or cuDNN's) is deterministic
/// — the same bits from the same step, which a resumed run needs to end bit-identical (the
/// default) — or, with `LONGREAD_CUDA_ATTENTION_BWD=fast`, adds its dq blocks into one
/// accumulator in whatever order they run (FlashAttention-2's atomics; cuDNN's default engine,
/// where the deterministic one writes dP, `batch · heads · seq²` bf16, to its workspace).
pub fn attention_backward_deterministic() -> bool {
    static FAST: OnceLock<bool> = OnceLock::new();
    !env_is(&FAST, "LONGREAD_CUDA_ATTENTION_BWD", "fast")
}

/// Whether FlashAttention-2's backward pass zeroes only the key rows it leaves unwritten (past
/// each sequence's real keys: one small kernel after it, the default), or, with
/// `LONGREAD_CUDA_ZERO_PADDED=all`, the whole q/k/v gradient before it (a pass over
/// `[tokens, 3 · hidden]` per layer wherever a chunk has padding).
pub fn zero_padded_keys_only() -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    !env_is(&ALL, "LONGREAD_CUDA_ZERO_PADDED", "all")
}

/// Where cuDNN's attention backward pass writes dq, dk and dv, from `LONGREAD_CUDNN_GRADS`:
/// `packed` (the default) straight into the q/k/v product's gradient (rows of `3 · hidden`);
/// `dense` into three `[rows, hidden]` blocks (PyTorch's layout in transformers' model, whose
/// q, k and v are separate products); `heads` into three `[batch, heads, seq, dim]` blocks
/// (PyTorch's `empty_like` of a packed view: its SDPA given views of one q/k/v product); the
/// last two then copied into the packed rows. Kept to measure on a GPU whether the layout
/// changes cuDNN's engine or its speed: in PyTorch's step (80 × 512 tokens) cuDNN's backward
/// kernel takes 0.58 ms a layer, FlashAttention-2's 1.57 in ours, and our cuDNN op was only 9%
/// faster than our FlashAttention-2 op in `bench --workload kernels` (BENCHMARKS.md "GPU",
/// measured on an H200 on 2026-11-28).
pub fn cudnn_gradient_layout() -> &'static str {
    static LAYOUT: OnceLock<&'static str> = OnceLock::new();
    env_choice(&LAYOUT, "LONGREAD_CUDNN_GRADS", &["dense", "heads"], "packed")
}

/// Whether cuDNN's attention gradients go straight into the q/k/v product's gradient (the
/// default: [`cudnn_gradient_layout`] `packed`).
pub fn cudnn_packed_gradients() -> bool {
    cudnn_gradient_layout() == "packed"
}

/// Whether the attention probabilities of training (forward and backward) use their kernels
/// with the row in registers where it fits (the default), or, with
/// `LONGREAD_CUDA_PROBS_KERNEL=rows`, the row-strided kernels only (kept to compare the two on
/// a GPU, or to rule the register kernels out).
pub fn train_probs_in_registers() -> bool {
    static ROWS: OnceLock<bool> = OnceLock::new();
    !env_is(&ROWS, "LONGREAD_CUDA_PROBS_KERNEL", "rows")
}

/// Whether the block end's backward kernel keeps each lane's running sums of the bias, γ and β
/// gradients in shared memory (the default: about 120 registers a thread at 768
/// features, 4 blocks per multiprocessor), or, with `LONGREAD_CUDA_NORM_GRAD_SUMS=registers`, in
/// registers (about 200: 2 blocks; kept to compare on a GPU). The same bits either way.
pub fn norm_grad_sums_shared() -> bool {
    static REGISTERS: OnceLock<bool> = OnceLock::new();
    !env_is(&REGISTERS, "LONGREAD_CUDA_NORM_GRAD_SUMS", "registers")
}

/// Whether a GELU's backward pass on a GPU sums its bias's gradient in the same pass over the
/// rows (the default), or, with `LONGREAD_CUDA_GELU_BIAS_GRAD=apart`, writes the
/// gradient and then sums it with [`ColumnSum`], reading it back (kept to compare on a GPU).
pub fn gelu_bias_grad_fused() -> bool {
    static APART: OnceLock<bool> = OnceLock::new();
    !env_is(&APART, "LONGREAD_CUDA_GELU_BIAS_GRAD", "apart")
}

/// Whether [`EmbeddingTrain`]'s backward pass sums an id looked up many times in pieces (the
/// default), or, with `LONGREAD_CUDA_EMBEDDING_GRAD=unsplit`, each id's positions in one block
/// (the kernel before commit 8d8483b, kept to compare on a GPU).
pub fn embedding_grad_in_pieces() -> bool {
    static UNSPLIT: OnceLock<bool> = OnceLock::new();
    !env_is(&UNSPLIT, "LONGREAD_CUDA_EMBEDDING_GRAD", "unsplit")
}

/// Whether the environment variable `var` is `value`, read once per process into `cell`.
pub(crate) fn env_is(cell: &OnceLock<bool>, var: &str, value: &str) -> bool {
    *cell.get_or_init(|| std::env::var(var).is_ok_and(|v| v == value))
}

/// The value of the environment variable `var` if it is one of `choices`, else `default`, read
/// once per process into `cell`.
fn env_choice(
    cell: &OnceLock<&'static str>,
    var: &str,
    choices: &[&'static str],
    default: &'static str,
) -> &'static str {
    cell.get_or_init(|| {
        std::env::var(var).ok().and_then(|v| choices.iter().copied().find(|c| *c == v)).unwrap_or(default)
    })
}

/// Scaled, masked multi-head attention of a fused q/k/v projection, on a GPU (inference): the
/// scores in the activations' dtype, softmax in place with f32 arithmetic; bf16 with heads of
/// 32 or 64 runs [`FlashAttention2`] given the batch's [`KeyLengths`] (the encoder makes them
/// where it applies: by default). (Keeping bf16 scores in f32 was measured: 15% slower, no
/// closer to f32; BENCHMARKS.md "GPU".)
///
/// # Shapes
/// `qkv: [batch · seq, 3 · hidden]`, `bias: [3 · hidden]` (`None`: already in `qkv`, which
/// FlashAttention-2 takes, and only so), `key_bias: [batch, seq]` (f32) → `[batch, seq, hidden]`
pub fn fused_attention(
    qkv: &Tensor,
    bias: Option<&Tensor>,
    key_bias: &Tensor,
    lengths: Option<&KeyLengths>,
    (batch, seq, heads): (usize, usize, usize),
    scale: f32,
) -> Result<Tensor> {
    use crate::profile::timed;
    let device = qkv.device();
    let hidden = qkv.dim(1)? / 3;
    // The encoder makes lengths only where FlashAttention-2 applies (bf16, heads of 32 or 64).
    if let Some(lengths) = lengths {
        if bias.is_some() {
            candle_core::bail!("fused_attention: FlashAttention-2 takes the q/k/v product with its bias already in it")
        }
        let context =
            timed("attention (FlashAttention-2)", device, || FlashAttention2::forward(qkv, lengths, heads, scale))?;
        return context.reshape((batch, seq, hidden));
    }
    let Some(bias) = bias else {
        candle_core::bail!("fused_attention: a q/k/v product with its bias is for FlashAttention-2 only")
    };
    let split = SplitQkv { batch, seq, heads, head_size: hidden / heads };
    let qkv = timed("attention: bias + split heads", device, || qkv.apply_op2_no_bwd(bias, &split))?;
    let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
    let scores = timed("attention: q·kᵀ", device, || q.matmul(&k.t()?))?;
    timed("attention: softmax", device, || scores.inplace_op2(key_bias, &AttentionSoftmax { scale }))?;
    let context = timed("attention: p·v", device, || scores.matmul(&v))?;
    timed("attention: merge heads", device, || context.apply_op1_no_bwd(&MergeHeads))
}
