//! Sentence embeddings from token states, as sentence-transformers' `Pooling` and
//! `Normalize` modules compute them.

use std::ops::Range;

use candle_core::{DType, Result, Tensor, D};

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SentencePooling {
    /// Mean over the real tokens (special tokens included).
    #[default]
    Mean,
    /// The first token ([CLS] or <s>).
    Cls,
}

impl SentencePooling {
    /// Its name on the command line and in JSON: "mean" or "cls".
    pub fn name(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
        }
    }

    /// Pools token states.
    ///
    /// # Shapes
    /// `hidden: [batch, seq, hidden]`, `mask: [batch, seq]` (u32) → `[batch, hidden]`
    pub fn forward(self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        match self {
            // A copy, not a view that would keep every token's state alive with the vector.
            Self::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?.force_contiguous(),
            Self::Mean => {
                let mask = mask.to_dtype(hidden.dtype())?.unsqueeze(D::Minus1)?;
                let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
                // sentence-transformers clamps the count at 1e-9.
                let count = mask.sum(1)?.clamp(1e-9, f64::INFINITY)?;
                summed.broadcast_div(&count)
            }
        }
    }

    /// Pools the token states of sequences packed end to end (`Encoder::forward_packed`).
    ///
    /// # Shapes
    /// `hidden: [tokens, hidden]`, `segments: n` row ranges → `[n, hidden]`
    pub fn forward_packed(self, hidden: &Tensor, segments: &[Range<usize>]) -> Result<Tensor> {
        let pooled = segments
            .iter()
            .map(|seg| {
                let rows = hidden.narrow(0, seg.start, seg.len())?;
                match self {
                    Self::Cls => rows.narrow(0, 0, 1)?.force_contiguous(),
                    Self::Mean => rows.sum_keepdim(0)? / seg.len() as f64,
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&pooled, 0)
    }
}

/// Divides each row by its L2 norm (`torch.nn.functional.normalize`, eps 1e-12).
///
/// # Shapes
/// `xs: [batch, hidden]` → `[batch, hidden]`
pub fn l2_normalize(xs: &Tensor) -> Result<Tensor> {
    let norm = xs.to_dtype(DType::F32)?.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::INFINITY)?;
    xs.broadcast_div(&norm.to_dtype(xs.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn mean_ignores_padding_and_normalize_gives_unit_rows() {
        let dev = Device::Cpu;
        let hidden = Tensor::new(&[[[1f32, 2.], [3., 4.], [100., 100.]]], &dev).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 0]], &dev).unwrap();
        let mean = SentencePooling::Mean.forward(&hidden, &mask).unwrap();
        assert_eq!(mean.to_vec2::<f32>().unwrap(), vec![vec![2., 3.]]);
        let cls = SentencePooling::Cls.forward(&hidden, &mask).unwrap();
        assert_eq!(cls.to_vec2::<f32>().unwrap(), vec![vec![1., 2.]]);
        let held = match &*cls.storage_and_layout().0 {
            candle_core::Storage::Cpu(s) => s.as_slice::<f32>().unwrap().len(),
            _ => unreachable!(),
        };
        assert_eq!(held, 2, "the [CLS] vector is a copy, not a view of every token's state");
        // Packed without the padding row, both poolings give the same vectors.
        let packed = Tensor::new(&[[1f32, 2.], [3., 4.], [5., 7.]], &dev).unwrap();
        let segments = [0..2, 2..3];
        let mean = SentencePooling::Mean.forward_packed(&packed, &segments).unwrap();
        assert_eq!(mean.to_vec2::<f32>().unwrap(), vec![vec![2., 3.], vec![5., 7.]]);
        let cls = SentencePooling::Cls.forward_packed(&packed, &segments).unwrap();
        assert_eq!(cls.to_vec2::<f32>().unwrap(), vec![vec![1., 2.], vec![5., 7.]]);
        let unit = l2_normalize(&Tensor::new(&[[3f32, 4.]], &dev).unwrap()).unwrap();
        assert_eq!(unit.to_vec2::<f32>().unwrap(), vec![vec![0.6, 0.8]]);
    }
}
