//! Launching the kernels of `kernels.cu` on candle's CUDA storages.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtrMut, LaunchConfig, PushKernelArg,
};
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

/// Runs `call(workspace, size)` twice: with a negative `size`, which only asks how many bytes
/// of scratch the kernel needs (stored in `size`), then with a workspace of that many bytes
/// (a null pointer when none), freed in stream order after the call.
pub(super) fn with_workspace(dev: &CudaDevice, mut call: impl FnMut(u64, &mut i64) -> Result<()>) -> Result<()> {
    let mut size = -1i64;
    call(0, &mut size)?;
    let Ok(bytes) = usize::try_from(size) else { candle_core::bail!("a kernel asked for a workspace of {size} bytes") };
    if bytes == 0 {
        return call(0, &mut size);
    }
    // SAFETY: scratch the kernel owns for the call.
    let mut workspace = unsafe { dev.alloc::<u8>(bytes) }?;
    let stream = dev.cuda_stream();
    let (ptr, _guard) = workspace.device_ptr_mut(&stream);
    call(ptr, &mut size)
}

/// The element range of a contiguous layout, or an error naming the op.
pub(super) fn range(layout: &Layout, op: &str) -> Result<std::ops::Range<usize>> {
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
    if bias_keys != keys || items == 0 || !rows.is_multiple_of(items) || bias.dtype() != DType::F32 {
        candle_core::bail!(
            "{op}: scores {:?} and key bias {:?} ({:?}) disagree",
            scores_l.shape(),
            bias_l.shape(),
            bias.dtype()
        );
    }
    let (scores_r, bias_r) = (range(scores_l, op)?, range(bias_l, op)?);
    // Rows that fit the register kernel: whole 16-byte vectors, 1 to 4 per lane, aligned.
    let vec = vec_of(scores.dtype());
    let per_lane = keys / (32 * vec);
    let in_registers = keys.is_multiple_of(32 * vec)
        && (1..=4).contains(&per_lane)
        && (scores_r.start * scores.dtype().size_in_bytes()).is_multiple_of(16);
    let name = if in_registers { "attention_softmax_regs" } else { "attention_softmax" };
    let func = kernel(&scores.device, name, scores.dtype())?;
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

/// Whether a residual LayerNorm (inference or training) over rows of `n` features, its tensors
/// starting at element offsets `starts`, runs the register kernels: `n` a multiple of 128 up to
/// 1,024 and every start a multiple of 4 elements (the kernels load 4 at a time); elsewhere the
/// row-strided kernels run (inference and training's forward), or the caller composes
/// (training's backward pass, the embeddings).
fn norm_in_registers(n: usize, starts: &[usize]) -> bool {
    n.is_multiple_of(128) && (1..=8).contains(&(n / 128)) && starts.iter().all(|s| s.is_multiple_of(4))
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
    let regs = norm_in_registers(n, &[x_r.start, residual_r.start, params_r.start]);
    let func = kernel(&x.device, if regs { "residual_layer_norm_regs" } else { "residual_layer_norm" }, x.dtype())?;
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

/// `LayerNorm(x + bias + residual)` of a bf16 `x` and an f32 `residual` into a new f32 buffer,
/// and, where the register kernel runs, the same values in a new bf16 buffer (`twin.rs`).
pub(super) fn residual_layer_norm_into(
    eps: f32,
    (x, x_l): (&CudaStorage, &Layout),
    (residual, residual_l): (&CudaStorage, &Layout),
    (params, params_l): (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Option<CudaStorage>)> {
    let op = "cuda-residual-layer-norm-into";
    let (rows, n) = rows_of(x_l)?;
    if residual_l.shape() != x_l.shape()
        || x.dtype() != DType::BF16
        || residual.dtype() != DType::F32
        || params_l.shape().dims() != [3, n]
        || params.dtype() != DType::F32
    {
        candle_core::bail!(
            "{op}: x {:?} ({:?}), residual {:?} ({:?}) and params {:?} disagree",
            x_l.shape(),
            x.dtype(),
            residual_l.shape(),
            residual.dtype(),
            params_l.shape()
        );
    }
    let (x_r, residual_r, params_r) = (range(x_l, op)?, range(residual_l, op)?, range(params_l, op)?);
    let dev = x.device.clone();
    let twin = norm_in_registers(n, &[x_r.start, residual_r.start, params_r.start]);
    let name = if twin { "residual_layer_norm_regs_bf16_f32_twin" } else { "residual_layer_norm_bf16_f32" };
    let func = dev.get_or_load_custom_func(name, MODULE, PTX)?.into_cuda_function();
    let stream = dev.cuda_stream();
    let x = x.as_cuda_slice::<bf16>()?.slice(x_r);
    let residual = residual.as_cuda_slice::<f32>()?.slice(residual_r);
    let params = params.as_cuda_slice::<f32>()?.slice(params_r);
    let (mut out, mut copy) = output_and_copy(&dev, rows * n, twin)?;
    let (rows_i, n_i) = (rows as i64, n as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(&x).arg(&residual).arg(&params).arg(&mut out);
    if let Some(copy) = copy.as_mut() {
        b.arg(copy);
    }
    b.arg(&rows_i).arg(&n_i).arg(&eps);
    // SAFETY: x and residual hold `rows × n` elements, params `3 × n`, out (and the twin) `rows × n`.
    unsafe { b.launch(rows_config(rows)) }.w()?;
    Ok(storages(&dev, out, copy))
}

/// A new f32 output of `n` elements and, with `copy`, its bf16 copy's buffer (the caller's
/// kernel writes every element of both before anything reads them).
fn output_and_copy(dev: &CudaDevice, n: usize, copy: bool) -> Result<(CudaSlice<f32>, Option<CudaSlice<bf16>>)> {
    // SAFETY: see above.
    let out = unsafe { dev.alloc::<f32>(n) }?;
    let copy = if copy { Some(unsafe { dev.alloc::<bf16>(n) }?) } else { None };
    Ok((out, copy))
}

/// [`output_and_copy`]'s buffers as candle storages.
fn storages(
    dev: &CudaDevice,
    out: CudaSlice<f32>,
    copy: Option<CudaSlice<bf16>>,
) -> (CudaStorage, Option<CudaStorage>) {
    let copy = copy.map(|c| CudaStorage::wrap_cuda_slice(c, dev.clone()));
    (CudaStorage::wrap_cuda_slice(out, dev.clone()), copy)
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
    let vectorised = n.is_multiple_of(vec_of(x.dtype())) && (x_r.start * x.dtype().size_in_bytes()).is_multiple_of(16);
    let func = kernel(&x.device, if vectorised { "bias_activation_vec" } else { "bias_activation" }, x.dtype())?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(bias_r);
    let total = x_l.shape().elem_count();
    // Grid-stride over the work items (vectors or elements), at most `items_config`'s blocks.
    // Until commit 2a6340c the grid had a thread per element, so 7 of 8 threads of the bf16 vector
    // kernel had no work (their blocks only launched and ended): the pass over [65,536, 2,304]
    // bf16 took 0.47 ms on an H200, 1.3 TB/s of the card's ~4.8.
    let cfg = items_config(if vectorised { total / vec_of(x.dtype()) } else { total });
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        x: &mut CudaStorage,
        x_r: std::ops::Range<usize>,
        bias: &CudaView<f32>,
        (total, n, gelu): (i64, i32, i32),
        cfg: LaunchConfig,
    ) -> Result<()> {
        let mut x = x.as_cuda_slice_mut::<T>()?.slice_mut(x_r);
        let mut b = stream.launch_builder(func);
        b.arg(&mut x).arg(bias).arg(&total).arg(&n).arg(&gelu);
        // SAFETY: x holds `total` elements, a multiple of n; bias holds n (checked above).
        unsafe { b.launch(cfg) }.w()?;
        Ok(())
    }
    let args = (total as i64, n as i32, gelu as i32);
    match x.dtype() {
        DType::BF16 => go::<bf16>(&func, x, x_r, &bias, args, cfg),
        _ => go::<f32>(&func, x, x_r, &bias, args, cfg),
    }
}

/// Elements per 16-byte vector of `dtype`.
fn vec_of(dtype: DType) -> usize {
    if dtype == DType::BF16 {
        8
    } else {
        4
    }
}

/// A grid-stride launch over `items` threads' worth of work.
fn items_config(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(256).clamp(1, 132 * 32) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// A new buffer of `n` elements of `dtype` on `dev` (every element written by a kernel).
fn alloc_like(dev: &CudaDevice, dtype: DType, n: usize) -> Result<CudaStorage> {
    // SAFETY: the caller's kernel writes every element before anything reads it.
    Ok(match dtype {
        DType::BF16 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<bf16>(n) }?, dev.clone()),
        _ => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<f32>(n) }?, dev.clone()),
    })
}

