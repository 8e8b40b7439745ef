//! The time loop of one GRU direction as a single candle op with a hand-written backward pass
//! (back-propagation through time). Composed from candle ops, every step slices the input
//! projections, and the backward pass of each slice materialises a zero-padded gradient of
//! the whole `[N, T, 3H]` tensor: O(T²) memory traffic. This op keeps the step's gradients in
//! place and runs the recurrent matmuls with `gemm`.

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use crate::layers::fused::math::fast_exp;
use crate::layers::fused::{f32_data, f32_slices, multiversion};

/// `torch.nn.GRU`'s recurrence over precomputed input projections, padding-aware (see
/// [`crate::han::gru`]): at a padded position the state is carried and the output is 0.
pub(crate) struct GruScan {
    /// `[N, T]` row-major, 1 = real.
    pub(crate) mask: Vec<f32>,
    /// Run from the last step to the first.
    pub(crate) reverse: bool,
}

/// Sizes of one scan.
#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    t: usize,
    h: usize,
}

/// Rows of a step handed to one rayon task.
const ROWS_PER_TASK: usize = 64;

impl GruScan {
    /// Steps in processing order.
    fn steps(&self, t: usize) -> Box<dyn Iterator<Item = usize>> {
        if self.reverse {
            Box::new((0..t).rev())
        } else {
            Box::new(0..t)
        }
    }

    /// Runs the recurrence; returns the outputs `[N, T, H]`.
    fn scan(&self, gi: &[f32], w_hh: &[f32], b_hh: &[f32], d: Dims) -> Vec<f32> {
        let Dims { n, t, h } = d;
        let mut out = vec![0f32; n * t * h];
        let mut state = vec![0f32; n * h];
        let mut gh = vec![0f32; n * 3 * h];
        for step in self.steps(t) {
            recurrent_projection(&mut gh, &state, w_hh, b_hh, n, h);
            let rows = ROWS_PER_TASK;
            out.par_chunks_mut(rows * t * h).zip(state.par_chunks_mut(rows * h)).enumerate().for_each(
                |(block, (out, state))| {
                    let first = block * rows;
                    let (gi, gh) = (&gi[first * t * 3 * h..], &gh[first * 3 * h..]);
                    step_forward(gi, gh, &self.mask[first * t..], state, out, At { t, h, step });
                },
            );
        }
        out
    }

    /// The state before each step (`[T][N, H]`, indexed by time step), read off the outputs:
    /// after a real step the state is that step's output, after a padded one it is carried.
    fn states_before(&self, out: &[f32], d: Dims) -> Vec<Vec<f32>> {
        let Dims { n, t, h } = d;
        let mut before = vec![Vec::new(); t];
        let mut state = vec![0f32; n * h];
        for step in self.steps(t) {
            before[step] = state.clone();
            for (row, s) in state.chunks_mut(h).enumerate() {
                if self.mask[row * t + step] != 0.0 {
                    s.copy_from_slice(&out[(row * t + step) * h..][..h]);
                }
            }
        }
        before
    }
}

