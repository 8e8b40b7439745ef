//! Self-attention in training on the GPU route as one op over a fused q/k/v projection, which
//! keeps nothing but its inputs between the forward and backward passes.
//!
//! The composition it replaces (`SelfAttention::attend_cuda_train` over three projections) kept,
//! per layer and sequence of 512 tokens, the three biased projections, their three copies split
//! into heads, the `[heads, seq, seq]` scores and probabilities and two layouts of the context:
//! about 20 MB in bf16 for roberta-base's 12 heads, of which the op keeps the projection alone
//! (2.25 MB). Its backward pass recomputes the split, the scores and the probabilities (one
//! more `q·kᵀ` product and softmax per layer, as FlashAttention recomputes them) and regenerates
//! the dropout masks from their seed. Built from ops that each have a tested kernel on both
//! sides ([`SplitQkv`], [`AttentionProbsTrain`] and its gradient, [`MergeHeads`], the backend's
//! matrix product): the composition itself is tested on the CPU (`reference`'s f32 kernels)
//! against the composed attention, values and gradients, and on a GPU by the CUDA training tests.

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

use super::route_kernels::RouteKernels;
use super::training::{AttentionProbsTrain, AttentionProbsTrainGrad};
use super::{MergeHeads, SplitQkv};

/// `(qkv [batch · seq, 3 · hidden], bias [3 · hidden], key_bias [batch, seq]) → [batch, seq,
/// hidden]`: the bias added as the heads are split, `q·kᵀ`, scale + key mask + softmax +
/// dropout, `p·v`, the heads merged. `qkv` in f32 or bf16 (the products' dtype, contiguous),
/// `bias` and `key_bias` f32 (`key_bias`: 0 for a real key, a large negative number for
/// padding; no gradient). Gradients for `qkv` and `bias`.
#[derive(Debug, Clone, Copy)]
pub struct AttentionTrain {
    /// Attention heads.
    pub heads: usize,
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
    /// (seed, threshold, keep factor) of the probabilities' `SeededDropout`; `(0, 0, 1.0)` for none.
    pub dropout: (u64, u32, f32),
}

/// Sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    seq: usize,
    heads: usize,
    head_size: usize,
}

impl Dims {
    /// The sizes of `qkv: [batch · seq, 3 · hidden]` and `key_bias: [batch, seq]`, checked.
    fn of(heads: usize, qkv: &Shape, key_bias: &Shape) -> Result<Self> {
        let (rows, width) = qkv.dims2()?;
        let (batch, seq) = key_bias.dims2()?;
        let hidden = width / 3;
        if rows != batch * seq || width != 3 * hidden || heads == 0 || !hidden.is_multiple_of(heads) {
            candle_core::bail!("attention-train: qkv {qkv:?} and key bias {key_bias:?} do not fit {heads} heads");
        }
        Ok(Self { batch, seq, heads, head_size: hidden / heads })
    }

    /// One of q, k, v: `[batch, heads, seq, head_size]`.
    fn heads_shape(&self) -> Shape {
        Shape::from((self.batch, self.heads, self.seq, self.head_size))
    }

    fn split(&self) -> SplitQkv {
        SplitQkv { batch: self.batch, seq: self.seq, heads: self.heads, head_size: self.head_size }
    }
}

impl AttentionTrain {
    fn probs_op(&self) -> AttentionProbsTrain {
        AttentionProbsTrain { scale: self.scale, dropout: self.dropout }
    }

