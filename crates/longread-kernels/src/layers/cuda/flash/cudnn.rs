//! Calling `vendor/cudnn-attn`'s entry points (cuDNN's fused attention) on candle's CUDA
//! storages, in FlashAttention-2's layouts (`launch`): what [`Backend::Cudnn`] runs. cuDNN's
//! softmax statistics and its Philox seed and offset are what [`Saved`] keeps between the passes.

use core::ffi::c_void;
use core::ptr::{null, null_mut};
use std::ops::Range;
use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut};
use candle_core::{CudaDevice, CudaStorage, Layout, Result};
use half::bf16;

use longread_cudnn_attn::SdpaCall;

use super::gradient_layout::{GradientLayout, Sizes};
use super::launch::{with_slices, Call, Saved};
use super::{Backend, KeyLengths};
use crate::layers::cuda::launch::with_workspace;

/// Opens cuDNN (`LONGREAD_CUDNN_LIBRARY`, a file name or path, else `libcudnn.so.9` on the
/// loader's path): its version, or why not.
pub(super) fn open() -> std::result::Result<i64, String> {
    let library = match std::env::var("LONGREAD_CUDNN_LIBRARY") {
        Ok(path) => {
            Some(std::ffi::CString::new(path).map_err(|_| "LONGREAD_CUDNN_LIBRARY holds a NUL byte".to_string())?)
        }
        Err(_) => None,
    };
    longread_cudnn_attn::open(library.as_deref())
}

fn check(op: &str, status: i32) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        candle_core::bail!("{op}: {}", longread_cudnn_attn::last_error())
    }
}

/// `f` with the device pointers of each sequence's query and real-key counts (int32), or two
/// nulls where every key is real (cuDNN then runs without its padding mask).
fn with_counts<R>(
    lengths: &KeyLengths,
    stream: &Arc<CudaStream>,
    f: impl FnOnce(*const i32, *const i32) -> Result<R>,
) -> Result<R> {
    if lengths.all_real {
        return f(null(), null());
    }
    with_slices(&lengths.full, &lengths.used, |q, k| {
        let (q_ptr, _g1) = q.device_ptr(stream);
        let (k_ptr, _g2) = k.device_ptr(stream);
        f(q_ptr as *const i32, k_ptr as *const i32)
    })
}

/// The shim's description of sub-batch `part` (sequences) of a call of `c`'s sizes on `dev`
/// (its ordinal: cuDNN keeps a handle per GPU), with the counts of [`with_counts`] (from the
/// part's first sequence; both null stay null: every key real) and the dropout's
/// `(probability, the part's seed and offset)`.
fn call_of(
    dev: &CudaDevice,
    c: &Call,
    part: &Range<usize>,
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    (seq_q, seq_kv): (*const i32, *const i32),
    (p_drop, seed_offset): (f32, u64),
) -> SdpaCall {
    let (seq_q, seq_kv) = if seq_kv.is_null() {
        (seq_q, seq_kv)
    } else {
        (seq_q.wrapping_add(part.start), seq_kv.wrapping_add(part.start))
    };
    let stream = dev.cuda_stream();
    SdpaCall {
        ordinal: stream.context().ordinal() as i32,
        batch: part.len() as i64,
        heads: heads as i64,
        dim: c.d as i64,
        seq: lengths.seq as i64,
        row_stride: c.row_stride as i64,
        scale,
        p_drop,
        seq_q,
        seq_kv,
        seed_offset: seed_offset as *const i64,
        stream: stream.cu_stream() as *mut c_void,
    }
}

