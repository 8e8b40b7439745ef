// longread's one CUTLASS kernel (not FlashAttention's; built beside it, vendor/README.md):
// bf16 dense products with the bias and exact (erf) GELU in the epilogue, on Hopper: the first
// product of a transformer's feed-forward block, `out[rows, n] = gelu(x[rows, k] · W[n, k]ᵀ + b[n])`,
// in one kernel of CUTLASS 3.5's sm90 TMA warp-specialised GEMMs, where cuBLASLt's GELU epilogue
// is the tanh approximation. Row-major `out = x · Wᵀ` is column-major `outᵀ = W · xᵀ`: the GEMM
// runs with A = W (row-major [n, k]), B = x (column-major [k, rows]) and D column-major
// [n, rows], so the bias runs along D's rows (LinCombPerRowBiasEltAct).

#include <cstdint>

#if defined(LONGREAD_GEMM_SM90A)
// In the order CUTLASS's example 49 includes them (its headers rely on it).
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/default_epilogue.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

using namespace cute;

namespace {

using Element = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::ColumnMajor;
constexpr int kAlignment = 8;  // 16-byte vectors of bf16

using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<cutlass::epilogue::thread::GELU, Element, float,
                                                                  Element, Element, float>;

// One kernel of a tile shape, cluster shape and schedule (mainloop and epilogue).
template <class TileShape, class ClusterShape, class MainloopSchedule, class EpilogueSchedule>
struct Config {
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignment, Element, LayoutD,
        kAlignment, EpilogueSchedule, Fusion>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignment, Element, LayoutB,
        kAlignment, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        MainloopSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// Two consumer warp groups share a 128 × 256 tile (cooperative).
using Cooperative = Config<Shape<_128, _256, _64>, Shape<_1, _2, _1>, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                           cutlass::epilogue::TmaWarpSpecializedCooperative>;

// Runs (or sizes the workspace of, `*workspace_size < 0`) one configuration: 0, 1 (sizes the
// kernel cannot take) or 3 (launch failed).
template <class C>
int run(const void *x, const void *w, const void *bias, void *out, int64_t rows, int64_t n, int64_t k, int sm_count,
        void *workspace, int64_t *workspace_size, void *stream) {
    using Kernel = typename C::Kernel;
    using Gemm = typename C::Gemm;
    const int m_ = static_cast<int>(n), n_ = static_cast<int>(rows), k_ = static_cast<int>(k);
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(m_, k_, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(n_, k_, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(m_, n_, 1));
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m_, n_, k_, 1},
        {static_cast<const Element *>(w), stride_a, static_cast<const Element *>(x), stride_b},
        {{}, nullptr, stride_d, static_cast<Element *>(out), stride_d}};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const Element *>(bias);
    args.hw_info.sm_count = sm_count;  // else CUTLASS asks the runtime at every call
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
    if (*workspace_size < 0) {
        *workspace_size = static_cast<int64_t>(Gemm::get_workspace_size(args));
        return 0;
    }
    if (gemm.initialize(args, workspace, static_cast<cudaStream_t>(stream)) != cutlass::Status::kSuccess) return 3;
    if (gemm.run(static_cast<cudaStream_t>(stream)) != cutlass::Status::kSuccess) return 3;
    return 0;
}

}  // namespace
#endif  // LONGREAD_GEMM_SM90A

extern "C" {

// out[rows, n] = gelu_erf(x[rows, k] · W[n, k]ᵀ + bias[n]), bf16 row-major, f32 accumulation and
// epilogue, on a GPU of `sm_count` multiprocessors (compute capability 9.0: sm90a code), by the
// cooperative configuration (128 × 256 tiles). With `*workspace_size < 0` stores the workspace it
// needs and returns. Returns 0; 1 where the sizes do not fit the kernel (n and k multiples of 8,
// each under 2³¹); 2 where the binary holds no sm90a code (built for another compute
// capability); 3 where the launch failed.
int longread_gemm_bias_gelu_bf16(const void *x, const void *w, const void *bias, void *out, int64_t rows, int64_t n,
                                 int64_t k, int sm_count, void *workspace, int64_t *workspace_size, void *stream) {
#if defined(LONGREAD_GEMM_SM90A)
    const int64_t limit = int64_t(1) << 31;
    if (rows <= 0 || n <= 0 || k <= 0 || rows >= limit || n >= limit || k >= limit || n % kAlignment ||
        k % kAlignment) {
        return 1;
    }
    return run<Cooperative>(x, w, bias, out, rows, n, k, sm_count, workspace, workspace_size, stream);
#else
    (void)x, (void)w, (void)bias, (void)out, (void)rows, (void)n, (void)k, (void)sm_count, (void)workspace,
        (void)workspace_size, (void)stream;
    return 2;
#endif
}

}  // extern "C"
