//! The end of a transformer block in training on the GPU route as one op:
//! `LayerNorm(dropout(product + bias) + residual)`, keeping nothing but its inputs between the
//! forward and backward passes.
//!
//! The composition it replaces (`BlockOutput::forward_composed`: the bias op, a dropout mask and
//! its product, the residual sum, and LayerNorm with casts to f32 and back) kept per block the
//! biased product, the mask, the dropped product, the sum in bf16 and f32 and the f32 LayerNorm
//! output: about 6 MB per 512-token chunk of roberta-base in bf16, twice per layer, of which
//! the op keeps none (its inputs, the dense product and the residual, are there anyway). Its
//! forward pass is one kernel (`residual_norm_train` in `kernels.cu`, f32 arithmetic); its
//! backward pass recomputes the sum from the inputs (the dropout mask from its seed) and runs
//! [`LayerNormTrainGrad`]'s kernel on it. Tested on the CPU with `reference`'s f32 kernels
//! against the composition (values and gradients), and on a GPU by the CUDA training tests.

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};

use super::reference;
use super::training::{column_sum, LayerNormTrain, LayerNormTrainGrad};
use crate::layers::dropout::SeededDropout;

/// `product.apply_op3(&residual, &params, op)`: `product, residual: [..., n]` (one dtype, f32
/// or bf16, contiguous), `params = [bias, γ, β]` (`[3, n]`, f32) → `[..., n]` in the product's
/// dtype. Gradients for all three.
#[derive(Debug, Clone, Copy)]
pub struct ResidualNormTrain {
    /// LayerNorm epsilon, inside the square root.
    pub eps: f32,
    /// Dropout on the biased product (`None`: none).
    pub dropout: Option<SeededDropout>,
}

impl ResidualNormTrain {
    /// (seed, threshold, keep factor) for the kernels; `(0, 0, 1.0)` without dropout.
    fn dropout_args(&self) -> (u64, u32, f32) {
        self.dropout.map_or((0, 0, 1.0), |d| (d.seed, d.threshold(), d.scale()))
    }
}

impl CustomOp3 for ResidualNormTrain {
    fn name(&self) -> &'static str {
        "residual-norm-train"
    }

    /// The CPU side runs `reference`'s f32 kernel: for tests (the CPU route trains with
    /// `layers::fused::FusedResidualNorm`).
    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        residual: &CpuStorage,
        residual_l: &Layout,
        params: &CpuStorage,
        params_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let args = self.dropout_args();
        let out = reference::residual_norm_train(self.eps, args, (x, x_l), (residual, residual_l), (params, params_l))?;
        Ok((out, x_l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        residual: &candle_core::CudaStorage,
        residual_l: &Layout,
        params: &candle_core::CudaStorage,
        params_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let args = self.dropout_args();
        let out =
            super::launch::residual_norm_train(self.eps, args, (x, x_l), (residual, residual_l), (params, params_l))?;
        Ok((out, x_l.shape().clone()))
    }

    /// Recomputes `s = dropout(product + bias) + residual` in f32, then LayerNorm's backward
    /// pass on it; the product's and the bias's gradients go back through the same mask. On a
    /// GPU one kernel where the row fits its registers (`bwd_fused`, `cuda` builds), else composed.
    ///
    /// # Shapes
    /// `grad: [..., n]` → `product, residual: [..., n]`, `params: [3, n]`
    fn bwd(
        &self,
        x: &Tensor,
        residual: &Tensor,
        params: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (x, residual, params) = (x.detach(), residual.detach(), params.detach());
        #[cfg(feature = "cuda")]
        if let Some((d_x, d_residual, d_params)) = self.bwd_fused(&x, &residual, &params, grad)? {
            return Ok((Some(d_x), Some(d_residual), Some(d_params)));
        }
        let cols = params.dim(1)?;
        let rows = x.elem_count() / cols.max(1);
        let (bias, gamma) = (params.get(0)?, params.get(1)?);
        let masked = |t: Tensor| -> Result<Tensor> {
            match self.dropout {
                Some(dropout) => dropout.apply(&t),
                None => Ok(t),
            }
        };
        let biased = x.to_dtype(DType::F32)?.reshape((rows, cols))?.broadcast_add(&bias)?;
        let sum = (masked(biased)? + residual.to_dtype(DType::F32)?.reshape((rows, cols))?)?.contiguous()?;
        let dy = grad.to_dtype(DType::F32)?.reshape((rows, cols))?.contiguous()?;
        let both =
            sum.apply_op3_no_bwd(&gamma.contiguous()?, &dy, &LayerNormTrainGrad(LayerNormTrain { eps: self.eps }))?;
        let (d_sum, xhat) = (both.get(0)?, both.get(1)?);
        let d_gamma = column_sum(&(&dy * &xhat)?)?;
        let d_beta = column_sum(&dy)?;
        let d_biased = masked(d_sum.clone())?;
        let d_bias = column_sum(&d_biased)?;
        let d_params = Tensor::stack(&[d_bias, d_gamma, d_beta], 0)?;
        let d_x = d_biased.to_dtype(x.dtype())?.reshape(x.shape())?;
        let d_residual = d_sum.to_dtype(residual.dtype())?.reshape(residual.shape())?;
        Ok((Some(d_x), Some(d_residual), Some(d_params)))
    }
}

