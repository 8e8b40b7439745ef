// Runs kernels.cu's kernels on the CPU, for tests on machines without a GPU: every CUDA thread of
// a block is a host thread; blocks run one after another. Warp shuffles and __syncwarp meet at a
// barrier of the warp's 32 threads, __syncthreads at one of the block's; __shared__ memory is a
// static (one block at a time). Enough for the row-wise kernels (a warp per row), whose warps
// leave together; not a model of timing, memory ordering or WMMA.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_bf16.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 blockDim, gridDim;

namespace emu {
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<float> shuffle;  // [warps × 32]

inline float exchange(float v, int other_lane) {
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  shuffle[warp * 32 + lane] = v;
  warp_barriers[warp]->arrive_and_wait();
  const float r = shuffle[warp * 32 + other_lane];
  warp_barriers[warp]->arrive_and_wait();
  return r;
}

// Runs `kernel()` as a grid of `grid` × `grid_y` blocks of `block` threads (x only, a multiple
// of 32).
template <typename F>
void launch(unsigned grid, unsigned block, F kernel, unsigned grid_y = 1) {
  gridDim = {grid, grid_y, 1};
  blockDim = {block, 1, 1};
  const unsigned warps = block / 32;
  shuffle.assign(warps * 32, 0.f);
  for (unsigned b = 0; b < grid * grid_y; ++b) {
    warp_barriers.clear();
    for (unsigned w = 0; w < warps; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    block_barrier = std::make_unique<std::barrier<>>(block);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
      threads.emplace_back([=] {
        threadIdx = {t, 0, 0};
        blockIdx = {b % grid, b / grid, 0};
        kernel();
      });
    }
    for (auto& t : threads) t.join();
  }
}
}  // namespace emu

inline float __shfl_xor_sync(unsigned, float v, int mask) { return emu::exchange(v, (threadIdx.x & 31) ^ mask); }
// A lane past the warp's end reads its own value, as on the GPU.
inline float __shfl_down_sync(unsigned, float v, unsigned delta) {
  const unsigned lane = threadIdx.x & 31;
  return emu::exchange(v, int(lane + delta < 32 ? lane + delta : lane));
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }
inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// <cmath> puts erff, expf and fmaxf in the global namespace too; CUDA's integer min and max:
inline int min(int a, int b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
