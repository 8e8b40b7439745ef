//! `LayerNorm(dropout(x + bias) + residual)` as one CPU op with its backward pass: the end of
//! BERT's attention and feed-forward blocks (the output projection's bias, hidden dropout, the
//! residual connection and LayerNorm) in one pass over the rows, where the composition takes
//! five to seven passes and keeps each intermediate alive for the backward pass. The dropout
//! mask is regenerated from its seed in the backward pass, and the summed input `z` is
//! recomputed, so nothing but the inputs is kept. Gradient-checked against the composition
//! (tests below).
//! Reference: transformers `modeling_bert.py: BertSelfOutput`, `BertOutput`.

use candle_core::{CpuStorage, CustomOp3, InplaceOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::dropout::SeededDropout;
use crate::layers::fused::math::{normalize_row, normalize_row_backward, sum_partials, ROWS_PER_TASK};
use crate::layers::fused::storage::{f32_slice, f32_slice_mut, last_dim};
use crate::layers::fused::{f32_data, f32_slices, multiversion};

/// `LayerNorm(dropout(x + bias) + residual) · γ + β` over rows of `n` (f32, contiguous):
/// arguments `x`, `residual` (same shape) and `params`, the rows `[bias, γ, β]` (`[3, n]`) or,
/// without a bias, `[γ, β]` (`[2, n]`). As an in-place op (`inplace_op3`, no gradient), the
/// result replaces `x`.
#[derive(Debug, Clone, Copy)]
pub struct FusedResidualNorm {
    /// LayerNorm epsilon, inside the square root.
    pub eps: f32,
    /// Hidden dropout in training (`None`: identity).
    pub dropout: Option<SeededDropout>,
}

/// The rows of `params`: the bias (zeros when there is none), γ and β.
struct Params<'a> {
    bias: std::borrow::Cow<'a, [f32]>,
    gamma: &'a [f32],
    beta: &'a [f32],
    has_bias: bool,
}

impl<'a> Params<'a> {
    fn split(params: &'a [f32], n: usize) -> Result<Self> {
        match params.len() / n {
            3 if params.len() == 3 * n => Ok(Self {
                bias: (&params[..n]).into(),
                gamma: &params[n..2 * n],
                beta: &params[2 * n..],
                has_bias: true,
            }),
            2 if params.len() == 2 * n => {
                Ok(Self { bias: vec![0f32; n].into(), gamma: &params[..n], beta: &params[n..], has_bias: false })
            }
            _ => candle_core::bail!("fused-residual-norm: {} parameters for rows of {n} (want 2n or 3n)", params.len()),
        }
    }
}

multiversion! {
    /// `z = keep ⊙ (z + bias) + residual` for one row (`z` holds `x` on entry).
    fn residual_sum(z: &mut [f32], residual: &[f32], bias: &[f32], keep: &[f32]) {
        for (((z, &r), &b), &k) in z.iter_mut().zip(residual).zip(bias).zip(keep) {
            *z = k * (*z + b) + r;
        }
    }
}

impl FusedResidualNorm {
    /// The dropout factors of row `row` (all 1 without dropout).
    fn keep_row(&self, row: usize, keep: &mut [f32]) {
        if let Some(dropout) = self.dropout {
            dropout.factors((row * keep.len()) as u64, keep);
        }
    }

    /// The op's output over `xs` (`x` on entry), in place, in parallel.
    fn forward_in_place(&self, xs: &mut [f32], residual: &[f32], params: &[f32], n: usize) -> Result<()> {
        if xs.len() != residual.len() {
            candle_core::bail!(
                "fused-residual-norm: input of {} and residual of {} values differ",
                xs.len(),
                residual.len()
            );
        }
        let p = Params::split(params, n)?;
        let chunk = n * ROWS_PER_TASK;
        xs.par_chunks_mut(chunk).zip(residual.par_chunks(chunk)).enumerate().for_each(|(task, (xs, residual))| {
            let mut keep = vec![1f32; n];
            for (i, (z, r)) in xs.chunks_mut(n).zip(residual.chunks(n)).enumerate() {
                self.keep_row(task * ROWS_PER_TASK + i, &mut keep);
                residual_sum(z, r, &p.bias, &keep);
                normalize_row(z, p.gamma, p.beta, self.eps);
            }
        });
        Ok(())
    }
}

