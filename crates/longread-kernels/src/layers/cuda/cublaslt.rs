//! bf16 dense products through cuBLASLt (cudarc's `cublaslt`), with the bias added in the
//! product's epilogue where one is given — as PyTorch's `F.linear` runs under autocast — instead
//! of candle's cuBLAS call followed by a pass of its own over the output. The default for bf16
//! inference, measured on an H200 on 2026-11-27 (197 against 183 documents/s for candle's cuBLAS
//! products, BENCHMARKS.md "GPU"); f32 products keep candle's. The ops here have no backward pass (inference); training's q/k/v product with its
//! bias runs the same `product` through `linear_train::LinearBiasTrain`, which has one.
//!
//! With `LONGREAD_CUDA_GELU=tanh` the feed-forward block's bias and GELU run in the first
//! product's epilogue too (cuBLASLt's `GELU_BIAS`), saving a pass over its `[rows, 4 · hidden]`
//! output — but cuBLASLt's GELU is the tanh approximation (PyTorch's own fallback for that
//! epilogue applies `gelu(approximate="tanh")`), not the exact erf GELU of BERT-family
//! checkpoints: at most 4.7e-4 apart (at x ≈ -2.7), under the bf16 rounding of the output. Off
//! by default: a different function, offered as text-embeddings-inference offers it.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};

use super::cuda_only;

/// `x · Wᵀ` (and `+ bias` as the op of three tensors, then tanh-approximated GELU if `gelu`)
/// for a bf16 `x: [rows, k]`, `W: [n, k]` and `bias: [n]`, all contiguous, into a new bf16
/// `[rows, n]`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct LtProduct {
    /// GELU (cuBLASLt's: the tanh approximation) after the bias, in the epilogue.
    pub gelu: bool,
}

impl CustomOp2 for LtProduct {
    fn name(&self) -> &'static str {
        "cuda-cublaslt-product"
    }

    cuda_only!(CustomOp2);

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        launch::product((x, x_l), (w, w_l), None, false)
    }
}

impl CustomOp3 for LtProduct {
    fn name(&self) -> &'static str {
        "cuda-cublaslt-product-bias"
    }

    cuda_only!(CustomOp3);

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
        launch::product((x, x_l), (w, w_l), Some((bias, bias_l)), self.gelu)
    }
}

/// Where bf16 inference on a GPU applies the feed-forward block's bias and GELU, from
/// `LONGREAD_CUDA_GELU`: `fused` (the default: the exact GELU in the epilogue of longread's
/// CUTLASS product on GPUs of compute capability 9.0, [`super::fused_linear_gelu`]; elsewhere
/// `pass` runs), `pass` (the exact GELU in a pass of its own over the product) or `tanh` (in
/// cuBLASLt's epilogue: the tanh approximation of GELU; see the module's note). On an H200
/// (2026-11-28): `fused` 214 documents/s against `pass`'s 203 (BENCHMARKS.md "GPU").
pub fn gelu_epilogue() -> &'static str {
    static MODE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    super::env_choice(&MODE, "LONGREAD_CUDA_GELU", &["tanh", "pass"], "fused")
}

/// `x · Wᵀ (+ bias)` by cuBLASLt, the bias (cast to bf16, as autocast does) in the epilogue.
///
/// # Shapes
/// `xs: [..., k]` (bf16), `weight: [n, k]` (bf16), `bias: [n]` → `[..., n]` (bf16)
pub fn lt_linear(xs: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    lt_call(xs, weight, bias, false)
}

/// `gelu_tanh(x · Wᵀ + bias)` by cuBLASLt, bias and GELU (its tanh approximation) in the
/// epilogue (`LONGREAD_CUDA_GELU=tanh`, [`gelu_epilogue`]).
///
/// # Shapes
/// `xs: [..., k]` (bf16), `weight: [n, k]` (bf16), `bias: [n]` → `[..., n]` (bf16)
pub fn lt_linear_gelu_tanh(xs: &Tensor, weight: &Tensor, bias: &Tensor) -> Result<Tensor> {
    lt_call(xs, weight, Some(bias), true)
}

