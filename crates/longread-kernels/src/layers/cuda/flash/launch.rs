//! Calling `vendor/flash-attn`'s two entry points on candle's CUDA storages (or, where the op's
//! [`Backend`] is cuDNN, `super::cudnn`'s).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use candle_core::{CudaStorage, DType, Layout, Result, Storage, Tensor};
use half::bf16;

use super::{Backend, KeyLengths};

/// What the forward pass leaves for the backward pass: each row's log-sum-exp per head (cuDNN:
/// its softmax statistics) and the dropout's Philox state (cuDNN: its seed and offset), and
/// which backend made them.
pub(super) struct Saved {
    pub lse: CudaSlice<f32>,
    pub rng: CudaSlice<u64>,
    pub backend: Backend,
}

/// Sizes of one call, checked against the kernels' needs.
pub(super) struct Call {
    pub rows: usize,
    pub hidden: usize,
    pub d: usize,
    pub batch: usize,
    pub row_stride: usize,
}

impl Call {
    pub(super) fn of(op: &str, lengths: &KeyLengths, heads: usize, qkv: (&CudaStorage, &Layout)) -> Result<Self> {
        let (rows, hidden, d) = lengths.dims(op, heads, qkv.1)?;
        let row_stride = qkv.1.stride()[0];
        if qkv.0.dtype() != DType::BF16
            || !matches!(d, 32 | 64)
            || !row_stride.is_multiple_of(8)
            || !qkv.1.start_offset().is_multiple_of(8)
        {
            candle_core::bail!(
                "{op}: bf16 heads of 32 or 64 in rows of whole 16-byte vectors, not {:?} heads of {d} (row stride {row_stride})",
                qkv.0.dtype()
            );
        }
        Ok(Self { rows, hidden, d, batch: lengths.used.elem_count(), row_stride })
    }
}

/// `f` with the device slices of the lengths' row starts and real keys.
fn with_lengths<R>(lengths: &KeyLengths, f: impl FnOnce(&CudaSlice<u32>, &CudaSlice<u32>) -> Result<R>) -> Result<R> {
    with_slices(&lengths.starts, &lengths.used, f)
}

/// `f` with the device slices of two of a [`KeyLengths`]' u32 tensors (cuDNN reads its query
/// counts and real keys, FlashAttention-2 its row starts and real keys).
pub(super) fn with_slices<R>(
    first: &Tensor,
    second: &Tensor,
    f: impl FnOnce(&CudaSlice<u32>, &CudaSlice<u32>) -> Result<R>,
) -> Result<R> {
    let (a, a_l) = first.storage_and_layout();
    let (b, b_l) = second.storage_and_layout();
    match (&*a, &*b) {
        (Storage::Cuda(a), Storage::Cuda(b)) if a_l.start_offset() == 0 && b_l.start_offset() == 0 => {
            f(a.as_cuda_slice::<u32>()?, b.as_cuda_slice::<u32>()?)
        }
        _ => candle_core::bail!("fused attention: the sequence lengths must be on the GPU with the product"),
    }
}

fn check(op: &str, status: i32) -> Result<()> {
    match status {
        0 => Ok(()),
        -1 => candle_core::bail!("{op}: no kernel for this head size (32 or 64)"),
        -2 => candle_core::bail!("{op}: the GPU has under 144 KB of shared memory per block (A100, H100 or newer)"),
        err => candle_core::bail!("{op}: the kernel's launch failed (CUDA error {err})"),
    }
}