impl CustomOp3 for FusedResidualNorm {
    fn name(&self) -> &'static str {
        "fused-residual-norm"
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
        let [x, residual, params] = f32_slices([(s1, l1), (s2, l2), (s3, l3)], CustomOp3::name(self))?;
        let n = last_dim(l1.shape())?;
        if l2.shape() != l1.shape() {
            candle_core::bail!("fused-residual-norm: input {:?} and residual {:?} differ", l1.shape(), l2.shape());
        }
        let mut out = x.to_vec();
        self.forward_in_place(&mut out, residual, params, n)?;
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// `dz` is LayerNorm's backward pass of `z` (recomputed); `dresidual = dz`,
    /// `dx = dz ⊙ keep`, `dbias = Σ_rows dx`, `dγ = Σ_rows dy ⊙ ẑ`, `dβ = Σ_rows dy`.
    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        arg3: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let n = last_dim(arg1.shape())?;
        let (x, residual, params, dy) = (f32_data(arg1)?, f32_data(arg2)?, f32_data(arg3)?, f32_data(grad_res)?);
        let p = Params::split(&params, n)?;
        let mut dz = vec![0f32; x.len()];
        let chunk = n * ROWS_PER_TASK;
        // dx is dz ⊙ keep with dropout, dz itself without (then it is not allocated).
        let mut dx = vec![0f32; if self.dropout.is_some() { x.len() } else { 0 }];
        let dx_chunks: Vec<Option<&mut [f32]>> = if self.dropout.is_some() {
            dx.chunks_mut(chunk).map(Some).collect()
        } else {
            (0..x.len().div_ceil(chunk)).map(|_| None).collect()
        };
        let partials = dz
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .zip(residual.par_chunks(chunk))
            .zip(dy.par_chunks(chunk))
            .zip(dx_chunks)
            .enumerate()
            .map(|(task, ((((dz, x), residual), dy), dx))| {
                let (mut dbias, mut dgamma, mut dbeta) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
                let (mut keep, mut z) = (vec![1f32; n], vec![0f32; n]);
                let mut dx_rows = dx.map(|dx| dx.chunks_mut(n));
                let rows = dz.chunks_mut(n).zip(x.chunks(n)).zip(residual.chunks(n)).zip(dy.chunks(n));
                for (i, (((dz, x), r), dy)) in rows.enumerate() {
                    self.keep_row(task * ROWS_PER_TASK + i, &mut keep);
                    z.copy_from_slice(x);
                    residual_sum(&mut z, r, &p.bias, &keep);
                    normalize_row_backward(dz, &mut z, dy, p.gamma, &mut dgamma, &mut dbeta, self.eps);
                    let d_input: &[f32] = match dx_rows.as_mut().and_then(Iterator::next) {
                        Some(dx) => {
                            dx.iter_mut().zip(dz.iter()).zip(&keep).for_each(|((d, &g), &k)| *d = k * g);
                            dx
                        }
                        None => dz,
                    };
                    d_input.iter().zip(dbias.iter_mut()).for_each(|(&d, db)| *db += d);
                }
                [dbias, dgamma, dbeta]
            })
            .collect::<Vec<_>>();
        let [dbias, dgamma, dbeta] = sum_partials(partials.into_iter(), n);
        let device = arg1.device();
        let dz = Tensor::from_vec(dz, arg1.shape(), device)?;
        let dx = if self.dropout.is_some() { Tensor::from_vec(dx, arg1.shape(), device)? } else { dz.clone() };
        let dparams = if p.has_bias { [dbias, dgamma, dbeta].concat() } else { [dgamma, dbeta].concat() };
        let dparams = Tensor::from_vec(dparams, arg3.shape(), device)?;
        Ok((Some(dx), Some(dz), Some(dparams)))
    }
}

