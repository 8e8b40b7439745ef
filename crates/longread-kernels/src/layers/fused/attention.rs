//! Scaled, masked multi-head attention (`softmax(q·kᵀ·scale + mask) · v`, with dropout on the
//! probabilities in training) as one CPU op with its own backward pass, in the manner of
//! FlashAttention (Dao et al. 2022): the heads are read in place from the projections'
//! `[batch, seq, heads·head_size]` layout (no transposes, no copies), every (sequence, head)
//! pair is one task on the thread pool running single-threaded matmuls, and the scores exist
//! only for one block of query rows of one head at a time. The backward pass recomputes the
//! probabilities and regenerates the dropout mask from its seed, so no `seq × seq` tensor is
//! kept between the passes. Checked against the composition of candle ops, values and gradients
//! (tests below); the golden encoder tests run through it.
//! Reference: transformers `modeling_bert.py: BertSelfAttention` (eager attention).

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use crate::layers::dropout::SeededDropout;
use crate::layers::fused::math::{fast_exp, lanes_max, lanes_sum};
use crate::layers::fused::{f32_data, f32_slices, multiversion};

/// Query rows whose scores are held at once per task.
pub(super) const QUERY_BLOCK: usize = 128;

/// Multi-head attention over `q, k, v: [batch, seq, heads·head_size]` (f32, contiguous), with
/// an additive bias per key (`[batch, seq]`: 0 for tokens, a large negative number for padding,
/// as transformers' extended attention mask). Output `[batch, seq, heads·head_size]`, heads
/// side by side as the output projection reads them.
#[derive(Debug)]
pub struct FusedAttention {
    /// Attention heads.
    pub heads: usize,
    /// Multiplier of the scores (1/√head_size).
    pub scale: f32,
    /// `[batch, seq]`.
    pub key_bias: Vec<f32>,
    /// MPNet's relative-position bias, `[heads, seq, seq]`, added to the scaled scores before
    /// the key bias (its own gradient is not computed: with one, training composes candle ops).
    pub score_bias: Option<Vec<f32>>,
    /// Dropout on the attention probabilities in training (`None`: none).
    pub dropout: Option<SeededDropout>,
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
    /// Row stride of q, k, v and the output: all heads side by side.
    fn width(&self) -> usize {
        self.heads * self.head_size
    }

    /// Offset of head `h` of sequence `b`'s first row.
    fn head_offset(&self, b: usize, h: usize) -> usize {
        b * self.seq * self.width() + h * self.head_size
    }
}

