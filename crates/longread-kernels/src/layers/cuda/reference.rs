//! CPU implementations (f32) of the GPU route's layout and attention-probability ops, with the
//! arithmetic of their kernels in `kernels.cu`, so that compositions of them (the training
//! attention of [`super::attention_train`]) run and are tested on machines without a GPU.
//! Written to be read, not to be fast: the CPU route has its own fused kernels (`layers::fused`).

use candle_core::{CpuStorage, Layout, Result};

use crate::layers::dropout::mask_factors;
use crate::layers::fused::f32_slice;
use crate::layers::fused::math::moments;

/// `[3, batch, heads, seq, head_size]` (q, k, v) from a fused projection `x: [batch · seq,
/// 3 · hidden]` plus its bias `[3 · hidden]` (the kernel `split_qkv`).
pub(super) fn split_qkv(
    (batch, seq, heads, head_size): (usize, usize, usize, usize),
    (x, x_l): (&CpuStorage, &Layout),
    (bias, bias_l): (&CpuStorage, &Layout),
) -> Result<CpuStorage> {
    let op = "split-qkv";
    let hidden = heads * head_size;
    if x_l.shape().dims() != [batch * seq, 3 * hidden] || bias_l.shape().dims() != [3 * hidden] {
        candle_core::bail!(
            "{op}: x {:?} and bias {:?} do not fit {batch}×{seq}, {heads} heads of {head_size}",
            x_l.shape(),
            bias_l.shape()
        );
    }
    let (x, bias) = (f32_slice(x, x_l, op)?, f32_slice(bias, bias_l, op)?);
    let mut out = vec![0f32; 3 * batch * seq * hidden];
    for (token, row) in x.chunks_exact(3 * hidden).enumerate() {
        let (b, t) = (token / seq, token % seq);
        for part in 0..3 {
            for h in 0..heads {
                let src = part * hidden + h * head_size;
                let dst = (((part * batch + b) * heads + h) * seq + t) * head_size;
                for e in 0..head_size {
                    out[dst + e] = row[src + e] + bias[src + e];
                }
            }
        }
    }
    Ok(CpuStorage::F32(out))
}

/// `[batch, heads, seq, head_size]` → `[batch, seq, heads · head_size]` (the kernel `merge_heads`).
pub(super) fn merge_heads((x, x_l): (&CpuStorage, &Layout)) -> Result<CpuStorage> {
    let (_, heads, seq, head_size) = x_l.shape().dims4()?;
    let x = f32_slice(x, x_l, "merge-heads")?;
    let mut out = vec![0f32; x.len()];
    for (i, head_row) in x.chunks_exact(head_size).enumerate() {
        let (t, h, b) = (i % seq, (i / seq) % heads, i / (seq * heads));
        let dst = ((b * seq + t) * heads + h) * head_size;
        out[dst..dst + head_size].copy_from_slice(head_row);
    }
    Ok(CpuStorage::F32(out))
}

