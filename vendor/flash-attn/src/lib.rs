//! FlashAttention-2's forward and backward kernels as two C entry points
//! (`kernels/longread_flash.cu`, which documents the layouts), and longread's CUTLASS product
//! with bias and exact GELU in its epilogue (`gemm/longread_gemm.cu`), compiled by build.rs with
//! nvcc and linked statically with the static CUDA runtime. The safe wrappers are
//! `longread_kernels::layers::cuda::{FlashAttention2, FlashAttentionTrain}`; this crate only
//! declares the functions.
use core::ffi::{c_int, c_void};

/// The compute capability the kernels were compiled for (`CUDA_COMPUTE_CAP`, e.g. 90): machine
/// code only, which runs on GPUs of the same major version and an equal or higher minor one.
pub fn built_compute_cap() -> (u32, u32) {
    let cap: u32 = env!("LONGREAD_FLASH_COMPUTE_CAP").parse().unwrap_or(0);
    (cap / 10, cap % 10)
}

extern "C" {
    /// Attention of variable-length bf16 sequences, optionally with dropout. Returns 0, a
    /// `cudaError_t`, or -1 for a head size other than 32 or 64.
    ///
    /// # Safety
    /// Every pointer is a device pointer of the current context with the extent the layout of
    /// `kernels/longread_flash.cu` implies; `stream` is a stream of that context.
    pub fn longread_flash_fwd_bf16(
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *mut c_void,
        lse: *mut f32,
        cu_seqlens: *const c_int,
        seqused_k: *const c_int,
        row_stride: i64,
        batch: c_int,
        heads: c_int,
        head_dim: c_int,
        max_seqlen: c_int,
        total_q: c_int,
        softmax_scale: f32,
        p_drop: f32,
        seed: u64,
        offset: u64,
        rng_state: *mut u64,
        stream: *mut c_void,
    ) -> c_int;

    /// The backward pass of [`longread_flash_fwd_bf16`]. Returns 0, a `cudaError_t`, -1 for a
    /// head size other than 32 or 64, -2 for a GPU with under 144 KB of shared memory per block.
    ///
    /// # Safety
    /// As [`longread_flash_fwd_bf16`]; `dq`, `dk`, `dv` are zeroed column blocks of one buffer;
    /// `dq_accum` holds `max(dq_splits, 1)` buffers, all but the first zeroed (`dq_splits` ≥ 1:
    /// the deterministic backward, at most `ceil(max_seqlen / 128)`; 0: FlashAttention's atomic one).
    pub fn longread_flash_bwd_bf16(
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *const c_void,
        dout: *const c_void,
        lse: *const f32,
        dq: *mut c_void,
        dk: *mut c_void,
        dv: *mut c_void,
        grad_row_stride: i64,
        dq_accum: *mut f32,
        softmax_d: *mut f32,
        cu_seqlens: *const c_int,
        seqused_k: *const c_int,
        row_stride: i64,
        batch: c_int,
        heads: c_int,
        head_dim: c_int,
        max_seqlen: c_int,
        total_q: c_int,
        softmax_scale: f32,
        p_drop: f32,
        rng_state: *mut u64,
        dq_splits: c_int,
        stream: *mut c_void,
    ) -> c_int;

    /// `out[rows, n] = gelu_erf(x[rows, k] · W[n, k]ᵀ + bias[n])` (bf16, row-major; f32
    /// accumulation and epilogue) by `gemm/longread_gemm.cu`'s CUTLASS kernel, on a GPU of compute
    /// capability 9.0 with `sm_count` multiprocessors (CUTLASS's cooperative schedule, 128 × 256
    /// tiles). With `*workspace_size < 0` it stores the workspace it needs and returns. Returns
    /// 0; 1 where the sizes do not fit the kernel (`n` and `k` multiples of 8); 2 where the
    /// binary holds no sm90a code (not built with `CUDA_COMPUTE_CAP=90`); 3 where the launch
    /// failed.
    ///
    /// # Safety
    /// `x`, `w`, `bias` and `out` are 16-byte aligned device pointers of the current context
    /// holding `rows × k`, `n × k`, `n` and `rows × n` elements; `workspace` holds
    /// `*workspace_size` bytes; `stream` is a stream of that context.
    pub fn longread_gemm_bias_gelu_bf16(
        x: *const c_void,
        w: *const c_void,
        bias: *const c_void,
        out: *mut c_void,
        rows: i64,
        n: i64,
        k: i64,
        sm_count: c_int,
        workspace: *mut c_void,
        workspace_size: *mut i64,
        stream: *mut c_void,
    ) -> c_int;
}