multiversion! {
    /// Adds the key bias to each score row of `scores` (`[rows, bias.len()]`) and normalises
    /// the rows with softmax, in place.
    pub(super) fn softmax_rows(scores: &mut [f32], bias: &[f32]) {
        for row in scores.chunks_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
            let max = lanes_max(row);
            row.iter_mut().for_each(|x| *x = fast_exp(*x - max));
            let inv = 1.0 / lanes_sum(row);
            row.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// `values ⊙= mask` where there is a dropout mask (its factors, as [`FusedAttention::dropout_factors`]
/// writes them).
fn multiply_by_mask(values: &mut [f32], mask: Option<&[f32]>) {
    if let Some(mask) = mask {
        values.iter_mut().zip(mask).for_each(|(x, m)| *x *= m);
    }
}

/// A pointer that tasks writing disjoint parts of one buffer share (here: each sequence's rows
/// of each head; in `int8::gemm`: each task's rows).
#[derive(Clone, Copy)]
pub struct SharedMut(pub *mut f32);
// SAFETY: every task writes a region no other task touches.
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// The pointer (a method, so that closures capture the `Sync` wrapper, not its field).
    pub fn get(self) -> *mut f32 {
        self.0
    }

    /// The output `offset` elements in, with the row stride and accumulation of `Out`.
    ///
    /// # Safety
    /// `offset` must lie inside the buffer.
    pub(super) unsafe fn out(self, offset: usize, row_stride: usize, accumulate: bool) -> Out {
        // SAFETY: the caller guarantees `offset` lies inside the buffer (this function's contract).
        unsafe { Out(self.0.add(offset), row_stride, accumulate) }
    }
}

/// A matmul destination: pointer, row stride, and whether to add to what it holds.
pub(super) struct Out(pub(super) *mut f32, pub(super) usize, pub(super) bool);

/// A strided matrix operand: pointer, column stride, row stride.
#[derive(Clone, Copy)]
pub(super) struct Mat(pub(super) *const f32, pub(super) isize, pub(super) isize);

/// `dst (m × n) = (accumulate ? dst : 0) + factor · lhs (m × k) · rhs (k × n)`,
/// single-threaded (the tasks are the parallelism).
///
/// # Safety
/// Every pointer must address the whole strided matrix it stands for.
pub(super) unsafe fn matmul((m, n, k): (usize, usize, usize), dst: Out, lhs: Mat, rhs: Mat, factor: f32) {
    // SAFETY: the caller guarantees every pointer addresses its whole strided matrix, which is what gemm reads and writes.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.0,
            1,
            dst.1 as isize,
            dst.2,
            lhs.0,
            lhs.1,
            lhs.2,
            rhs.0,
            rhs.1,
            rhs.2,
            1.0,
            factor,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

impl FusedAttention {
    fn dims(&self, l1: &Layout, l2: &Layout, l3: &Layout) -> Result<Dims> {
        let (batch, seq, width) = l1.shape().dims3()?;
        if l2.shape() != l1.shape() || l3.shape() != l1.shape() {
            candle_core::bail!("fused-attention: q {:?}, k {:?}, v {:?} differ", l1.shape(), l2.shape(), l3.shape());
        }
        if self.heads == 0 || width % self.heads != 0 || seq == 0 {
            candle_core::bail!("fused-attention: width {width} does not split into {} heads", self.heads);
        }
        if self.key_bias.len() != batch * seq {
            candle_core::bail!("fused-attention: a key bias of {} for {batch} × {seq} keys", self.key_bias.len());
        }
        if self.score_bias.as_ref().is_some_and(|bias| bias.len() != self.heads * seq * seq) {
            candle_core::bail!("fused-attention: a score bias that is not [{} heads, {seq}, {seq}]", self.heads);
        }
        Ok(Dims { batch, seq, heads: self.heads, head_size: width / self.heads })
    }

    /// Scores of query rows `rows` of head `h` of sequence `b`, softmax-normalised in place
    /// (`probs: [rows.len(), seq]`); the key bias is added as
    /// transformers adds its mask (so fully masked rows come out uniform, as there).
    ///
    /// # Safety
    /// `q` and `k` must hold the whole `[batch, seq, width]` inputs.
    unsafe fn probabilities(
        &self,
        d: Dims,
        (b, h): (usize, usize),
        rows: std::ops::Range<usize>,
        (q, k): (*const f32, *const f32),
        probs: &mut [f32],
    ) {
        // SAFETY: `q` and `k` hold the whole inputs (the caller's contract), so the head's rows and columns lie inside them; `probs` holds `rows.len() × seq` values.
        unsafe {
            let (s, w) = (d.seq, d.width() as isize);
            let base = d.head_offset(b, h);
            let q_rows = Mat(q.add(base + rows.start * d.width()), 1, w);
            // rhs(k = feature, n = key) = K[key, feature].
            let k_t = Mat(k.add(base), w, 1);
            matmul((rows.len(), s, d.head_size), Out(probs.as_mut_ptr(), s, false), q_rows, k_t, self.scale);
            if let Some(bias) = &self.score_bias {
                let head_rows = &bias[(h * s + rows.start) * s..(h * s + rows.end) * s];
                probs.iter_mut().zip(head_rows).for_each(|(x, b)| *x += b);
            }
            softmax_rows(probs, &self.key_bias[b * s..(b + 1) * s]);
        }
    }

    /// Where the block's rows start in the `[batch, heads, seq, seq]` dropout mask (they are
    /// consecutive there).
    fn mask_offset(d: Dims, (b, h): (usize, usize), rows: &std::ops::Range<usize>) -> u64 {
        (((b * d.heads + h) * d.seq + rows.start) * d.seq) as u64
    }

    /// Multiplies probabilities `[rows, seq]` of head `h` of sequence `b` by the dropout keep
    /// mask (in place).
    fn apply_dropout(&self, d: Dims, head: (usize, usize), rows: std::ops::Range<usize>, probs: &mut [f32]) {
        if let Some(dropout) = self.dropout {
            dropout.multiply(Self::mask_offset(d, head, &rows), probs);
        }
    }

    /// The dropout keep mask's factors for probabilities `[rows, seq]` of head `h` of sequence
    /// `b`, written to `buffer`; `None` without dropout.
    fn dropout_factors<'a>(
        &self,
        d: Dims,
        head: (usize, usize),
        rows: std::ops::Range<usize>,
        buffer: &'a mut Vec<f32>,
    ) -> Option<&'a [f32]> {
        let dropout = self.dropout?;
        buffer.resize(rows.len() * d.seq, 0.0);
        dropout.factors(Self::mask_offset(d, head, &rows), buffer);
        Some(buffer)
    }

    /// Query blocks of one sequence.
    fn blocks(seq: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
        (0..seq).step_by(QUERY_BLOCK).map(move |start| start..(start + QUERY_BLOCK).min(seq))
    }
}

