//! Exact (erf) GELU as one op with its backward pass.

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::fused::math::{gelu_erf, gelu_erf_derivative, ELEMENTS_PER_TASK};
use crate::layers::fused::multiversion;
use crate::layers::fused::storage::{f32_data, f32_slice};

multiversion! {
    /// `xs = GELU(xs)` (exact, [`gelu_erf`]), on the calling thread.
    pub fn gelu_in_place(xs: &mut [f32]) {
        for x in xs.iter_mut() {
            *x = gelu_erf(*x);
        }
    }
}

/// Exact GELU, `x · Φ(x)` with `Φ(x) = (1 + erf(x/√2)) / 2` (f32, contiguous), with a vectorised
/// erf (see [`gelu_erf`]); backward `dy · (Φ(x) + x · φ(x))`.
pub struct FusedGeluErf;

impl CustomOp1 for FusedGeluErf {
    fn name(&self) -> &'static str {
        "fused-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let mut out = f32_slice(storage, layout, self.name())?.to_vec();
        out.par_chunks_mut(ELEMENTS_PER_TASK).for_each(gelu_in_place);
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let (x, dy) = (f32_data(arg)?, f32_data(grad_res)?);
        let mut dx = vec![0f32; x.len()];
        dx.par_chunks_mut(ELEMENTS_PER_TASK)
            .zip(x.par_chunks(ELEMENTS_PER_TASK))
            .zip(dy.par_chunks(ELEMENTS_PER_TASK))
            .for_each(|((dx, x), dy)| gelu_backward(dx, x, dy));
        multiversion! {
            fn gelu_backward(dx: &mut [f32], x: &[f32], dy: &[f32]) {
                for ((d, &x), &g) in dx.iter_mut().zip(x).zip(dy) {
                    *d = g * gelu_erf_derivative(x);
                }
            }
        }
        Ok(Some(Tensor::from_vec(dx, arg.shape(), arg.device())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    #[test]
    fn fused_gelu_matches_candles_exact_gelu_and_its_gradient() {
        let normals = Normals::new(59);
        let device = Device::Cpu;
        let x = Var::from_tensor(&normals.tensor(0f32, 3.0, (7, 301), &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (7, 301), &device).unwrap();
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
}
