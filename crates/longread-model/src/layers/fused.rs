//! Fused CPU kernels with backward passes for the encoder's training path: softmax over the
//! last dimension and LayerNorm. Composed from candle ops, each is 5–8 kernels whose
//! intermediates all stay alive for the backward pass; fused, each is one pass forward and one
//! backward over rows, in parallel. Both are gradient-checked against the compositions
//! ([`crate::layers::softmax_last_dim`], `LayerNorm`'s differentiable path).

use candle_core::{CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Defines a function whose body is compiled three times, for the build's baseline (SSE2),
/// AVX2 + FMA and AVX-512 (F + DQ: DQ's 64-bit multiply vectorises the dropout-mask hash), and
/// runs the widest build the CPU has: the element-wise loops then vectorise 8 or 16 lanes wide
/// instead of SSE's 4. Rust does not contract `a * b + c` into
/// FMA, so every build performs the same operations in the same order: the same results.
macro_rules! multiversion {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
                    // SAFETY: the CPU has AVX-512F and DQ.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Rows handed to one rayon task at a time.
pub(crate) const ROWS_PER_TASK: usize = 16;

/// Softmax over the last dimension (f32, contiguous).
pub(crate) struct FusedSoftmax;

impl CustomOp1 for FusedSoftmax {
    fn name(&self) -> &'static str {
        "fused-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = f32_slice(storage, layout, self.name())?;
        let n = last_dim(layout.shape())?;
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(n * ROWS_PER_TASK).zip(xs.par_chunks(n * ROWS_PER_TASK)).for_each(|(o, x)| {
            for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
                let max = lanes_max(x);
                // Separate loops so that the exponentials vectorise.
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = fast_exp(x - max);
                }
                let inv = 1.0 / lanes_sum(o);
                o.iter_mut().for_each(|v| *v *= inv);
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    /// `dx = y ⊙ (dy − Σ dy ⊙ y)` per row.
    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let n = last_dim(res.shape())?;
        let y = res.flatten_all()?.to_vec1::<f32>()?;
        let dy = grad_res.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; y.len()];
        dx.par_chunks_mut(n * ROWS_PER_TASK)
            .zip(y.par_chunks(n * ROWS_PER_TASK))
            .zip(dy.par_chunks(n * ROWS_PER_TASK))
            .for_each(|((dx, y), dy)| {
                for ((dx, y), dy) in dx.chunks_mut(n).zip(y.chunks(n)).zip(dy.chunks(n)) {
                    let dot: f32 = y.iter().zip(dy).map(|(a, b)| a * b).sum();
                    for ((d, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
                        *d = y * (g - dot);
                    }
                }
            });
        Ok(Some(Tensor::from_vec(dx, res.shape(), res.device())?))
    }
}

/// `LayerNorm(x) · weight + bias` over the last dimension (as torch: biased variance, eps
/// inside the square root); f32, contiguous.
pub(crate) struct FusedLayerNorm {
    pub(crate) eps: f32,
}

impl CustomOp3 for FusedLayerNorm {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
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
        let [xs, w, b] = f32_slices([(s1, l1), (s2, l2), (s3, l3)], self.name())?;
        let n = last_dim(l1.shape())?;
        if w.len() != n || b.len() != n {
            candle_core::bail!("fused-layer-norm: weight/bias of {} and {} for rows of {n}", w.len(), b.len());
        }
        let mut out = xs.to_vec();
        out.par_chunks_mut(n * ROWS_PER_TASK).for_each(|rows| {
            rows.chunks_mut(n).for_each(|row| normalize_row(row, w, b, self.eps));
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// With `x̂ = (x − μ)·rstd` and `g = dy ⊙ w`: `dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))`,
    /// `dw = Σ_rows dy ⊙ x̂`, `db = Σ_rows dy`.
    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        _arg3: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let n = last_dim(arg1.shape())?;
        let x = arg1.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let w = arg2.to_vec1::<f32>()?;
        let dy = grad_res.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; x.len()];
        let eps = self.eps;
        // Partial sums of dw and db per block of rows, added up in block order: the result does
        // not depend on how rayon schedules the blocks (runs stay bit-reproducible).
        let partials: Vec<[Vec<f32>; 2]> = dx
            .par_chunks_mut(n * ROWS_PER_TASK)
            .zip(x.par_chunks(n * ROWS_PER_TASK))
            .zip(dy.par_chunks(n * ROWS_PER_TASK))
            .map(|((dx, x), dy)| {
                let (mut dw, mut db, mut scratch) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
                for ((dx, x), dy) in dx.chunks_mut(n).zip(x.chunks(n)).zip(dy.chunks(n)) {
                    scratch.copy_from_slice(x);
                    normalize_row_backward(dx, &mut scratch, dy, &w, &mut dw, &mut db, eps);
                }
                [dw, db]
            })
            .collect();
        let [dw, db] = sum_partials(partials.into_iter(), n);
        let device = arg1.device();
        Ok((
            Some(Tensor::from_vec(dx, arg1.shape(), device)?),
            Some(Tensor::from_vec(dw, n, device)?),
            Some(Tensor::from_vec(db, n, device)?),
        ))
    }
}

/// Partial sums of per-column gradients (one set per block of rows), added up in block
/// order, so that the result does not depend on how rayon scheduled the blocks (runs stay
/// bit-reproducible).
pub(crate) fn sum_partials<const K: usize>(partials: impl Iterator<Item = [Vec<f32>; K]>, n: usize) -> [Vec<f32>; K] {
    let mut total: [Vec<f32>; K] = std::array::from_fn(|_| vec![0f32; n]);
    for part in partials {
        for (t, p) in total.iter_mut().zip(part) {
            t.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
    }
    total
}

/// Mean and 1/std of a row (biased variance, eps inside the square root, as torch).
#[inline(always)]
pub(crate) fn moments(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = lanes_sum(x) / n;
    let mut lanes = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += (v - mean) * (v - mean);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&v| (v - mean) * (v - mean)).sum();
    let var = (lanes.iter().sum::<f32>() + tail) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

multiversion! {
    /// LayerNorm of one row, in place: `(x − μ) · rstd · γ + β`.
    pub(crate) fn normalize_row(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        let (mean, rstd) = moments(row, eps);
        for ((x, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
            *x = (*x - mean) * rstd * g + b;
        }
    }
}

multiversion! {
    /// The backward pass of [`normalize_row`] for one row. With `x̂ = (x − μ)·rstd` and
    /// `g = dy ⊙ γ`: `dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))`; adds `dy ⊙ x̂` to `dgamma`
    /// and `dy` to `dbeta`. `x` is overwritten with `x̂`.
    pub(crate) fn normalize_row_backward(
        dx: &mut [f32],
        x: &mut [f32],
        dy: &[f32],
        gamma: &[f32],
        dgamma: &mut [f32],
        dbeta: &mut [f32],
        eps: f32,
    ) {
        let n = x.len() as f32;
        let (mean, rstd) = moments(x, eps);
        x.iter_mut().for_each(|v| *v = (*v - mean) * rstd);
        for ((d, &dy), &g) in dx.iter_mut().zip(dy).zip(gamma) {
            *d = dy * g;
        }
        let g_mean = lanes_sum(dx) / n;
        let gx_mean = lanes_dot(dx, x) / n;
        for (((d, &xhat), &dy), (dg, db)) in dx.iter_mut().zip(x.iter()).zip(dy).zip(dgamma.iter_mut().zip(dbeta.iter_mut())) {
            *d = rstd * (*d - g_mean - xhat * gx_mean);
            *dg += dy * xhat;
            *db += dy;
        }
    }
}

/// Exact GELU, `x · Φ(x)` with `Φ(x) = (1 + erf(x/√2)) / 2` (f32, contiguous), with a vectorised
/// erf (see [`fast_erf`]); backward `dy · (Φ(x) + x · φ(x))`.
pub(crate) struct FusedGeluErf;

impl CustomOp1 for FusedGeluErf {
    fn name(&self) -> &'static str {
        "fused-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = f32_slice(storage, layout, self.name())?;
        let mut out = vec![0f32; xs.len()];
        multiversion! {
            fn gelu(o: &mut [f32], x: &[f32]) {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = 0.5 * x * (1.0 + fast_erf(x * std::f32::consts::FRAC_1_SQRT_2));
                }
            }
        }
        out.par_chunks_mut(ELEMENTS_PER_TASK).zip(xs.par_chunks(ELEMENTS_PER_TASK)).for_each(|(o, x)| gelu(o, x));
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let x = arg.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let dy = grad_res.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; x.len()];
        dx.par_chunks_mut(ELEMENTS_PER_TASK)
            .zip(x.par_chunks(ELEMENTS_PER_TASK))
            .zip(dy.par_chunks(ELEMENTS_PER_TASK))
            .for_each(|((dx, x), dy)| gelu_backward(dx, x, dy));
        multiversion! {
            fn gelu_backward(dx: &mut [f32], x: &[f32], dy: &[f32]) {
                for ((d, &x), &g) in dx.iter_mut().zip(x).zip(dy) {
                    let cdf = 0.5 * (1.0 + fast_erf(x * std::f32::consts::FRAC_1_SQRT_2));
                    let pdf = INV_SQRT_2PI * fast_exp(-0.5 * x * x);
                    *d = g * (cdf + x * pdf);
                }
            }
        }
        Ok(Some(Tensor::from_vec(dx, arg.shape(), arg.device())?))
    }
}

/// Elements handed to one rayon task at a time by element-wise kernels.
pub(crate) const ELEMENTS_PER_TASK: usize = 1 << 14;

/// erf(x) by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), with [`fast_exp`]: no
/// libm call, so loops over it vectorise.
#[inline(always)]
pub(crate) fn fast_erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    // The sign of x without a branch (so that loops over it vectorise).
    (1.0 - poly * fast_exp(-a * a)).copysign(x)
}

