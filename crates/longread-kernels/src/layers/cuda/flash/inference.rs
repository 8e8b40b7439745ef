//! FlashAttention-2 in inference: one op over the fused q/k/v product.

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

use super::reference::Product;
use super::{Backend, KeyLengths};

/// Multi-head attention of a fused q/k/v product with its bias, each sequence's queries over
/// its real keys ([`KeyLengths`]): `qkv [batch · seq, 3 · hidden]` → `[batch · seq, hidden]`.
/// On CUDA bf16 with heads of 32 or 64; on the CPU f32 (`reference`, for tests).
#[derive(Debug, Clone)]
pub struct FlashAttention2 {
    /// Attention heads.
    pub heads: usize,
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
    /// The batch's sequences.
    pub lengths: KeyLengths,
    /// The library that runs it on CUDA.
    pub backend: Backend,
}

impl FlashAttention2 {
    /// Attention of `qkv` (bias added) over the sequences of `lengths`.
    ///
    /// # Shapes
    /// `qkv: [batch · seq, 3 · hidden]` → `[batch · seq, hidden]`
    pub fn forward(qkv: &Tensor, lengths: &KeyLengths, heads: usize, scale: f32) -> Result<Tensor> {
        qkv.apply_op1_no_bwd(&Self { heads, scale, lengths: lengths.clone(), backend: Backend::chosen(false) })
    }
}

/// The f32 loop of `reference` over a CPU product: `[rows, hidden]`.
pub(super) fn cpu_attention(
    op: &str,
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    (x, x_l): (&CpuStorage, &Layout),
) -> Result<(Vec<f32>, Shape)> {
    let (rows, hidden, d) = lengths.dims(op, heads, x_l)?;
    let CpuStorage::F32(x) = x else { candle_core::bail!("{op} on the CPU: f32 only") };
    let (starts, used) = lengths.host()?;
    let product = Product {
        x: &x[x_l.start_offset()..],
        row_stride: x_l.stride()[0],
        starts: &starts,
        used: &used,
        heads,
        d,
        scale,
    };
    Ok((product.forward(), Shape::from((rows, hidden))))
}

impl CustomOp1 for FlashAttention2 {
    fn name(&self) -> &'static str {
        "flash-attention-2"
    }

    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (out, shape) = cpu_attention(self.name(), &self.lengths, (self.heads, self.scale), (x, x_l))?;
        Ok((CpuStorage::F32(out), shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, x: &candle_core::CudaStorage, x_l: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        let (rows, hidden, _) = self.lengths.dims(self.name(), self.heads, x_l)?;
        let (out, _) =
            super::launch::forward(self.backend, (x, x_l), &self.lengths, (self.heads, self.scale), None, false)?;
        Ok((out, Shape::from((rows, hidden))))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{composed, mask_of};
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{DType, Device};

    /// The op (its CPU loop, the GPU kernel's reference) gives masked attention's rows, every
    /// query row included (padding rows attend to the real keys, as with a key bias), over a
    /// strided view of a wider product as the GPU reads it.
    #[test]
    fn the_op_is_masked_attention_over_right_padded_sequences() {
        let normals = Normals::new(84);
        let (heads, d, seq) = (3, 8, 7);
        let hidden = heads * d;
        let mask = mask_of(&[vec![1, 1, 1, 1, 1, 1, 1], vec![1, 1, 1, 0, 0, 0, 0], vec![1, 0, 0, 0, 0, 0, 0]]);
        let wide = normals.tensor(0f32, 1.0, (3 * seq, 3 * hidden + 5), &Device::Cpu).unwrap();
        let qkv = wide.narrow(1, 0, 3 * hidden).unwrap();
        let lengths = KeyLengths::right_padded(&mask).unwrap().expect("right-padded");
        assert_eq!(lengths.host().unwrap(), (vec![0, 7, 14, 21], vec![7, 3, 1]));
        let scale = 1.0 / (d as f32).sqrt();
        let ours = FlashAttention2::forward(&qkv, &lengths, heads, scale).unwrap();
        let reference = composed(&qkv.contiguous().unwrap(), &mask, heads, scale);
        let diff = (ours - reference).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-5, "largest difference {diff}");
    }

    /// Shapes that do not fit the heads or the lengths are errors naming the op, not panics.
    #[test]
    fn shapes_that_disagree_are_errors() {
        let lengths = KeyLengths::right_padded(&mask_of(&[vec![1, 1, 0]])).unwrap().unwrap();
        let qkv = Tensor::zeros((4, 12), DType::F32, &Device::Cpu).unwrap();
        let err = FlashAttention2::forward(&qkv, &lengths, 2, 1.0).unwrap_err().to_string();
        assert!(err.contains("flash-attention-2"), "{err}");
        let qkv = Tensor::zeros((3, 12), DType::F32, &Device::Cpu).unwrap();
        assert!(FlashAttention2::forward(&qkv, &lengths, 3, 1.0).is_err());
    }
}