impl InplaceOp3 for FusedResidualNorm {
    fn name(&self) -> &'static str {
        "fused-residual-norm"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let name = InplaceOp3::name(self);
        let (residual, params) = (f32_slice(s2, l2, name)?, f32_slice(s3, l3, name)?);
        let n = last_dim(dst_l.shape())?;
        self.forward_in_place(f32_slice_mut(dst, dst_l, name)?, residual, params, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::seeded::Normals;
    use candle_core::{Device, Var, D};

    /// The composition: bias add, dropout (the same mask), residual add, LayerNorm.
    fn composed(x: &Tensor, residual: &Tensor, params: &Tensor, op: FusedResidualNorm) -> Tensor {
        let rows = params.dim(0).unwrap();
        let mut y = x.clone();
        if rows == 3 {
            y = y.broadcast_add(&params.get(0).unwrap()).unwrap();
        }
        if let Some(dropout) = op.dropout {
            y = dropout.apply(&y).unwrap();
        }
        let z = (y + residual).unwrap();
        let mean = z.mean_keepdim(D::Minus1).unwrap();
        let centered = z.broadcast_sub(&mean).unwrap();
        let var = centered.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        let normed = centered.broadcast_div(&(var + op.eps as f64).unwrap().sqrt().unwrap()).unwrap();
        let (gamma, beta) = (params.get(rows - 2).unwrap(), params.get(rows - 1).unwrap());
        normed.broadcast_mul(&gamma).unwrap().broadcast_add(&beta).unwrap()
    }

    /// Output and gradients of x, residual and params, fused and composed.
    fn both(op: FusedResidualNorm, param_rows: usize) -> Vec<(Tensor, Tensor)> {
        let normals = Normals::new(227);
        let device = Device::Cpu;
        // 3 × 13 rows of 72: more than one task's rows (16) and rows not a multiple of 16.
        let shape = (3, 13, 72);
        let x = Var::from_tensor(&normals.tensor(0.5f32, 2.0, shape, &device).unwrap()).unwrap();
        let residual = Var::from_tensor(&normals.tensor(-1f32, 1.0, shape, &device).unwrap()).unwrap();
        let params = Var::from_tensor(&normals.tensor(0.5f32, 0.7, (param_rows, 72), &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, shape, &device).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                x.as_tensor().apply_op3(residual.as_tensor(), params.as_tensor(), op).unwrap()
            } else {
                composed(x.as_tensor(), residual.as_tensor(), params.as_tensor(), op)
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let grad = |v: &Var| grads.get(v.as_tensor()).unwrap().clone();
            vec![y.clone(), grad(&x), grad(&residual), grad(&params)]
        };
        run(true).into_iter().zip(run(false)).collect()
    }

    fn assert_close(pairs: Vec<(Tensor, Tensor)>) {
        for (name, (fused, composed)) in ["output", "dx", "dresidual", "dparams"].iter().zip(pairs) {
            let d = max_diff(&fused, &composed);
            assert!(d < 2e-5, "{name}: max abs diff {d}");
        }
    }

    #[test]
    fn matches_the_composition_with_bias_and_dropout() {
        assert_close(both(FusedResidualNorm { eps: 1e-12, dropout: Some(SeededDropout { p: 0.1, seed: 99 }) }, 3));
    }

    #[test]
    fn matches_the_composition_without_bias_or_dropout() {
        assert_close(both(FusedResidualNorm { eps: 1e-5, dropout: None }, 2));
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let device = Device::Cpu;
        let op = FusedResidualNorm { eps: 1e-5, dropout: None };
        let x = Tensor::zeros((4, 8), candle_core::DType::F32, &device).unwrap();
        let params = Tensor::zeros((4, 8), candle_core::DType::F32, &device).unwrap();
        let err = x.apply_op3(&x, &params, op).unwrap_err().to_string();
        assert!(err.contains("32 parameters for rows of 8"), "{err}");
        let other = Tensor::zeros((2, 8), candle_core::DType::F32, &device).unwrap();
        let err = x.apply_op3(&other, &params.narrow(0, 0, 2).unwrap(), op).unwrap_err().to_string();
        assert!(err.contains("differ"), "{err}");
        let err = x.inplace_op3(&other, &params.narrow(0, 0, 2).unwrap(), &op).unwrap_err().to_string();
        assert!(err.contains("differ"), "{err}");
        let err = x.inplace_op3(&x.zeros_like().unwrap(), &params, &op).unwrap_err().to_string();
        assert!(err.contains("32 parameters for rows of 8"), "{err}");
    }

    #[test]
    fn in_place_is_the_op() {
        let normals = Normals::new(283);
        let device = Device::Cpu;
        let op = FusedResidualNorm { eps: 1e-12, dropout: None };
        let x = normals.tensor(0.5f32, 2.0, (3, 13, 72), &device).unwrap();
        let residual = normals.tensor(-1f32, 1.0, (3, 13, 72), &device).unwrap();
        let params = normals.tensor(0.5f32, 0.7, (3, 72), &device).unwrap();
        let want = x.apply_op3_no_bwd(&residual, &params, &op).unwrap();
        x.inplace_op3(&residual, &params, &op).unwrap();
        assert_eq!(max_diff(&x, &want), 0.0);
    }
}