impl CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        "fused-attention"
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
        let d = self.dims(l1, l2, l3)?;
        let [q, k, v] = f32_slices([(s1, l1), (s2, l2), (s3, l3)], self.name())?;
        let mut out = vec![0f32; q.len()];
        let out_ptr = SharedMut(out.as_mut_ptr());
        let (q, k, v) = (q.as_ptr() as usize, k.as_ptr() as usize, v.as_ptr() as usize);
        let tasks: Vec<(usize, usize, std::ops::Range<usize>)> = (0..d.batch)
            .flat_map(|b| (0..d.heads).flat_map(move |h| Self::blocks(d.seq).map(move |r| (b, h, r))))
            .collect();
        tasks.into_par_iter().for_each(|(b, h, rows)| {
            let mut probs = vec![0f32; rows.len() * d.seq];
            // SAFETY: q, k, v and out hold [batch, seq, width]; this task writes only rows
            // `rows` of head h of sequence b of out.
            unsafe {
                let (q, k, v) = (q as *const f32, k as *const f32, v as *const f32);
                self.probabilities(d, (b, h), rows.clone(), (q, k), &mut probs);
                self.apply_dropout(d, (b, h), rows.clone(), &mut probs);
                let base = d.head_offset(b, h);
                let w = d.width();
                matmul(
                    (rows.len(), d.head_size, d.seq),
                    out_ptr.out(base + rows.start * w, w, false),
                    Mat(probs.as_ptr(), 1, d.seq as isize),
                    Mat(v.add(base), 1, w as isize),
                    1.0,
                );
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// With `P` the probabilities, `M` the keep mask and `O` the output, per head:
    /// `dV = (P⊙M)ᵀ dO`, `dP = (dO Vᵀ) ⊙ M`, `dS = P ⊙ (dP − rowsum(dO ⊙ O))`,
    /// `dQ = scale · dS K`, `dK = scale · dSᵀ Q`.
    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        arg3: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = self.dims(arg1.layout(), arg2.layout(), arg3.layout())?;
        let (q, k, v, o, d_o) =
            (f32_data(arg1)?, f32_data(arg2)?, f32_data(arg3)?, f32_data(res)?, f32_data(grad_res)?);
        let (mut dq, mut dk, mut dv) = (vec![0f32; q.len()], vec![0f32; q.len()], vec![0f32; q.len()]);
        let grads = (SharedMut(dq.as_mut_ptr()), SharedMut(dk.as_mut_ptr()), SharedMut(dv.as_mut_ptr()));
        let inputs = (q.as_ptr() as usize, k.as_ptr() as usize, v.as_ptr() as usize);
        let (o, d_o) = (&*o, &*d_o);
        let tasks: Vec<(usize, usize)> = (0..d.batch).flat_map(|b| (0..self.heads).map(move |h| (b, h))).collect();
        tasks.into_par_iter().for_each(|(b, h)| {
            let (dq_ptr, dk_ptr, dv_ptr) = grads;
            let (q, k, v) = (inputs.0 as *const f32, inputs.1 as *const f32, inputs.2 as *const f32);
            let (s, w) = (d.seq, d.width());
            let base = d.head_offset(b, h);
            let mut probs = vec![0f32; QUERY_BLOCK.min(s) * s];
            let mut dprobs = vec![0f32; QUERY_BLOCK.min(s) * s];
            let mut mask_buffer = Vec::new();
            for rows in Self::blocks(s) {
                let n = rows.len();
                let (p, dp) = (&mut probs[..n * s], &mut dprobs[..n * s]);
                // SAFETY: as in the forward pass; this task writes only head h of sequence b
                // of dq, dk and dv.
                unsafe {
                    // P, recomputed: the same values as in the forward pass.
                    self.probabilities(d, (b, h), rows.clone(), (q, k), p);
                    // Keep P for dS; P⊙M for dV. The mask is hashed once per block, used twice.
                    let mask = self.dropout_factors(d, (b, h), rows.clone(), &mut mask_buffer);
                    dp.copy_from_slice(p);
                    multiply_by_mask(dp, mask);
                    let d_o_rows = Mat(d_o.as_ptr().add(base + rows.start * w), 1, w as isize);
                    // dV += (P⊙M)ᵀ dO_rows: lhs(m = key, k = query row) = (P⊙M)[row, key].
                    matmul(
                        (s, d.head_size, n),
                        dv_ptr.out(base, w, true),
                        Mat(dp.as_ptr(), s as isize, 1),
                        d_o_rows,
                        1.0,
                    );
                    // dP = dO_rows Vᵀ, then ⊙ M.
                    matmul(
                        (n, s, d.head_size),
                        Out(dp.as_mut_ptr(), s, false),
                        d_o_rows,
                        Mat(v.add(base), w as isize, 1),
                        1.0,
                    );
                    multiply_by_mask(dp, mask);
                    // dS = P ⊙ (dP − Σ dO ⊙ O), in place of dP.
                    for (i, (dp_row, p_row)) in rows.clone().zip(dp.chunks_mut(s).zip(p.chunks(s))) {
                        let at = base + i * w;
                        let dot: f32 =
                            d_o[at..at + d.head_size].iter().zip(&o[at..at + d.head_size]).map(|(a, b)| a * b).sum();
                        dp_row.iter_mut().zip(p_row).for_each(|(g, &p)| *g = p * (*g - dot));
                    }
                    // dQ_rows = scale · dS K.
                    matmul(
                        (n, d.head_size, s),
                        dq_ptr.out(base + rows.start * w, w, false),
                        Mat(dp.as_ptr(), 1, s as isize),
                        Mat(k.add(base), 1, w as isize),
                        self.scale,
                    );
                    // dK += scale · dSᵀ Q_rows.
                    let q_rows = Mat(q.add(base + rows.start * w), 1, w as isize);
                    matmul(
                        (s, d.head_size, n),
                        dk_ptr.out(base, w, true),
                        Mat(dp.as_ptr(), s as isize, 1),
                        q_rows,
                        self.scale,
                    );
                }
            }
        });
        let (device, shape) = (arg1.device(), arg1.shape());
        Ok((
            Some(Tensor::from_vec(dq, shape, device)?),
            Some(Tensor::from_vec(dk, shape, device)?),
            Some(Tensor::from_vec(dv, shape, device)?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::layers::softmax_last_dim;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    const HEADS: usize = 3;

    /// Key bias of `batch` sequences of `seq`, the last `padding[b]` keys of sequence b masked.
    fn key_bias(seq: usize, padding: &[usize]) -> Vec<f32> {
        padding.iter().flat_map(|&p| (0..seq).map(move |j| if j + p >= seq { f32::MIN } else { 0.0 })).collect()
    }

    /// The same attention composed of candle ops, with an explicit keep mask.
    fn composed(q: &Tensor, k: &Tensor, v: &Tensor, bias: &[f32], keep: Option<&[f32]>) -> Tensor {
        let (b, s, w) = q.dims3().unwrap();
        let split =
            |t: &Tensor| t.reshape((b, s, HEADS, w / HEADS)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let (q, k, v) = (split(q), split(k), split(v));
        let scale = 1.0 / ((w / HEADS) as f64).sqrt();
        let bias = Tensor::from_vec(bias.to_vec(), (b, 1, 1, s), q.device()).unwrap();
        let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap().broadcast_add(&bias).unwrap();
        let mut probs = softmax_last_dim(&scores).unwrap();
        if let Some(keep) = keep {
            probs = (probs * Tensor::from_vec(keep.to_vec(), (b, HEADS, s, s), q.device()).unwrap()).unwrap();
        }
        probs.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((b, s, w)).unwrap()
    }

    /// Output and gradients of q, k, v (loss: Σ out ⊙ weights), fused and composed.
    fn both(seq: usize, padding: &[usize], dropout: Option<SeededDropout>) -> [(Tensor, Tensor); 4] {
        let normals = Normals::new(399);
        let device = Device::Cpu;
        let shape = (padding.len(), seq, HEADS * 8);
        let var = |seed: f64| {
            Var::from_tensor(&(normals.tensor(0f32, 1.5, shape, &device).unwrap() + seed).unwrap()).unwrap()
        };
        let (q, k, v) = (var(0.1), var(-0.2), var(0.3));
        let weights = normals.tensor(0f32, 1.0, shape, &device).unwrap();
        let bias = key_bias(seq, padding);
        let run = |fused: bool| {
            let out = if fused {
                let op = FusedAttention {
                    heads: HEADS,
                    scale: 1.0 / 8f32.sqrt(),
                    key_bias: bias.clone(),
                    score_bias: None,
                    dropout,
                };
                q.as_tensor().apply_op3(k.as_tensor(), v.as_tensor(), op).unwrap()
            } else {
                let keep = dropout.map(|d| d.keep_mask(padding.len() * HEADS * seq * seq));
                composed(&q, &k, &v, &bias, keep.as_deref())
            };
            let grads = (&out * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            let grad = |x: &Var| grads.get(x.as_tensor()).unwrap().clone();
            [out.clone(), grad(&q), grad(&k), grad(&v)]
        };
        let (fused, reference) = (run(true), run(false));
        [0, 1, 2, 3].map(|i| (fused[i].clone(), reference[i].clone()))
    }

    #[test]
    fn fused_attention_matches_the_composition_and_its_gradients() {
        // 150 queries: a full block of 128 and a partial one; the second sequence is padded.
        for (name, (fused, reference)) in ["output", "dq", "dk", "dv"].iter().zip(both(150, &[0, 37], None)) {
            let d = max_diff(&fused, &reference);
            assert!(d < 5e-5, "{name}: max abs diff {d}");
        }
    }

    #[test]
    fn fused_attention_dropout_is_the_composition_with_the_same_mask() {
        let dropout = Some(SeededDropout { p: 0.1, seed: 12_345 });
        for (name, (fused, reference)) in ["output", "dq", "dk", "dv"].iter().zip(both(131, &[5, 0], dropout)) {
            let d = max_diff(&fused, &reference);
            assert!(d < 5e-5, "{name}: max abs diff {d}");
        }
    }

    #[test]
    fn a_fully_masked_sequence_attends_uniformly_as_in_transformers() {
        for (name, (fused, reference)) in ["output", "dq", "dk", "dv"].iter().zip(both(20, &[20, 3], None)) {
            let d = max_diff(&fused, &reference);
            assert!(d < 5e-5, "{name}: max abs diff {d}");
        }
    }
}
