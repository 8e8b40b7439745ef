//! cuDNN's fused attention as the entry points of `shim/longread_cudnn.cpp` (which documents the
//! layouts: those of `vendor/flash-attn`), compiled by build.rs and linked statically; cuDNN
//! itself is opened at run time ([`open`]). The safe wrappers are longread-kernels'
//! `FlashAttention2` / `FlashAttentionTrain` ops with `LONGREAD_CUDA_ATTENTION=cudnn` /
//! `LONGREAD_CUDA_TRAIN_ATTENTION=cudnn`; this crate only declares the functions.
use core::ffi::{c_char, c_int, c_void, CStr};

/// What both passes are given besides their tensors (`struct longread_sdpa_call` of the shim):
/// the GPU's ordinal, the sizes (`row_stride`: elements per row of the q/k/v product), the
/// scale and the dropout probability, each sequence's query and real-key counts (int32
/// `[batch]` on the device, or both null: every key is real), the dropout's seed and offset
/// (int64 `[2]` on the device, read when `p_drop > 0`) and the CUDA stream.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SdpaCall {
    pub ordinal: c_int,
    pub batch: i64,
    pub heads: i64,
    pub dim: i64,
    pub seq: i64,
    pub row_stride: i64,
    pub scale: f32,
    pub p_drop: f32,
    pub seq_q: *const i32,
    pub seq_kv: *const i32,
    pub seed_offset: *const i64,
    pub stream: *mut c_void,
}

// The layout the shim's `struct longread_sdpa_call` has (and asserts) on 64-bit targets.
const _: () = assert!(
    core::mem::size_of::<SdpaCall>() == 88
        && core::mem::offset_of!(SdpaCall, batch) == 8
        && core::mem::offset_of!(SdpaCall, scale) == 48
        && core::mem::offset_of!(SdpaCall, seq_q) == 56
        && core::mem::offset_of!(SdpaCall, stream) == 80
);

extern "C" {
    fn longread_cudnn_open(library: *const c_char) -> i64;
    fn longread_cudnn_error() -> *const c_char;
    fn longread_cudnn_plans(count: *mut i64, milliseconds: *mut f64);

    /// Attention of bf16 sequences, with dropout when `call.p_drop > 0` and softmax statistics
    /// when `stats` is not null. With `*workspace_size < 0` it only builds (or finds) the graph
    /// and stores the workspace it needs. Returns 0, or 1 with the reason in [`last_error`].
    ///
    /// # Safety
    /// Every pointer (of `call` too) is a device pointer of the current context with the extent
    /// the layout of `shim/longread_cudnn.cpp` implies; `workspace` holds `*workspace_size`
    /// bytes; `call.stream` is a stream of that context; cuDNN is open ([`open`]).
    pub fn longread_cudnn_sdpa_fwd_bf16(
        call: *const SdpaCall,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *mut c_void,
        stats: *mut f32,
        workspace: *mut c_void,
        workspace_size: *mut i64,
    ) -> c_int;

    /// The backward pass of [`longread_cudnn_sdpa_fwd_bf16`]: dq, dk and dv in rows of
    /// `grad_row_stride` elements (heads side by side; 0: head-major, `[batch, heads, seq,
    /// dim]` contiguous from each pointer), by cuDNN's deterministic engine where
    /// `deterministic` is not 0. With `*workspace_size < 0` it only builds (or finds) the graph
    /// and stores the workspace it needs (the tensors may be null). Returns 0, or 1
    /// ([`last_error`]).
    ///
    /// # Safety
    /// As [`longread_cudnn_sdpa_fwd_bf16`]; `stats`, and `call`'s dropout, are the forward
    /// pass's.
    pub fn longread_cudnn_sdpa_bwd_bf16(
        call: *const SdpaCall,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *const c_void,
        dout: *const c_void,
        stats: *const f32,
        dq: *mut c_void,
        dk: *mut c_void,
        dv: *mut c_void,
        grad_row_stride: i64,
        deterministic: c_int,
        workspace: *mut c_void,
        workspace_size: *mut i64,
    ) -> c_int;
}

/// Opens cuDNN: `library` (a file name or path; `None`: `libcudnn.so.9` on the loader's path).
/// Its version (e.g. 91900), or the reason it could not be opened. Once open it stays open;
/// later calls return the version.
pub fn open(library: Option<&CStr>) -> Result<i64, String> {
    // SAFETY: a null or NUL-terminated name; the shim copies nothing it does not own.
    let version = unsafe { longread_cudnn_open(library.map_or(core::ptr::null(), CStr::as_ptr)) };
    if version > 0 {
        Ok(version)
    } else {
        Err(last_error())
    }
}

/// Graphs built so far in this process (one per batch shape and pass) and the milliseconds
/// their building took.
pub fn plans() -> (i64, f64) {
    let (mut count, mut milliseconds) = (0i64, 0f64);
    // SAFETY: the shim writes the two values under its lock.
    unsafe { longread_cudnn_plans(&mut count, &mut milliseconds) };
    (count, milliseconds)
}

/// The reason of this thread's last failed call.
pub fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated string that lives until this thread's next call.
    unsafe { CStr::from_ptr(longread_cudnn_error()) }.to_string_lossy().into_owned()
}
