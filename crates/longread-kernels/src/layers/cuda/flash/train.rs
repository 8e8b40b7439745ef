//! FlashAttention-2 in training: the forward kernel with dropout, and its backward kernel.
//!
//! The op adds the q/k/v bias itself, so that between the passes it keeps only its input (the
//! product, as `AttentionTrain` does) and two small things the forward kernel writes: each
//! row's log-sum-exp per head (`heads × rows` f32) and the dropout's Philox state. The backward
//! pass adds the bias again (one elementwise pass) and the backward kernel recomputes the
//! probabilities block by block, as the forward made them, with the same dropout.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

use super::inference::cpu_attention;
use super::reference::Product;
use super::{Backend, KeyLengths};
#[cfg(feature = "cuda")]
use crate::layers::cuda::launch as cuda_launch;
use crate::layers::cuda::reference as cuda_reference;
use crate::layers::cuda::training::{column_sum, BiasActivationTrain};

/// What the CUDA forward pass leaves for the backward pass (nothing on the CPU).
#[cfg(feature = "cuda")]
type SavedSlot = std::sync::Arc<std::sync::Mutex<Option<super::launch::Saved>>>;

/// Self-attention of a training step over a fused q/k/v product and its bias, each sequence's
/// queries over its real keys: `(qkv [batch · seq, 3 · hidden], bias [3 · hidden] f32)` →
/// `[batch · seq, hidden]`, with gradients for both. On CUDA bf16 with heads of 32 or 64
/// (dropout drawn by the kernel's Philox generator from `seed`); on the CPU f32 without dropout
/// (`reference`, for tests).
#[derive(Clone)]
pub struct FlashAttentionTrain {
    heads: usize,
    scale: f32,
    lengths: KeyLengths,
    dropout: Option<(f32, u64)>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    backend: Backend,
    #[cfg(feature = "cuda")]
    saved: SavedSlot,
}

impl FlashAttentionTrain {
    /// The op for `heads` heads scaled by `scale` over `lengths`, with dropout
    /// `(probability, seed)` of the attention probabilities or none.
    pub fn new(heads: usize, scale: f32, lengths: KeyLengths, dropout: Option<(f32, u64)>) -> Self {
        Self {
            heads,
            scale,
            lengths,
            dropout: dropout.filter(|&(p, _)| p > 0.0),
            backend: Backend::chosen(true),
            #[cfg(feature = "cuda")]
            saved: Default::default(),
        }
    }

    /// # Shapes
    /// `qkv: [batch · seq, 3 · hidden]` (contiguous), `bias: [3 · hidden]` (f32) →
    /// `[batch · seq, hidden]`
    pub fn forward(self, qkv: &Tensor, bias: &Tensor) -> Result<Tensor> {
        qkv.apply_op2(bias, self)
    }

    /// [`Self::forward`] of a product that has its bias already (`LinearBiasTrain`, the bias in
    /// the product's epilogue): no bias pass in either direction, the gradient for `qkv` only.
    ///
    /// # Shapes
    /// `qkv: [batch · seq, 3 · hidden]` (contiguous) → `[batch · seq, hidden]`
    pub fn forward_biased(self, qkv: &Tensor) -> Result<Tensor> {
        qkv.apply_op1(Biased(self))
    }

    /// The attention of a biased product by the CPU loops (no dropout there); `op` names the
    /// caller in errors.
    fn attend_cpu(&self, op: &str, (x, x_l): (&CpuStorage, &Layout)) -> Result<(CpuStorage, Shape)> {
        if self.dropout.is_some() {
            candle_core::bail!("{op}: dropout inside the attention runs on CUDA only");
        }
        let (out, shape) = cpu_attention(op, &self.lengths, (self.heads, self.scale), (x, x_l))?;
        Ok((CpuStorage::F32(out), shape))
    }

    /// The attention of a biased product by the backend's forward kernel, keeping what the
    /// backward pass needs (`saved`).
    #[cfg(feature = "cuda")]
    fn attend_cuda(
        &self,
        op: &str,
        (x, x_l): (&candle_core::CudaStorage, &Layout),
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (rows, hidden, _) = self.lengths.dims(op, self.heads, x_l)?;
        let (out, saved) = super::launch::forward(
            self.backend,
            (x, x_l),
            &self.lengths,
            (self.heads, self.scale),
            self.dropout,
            true,
        )?;
        *self.saved.lock().map_err(|_| candle_core::Error::Msg("flash-attention-2: poisoned state".into()))? =
            Some(saved);
        Ok((out, Shape::from((rows, hidden))))
    }

