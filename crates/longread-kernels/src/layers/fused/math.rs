//! Vectorisable f32 math for the fused kernels: exp and erf without libm calls, lane-wise
//! reductions in a fixed order (reproducible sums), and LayerNorm of one row with its backward.

use crate::layers::fused::multiversion;

/// Rows handed to one rayon task at a time.
pub const ROWS_PER_TASK: usize = 16;

/// Elements handed to one rayon task at a time by element-wise kernels.
pub const ELEMENTS_PER_TASK: usize = 1 << 14;

/// Elements per rayon task for rows of `n`: whole rows, about [`ELEMENTS_PER_TASK`] elements.
pub fn rows_task_len(n: usize) -> usize {
    n * (ELEMENTS_PER_TASK / n).max(1)
}

/// Partial sums of per-column gradients (one set per block of rows), added up in block
/// order, so that the result does not depend on how rayon scheduled the blocks (runs stay
/// bit-reproducible).
pub fn sum_partials<const K: usize>(partials: impl Iterator<Item = [Vec<f32>; K]>, n: usize) -> [Vec<f32>; K] {
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
pub fn moments(x: &[f32], eps: f32) -> (f32, f32) {
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
    pub fn normalize_row(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
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
    pub fn normalize_row_backward(
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

/// erf(x) by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), with [`fast_exp`]: no
/// libm call, so loops over it vectorise.
#[inline(always)]
pub fn fast_erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    // The sign of x without a branch (so that loops over it vectorise).
    (1.0 - poly * fast_exp(-a * a)).copysign(x)
}

/// Exact GELU, `u · Φ(u)` with `Φ(u) = (1 + erf(u/√2)) / 2`, with [`fast_erf`].
#[inline(always)]
pub fn gelu_erf(u: f32) -> f32 {
    0.5 * u * (1.0 + fast_erf(u * std::f32::consts::FRAC_1_SQRT_2))
}

/// The derivative of [`gelu_erf`]: `Φ(u) + u · φ(u)`.
#[inline(always)]
pub fn gelu_erf_derivative(u: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let cdf = 0.5 * (1.0 + fast_erf(u * std::f32::consts::FRAC_1_SQRT_2));
    let pdf = INV_SQRT_2PI * fast_exp(-0.5 * u * u);
    cdf + u * pdf
}

/// e^x in f32 without a libm call, so that loops over it vectorise: x = n·ln 2 + r with
/// |r| ≤ ln 2 / 2, e^r by its Taylor polynomial of degree 7 (truncation error below 1e-8
/// relative), times 2^n built in the exponent bits. Relative error within 3 ulp of libm's
/// `expf` on [−87, 88]; below −87.3 the result is 0 (as `expf` underflows to denormals there),
/// above 88.7 it saturates (+∞ gives +∞), and NaN gives NaN.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Round to nearest with the 1.5·2^23 trick (no `round` call).
    const MAGIC: f32 = 12_582_912.0;
    // max/min rather than clamp: they return the other operand for NaN, so `n` below is
    // always a whole number in range (NaN is restored at the end).
    #[allow(clippy::manual_clamp)]
    let clamped = x.max(-87.3).min(88.7);
    let n = (clamped * LOG2E + MAGIC) - MAGIC;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // SAFETY: n is a whole number in [−126, 128] after the clamp, so it fits an i32.
    let n = unsafe { n.to_int_unchecked::<i32>() };
    let scale = f32::from_bits(((n + 127) as u32) << 23);
    let y = if x < -87.3 { 0.0 } else { p * scale };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// The largest value, with 16 independent partial maxima (vectorises).
#[inline]
pub fn lanes_max(values: &[f32]) -> f32 {
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
pub fn lanes_sum(values: &[f32]) -> f32 {
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
pub fn lanes_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let (mut ca, mut cb) = (a.chunks_exact(16), b.chunks_exact(16));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x * y;
        }
    }
    lanes.iter().sum::<f32>() + ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: NaN reached `to_int_unchecked` (undefined behaviour) through `clamp`.
    #[test]
    fn fast_exp_is_defined_for_nan_and_infinities() {
        assert!(fast_exp(f32::NAN).is_nan());
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(fast_exp(f32::INFINITY), f32::INFINITY);
        assert!(fast_erf(f32::NAN).is_nan());
        assert_eq!(fast_erf(f32::INFINITY), 1.0);
        assert_eq!(fast_erf(f32::NEG_INFINITY), -1.0);
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
}
