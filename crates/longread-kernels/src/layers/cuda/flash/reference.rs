//! FlashAttention-2's arithmetic as plain f32 loops (no dropout), written to be read: what the
//! CUDA kernels are held to, and how the ops run on the CPU.
//!
//! `x` is a q/k/v product: row `i` holds q, then k, then v, each `heads · d` wide, `row_stride`
//! apart. Sequence `b` has query rows `starts[b] .. starts[b + 1]` and key rows `starts[b] ..
//! starts[b] + used[b]`.

/// One q/k/v product and its sequences.
pub(super) struct Product<'a> {
    pub x: &'a [f32],
    pub row_stride: usize,
    pub starts: &'a [u32],
    pub used: &'a [u32],
    pub heads: usize,
    pub d: usize,
    pub scale: f32,
}

impl Product<'_> {
    fn hidden(&self) -> usize {
        self.heads * self.d
    }

    /// Row `i`'s `part` (0 = q, 1 = k, 2 = v) of head `h`.
    fn row(&self, part: usize, h: usize, i: usize) -> &[f32] {
        &self.x[i * self.row_stride + part * self.hidden() + h * self.d..][..self.d]
    }

    /// Each sequence's query rows and key rows.
    fn sequences(&self) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> + '_ {
        self.used.iter().enumerate().map(|(b, &n)| {
            let (start, end) = (self.starts[b] as usize, self.starts[b + 1] as usize);
            (start..end, start..start + (n as usize).min(end - start))
        })
    }

    /// Query `i`'s probabilities over `keys` under head `h`.
    fn probabilities(&self, h: usize, i: usize, keys: std::ops::Range<usize>) -> Vec<f32> {
        let q = self.row(0, h, i);
        let mut p: Vec<f32> = keys.map(|j| self.scale * dot(q, self.row(1, h, j))).collect();
        let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        p.iter_mut().for_each(|s| *s = (*s - max).exp());
        let total: f32 = p.iter().sum();
        p.iter_mut().for_each(|s| *s /= total);
        p
    }

    /// The attention's output, `[rows, heads · d]`.
    pub fn forward(&self) -> Vec<f32> {
        let hidden = self.hidden();
        let rows = *self.starts.last().unwrap_or(&0) as usize;
        let mut out = vec![0f32; rows * hidden];
        for (queries, keys) in self.sequences() {
            for h in 0..self.heads {
                for i in queries.clone() {
                    let p = self.probabilities(h, i, keys.clone());
                    let o = &mut out[i * hidden + h * self.d..][..self.d];
                    for (j, p) in keys.clone().zip(p) {
                        o.iter_mut().zip(self.row(2, h, j)).for_each(|(o, v)| *o += p * v);
                    }
                }
            }
        }
        out
    }

    /// Gradients of q, k and v (`[rows, 3 · heads · d]`, zero for padding keys) from the
    /// output's gradient `dout: [rows, heads · d]` and the output `out`:
    /// `dP = dO·vᵀ`, `dS = P ∘ (dP − rowsum(dO ∘ O))`, `dq = scale · dS·k`, `dk = scale · dSᵀ·q`,
    /// `dv = Pᵀ·dO`.
    pub fn backward(&self, out: &[f32], dout: &[f32]) -> Vec<f32> {
        let (hidden, d) = (self.hidden(), self.d);
        let rows = *self.starts.last().unwrap_or(&0) as usize;
        let mut grad = vec![0f32; rows * 3 * hidden];
        for (queries, keys) in self.sequences() {
            for h in 0..self.heads {
                for i in queries.clone() {
                    let p = self.probabilities(h, i, keys.clone());
                    let d_o = &dout[i * hidden + h * d..][..d];
                    let row_sum = dot(d_o, &out[i * hidden + h * d..][..d]);
                    for (j, p) in keys.clone().zip(p) {
                        let ds = p * (dot(d_o, self.row(2, h, j)) - row_sum);
                        let (q, k) = (self.row(0, h, i).to_vec(), self.row(1, h, j).to_vec());
                        let dq = &mut grad[i * 3 * hidden + h * d..][..d];
                        dq.iter_mut().zip(&k).for_each(|(g, k)| *g += self.scale * ds * k);
                        let dk = &mut grad[j * 3 * hidden + hidden + h * d..][..d];
                        dk.iter_mut().zip(&q).for_each(|(g, q)| *g += self.scale * ds * q);
                        let dv = &mut grad[j * 3 * hidden + 2 * hidden + h * d..][..d];
                        dv.iter_mut().zip(d_o).for_each(|(g, o)| *g += p * o);
                    }
                }
            }
        }
        grad
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}