    /// The forward pass on one backend's storages.
    ///
    /// # Shapes
    /// `qkv: [batch · seq, 3 · hidden]`, `bias: [3 · hidden]`, `key_bias: [batch, seq]` →
    /// `[batch, seq, hidden]`
    fn forward<S: RouteKernels>(
        &self,
        (qkv, qkv_l): (&S, &Layout),
        (bias, bias_l): (&S, &Layout),
        (key_bias, key_bias_l): (&S, &Layout),
    ) -> Result<(S, Shape)> {
        let d = Dims::of(self.heads, qkv_l.shape(), key_bias_l.shape())?;
        let split = qkv.split_qkv(qkv_l, bias, bias_l, (d.batch, d.seq, d.heads, d.head_size))?;
        let part = d.heads_shape().elem_count();
        let q = Layout::contiguous(d.heads_shape());
        let k_t = Layout::contiguous_with_offset(d.heads_shape(), part).transpose(2, 3)?;
        let v = Layout::contiguous_with_offset(d.heads_shape(), 2 * part);
        let items = d.batch * d.heads;
        let scores = split.matmul(&split, (items, d.seq, d.seq, d.head_size), &q, &k_t)?;
        let scores_l = Layout::contiguous((d.batch, d.heads, d.seq, d.seq));
        let probs = scores.probs(&scores_l, key_bias, key_bias_l, self.probs_op())?;
        drop(scores);
        let context = probs.matmul(&split, (items, d.seq, d.head_size, d.seq), &scores_l, &v)?;
        let out = context.merge_heads(&q, d.heads)?;
        Ok((out, Shape::from((d.batch, d.seq, d.heads * d.head_size))))
    }
}