/// Attention of `qkv: [batch · seq, 3 · hidden]` (bias added) over `lengths`, with dropout
/// `(probability, seed)` or none, on `backend`: the output `[rows, hidden]` and what the
/// backward pass needs (cuDNN skips its statistics unless `keep`, as training does).
pub(super) fn forward(
    backend: Backend,
    (qkv, qkv_l): (&CudaStorage, &Layout),
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    dropout: Option<(f32, u64)>,
    keep: bool,
) -> Result<(CudaStorage, Saved)> {
    if backend == Backend::Cudnn {
        let result = super::cudnn::forward((qkv, qkv_l), lengths, (heads, scale), dropout, keep);
        if let Some(done) = super::cudnn_outcome(result, keep)? {
            return Ok(done);
        }
    }
    let op = "flash-attention-2";
    let c = Call::of(op, lengths, heads, (qkv, qkv_l))?;
    let dev = qkv.device().clone();
    let stream = dev.cuda_stream();
    let x = qkv.as_cuda_slice::<bf16>()?.slice(qkv_l.start_offset()..);
    // SAFETY: the kernel writes every row of every sequence (rows = batch · seq, checked), and
    // each row's log-sum-exp per head.
    let mut out = unsafe { dev.alloc::<bf16>(c.rows * c.hidden) }?;
    let mut lse = unsafe { dev.alloc::<f32>(heads * c.rows) }?;
    let mut rng = dev.alloc_zeros::<u64>(2)?;
    let (p_drop, seed) = dropout.unwrap_or((0.0, 0));
    let block_bytes = (c.hidden * std::mem::size_of::<bf16>()) as u64;
    let status = with_lengths(lengths, |starts, used| {
        let (x_ptr, _g1) = x.device_ptr(&stream);
        let (starts_ptr, _g2) = starts.device_ptr(&stream);
        let (used_ptr, _g3) = used.device_ptr(&stream);
        let (out_ptr, _g4) = out.device_ptr_mut(&stream);
        let (lse_ptr, _g5) = lse.device_ptr_mut(&stream);
        let (rng_ptr, _g6) = rng.device_ptr_mut(&stream);
        // SAFETY: q, k and v are the three column blocks of `rows` rows of `row_stride`
        // elements; starts has batch + 1 and used batch elements; out, lse and rng were
        // allocated above with the sizes the kernel writes; the stream is the device's, whose
        // context is current on this thread.
        Ok(unsafe {
            longread_flash_attn::longread_flash_fwd_bf16(
                x_ptr as *const _,
                (x_ptr + block_bytes) as *const _,
                (x_ptr + 2 * block_bytes) as *const _,
                out_ptr as *mut _,
                lse_ptr as *mut f32,
                starts_ptr as *const i32,
                used_ptr as *const i32,
                c.row_stride as i64,
                c.batch as i32,
                heads as i32,
                c.d as i32,
                lengths.seq as i32,
                c.rows as i32,
                scale,
                p_drop,
                seed,
                0,
                rng_ptr as *mut u64,
                stream.cu_stream() as *mut _,
            )
        })
    })?;
    check(op, status)?;
    super::ran(Backend::Fa2, keep);
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Saved { lse, rng, backend: Backend::Fa2 }))
}

/// The output and its gradient must be bf16 `[rows, hidden]`, contiguous.
pub(super) fn check_outputs(
    op: &str,
    c: &Call,
    (out, out_l): (&CudaStorage, &Layout),
    (dout, dout_l): (&CudaStorage, &Layout),
) -> Result<()> {
    for (name, l, s) in [("output", out_l, out), ("output gradient", dout_l, dout)] {
        if l.shape().dims() != [c.rows, c.hidden] || !l.is_contiguous() || s.dtype() != DType::BF16 {
            candle_core::bail!(
                "{op}: the {name} must be bf16 [{}, {}] contiguous, not {:?}",
                c.rows,
                c.hidden,
                l.shape()
            );
        }
    }
    Ok(())
}

