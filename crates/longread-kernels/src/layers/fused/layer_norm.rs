//! LayerNorm over the last dimension as one op with its backward pass.

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::layers::fused::math::{normalize_row, normalize_row_backward, sum_partials, ROWS_PER_TASK};
use crate::layers::fused::storage::{f32_data, f32_slices, last_dim};

/// `LayerNorm(x) · weight + bias` over the last dimension (as torch: biased variance, eps
/// inside the square root); f32, contiguous.
pub struct FusedLayerNorm {
    /// LayerNorm epsilon, inside the square root.
    pub eps: f32,
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
        let (x, w, dy) = (f32_data(arg1)?, f32_data(arg2)?, f32_data(grad_res)?);
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

#[cfg(test)]
mod tests {
    use crate::layers::fused::max_diff;
    use crate::layers::LayerNorm;
    use crate::seeded::Normals;
    use candle_core::{DType, Device, Var};

    #[test]
    fn fused_layer_norm_matches_the_composition_and_its_gradients() {
        let normals = Normals::new(89);
        let device = Device::Cpu;
        let vars = candle_nn::VarMap::new();
        let vb = candle_nn::VarBuilder::from_varmap(&vars, DType::F32, &device);
        let norm = LayerNorm::load(vb, 48, 1e-5).unwrap();
        // Non-trivial weight and bias.
        for (name, var) in vars.data().lock().unwrap().iter() {
            let offset = if name.ends_with("weight") { 1.0 } else { 0.0 };
            var.set(&(normals.tensor(0f32, 0.5, 48, &device).unwrap() + offset).unwrap()).unwrap();
        }
        let x = Var::from_tensor(&(normals.tensor(0f32, 2.0, (4, 9, 48), &device).unwrap() + 3.0).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (4, 9, 48), &device).unwrap();
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