impl CustomOp3 for GruScan {
    fn name(&self) -> &'static str {
        "gru-scan"
    }

    /// `gi: [N, T, 3H]`, `w_hh: [3H, H]`, `b_hh: [3H]` (f32, contiguous) → `[N, T, H]`
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let [gi, w_hh, b_hh] = f32_slices([(s1, l1), (s2, l2), (s3, l3)], name)?;
        let (n, t, three_h) = l1.shape().dims3()?;
        let d = Dims { n, t, h: three_h / 3 };
        if self.mask.len() != n * t || l2.shape().dims() != [three_h, d.h] || b_hh.len() != three_h {
            candle_core::bail!("gru-scan: inconsistent shapes {:?}, {:?}, {:?}", l1.shape(), l2.shape(), l3.shape());
        }
        let out = self.scan(gi, w_hh, b_hh, d);
        Ok((CpuStorage::F32(out), Shape::from((n, t, d.h))))
    }

    fn bwd(
        &self,
        gi: &Tensor,
        w_hh: &Tensor,
        b_hh: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (n, t, three_h) = gi.dims3()?;
        let h = three_h / 3;
        let d = Dims { n, t, h };
        let (gi_v, w_v, b_v, grad_out) = (f32_data(gi)?, f32_data(w_hh)?, f32_data(b_hh)?, f32_data(grad_res)?);
        let before = self.states_before(&f32_data(res)?, d);

        let mut d_gi = vec![0f32; n * t * three_h];
        let mut d_w = vec![0f32; three_h * h];
        let mut d_b = vec![0f32; three_h];
        let mut d_state = vec![0f32; n * h]; // ∂L/∂(state after the step)
        let mut d_prev = vec![0f32; n * h];
        let mut d_gh = vec![0f32; n * three_h];
        let mut gh = vec![0f32; n * three_h];
        let order: Vec<usize> = self.steps(t).collect();
        for &step in order.iter().rev() {
            let prev = &before[step];
            recurrent_projection(&mut gh, prev, &w_v, &b_v, n, h);
            let rows = ROWS_PER_TASK;
            d_gi.par_chunks_mut(rows * t * three_h)
                .zip(d_prev.par_chunks_mut(rows * h))
                .zip(d_gh.par_chunks_mut(rows * three_h))
                .enumerate()
                .for_each(|(block, ((d_gi, d_prev), d_gh))| {
                    let first = block * rows;
                    let rows = Rows {
                        gi: &gi_v[first * t * three_h..],
                        gh: &gh[first * three_h..],
                        prev: &prev[first * h..],
                        d_state: &d_state[first * h..],
                        grad_out: &grad_out[first * t * h..],
                        mask: &self.mask[first * t..],
                    };
                    step_backward(rows, d_gi, d_prev, d_gh, At { t, h, step });
                });
            // ∂W_hh += ∂ghᵀ · h_prev, ∂b_hh += Σ_rows ∂gh, ∂h_prev += ∂gh · W_hh.
            matmul(&mut d_w, (three_h, h, n), (&d_gh, 1, three_h), (prev, h, 1), true);
            for row in d_gh.chunks(three_h) {
                for (b, g) in d_b.iter_mut().zip(row) {
                    *b += g;
                }
            }
            matmul(&mut d_prev, (n, h, three_h), (&d_gh, three_h, 1), (&w_v, h, 1), true);
            std::mem::swap(&mut d_state, &mut d_prev);
        }
        let device = gi.device();
        Ok((
            Some(Tensor::from_vec(d_gi, (n, t, three_h), device)?),
            Some(Tensor::from_vec(d_w, (three_h, h), device)?),
            Some(Tensor::from_vec(d_b, three_h, device)?),
        ))
    }
}

/// Where a step kernel is: the time steps `t`, the hidden size `h`, the step.
#[derive(Clone, Copy)]
struct At {
    t: usize,
    h: usize,
    step: usize,
}

/// What the backward pass of one step reads for a block of rows (each slice starts at the
/// block's first row).
#[derive(Clone, Copy)]
struct Rows<'a> {
    /// `[rows, T, 3H]` input projections.
    gi: &'a [f32],
    /// `[rows, 3H]` recurrent projections of the state before the step.
    gh: &'a [f32],
    /// `[rows, H]` state before the step.
    prev: &'a [f32],
    /// `[rows, H]` ∂L/∂(state after the step).
    d_state: &'a [f32],
    /// `[rows, T, H]` ∂L/∂outputs.
    grad_out: &'a [f32],
    /// `[rows, T]` 1 = real.
    mask: &'a [f32],
}

multiversion! {
    /// One step of the recurrence for a block of rows (`state: [rows, H]`, `out: [rows, T, H]`,
    /// `gi: [rows.., T, 3H]`, `gh: [rows.., 3H]`, `mask: [rows.., T]`): the gates with
    /// [`fast_exp`], so that the loop over the hidden units vectorises.
    fn step_forward(
        gi: &[f32],
        gh: &[f32],
        mask: &[f32],
        state: &mut [f32],
        out: &mut [f32],
        at: At,
    ) {
        let At { t, h, step } = at;
        for (row, s) in state.chunks_mut(h).enumerate() {
            if mask[row * t + step] == 0.0 {
                continue;
            }
            let gi_row = &gi[(row * t + step) * 3 * h..][..3 * h];
            let gh_row = &gh[row * 3 * h..][..3 * h];
            let o = &mut out[(row * t + step) * h..][..h];
            for j in 0..h {
                let (_, z, c) = gates(gi_row, gh_row, h, j);
                s[j] = c + z * (s[j] - c);
                o[j] = s[j];
            }
        }
    }
}

