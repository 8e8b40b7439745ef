//! The feed-forward block's first product with its bias and exact (erf) GELU in the product's
//! epilogue: one CUTLASS kernel of longread's (`vendor/flash-attn/gemm/longread_gemm.cu`,
//! Hopper's TMA warp-specialised GEMM), where cuBLASLt's GELU epilogue is the tanh
//! approximation ([`super::lt_linear_gelu_tanh`]) and `LONGREAD_CUDA_GELU=pass` runs the exact
//! GELU in a pass of its own over the `[tokens, 4 · hidden]` product. The default of bf16
//! inference on GPUs of compute capability 9.0 (H100, H200) with a binary built for them
//! (`CUDA_COMPUTE_CAP=90`) since commit d48ea7e ([`super::gelu_epilogue`]: 5% more documents/s
//! on an H200); elsewhere the pass runs. One configuration: CUTLASS's cooperative schedule, two
//! consumer warp groups sharing a 128 × 256 tile. Inference only (no backward pass).

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};

use super::cuda_only;

/// `gelu_erf(x · Wᵀ + bias)` for a bf16 `x: [rows, k]`, `W: [n, k]` and `bias: [n]`, all
/// contiguous, into a new bf16 `[rows, n]`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct GemmBiasGelu;

impl CustomOp3 for GemmBiasGelu {
    fn name(&self) -> &'static str {
        "cuda-gemm-bias-gelu"
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
        launch::product((x, x_l), (w, w_l), (bias, bias_l))
    }
}

/// `gelu_erf(x · Wᵀ + bias)` by the fused kernel, or `None` where it does not run (not a GPU
/// of compute capability 9.0, a binary built for another, sizes other than multiples of 8):
/// the caller then runs the default. `xs` in bf16, or f32 (the residual stream: its bf16 copy
/// from the block end, [`super::twin`], else a cast — taken only when the kernel runs).
///
/// # Shapes
/// `xs: [..., k]`, `weight: [n, k]` (bf16), `bias: [n]` → `[..., n]` (bf16)
pub fn fused_linear_gelu(xs: &Tensor, weight: &Tensor, bias: &Tensor) -> Result<Option<Tensor>> {
    let mut dims = xs.dims().to_vec();
    let k = dims.pop().unwrap_or(1);
    let n = weight.dim(0)?;
    let fits = weight.dtype() == DType::BF16 && k.is_multiple_of(8) && n.is_multiple_of(8);
    if !fits || !runs_on(xs.device()) {
        return Ok(None);
    }
    let xs = super::twin::product_input(xs, DType::BF16)?;
    let rows = xs.elem_count() / k.max(1);
    // Fresh contiguous tensors start 16-byte aligned, as the kernel's TMA loads need.
    let x = aligned(&xs.reshape((rows, k))?)?;
    let out = x.apply_op3_no_bwd(&aligned(weight)?, &aligned(&bias.to_dtype(DType::BF16)?)?, &GemmBiasGelu)?;
    dims.push(n);
    Ok(Some(out.reshape(dims)?))
}

/// `t` contiguous from a 16-byte boundary (bf16: an offset of a multiple of 8 elements).
fn aligned(t: &Tensor) -> Result<Tensor> {
    let t = t.contiguous()?;
    let offset = t.layout().start_offset();
    if offset.is_multiple_of(8) {
        Ok(t)
    } else {
        t.copy()
    }
}

/// Whether the fused kernel runs on `device`: a GPU of compute capability 9.0 (sm90a machine
/// code runs there alone) and a binary built with `CUDA_COMPUTE_CAP=90`.
fn runs_on(device: &candle_core::Device) -> bool {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(cuda) = device {
        return longread_flash_attn::built_compute_cap() == (9, 0)
            && super::flash::capability_of(cuda).is_some_and(|c| c == (9, 0));
    }
    let _ = device;
    false
}