impl CustomOp3 for AttentionTrain {
    fn name(&self) -> &'static str {
        "attention-train"
    }

    /// The CPU side runs `reference`'s f32 kernels: for tests (the CPU route trains with
    /// `layers::fused::FusedAttention`).
    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        qkv_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
        key_bias: &CpuStorage,
        key_bias_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.forward((qkv, qkv_l), (bias, bias_l), (key_bias, key_bias_l))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        qkv: &candle_core::CudaStorage,
        qkv_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
        key_bias: &candle_core::CudaStorage,
        key_bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward((qkv, qkv_l), (bias, bias_l), (key_bias, key_bias_l))
    }

    /// Recomputes the split, the scores and the probabilities from the inputs, then the
    /// products' gradients.
    ///
    /// # Shapes
    /// `grad: [batch, seq, hidden]` → `qkv: [batch · seq, 3 · hidden]`, `bias: [3 · hidden]`
    fn bwd(
        &self,
        qkv: &Tensor,
        bias: &Tensor,
        key_bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (qkv, bias, key_bias) = (qkv.detach(), bias.detach(), key_bias.detach());
        let d = Dims::of(self.heads, qkv.shape(), key_bias.shape())?;
        let split = qkv.apply_op2_no_bwd(&bias, &d.split())?;
        let (q, k, v) = (split.get(0)?, split.get(1)?, split.get(2)?);
        let scores = q.matmul(&k.t()?)?;
        let probs = scores.apply_op2_no_bwd(&key_bias, &self.probs_op())?;
        let d_context = grad
            .to_dtype(qkv.dtype())?
            .reshape((d.batch, d.seq, d.heads, d.head_size))?
            .transpose(1, 2)?
            .contiguous()?;
        let d_v = probs.t()?.matmul(&d_context)?;
        drop(probs);
        let d_probs = d_context.matmul(&v.t()?)?;
        let d_scores = scores.apply_op3_no_bwd(&key_bias, &d_probs, &AttentionProbsTrainGrad(self.probs_op()))?;
        drop((scores, d_probs));
        let d_q = d_scores.matmul(&k)?;
        let d_k = d_scores.t()?.matmul(&q)?;
        let merged = [d_q, d_k, d_v].map(|g| g.apply_op1_no_bwd(&MergeHeads));
        let [d_q, d_k, d_v] = merged;
        let d_qkv = Tensor::cat(&[d_q?, d_k?, d_v?], 2)?.reshape(qkv.shape())?;
        let d_bias = super::training::column_sum(&d_qkv)?;
        Ok((Some(d_qkv), Some(d_bias), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{DType, Device, Var};

    /// The pieces `reference` implements, composed of candle ops (f32, CPU): the op must give
    /// these values and gradients.
    fn composed(op: &AttentionTrain, qkv: &Tensor, bias: &Tensor, key_bias: &Tensor) -> Tensor {
        let d = Dims::of(op.heads, qkv.shape(), key_bias.shape()).unwrap();
        let biased = qkv.broadcast_add(bias).unwrap();
        let hidden = d.heads * d.head_size;
        let heads = |i: usize| {
            biased
                .narrow(1, i * hidden, hidden)
                .unwrap()
                .reshape((d.batch, d.seq, d.heads, d.head_size))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (heads(0), heads(1), heads(2));
        let scores = (q.matmul(&k.t().unwrap()).unwrap() * op.scale as f64).unwrap();
        let scores = scores.broadcast_add(&key_bias.reshape((d.batch, 1, 1, d.seq)).unwrap()).unwrap();
        // candle-nn's softmax_last_dim has no backward pass; the generic softmax is composed.
        let mut probs = candle_nn::ops::softmax(&scores, candle_core::D::Minus1).unwrap();
        let (seed, threshold, keep) = op.dropout;
        if threshold > 0 {
            let mut factors = vec![0f32; probs.elem_count()];
            crate::layers::dropout::mask_factors(seed, threshold, keep, 0, &mut factors);
            probs = probs.mul(&Tensor::from_vec(factors, probs.shape(), probs.device()).unwrap()).unwrap();
        }
        probs.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((d.batch, d.seq, hidden)).unwrap()
    }

    /// Values and gradients (of `qkv` and the bias) equal the composition's, with dropout and
    /// a padded key, on uneven sizes.
    #[test]
    fn the_op_is_the_composed_attention_values_and_gradients() {
        let normals = Normals::new(210);
        let device = Device::Cpu;
        let (batch, seq, heads, head_size) = (2, 7, 3, 4);
        let hidden = heads * head_size;
        let qkv = Var::from_tensor(&normals.tensor(0f32, 1.0, (batch * seq, 3 * hidden), &device).unwrap()).unwrap();
        let bias = Var::from_tensor(&normals.tensor(0f32, 0.5, 3 * hidden, &device).unwrap()).unwrap();
        let mut mask = vec![0f32; batch * seq];
        mask[seq - 2..seq].iter_mut().for_each(|m| *m = -1e30);
        let key_bias = Tensor::from_vec(mask, (batch, seq), &device).unwrap();
        let w = normals.tensor(0f32, 1.0, (batch, seq, hidden), &device).unwrap();
        for dropout in [(0, 0, 1.0), (99, (0.3 * (1u64 << 24) as f64) as u32, 1.0 / 0.7)] {
            let op = AttentionTrain { heads, scale: 0.5, dropout };
            let run = |fused: bool| {
                let y = if fused {
                    qkv.as_tensor().apply_op3(bias.as_tensor(), &key_bias, op).unwrap()
                } else {
                    composed(&op, qkv.as_tensor(), bias.as_tensor(), &key_bias)
                };
                let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
                [y, grads.get(qkv.as_tensor()).unwrap().clone(), grads.get(bias.as_tensor()).unwrap().clone()]
            };
            let (fused, composed) = (run(true), run(false));
            for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
                assert_eq!(a.dims(), b.dims(), "tensor {i}");
                let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
                let diff = diff.to_scalar::<f32>().unwrap();
                assert!(diff < 1e-5, "dropout {dropout:?}, tensor {i} (output, d qkv, d bias): max abs diff {diff}");
            }
        }
    }

    /// Sizes that do not fit are an error naming the op, not a panic.
    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let device = Device::Cpu;
        let qkv = Tensor::zeros((6, 36), DType::F32, &device).unwrap();
        let bias = Tensor::zeros(36, DType::F32, &device).unwrap();
        let key_bias = Tensor::zeros((2, 4), DType::F32, &device).unwrap();
        let op = AttentionTrain { heads: 3, scale: 1.0, dropout: (0, 0, 1.0) };
        let err = qkv.apply_op3(&bias, &key_bias, op).unwrap_err().to_string();
        assert!(err.contains("attention-train"), "{err}");
        let op = AttentionTrain { heads: 5, ..op };
        let key_bias = Tensor::zeros((2, 3), DType::F32, &device).unwrap();
        assert!(qkv.apply_op3(&bias, &key_bias, op).is_err(), "12 columns per part do not split into 5 heads");
    }
}