/// The attention probabilities of training, `dropout(softmax(scores · scale + key_bias))` per
/// row, or with `grad` their backward pass (the kernels `attention_probs_train` and
/// `attention_probs_train_grad`): `scores: [rows, keys]` (rows = items · rows per item),
/// `key_bias: [items, keys]`, the dropout factors of element `row · keys + j` from
/// `(seed, threshold, keep factor)`.
pub(super) fn attention_probs_train(
    scale: f32,
    (seed, threshold, keep): (u64, u32, f32),
    (scores, scores_l): (&CpuStorage, &Layout),
    (bias, bias_l): (&CpuStorage, &Layout),
    grad: Option<(&CpuStorage, &Layout)>,
) -> Result<CpuStorage> {
    let op = "attention-probs-train";
    let keys = *scores_l.shape().dims().last().unwrap_or(&0);
    let bias_keys = *bias_l.shape().dims().last().unwrap_or(&0);
    let (rows, items) = (scores_l.shape().elem_count() / keys.max(1), bias_l.shape().elem_count() / keys.max(1));
    if keys == 0 || bias_keys != keys || items == 0 || !rows.is_multiple_of(items) {
        candle_core::bail!("{op}: scores {:?} and key bias {:?} disagree", scores_l.shape(), bias_l.shape());
    }
    let (scores, bias) = (f32_slice(scores, scores_l, op)?, f32_slice(bias, bias_l, op)?);
    let grad = match grad {
        Some((g, g_l)) if g_l.shape() == scores_l.shape() => Some(f32_slice(g, g_l, op)?),
        Some((_, g_l)) => {
            candle_core::bail!("{op}: gradient {:?} and scores {:?} disagree", g_l.shape(), scores_l.shape())
        }
        None => None,
    };
    let rows_per_item = rows / items;
    let mut out = vec![0f32; rows * keys];
    let mut factors = vec![0f32; keys];
    for (row, (x, out)) in scores.chunks_exact(keys).zip(out.chunks_exact_mut(keys)).enumerate() {
        let bias = &bias[(row / rows_per_item) * keys..][..keys];
        let logits: Vec<f32> = x.iter().zip(bias).map(|(x, b)| x * scale + b).collect();
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let sum: f32 = logits.iter().map(|v| (v - max).exp()).sum();
        let probs = logits.iter().map(|v| (v - max).exp() / sum);
        mask_factors(seed, threshold, keep, (row * keys) as u64, &mut factors);
        match grad {
            None => out.iter_mut().zip(probs).zip(&factors).for_each(|((o, p), f)| *o = p * f),
            Some(grad) => {
                let dy = &grad[row * keys..][..keys];
                let probs: Vec<f32> = probs.collect();
                let dot: f32 = dy.iter().zip(&factors).zip(&probs).map(|((g, f), p)| g * f * p).sum();
                for (((o, g), f), p) in out.iter_mut().zip(dy).zip(&factors).zip(&probs) {
                    *o = scale * p * (g * f - dot);
                }
            }
        }
    }
    Ok(CpuStorage::F32(out))
}

/// The end of a transformer block in training (the kernel `residual_norm_train`):
/// `LayerNorm((x + bias) · dropout + residual) · γ + β` per row of `x, residual: [rows, cols]`,
/// `params = [bias, γ, β]` (`[3, cols]`), the dropout factor of element `row · cols + j`.
pub(super) fn residual_norm_train(
    eps: f32,
    (seed, threshold, keep): (u64, u32, f32),
    (x, x_l): (&CpuStorage, &Layout),
    (residual, residual_l): (&CpuStorage, &Layout),
    (params, params_l): (&CpuStorage, &Layout),
) -> Result<CpuStorage> {
    let op = "residual-norm-train";
    let cols = *x_l.shape().dims().last().unwrap_or(&0);
    if cols == 0 || residual_l.shape() != x_l.shape() || params_l.shape().dims() != [3, cols] {
        candle_core::bail!(
            "{op}: x {:?}, residual {:?} and params {:?} disagree",
            x_l.shape(),
            residual_l.shape(),
            params_l.shape()
        );
    }
    let (x, residual, params) =
        (f32_slice(x, x_l, op)?, f32_slice(residual, residual_l, op)?, f32_slice(params, params_l, op)?);
    let (bias, gamma, beta) = (&params[..cols], &params[cols..2 * cols], &params[2 * cols..]);
    let mut out = vec![0f32; x.len()];
    let mut factors = vec![0f32; cols];
    for (row, ((x, r), out)) in
        x.chunks_exact(cols).zip(residual.chunks_exact(cols)).zip(out.chunks_exact_mut(cols)).enumerate()
    {
        mask_factors(seed, threshold, keep, (row * cols) as u64, &mut factors);
        let s: Vec<f32> = x.iter().zip(bias).zip(&factors).zip(r).map(|(((x, b), f), r)| (x + b) * f + r).collect();
        let (mean, rstd) = moments(&s, eps);
        for (j, o) in out.iter_mut().enumerate() {
            *o = (s[j] - mean) * rstd * gamma[j] + beta[j];
        }
    }
    Ok(CpuStorage::F32(out))
}