    /// The gradient of the biased product `biased` from the output `res` and its gradient.
    ///
    /// # Shapes
    /// `biased: [rows, 3 · hidden]`, `res, grad: [rows, hidden]` → `[rows, 3 · hidden]`
    fn product_grad(&self, biased: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Tensor> {
        biased.apply_op3_no_bwd(res, &grad.contiguous()?, &FlashAttentionTrainGrad(self.clone()))
    }
}

/// [`FlashAttentionTrain`] over a product with its bias in it ([`FlashAttentionTrain::forward_biased`]).
struct Biased(FlashAttentionTrain);

impl CustomOp1 for Biased {
    fn name(&self) -> &'static str {
        "flash-attention-2-train-biased"
    }

    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.0.attend_cpu(self.name(), (x, x_l))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, x: &candle_core::CudaStorage, x_l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        self.0.attend_cuda(self.name(), (x, x_l))
    }

    fn bwd(&self, qkv: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        self.0.product_grad(qkv, res, grad).map(Some)
    }
}

impl CustomOp2 for FlashAttentionTrain {
    fn name(&self) -> &'static str {
        "flash-attention-2-train"
    }

    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout, bias: &CpuStorage, bias_l: &Layout) -> Result<(CpuStorage, Shape)> {
        if self.dropout.is_some() {
            candle_core::bail!("{}: dropout inside the attention runs on CUDA only", self.name());
        }
        let biased = cuda_reference::bias_activation_train(false, (x, x_l), (bias, bias_l), None)?;
        self.attend_cpu(self.name(), (&biased, &Layout::contiguous(x_l.shape())))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.lengths.dims(self.name(), self.heads, x_l)?;
        // The biased product lives for the forward kernel only.
        let biased = cuda_launch::bias_activation_train(false, (x, x_l), (bias, bias_l), None)?;
        self.attend_cuda(self.name(), (&biased, &Layout::contiguous(x_l.shape())))
    }

    fn bwd(
        &self,
        qkv: &Tensor,
        bias: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let biased = qkv.apply_op2_no_bwd(bias, &BiasActivationTrain { gelu: false })?;
        let d_qkv = self.product_grad(&biased, res, grad)?;
        drop(biased);
        let d_bias = column_sum(&d_qkv)?;
        Ok((Some(d_qkv), Some(d_bias)))
    }
}

/// The backward pass of [`FlashAttentionTrain`]: `(qkv, out, dout) → d qkv`.
struct FlashAttentionTrainGrad(FlashAttentionTrain);