/// e^x in f32 without a libm call, so that loops over it vectorise: x = n·ln 2 + r with
/// |r| ≤ ln 2 / 2, e^r by its Taylor polynomial of degree 7 (truncation error below 1e-8
/// relative), times 2^n built in the exponent bits. Relative error within 3 ulp of libm's
/// `expf` on [−87, 88]; below −87.3 the result is 0 (as `expf` underflows to denormals there),
/// above 88.7 it saturates.
#[inline(always)]
pub(crate) fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Round to nearest with the 1.5·2^23 trick (no `round` call).
    const MAGIC: f32 = 12_582_912.0;
    let clamped = x.clamp(-87.3, 88.7);
    let n = (clamped * LOG2E + MAGIC) - MAGIC;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // SAFETY: n is a whole number in [−126, 128] after the clamp, so it fits an i32.
    let n = unsafe { n.to_int_unchecked::<i32>() };
    let scale = f32::from_bits(((n + 127) as u32) << 23);
    if x < -87.3 {
        0.0
    } else {
        p * scale
    }
}

/// The largest value, with 16 independent partial maxima (vectorises).
#[inline]
pub(crate) fn lanes_max(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = values.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if v > *l { v } else { *l };
        }
    }
    lanes.iter().chain(chunks.remainder()).fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
}