#[cfg(feature = "cuda")]
mod launch {
    use core::ffi::c_void;

    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
    use candle_core::{CudaStorage, DType, Layout, Result, Shape};
    use half::bf16;

    use crate::layers::cuda::launch::{range, with_workspace};

    pub(super) fn product(
        (x, x_l): (&CudaStorage, &Layout),
        (w, w_l): (&CudaStorage, &Layout),
        (bias, bias_l): (&CudaStorage, &Layout),
    ) -> Result<(CudaStorage, Shape)> {
        let op = "cuda-gemm-bias-gelu";
        let (rows, k) = x_l.shape().dims2()?;
        let (n, wk) = w_l.shape().dims2()?;
        let dtypes = [x.dtype(), w.dtype(), bias.dtype()];
        if wk != k || bias_l.shape().dims() != [n] || dtypes.iter().any(|&d| d != DType::BF16) {
            candle_core::bail!(
                "{op}: x {:?}, weight {:?} and bias {:?} ({dtypes:?}) disagree (bf16 [rows, k], [n, k], [n])",
                x_l.shape(),
                w_l.shape(),
                bias_l.shape()
            );
        }
        let dev = x.device.clone();
        let stream = dev.cuda_stream();
        let x_view = x.as_cuda_slice::<bf16>()?.slice(range(x_l, op)?);
        let w_view = w.as_cuda_slice::<bf16>()?.slice(range(w_l, op)?);
        let bias_view = bias.as_cuda_slice::<bf16>()?.slice(range(bias_l, op)?);
        let sm_count = crate::layers::cuda::flash::multiprocessors_of(&dev) as i32;
        let check = |status: i32| match status {
            0 => Ok(()),
            1 => candle_core::bail!("{op}: [{rows}, {k}] x [{n}, {k}]T does not fit the kernel (multiples of 8)"),
            2 => candle_core::bail!("{op}: the binary holds no sm90a code (built without CUDA_COMPUTE_CAP=90)"),
            _ => candle_core::bail!("{op}: the kernel's launch failed"),
        };
        // SAFETY: the kernel writes every element of the output.
        let mut out = unsafe { dev.alloc::<bf16>(rows * n) }?;
        with_workspace(&dev, |workspace, size| {
            let (x_ptr, _g1) = x_view.device_ptr(&stream);
            let (w_ptr, _g2) = w_view.device_ptr(&stream);
            let (b_ptr, _g3) = bias_view.device_ptr(&stream);
            let (o_ptr, _g4) = out.device_ptr_mut(&stream);
            // SAFETY: x, w, bias and out hold rows × k, n × k, n and rows × n elements from
            // 16-byte boundaries (`fused_linear_gelu` copies others); the workspace holds what
            // the kernel asked for; the stream is the device's, current on this thread.
            check(unsafe {
                longread_flash_attn::longread_gemm_bias_gelu_bf16(
                    x_ptr as *const c_void,
                    w_ptr as *const c_void,
                    b_ptr as *const c_void,
                    o_ptr as *mut c_void,
                    rows as i64,
                    n as i64,
                    k as i64,
                    sm_count,
                    workspace as *mut c_void,
                    size,
                    stream.cu_stream() as *mut c_void,
                )
            })
        })?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((rows, n))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// On the CPU (and wherever the kernel does not run) the caller is told to run the default.
    #[test]
    fn off_a_hopper_gpu_the_fused_product_declines() {
        let x = Tensor::zeros((4, 16), DType::BF16, &Device::Cpu).unwrap();
        let w = Tensor::zeros((8, 16), DType::BF16, &Device::Cpu).unwrap();
        let b = Tensor::zeros(8, DType::BF16, &Device::Cpu).unwrap();
        assert!(fused_linear_gelu(&x, &w, &b).unwrap().is_none());
        let err = x.apply_op3_no_bwd(&w, &b, &GemmBiasGelu).unwrap_err().to_string();
        assert!(err.contains("cuda-gemm-bias-gelu"), "{err}");
    }
}
