//! A dense product with its bias for training on the GPU route, the bias added in cuBLASLt's
//! epilogue (as PyTorch's `F.linear` does under autocast): the q/k/v projection before
//! FlashAttention-2's training op.
//!
//! Before, the product came unbiased and the attention op added the bias twice — a pass over
//! the `[tokens, 3 · hidden]` product in the forward pass and again in the backward pass, ~3 ms
//! of a 4 × 20 × 512 roberta-base step on an H200 (two passes of 377 MB per layer). With the bias
//! in the product's epilogue the op keeps the biased product (the attention's input), of the
//! same size, and neither pass runs. The bias is rounded to bf16 for the epilogue, as autocast
//! rounds it; its gradient is the f32 column sum of the product's gradient, as before.
//! `LONGREAD_CUDA_TRAIN_QKV_BIAS=separate` ([`train_qkv_bias_in_product`]) keeps the old route.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};

/// `x.apply_op3(&w, &bias, LinearBiasTrain)`: `x: [rows, k]` (contiguous), `w: [n, k]` (`x`'s
/// dtype, contiguous), `bias: [n]` (f32) → `x · wᵀ + bias`, `[rows, n]` in `x`'s dtype, with
/// gradients for all three (the bias's f32). On CUDA bf16 (cuBLASLt); on the CPU f32 (tests).
#[derive(Debug, Clone, Copy)]
pub struct LinearBiasTrain;

impl LinearBiasTrain {
    /// The shapes `(rows, k, n)` of a call, or an error naming what does not fit.
    fn dims(
        x_l: &Layout,
        w_l: &Layout,
        bias_l: &Layout,
        dtypes: (DType, DType, DType),
    ) -> Result<(usize, usize, usize)> {
        let (rows, k) = x_l.shape().dims2()?;
        let (n, wk) = w_l.shape().dims2()?;
        let (x_dtype, w_dtype, bias_dtype) = dtypes;
        let fits = wk == k
            && bias_l.shape().dims() == [n]
            && w_dtype == x_dtype
            && bias_dtype == DType::F32
            && x_l.is_contiguous()
            && w_l.is_contiguous()
            && bias_l.is_contiguous();
        if !fits {
            candle_core::bail!(
                "linear-bias-train: x {:?} ({x_dtype:?}), weight {:?} ({w_dtype:?}) and bias {:?} \
                 ({bias_dtype:?}) do not fit (contiguous [rows, k], [n, k] of x's dtype, [n] f32)",
                x_l.shape(),
                w_l.shape(),
                bias_l.shape()
            );
        }
        Ok((rows, k, n))
    }
}

impl CustomOp3 for LinearBiasTrain {
    fn name(&self) -> &'static str {
        "linear-bias-train"
    }

    /// f32 on the CPU: the backend's product, then the bias (for tests).
    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_l: &Layout,
        w: &CpuStorage,
        w_l: &Layout,
        bias: &CpuStorage,
        bias_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (rows, k, n) = Self::dims(x_l, w_l, bias_l, (x.dtype(), w.dtype(), bias.dtype()))?;
        let (CpuStorage::F32(_), CpuStorage::F32(bias)) = (x, bias) else {
            candle_core::bail!("linear-bias-train on the CPU: f32 only");
        };
        let bias = &bias[bias_l.start_offset()..][..n];
        let CpuStorage::F32(mut out) = x.matmul(w, (1, rows, n, k), x_l, &w_l.transpose(0, 1)?)? else {
            candle_core::bail!("linear-bias-train: the product changed dtype");
        };
        for row in out.chunks_mut(n.max(1)) {
            row.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
        }
        Ok((CpuStorage::F32(out), Shape::from((rows, n))))
    }

    /// bf16 on CUDA: cuBLASLt's product with the bias (cast to bf16) in its epilogue.
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
        bias: &candle_core::CudaStorage,
        bias_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Self::dims(x_l, w_l, bias_l, (x.dtype(), w.dtype(), bias.dtype()))?;
        if x.dtype() != DType::BF16 {
            candle_core::bail!("linear-bias-train on CUDA: bf16 only, not {:?}", x.dtype());
        }
        let bias16 = bias.to_dtype(bias_l, DType::BF16)?;
        let bias16_l = Layout::contiguous(bias_l.shape());
        super::cublaslt::product((x, x_l), (w, w_l), Some((&bias16, &bias16_l)), false)
    }

    /// `dx = dy · w`, `dw = dyᵀ · x` (the backend's products, in `x`'s dtype), `dbias` the f32
    /// column sums of `dy`.
    ///
    /// # Shapes
    /// `grad: [rows, n]` → `x: [rows, k]`, `w: [n, k]`, `bias: [n]`
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dy, d_x, d_w) = product_grads(x, w, grad)?;
        let d_bias = super::training::column_sum(&dy)?;
        Ok((Some(d_x), Some(d_w), Some(d_bias)))
    }
}

