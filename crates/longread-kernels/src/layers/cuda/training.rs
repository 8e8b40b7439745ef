//! The training path's CUDA ops (`cuda` feature), each with its backward pass where it has
//! one: dropout masks made on the device ([`DropoutMask`]), attention probabilities
//! ([`AttentionProbsTrain`]), LayerNorm ([`LayerNormTrain`]), a dense layer's bias and GELU
//! ([`BiasActivationTrain`]) and the AdamW update ([`AdamWStep`]). Kernels in `kernels.cu`.

#[cfg(feature = "cuda")]
use super::launch;
use super::{cuda_only, reference};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, InplaceOp3, Layout, Result, Shape, Tensor};

/// A dropout mask on the GPU: the factors of [`crate::layers::dropout::SeededDropout`] (the
/// CPU's mask for the same seed), in `xs`' shape and dtype, made on the device instead of
/// uploaded. `xs` only gives the shape, dtype and device.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct DropoutMask {
    /// Seed of the mask (the same as the CPU mask for it).
    pub seed: u64,
    /// An element is dropped when its hash is below this.
    pub threshold: u32,
    /// Factor applied to the elements kept (1 / keep probability).
    pub scale: f32,
}

impl CustomOp1 for DropoutMask {
    fn name(&self) -> &'static str {
        "cuda-dropout-mask"
    }

    cuda_only!(CustomOp1);

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, xs: &candle_core::CudaStorage, l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let n = l.shape().elem_count();
        let out = launch::dropout_mask(&xs.device, xs.dtype(), n, (self.seed, self.threshold, self.scale))?;
        Ok((out, l.shape().clone()))
    }
}

/// One AdamW update of an f32 parameter on the GPU, in place, with torch's formula (the same
/// coefficients and order of operations as the CPU's loop in longread-train's `optim::adamw`):
/// `param.inplace_op3(&grad, &moments, &step)`, `moments: [2, n]` (first, second moment),
/// which the kernel updates too (the optimizer's own buffer: nothing else holds it).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct AdamWStep {
    /// The gradient's factor (clipping).
    pub grad_scale: f32,
    /// `1 - lr · weight_decay`.
    pub decay: f32,
    /// `1 - β1`.
    pub one_minus_beta1: f32,
    /// β2.
    pub beta2: f32,
    /// `1 - β2`.
    pub one_minus_beta2: f32,
    /// `sqrt(1 - β2^step)`.
    pub bias2_sqrt: f32,
    /// ε.
    pub eps: f32,
    /// `lr / (1 - β1^step)`.
    pub step_size: f32,
}

impl AdamWStep {
    /// The constants in the order the kernels take them (`adamw_step_f32`'s arguments after
    /// `n`, `adamw_tiles_f32`'s coefficient rows).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn constants(&self) -> [f32; 8] {
        [
            self.grad_scale,
            self.decay,
            self.one_minus_beta1,
            self.beta2,
            self.one_minus_beta2,
            self.bias2_sqrt,
            self.eps,
            self.step_size,
        ]
    }
}

impl InplaceOp3 for AdamWStep {
    fn name(&self) -> &'static str {
        "cuda-adamw-step"
    }

    fn cpu_fwd(
        &self,
        _: &mut CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        candle_core::bail!("{} runs on CUDA only (the CPU's AdamW is longread-train's)", InplaceOp3::name(self))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        p: &mut candle_core::CudaStorage,
        p_l: &Layout,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
        moments: &candle_core::CudaStorage,
        moments_l: &Layout,
    ) -> Result<()> {
        launch::adamw_step(self, (p, p_l), (grad, grad_l), (moments, moments_l))
    }
}

/// Attention probabilities in training on a GPU, with their backward pass:
/// `dropout(softmax(scores · scale + key_bias))` as one kernel, where candle's composition
/// keeps five `[batch, heads, seq, seq]` intermediates for the backward pass. The backward
/// recomputes the softmax from the scores (kept as the op's input) and the dropout factors from
/// their seed (the CPU's masks), so the probabilities are not kept.
/// `scores.apply_op2(&key_bias, op)`: `scores: [batch, heads, seq, keys]` (f32 or bf16),
/// `key_bias: [batch, keys]` (f32; no gradient).
#[derive(Debug, Clone, Copy)]
pub struct AttentionProbsTrain {
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
    /// (seed, threshold, keep factor) of `SeededDropout`; `(0, 0, 1.0)` for none.
    pub dropout: (u64, u32, f32),
}