/// The 16-byte-aligned contiguous range of a layout, or an error naming the op.
fn aligned_range(layout: &Layout, dtype: DType, op: &str) -> Result<std::ops::Range<usize>> {
    let r = range(layout, op)?;
    if !(r.start * dtype.size_in_bytes()).is_multiple_of(16) {
        candle_core::bail!("{op}: the tensor does not start on a 16-byte boundary");
    }
    Ok(r)
}

/// q, k, v `[3, batch, heads, seq, head_size]` from a fused projection `[batch · seq, 3 · hidden]`
/// and its bias.
pub(super) fn split_qkv(
    (batch, seq, heads, head_size): (usize, usize, usize, usize),
    (x, x_l): (&CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
) -> Result<CudaStorage> {
    let op = "cuda-split-qkv";
    let hidden = heads * head_size;
    let vec = vec_of(x.dtype());
    if x_l.shape().dims() != [batch * seq, 3 * hidden]
        || bias_l.shape().dims() != [3 * hidden]
        || bias.dtype() != DType::F32
        || !head_size.is_multiple_of(vec)
    {
        candle_core::bail!(
            "{op}: x {:?} and bias {:?} do not fit {batch}×{seq}, {heads} heads of {head_size}",
            x_l.shape(),
            bias_l.shape()
        );
    }
    let (x_r, bias_r) = (aligned_range(x_l, x.dtype(), op)?, range(bias_l, op)?);
    let dev = x.device.clone();
    let (stream, func) = kernel(&dev, "split_qkv", x.dtype())?;
    let total = 3 * batch * seq * hidden;
    let mut out = alloc_like(&dev, x.dtype(), total)?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(bias_r);
    let args = (batch as i64, seq as i32, heads as i32, head_size as i32);
    fn go<T: CudaDType>(
        stream: &CudaStream,
        func: &CudaFunction,
        (x, x_r): (&CudaStorage, std::ops::Range<usize>),
        bias: &CudaView<f32>,
        out: &mut CudaStorage,
        args: (i64, i32, i32, i32),
        vectors: usize,
    ) -> Result<()> {
        let x = x.as_cuda_slice::<T>()?.slice(x_r);
        let out = out.as_cuda_slice_mut::<T>()?;
        let mut b = stream.launch_builder(func);
        b.arg(&x).arg(bias).arg(out).arg(&args.0).arg(&args.1).arg(&args.2).arg(&args.3);
        // SAFETY: x holds batch·seq rows of 3·hidden, bias 3·hidden, out 3·batch·seq·hidden
        // elements (checked above); head_size is a multiple of the vector width.
        unsafe { b.launch(items_config(vectors)) }.w()?;
        Ok(())
    }
    let vectors = total / vec;
    match x.dtype() {
        DType::BF16 => go::<bf16>(&stream, &func, (x, x_r), &bias, &mut out, args, vectors)?,
        _ => go::<f32>(&stream, &func, (x, x_r), &bias, &mut out, args, vectors)?,
    }
    Ok(out)
}

/// `[batch, heads, seq, head_size]` → `[batch, seq, heads · head_size]`.
pub(super) fn merge_heads(heads: usize, (x, x_l): (&CudaStorage, &Layout)) -> Result<CudaStorage> {
    let op = "cuda-merge-heads";
    let (batch, h, seq, head_size) = x_l.shape().dims4()?;
    let vec = vec_of(x.dtype());
    if h != heads || !head_size.is_multiple_of(vec) {
        candle_core::bail!("{op}: {:?} is not [batch, {heads}, seq, a multiple of {vec}]", x_l.shape());
    }
    let x_r = aligned_range(x_l, x.dtype(), op)?;
    let dev = x.device.clone();
    let (stream, func) = kernel(&dev, "merge_heads", x.dtype())?;
    let total = batch * heads * seq * head_size;
    let mut out = alloc_like(&dev, x.dtype(), total)?;
    let args = (batch as i64, seq as i32, heads as i32, head_size as i32);
    fn go<T: CudaDType>(
        stream: &CudaStream,
        func: &CudaFunction,
        (x, x_r): (&CudaStorage, std::ops::Range<usize>),
        out: &mut CudaStorage,
        args: (i64, i32, i32, i32),
        vectors: usize,
    ) -> Result<()> {
        let x = x.as_cuda_slice::<T>()?.slice(x_r);
        let out = out.as_cuda_slice_mut::<T>()?;
        let mut b = stream.launch_builder(func);
        b.arg(&x).arg(out).arg(&args.0).arg(&args.1).arg(&args.2).arg(&args.3);
        // SAFETY: x and out hold batch·heads·seq·head_size elements (the layout above).
        unsafe { b.launch(items_config(vectors)) }.w()?;
        Ok(())
    }
    let vectors = total / vec;
    match x.dtype() {
        DType::BF16 => go::<bf16>(&stream, &func, (x, x_r), &mut out, args, vectors)?,
        _ => go::<f32>(&stream, &func, (x, x_r), &mut out, args, vectors)?,
    }
    Ok(out)
}

pub(super) fn dropout_mask(
    dev: &CudaDevice,
    dtype: DType,
    n: usize,
    (seed, threshold, scale): (u64, u32, f32),
) -> Result<CudaStorage> {
    let out = alloc_like(dev, dtype, n)?;
    let func = kernel(dev, "dropout_mask", dtype)?;
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        mut out: CudaStorage,
        n: usize,
        (seed, threshold, scale): (u64, u32, f32),
    ) -> Result<CudaStorage> {
        let n_i = n as i64;
        {
            let slice = out.as_cuda_slice_mut::<T>()?;
            let mut b = stream.launch_builder(func);
            b.arg(slice).arg(&n_i).arg(&seed).arg(&threshold).arg(&scale);
            // SAFETY: the kernel writes the `n` elements of `out` and reads nothing.
            unsafe { b.launch(items_config(n)) }.w()?;
        }
        Ok(out)
    }
    match dtype {
        DType::BF16 => go::<bf16>(&func, out, n, (seed, threshold, scale)),
        _ => go::<f32>(&func, out, n, (seed, threshold, scale)),
    }
}

/// Queues `hold_gpu`: one thread that keeps the stream busy for `nanos` ns (`gpu_clock`).
pub(super) fn hold(dev: &CudaDevice, nanos: u64) -> Result<()> {
    let func = dev.get_or_load_custom_func("hold_gpu", MODULE, PTX)?.into_cuda_function();
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(&nanos);
    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the kernel reads the GPU's clock and touches no memory.
    unsafe { b.launch(one) }.w()?;
    Ok(())
}