/// As `launch::forward` on cuDNN: the output `[rows, hidden]` and, if `keep`, the softmax
/// statistics for the backward pass.
pub(super) fn forward(
    (qkv, qkv_l): (&CudaStorage, &Layout),
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    dropout: Option<(f32, u64)>,
    keep: bool,
) -> Result<(CudaStorage, Saved)> {
    let op = "cudnn-attention";
    let c = Call::of(op, lengths, heads, (qkv, qkv_l))?;
    let dev = qkv.device().clone();
    let stream = dev.cuda_stream();
    let x = qkv.as_cuda_slice::<bf16>()?.slice(qkv_l.start_offset()..);
    // SAFETY: cuDNN writes every row of every sequence (rows = batch · seq, checked) and, when
    // kept, each row's statistics per head.
    let mut out = unsafe { dev.alloc::<bf16>(c.rows * c.hidden) }?;
    let mut stats = unsafe { dev.alloc::<f32>(if keep { heads * c.rows } else { 1 }) }?;
    let (p_drop, seed) = dropout.unwrap_or((0.0, 0));
    let (parts, seq) = (super::cudnn_batch_parts(c.batch), lengths.seq);
    // cuDNN's Philox seed and offset (int64 on the device) of each sub-batch, which the backward
    // pass reads too; unread without dropout (no copy from the host then).
    let rng = if p_drop > 0.0 {
        let pairs: Vec<u64> = (0..parts.len()).flat_map(|i| [part_seed(seed, i), 0]).collect();
        dev.clone_htod(&pairs)?
    } else {
        dev.alloc_zeros::<u64>(2 * parts.len())?
    };
    let block = (c.hidden * std::mem::size_of::<bf16>()) as u64;
    let plans_before = longread_cudnn_attn::plans().0;
    with_counts(lengths, &stream, |seq_q, seq_kv| {
        let (x_ptr, _g1) = x.device_ptr(&stream);
        let (out_ptr, _g2) = out.device_ptr_mut(&stream);
        let (stats_ptr, _g3) = stats.device_ptr_mut(&stream);
        let (rng_ptr, _g4) = rng.device_ptr(&stream);
        for (i, part) in parts.iter().enumerate() {
            let rng_at = rng_ptr + bytes::<u64>(2 * i);
            let call = call_of(&dev, &c, part, lengths, (heads, scale), (seq_q, seq_kv), (p_drop, rng_at));
            if keep {
                // The backward pass's graph is built before the forward pass runs, so that a
                // shape cuDNN cannot differentiate fails here, where FlashAttention-2 can still
                // take over.
                prepare_backward(&call, gradient_layout(&c, lengths, heads).1.row_stride)?;
            }
            let x_at = x_ptr + bytes::<bf16>(part.start * seq * c.row_stride);
            let out_at = out_ptr + bytes::<bf16>(part.start * seq * c.hidden);
            let stats_at = stats_ptr + bytes::<f32>(part.start * heads * seq);
            with_workspace(&dev, |workspace, size| {
                // SAFETY: q, k and v are the three column blocks of the part's rows (of
                // `row_stride` elements) from its first sequence's; out holds its rows · hidden
                // elements from there, stats its heads · rows when kept; the counts are the
                // part's [len] or both null; rng holds its seed and offset; the stream is the
                // device's, whose context is current on this thread.
                check(op, unsafe {
                    longread_cudnn_attn::longread_cudnn_sdpa_fwd_bf16(
                        &call,
                        x_at as *const c_void,
                        (x_at + block) as *const c_void,
                        (x_at + 2 * block) as *const c_void,
                        out_at as *mut c_void,
                        if keep { stats_at as *mut f32 } else { null_mut() },
                        workspace as *mut c_void,
                        size,
                    )
                })
            })?;
        }
        Ok(())
    })?;
    log_new_plans(op, plans_before, &c);
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Saved { lse: stats, rng, backend: Backend::Cudnn }))
}

/// Logs (debug, `LONGREAD_LOG=longread_kernels=debug`) the graphs cuDNN built for a call of
/// `c`'s sizes since there were `before`: cuDNN builds one per batch shape and pass (tens of
/// milliseconds each), which batches of varied shapes pay again and again.
fn log_new_plans(op: &str, before: i64, c: &Call) {
    let (after, milliseconds) = longread_cudnn_attn::plans();
    if after > before {
        tracing::debug!(
            "{op}: {} new cuDNN plan(s) for {} sequences of {} rows; {after} built in all, {milliseconds:.0} ms",
            after - before,
            c.batch,
            c.rows / c.batch.max(1),
        );
    }
}

/// The dropout seed of sub-batch `i`: the caller's for the first (the whole batch's, without
/// sub-batches), mixed with `i` for the others, so that each draws masks of its own.
fn part_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Bytes of `n` elements of `T`, as a device-pointer offset.
fn bytes<T>(n: usize) -> u64 {
    (n * std::mem::size_of::<T>()) as u64
}

/// Builds (or finds) the graph of the backward pass of `call` (gradients in rows of
/// `grad_row_stride`, 0: head-major, as [`backward`] writes them) without running it.
fn prepare_backward(call: &SdpaCall, grad_row_stride: usize) -> Result<()> {
    let mut size = -1i64;
    // SAFETY: with a negative workspace size the shim builds the graph and reads no tensor.
    let status = unsafe {
        longread_cudnn_attn::longread_cudnn_sdpa_bwd_bf16(
            call,
            null(),
            null(),
            null(),
            null(),
            null(),
            null(),
            null_mut(),
            null_mut(),
            null_mut(),
            grad_row_stride as i64,
            deterministic(),
            null_mut(),
            &mut size,
        )
    };
    check("cudnn-attention backward", status)
}

/// Whether cuDNN's backward pass runs its deterministic engine, as a flag for the shim.
fn deterministic() -> i32 {
    i32::from(crate::layers::cuda::attention_backward_deterministic())
}