impl CustomOp3 for FlashAttentionTrainGrad {
    fn name(&self) -> &'static str {
        "flash-attention-2-train-grad"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        out: &CpuStorage,
        out_l: &Layout,
        dout: &CpuStorage,
        dout_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let op = &self.0;
        let (rows, hidden, d) = op.lengths.dims(self.name(), op.heads, x_l)?;
        let (CpuStorage::F32(x), CpuStorage::F32(out), CpuStorage::F32(dout)) = (x, out, dout) else {
            candle_core::bail!("{} on the CPU: f32 only", self.name());
        };
        let (Some((o0, o1)), Some((g0, g1))) = (out_l.contiguous_offsets(), dout_l.contiguous_offsets()) else {
            candle_core::bail!("{}: the output and its gradient must be contiguous", self.name());
        };
        let (starts, used) = op.lengths.host()?;
        let product = Product {
            x: &x[x_l.start_offset()..],
            row_stride: x_l.stride()[0],
            starts: &starts,
            used: &used,
            heads: op.heads,
            d,
            scale: op.scale,
        };
        let grad = product.backward(&out[o0..o1], &dout[g0..g1]);
        Ok((CpuStorage::F32(grad), Shape::from((rows, 3 * hidden))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        out: &candle_core::CudaStorage,
        out_l: &Layout,
        dout: &candle_core::CudaStorage,
        dout_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let op = &self.0;
        let (rows, hidden, _) = op.lengths.dims(self.name(), op.heads, x_l)?;
        let mut saved =
            op.saved.lock().map_err(|_| candle_core::Error::Msg("flash-attention-2: poisoned state".into()))?;
        let Some(saved) = saved.as_mut() else {
            candle_core::bail!("{}: the forward pass ran elsewhere than on CUDA", self.name());
        };
        let p_drop = op.dropout.map_or(0.0, |(p, _)| p);
        let grad = super::launch::backward(
            (x, x_l),
            (out, out_l),
            (dout, dout_l),
            &op.lengths,
            (op.heads, op.scale),
            p_drop,
            saved,
        )?;
        Ok((grad, Shape::from((rows, 3 * hidden))))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{composed, mask_of};
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    /// The op's values and its gradient (the CPU loops, the GPU kernels' reference) equal
    /// candle's masked-attention composition's, over right-padded sequences of uneven lengths;
    /// keys in the padding get no gradient.
    #[test]
    fn the_op_is_masked_attention_values_and_gradients() {
        let normals = Normals::new(256);
        let (heads, d, seq) = (2, 8, 6);
        let hidden = heads * d;
        let mask = mask_of(&[vec![1, 1, 1, 1, 1, 1], vec![1, 1, 1, 1, 0, 0], vec![1, 0, 0, 0, 0, 0]]);
        let lengths = KeyLengths::right_padded(&mask).unwrap().unwrap();
        let qkv = Var::from_tensor(&normals.tensor(0f32, 1.0, (3 * seq, 3 * hidden), &Device::Cpu).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (3 * seq, hidden), &Device::Cpu).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let bias = Var::from_tensor(&normals.tensor(0f32, 0.5, 3 * hidden, &Device::Cpu).unwrap()).unwrap();
        let op = FlashAttentionTrain::new(heads, scale, lengths, None);
        let ours = op.forward(qkv.as_tensor(), bias.as_tensor()).unwrap();
        let theirs = composed(&qkv.as_tensor().broadcast_add(bias.as_tensor()).unwrap(), &mask, heads, scale);
        let max = |t: Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(max((&ours - &theirs).unwrap()) < 1e-5);
        let grads = |y: &Tensor| {
            let g = (y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            (g.get(&qkv).unwrap().clone(), g.get(&bias).unwrap().clone())
        };
        let ((g_ours, b_ours), (g_theirs, b_theirs)) = (grads(&ours), grads(&theirs));
        let diff = max((&g_ours - &g_theirs).unwrap());
        assert!(diff < 1e-4, "gradient differs by {diff}");
        let diff = max((b_ours - b_theirs).unwrap());
        assert!(diff < 1e-4, "bias gradient differs by {diff}");
        // The second sequence's last two keys (rows 10, 11) are padding: no k or v gradient.
        let padding_kv = g_ours.narrow(0, 10, 2).unwrap().narrow(1, hidden, 2 * hidden).unwrap();
        assert_eq!(max(padding_kv), 0.0);
    }

    /// Over a product that has its bias already (`forward_biased`, the q/k/v bias in the
    /// product's epilogue), the values and the product's gradient are those of the op adding
    /// the bias itself: the same loops on the same biased rows.
    #[test]
    fn a_biased_product_gives_the_ops_values_and_gradient() {
        let normals = Normals::new(288);
        let (heads, d, seq) = (2, 8, 5);
        let hidden = heads * d;
        let mask = mask_of(&[vec![1, 1, 1, 1, 1], vec![1, 1, 1, 0, 0]]);
        let lengths = KeyLengths::right_padded(&mask).unwrap().unwrap();
        let qkv = Var::from_tensor(&normals.tensor(0f32, 1.0, (2 * seq, 3 * hidden), &Device::Cpu).unwrap()).unwrap();
        let bias = normals.tensor(0f32, 0.5, 3 * hidden, &Device::Cpu).unwrap();
        let w = normals.tensor(0f32, 1.0, (2 * seq, hidden), &Device::Cpu).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let op = FlashAttentionTrain::new(heads, scale, lengths, None);
        let with_bias = op.clone().forward(qkv.as_tensor(), &bias).unwrap();
        let biased = op.forward_biased(&qkv.as_tensor().broadcast_add(&bias).unwrap()).unwrap();
        let grad = |y: &Tensor| (y * &w).unwrap().sum_all().unwrap().backward().unwrap().get(&qkv).unwrap().clone();
        let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(flat(with_bias.clone()), flat(biased.clone()));
        assert_eq!(flat(grad(&with_bias)), flat(grad(&biased)));
    }

    /// Dropout inside the attention has no CPU loop: an error naming the op.
    #[test]
    fn dropout_on_the_cpu_is_an_error() {
        let lengths = KeyLengths::right_padded(&mask_of(&[vec![1, 1]])).unwrap().unwrap();
        let qkv = Tensor::zeros((2, 6), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = FlashAttentionTrain::new(1, 1.0, lengths, Some((0.1, 7)))
            .forward(&qkv, &qkv.get(0).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("flash-attention-2-train") && err.contains("CUDA"), "{err}");
    }
}