pub(super) fn adamw_step(
    k: &super::AdamWStep,
    (p, p_l): (&mut CudaStorage, &Layout),
    (grad, grad_l): (&CudaStorage, &Layout),
    (moments, moments_l): (&CudaStorage, &Layout),
) -> Result<()> {
    let op = "cuda-adamw-step";
    let n = p_l.shape().elem_count();
    if grad_l.shape().elem_count() != n
        || moments_l.shape().elem_count() != 2 * n
        || [p.dtype(), grad.dtype(), moments.dtype()] != [DType::F32; 3]
    {
        candle_core::bail!(
            "{op}: parameter {:?}, gradient {:?} and moments {:?} disagree (f32, moments [2, n])",
            p_l.shape(),
            grad_l.shape(),
            moments_l.shape()
        );
    }
    let (p_r, grad_r, moments_r) = (range(p_l, op)?, range(grad_l, op)?, range(moments_l, op)?);
    let (stream, func) = kernel(&p.device, "adamw_step", DType::F32)?;
    let grad = grad.as_cuda_slice::<f32>()?.slice(grad_r);
    let moments = moments.as_cuda_slice::<f32>()?.slice(moments_r);
    let mut p = p.as_cuda_slice_mut::<f32>()?.slice_mut(p_r);
    let n_i = n as i64;
    let mut b = stream.launch_builder(&func);
    b.arg(&mut p).arg(&grad).arg(&moments).arg(&n_i);
    let c = k.constants();
    for v in &c {
        b.arg(v);
    }
    // SAFETY: p and grad hold n elements, moments 2n (checked above). The kernel also writes
    // the moments: they are the optimizer's own buffer, which nothing else reads or holds.
    unsafe { b.launch(items_config(n)) }.w()?;
    Ok(())
}

/// The dropout of a training kernel: (seed, threshold, keep factor); no dropout is threshold
/// 0 and factor 1 (every element kept as it is).
pub(super) type DropoutArgs = (u64, u32, f32);

/// `attention_probs_train` (`grad: None`) or its backward (`grad: Some(dy)`) into a new
/// buffer. `scores: [rows, keys]` contiguous, `key_bias: [items, keys]` f32.
pub(super) fn attention_probs_train(
    scale: f32,
    dropout: DropoutArgs,
    (scores, scores_l): (&CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
    grad: Option<(&CudaStorage, &Layout)>,
) -> Result<CudaStorage> {
    let op = "cuda-attention-probs-train";
    let (rows, keys) = rows_of(scores_l)?;
    let (items, bias_keys) = rows_of(bias_l)?;
    if bias_keys != keys || items == 0 || !rows.is_multiple_of(items) || bias.dtype() != DType::F32 {
        candle_core::bail!("{op}: scores {:?} and key bias {:?} disagree", scores_l.shape(), bias_l.shape());
    }
    if let Some((dy, dy_l)) = grad {
        if dy_l.shape() != scores_l.shape() || dy.dtype() != scores.dtype() {
            candle_core::bail!("{op}: gradient {:?} and scores {:?} disagree", dy_l.shape(), scores_l.shape());
        }
    }
    let dtype = scores.dtype();
    let dev = &scores.device;
    let out = alloc_like(dev, dtype, rows * keys)?;
    let (scores_r, bias_r) = (range(scores_l, op)?, range(bias_l, op)?);
    let grad_r = grad.map(|(_, l)| range(l, op)).transpose()?;
    // Rows that fit the register kernels: whole 16-byte vectors, 1 to 4 per lane, aligned
    // (LONGREAD_CUDA_PROBS_KERNEL=rows keeps the row-strided kernels, to compare or to rule
    // the register kernels out).
    let vec = vec_of(dtype);
    let aligned = |r: &std::ops::Range<usize>| (r.start * dtype.size_in_bytes()).is_multiple_of(16);
    let in_registers = super::train_probs_in_registers()
        && keys.is_multiple_of(32 * vec)
        && (1..=4).contains(&(keys / (32 * vec)))
        && aligned(&scores_r)
        && grad_r.as_ref().is_none_or(aligned);
    let name = match (grad.is_some(), in_registers) {
        (false, false) => "attention_probs_train",
        (true, false) => "attention_probs_train_grad",
        (false, true) => "attention_probs_train_regs",
        (true, true) => "attention_probs_train_grad_regs",
    };
    let func = kernel(dev, name, dtype)?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(bias_r);
    #[allow(clippy::too_many_arguments)]
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        scores: &CudaStorage,
        scores_r: std::ops::Range<usize>,
        bias: &CudaView<f32>,
        grad: Option<(&CudaStorage, std::ops::Range<usize>)>,
        mut out: CudaStorage,
        (rows, per_item, keys, scale): (i64, i64, i32, f32),
        (seed, threshold, keep): DropoutArgs,
    ) -> Result<CudaStorage> {
        let scores = scores.as_cuda_slice::<T>()?.slice(scores_r);
        let dy = grad.map(|(g, r)| g.as_cuda_slice::<T>().map(|s| s.slice(r))).transpose()?;
        {
            let slice = out.as_cuda_slice_mut::<T>()?;
            let mut b = stream.launch_builder(func);
            b.arg(&scores).arg(bias);
            if let Some(dy) = &dy {
                b.arg(dy);
            }
            b.arg(slice).arg(&rows).arg(&per_item).arg(&keys).arg(&scale).arg(&seed).arg(&threshold).arg(&keep);
            // SAFETY: the kernel reads `rows × keys` scores (and gradients), `items × keys`
            // biases (sizes checked above) and writes the `rows × keys` elements of `out`.
            unsafe { b.launch(rows_config(rows as usize)) }.w()?;
        }
        Ok(out)
    }
    let shape = (rows as i64, (rows / items) as i64, keys as i32, scale);
    let grad = grad.map(|(g, _)| g).zip(grad_r);
    match dtype {
        DType::BF16 => go::<bf16>(&func, scores, scores_r, &bias, grad, out, shape, dropout),
        _ => go::<f32>(&func, scores, scores_r, &bias, grad, out, shape, dropout),
    }
}

/// `layer_norm_train` (`grad: None`: `y [rows, cols]`) or its backward (`grad: Some(dy)`:
/// `[2, rows, cols]`, dx and x̂), f32, into a new buffer; `params = (gamma, beta or dy)`.
pub(super) fn layer_norm_train(
    eps: f32,
    (x, x_l): (&CudaStorage, &Layout),
    (gamma, gamma_l): (&CudaStorage, &Layout),
    (other, other_l): (&CudaStorage, &Layout),
    backward: bool,
) -> Result<CudaStorage> {
    let op = "cuda-layer-norm-train";
    let (rows, cols) = rows_of(x_l)?;
    let other_ok = if backward { other_l.shape() == x_l.shape() } else { other_l.shape().dims() == [cols] };
    if gamma_l.shape().dims() != [cols] || !other_ok || [x.dtype(), gamma.dtype(), other.dtype()] != [DType::F32; 3] {
        candle_core::bail!(
            "{op}: x {:?}, gamma {:?} and {:?} disagree (f32)",
            x_l.shape(),
            gamma_l.shape(),
            other_l.shape()
        );
    }
    let dev = &x.device;
    let mut out = alloc_like(dev, DType::F32, if backward { 2 } else { 1 } * rows * cols)?;
    let (stream, func) = kernel(dev, if backward { "layer_norm_train_grad" } else { "layer_norm_train" }, DType::F32)?;
    let x = x.as_cuda_slice::<f32>()?.slice(range(x_l, op)?);
    let gamma = gamma.as_cuda_slice::<f32>()?.slice(range(gamma_l, op)?);
    let other = other.as_cuda_slice::<f32>()?.slice(range(other_l, op)?);
    let (rows_i, cols_i) = (rows as i64, cols as i32);
    {
        let slice = out.as_cuda_slice_mut::<f32>()?;
        let mut b = stream.launch_builder(&func);
        b.arg(&x).arg(&gamma).arg(&other).arg(slice).arg(&rows_i).arg(&cols_i).arg(&eps);
        // SAFETY: x (and dy) hold rows × cols, gamma (and beta) cols (checked above); the
        // kernel writes the rows × cols (backward: 2 × rows × cols) elements of `out`.
        unsafe { b.launch(rows_config(rows)) }.w()?;
    }
    Ok(out)
}