impl CustomOp2 for AttentionProbsTrain {
    fn name(&self) -> &'static str {
        "cuda-attention-probs-train"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for tests of compositions of it.
    fn cpu_fwd(
        &self,
        scores: &CpuStorage,
        scores_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let out = reference::attention_probs_train(self.scale, self.dropout, (scores, scores_l), (bias, bias_l), None)?;
        Ok((out, scores_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        scores: &candle_core::CudaStorage,
        scores_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let out = launch::attention_probs_train(self.scale, self.dropout, (scores, scores_l), (bias, bias_l), None)?;
        Ok((out, scores_l.shape().clone()))
    }

    fn bwd(
        &self,
        scores: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad_op = AttentionProbsTrainGrad(*self);
        let d_scores = scores.contiguous()?.apply_op3_no_bwd(bias, &grad.contiguous()?, &grad_op)?;
        Ok((Some(d_scores), None))
    }
}

/// The backward pass of [`AttentionProbsTrain`]: `(scores, key_bias, grad) → grad of scores`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionProbsTrainGrad(pub(crate) AttentionProbsTrain);

impl CustomOp3 for AttentionProbsTrainGrad {
    fn name(&self) -> &'static str {
        "cuda-attention-probs-train-grad"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for tests of compositions of it.
    fn cpu_fwd(
        &self,
        scores: &CpuStorage,
        scores_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
        grad: &CpuStorage,
        grad_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let AttentionProbsTrain { scale, dropout } = self.0;
        let out =
            reference::attention_probs_train(scale, dropout, (scores, scores_l), (bias, bias_l), Some((grad, grad_l)))?;
        Ok((out, scores_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        scores: &candle_core::CudaStorage,
        scores_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let AttentionProbsTrain { scale, dropout } = self.0;
        let out =
            launch::attention_probs_train(scale, dropout, (scores, scores_l), (bias, bias_l), Some((grad, grad_l)))?;
        Ok((out, scores_l.shape().clone()))
    }
}

/// LayerNorm in training on a GPU (f32), with its backward pass: one kernel each way where
/// candle's composition keeps six `[rows, hidden]` intermediates. The backward recomputes the
/// statistics from the input (kept as the op's argument).
/// `x.apply_op3(&gamma, &beta, op)`: `x: [..., hidden]`, `gamma, beta: [hidden]`, f32, contiguous.
#[derive(Debug, Clone, Copy)]
pub struct LayerNormTrain {
    /// LayerNorm epsilon, inside the square root.
    pub eps: f32,
}

impl CustomOp3 for LayerNormTrain {
    fn name(&self) -> &'static str {
        "cuda-layer-norm-train"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for the GPU route emulated in tests.
    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        gamma: &CpuStorage,
        gamma_l: &Layout,
        beta: &CpuStorage,
        beta_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = reference::layer_norm_train(self.eps, (x, x_l), (gamma, gamma_l), (beta, beta_l))?;
        Ok((y, x_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        gamma: &candle_core::CudaStorage,
        gamma_l: &Layout,
        beta: &candle_core::CudaStorage,
        beta_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let y = launch::layer_norm_train(self.eps, (x, x_l), (gamma, gamma_l), (beta, beta_l), false)?;
        Ok((y, x_l.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let both = x.apply_op3_no_bwd(gamma, &grad, &LayerNormTrainGrad(*self))?;
        let cols = gamma.dim(0)?;
        let rows = x.elem_count() / cols.max(1);
        let dx = both.get(0)?.reshape(x.shape())?;
        let xhat = both.get(1)?;
        let dy = grad.reshape((rows, cols))?;
        let d_gamma = column_sum(&dy.mul(&xhat)?)?;
        let d_beta = column_sum(&dy)?;
        Ok((Some(dx), Some(d_gamma), Some(d_beta)))
    }
}

/// The backward pass of [`LayerNormTrain`]: `(x, gamma, grad) → [2, rows, hidden]` (dx, x̂).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerNormTrainGrad(pub(crate) LayerNormTrain);

impl CustomOp3 for LayerNormTrainGrad {
    fn name(&self) -> &'static str {
        "cuda-layer-norm-train-grad"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for tests of compositions of it.
    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        gamma: &CpuStorage,
        gamma_l: &Layout,
        grad: &CpuStorage,
        grad_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let out = reference::layer_norm_train_grad(self.0.eps, (x, x_l), (gamma, gamma_l), (grad, grad_l))?;
        let cols = gamma_l.shape().elem_count();
        Ok((out, Shape::from((2, x_l.shape().elem_count() / cols.max(1), cols))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        gamma: &candle_core::CudaStorage,
        gamma_l: &Layout,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let out = launch::layer_norm_train(self.0.eps, (x, x_l), (gamma, gamma_l), (grad, grad_l), true)?;
        let (rows, cols) =
            (x_l.shape().elem_count() / gamma_l.shape().elem_count().max(1), gamma_l.shape().elem_count());
        Ok((out, Shape::from((2, rows, cols))))
    }
}

/// A dense layer's bias (and exact GELU) in training on a GPU, with its backward pass:
/// `product.apply_op2(&bias, op)`, `product: [rows, out]` (f32 or bf16, contiguous), `bias:
/// [out]` (f32). The bias's gradient is summed over the rows in f32 (candle sums a bf16
/// broadcast's gradient in bf16, slowly); GELU's derivative is computed from the product,
/// kept as the op's input.
#[derive(Debug, Clone, Copy)]
pub struct BiasActivationTrain {
    /// Apply GELU (erf) after adding the bias.
    pub gelu: bool,
}

impl CustomOp2 for BiasActivationTrain {
    fn name(&self) -> &'static str {
        "cuda-bias-activation-train"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for the GPU route emulated in tests.
    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout, bias: &CpuStorage, bias_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let out = reference::bias_activation_train(self.gelu, (x, x_l), (bias, bias_l), None)?;
        Ok((out, x_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let out = launch::bias_activation_train(self.gelu, (x, x_l), (bias, bias_l), None)?;
        Ok((out, x_l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, bias: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let (dz, d_bias) = if self.gelu {
            gelu_grad_and_bias_sum(x, bias, &grad)?
        } else {
            let d_bias = column_sum(&grad)?;
            (grad, d_bias)
        };
        Ok((Some(dz), Some(d_bias)))
    }
}

/// GELU's backward pass after a bias, and the bias's gradient: `(dz, d bias)`, `dz = grad ·
/// gelu'(x + bias)`. On a GPU one kernel over the rows (`launch::bias_gelu_train_grad_sum`,
/// unless [`super::gelu_bias_grad_fused`] says apart); elsewhere, and where its vectors do not
/// fit, [`BiasGeluTrainGrad`] then [`column_sum`].
///
/// # Shapes
/// `x, grad: [..., cols]` (one dtype), `bias: [cols]` (f32) → `(x's shape, [cols])`
pub(crate) fn gelu_grad_and_bias_sum(x: &Tensor, bias: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    if let Some(both) = gelu_grad_and_bias_sum_in_one(x, bias, grad)? {
        return Ok(both);
    }
    let dz = x.apply_op3_no_bwd(bias, grad, &BiasGeluTrainGrad)?;
    let d_bias = column_sum(&dz.reshape(((), bias.elem_count()))?)?;
    Ok((dz, d_bias))
}

/// [`gelu_grad_and_bias_sum`] as one kernel on a GPU; `None` off the GPU, when switched off, or
/// where the kernel does not fit.
#[cfg(feature = "cuda")]
fn gelu_grad_and_bias_sum_in_one(x: &Tensor, bias: &Tensor, grad: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    use candle_core::Storage;
    if !x.device().is_cuda() || !super::gelu_bias_grad_fused() || grad.dtype() != x.dtype() {
        return Ok(None);
    }
    let (x, bias, grad) = (x.contiguous()?, bias.contiguous()?, grad.contiguous()?);
    let both = {
        let (x_s, x_l) = x.storage_and_layout();
        let (b_s, b_l) = bias.storage_and_layout();
        let (g_s, g_l) = grad.storage_and_layout();
        let (Storage::Cuda(x_s), Storage::Cuda(b_s), Storage::Cuda(g_s)) = (&*x_s, &*b_s, &*g_s) else {
            return Ok(None);
        };
        launch::bias_gelu_train_grad_sum((x_s, x_l), (b_s, b_l), (g_s, g_l))?
    };
    Ok(both.map(|(dz, d_bias)| (super::untracked(dz, x.shape()), super::untracked(d_bias, bias.shape()))))
}

/// GELU's backward pass for [`BiasActivationTrain`]: `(product, bias, grad) → grad of product`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BiasGeluTrainGrad;

impl CustomOp3 for BiasGeluTrainGrad {
    fn name(&self) -> &'static str {
        "cuda-bias-gelu-train-grad"
    }

    /// The same arithmetic on the CPU (f32; `reference`), for the GPU route emulated in tests.
    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
        grad: &CpuStorage,
        grad_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let out = reference::bias_activation_train(true, (x, x_l), (bias, bias_l), Some((grad, grad_l)))?;
        Ok((out, x_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let out = launch::bias_activation_train(true, (x, x_l), (bias, bias_l), Some((grad, grad_l)))?;
        Ok((out, x_l.shape().clone()))
    }
}

/// Column sums into f32: `x [rows, cols]` (f32 or bf16) → `[cols]`, the gradients of biases and
/// of LayerNorm's γ and β in the GPU route's backward passes. On CUDA two coalesced kernels
/// (splits of the rows, then the splits in order: deterministic), where candle's sum over dim 0
/// reads each column with its own block, `cols` elements apart; on the CPU a loop (f32
/// accumulation in row order), for the route emulated in tests.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSum;

impl CustomOp1 for ColumnSum {
    fn name(&self) -> &'static str {
        "column-sum"
    }

    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (_, cols) = x_l.shape().dims2()?;
        let Some((start, end)) = x_l.contiguous_offsets() else {
            candle_core::bail!("column-sum: the matrix must be contiguous");
        };
        let mut sums = vec![0f32; cols];
        let mut add = |row: &mut dyn Iterator<Item = f32>| sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
        match x {
            CpuStorage::F32(x) => x[start..end].chunks(cols.max(1)).for_each(|r| add(&mut r.iter().copied())),
            CpuStorage::BF16(x) => {
                x[start..end].chunks(cols.max(1)).for_each(|r| add(&mut r.iter().map(|v| v.to_f32())))
            }
            _ => candle_core::bail!("column-sum: f32 or bf16 only"),
        }
        Ok((CpuStorage::F32(sums), Shape::from(cols)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, x: &candle_core::CudaStorage, x_l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        let cols = x_l.shape().dims2()?.1;
        Ok((launch::column_sum((x, x_l))?, Shape::from(cols)))
    }
}

/// [`ColumnSum`] of `x` (made contiguous), without a gradient.
///
/// # Shapes
/// `x: [rows, cols]` → `[cols]` (f32)
pub fn column_sum(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&ColumnSum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{DType, Device};

    /// Column sums equal candle's sum over rows, in f32 and from bf16 (accumulated in f32), for
    /// a strided input (made contiguous first); a 3-D input is an error naming the op.
    #[test]
    fn column_sums_are_sums_over_rows() {
        let normals = Normals::new(457);
        let x = normals.tensor(0f32, 1.0, (37, 11), &Device::Cpu).unwrap();
        let reference = x.sum(0).unwrap();
        let max = |t: Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(max((column_sum(&x).unwrap() - &reference).unwrap()) < 1e-5);
        let halves = x.to_dtype(DType::BF16).unwrap();
        let from_bf16 = column_sum(&halves).unwrap();
        assert_eq!(from_bf16.dtype(), DType::F32);
        assert!(max((from_bf16 - halves.to_dtype(DType::F32).unwrap().sum(0).unwrap()).unwrap()) < 1e-5);
        let strided = x.t().unwrap();
        assert!(max((column_sum(&strided).unwrap() - x.sum(1).unwrap()).unwrap()) < 1e-5);
        let err = Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu).unwrap().apply_op1_no_bwd(&ColumnSum).unwrap_err();
        assert!(err.to_string().contains("rank") || err.to_string().contains("dims"), "{err}");
    }
}
