//! FlashAttention-2 (`vendor/flash-attn`: bf16, heads of 32 and 64) for the GPU's attention,
//! opted in per pass: `LONGREAD_CUDA_ATTENTION=fa2` for inference ([`FlashAttention2`]),
//! `LONGREAD_CUDA_TRAIN_ATTENTION=fa2` for training ([`FlashAttentionTrain`], with its backward
//! kernel and dropout). q, k and v are read in place from the fused q/k/v product (its bias
//! added first), the scores never reach memory, and each chunk's keys end where its padding
//! starts ([`KeyLengths`]; the kernels' variable-length mode), so a half-empty last chunk costs
//! half. Each op runs on the CPU too, as f32 loops (`reference`): the reference of the GPU
//! tests and of CI's tests of what the ops compute.

mod inference;
#[cfg(feature = "cuda")]
mod launch;
mod reference;
mod train;

use candle_core::{DType, Result, Tensor};

pub use inference::FlashAttention2;
pub use train::FlashAttentionTrain;

/// Where each sequence of a right-padded batch lies and how many of its keys are real: the
/// kernels' `cu_seqlens` (row starts, `[batch + 1]`, u32) and `seqused_k` (`[batch]`, u32).
#[derive(Debug, Clone)]
pub struct KeyLengths {
    starts: Tensor,
    used: Tensor,
    seq: usize,
}

impl KeyLengths {
    /// From an attention mask whose every row is real tokens then padding (`1…1 0…0`, as
    /// longread's chunks are); `None` when a row is not (left padding, holes) or is all padding:
    /// the caller then masks keys by their bias. Reads the mask on the host (once per batch).
    ///
    /// # Shapes
    /// `mask: [batch, seq]` (any dtype; nonzero = a real token)
    pub fn right_padded(mask: &Tensor) -> Result<Option<Self>> {
        let (batch, seq) = mask.dims2()?;
        let rows = mask.ne(0u8)?.to_dtype(DType::U8)?.to_vec2::<u8>()?;
        let mut used = Vec::with_capacity(batch);
        for row in &rows {
            let real = row.iter().take_while(|&&m| m != 0).count();
            if real == 0 || row[real..].iter().any(|&m| m != 0) {
                return Ok(None);
            }
            used.push(real as u32);
        }
        let starts: Vec<u32> = (0..=batch).map(|i| (i * seq) as u32).collect();
        let device = mask.device();
        Ok(Some(Self {
            starts: Tensor::from_vec(starts, batch + 1, device)?,
            used: Tensor::from_vec(used, batch, device)?,
            seq,
        }))
    }

    /// The padded length of each sequence.
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// Sequences in the batch.
    fn batch(&self) -> usize {
        self.used.elem_count()
    }

    /// `(rows, hidden, head_size)` of a q/k/v product `[batch · seq, 3 · hidden]` over these
    /// sequences, or an error naming `op` and what disagrees.
    fn dims(&self, op: &str, heads: usize, qkv: &candle_core::Layout) -> Result<(usize, usize, usize)> {
        let (rows, width) = qkv.shape().dims2()?;
        let hidden = width / 3;
        let head_size = hidden / heads.max(1);
        if width != 3 * hidden || head_size * heads != hidden || rows != self.batch() * self.seq || qkv.stride()[1] != 1
        {
            candle_core::bail!(
                "{op}: qkv {:?} (strides {:?}) does not fit {heads} heads over {} sequences of {}",
                qkv.shape(),
                qkv.stride(),
                self.batch(),
                self.seq
            );
        }
        Ok((rows, hidden, head_size))
    }

    /// Row starts and real keys on the host (for the CPU loops).
    fn host(&self) -> Result<(Vec<u32>, Vec<u32>)> {
        Ok((self.starts.to_vec1::<u32>()?, self.used.to_vec1::<u32>()?))
    }
}

/// Whether bf16 attention of GPU inference runs [`FlashAttention2`] (`LONGREAD_CUDA_ATTENTION=fa2`;
/// opt-in until measured on a GPU: BENCHMARKS.md "GPU").
pub fn flash2_enabled() -> bool {
    super::inference_attention() == "fa2"
}

/// Whether bf16 attention of GPU training runs [`FlashAttentionTrain`]
/// (`LONGREAD_CUDA_TRAIN_ATTENTION=fa2`; opt-in until measured on a GPU). Elsewhere (f32, other
/// head sizes, the CPU) training keeps `AttentionTrain`.
pub fn train_attention_fa2() -> bool {
    super::train_attention() == "fa2"
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    /// candle's composition of masked attention over the same fused product: the heads split,
    /// `softmax(q·kᵀ · scale + key bias) · v`, the heads merged.
    pub(super) fn composed(qkv: &Tensor, mask: &Tensor, heads: usize, scale: f32) -> Tensor {
        let (batch, seq) = mask.dims2().unwrap();
        let hidden = qkv.dim(1).unwrap() / 3;
        let split = |i: usize| {
            qkv.narrow(1, i * hidden, hidden)
                .unwrap()
                .reshape((batch, seq, heads, hidden / heads))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let bias =
            ((1.0 - mask.to_dtype(DType::F32).unwrap()).unwrap() * -1e9).unwrap().reshape((batch, 1, 1, seq)).unwrap();
        let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale as f64).unwrap().broadcast_add(&bias).unwrap();
        let probs = candle_nn::ops::softmax(&scores, D::Minus1).unwrap();
        probs.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((batch * seq, hidden)).unwrap()
    }

    pub(super) fn mask_of(rows: &[Vec<u32>]) -> Tensor {
        let seq = rows[0].len();
        Tensor::from_vec(rows.concat(), (rows.len(), seq), &Device::Cpu).unwrap()
    }

    /// Masks that are not real tokens then padding, or rows without a real token, give `None`
    /// (the caller masks keys by their bias instead); any nonzero value is a real token.
    #[test]
    fn only_right_padded_masks_give_lengths() {
        assert!(KeyLengths::right_padded(&mask_of(&[vec![0, 1, 1], vec![1, 1, 1]])).unwrap().is_none());
        assert!(KeyLengths::right_padded(&mask_of(&[vec![1, 0, 1]])).unwrap().is_none());
        assert!(KeyLengths::right_padded(&mask_of(&[vec![1, 1, 0], vec![0, 0, 0]])).unwrap().is_none());
        let lengths = KeyLengths::right_padded(&mask_of(&[vec![2, 1, 0], vec![1, 1, 1]])).unwrap().unwrap();
        assert_eq!(lengths.host().unwrap(), (vec![0, 3, 6], vec![2, 3]));
        assert_eq!(lengths.seq(), 3);
    }
}