multiversion! {
    /// The backward pass of one step for a block of rows: ∂L/∂gi at the step (into
    /// `d_gi: [rows, T, 3H]`), ∂L/∂gh (`d_gh: [rows, 3H]`) and the part of ∂L/∂(state before)
    /// that does not go through W_hh (`d_prev: [rows, H]`).
    fn step_backward(
        rows: Rows<'_>,
        d_gi: &mut [f32],
        d_prev: &mut [f32],
        d_gh: &mut [f32],
        at: At,
    ) {
        let At { t, h, step } = at;
        let three_h = 3 * h;
        for (row, (dp, dgh)) in d_prev.chunks_mut(h).zip(d_gh.chunks_mut(three_h)).enumerate() {
            let ds = &rows.d_state[row * h..][..h];
            if rows.mask[row * t + step] == 0.0 {
                // The state was carried: its gradient passes through unchanged.
                dp.copy_from_slice(ds);
                dgh.fill(0.0);
                continue;
            }
            let gi_row = &rows.gi[(row * t + step) * three_h..][..three_h];
            let gh_row = &rows.gh[row * three_h..][..three_h];
            let go = &rows.grad_out[(row * t + step) * h..][..h];
            let hp = &rows.prev[row * h..][..h];
            let dgi = &mut d_gi[(row * t + step) * three_h..][..three_h];
            for j in 0..h {
                let (r, z, c) = gates(gi_row, gh_row, h, j);
                let dh = ds[j] + go[j];
                // h' = c + z (h − c)
                let dc = dh * (1.0 - z);
                let dz = dh * (hp[j] - c);
                let da_c = dc * (1.0 - c * c);
                let dr = da_c * gh_row[2 * h + j];
                let da_z = dz * z * (1.0 - z);
                let da_r = dr * r * (1.0 - r);
                dgi[j] = da_r;
                dgi[h + j] = da_z;
                dgi[2 * h + j] = da_c;
                dgh[j] = da_r;
                dgh[h + j] = da_z;
                dgh[2 * h + j] = da_c * r;
                dp[j] = dh * z;
            }
        }
    }
}

/// `gh = state · W_hhᵀ + b_hh`.
///
/// # Shapes
/// `gh: [n, 3h]`, `state: [n, h]`, `w_hh: [3h, h]`, `b_hh: [3h]`
fn recurrent_projection(gh: &mut [f32], state: &[f32], w_hh: &[f32], b_hh: &[f32], n: usize, h: usize) {
    for row in gh.chunks_mut(3 * h) {
        row.copy_from_slice(b_hh);
    }
    // rhs (k = hidden, j = gate unit) is W_hhᵀ: element (k, j) at j·h + k.
    matmul(gh, (n, 3 * h, h), (state, h, 1), (w_hh, 1, h), true);
}

/// `dst (+)= lhs · rhs` for row-major `dst: [m, n]`; `lhs` and `rhs` are given with their
/// (row, column) strides, so either may be a transposed view.
fn matmul(
    dst: &mut [f32],
    (m, n, k): (usize, usize, usize),
    (lhs, lhs_rs, lhs_cs): (&[f32], usize, usize),
    (rhs, rhs_rs, rhs_cs): (&[f32], usize, usize),
    accumulate: bool,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    assert!(dst.len() >= m * n, "gru-scan matmul: destination too small");
    assert!(lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs, "gru-scan matmul: lhs too small");
    assert!(rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs, "gru-scan matmul: rhs too small");
    let threads = candle_core::utils::get_num_threads();
    let parallelism = if threads > 1 && m * n * k >= 1 << 18 { Parallelism::Rayon(threads) } else { Parallelism::None };
    // SAFETY: the bounds were checked above; the three buffers are distinct borrows.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Unit `j`'s reset gate r, update gate z and candidate c from a row's input projections
/// `gi_row` and recurrent projections `gh_row` (both `[3H]`: r, z, n blocks), as
/// `torch.nn.GRU` computes them.
#[inline(always)]
fn gates(gi_row: &[f32], gh_row: &[f32], h: usize, j: usize) -> (f32, f32, f32) {
    let r = sigmoid(gi_row[j] + gh_row[j]);
    let z = sigmoid(gi_row[h + j] + gh_row[h + j]);
    let c = tanh(gi_row[2 * h + j] + r * gh_row[2 * h + j]);
    (r, z, c)
}

/// σ(x) with [`fast_exp`] (no libm call, so loops over it vectorise).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + fast_exp(-x))
}

/// tanh(x) = 2σ(2x) − 1: one `exp` (libm's `tanhf` is several times slower); absolute error
/// within a few f32 ulps of 1.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}
