//! The middle of a feed-forward block in training on the GPU route as one op: exact GELU of the
//! first product plus its bias, then the second product, `gelu(h + b) · wᵀ`, keeping the first
//! product but not the GELU's output between the passes.
//!
//! The composition it replaces (the bias + GELU op, then a product that keeps its input) held
//! both `h` and `gelu(h + b)`: two `[tokens, intermediate]` tensors, 8 of the 16 `[512, 768]`
//! activations a roberta-base layer keeps per chunk on the GPU route. The op keeps `h` only; its
//! backward pass recomputes the GELU (one elementwise pass) for the second product's weight
//! gradient. Built from kernels that run on both sides ([`BiasActivationTrain`]'s and the GELU's
//! backward pass with its bias's gradient, `training::gelu_grad_and_bias_sum`; the backend's
//! matrix product); tested on the CPU with `reference`'s kernels against the composition, and on
//! a GPU by the CUDA training tests.

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

use super::route_kernels::RouteKernels;
use super::training::BiasActivationTrain;

/// `h.apply_op3(&bias, &w, GeluDenseTrain)`: `h: [rows, inner]` (f32 or bf16, contiguous),
/// `bias: [inner]` (f32), `w: [out, inner]` (`h`'s dtype, contiguous) → `[rows, out]`, without
/// the second product's bias (the block's end adds it). Gradients for all three.
#[derive(Debug, Clone, Copy)]
pub struct GeluDenseTrain;

impl GeluDenseTrain {
    /// The forward pass on one backend's storages.
    ///
    /// # Shapes
    /// `h: [rows, inner]`, `bias: [inner]`, `w: [out, inner]` → `[rows, out]`
    fn forward<S: RouteKernels>(
        &self,
        (h, h_l): (&S, &Layout),
        (bias, bias_l): (&S, &Layout),
        (w, w_l): (&S, &Layout),
    ) -> Result<(S, Shape)> {
        let (rows, inner) = h_l.shape().dims2()?;
        let (out, w_inner) = w_l.shape().dims2()?;
        if w_inner != inner || bias_l.shape().dims() != [inner] || w.dtype() != h.dtype() || !w_l.is_contiguous() {
            candle_core::bail!(
                "gelu-dense-train: h {:?}, bias {:?} and weight {:?} ({:?}) do not fit",
                h_l.shape(),
                bias_l.shape(),
                w_l.shape(),
                w.dtype()
            );
        }
        let g = h.bias_gelu(h_l, bias, bias_l)?;
        let y = g.matmul(w, (1, rows, out, inner), &Layout::contiguous((rows, inner)), &w_l.transpose(0, 1)?)?;
        Ok((y, Shape::from((rows, out))))
    }
}

impl CustomOp3 for GeluDenseTrain {
    fn name(&self) -> &'static str {
        "gelu-dense-train"
    }

    /// The CPU side runs `reference`'s f32 kernel: for tests (the CPU route has its own fused ops).
    fn cpu_fwd(
        &self,
        h: &CpuStorage,
        h_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
        w: &CpuStorage,
        w_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.forward((h, h_l), (bias, bias_l), (w, w_l))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        h: &candle_core::CudaStorage,
        h_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward((h, h_l), (bias, bias_l), (w, w_l))
    }

    /// Recomputes `g = gelu(h + b)` for the weight's gradient; the GELU's derivative from `h`.
    ///
    /// # Shapes
    /// `grad: [rows, out]` → `h: [rows, inner]`, `bias: [inner]`, `w: [out, inner]`
    fn bwd(
        &self,
        h: &Tensor,
        bias: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (h, bias, w) = (h.detach(), bias.detach(), w.detach());
        let dy = grad.to_dtype(h.dtype())?.contiguous()?;
        let g = h.apply_op2_no_bwd(&bias, &BiasActivationTrain { gelu: true })?;
        let d_w = dy.t()?.matmul(&g)?;
        drop(g);
        let d_g = dy.matmul(&w)?;
        let (d_h, d_bias) = super::training::gelu_grad_and_bias_sum(&h, &bias, &d_g)?;
        Ok((Some(d_h), Some(d_bias), Some(d_w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{DType, Device, Var};

    /// Values and the gradients of all three inputs equal candle's composition's.
    #[test]
    fn the_op_is_the_composition_values_and_gradients() {
        let normals = Normals::new(114);
        let device = Device::Cpu;
        let (rows, inner, out) = (9, 20, 6);
        let var = |shape: &[usize]| Var::from_tensor(&normals.tensor(0f32, 1.0, shape, &device).unwrap()).unwrap();
        let (h, bias, w) = (var(&[rows, inner]), var(&[inner]), var(&[out, inner]));
        let dy = normals.tensor(0f32, 1.0, (rows, out), &device).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                h.as_tensor().apply_op3(bias.as_tensor(), w.as_tensor(), GeluDenseTrain).unwrap()
            } else {
                let g = h.as_tensor().broadcast_add(bias.as_tensor()).unwrap().gelu_erf().unwrap();
                g.matmul(&w.as_tensor().t().unwrap()).unwrap()
            };
            let grads = (&y * &dy).unwrap().sum_all().unwrap().backward().unwrap();
            let grad = |v: &Var| grads.get(v.as_tensor()).unwrap().clone();
            [y, grad(&h), grad(&bias), grad(&w)]
        };
        let (fused, composed) = (run(true), run(false));
        for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
            assert_eq!(a.dims(), b.dims(), "tensor {i}");
            let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 2e-5, "tensor {i} (output, d h, d bias, d w): max abs diff {d}");
        }
    }

    /// Inputs that do not fit are an error naming the op.
    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let device = Device::Cpu;
        let h = Tensor::zeros((4, 8), DType::F32, &device).unwrap();
        let bias = Tensor::zeros(8, DType::F32, &device).unwrap();
        let w = Tensor::zeros((3, 7), DType::F32, &device).unwrap();
        let err = h.apply_op3(&bias, &w, GeluDenseTrain).unwrap_err().to_string();
        assert!(err.contains("gelu-dense-train"), "{err}");
    }
}
