//! `GELU(x + bias)` as one CPU op with its backward pass: the feed-forward block's first dense
//! layer adds its bias and applies exact GELU in one pass over the `[tokens, intermediate]`
//! product instead of three (bias add, GELU, and their backward passes each reading and writing
//! the whole tensor). Gradient-checked against `(x + bias).gelu_erf()` (tests below).
//! Reference: transformers `modeling_bert.py: BertIntermediate` with `hidden_act="gelu"`.

use candle_core::{CpuStorage, CustomOp2, InplaceOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::fused::math::{gelu_erf, gelu_erf_derivative, rows_task_len, sum_partials};
use crate::layers::fused::multiversion;
use crate::layers::fused::storage::{f32_data, last_dim, rows_and_bias, rows_and_bias_mut};

/// `x · Φ(x)` of `x = product + bias` over rows of `bias.len()` (f32, contiguous); as an
/// in-place op (`inplace_op2`, no gradient), on the product's own storage.
pub struct FusedBiasGeluErf;

multiversion! {
    /// `xs = GELU(xs + bias)` for the rows of `xs` (rows of `bias.len()`).
    fn bias_gelu(xs: &mut [f32], bias: &[f32]) {
        for row in xs.chunks_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(x, &b)| *x = gelu_erf(*x + b));
        }
    }
}

/// `xs = GELU(xs + bias)` on every row, in parallel.
fn bias_gelu_in_place(xs: &mut [f32], bias: &[f32]) {
    xs.par_chunks_mut(rows_task_len(bias.len())).for_each(|rows| bias_gelu(rows, bias));
}

multiversion! {
    /// `dx = dy · GELU'(x + bias)` for the rows of `x`, adding each row of `dx` to `dbias`.
    fn bias_gelu_backward(dx: &mut [f32], x: &[f32], dy: &[f32], bias: &[f32], dbias: &mut [f32]) {
        let n = bias.len();
        for ((d, x), dy) in dx.chunks_mut(n).zip(x.chunks(n)).zip(dy.chunks(n)) {
            for ((((d, &x), &g), &b), db) in d.iter_mut().zip(x).zip(dy).zip(bias).zip(dbias.iter_mut()) {
                *d = g * gelu_erf_derivative(x + b);
                *db += *d;
            }
        }
    }
}

impl CustomOp2 for FusedBiasGeluErf {
    fn name(&self) -> &'static str {
        "fused-bias-gelu-erf"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, bias, _) = rows_and_bias((s1, l1), (s2, l2), CustomOp2::name(self))?;
        let mut out = x.to_vec();
        bias_gelu_in_place(&mut out, bias);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// `dx = dy · (Φ(u) + u · φ(u))` with `u = x + bias`; `dbias = Σ_rows dx`.
    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let n = last_dim(arg1.shape())?;
        let (x, bias, dy) = (f32_data(arg1)?, f32_data(arg2)?, f32_data(grad_res)?);
        let mut dx = vec![0f32; x.len()];
        let chunk = rows_task_len(n);
        let partials = dx
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .zip(dy.par_chunks(chunk))
            .map(|((dx, x), dy)| {
                let mut dbias = vec![0f32; n];
                bias_gelu_backward(dx, x, dy, &bias, &mut dbias);
                [dbias]
            })
            .collect::<Vec<_>>();
        let [dbias] = sum_partials(partials.into_iter(), n);
        let device = arg1.device();
        Ok((Some(Tensor::from_vec(dx, arg1.shape(), device)?), Some(Tensor::from_vec(dbias, n, device)?)))
    }
}

impl InplaceOp2 for FusedBiasGeluErf {
    fn name(&self) -> &'static str {
        "fused-bias-gelu-erf"
    }

    fn cpu_fwd(&self, dst: &mut CpuStorage, dst_l: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let (xs, bias) = rows_and_bias_mut((dst, dst_l), (s2, l2), InplaceOp2::name(self))?;
        bias_gelu_in_place(xs, bias);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    #[test]
    fn fused_bias_gelu_matches_the_composition_and_its_gradients() {
        let normals = Normals::new(104);
        let device = Device::Cpu;
        // 2 × 50 rows of 301: several rayon tasks and a row length that is not a multiple of 16.
        let x = Var::from_tensor(&normals.tensor(0f32, 3.0, (2, 50, 301), &device).unwrap()).unwrap();
        let bias = Var::from_tensor(&normals.tensor(0f32, 1.0, 301, &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (2, 50, 301), &device).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                x.as_tensor().apply_op2(bias.as_tensor(), FusedBiasGeluErf).unwrap()
            } else {
                x.as_tensor().broadcast_add(bias.as_tensor()).unwrap().gelu_erf().unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            [y, grads.get(x.as_tensor()).unwrap().clone(), grads.get(bias.as_tensor()).unwrap().clone()]
        };
        let (fused, composed) = (run(true), run(false));
        for (name, (a, b)) in ["output", "dx", "dbias"].iter().zip(fused.iter().zip(&composed)) {
            // dbias sums 100 rows of gradients of order 1.
            let tolerance = if *name == "dbias" { 2e-5 } else { 2e-6 };
            let d = max_diff(a, b);
            assert!(d < tolerance, "{name}: max abs diff {d}");
        }
    }

    #[test]
    fn a_bias_of_the_wrong_length_is_an_error() {
        let device = Device::Cpu;
        let x = Tensor::zeros((3, 8), candle_core::DType::F32, &device).unwrap();
        let bias = Tensor::zeros(7, candle_core::DType::F32, &device).unwrap();
        let err = x.apply_op2(&bias, FusedBiasGeluErf).unwrap_err().to_string();
        assert!(err.contains("a bias of 7 for rows of 8"), "{err}");
        let err = x.inplace_op2(&bias, &FusedBiasGeluErf).unwrap_err().to_string();
        assert!(err.contains("a bias of 7 for rows of 8"), "{err}");
    }

    #[test]
    fn in_place_bias_gelu_is_the_op() {
        let normals = Normals::new(140);
        let device = Device::Cpu;
        let x = normals.tensor(0f32, 3.0, (2, 50, 301), &device).unwrap();
        let bias = normals.tensor(0f32, 1.0, 301, &device).unwrap();
        let want = x.apply_op2_no_bwd(&bias, &FusedBiasGeluErf).unwrap();
        x.inplace_op2(&bias, &FusedBiasGeluErf).unwrap();
        assert_eq!(max_diff(&x, &want), 0.0);
    }
}