fn lt_call(xs: &Tensor, weight: &Tensor, bias: Option<&Tensor>, gelu: bool) -> Result<Tensor> {
    let mut dims = xs.dims().to_vec();
    let k = dims.pop().unwrap_or(1);
    let rows = xs.elem_count() / k.max(1);
    let x = xs.reshape((rows, k))?.contiguous()?;
    let weight = weight.contiguous()?;
    let out = match bias {
        Some(bias) => x.apply_op3_no_bwd(&weight, &bias.to_dtype(DType::BF16)?.contiguous()?, &LtProduct { gelu })?,
        None => x.apply_op2_no_bwd(&weight, &LtProduct { gelu: false })?,
    };
    dims.push(weight.dim(0)?);
    out.reshape(dims)
}

#[cfg(feature = "cuda")]
pub(super) use launch::product;

#[cfg(feature = "cuda")]
mod launch {
    use std::sync::{Arc, Mutex};

    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::cublaslt::{Activation, CudaBlasLT, Matmul, MatmulConfig};
    use candle_core::{CudaStorage, DType, Layout, Result, Shape};
    use half::bf16;

    use crate::layers::cuda::launch::range;

    /// One cuBLASLt handle (with its workspace) per candle stream, made on first use.
    static HANDLES: Mutex<Vec<(usize, Arc<CudaBlasLT>)>> = Mutex::new(Vec::new());

    fn handle(dev: &candle_core::CudaDevice) -> Result<Arc<CudaBlasLT>> {
        let stream = dev.cuda_stream();
        let key = stream.cu_stream() as usize;
        let mut handles = HANDLES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, h)) = handles.iter().find(|(k, _)| *k == key) {
            return Ok(h.clone());
        }
        let h =
            Arc::new(CudaBlasLT::new(stream).map_err(|e| candle_core::Error::Msg(format!("cuBLASLt handle: {e:?}")))?);
        handles.push((key, h.clone()));
        Ok(h)
    }

    pub(in crate::layers::cuda) fn product(
        (x, x_l): (&CudaStorage, &Layout),
        (w, w_l): (&CudaStorage, &Layout),
        bias: Option<(&CudaStorage, &Layout)>,
        gelu: bool,
    ) -> Result<(CudaStorage, Shape)> {
        let op = "cuda-cublaslt-product";
        let (rows, k) = x_l.shape().dims2()?;
        let (n, wk) = w_l.shape().dims2()?;
        let bias_ok = bias.is_none_or(|(b, l)| b.dtype() == DType::BF16 && l.shape().dims() == [n]);
        if wk != k || x.dtype() != DType::BF16 || w.dtype() != DType::BF16 || !bias_ok {
            candle_core::bail!(
                "{op}: x {:?} ({:?}), weight {:?} ({:?}) and bias {:?} disagree (bf16 [rows, k], [n, k], [n])",
                x_l.shape(),
                x.dtype(),
                w_l.shape(),
                w.dtype(),
                bias.map(|(_, l)| l.shape().clone())
            );
        }
        let dev = x.device.clone();
        let blas = handle(&dev)?;
        let x_view = x.as_cuda_slice::<bf16>()?.slice(range(x_l, op)?);
        let w_view = w.as_cuda_slice::<bf16>()?.slice(range(w_l, op)?);
        let bias_view = match bias {
            Some((b, l)) => Some(b.as_cuda_slice::<bf16>()?.slice(range(l, op)?)),
            None => None,
        };
        // SAFETY: cuBLASLt writes every element of the output below.
        let mut out = unsafe { dev.alloc::<bf16>(rows * n) }?;
        // Row-major `out[rows, n] = x[rows, k] · W[n, k]ᵀ` is column-major `outᵀ[n, rows] =
        // W · xᵀ`: A is the weight read transposed (column-major `[k, n]`), B is x as it lies
        // (column-major `[k, rows]`), C is `[n, rows]`; the bias runs along C's rows.
        let cfg = MatmulConfig {
            transa: true,
            transb: false,
            transc: false,
            m: n as u64,
            n: rows as u64,
            k: k as u64,
            alpha: 1.0,
            lda: k as i64,
            ldb: k as i64,
            beta: 0.0,
            ldc: n as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        // cuBLASLt's GELU epilogue follows the bias (GELU_BIAS) where both are asked for.
        let activation = (gelu && bias_view.is_some()).then_some(Activation::Gelu);
        // SAFETY: the views hold `n × k`, `rows × k` and `n` elements, `out` `rows × n`, as
        // `cfg` describes; all are on the handle's stream.
        unsafe { blas.matmul(cfg, &w_view, &x_view, &mut out, bias_view.as_ref(), activation.as_ref()) }
            .map_err(|e| candle_core::Error::Msg(format!("{op}: {e:?}")))?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((rows, n))))
    }
}
