//! Softmax over the last dimension as one op with its backward pass.

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::fused::math::{fast_exp, lanes_max, lanes_sum, ROWS_PER_TASK};
use crate::layers::fused::storage::{f32_data, f32_slice, last_dim};

/// Softmax over the last dimension (f32, contiguous).
pub struct FusedSoftmax;

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
        let (y, dy) = (f32_data(res)?, f32_data(grad_res)?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::layers::softmax_last_dim;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    #[test]
    fn fused_softmax_matches_the_composition_and_its_gradient() {
        let normals = Normals::new(63);
        let device = Device::Cpu;
        let x = Var::from_tensor(&normals.tensor(0f32, 3.0, (3, 5, 37), &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (3, 5, 37), &device).unwrap();
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
}
