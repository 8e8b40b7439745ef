//! Multi-head attention over sequences packed end to end without padding (inference only), as
//! text-embeddings-inference runs its "unpadded" batches: the dense layers around it then work
//! on real tokens only, and each sequence attends only to itself. Same kernels as
//! [`FusedAttention`](super::FusedAttention) (its matmuls and softmax); checked against it on
//! the same sequences padded (tests below).

use std::ops::Range;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape};
use rayon::prelude::*;

use crate::layers::fused::attention::{matmul, softmax_rows, Mat, Out, SharedMut, QUERY_BLOCK};
use crate::layers::fused::f32_slices;

/// Attention of `q, k, v: [tokens, heads·head_size]` (f32, contiguous) where `segments` are the
/// row ranges of the sequences, in order, covering every row. Output `[tokens, heads·head_size]`.
/// No backward pass: training pads (`FusedAttention`).
#[derive(Debug)]
pub struct PackedAttention {
    /// Attention heads.
    pub heads: usize,
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
    /// Each sequence's row range, in order, covering every row.
    pub segments: Vec<Range<usize>>,
}

impl PackedAttention {
    /// Rows and width of the inputs, after checking that the segments tile the rows.
    fn dims(&self, l1: &Layout, l2: &Layout, l3: &Layout) -> Result<(usize, usize)> {
        let (tokens, width) = l1.shape().dims2()?;
        if l2.shape() != l1.shape() || l3.shape() != l1.shape() {
            candle_core::bail!("packed-attention: q {:?}, k {:?}, v {:?} differ", l1.shape(), l2.shape(), l3.shape());
        }
        if self.heads == 0 || width % self.heads != 0 {
            candle_core::bail!("packed-attention: width {width} does not split into {} heads", self.heads);
        }
        let mut next = 0;
        for segment in &self.segments {
            if segment.start != next || segment.is_empty() {
                candle_core::bail!(
                    "packed-attention: segments must be non-empty and consecutive, got {:?}",
                    self.segments
                );
            }
            next = segment.end;
        }
        if next != tokens {
            candle_core::bail!("packed-attention: segments cover {next} of {tokens} rows");
        }
        Ok((tokens, width))
    }
}

impl CustomOp3 for PackedAttention {
    fn name(&self) -> &'static str {
        "packed-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, w) = self.dims(l1, l2, l3)?;
        let head_size = w / self.heads;
        let [q, k, v] = f32_slices([(s1, l1), (s2, l2), (s3, l3)], self.name())?;
        let mut out = vec![0f32; q.len()];
        let out_ptr = SharedMut(out.as_mut_ptr());
        let (q, k, v) = (q.as_ptr() as usize, k.as_ptr() as usize, v.as_ptr() as usize);
        let longest = self.segments.iter().map(|s| s.len()).max().unwrap_or(0);
        let no_bias = vec![0f32; longest];
        // One task per (sequence, head, block of query rows); rows are absolute.
        let tasks: Vec<(Range<usize>, usize, Range<usize>)> = self
            .segments
            .iter()
            .flat_map(|seg| {
                (0..self.heads).flat_map(move |h| {
                    (seg.start..seg.end)
                        .step_by(QUERY_BLOCK)
                        .map(move |r| (seg.clone(), h, r..(r + QUERY_BLOCK).min(seg.end)))
                })
            })
            .collect();
        tasks.into_par_iter().for_each(|(seg, h, rows)| {
            let len = seg.len();
            let mut probs = vec![0f32; rows.len() * len];
            // SAFETY: q, k, v and out hold [tokens, w]; the segment's rows lie inside them, and
            // this task writes only rows `rows` of head h of out.
            unsafe {
                let (q, k, v) = (q as *const f32, k as *const f32, v as *const f32);
                let (wi, first_key) = (w as isize, seg.start * w + h * head_size);
                let q_rows = Mat(q.add(rows.start * w + h * head_size), 1, wi);
                // rhs(k = feature, n = key) = K[key, feature].
                let k_t = Mat(k.add(first_key), wi, 1);
                matmul((rows.len(), len, head_size), Out(probs.as_mut_ptr(), len, false), q_rows, k_t, self.scale);
                softmax_rows(&mut probs, &no_bias[..len]);
                matmul(
                    (rows.len(), head_size, len),
                    out_ptr.out(rows.start * w + h * head_size, w, false),
                    Mat(probs.as_ptr(), 1, len as isize),
                    Mat(v.add(first_key), 1, wi),
                    1.0,
                );
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::{max_diff, FusedAttention};
    use crate::seeded::Normals;
    use candle_core::{Device, Tensor};

    const HEADS: usize = 3;

    /// Packed attention equals the padded fused op on every real row, for sequences shorter and
    /// longer than a query block.
    #[test]
    fn packed_attention_is_padded_attention_without_the_padding() {
        let normals = Normals::new(126);
        let device = Device::Cpu;
        let lengths = [150usize, 1, 37, 128];
        let (seq, width) = (150, HEADS * 8);
        let padded =
            |seed: f64| (normals.tensor(0f32, 1.5, (lengths.len(), seq, width), &device).unwrap() + seed).unwrap();
        let (q, k, v) = (padded(0.1), padded(-0.2), padded(0.3));
        let key_bias: Vec<f32> =
            lengths.iter().flat_map(|&n| (0..seq).map(move |j| if j < n { 0.0 } else { f32::MIN })).collect();
        let op = FusedAttention { heads: HEADS, scale: 1.0 / 8f32.sqrt(), key_bias, score_bias: None, dropout: None };
        let reference = q.apply_op3_no_bwd(&k, &v, &op).unwrap();
        let pack = |t: &Tensor| {
            let rows: Vec<Tensor> =
                lengths.iter().enumerate().map(|(b, &n)| t.get(b).unwrap().narrow(0, 0, n).unwrap()).collect();
            Tensor::cat(&rows, 0).unwrap()
        };
        let mut start = 0;
        let segments: Vec<Range<usize>> = lengths
            .iter()
            .map(|&n| {
                start += n;
                start - n..start
            })
            .collect();
        let op = PackedAttention { heads: HEADS, scale: 1.0 / 8f32.sqrt(), segments };
        let packed = pack(&q).apply_op3_no_bwd(&pack(&k), &pack(&v), &op).unwrap();
        let d = max_diff(&packed, &pack(&reference));
        assert!(d < 1e-5, "max abs diff {d}");
    }

    #[test]
    fn segments_that_do_not_tile_the_rows_are_refused() {
        let x = Tensor::zeros((10, HEADS * 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let uncovered: Vec<Range<usize>> = std::iter::once(0..4).collect();
        for segments in [vec![0..4, 5..10], uncovered, vec![0..0, 0..10], vec![0..4, 4..11]] {
            let op = PackedAttention { heads: HEADS, scale: 1.0, segments: segments.clone() };
            let err = x.apply_op3_no_bwd(&x, &x, &op).unwrap_err().to_string();
            assert!(err.contains("packed-attention"), "{segments:?}: {err}");
        }
    }
}