/// `bias_activation_train` (`grad: None`) or `bias_gelu_train_grad` (`grad: Some(dy)`) into a
/// new buffer. `x: [rows, cols]` contiguous, `bias: [cols]` f32.
pub(super) fn bias_activation_train(
    gelu: bool,
    (x, x_l): (&CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
    grad: Option<(&CudaStorage, &Layout)>,
) -> Result<CudaStorage> {
    let op = "cuda-bias-activation-train";
    let (_, cols) = rows_of(x_l)?;
    if bias_l.shape().dims() != [cols] || bias.dtype() != DType::F32 {
        candle_core::bail!("{op}: x {:?} and bias {:?} disagree", x_l.shape(), bias_l.shape());
    }
    if let Some((dy, dy_l)) = grad {
        if dy_l.shape() != x_l.shape() || dy.dtype() != x.dtype() {
            candle_core::bail!("{op}: gradient {:?} and x {:?} disagree", dy_l.shape(), x_l.shape());
        }
    }
    let (dtype, dev) = (x.dtype(), &x.device);
    let total = x_l.shape().elem_count();
    let out = alloc_like(dev, dtype, total)?;
    let x_r = range(x_l, op)?;
    let grad_r = grad.map(|(_, l)| range(l, op)).transpose()?;
    // The 16-byte-vector kernels where rows are whole vectors and the inputs start on 16 bytes
    // (the output is new: aligned).
    let aligned = |start: usize| (start * dtype.size_in_bytes()).is_multiple_of(16);
    let vectorised =
        cols.is_multiple_of(vec_of(dtype)) && aligned(x_r.start) && grad_r.as_ref().is_none_or(|r| aligned(r.start));
    let name = match (grad.is_some(), vectorised) {
        (true, true) => "bias_gelu_train_grad_vec",
        (true, false) => "bias_gelu_train_grad",
        (false, true) => "bias_activation_train_vec",
        (false, false) => "bias_activation_train",
    };
    let func = kernel(dev, name, dtype)?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(range(bias_l, op)?);
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        x: (&CudaStorage, std::ops::Range<usize>),
        bias: &CudaView<f32>,
        grad: Option<(&CudaStorage, std::ops::Range<usize>)>,
        mut out: CudaStorage,
        (total, cols, gelu): (i64, i32, i32),
    ) -> Result<CudaStorage> {
        let xs = x.0.as_cuda_slice::<T>()?.slice(x.1);
        let dy = grad.map(|(g, r)| g.as_cuda_slice::<T>().map(|s| s.slice(r))).transpose()?;
        {
            let slice = out.as_cuda_slice_mut::<T>()?;
            let mut b = stream.launch_builder(func);
            b.arg(&xs).arg(bias);
            if let Some(dy) = &dy {
                b.arg(dy);
            }
            b.arg(slice).arg(&total).arg(&cols);
            if dy.is_none() {
                b.arg(&gelu);
            }
            // SAFETY: x (and dy) hold `total` elements, a multiple of cols; bias holds cols
            // (checked above); the kernel writes the `total` elements of `out`.
            unsafe { b.launch(items_config(total as usize)) }.w()?;
        }
        Ok(out)
    }
    let args = (total as i64, cols as i32, gelu as i32);
    let grad = grad.map(|(g, _)| g).zip(grad_r);
    match dtype {
        DType::BF16 => go::<bf16>(&func, (x, x_r), &bias, grad, out, args),
        _ => go::<f32>(&func, (x, x_r), &bias, grad, out, args),
    }
}

/// `residual_norm_train` into a new buffer: `LayerNorm((x + bias) · dropout + residual) · γ + β`
/// of `x, residual: [rows, cols]` (one dtype, f32 or bf16, contiguous), `params = [bias, γ, β]`
/// (`[3, cols]`, f32).
pub(super) fn residual_norm_train(
    eps: f32,
    dropout: DropoutArgs,
    (x, x_l): (&CudaStorage, &Layout),
    (residual, residual_l): (&CudaStorage, &Layout),
    (params, params_l): (&CudaStorage, &Layout),
) -> Result<CudaStorage> {
    let op = "cuda-residual-norm-train";
    let (rows, cols) = rows_of(x_l)?;
    if residual_l.shape() != x_l.shape()
        || residual.dtype() != x.dtype()
        || params_l.shape().dims() != [3, cols]
        || params.dtype() != DType::F32
    {
        candle_core::bail!(
            "{op}: x {:?} ({:?}), residual {:?} ({:?}) and params {:?} ({:?}) disagree",
            x_l.shape(),
            x.dtype(),
            residual_l.shape(),
            residual.dtype(),
            params_l.shape(),
            params.dtype()
        );
    }
    let (dtype, dev) = (x.dtype(), &x.device);
    let out = alloc_like(dev, dtype, rows * cols)?;
    let ranges = (range(x_l, op)?, range(residual_l, op)?);
    let params_r = range(params_l, op)?;
    // The register kernel (one entry point per row length) where the row fits it.
    let regs = norm_in_registers(cols, &[ranges.0.start, ranges.1.start, params_r.start]);
    let name = if regs { format!("residual_norm_train_regs{}", cols / 128) } else { "residual_norm_train".into() };
    let func = kernel(dev, &name, dtype)?;
    let params = params.as_cuda_slice::<f32>()?.slice(params_r);
    fn go<T: CudaDType>(
        (stream, func): &(std::sync::Arc<CudaStream>, CudaFunction),
        (x, residual): (&CudaStorage, &CudaStorage),
        (x_r, residual_r): (std::ops::Range<usize>, std::ops::Range<usize>),
        params: &CudaView<f32>,
        mut out: CudaStorage,
        (rows, cols, eps, regs): (i64, i32, f32, bool),
        (seed, threshold, keep): DropoutArgs,
    ) -> Result<CudaStorage> {
        let x = x.as_cuda_slice::<T>()?.slice(x_r);
        let residual = residual.as_cuda_slice::<T>()?.slice(residual_r);
        {
            let slice = out.as_cuda_slice_mut::<T>()?;
            let mut b = stream.launch_builder(func);
            b.arg(&x).arg(&residual).arg(params).arg(slice).arg(&rows);
            if !regs {
                // The register kernels know their row length.
                b.arg(&cols);
            }
            b.arg(&eps).arg(&seed).arg(&threshold).arg(&keep);
            // SAFETY: x and residual hold `rows × cols` elements, params `3 × cols` (checked
            // above); the kernel writes the `rows × cols` elements of `out`.
            unsafe { b.launch(rows_config(rows as usize)) }.w()?;
        }
        Ok(out)
    }
    let sizes = (rows as i64, cols as i32, eps, regs);
    match dtype {
        DType::BF16 => go::<bf16>(&func, (x, residual), ranges, &params, out, sizes, dropout),
        _ => go::<f32>(&func, (x, residual), ranges, &params, out, sizes, dropout),
    }
}