#[cfg(feature = "cuda")]
impl ResidualNormTrain {
    /// The backward pass as one kernel on a GPU (`residual_norm_train_grad_{shared,regs}` in
    /// `kernels.cu`: the sum recomputed, LayerNorm's gradient, the mask, and the parameters'
    /// gradients summed over the rows; tested on the CPU under emulation by
    /// `tests/kernels_emulated.rs`). `None` off the GPU or for rows its registers do not hold
    /// (the caller composes the gradients).
    ///
    /// # Shapes
    /// `x, residual, grad: [..., n]`, `params: [3, n]` → `(d x, d residual, d params)`
    fn bwd_fused(
        &self,
        x: &Tensor,
        residual: &Tensor,
        params: &Tensor,
        grad: &Tensor,
    ) -> Result<Option<(Tensor, Tensor, Tensor)>> {
        use candle_core::Storage;
        if !x.device().is_cuda() {
            return Ok(None);
        }
        let (x, residual, params) = (x.contiguous()?, residual.contiguous()?, params.contiguous()?);
        let dy = grad.to_dtype(x.dtype())?.contiguous()?;
        let grads = {
            let (x_s, x_l) = x.storage_and_layout();
            let (r_s, r_l) = residual.storage_and_layout();
            let (p_s, p_l) = params.storage_and_layout();
            let (g_s, g_l) = dy.storage_and_layout();
            let (Storage::Cuda(x_s), Storage::Cuda(r_s), Storage::Cuda(p_s), Storage::Cuda(g_s)) =
                (&*x_s, &*r_s, &*p_s, &*g_s)
            else {
                return Ok(None);
            };
            let args = self.dropout_args();
            super::launch::residual_norm_train_grad(self.eps, args, (x_s, x_l), (r_s, r_l), (p_s, p_l), (g_s, g_l))?
        };
        let Some((d_x, d_residual, d_params)) = grads else { return Ok(None) };
        use super::untracked;
        Ok(Some((
            untracked(d_x, x.shape()),
            untracked(d_residual, residual.shape()),
            untracked(d_params, params.shape()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    /// The op's values and the gradients of its three inputs equal candle's composition's
    /// (bias, dropout by the same mask, residual, LayerNorm), with and without dropout.
    #[test]
    fn the_op_is_the_composition_values_and_gradients() {
        let normals = Normals::new(175);
        let device = Device::Cpu;
        let (rows, cols, eps) = (10, 24, 1e-5);
        let var = |shape: (usize, usize), std: f32| {
            Var::from_tensor(&(normals.tensor(0f32, std, shape, &device).unwrap() + 0.2).unwrap()).unwrap()
        };
        let (x, residual, params) = (var((rows, cols), 1.0), var((rows, cols), 1.0), var((3, cols), 0.5));
        let w = normals.tensor(0f32, 1.0, (rows, cols), &device).unwrap();
        for dropout in [None, Some(SeededDropout { p: 0.25, seed: 42 })] {
            let op = ResidualNormTrain { eps, dropout };
            let run = |fused: bool| {
                let y = if fused {
                    x.as_tensor().apply_op3(residual.as_tensor(), params.as_tensor(), op).unwrap()
                } else {
                    let p = params.as_tensor();
                    let biased = x.as_tensor().broadcast_add(&p.get(0).unwrap()).unwrap();
                    let dropped = match dropout {
                        Some(d) => d.apply(&biased).unwrap(),
                        None => biased,
                    };
                    let s = (dropped + residual.as_tensor()).unwrap();
                    let mean = s.mean_keepdim(1).unwrap();
                    let centered = s.broadcast_sub(&mean).unwrap();
                    let var = centered.sqr().unwrap().mean_keepdim(1).unwrap();
                    let normed = centered.broadcast_div(&(var + eps as f64).unwrap().sqrt().unwrap()).unwrap();
                    normed.broadcast_mul(&p.get(1).unwrap()).unwrap().broadcast_add(&p.get(2).unwrap()).unwrap()
                };
                let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
                let grad = |v: &Var| grads.get(v.as_tensor()).unwrap().clone();
                [y, grad(&x), grad(&residual), grad(&params)]
            };
            let (fused, composed) = (run(true), run(false));
            for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
                assert_eq!(a.dims(), b.dims(), "tensor {i}");
                let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
                let diff = diff.to_scalar::<f32>().unwrap();
                assert!(diff < 2e-5, "dropout {dropout:?}, tensor {i} (output, d x, d residual, d params): {diff}");
            }
        }
    }

    /// Inputs that do not fit are an error naming the op.
    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let device = Device::Cpu;
        let x = Tensor::zeros((4, 8), DType::F32, &device).unwrap();
        let params = Tensor::zeros((3, 7), DType::F32, &device).unwrap();
        let op = ResidualNormTrain { eps: 1e-5, dropout: None };
        let err = x.apply_op3(&x, &params, op).unwrap_err().to_string();
        assert!(err.contains("residual-norm-train"), "{err}");
    }
}