/// As `launch::backward` on cuDNN, given its checked sizes and inputs (the q/k/v product, the
/// output and its gradient): the gradient of the product, `[rows, 3 · hidden]`.
pub(super) fn backward(
    dev: &CudaDevice,
    c: &Call,
    (x, out, dout): (&CudaView<bf16>, &CudaView<bf16>, &CudaView<bf16>),
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    p_drop: f32,
    saved: &Saved,
) -> Result<CudaStorage> {
    let (sizes, layout) = gradient_layout(c, lengths, heads);
    let mut grad = super::launch::gradient_buffer(dev, c.rows * 3 * c.hidden, lengths)?;
    write_gradients(dev, c, (x, out, dout), (&mut grad, layout), lengths, (heads, scale), p_drop, saved)?;
    let grad = CudaStorage::wrap_cuda_slice(grad, dev.clone());
    if layout.packed(sizes) {
        return Ok(grad);
    }
    // SAFETY: `interleave` writes every element.
    let mut packed = CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<bf16>(c.rows * 3 * c.hidden) }?, dev.clone());
    layout.interleave(&grad, &mut packed, sizes)?;
    Ok(packed)
}

/// The [`Sizes`] of a call and where its gradients go (`LONGREAD_CUDNN_GRADS`).
fn gradient_layout(c: &Call, lengths: &KeyLengths, heads: usize) -> (Sizes, GradientLayout) {
    let sizes = Sizes { batch: c.batch, seq: lengths.seq, heads, dim: c.d };
    (sizes, GradientLayout::named(crate::layers::cuda::cudnn_gradient_layout(), sizes))
}

/// cuDNN's backward pass, dq, dk and dv into `grad` laid out as `layout` says (zeroed where
/// some key is padding).
#[allow(clippy::too_many_arguments)]
fn write_gradients(
    dev: &CudaDevice,
    c: &Call,
    (x, out, dout): (&CudaView<bf16>, &CudaView<bf16>, &CudaView<bf16>),
    (grad, layout): (&mut CudaSlice<bf16>, GradientLayout),
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    p_drop: f32,
    saved: &Saved,
) -> Result<()> {
    let op = "cudnn-attention backward";
    if saved.lse.len() != heads * c.rows {
        candle_core::bail!("{op}: the forward pass kept no softmax statistics");
    }
    let (parts, seq) = (super::cudnn_batch_parts(c.batch), lengths.seq);
    if saved.rng.len() != 2 * parts.len() {
        candle_core::bail!("{op}: the forward pass ran as other sub-batches");
    }
    let stream = dev.cuda_stream();
    let block = (c.hidden * std::mem::size_of::<bf16>()) as u64;
    let plans_before = longread_cudnn_attn::plans().0;
    let result = with_counts(lengths, &stream, |seq_q, seq_kv| {
        let (x_ptr, _g1) = x.device_ptr(&stream);
        let (out_ptr, _g2) = out.device_ptr(&stream);
        let (dout_ptr, _g3) = dout.device_ptr(&stream);
        let (stats_ptr, _g4) = saved.lse.device_ptr(&stream);
        let (grad_ptr, _g5) = grad.device_ptr_mut(&stream);
        let (rng_ptr, _g6) = saved.rng.device_ptr(&stream);
        for (i, part) in parts.iter().enumerate() {
            let rng_at = rng_ptr + bytes::<u64>(2 * i);
            let call = call_of(dev, c, part, lengths, (heads, scale), (seq_q, seq_kv), (p_drop, rng_at));
            let x_at = x_ptr + bytes::<bf16>(part.start * seq * c.row_stride);
            let out_at = out_ptr + bytes::<bf16>(part.start * seq * c.hidden);
            let dout_at = dout_ptr + bytes::<bf16>(part.start * seq * c.hidden);
            let stats_at = stats_ptr + bytes::<f32>(part.start * heads * seq);
            let grad_at = |block: usize| grad_ptr + bytes::<bf16>(layout.blocks[block] + part.start * layout.sequence);
            with_workspace(dev, |workspace, size| {
                // SAFETY: as in `forward`, from the part's first sequence; grad holds the
                // part's rows of each of dq, dk and dv from there (`layout`: three column blocks
                // of rows of 3 · hidden, or three blocks of rows of hidden or of head-major
                // rows); stats and rng are the forward pass's for the part.
                check(op, unsafe {
                    longread_cudnn_attn::longread_cudnn_sdpa_bwd_bf16(
                        &call,
                        x_at as *const c_void,
                        (x_at + block) as *const c_void,
                        (x_at + 2 * block) as *const c_void,
                        out_at as *const c_void,
                        dout_at as *const c_void,
                        stats_at as *const f32,
                        grad_at(0) as *mut c_void,
                        grad_at(1) as *mut c_void,
                        grad_at(2) as *mut c_void,
                        layout.row_stride as i64,
                        deterministic(),
                        workspace as *mut c_void,
                        size,
                    )
                })
            })?;
        }
        Ok(())
    });
    log_new_plans(op, plans_before, c);
    result
}