/// The gradient of `qkv` (`[rows, 3 · hidden]`, contiguous) from the output `out`, its gradient
/// `dout` (both `[rows, hidden]`, contiguous) and the forward pass's [`Saved`].
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    (qkv, qkv_l): (&CudaStorage, &Layout),
    (out, out_l): (&CudaStorage, &Layout),
    (dout, dout_l): (&CudaStorage, &Layout),
    lengths: &KeyLengths,
    (heads, scale): (usize, f32),
    p_drop: f32,
    saved: &mut Saved,
) -> Result<CudaStorage> {
    let op = "flash-attention-2 backward";
    let c = Call::of(op, lengths, heads, (qkv, qkv_l))?;
    check_outputs(op, &c, (out, out_l), (dout, dout_l))?;
    let dev = qkv.device().clone();
    let stream = dev.cuda_stream();
    let x = qkv.as_cuda_slice::<bf16>()?.slice(qkv_l.start_offset()..);
    let out = out.as_cuda_slice::<bf16>()?.slice(out_l.start_offset()..);
    let dout = dout.as_cuda_slice::<bf16>()?.slice(dout_l.start_offset()..);
    if saved.backend == Backend::Cudnn {
        return super::cudnn::backward(&dev, &c, (&x, &out, &dout), lengths, (heads, scale), p_drop, saved);
    }
    // Unzeroed: the key rows past a sequence's real ones, which the kernel does not write, are
    // zeroed after it (`zero_padded_keys`), unless LONGREAD_CUDA_ZERO_PADDED=all.
    let zero_after = !lengths.all_real && crate::layers::cuda::zero_padded_keys_only();
    let mut grad = if zero_after {
        // SAFETY: the kernel writes every row of dq and each sequence's real key rows of dk and
        // dv; the rest is zeroed below.
        unsafe { dev.alloc::<bf16>(c.rows * 3 * c.hidden) }?
    } else {
        gradient_buffer(&dev, c.rows * 3 * c.hidden, lengths)?
    };
    let padded_rows = c.rows + 128 * c.batch;
    let d_rounded = c.d.div_ceil(32) * 32;
    let splits = dq_splits(&dev, c.batch * heads, lengths.seq);
    let accum = padded_rows * heads * d_rounded;
    let mut dq_accum = if splits > 1 {
        // The kernels clear the first buffer only.
        dev.alloc_zeros::<f32>(splits * accum)?
    } else {
        // SAFETY: scratch the kernels fill before reading (cleared by the first one).
        unsafe { dev.alloc::<f32>(accum) }?
    };
    let mut softmax_d = unsafe { dev.alloc::<f32>(heads * padded_rows) }?;
    let block = (c.hidden * std::mem::size_of::<bf16>()) as u64;
    let status = with_lengths(lengths, |starts, used| {
        let (x_ptr, _g1) = x.device_ptr(&stream);
        let (out_ptr, _g2) = out.device_ptr(&stream);
        let (dout_ptr, _g3) = dout.device_ptr(&stream);
        let (lse_ptr, _g4) = saved.lse.device_ptr(&stream);
        let (grad_ptr, _g5) = grad.device_ptr_mut(&stream);
        let (acc_ptr, _g6) = dq_accum.device_ptr_mut(&stream);
        let (sd_ptr, _g7) = softmax_d.device_ptr_mut(&stream);
        let (starts_ptr, _g8) = starts.device_ptr(&stream);
        let (used_ptr, _g9) = used.device_ptr(&stream);
        let (rng_ptr, _g10) = saved.rng.device_ptr_mut(&stream);
        // SAFETY: as in `forward`; grad holds rows · 3 · hidden elements whose three column
        // blocks take dq, dk and dv; dq_accum and softmax_d have the sizes
        // `kernels/longread_flash.cu` asks for.
        Ok(unsafe {
            longread_flash_attn::longread_flash_bwd_bf16(
                x_ptr as *const _,
                (x_ptr + block) as *const _,
                (x_ptr + 2 * block) as *const _,
                out_ptr as *const _,
                dout_ptr as *const _,
                lse_ptr as *const f32,
                grad_ptr as *mut _,
                (grad_ptr + block) as *mut _,
                (grad_ptr + 2 * block) as *mut _,
                (3 * c.hidden) as i64,
                acc_ptr as *mut f32,
                sd_ptr as *mut f32,
                starts_ptr as *const i32,
                used_ptr as *const i32,
                c.row_stride as i64,
                c.batch as i32,
                heads as i32,
                c.d as i32,
                lengths.seq as i32,
                c.rows as i32,
                scale,
                p_drop,
                rng_ptr as *mut u64,
                splits as i32,
                stream.cu_stream() as *mut _,
            )
        })
    })?;
    check(op, status)?;
    if zero_after {
        with_lengths(lengths, |_, used| {
            crate::layers::cuda::launch::zero_padded_keys(
                &dev,
                &mut grad,
                used,
                (c.rows, lengths.seq, 3 * c.hidden),
                c.hidden..3 * c.hidden,
            )
        })?;
    }
    Ok(CudaStorage::wrap_cuda_slice(grad, dev))
}

/// A buffer of `len` elements for a backward kernel's gradients over `lengths`' sequences:
/// zeroed where some key is padding (the kernels do not write the gradient of keys past a
/// sequence's real ones), else left as allocated, since every element gets written.
pub(super) fn gradient_buffer(
    dev: &candle_core::CudaDevice,
    len: usize,
    lengths: &KeyLengths,
) -> Result<CudaSlice<bf16>> {
    if lengths.all_real {
        // SAFETY: every key is real: the kernels write each row of dq, dk and dv.
        Ok(unsafe { dev.alloc::<bf16>(len) }?)
    } else {
        Ok(dev.alloc_zeros::<bf16>(len)?)
    }
}

/// How many dq accumulators FlashAttention-2's backward pass gets for `blocks` (sequences ×
/// heads) of `seq` keys: in its deterministic mode (the default,
/// [`attention_backward_deterministic`](crate::layers::cuda::attention_backward_deterministic)), as
/// FlashAttention chooses it — enough splits of the key blocks to give each of the GPU's
/// multiprocessors a block, at most one per key block of 128; 0 with
/// `LONGREAD_CUDA_ATTENTION_BWD=fast` (FlashAttention's default: a block per key block, all
/// adding into one accumulator in whatever order they run, so that two runs of a step differ in
/// the last bits).
fn dq_splits(dev: &candle_core::CudaDevice, blocks: usize, seq: usize) -> usize {
    if !crate::layers::cuda::attention_backward_deterministic() {
        return 0;
    }
    super::dq_splits_for(super::support::of(dev).multiprocessors, blocks, seq)
}