/// The gradients of [`residual_norm_train`] in one kernel
/// (`residual_norm_train_grad_{shared,regs}<NV>`), given the output's gradient `dy`: `(d x, d residual,
/// d params)` (`[rows, cols]` twice in the inputs' dtype, `[3, cols]` f32: the bias's, γ's and
/// β's). `None` where the register kernels do not fit (the caller composes the gradients):
/// rows of 128 to 1,024 features in steps of 128, every tensor starting on 4 elements.
pub(super) fn residual_norm_train_grad(
    eps: f32,
    dropout: DropoutArgs,
    (x, x_l): (&CudaStorage, &Layout),
    (residual, residual_l): (&CudaStorage, &Layout),
    (params, params_l): (&CudaStorage, &Layout),
    (dy, dy_l): (&CudaStorage, &Layout),
) -> Result<Option<(CudaStorage, CudaStorage, CudaStorage)>> {
    let op = "cuda-residual-norm-train-grad";
    let (rows, cols) = rows_of(x_l)?;
    if residual_l.shape() != x_l.shape()
        || dy_l.shape() != x_l.shape()
        || residual.dtype() != x.dtype()
        || dy.dtype() != x.dtype()
        || params_l.shape().dims() != [3, cols]
        || params.dtype() != DType::F32
    {
        candle_core::bail!(
            "{op}: x {:?} ({:?}), residual {:?} ({:?}), gradient {:?} ({:?}) and params {:?} disagree",
            x_l.shape(),
            x.dtype(),
            residual_l.shape(),
            residual.dtype(),
            dy_l.shape(),
            dy.dtype(),
            params_l.shape()
        );
    }
    let ranges = [range(x_l, op)?, range(residual_l, op)?, range(params_l, op)?, range(dy_l, op)?];
    if rows == 0 || !norm_in_registers(cols, &ranges.iter().map(|r| r.start).collect::<Vec<_>>()) {
        return Ok(None);
    }
    let [x_r, residual_r, params_r, dy_r] = ranges;
    let (dtype, dev) = (x.dtype(), x.device.clone());
    // Blocks of 4 warps (the shared-memory sums are sized for 4), as many as the GPU holds at
    // once for the kernel's registers and shared memory, or one warp per row if fewer. The
    // running sums in shared memory (`_shared`: ~120 registers a thread at 768 features, 4 blocks
    // per multiprocessor) or in registers (`_regs`: ~200, 2 blocks): the same bits.
    const WARPS: usize = 4;
    let sums = if super::norm_grad_sums_shared() { "shared" } else { "regs" };
    let name = format!("residual_norm_train_grad_{sums}{}", cols / 128);
    let (stream, func) = kernel(&dev, &name, dtype)?;
    let resident = super::waves::resident_blocks(&dev, &format!("{name}_{dtype:?}"), &func, (WARPS * 32) as u32);
    let blocks = super::waves::one_wave_blocks(rows, WARPS, resident);
    let (dx, d_residual) = (alloc_like(&dev, dtype, rows * cols)?, alloc_like(&dev, dtype, rows * cols)?);
    // SAFETY: each block writes its `3 × cols` sums before the second kernel reads them.
    let mut partial = unsafe { dev.alloc::<f32>(blocks * 3 * cols) }?;
    let mut d_params = unsafe { dev.alloc::<f32>(3 * cols) }?;
    let params = params.as_cuda_slice::<f32>()?.slice(params_r);
    let (seed, threshold, keep) = dropout;
    let rows_i = rows as i64;
    fn go<T: CudaDType>(
        (stream, func): (&std::sync::Arc<CudaStream>, &CudaFunction),
        [x, residual, dy]: [(&CudaStorage, std::ops::Range<usize>); 3],
        params: &CudaView<f32>,
        (mut dx, mut d_residual): (CudaStorage, CudaStorage),
        partial: &mut CudaSlice<f32>,
        (rows, eps, (seed, threshold, keep), blocks): (i64, f32, DropoutArgs, usize),
    ) -> Result<(CudaStorage, CudaStorage)> {
        let x = x.0.as_cuda_slice::<T>()?.slice(x.1);
        let residual = residual.0.as_cuda_slice::<T>()?.slice(residual.1);
        let dy = dy.0.as_cuda_slice::<T>()?.slice(dy.1);
        {
            let (dx_s, dr_s) = (dx.as_cuda_slice_mut::<T>()?, d_residual.as_cuda_slice_mut::<T>()?);
            let mut b = stream.launch_builder(func);
            b.arg(&x).arg(&residual).arg(params).arg(&dy).arg(dx_s).arg(dr_s).arg(partial);
            b.arg(&rows).arg(&eps).arg(&seed).arg(&threshold).arg(&keep);
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: ((WARPS * 32) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: x, residual and dy hold `rows × cols` elements, params `3 × cols` (checked
            // above); the kernel writes every element of dx and d_residual (each row once) and
            // `3 × cols` sums per block into partial (`blocks × 3 × cols`).
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok((dx, d_residual))
    }
    let inputs = [(x, x_r), (residual, residual_r), (dy, dy_r)];
    let args = (rows_i, eps, (seed, threshold, keep), blocks);
    let (dx, d_residual) = match dtype {
        DType::BF16 => go::<bf16>((&stream, &func), inputs, &params, (dx, d_residual), &mut partial, args)?,
        _ => go::<f32>((&stream, &func), inputs, &params, (dx, d_residual), &mut partial, args)?,
    };
    column_sum_finish(&dev, &partial, &mut d_params, blocks, 3 * cols)?;
    Ok(Some((dx, d_residual, CudaStorage::wrap_cuda_slice(d_params, dev))))
}

/// GELU's backward pass and its bias's gradient in one pass over the rows
/// (`bias_gelu_train_grad_sum`, then the splits added in order): `(dz, d bias)`, `dz = dy ·
/// gelu'(x + bias)` (`[rows, cols]`, the inputs' dtype) and its column sums (f32 `[cols]`), where
/// `bias_gelu_train_grad_vec` and [`column_sum`] read dz back. `None` where the vector kernel
/// does not fit (rows not whole 16-byte vectors, an input not starting on 16 bytes): the caller
/// composes the two.
pub(super) fn bias_gelu_train_grad_sum(
    (x, x_l): (&CudaStorage, &Layout),
    (bias, bias_l): (&CudaStorage, &Layout),
    (dy, dy_l): (&CudaStorage, &Layout),
) -> Result<Option<(CudaStorage, CudaStorage)>> {
    let op = "cuda-bias-gelu-train-grad-sum";
    let (rows, cols) = rows_of(x_l)?;
    if bias_l.shape().dims() != [cols]
        || bias.dtype() != DType::F32
        || dy_l.shape() != x_l.shape()
        || dy.dtype() != x.dtype()
    {
        candle_core::bail!(
            "{op}: x {:?} ({:?}), bias {:?} ({:?}) and gradient {:?} ({:?}) disagree",
            x_l.shape(),
            x.dtype(),
            bias_l.shape(),
            bias.dtype(),
            dy_l.shape(),
            dy.dtype()
        );
    }
    let (dtype, dev) = (x.dtype(), x.device.clone());
    let (x_r, dy_r) = (range(x_l, op)?, range(dy_l, op)?);
    let aligned = |start: usize| (start * dtype.size_in_bytes()).is_multiple_of(16);
    let vec = vec_of(dtype);
    if rows == 0 || !cols.is_multiple_of(vec) || !aligned(x_r.start) || !aligned(dy_r.start) {
        return Ok(None);
    }
    // A thread per vector of a row, blocks of 128 threads, splits of at least 16 rows.
    const THREADS: usize = 128;
    let col_blocks = (cols / vec).div_ceil(THREADS).max(1);
    let (splits, rows_per_split) = row_splits(rows, 16, col_blocks);
    let dz = alloc_like(&dev, dtype, rows * cols)?;
    // SAFETY: every (split, column) entry is written by the first kernel before the second reads it.
    let mut partial = unsafe { dev.alloc::<f32>(splits * cols) }?;
    let mut d_bias = unsafe { dev.alloc::<f32>(cols) }?;
    let (stream, func) = kernel(&dev, "bias_gelu_train_grad_sum", dtype)?;
    let bias = bias.as_cuda_slice::<f32>()?.slice(range(bias_l, op)?);
    let cfg = LaunchConfig {
        grid_dim: (col_blocks as u32, splits as u32, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    fn go<T: CudaDType>(
        (stream, func, cfg): (&std::sync::Arc<CudaStream>, &CudaFunction, LaunchConfig),
        [x, dy]: [(&CudaStorage, std::ops::Range<usize>); 2],
        bias: &CudaView<f32>,
        mut dz: CudaStorage,
        partial: &mut CudaSlice<f32>,
        (rows, cols, rows_per_split): (i64, i32, i64),
    ) -> Result<CudaStorage> {
        let x = x.0.as_cuda_slice::<T>()?.slice(x.1);
        let dy = dy.0.as_cuda_slice::<T>()?.slice(dy.1);
        {
            let mut b = stream.launch_builder(func);
            b.arg(&x).arg(bias).arg(&dy).arg(dz.as_cuda_slice_mut::<T>()?).arg(partial);
            b.arg(&rows).arg(&cols).arg(&rows_per_split);
            // SAFETY: x and dy hold rows · cols elements from 16-byte boundaries, cols a multiple
            // of the vector (checked above); the kernel writes every element of dz and the
            // splits · cols sums of partial (splits · rows_per_split ≥ rows).
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok(dz)
    }
    let inputs = [(x, x_r), (dy, dy_r)];
    let args = (rows as i64, cols as i32, rows_per_split as i64);
    let dz = match dtype {
        DType::BF16 => go::<bf16>((&stream, &func, cfg), inputs, &bias, dz, &mut partial, args)?,
        _ => go::<f32>((&stream, &func, cfg), inputs, &bias, dz, &mut partial, args)?,
    };
    column_sum_finish(&dev, &partial, &mut d_bias, splits, cols)?;
    Ok(Some((dz, CudaStorage::wrap_cuda_slice(d_bias, dev))))
}

/// Column sums of a contiguous `[rows, cols]` f32 or bf16 matrix into f32 `[cols]`: splits of
/// the rows summed by coalesced column-per-thread kernels, then the splits in order.
pub(super) fn column_sum((x, x_l): (&CudaStorage, &Layout)) -> Result<CudaStorage> {
    let op = "cuda-column-sum";
    let (rows, cols) = x_l.shape().dims2()?;
    let x_r = range(x_l, op)?;
    let dev = x.device.clone();
    // Splits of at least 64 rows.
    let col_blocks = cols.div_ceil(256).max(1);
    let (splits, rows_per_split) = row_splits(rows, 64, col_blocks);
    // SAFETY: every (split, column) entry is written by the first kernel before the second reads it.
    let mut partial = unsafe { dev.alloc::<f32>(splits * cols) }?;
    let mut out = unsafe { dev.alloc::<f32>(cols) }?;
    let (rows_i, cols_i, per_i) = (rows as i64, cols as i32, rows_per_split as i64);
    let cfg =
        LaunchConfig { grid_dim: (col_blocks as u32, splits as u32, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let (stream, func) = kernel(&dev, "column_sum_partial", x.dtype())?;
    let mut b = stream.launch_builder(&func);
    let (x_f32, x_bf16);
    match x.dtype() {
        DType::BF16 => {
            x_bf16 = x.as_cuda_slice::<bf16>()?.slice(x_r);
            b.arg(&x_bf16);
        }
        _ => {
            x_f32 = x.as_cuda_slice::<f32>()?.slice(x_r);
            b.arg(&x_f32);
        }
    }
    b.arg(&mut partial).arg(&rows_i).arg(&cols_i).arg(&per_i);
    // SAFETY: x holds rows · cols elements, partial splits · cols (splits · rows_per_split ≥ rows).
    unsafe { b.launch(cfg) }.w()?;
    column_sum_finish(&dev, &partial, &mut out, splits, cols)?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// How a kernel of `col_blocks` blocks per split of the rows cuts `rows` rows: `(splits, rows
/// per split)`, enough blocks to fill the GPU (~4 per multiprocessor of an H200's 132: 528), each
/// split at least `min_rows` rows, none empty (`splits · rows_per_split ≥ rows`).
fn row_splits(rows: usize, min_rows: usize, col_blocks: usize) -> (usize, usize) {
    let splits = rows.div_ceil(min_rows).clamp(1, 528usize.div_ceil(col_blocks).max(1));
    let rows_per_split = rows.div_ceil(splits).max(1);
    (rows.div_ceil(rows_per_split).max(1), rows_per_split)
}

/// `out[c] = Σ_s partial[s, c]`, the splits added in order (deterministic): the second step of
/// [`column_sum`] and of [`residual_norm_train_grad`]'s parameter gradients.
fn column_sum_finish(
    dev: &CudaDevice,
    partial: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
    splits: usize,
    cols: usize,
) -> Result<()> {
    let finish = dev.get_or_load_custom_func("column_sum_finish", MODULE, PTX)?.into_cuda_function();
    let (splits_i, cols_i) = (splits as i32, cols as i32);
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&finish);
    b.arg(partial).arg(out).arg(&splits_i).arg(&cols_i);
    // A block of 8 warps per 32 columns.
    let blocks = cols.div_ceil(32).max(1) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the caller's partial holds splits · cols sums and out cols.
    unsafe { b.launch(cfg) }.w()?;
    Ok(())
}

/// In place: `total += grad` (`total` f32, `grad` bf16, the same number of elements, both
/// contiguous).
pub(super) fn add_into(
    (total, total_l): (&mut CudaStorage, &Layout),
    (grad, grad_l): (&CudaStorage, &Layout),
) -> Result<()> {
    let op = "add-into-f32";
    let (total_r, grad_r) = (range(total_l, op)?, range(grad_l, op)?);
    if total_r.len() != grad_r.len() || total.dtype() != DType::F32 || grad.dtype() != DType::BF16 {
        candle_core::bail!(
            "{op}: a total of {} ({:?}) and a gradient of {} ({:?}) elements: f32 and bf16 of one size",
            total_r.len(),
            total.dtype(),
            grad_r.len(),
            grad.dtype()
        );
    }
    let n = total_r.len();
    let dev = total.device.clone();
    let stream = dev.cuda_stream();
    let grad = grad.as_cuda_slice::<bf16>()?.slice(grad_r);
    let mut total = total.as_cuda_slice_mut::<f32>()?.slice_mut(total_r);
    let func = dev.get_or_load_custom_func("add_into_f32_bf16", MODULE, PTX)?.into_cuda_function();
    let n_i = n as i64;
    let mut b = stream.launch_builder(&func);
    b.arg(&mut total).arg(&grad).arg(&n_i);
    // SAFETY: total and grad hold n elements each.
    unsafe { b.launch(items_config(n)) }.w()?;
    Ok(())
}

/// Zeroes columns `cols` of every key row past its sequence's real keys in `grad` (`rows`
/// rows of `row_stride` bf16 elements; sequences of `seq` rows, `used` real keys each, u32 on
/// the device): the rows of dk and dv that FlashAttention-2's backward kernel leaves unwritten.
pub(super) fn zero_padded_keys(
    dev: &CudaDevice,
    grad: &mut CudaSlice<bf16>,
    used: &CudaSlice<u32>,
    (rows, seq, row_stride): (usize, usize, usize),
    cols: std::ops::Range<usize>,
) -> Result<()> {
    if rows == 0 || cols.is_empty() {
        return Ok(());
    }
    if seq == 0
        || !rows.is_multiple_of(seq)
        || used.len() != rows / seq
        || cols.end > row_stride
        || grad.len() < rows * row_stride
    {
        candle_core::bail!(
            "zero-padded-keys: {rows} rows of {row_stride} in sequences of {seq}, {} lengths, columns {cols:?}",
            used.len()
        );
    }
    let stream = dev.cuda_stream();
    let func = dev.get_or_load_custom_func("zero_padded_keys_bf16", MODULE, PTX)?.into_cuda_function();
    let (rows_i, seq_i, stride_i, start_i, cols_i) =
        (rows as i64, seq as i32, row_stride as i64, cols.start as i64, cols.len() as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(grad).arg(used).arg(&rows_i).arg(&seq_i).arg(&stride_i).arg(&start_i).arg(&cols_i);
    // A block per row (grid-strided past 2^20 rows), its threads along the columns.
    let cfg = LaunchConfig { grid_dim: (rows.min(1 << 20) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: grad holds rows · row_stride elements and columns cols lie within a row (checked);
    // used holds rows / seq lengths.
    unsafe { b.launch(cfg) }.w()?;
    Ok(())
}

/// `table [vocab, cols]` (f32) rows at `ids [n]` (u32) → `[n, cols]`.
pub(super) fn embedding_gather(
    (table, table_l): (&CudaStorage, &Layout),
    (ids, ids_l): (&CudaStorage, &Layout),
) -> Result<CudaStorage> {
    let op = "cuda-embedding";
    let (_, cols) = table_l.shape().dims2()?;
    let n = ids_l.shape().elem_count();
    let (table_r, ids_r) = (range(table_l, op)?, range(ids_l, op)?);
    let dev = table.device.clone();
    let stream = dev.cuda_stream();
    let table = table.as_cuda_slice::<f32>()?.slice(table_r);
    let ids = ids.as_cuda_slice::<u32>()?.slice(ids_r);
    // SAFETY: the kernel writes all n · cols elements.
    let mut out = unsafe { dev.alloc::<f32>(n * cols) }?;
    let func = dev.get_or_load_custom_func("embedding_gather_f32", MODULE, PTX)?.into_cuda_function();
    let (n_i, cols_i) = (n as i64, cols as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(&table).arg(&ids).arg(&mut out).arg(&n_i).arg(&cols_i);
    // SAFETY: ids index rows of the table (checked by the caller); out holds n · cols elements.
    unsafe { b.launch(items_config(n * cols)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// The gradient of an embedding table `[vocab, cols]` (f32, zero where no id points) from the
/// lookup's gradient `grad [n, cols]` (f32 or bf16) and the positions grouped by id, one u32
/// vector on the device: `[order (n), piece (p + 1), first (u + 1), uniq (u), 0 .. p]`
/// (`embedding_train::Grouping`). With one piece per id (`p == u`) one launch sums each id's
/// positions into its row; else a first launch sums each piece into a row of `[p, cols]`
/// partial sums, and a second each id's pieces, in order, into its row: the same kernel both
/// times, the second reading the pieces' indices as its order.
pub(super) fn embedding_grad(
    vocab: usize,
    (grad, grad_l): (&CudaStorage, &Layout),
    (groups, groups_l): (&CudaStorage, &Layout),
    counts: super::embedding_train::GroupCounts,
) -> Result<CudaStorage> {
    let op = "cuda-embedding-grad";
    let super::embedding_train::GroupCounts { positions: n, pieces: p, ids: u } = counts;
    let (_, cols) = grad_l.shape().dims2()?;
    let (grad_r, groups_r) = (range(grad_l, op)?, range(groups_l, op)?);
    if groups_r.len() != n + 2 * p + 2 * u + 2 || p < u {
        candle_core::bail!("{op}: {} grouped values for {n} positions, {p} pieces and {u} ids", groups_r.len());
    }
    let dev = grad.device.clone();
    let all = groups.as_cuda_slice::<u32>()?.slice(groups_r);
    let order = all.slice(0..n);
    let piece = all.slice(n..n + p + 1);
    let first = all.slice(n + p + 1..n + p + u + 2);
    let uniq = all.slice(n + p + u + 2..n + p + 2 * u + 2);
    let pieces = all.slice(n + p + 2 * u + 2..n + 2 * p + 2 * u + 2);
    let mut out = dev.alloc_zeros::<f32>(vocab * cols)?;
    if u == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev));
    }
    let cols_i = cols as i32;
    let cfg = |rows: usize| LaunchConfig {
        grid_dim: (rows as u32, cols.div_ceil(256) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // One piece per id: its sum goes straight into the id's row; else into a partial row.
    let (mut partial, rows_of_pieces) = if p == u {
        (None, &uniq)
    } else {
        // SAFETY: the first launch writes every one of the p · cols partial sums.
        (Some(unsafe { dev.alloc::<f32>(p * cols) }?), &pieces)
    };
    let (stream, func) = kernel(&dev, "embedding_grad", grad.dtype())?;
    let mut b = stream.launch_builder(&func);
    let (grad_f32, grad_bf16);
    match grad.dtype() {
        DType::BF16 => {
            grad_bf16 = grad.as_cuda_slice::<bf16>()?.slice(grad_r);
            b.arg(&grad_bf16);
        }
        _ => {
            grad_f32 = grad.as_cuda_slice::<f32>()?.slice(grad_r);
            b.arg(&grad_f32);
        }
    }
    b.arg(&order).arg(&piece).arg(rows_of_pieces);
    match partial.as_mut() {
        Some(partial) => b.arg(partial),
        None => b.arg(&mut out),
    };
    b.arg(&cols_i);
    // SAFETY: order holds the n positions of grad's rows, piece p + 1 ascending offsets into
    // it, the rows written (uniq: u ids below vocab, from checked ids; or 0 .. p) index the
    // output's rows (vocab or p of cols elements).
    unsafe { b.launch(cfg(p)) }.w()?;
    if let Some(partial) = partial {
        let (stream, func) = kernel(&dev, "embedding_grad", DType::F32)?;
        let mut b = stream.launch_builder(&func);
        b.arg(&partial).arg(&pieces).arg(&first).arg(&uniq).arg(&mut out).arg(&cols_i);
        // SAFETY: the pieces' indices (0 .. p) index partial's p rows, first holds u + 1
        // ascending offsets into them, uniq u ids below vocab.
        unsafe { b.launch(cfg(u)) }.w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// The inputs of [`embedding_layer_norm`]: the word, position and token-type tables (f32
/// `[rows, n]`; the types' entry is any table when `has_types` is false), the ids, positions
/// and type ids (u32, one per token), LayerNorm's γ and β (f32 `[n]`) and epsilon.
pub(super) struct EmbeddingNormInputs<'a> {
    pub tables: [(&'a CudaStorage, &'a Layout); 3],
    pub has_types: bool,
    pub ids: [(&'a CudaStorage, &'a Layout); 3],
    pub affine: [(&'a CudaStorage, &'a Layout); 2],
    pub eps: f32,
}

/// Inference's embeddings in one kernel (`embedding_layer_norm_regs`): `[tokens, n]` f32, and
/// with `twin` a bf16 copy. `None` where the row does not fit the kernel (rows of 128 to 1,024
/// features in steps of 128, tables and parameters starting on 4 elements).
pub(super) fn embedding_layer_norm(
    inputs: &EmbeddingNormInputs<'_>,
    twin: bool,
) -> Result<Option<(CudaStorage, Option<CudaStorage>)>> {
    let op = "cuda-embedding-layer-norm";
    let n = inputs.tables[0].1.shape().dims2()?.1;
    let tokens = inputs.ids[0].1.shape().elem_count();
    let tables_ok =
        inputs.tables.iter().all(|(s, l)| s.dtype() == DType::F32 && l.shape().dims2().is_ok_and(|(_, c)| c == n));
    let ids_ok = inputs.ids.iter().all(|(s, l)| s.dtype() == DType::U32 && l.shape().elem_count() == tokens);
    let affine_ok = inputs.affine.iter().all(|(s, l)| s.dtype() == DType::F32 && l.shape().dims() == [n]);
    if !(tables_ok && ids_ok && affine_ok) {
        candle_core::bail!("{op}: tables (f32 [rows, {n}]), ids (u32, {tokens} each) or γ/β (f32 [{n}]) disagree");
    }
    let table_r = inputs.tables.iter().map(|(_, l)| range(l, op)).collect::<Result<Vec<_>>>()?;
    let ids_r = inputs.ids.iter().map(|(_, l)| range(l, op)).collect::<Result<Vec<_>>>()?;
    let affine_r = inputs.affine.iter().map(|(_, l)| range(l, op)).collect::<Result<Vec<_>>>()?;
    let starts: Vec<usize> = table_r.iter().chain(&affine_r).map(|r| r.start).collect();
    if tokens == 0 || !norm_in_registers(n, &starts) {
        return Ok(None);
    }
    let dev = inputs.tables[0].0.device.clone();
    let name = if twin { "embedding_layer_norm_regs_twin_f32" } else { "embedding_layer_norm_regs_f32" };
    let func = dev.get_or_load_custom_func(name, MODULE, PTX)?.into_cuda_function();
    let stream = dev.cuda_stream();
    let table = |i: usize| -> Result<CudaView<'_, f32>> {
        Ok(inputs.tables[i].0.as_cuda_slice::<f32>()?.slice(table_r[i].clone()))
    };
    let id =
        |i: usize| -> Result<CudaView<'_, u32>> { Ok(inputs.ids[i].0.as_cuda_slice::<u32>()?.slice(ids_r[i].clone())) };
    let (word, position, types) = (table(0)?, table(1)?, table(2)?);
    let (ids, positions, type_ids) = (id(0)?, id(1)?, id(2)?);
    let gamma = inputs.affine[0].0.as_cuda_slice::<f32>()?.slice(affine_r[0].clone());
    let beta = inputs.affine[1].0.as_cuda_slice::<f32>()?.slice(affine_r[1].clone());
    let (mut out, mut copy) = output_and_copy(&dev, tokens * n, twin)?;
    let (has_types, rows, cols) = (inputs.has_types as i32, tokens as i64, n as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(&word).arg(&position).arg(&types).arg(&ids).arg(&positions).arg(&type_ids).arg(&has_types);
    b.arg(&gamma).arg(&beta).arg(&mut out);
    if let Some(copy) = copy.as_mut() {
        b.arg(copy);
    }
    b.arg(&rows).arg(&cols).arg(&inputs.eps);
    // SAFETY: each id indexes a row of its table (checked by the encoder before the batch is
    // made: Encoder::validate_and_position); out (and the copy) hold `tokens × n` elements.
    unsafe { b.launch(rows_config(tokens)) }.w()?;
    Ok(Some(storages(&dev, out, copy)))
}

/// The sum of squares of each span of [`super::multi_tensor::spans`] over f32 `parts` on one GPU
/// (`sum_squares_tiles_f32`: one launch for them all, the spans' addresses copied over in one
/// table), read back with one wait.
pub(super) fn sum_squares(dev: &CudaDevice, parts: &[(&CudaStorage, &Layout)]) -> Result<Vec<f32>> {
    use candle_core::cuda_backend::cudarc::driver::DevicePtr;
    let op = "cuda-sum-squares";
    let stream = dev.cuda_stream();
    let mut lens = Vec::with_capacity(parts.len());
    let mut views = Vec::with_capacity(parts.len());
    for (storage, layout) in parts {
        let r = range(layout, op)?;
        lens.push(r.len());
        // An error unless the storage is f32.
        views.push(storage.as_cuda_slice::<f32>()?.slice(r));
    }
    // The views' guards are no-ops (event tracking is off); `parts` keep the memory alive until
    // the read-back below has waited for the kernel.
    let bases: Vec<u64> = views.iter().map(|v| v.device_ptr(&stream).0).collect();
    let tiles = super::multi_tensor::spans(&lens, super::multi_tensor::SPAN);
    if tiles.is_empty() {
        return Ok(Vec::new());
    }
    let table: Vec<u64> =
        tiles.iter().flat_map(|&(part, start, n)| [bases[part] + (start * 4) as u64, n as u64]).collect();
    let table = dev.clone_htod(&table)?;
    // SAFETY: every entry is written by the kernel (one per block) before it is read back.
    let mut out = unsafe { dev.alloc::<f32>(tiles.len()) }?;
    let func = dev.get_or_load_custom_func("sum_squares_tiles_f32", MODULE, PTX)?.into_cuda_function();
    let mut b = stream.launch_builder(&func);
    b.arg(&table).arg(&mut out);
    let cfg = LaunchConfig { grid_dim: (tiles.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: each table entry is the address and length of a span inside a live f32 storage.
    unsafe { b.launch(cfg) }.w()?;
    drop(views);
    dev.clone_dtoh(&out)
}

/// [`super::AdamWStep`]'s update of each `(param, grad, moments)` with its `steps` constants in
/// one launch of `adamw_tiles_f32` over spans of [`super::multi_tensor::SPAN`] elements (the
/// spans' addresses and the constants copied over in two tables).
pub(super) fn adamw_tiles(
    dev: &CudaDevice,
    parts: &[[(&CudaStorage, &Layout); 3]],
    steps: &[super::AdamWStep],
) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::DevicePtr;
    let op = "cuda-adamw-tiles";
    let stream = dev.cuda_stream();
    let mut lens = Vec::with_capacity(parts.len());
    let mut views = Vec::with_capacity(parts.len());
    for [(p, p_l), (g, g_l), (m, m_l)] in parts {
        let (p_r, g_r, m_r) = (range(p_l, op)?, range(g_l, op)?, range(m_l, op)?);
        if g_r.len() != p_r.len() || m_r.len() != 2 * p_r.len() {
            candle_core::bail!(
                "{op}: parameter, gradient and moments disagree ({}, {}, {})",
                p_r.len(),
                g_r.len(),
                m_r.len()
            );
        }
        lens.push(p_r.len());
        views.push([
            p.as_cuda_slice::<f32>()?.slice(p_r),
            g.as_cuda_slice::<f32>()?.slice(g_r),
            m.as_cuda_slice::<f32>()?.slice(m_r),
        ]);
    }
    // The views' guards are no-ops (event tracking is off); the callers' tensors keep the
    // memory alive and are not used by anything else before the launch's work is done (the
    // parameters and moments are the optimizer's; the stream orders every later use).
    let bases: Vec<[u64; 3]> = views.iter().map(|v| v.each_ref().map(|s| s.device_ptr(&stream).0)).collect();
    let spans = super::multi_tensor::spans(&lens, super::multi_tensor::SPAN);
    if spans.is_empty() {
        return Ok(());
    }
    let table: Vec<u64> = spans
        .iter()
        .flat_map(|&(part, start, n)| {
            let [p, g, m] = bases[part];
            [p, g, m, lens[part] as u64, start as u64, n as u64, part as u64]
        })
        .collect();
    let coefs: Vec<f32> = steps.iter().flat_map(super::AdamWStep::constants).collect();
    let (table, coefs) = (dev.clone_htod(&table)?, dev.clone_htod(&coefs)?);
    let func = dev.get_or_load_custom_func("adamw_tiles_f32", MODULE, PTX)?.into_cuda_function();
    let mut b = stream.launch_builder(&func);
    b.arg(&table).arg(&coefs);
    let cfg = LaunchConfig { grid_dim: (spans.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: each span lies inside its parameter (n elements), gradient (n) and moments (2n),
    // checked above; each element is updated by one thread of one block.
    unsafe { b.launch(cfg) }.w()?;
    drop(views);
    Ok(())
}
