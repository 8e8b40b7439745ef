// longread's entry into FlashAttention-2's kernels (the headers beside this file are
// FlashAttention 2.6.3's, from its PyPI source release; shim/ stands in for the two ATen
// names they use; README.md beside this folder).
//
// Instantiated for what longread's encoders run and nothing else: bf16, heads of 32 or 64, no
// causal mask, window, ALiBi or soft-capping, variable-length sequences (cu_seqlens, and
// seqused_k for each sequence's real keys), with or without attention dropout. The kernel
// wrappers and block shapes are those of FlashAttention's flash_fwd_launch_template.h and
// flash_bwd_launch_template.h (their choice for these head sizes on GPUs with at least 144 KB
// of shared memory per block: A100, H100, H200); the launch templates themselves are not
// included, as they switch over every variant and need PyTorch.

#include <cstring>

#include "flash.h"
#include "flash_bwd_preprocess_kernel.h"  // before flash_bwd_kernel.h, which uses its dot_do_o
#include "flash_bwd_kernel.h"
#include "flash_fwd_kernel.h"
#include "kernel_traits.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LONGREAD_FLASH_ARCH
#define LONGREAD_GRID_CONSTANT __grid_constant__
#else
#define LONGREAD_GRID_CONSTANT
#endif

namespace longread_flash {

using Element = cutlass::bfloat16_t;

template <typename Traits, bool Is_dropout>
__global__ void fwd_kernel(LONGREAD_GRID_CONSTANT const Flash_fwd_params params) {
#if defined(LONGREAD_FLASH_ARCH)
    // Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN (false: variable lengths),
    // Is_even_K (true: d == kHeadDim), Is_softcap, Return_softmax.
    flash::compute_attn<Traits, Is_dropout, false, false, false, false, true, false, false>(params);
#endif
}

template <typename Traits>
__global__ void bwd_dot_do_o_kernel(const Flash_bwd_params params) {
    flash::compute_dot_do_o<true, Traits>(params);
}

template <typename Traits, bool Is_dropout>
__global__ void bwd_dq_dk_dv_kernel(LONGREAD_GRID_CONSTANT const Flash_bwd_params params) {
#if defined(LONGREAD_FLASH_ARCH)
    // Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K, Is_softcap.
    flash::compute_dq_dk_dv_seqk_parallel<Traits, Is_dropout, false, false, false, false, true, false>(params);
#endif
}

template <typename Traits>
__global__ void bwd_convert_dq_kernel(const Flash_bwd_params params, const int nsplits) {
    flash::convert_dQ<Traits>(params, nsplits);
}

template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, size_t smem) {
    if (smem < 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename Traits, bool Is_dropout>
cudaError_t launch_fwd(Flash_fwd_params& params, cudaStream_t stream) {
    auto kernel = &fwd_kernel<Traits, Is_dropout>;
    constexpr size_t smem = Traits::kSmemSize;
    cudaError_t err = allow_smem(kernel, smem);
    if (err != cudaSuccess) return err;
    const int m_blocks = (params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    kernel<<<dim3(m_blocks, params.b, params.h), Traits::kNThreads, smem, stream>>>(params);
    return cudaGetLastError();
}

// With `splits` >= 1 (deterministic, FlashAttention's own `deterministic` mode): `splits`
// blocks per sequence and head, each walking its share of the key blocks in order and adding
// its dq into a dq_accum buffer of its own, which the last kernel sums in order, so that the
// same inputs give the same bits. With 0: a block per key block, all adding into one buffer
// with atomics in whatever order they run (FlashAttention's default).
template <typename Traits, bool Is_dropout>
cudaError_t launch_bwd(Flash_bwd_params& params, int splits, cudaStream_t stream) {
    const int m_blocks = (params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    const int n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
    const int grid_n = splits > 0 ? (splits < n_blocks ? splits : n_blocks) : n_blocks;
    params.deterministic = splits > 0;
    dim3 grid_m(m_blocks, params.b, params.h);
    bwd_dot_do_o_kernel<Traits><<<grid_m, Traits::kNThreads, 0, stream>>>(params);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    auto kernel = &bwd_dq_dk_dv_kernel<Traits, Is_dropout>;
    constexpr size_t smem = Traits::kSmemSize1colblock;
    if ((err = allow_smem(kernel, smem)) != cudaSuccess) return err;
    kernel<<<dim3(grid_n, params.b, params.h), Traits::kNThreads, smem, stream>>>(params);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    auto convert = &bwd_convert_dq_kernel<Traits>;
    constexpr size_t smem_dq = Traits::kSmemdQSize;
    if ((err = allow_smem(convert, smem_dq)) != cudaSuccess) return err;
    convert<<<grid_m, Traits::kNThreads, smem_dq, stream>>>(params, params.deterministic ? grid_n : 1);
    return cudaGetLastError();
}

// Forward block shapes: flash_fwd_launch_template.h's run_mha_fwd_hdim32/64.
template <int D, bool Is_dropout>
struct FwdTraits {
    using type = Flash_fwd_kernel_traits<D, 128, (D == 64 && Is_dropout) ? 64 : 128, 4, false, false, Element>;
};

// Backward block shapes: flash_bwd_launch_template.h's run_mha_bwd_hdim32/64 with >= 144 KB of
// shared memory per block (hdim32 keeps V in registers without dropout).
template <int D, bool Is_dropout>
struct BwdTraits {
    using type = Flash_bwd_kernel_traits<D, 128, 128, 8, 4, 4, 4, D == 32 && !Is_dropout, false, Element>;
};

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// The fields both passes share: q, k, v in strided rows (heads `head_stride` apart), the output
// [total_q, heads, d] contiguous, variable-length sequences, the scale and the dropout.
void fill_forward(Flash_fwd_params& params, const void* q, const void* k, const void* v, void* out, float* lse,
                  const int* cu_seqlens, const int* seqused_k, long long row_stride, int batch, int heads, int d,
                  int max_seqlen, int total_q, float softmax_scale, float p_drop, uint64_t* rng_state) {
    memset(&params, 0, sizeof(params));
    params.q_ptr = const_cast<void*>(q);
    params.k_ptr = const_cast<void*>(k);
    params.v_ptr = const_cast<void*>(v);
    params.o_ptr = out;
    params.softmax_lse_ptr = lse;
    params.q_row_stride = params.k_row_stride = params.v_row_stride = row_stride;
    params.q_head_stride = params.k_head_stride = params.v_head_stride = d;
    params.o_row_stride = (long long)heads * d;
    params.o_head_stride = d;
    params.b = batch;
    params.h = params.h_k = heads;
    params.h_h_k_ratio = 1;
    params.d = d;
    params.d_rounded = round_up(d, 32);
    params.seqlen_q = params.seqlen_k = max_seqlen;
    params.seqlen_q_rounded = params.seqlen_k_rounded = round_up(max_seqlen, 128);
    params.total_q = total_q;
    params.scale_softmax = softmax_scale;
    params.scale_softmax_log2 = softmax_scale * M_LOG2E;
    params.softcap = 0.0f;
    // FlashAttention's p_dropout is the probability to keep.
    params.p_dropout = 1.0f - p_drop;
    params.p_dropout_in_uint8_t = uint8_t(std::floor(params.p_dropout * 255.0));
    params.rp_dropout = 1.0f / params.p_dropout;
    params.scale_softmax_rp_dropout = params.rp_dropout * params.scale_softmax;
    params.rng_state = rng_state;
    params.cu_seqlens_q = const_cast<int*>(cu_seqlens);
    params.cu_seqlens_k = const_cast<int*>(cu_seqlens);
    params.seqused_k = const_cast<int*>(seqused_k);
    params.is_seqlens_k_cumulative = true;
    params.window_size_left = -1;
    params.window_size_right = -1;
    params.is_bf16 = true;
    params.is_causal = false;
    params.unpadded_lse = true;
    params.num_splits = 1;
}

}  // namespace longread_flash

using namespace longread_flash;

// Attention of `batch` sequences of one padded length `max_seqlen` whose q, k and v rows are
// three column blocks of one product (`row_stride` elements a row): sequence i's queries are rows
// cu_seqlens[i] .. cu_seqlens[i+1], its keys and values the first seqused_k[i] of them. `out`
// is [total_q, heads, d] contiguous and `lse` (heads · total_q floats) the rows' log-sum-exp,
// which the backward pass reads. With p_drop > 0, attention dropout from Philox(seed, offset),
// recorded into rng_state (two u64 on the device) for the backward pass. Returns 0, a
// cudaError_t, or -1 for a head size without a kernel here.
extern "C" int longread_flash_fwd_bf16(const void* q, const void* k, const void* v, void* out, float* lse,
                                       const int* cu_seqlens, const int* seqused_k, long long row_stride,
                                       int batch, int heads, int head_dim, int max_seqlen, int total_q,
                                       float softmax_scale, float p_drop, unsigned long long seed,
                                       unsigned long long offset, unsigned long long* rng_state, void* stream) {
    Flash_fwd_params params;
    fill_forward(params, q, k, v, out, lse, cu_seqlens, seqused_k, row_stride, batch, heads, head_dim, max_seqlen,
                 total_q, softmax_scale, p_drop, reinterpret_cast<uint64_t*>(rng_state));
    params.philox_args.seed_ = seed;
    params.philox_args.offset_ = offset;
    cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
    const bool dropout = p_drop > 0.0f;
    if (dropout && rng_state == nullptr) return -1;
    switch (head_dim) {
        case 32: return dropout ? launch_fwd<FwdTraits<32, true>::type, true>(params, s)
                                : launch_fwd<FwdTraits<32, false>::type, false>(params, s);
        case 64: return dropout ? launch_fwd<FwdTraits<64, true>::type, true>(params, s)
                                : launch_fwd<FwdTraits<64, false>::type, false>(params, s);
        default: return -1;
    }
}

// The backward pass of longread_flash_fwd_bf16 (same q, k, v, sequences, scale, dropout and
// rng_state; its out and lse): gradients of q, k and v into three column blocks of one
// [total_q, 3 · heads · d] buffer (`grad_row_stride` elements a row), which the caller zeroes
// (keys beyond seqused_k get no write). `dout` is [total_q, heads, d] contiguous. `dq_splits`:
// >= 1 for the deterministic backward with that many dq_accum buffers (at most the key blocks
// of a sequence, ceil(max_seqlen / 128)), 0 for FlashAttention's atomic one (launch_bwd).
// Scratch, f32: dq_accum of max(dq_splits, 1) buffers of (total_q + 128 · batch) · heads ·
// round_up(d, 32) elements, the second and later zeroed by the caller (the first kernel clears
// the first), and softmax_d of heads · (total_q + 128 · batch). Returns 0, a cudaError_t, -1 for
// a head size without a kernel here, -2 for a GPU with less than 144 KB of shared memory per block.
extern "C" int longread_flash_bwd_bf16(const void* q, const void* k, const void* v, const void* out,
                                       const void* dout, const float* lse, void* dq, void* dk, void* dv,
                                       long long grad_row_stride, float* dq_accum, float* softmax_d,
                                       const int* cu_seqlens, const int* seqused_k, long long row_stride,
                                       int batch, int heads, int head_dim, int max_seqlen, int total_q,
                                       float softmax_scale, float p_drop, unsigned long long* rng_state,
                                       int dq_splits, void* stream) {
    int device = 0, smem = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) return err;
    if (smem < 144 * 1024) return -2;
    Flash_bwd_params params;
    fill_forward(params, q, k, v, const_cast<void*>(out), const_cast<float*>(lse), cu_seqlens, seqused_k, row_stride,
                 batch, heads, head_dim, max_seqlen, total_q, softmax_scale, p_drop,
                 reinterpret_cast<uint64_t*>(rng_state));
    params.do_ptr = const_cast<void*>(dout);
    params.do_row_stride = (long long)heads * head_dim;
    params.do_head_stride = head_dim;
    params.dq_ptr = dq;
    params.dk_ptr = dk;
    params.dv_ptr = dv;
    params.dq_row_stride = params.dk_row_stride = params.dv_row_stride = grad_row_stride;
    params.dq_head_stride = params.dk_head_stride = params.dv_head_stride = head_dim;
    params.dq_accum_ptr = dq_accum;
    params.dsoftmax_sum = softmax_d;
    // launch_bwd sets params.deterministic from dq_splits; each split's buffer follows the last.
    params.dq_accum_split_stride = (long long)(total_q + 128 * batch) * heads * params.d_rounded;
    cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
    const bool dropout = p_drop > 0.0f;
    if (dropout && rng_state == nullptr) return -1;
    switch (head_dim) {
        case 32: return dropout ? launch_bwd<BwdTraits<32, true>::type, true>(params, dq_splits, s)
                                : launch_bwd<BwdTraits<32, false>::type, false>(params, dq_splits, s);
        case 64: return dropout ? launch_bwd<BwdTraits<64, true>::type, true>(params, dq_splits, s)
                                : launch_bwd<BwdTraits<64, false>::type, false>(params, dq_splits, s);
        default: return -1;
    }
}
