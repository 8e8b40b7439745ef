// longread's stand-in for the two things FlashAttention-2's kernels take from PyTorch's ATen:
// the dropout generator's state (seed, offset) and its unpacking (no CUDA-graph capture here).
#pragma once
#include <cstdint>
#include <tuple>

namespace at {
struct PhiloxCudaState {
    uint64_t seed_ = 0;
    uint64_t offset_ = 0;
};
namespace cuda {
namespace philox {
__host__ __device__ inline std::tuple<uint64_t, uint64_t> unpack(PhiloxCudaState state) {
    return std::make_tuple(state.seed_, state.offset_);
}
}  // namespace philox
}  // namespace cuda
}  // namespace at
