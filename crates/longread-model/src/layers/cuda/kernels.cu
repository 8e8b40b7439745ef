// longread's CUDA kernels for inference (compiled to PTX by build.rs with the `cuda` feature and
// loaded by layers/cuda/mod.rs). Each works in f32 whatever the storage type (f32 or bf16): the
// reductions (softmax, LayerNorm statistics) accumulate in f32, as PyTorch's do under autocast.
// One warp per row for the row-wise kernels (rows of 512 keys or 768 features: every lane
// walks the row with a stride of 32, so loads coalesce).
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float load(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, long i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, long i, float v) { p[i] = __float2bfloat16(v); }

// In place: scores[row, :] = softmax(scores[row, :] * scale + key_bias[row / rows_per_item, :]).
// scores: [items · rows_per_item, cols] (items = sequences, rows_per_item = heads × queries);
// key_bias: [items, cols] f32 (0 for a real key, a large negative number for padding).
template <typename T>
__device__ void attention_softmax(T* scores, const float* key_bias, long rows, long rows_per_item, int cols,
                                  float scale) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  T* x = scores + row * cols;
  const float* bias = key_bias + (row / rows_per_item) * cols;
  float m = -INFINITY;
  for (int j = lane; j < cols; j += 32) m = fmaxf(m, load(x, j) * scale + bias[j]);
  m = warp_max(m);
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += expf(load(x, j) * scale + bias[j] - m);
  const float inv = 1.f / warp_sum(s);
  for (int j = lane; j < cols; j += 32) store(x, j, expf(load(x, j) * scale + bias[j] - m) * inv);
}

extern "C" __global__ void attention_softmax_f32(float* scores, const float* key_bias, long rows,
                                                 long rows_per_item, int cols, float scale) {
  attention_softmax(scores, key_bias, rows, rows_per_item, cols, scale);
}

extern "C" __global__ void attention_softmax_bf16(__nv_bfloat16* scores, const float* key_bias, long rows,
                                                  long rows_per_item, int cols, float scale) {
  attention_softmax(scores, key_bias, rows, rows_per_item, cols, scale);
}

// In place: x[row, :] = LayerNorm(x[row, :] + bias + residual[row, :]) · gamma + beta, with
// params = [bias, gamma, beta] ([3, cols], f32); mean and variance in f32 (biased variance,
// as torch.nn.LayerNorm).
template <typename T>
__device__ void residual_layer_norm(T* x, const T* residual, const float* params, long rows, int cols, float eps) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  T* xr = x + row * cols;
  const T* rr = residual + row * cols;
  const float* bias = params;
  const float* gamma = params + cols;
  const float* beta = params + 2 * cols;
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += load(xr, j) + bias[j] + load(rr, j);
  const float mean = warp_sum(s) / cols;
  float q = 0.f;
  for (int j = lane; j < cols; j += 32) {
    const float d = load(xr, j) + bias[j] + load(rr, j) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(warp_sum(q) / cols + eps);
  for (int j = lane; j < cols; j += 32) {
    const float v = load(xr, j) + bias[j] + load(rr, j);
    store(xr, j, (v - mean) * rstd * gamma[j] + beta[j]);
  }
}

extern "C" __global__ void residual_layer_norm_f32(float* x, const float* residual, const float* params, long rows,
                                                   int cols, float eps) {
  residual_layer_norm(x, residual, params, rows, cols, eps);
}

extern "C" __global__ void residual_layer_norm_bf16(__nv_bfloat16* x, const __nv_bfloat16* residual,
                                                    const float* params, long rows, int cols, float eps) {
  residual_layer_norm(x, residual, params, rows, cols, eps);
}

// In place over x [n / cols, cols]: x = x + bias (gelu = 0) or gelu_erf(x + bias) (gelu = 1),
// bias [cols] f32.
template <typename T>
__device__ void bias_activation(T* x, const float* bias, long n, int cols, int gelu) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float v = load(x, i) + bias[i % cols];
    if (gelu) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    store(x, i, v);
  }
}

extern "C" __global__ void bias_activation_f32(float* x, const float* bias, long n, int cols, int gelu) {
  bias_activation(x, bias, n, cols, gelu);
}

extern "C" __global__ void bias_activation_bf16(__nv_bfloat16* x, const float* bias, long n, int cols, int gelu) {
  bias_activation(x, bias, n, cols, gelu);
}
