//! `x + bias` over rows as one CPU op whose backward pass sums the bias gradient over rows in
//! one vectorised pass. candle's `broadcast_add` backward reduces `dy` over every leading
//! dimension with a strided loop per output column (≈2 ns per element); here each rayon task
//! adds its rows into lane-wise partial sums, added up in a fixed order. The forward values
//! are those of `broadcast_add` (one f32 addition per element; tested bit-identical).
//! Reference: `torch.nn.Linear`'s bias.

use candle_core::{CpuStorage, CustomOp2, InplaceOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::fused::math::{rows_task_len, sum_partials};
use crate::layers::fused::multiversion;
use crate::layers::fused::storage::{f32_data, last_dim, rows_and_bias, rows_and_bias_mut};

/// `x + bias` with `bias` added to every row of `x` (f32, contiguous); as an in-place op
/// (`inplace_op2`, no gradient), on `x`'s own storage.
pub struct FusedBiasAdd;

multiversion! {
    /// `xs += bias` for the rows of `xs` (rows of `bias.len()`).
    fn add_rows(xs: &mut [f32], bias: &[f32]) {
        for row in xs.chunks_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(x, &b)| *x += b);
        }
    }
}

/// `xs += bias` on every row, in parallel.
fn add_in_place(xs: &mut [f32], bias: &[f32]) {
    xs.par_chunks_mut(rows_task_len(bias.len())).for_each(|rows| add_rows(rows, bias));
}

multiversion! {
    /// Adds every row of `dy` (rows of `sums.len()`) to `sums`.
    fn sum_rows(sums: &mut [f32], dy: &[f32]) {
        for row in dy.chunks(sums.len()) {
            sums.iter_mut().zip(row).for_each(|(s, &g)| *s += g);
        }
    }
}

impl CustomOp2 for FusedBiasAdd {
    fn name(&self) -> &'static str {
        "fused-bias-add"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, bias, _) = rows_and_bias((s1, l1), (s2, l2), CustomOp2::name(self))?;
        let mut out = x.to_vec();
        add_in_place(&mut out, bias);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    /// `dx = dy`; `dbias = Σ_rows dy`.
    fn bwd(
        &self,
        arg1: &Tensor,
        _arg2: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let n = last_dim(arg1.shape())?;
        let dy = grad_res.contiguous()?;
        let [dbias] = {
            let values = f32_data(&dy)?;
            let partials = values.par_chunks(rows_task_len(n)).map(|rows| {
                let mut sums = vec![0f32; n];
                sum_rows(&mut sums, rows);
                [sums]
            });
            sum_partials(partials.collect::<Vec<_>>().into_iter(), n)
        };
        Ok((Some(dy), Some(Tensor::from_vec(dbias, n, arg1.device())?)))
    }
}

impl InplaceOp2 for FusedBiasAdd {
    fn name(&self) -> &'static str {
        "fused-bias-add"
    }

    fn cpu_fwd(&self, dst: &mut CpuStorage, dst_l: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let (xs, bias) = rows_and_bias_mut((dst, dst_l), (s2, l2), InplaceOp2::name(self))?;
        add_in_place(xs, bias);
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
    fn fused_bias_add_matches_broadcast_add_and_its_gradients() {
        let normals = Normals::new(96);
        let device = Device::Cpu;
        // 3 × 70 rows of 301: several rayon tasks and a row length that is not a multiple of 16.
        let x = Var::from_tensor(&normals.tensor(0f32, 3.0, (3, 70, 301), &device).unwrap()).unwrap();
        let bias = Var::from_tensor(&normals.tensor(0f32, 1.0, 301, &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (3, 70, 301), &device).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                x.as_tensor().apply_op2(bias.as_tensor(), FusedBiasAdd).unwrap()
            } else {
                x.as_tensor().broadcast_add(bias.as_tensor()).unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            [y, grads.get(x.as_tensor()).unwrap().clone(), grads.get(bias.as_tensor()).unwrap().clone()]
        };
        let (fused, composed) = (run(true), run(false));
        assert_eq!(max_diff(&fused[0], &composed[0]), 0.0, "the forward values are broadcast_add's");
        assert_eq!(max_diff(&fused[1], &composed[1]), 0.0, "dx is dy");
        // dbias sums 210 rows of gradients of order 1 (sums up to ~±50), in another order than
        // candle's: rounding reaches 2.5e-5 on some random draws (seen failing a 2e-5 bound), so
        // the bound is the project's f32 bar.
        let d = max_diff(&fused[2], &composed[2]);
        assert!(d < 1e-4, "dbias: max abs diff {d}");
    }

    #[test]
    fn a_bias_of_the_wrong_length_is_an_error() {
        let device = Device::Cpu;
        let x = Tensor::zeros((3, 8), candle_core::DType::F32, &device).unwrap();
        let bias = Tensor::zeros(7, candle_core::DType::F32, &device).unwrap();
        let err = x.apply_op2(&bias, FusedBiasAdd).unwrap_err().to_string();
        assert!(err.contains("a bias of 7 for rows of 8"), "{err}");
        let err = x.inplace_op2(&bias, &FusedBiasAdd).unwrap_err().to_string();
        assert!(err.contains("a bias of 7 for rows of 8"), "{err}");
    }

    #[test]
    fn in_place_bias_add_is_broadcast_add() {
        let normals = Normals::new(133);
        let device = Device::Cpu;
        let x = normals.tensor(0f32, 3.0, (3, 70, 301), &device).unwrap();
        let bias = normals.tensor(0f32, 1.0, 301, &device).unwrap();
        let want = x.broadcast_add(&bias).unwrap();
        x.inplace_op2(&bias, &FusedBiasAdd).unwrap();
        assert_eq!(max_diff(&x, &want), 0.0);
    }
}