/// Σ values with 16 independent partial sums (vectorises; the order is fixed, so the result is
/// reproducible).
#[inline]
pub(crate) fn lanes_sum(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = values.chunks_exact(16);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Σ a ⊙ b with 16 independent partial sums (vectorises; fixed order).
#[inline]
pub(crate) fn lanes_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let (mut ca, mut cb) = (a.chunks_exact(16), b.chunks_exact(16));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x * y;
        }
    }
    lanes.iter().sum::<f32>() + ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum::<f32>()
}

/// Size of the last dimension (at least 1).
pub(crate) fn last_dim(shape: &Shape) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => candle_core::bail!("fused kernels need a non-empty last dimension, got {shape:?}"),
    }
}

/// The f32 data of several contiguous tensors (a custom op's arguments).
pub(crate) fn f32_slices<'a, const N: usize>(args: [(&'a CpuStorage, &Layout); N], op: &str) -> Result<[&'a [f32]; N]> {
    let mut out = [&[][..]; N];
    for (slot, (storage, layout)) in out.iter_mut().zip(args) {
        *slot = f32_slice(storage, layout, op)?;
    }
    Ok(out)
}

/// The f32 data of a contiguous tensor.
pub(crate) fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: the input must be contiguous");
    };
    match storage {
        CpuStorage::F32(v) => Ok(&v[start..end]),
        _ => candle_core::bail!("{op}: f32 only"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::{softmax_last_dim, LayerNorm};
    use candle_core::{DType, Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    #[test]
    fn fast_exp_is_within_a_few_ulp_of_expf() {
        let mut worst = 0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (fast, exact) = (fast_exp(x), x.exp());
            worst = worst.max(((fast - exact) / exact).abs());
            x += 0.001_7;
        }
        assert!(worst < 4.0 * f32::EPSILON, "worst relative error {worst:e}");
        assert_eq!(fast_exp(-1e9), 0.0, "masked scores give exactly 0");
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(fast_exp(0.0), 1.0);
    }

    #[test]
    fn fused_gelu_matches_candles_exact_gelu_and_its_gradient() {
        let device = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 3.0, (7, 301), &device).unwrap()).unwrap();
        let w = Tensor::randn(0f32, 1.0, (7, 301), &device).unwrap();
        let run = |fused: bool| {
            let y =
                if fused { x.as_tensor().apply_op1(FusedGeluErf).unwrap() } else { x.as_tensor().gelu_erf().unwrap() };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            (y, grads.get(x.as_tensor()).unwrap().clone())
        };
        let ((y1, g1), (y2, g2)) = (run(true), run(false));
        assert!(
            max_diff(&y1, &y2) < 2e-6 && max_diff(&g1, &g2) < 2e-6,
            "{} {}",
            max_diff(&y1, &y2),
            max_diff(&g1, &g2)
        );
    }

    #[test]
    fn fused_softmax_matches_the_composition_and_its_gradient() {
        let device = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 3.0, (3, 5, 37), &device).unwrap()).unwrap();
        let w = Tensor::randn(0f32, 1.0, (3, 5, 37), &device).unwrap();
        let run = |fused: bool| {
            let y = if fused { x.as_tensor().apply_op1(FusedSoftmax).unwrap() } else { softmax_last_dim(&x).unwrap() };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            (y, grads.get(x.as_tensor()).unwrap().clone())
        };
        let ((y1, g1), (y2, g2)) = (run(true), run(false));
        assert!(
            max_diff(&y1, &y2) < 1e-6 && max_diff(&g1, &g2) < 1e-5,
            "{} {}",
            max_diff(&y1, &y2),
            max_diff(&g1, &g2)
        );
    }

    #[test]
    fn fused_layer_norm_matches_the_composition_and_its_gradients() {
        let device = Device::Cpu;
        let vars = candle_nn::VarMap::new();
        let vb = candle_nn::VarBuilder::from_varmap(&vars, DType::F32, &device);
        let norm = LayerNorm::load(vb, 48, 1e-5).unwrap();
        // Non-trivial weight and bias.
        for (name, var) in vars.data().lock().unwrap().iter() {
            let offset = if name.ends_with("weight") { 1.0 } else { 0.0 };
            var.set(&(Tensor::randn(0f32, 0.5, 48, &device).unwrap() + offset).unwrap()).unwrap();
        }
        let x = Var::from_tensor(&(Tensor::randn(0f32, 2.0, (4, 9, 48), &device).unwrap() + 3.0).unwrap()).unwrap();
        let w = Tensor::randn(0f32, 1.0, (4, 9, 48), &device).unwrap();
        let rng = crate::mode::DropoutRng::new(0);
        let run = |fused: bool| {
            let y = if fused {
                norm.forward_fused(x.as_tensor(), crate::mode::Mode::Train(&rng)).unwrap()
            } else {
                norm.forward_differentiable(&x).unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let mut all = vec![y, grads.get(x.as_tensor()).unwrap().clone()];
            for (_, var) in vars.data().lock().unwrap().iter() {
                all.push(grads.get(var.as_tensor()).unwrap().clone());
            }
            all
        };
        for (a, b) in run(true).iter().zip(run(false)) {
            let d = max_diff(a, &b);
            assert!(d < 1e-4, "max abs diff {d}");
        }
    }
}