/// `x.apply_op2(&w, ProductTrain)`: `x: [rows, k]`, `w: [n, k]` (one dtype, both contiguous) →
/// `x · wᵀ`, `[rows, n]`, the backend's product (the call `x.matmul(&w.t())` makes), with a
/// backward pass that gives the weight's gradient as one product in its own layout,
/// `dw = dyᵀ · x` (`[n, k]`, contiguous), where candle's product of a transposed weight gives
/// `xᵀ · dy` and its transpose's backward pass then copies it into the weight's layout: a
/// launch and a pass over the gradient per weight per kept group (the feed-forward's input
/// product and the attention's output product on the GPU route). `dx = dy · w` as candle's.
/// `LONGREAD_CUDA_TRAIN_PRODUCT=candle` keeps candle's product ([`train_product_op`]).
#[derive(Debug, Clone, Copy)]
pub struct ProductTrain;

impl ProductTrain {
    /// The shapes `(rows, k, n)` of a call, or an error naming what does not fit.
    fn dims(x_l: &Layout, w_l: &Layout, dtypes: (DType, DType)) -> Result<(usize, usize, usize)> {
        let (rows, k) = x_l.shape().dims2()?;
        let (n, wk) = w_l.shape().dims2()?;
        if wk != k || dtypes.0 != dtypes.1 || !x_l.is_contiguous() || !w_l.is_contiguous() {
            candle_core::bail!(
                "product-train: x {:?} ({:?}) and weight {:?} ({:?}) do not fit (contiguous [rows, k] and [n, k] of one dtype)",
                x_l.shape(),
                dtypes.0,
                w_l.shape(),
                dtypes.1
            );
        }
        Ok((rows, k, n))
    }

    /// `x · wᵀ` by the backend's product.
    fn forward<S: BackendStorage>(x: &S, x_l: &Layout, w: &S, w_l: &Layout) -> Result<(S, Shape)> {
        let (rows, k, n) = Self::dims(x_l, w_l, (x.dtype(), w.dtype()))?;
        let out = x.matmul(w, (1, rows, n, k), x_l, &w_l.transpose(0, 1)?)?;
        Ok((out, Shape::from((rows, n))))
    }
}

impl candle_core::CustomOp2 for ProductTrain {
    fn name(&self) -> &'static str {
        "product-train"
    }

    fn cpu_fwd(&self, x: &CpuStorage, x_l: &Layout, w: &CpuStorage, w_l: &Layout) -> Result<(CpuStorage, Shape)> {
        Self::forward(x, x_l, w, w_l)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Self::forward(x, x_l, w, w_l)
    }

    /// `dx = dy · w`, `dw = dyᵀ · x` (the backend's products, in `x`'s dtype).
    ///
    /// # Shapes
    /// `grad: [rows, n]` → `x: [rows, k]`, `w: [n, k]`
    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (_, d_x, d_w) = product_grads(x, w, grad)?;
        Ok((Some(d_x), Some(d_w)))
    }
}

/// The gradients of `x · wᵀ` from the output's: `dy` (in `x`'s dtype, contiguous),
/// `dx = dy · w` and `dw = dyᵀ · x` (the backend's products).
///
/// # Shapes
/// `x: [rows, k]`, `w: [n, k]`, `grad: [rows, n]` → `([rows, n], [rows, k], [n, k])`
fn product_grads(x: &Tensor, w: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (x, w) = (x.detach(), w.detach());
    let dy = grad.to_dtype(x.dtype())?.contiguous()?;
    let d_x = dy.matmul(&w)?;
    let d_w = dy.t()?.matmul(&x)?;
    Ok((dy, d_x, d_w))
}

/// Whether training's products on the GPU route run as [`ProductTrain`] (the default), or, with
/// `LONGREAD_CUDA_TRAIN_PRODUCT=candle`, as candle's product of the transposed weight.
pub fn train_product_op() -> bool {
    static CANDLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !super::env_is(&CANDLE, "LONGREAD_CUDA_TRAIN_PRODUCT", "candle")
}