/// LayerNorm's backward pass (the kernel `layer_norm_train_grad_f32`): with x̂ = (x − mean)·rstd
/// and g = dy·γ, dx = rstd · (g − mean(g) − x̂ · mean(g·x̂)); out `[2, rows, cols]`: dx, then x̂.
pub(super) fn layer_norm_train_grad(
    eps: f32,
    (x, x_l): (&CpuStorage, &Layout),
    (gamma, gamma_l): (&CpuStorage, &Layout),
    (dy, dy_l): (&CpuStorage, &Layout),
) -> Result<CpuStorage> {
    let op = "layer-norm-train-grad";
    let cols = *x_l.shape().dims().last().unwrap_or(&0);
    if cols == 0 || gamma_l.shape().dims() != [cols] || dy_l.shape() != x_l.shape() {
        candle_core::bail!("{op}: x {:?}, gamma {:?} and dy {:?} disagree", x_l.shape(), gamma_l.shape(), dy_l.shape());
    }
    let (x, gamma, dy) = (f32_slice(x, x_l, op)?, f32_slice(gamma, gamma_l, op)?, f32_slice(dy, dy_l, op)?);
    let mut out = vec![0f32; 2 * x.len()];
    let (dx, xhat) = out.split_at_mut(x.len());
    let rows =
        x.chunks_exact(cols).zip(dy.chunks_exact(cols)).zip(dx.chunks_exact_mut(cols).zip(xhat.chunks_exact_mut(cols)));
    for ((x, dy), (dx, xhat)) in rows {
        let (mean, rstd) = moments(x, eps);
        xhat.iter_mut().zip(x).for_each(|(h, x)| *h = (x - mean) * rstd);
        let g: Vec<f32> = dy.iter().zip(gamma).map(|(d, g)| d * g).collect();
        let a = g.iter().sum::<f32>() / cols as f32;
        let b = g.iter().zip(xhat.iter()).map(|(g, h)| g * h).sum::<f32>() / cols as f32;
        for ((d, g), h) in dx.iter_mut().zip(&g).zip(xhat.iter()) {
            *d = rstd * (g - a - h * b);
        }
    }
    Ok(CpuStorage::F32(out))
}

/// LayerNorm in training (the kernel `layer_norm_train_f32`): `(x − mean) · rstd · γ + β` per row.
pub(super) fn layer_norm_train(
    eps: f32,
    (x, x_l): (&CpuStorage, &Layout),
    (gamma, gamma_l): (&CpuStorage, &Layout),
    (beta, beta_l): (&CpuStorage, &Layout),
) -> Result<CpuStorage> {
    let op = "layer-norm-train";
    let cols = *x_l.shape().dims().last().unwrap_or(&0);
    if cols == 0 || gamma_l.shape().dims() != [cols] || beta_l.shape().dims() != [cols] {
        candle_core::bail!(
            "{op}: x {:?}, gamma {:?} and beta {:?} disagree",
            x_l.shape(),
            gamma_l.shape(),
            beta_l.shape()
        );
    }
    let (x, gamma, beta) = (f32_slice(x, x_l, op)?, f32_slice(gamma, gamma_l, op)?, f32_slice(beta, beta_l, op)?);
    let mut out = vec![0f32; x.len()];
    for (x, out) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let (mean, rstd) = moments(x, eps);
        for (j, o) in out.iter_mut().enumerate() {
            *o = (x[j] - mean) * rstd * gamma[j] + beta[j];
        }
    }
    Ok(CpuStorage::F32(out))
}

/// A dense layer's bias in training (the kernels `bias_activation_train` and, with `grad`,
/// `bias_gelu_train_grad`): `x + bias` or exact `gelu(x + bias)`; backward `dy · gelu'(x + bias)`.
pub(super) fn bias_activation_train(
    gelu: bool,
    (x, x_l): (&CpuStorage, &Layout),
    (bias, bias_l): (&CpuStorage, &Layout),
    grad: Option<(&CpuStorage, &Layout)>,
) -> Result<CpuStorage> {
    use crate::layers::fused::math::{gelu_erf, gelu_erf_derivative};
    let op = "bias-activation-train";
    let cols = *x_l.shape().dims().last().unwrap_or(&0);
    if cols == 0 || bias_l.shape().dims() != [cols] {
        candle_core::bail!("{op}: x {:?} and bias {:?} disagree", x_l.shape(), bias_l.shape());
    }
    let (x, bias) = (f32_slice(x, x_l, op)?, f32_slice(bias, bias_l, op)?);
    let z = x.iter().enumerate().map(|(i, v)| v + bias[i % cols]);
    let out = match grad {
        Some((g, g_l)) if g_l.shape() == x_l.shape() => {
            z.zip(f32_slice(g, g_l, op)?).map(|(z, g)| g * gelu_erf_derivative(z)).collect()
        }
        Some((_, g_l)) => candle_core::bail!("{op}: gradient {:?} and x {:?} disagree", g_l.shape(), x_l.shape()),
        None if gelu => z.map(gelu_erf).collect(),
        None => z.collect(),
    };
    Ok(CpuStorage::F32(out))
}
