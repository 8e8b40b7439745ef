//! Launching the kernels of `kernels.cu` on candle's CUDA storages.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaDevice, CudaStorage, DType, Layout, Result};
use half::bf16;

/// The PTX of `kernels.cu` (build.rs).
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/longread_kernels.ptx"));
/// Name of the module in candle's per-device cache.
const MODULE: &str = "longread";
/// Threads per block of the row-wise kernels: 8 warps, one row each.
const ROW_THREADS: u32 = 256;

/// A launch of `rows` rows, one warp each.
fn rows_config(rows: usize) -> LaunchConfig {
    let warps = (ROW_THREADS / 32) as usize;
    LaunchConfig { grid_dim: (rows.div_ceil(warps) as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// The element range of a contiguous layout, or an error naming the op.
fn range(layout: &Layout, op: &str) -> Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("{op}: the tensor must be contiguous"),
    }
}

/// Rows and row length of a contiguous layout.
fn rows_of(layout: &Layout) -> Result<(usize, usize)> {
    let n = *layout.shape().dims().last().unwrap_or(&1);
    Ok((layout.shape().elem_count() / n.max(1), n))
}

/// Loads `name` followed by the dtype's suffix (`_f32`, `_bf16`).
fn kernel(dev: &CudaDevice, name: &str, dtype: DType) -> Result<(std::sync::Arc<CudaStream>, CudaFunction)> {
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        other => candle_core::bail!("{name}: dtype {other:?} is not supported (f32 or bf16)"),
    };
    let func = dev.get_or_load_custom_func(&format!("{name}_{suffix}"), MODULE, PTX)?;
    Ok((dev.cuda_stream(), func.into_cuda_function()))
}

pub(super) fn attention_softmax(
    scale: f32,
    (scores, scores_l): (&mut CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
) -> Result<()> {
    let op = "cuda-attention-softmax";
    let (rows, keys) = rows_of(scores_l)?;
    let (items, bias_keys) = rows_of(bias_l)?;
    if bias_keys != keys || items == 0 || rows % items != 0 || bias.dtype() != DType::F32 {
        candle_core::bail!(
            "{op}: scores {:?} and key bias {:?} ({:?}) disagree",
            scores_l.shape(),
            bias_l.shape(),
            bias.dtype()
        );
    }
    let (scores_r, bias_r) = (range(scores_l, op)?, range(bias_l, op)?);
    let func = kernel(&scores.device, "attention_softmax", scores.dtype())?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(bias_r);
    let (rows_i, per_item, keys_i) = (rows as i64, (rows / items) as i64, keys as i32);
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        scores: &mut CudaStorage,
        r: std::ops::Range<usize>,
        bias: &CudaView<f32>,
        args: (i64, i64, i32, f32),
    ) -> Result<()> {
        let mut scores = scores.as_cuda_slice_mut::<T>()?.slice_mut(r);
        let mut b = stream.launch_builder(func);
        b.arg(&mut scores).arg(bias).arg(&args.0).arg(&args.1).arg(&args.2).arg(&args.3);
        // SAFETY: the kernel reads `rows × keys` scores and `items × keys` biases, the sizes
        // checked above, and writes the scores only.
        unsafe { b.launch(rows_config(args.0 as usize)) }.w()?;
        Ok(())
    }
    let args = (rows_i, per_item, keys_i, scale);
    match scores.dtype() {
        DType::BF16 => go::<bf16>(&func, scores, scores_r, &bias, args),
        _ => go::<f32>(&func, scores, scores_r, &bias, args),
    }
}

pub(super) fn residual_layer_norm(
    eps: f32,
    (x, x_l): (&mut CudaStorage, &Layout),
    (residual, residual_l): (&CudaStorage, &Layout),
    (params, params_l): (&CudaStorage, &Layout),
) -> Result<()> {
    let op = "cuda-residual-layer-norm";
    let (rows, n) = rows_of(x_l)?;
    if residual_l.shape() != x_l.shape()
        || residual.dtype() != x.dtype()
        || params_l.shape().dims() != [3, n]
        || params.dtype() != DType::F32
    {
        candle_core::bail!(
            "{op}: x {:?}, residual {:?} and params {:?} disagree",
            x_l.shape(),
            residual_l.shape(),
            params_l.shape()
        );
    }
    let (x_r, residual_r, params_r) = (range(x_l, op)?, range(residual_l, op)?, range(params_l, op)?);
    let func = kernel(&x.device, "residual_layer_norm", x.dtype())?;
    let params = params.as_cuda_slice::<f32>()?.slice(params_r);
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        x: &mut CudaStorage,
        (x_r, residual_r): (std::ops::Range<usize>, std::ops::Range<usize>),
        residual: &CudaStorage,
        params: &CudaView<f32>,
        (rows, n, eps): (i64, i32, f32),
    ) -> Result<()> {
        let residual = residual.as_cuda_slice::<T>()?.slice(residual_r);
        let mut x = x.as_cuda_slice_mut::<T>()?.slice_mut(x_r);
        let mut b = stream.launch_builder(func);
        b.arg(&mut x).arg(&residual).arg(params).arg(&rows).arg(&n).arg(&eps);
        // SAFETY: x and residual hold `rows × n` elements, params `3 × n` (checked above).
        unsafe { b.launch(rows_config(rows as usize)) }.w()?;
        Ok(())
    }
    let args = (rows as i64, n as i32, eps);
    match x.dtype() {
        DType::BF16 => go::<bf16>(&func, x, (x_r, residual_r), residual, &params, args),
        _ => go::<f32>(&func, x, (x_r, residual_r), residual, &params, args),
    }
}

pub(super) fn bias_activation(
    gelu: bool,
    (x, x_l): (&mut CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
) -> Result<()> {
    let op = "cuda-bias-activation";
    let (_, n) = rows_of(x_l)?;
    if bias_l.shape().dims() != [n] || bias.dtype() != DType::F32 {
        candle_core::bail!("{op}: x {:?} and bias {:?} ({:?}) disagree", x_l.shape(), bias_l.shape(), bias.dtype());
    }
    let (x_r, bias_r) = (range(x_l, op)?, range(bias_l, op)?);
    let func = kernel(&x.device, "bias_activation", x.dtype())?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(bias_r);
    let total = x_l.shape().elem_count();
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        x: &mut CudaStorage,
        x_r: std::ops::Range<usize>,
        bias: &CudaView<f32>,
        (total, n, gelu): (i64, i32, i32),
    ) -> Result<()> {
        let mut x = x.as_cuda_slice_mut::<T>()?.slice_mut(x_r);
        let mut b = stream.launch_builder(func);
        b.arg(&mut x).arg(bias).arg(&total).arg(&n).arg(&gelu);
        let blocks = (total as usize).div_ceil(256).min(65_535 * 8) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks.max(1), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: x holds `total` elements, a multiple of n; bias holds n (checked above).
        unsafe { b.launch(cfg) }.w()?;
        Ok(())
    }
    let args = (total as i64, n as i32, gelu as i32);
    match x.dtype() {
        DType::BF16 => go::<bf16>(&func, x, x_r, &bias, args),
        _ => go::<f32>(&func, x, x_r, &bias, args),
    }
}