/// Whether training's q/k/v projection adds its bias in the product's epilogue
/// ([`LinearBiasTrain`], the default) where FlashAttention-2 or cuDNN runs the
/// attention in bf16, or, with `LONGREAD_CUDA_TRAIN_QKV_BIAS=separate`, inside the attention op
/// in passes of its own.
pub fn train_qkv_bias_in_product() -> bool {
    static SEPARATE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !super::env_is(&SEPARATE, "LONGREAD_CUDA_TRAIN_QKV_BIAS", "separate")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    fn max_abs(t: &Tensor) -> f32 {
        t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// Values and the gradients of all three inputs equal candle's composition's
    /// (`x.matmul(wᵀ) + bias`).
    #[test]
    fn the_op_is_the_composition_values_and_gradients() {
        let normals = Normals::new(229);
        let device = Device::Cpu;
        let (rows, k, n) = (13, 24, 18);
        let var = |shape: &[usize]| Var::from_tensor(&normals.tensor(0f32, 1.0, shape, &device).unwrap()).unwrap();
        let (x, w, bias) = (var(&[rows, k]), var(&[n, k]), var(&[n]));
        let dy = normals.tensor(0f32, 1.0, (rows, n), &device).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                x.as_tensor().apply_op3(w.as_tensor(), bias.as_tensor(), LinearBiasTrain).unwrap()
            } else {
                let product = x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap();
                product.broadcast_add(bias.as_tensor()).unwrap()
            };
            let grads = (&y * &dy).unwrap().sum_all().unwrap().backward().unwrap();
            let grad = |v: &Var| grads.get(v.as_tensor()).unwrap().clone();
            [y, grad(&x), grad(&w), grad(&bias)]
        };
        let (fused, composed) = (run(true), run(false));
        for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
            assert_eq!(a.dims(), b.dims(), "tensor {i}");
            let d = max_abs(&(a - b).unwrap());
            assert!(d < 2e-5, "tensor {i} (output, d x, d w, d bias): max abs diff {d}");
        }
    }

    /// The product op's value and gradients equal candle's product of the transposed weight's
    /// (f32 and bf16 on the CPU), and inputs that do not fit are errors naming it.
    #[test]
    fn the_product_op_is_candles_product_values_and_gradients() {
        let normals = Normals::new(257);
        let device = Device::Cpu;
        let (rows, k, n) = (11, 20, 14);
        for (dtype, tolerance) in [(DType::F32, 2e-5f32), (DType::BF16, 2e-2)] {
            let var = |shape: &[usize]| {
                let t = normals.tensor(0f32, 1.0, shape, &device).unwrap().to_dtype(dtype).unwrap();
                Var::from_tensor(&t).unwrap()
            };
            let (x, w) = (var(&[rows, k]), var(&[n, k]));
            let dy = normals.tensor(0f32, 1.0, (rows, n), &device).unwrap().to_dtype(dtype).unwrap();
            let run = |op: bool| {
                let y = if op {
                    x.as_tensor().apply_op2(w.as_tensor(), ProductTrain).unwrap()
                } else {
                    x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap()
                };
                let grads = (&y * &dy).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
                let grad = |v: &Var| grads.get(v.as_tensor()).unwrap().clone();
                [y, grad(&x), grad(&w)]
            };
            let (op, candle) = (run(true), run(false));
            assert_eq!(
                op[0].to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(),
                candle[0].to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(),
                "{dtype:?}: the same product"
            );
            for (i, (a, b)) in op.iter().zip(&candle).enumerate().skip(1) {
                assert_eq!(a.dims(), b.dims(), "tensor {i}");
                assert!(a.is_contiguous(), "{dtype:?}: gradient {i} in the input's layout");
                let d = max_abs(&(a - b).unwrap().to_dtype(DType::F32).unwrap());
                let scale = max_abs(&b.to_dtype(DType::F32).unwrap());
                assert!(d <= tolerance * scale, "{dtype:?}: gradient {i} (d x, d w): max abs diff {d} of {scale}");
            }
        }
        let t = |shape: &[usize]| normals.tensor(0f32, 1.0, shape, &device).unwrap();
        for case in [
            t(&[4, 6]).apply_op2(&t(&[5, 7]), ProductTrain),
            t(&[6, 4]).t().unwrap().apply_op2(&t(&[5, 6]), ProductTrain),
            t(&[4, 6]).apply_op2(&t(&[5, 6]).to_dtype(DType::BF16).unwrap(), ProductTrain),
        ] {
            let err = case.unwrap_err().to_string();
            assert!(err.contains("product-train"), "{err}");
        }
    }

    /// Inputs that do not fit (shapes, a bf16 bias, a strided x, bf16 on the CPU) are errors
    /// naming the op.
    #[test]
    fn inputs_that_do_not_fit_are_errors() {
        let normals = Normals::new(305);
        let device = Device::Cpu;
        let t = |shape: &[usize]| normals.tensor(0f32, 1.0, shape, &device).unwrap();
        let (x, w, bias) = (t(&[4, 6]), t(&[5, 6]), t(&[5]));
        let cases = [
            x.apply_op3(&t(&[5, 7]), &bias, LinearBiasTrain),
            x.apply_op3(&w, &t(&[4]), LinearBiasTrain),
            x.apply_op3(&w, &bias.to_dtype(DType::BF16).unwrap(), LinearBiasTrain),
            t(&[6, 4]).t().unwrap().apply_op3(&w, &bias, LinearBiasTrain),
            x.to_dtype(DType::BF16).unwrap().apply_op3(&w.to_dtype(DType::BF16).unwrap(), &bias, LinearBiasTrain),
        ];
        for (i, case) in cases.into_iter().enumerate() {
            let err = case.unwrap_err().to_string();
            assert!(err.contains("linear-bias-train"), "case {i}: {err}");
        }
    }
}
