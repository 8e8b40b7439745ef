// longread's CUDA kernels for inference (compiled to PTX by build.rs with the `cuda` feature and
// loaded by layers/cuda/mod.rs; also compiled for the CPU with tests/emulated's stand-ins for
// CUDA by tests/kernels_emulated.rs, which tests kernels where there is no GPU). Each works in
// f32 whatever the storage type (f32 or bf16): the reductions (softmax, LayerNorm statistics)
// accumulate in f32, as PyTorch's do under autocast. One warp per row for the row-wise kernels
// (rows of 512 keys or 768 features: every lane walks the row with a stride of 32, so loads
// coalesce).
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

// The dropout mask of layers/dropout.rs, element by element: element i is kept (factor
// 1 / (1 - p)) when 24 bits of SplitMix64's output of seed + i·γ reach the threshold, else 0.
// The same mask as the CPU's for the same seed, so the devices' gradients can be compared.
__device__ __forceinline__ float dropout_factor(unsigned long long seed, unsigned long long i, unsigned int threshold,
                                                float scale) {
  unsigned long long z = seed + i * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (unsigned int)(z >> 40) >= threshold ? scale : 0.f;
}

// Exact GELU, z·Φ(z), and its derivative Φ(z) + z·φ(z) (Φ, φ: the standard normal's CDF and density).
__device__ __forceinline__ float gelu_erf(float z) { return 0.5f * z * (1.f + erff(z * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_erf_grad(float z) {
  return 0.5f * (1.f + erff(z * 0.70710678118654752f)) + z * (0.39894228040143268f * expf(-0.5f * z * z));
}

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

// The same with the row held in registers: lane l loads vectors l, l + 32, ... of VEC elements
// (16 bytes each: 8 bf16 or 4 f32), NV of them, so the row is read once and written once with
// full-width coalesced accesses. cols = NV · 32 · VEC.
template <typename T> struct Vec16;
template <> struct Vec16<float> { static constexpr int N = 4; };
template <> struct Vec16<__nv_bfloat16> { static constexpr int N = 8; };

// The row `x` (NV · 32 · VEC elements) of one warp into its lanes' registers `v` as
// exp(x · scale + bias − max): lane l loads 16-byte vectors l, l + 32, ...; returns 1 / the
// row's sum. Shared by the inference softmax and the training probabilities below.
template <typename T, int NV>
__device__ __forceinline__ float softmax_row_regs(const T* x, const float* bias, int lane, float scale,
                                                  float (&v)[NV * Vec16<T>::N]) {
  constexpr int VEC = Vec16<T>::N;
  float m = -INFINITY;
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int base = (n * 32 + lane) * VEC;
    uint4 raw = *reinterpret_cast<const uint4*>(x + base);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float t = load(e, i) * scale + bias[base + i];
      v[n * VEC + i] = t;
      m = fmaxf(m, t);
    }
  }
  m = warp_max(m);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV * VEC; ++i) {
    v[i] = expf(v[i] - m);
    s += v[i];
  }
  return 1.f / warp_sum(s);
}

template <typename T, int NV>
__device__ void attention_softmax_regs(T* scores, const float* key_bias, long rows, long rows_per_item, float scale) {
  constexpr int VEC = Vec16<T>::N;
  constexpr int COLS = NV * 32 * VEC;
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  T* x = scores + row * COLS;
  const float* bias = key_bias + (row / rows_per_item) * COLS;
  float v[NV * VEC];
  const float inv = softmax_row_regs<T, NV>(x, bias, lane, scale, v);
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int base = (n * 32 + lane) * VEC;
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) store(e, i, v[n * VEC + i] * inv);
    *reinterpret_cast<uint4*>(x + base) = raw;
  }
}

#define SOFTMAX_REGS(NAME, T)                                                                               \
  extern "C" __global__ void NAME(T* scores, const float* key_bias, long rows, long rows_per_item, int cols, \
                                  float scale) {                                                            \
    switch (cols / (32 * Vec16<T>::N)) {                                                                    \
      case 1: attention_softmax_regs<T, 1>(scores, key_bias, rows, rows_per_item, scale); break;          \
      case 2: attention_softmax_regs<T, 2>(scores, key_bias, rows, rows_per_item, scale); break;          \
      case 3: attention_softmax_regs<T, 3>(scores, key_bias, rows, rows_per_item, scale); break;          \
      case 4: attention_softmax_regs<T, 4>(scores, key_bias, rows, rows_per_item, scale); break;          \
    }                                                                                                       \
  }
SOFTMAX_REGS(attention_softmax_regs_f32, float)
SOFTMAX_REGS(attention_softmax_regs_bf16, __nv_bfloat16)

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

// out[row, :] = LayerNorm(x[row, :] + bias + residual[row, :]) · gamma + beta into a new f32
// tensor, for a bf16 product x and an f32 residual stream (what PyTorch's autocast keeps: its
// LayerNorm outputs f32).
extern "C" __global__ void residual_layer_norm_bf16_f32(const __nv_bfloat16* x, const float* residual,
                                                        const float* params, float* out, long rows, int cols,
                                                        float eps) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* xr = x + row * cols;
  const float* rr = residual + row * cols;
  float* o = out + row * cols;
  const float* bias = params;
  const float* gamma = params + cols;
  const float* beta = params + 2 * cols;
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += load(xr, j) + bias[j] + rr[j];
  const float mean = warp_sum(s) / cols;
  float q = 0.f;
  for (int j = lane; j < cols; j += 32) {
    const float d = load(xr, j) + bias[j] + rr[j] - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(warp_sum(q) / cols + eps);
  for (int j = lane; j < cols; j += 32) o[j] = (load(xr, j) + bias[j] + rr[j] - mean) * rstd * gamma[j] + beta[j];
}

// Four consecutive elements as floats (16-byte f32 or 8-byte bf16 loads), and back.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const float2 lo = __bfloat1622float2(h[0]), hi = __bfloat1622float2(h[1]);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store4(__nv_bfloat16* p, float4 v) {
  uint2 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
  h[0] = __floats2bfloat162_rn(v.x, v.y);
  h[1] = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(p) = raw;
}

// ---- Rows in registers (cols = NV · 128) ----
// Lane l of a row's warp holds the 4-element groups l, l + 32, ... of the row (NV of them), so
// each input is read once with 8- or 16-byte loads and each output written once. The helpers
// below are the LayerNorm kernels' shared steps.

// v = (x + bias) · f + residual for the lane's groups of one row (f: the dropout factors of
// elements first + column, with DROPOUT; else v = x + bias + residual); returns the lane's sum.
template <bool DROPOUT, typename X, typename R, int NV>
__device__ __forceinline__ float residual_sum_regs(const X* x, const R* residual, const float* bias, int lane,
                                                   unsigned long long first, unsigned long long seed,
                                                   unsigned int threshold, float keep_scale, float (&v)[NV * 4]) {
  float s = 0.f;
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int c = (n * 32 + lane) * 4;
    const float4 a = load4(x + c), b = load4(bias + c), r = load4(residual + c);
    const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w}, rv[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float biased = av[i] + bv[i];
      v[n * 4 + i] = (DROPOUT ? biased * dropout_factor(seed, first + c + i, threshold, keep_scale) : biased) + rv[i];
      s += v[n * 4 + i];
    }
  }
  return s;
}

// The row's mean and 1 / sqrt(variance + eps) (biased variance, two passes over the registers)
// from the lanes' values and sums.
template <int NV>
__device__ __forceinline__ float2 row_stats_regs(const float (&v)[NV * 4], float lane_sum, float eps) {
  constexpr int COLS = NV * 128;
  const float mean = warp_sum(lane_sum) / COLS;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < NV * 4; ++i) q += (v[i] - mean) * (v[i] - mean);
  return make_float2(mean, rsqrtf(warp_sum(q) / COLS + eps));
}

// out = (v − mean) · rstd · gamma + beta for the lane's groups of one row (out: the row's
// start), and the same values in bf16 into twin unless it is null.
template <typename O, int NV>
__device__ __forceinline__ void store_normed_regs(O* out, __nv_bfloat16* twin, const float* gamma, const float* beta,
                                                  int lane, const float (&v)[NV * 4], float2 stats) {
  const float mean = stats.x, rstd = stats.y;
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int c = (n * 32 + lane) * 4;
    const float4 g = load4(gamma + c), b = load4(beta + c);
    const float4 y = make_float4((v[n * 4 + 0] - mean) * rstd * g.x + b.x, (v[n * 4 + 1] - mean) * rstd * g.y + b.y,
                                 (v[n * 4 + 2] - mean) * rstd * g.z + b.z, (v[n * 4 + 3] - mean) * rstd * g.w + b.w);
    store4(out + c, y);
    if (twin != nullptr) store4(twin + c, y);
  }
}

// residual_layer_norm with the row in registers (the kernels above read the row three times,
// an element per load). out may be x (in place: each lane writes only what it read). twin,
// unless null: the output again in bf16 (for the next product's input, which would otherwise
// be a cast of out: one more read of it).
// With DROPOUT (training's forward, residual_norm_train_regs): the biased product times the
// dropout factors of elements row · cols + column before the residual is added.
template <typename X, typename R, typename O, int NV, bool DROPOUT = false>
__device__ void residual_layer_norm_regs(const X* x, const R* residual, const float* params, O* out, long rows,
                                         float eps, __nv_bfloat16* twin = nullptr, unsigned long long seed = 0,
                                         unsigned int threshold = 0, float keep_scale = 1.f) {
  constexpr int COLS = NV * 128;
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const long first = row * COLS;
  float v[NV * 4];
  const float s = residual_sum_regs<DROPOUT, X, R, NV>(x + first, residual + first, params, lane, first, seed,
                                                       threshold, keep_scale, v);
  const float2 stats = row_stats_regs<NV>(v, s, eps);
  store_normed_regs<O, NV>(out + first, twin ? twin + first : nullptr, params + COLS, params + 2 * COLS, lane, v, stats);
}

// The register kernels by row length: cols / 128 = 1 to 8 (up to 1,024 features).
#define NORM_REGS_CASES(X, R, O, OUT, TWIN)                                                               \
  switch (cols / 128) {                                                                                 \
    case 1: residual_layer_norm_regs<X, R, O, 1>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 2: residual_layer_norm_regs<X, R, O, 2>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 3: residual_layer_norm_regs<X, R, O, 3>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 4: residual_layer_norm_regs<X, R, O, 4>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 5: residual_layer_norm_regs<X, R, O, 5>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 6: residual_layer_norm_regs<X, R, O, 6>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 7: residual_layer_norm_regs<X, R, O, 7>(x, residual, params, OUT, rows, eps, TWIN); break;    \
    case 8: residual_layer_norm_regs<X, R, O, 8>(x, residual, params, OUT, rows, eps, TWIN); break;    \
  }

extern "C" __global__ void residual_layer_norm_regs_f32(float* x, const float* residual, const float* params,
                                                        long rows, int cols, float eps) {
  NORM_REGS_CASES(float, float, float, x, nullptr)
}
extern "C" __global__ void residual_layer_norm_regs_bf16(__nv_bfloat16* x, const __nv_bfloat16* residual,
                                                         const float* params, long rows, int cols, float eps) {
  NORM_REGS_CASES(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, x, nullptr)
}
// A bf16 product and the f32 residual stream, the output written twice: f32 (the residual stream)
// and bf16 (the next product's input).
extern "C" __global__ void residual_layer_norm_regs_bf16_f32_twin(const __nv_bfloat16* x, const float* residual,
                                                                  const float* params, float* out,
                                                                  __nv_bfloat16* twin, long rows, int cols,
                                                                  float eps) {
  NORM_REGS_CASES(__nv_bfloat16, float, float, out, twin)
}

// The embeddings of inference in one kernel: out[row, :] = LayerNorm(word[ids[row]] +
// position[positions[row]] (+ types[type_ids[row]] when has_types)) · gamma + beta, f32 tables
// (the sum in that order, as the composition adds them); a warp per row with the row in
// registers (cols = NV · 128), twin (unless null) the output again in bf16 for the first
// product. Ids are checked against the tables before (Encoder::validate_and_position).
template <int NV>
__device__ void embedding_layer_norm_regs(const float* word, const float* position, const float* types,
                                          const unsigned int* ids, const unsigned int* positions,
                                          const unsigned int* type_ids, int has_types, const float* gamma,
                                          const float* beta, float* out, __nv_bfloat16* twin, long rows, float eps) {
  constexpr int COLS = NV * 128;
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const float* w = word + (long)ids[row] * COLS;
  const float* p = position + (long)positions[row] * COLS;
  const float* t = types + (long)(has_types ? type_ids[row] : 0) * COLS;
  float v[NV * 4];
  float s = 0.f;
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int c = (n * 32 + lane) * 4;
    const float4 a = load4(w + c), b = load4(p + c);
    float4 e = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    if (has_types) {
      const float4 k = load4(t + c);
      e = make_float4(e.x + k.x, e.y + k.y, e.z + k.z, e.w + k.w);
    }
    v[n * 4 + 0] = e.x;
    v[n * 4 + 1] = e.y;
    v[n * 4 + 2] = e.z;
    v[n * 4 + 3] = e.w;
    s += e.x + e.y + e.z + e.w;
  }
  const float2 stats = row_stats_regs<NV>(v, s, eps);
  store_normed_regs<float, NV>(out + row * COLS, twin ? twin + row * COLS : nullptr, gamma, beta, lane, v, stats);
}

#define EMBEDDING_NORM_CASES(TWIN)                                                                           \
  switch (cols / 128) {                                                                                     \
    case 1: embedding_layer_norm_regs<1>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 2: embedding_layer_norm_regs<2>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 3: embedding_layer_norm_regs<3>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 4: embedding_layer_norm_regs<4>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 5: embedding_layer_norm_regs<5>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 6: embedding_layer_norm_regs<6>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 7: embedding_layer_norm_regs<7>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
    case 8: embedding_layer_norm_regs<8>(EMBEDDING_NORM_ARGS, TWIN, rows, eps); break;                     \
  }
#define EMBEDDING_NORM_ARGS word, position, types, ids, positions, type_ids, has_types, gamma, beta, out
// types: any valid pointer when has_types is 0 (not read).
extern "C" __global__ void embedding_layer_norm_regs_f32(const float* word, const float* position, const float* types,
                                                         const unsigned int* ids, const unsigned int* positions,
                                                         const unsigned int* type_ids, int has_types,
                                                         const float* gamma, const float* beta, float* out, long rows,
                                                         int cols, float eps) {
  EMBEDDING_NORM_CASES(nullptr)
}
extern "C" __global__ void embedding_layer_norm_regs_twin_f32(
    const float* word, const float* position, const float* types, const unsigned int* ids,
    const unsigned int* positions, const unsigned int* type_ids, int has_types, const float* gamma, const float* beta,
    float* out, __nv_bfloat16* twin, long rows, int cols, float eps) {
  EMBEDDING_NORM_CASES(twin)
}
#undef EMBEDDING_NORM_ARGS

// A dense layer's bias: out = x + bias (gelu = 0) or gelu_erf(x + bias) (gelu = 1) over
// x, out [n / cols, cols] (out may be x: in place, as inference runs it; out of place in
// training), bias [cols] f32.
template <typename T>
__device__ void bias_activation(const T* x, const float* bias, T* out, long n, int cols, int gelu) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    const float v = load(x, i) + bias[i % cols];
    store(out, i, gelu ? gelu_erf(v) : v);
  }
}

// The same over 16-byte vectors (cols a multiple of VEC, x and out 16-byte aligned): one column
// computation per vector instead of a 64-bit remainder per element, full-width loads and stores.
template <typename T>
__device__ void bias_activation_vec(const T* x, const float* bias, T* out, long n, int cols, int gelu) {
  constexpr int VEC = Vec16<T>::N;
  for (long v = (long)blockIdx.x * blockDim.x + threadIdx.x; v < n / VEC; v += (long)gridDim.x * blockDim.x) {
    const int col = (int)((v * VEC) % cols);
    const uint4 raw = *reinterpret_cast<const uint4*>(x + v * VEC);
    const T* e = reinterpret_cast<const T*>(&raw);
    uint4 res;
    T* r = reinterpret_cast<T*>(&res);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float z = load(e, j) + bias[col + j];
      store(r, j, gelu ? gelu_erf(z) : z);
    }
    *reinterpret_cast<uint4*>(out + v * VEC) = res;
  }
}

extern "C" __global__ void bias_activation_vec_f32(float* x, const float* bias, long n, int cols, int gelu) {
  bias_activation_vec(x, bias, x, n, cols, gelu);
}

extern "C" __global__ void bias_activation_vec_bf16(__nv_bfloat16* x, const float* bias, long n, int cols, int gelu) {
  bias_activation_vec(x, bias, x, n, cols, gelu);
}

extern "C" __global__ void bias_activation_f32(float* x, const float* bias, long n, int cols, int gelu) {
  bias_activation(x, bias, x, n, cols, gelu);
}

extern "C" __global__ void bias_activation_bf16(__nv_bfloat16* x, const float* bias, long n, int cols, int gelu) {
  bias_activation(x, bias, x, n, cols, gelu);
}

// ---- Attention layout and f32 scores (bf16 inference) ----

// q, k and v of every head from one fused projection: x [batch · seq, 3 · hidden] (the product of
// the concatenated query, key and value weights, without bias), bias [3 · hidden] f32 →
// out [3, batch, heads, seq, head_size] (q, k, v, each head's rows contiguous). One thread per
// 16-byte vector of the output (head_size is a multiple of the vector's VEC elements).
template <typename T>
__device__ void split_qkv(const T* x, const float* bias, T* out, long batch, int seq, int heads, int head_size) {
  constexpr int VEC = Vec16<T>::N;
  const int hidden = heads * head_size;
  const int vecs_per_head = head_size / VEC;
  const long total = 3L * batch * heads * seq * vecs_per_head;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long t = i;
    const int dv = t % vecs_per_head; t /= vecs_per_head;
    const int ss = t % seq; t /= seq;
    const int hh = t % heads; t /= heads;
    const long bb = t % batch;
    const int which = t / batch;
    const int col = which * hidden + hh * head_size + dv * VEC;
    const uint4 raw = *reinterpret_cast<const uint4*>(x + (bb * seq + ss) * 3L * hidden + col);
    const T* e = reinterpret_cast<const T*>(&raw);
    uint4 res;
    T* r = reinterpret_cast<T*>(&res);
#pragma unroll
    for (int j = 0; j < VEC; ++j) store(r, j, load(e, j) + bias[col + j]);
    *reinterpret_cast<uint4*>(out + i * VEC) = res;
  }
}

extern "C" __global__ void split_qkv_f32(const float* x, const float* bias, float* out, long batch, int seq, int heads,
                                         int head_size) {
  split_qkv(x, bias, out, batch, seq, heads, head_size);
}

extern "C" __global__ void split_qkv_bf16(const __nv_bfloat16* x, const float* bias, __nv_bfloat16* out, long batch,
                                          int seq, int heads, int head_size) {
  split_qkv(x, bias, out, batch, seq, heads, head_size);
}

// context [batch, heads, seq, head_size] → [batch, seq, heads · head_size]; one thread per
// 16-byte vector.
template <typename T>
__device__ void merge_heads(const T* x, T* out, long batch, int seq, int heads, int head_size) {
  constexpr int VEC = Vec16<T>::N;
  const int vecs_per_head = head_size / VEC;
  const long total = batch * heads * seq * vecs_per_head;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long t = i;
    const int dv = t % vecs_per_head; t /= vecs_per_head;
    const int hh = t % heads; t /= heads;
    const int ss = t % seq; t /= seq;
    const long bb = t;
    const long src = ((bb * heads + hh) * seq + ss) * head_size + dv * VEC;
    *reinterpret_cast<uint4*>(out + i * VEC) = *reinterpret_cast<const uint4*>(x + src);
  }
}

extern "C" __global__ void merge_heads_f32(const float* x, float* out, long batch, int seq, int heads, int head_size) {
  merge_heads(x, out, batch, seq, heads, head_size);
}

extern "C" __global__ void merge_heads_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, long batch, int seq, int heads,
                                            int head_size) {
  merge_heads(x, out, batch, seq, heads, head_size);
}


// ---- A benchmark's head start ----
// One thread that keeps the GPU busy for `ns` nanoseconds of its global timer, so that the host
// queues a whole step behind it: the step then runs with its work all queued, and its GPU time
// (CUDA events around it) is the GPU's own, with no wait for the host (bench --workload train).
// Left out of the CPU emulation (tests/emulated): it reads the GPU's clock.
#ifndef LONGREAD_KERNEL_EMULATION
extern "C" __global__ void hold_gpu(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(100000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
#endif

// ---- Training ----


template <typename T>
__device__ void dropout_mask(T* out, long n, unsigned long long seed, unsigned int threshold, float scale) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    store(out, i, dropout_factor(seed, (unsigned long long)i, threshold, scale));
}

extern "C" __global__ void dropout_mask_f32(float* out, long n, unsigned long long seed, unsigned int threshold,
                                            float scale) {
  dropout_mask(out, n, seed, threshold, scale);
}
extern "C" __global__ void dropout_mask_bf16(__nv_bfloat16* out, long n, unsigned long long seed,
                                             unsigned int threshold, float scale) {
  dropout_mask(out, n, seed, threshold, scale);
}

// One AdamW update of an f32 parameter in place, torch's formula (optim/adamw.rs's CPU loop):
// g = grad · grad_scale; p ·= decay; m += (1 - β1)(g - m); v = v·β2 + (1 - β2)g²;
// p -= step_size · m / (sqrt(v) / bias2_sqrt + eps). moments: [2, n] (m, then v), updated too.
// Plain IEEE sqrt and division (no fast-math), no FMA contraction: the CPU's numbers.
__device__ __forceinline__ void adamw_element(float* p, const float* grad, float* moments, long n, long i,
                                              float grad_scale, float decay, float one_minus_beta1, float beta2,
                                              float one_minus_beta2, float bias2_sqrt, float eps, float step_size) {
  const float g = __fmul_rn(grad[i], grad_scale);
  float pi = __fmul_rn(p[i], decay);
  float m = __fadd_rn(moments[i], __fmul_rn(one_minus_beta1, __fsub_rn(g, moments[i])));
  float v = __fadd_rn(__fmul_rn(moments[n + i], beta2), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bias2_sqrt), eps);
  pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step_size, m), denom));
  p[i] = pi;
  moments[i] = m;
  moments[n + i] = v;
}

extern "C" __global__ void adamw_step_f32(float* p, const float* grad, float* moments, long n, float grad_scale,
                                          float decay, float one_minus_beta1, float beta2, float one_minus_beta2,
                                          float bias2_sqrt, float eps, float step_size) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    adamw_element(p, grad, moments, n, i, grad_scale, decay, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps,
                  step_size);
}

// adamw_step_f32 over many parameters in one launch, one span of a parameter per block:
// spans[7 s ..] = {p, grad, moments (addresses), n (the parameter's size: v is moments[n + i]),
// start, len (the span's elements), c (its coefficients: coefs[8 c ..] = grad_scale, decay,
// 1 - β1, β2, 1 - β2, sqrt(1 - β2^step), ε, step size)}. The same arithmetic per element: the
// same bits as a launch per parameter.
extern "C" __global__ void adamw_tiles_f32(const unsigned long long* spans, const float* coefs) {
  const unsigned long long* s = spans + 7 * (long)blockIdx.x;
  float* p = reinterpret_cast<float*>(s[0]);
  const float* grad = reinterpret_cast<const float*>(s[1]);
  float* moments = reinterpret_cast<float*>(s[2]);
  const long n = (long)s[3], start = (long)s[4], len = (long)s[5];
  const float* c = coefs + 8 * (long)s[6];
  for (long j = threadIdx.x; j < len; j += blockDim.x)
    adamw_element(p, grad, moments, n, start + j, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
}

// Attention probabilities in training, forward: out[row, j] = softmax(scores[row, :] · scale +
// key_bias[item, :])[j] · dropout factor of element row · cols + j (the CPU's mask; threshold 0
// and keep_scale 1: no dropout). One warp per row; f32 arithmetic. scores and out: [rows, cols]
// (rows = batch · heads · queries, rows_per_item = heads · queries), key_bias: [batch, cols] f32.
template <typename T>
__device__ void attention_probs_train(const T* scores, const float* key_bias, T* out, long rows,
                                      long rows_per_item, int cols, float scale, unsigned long long seed,
                                      unsigned int threshold, float keep_scale) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* x = scores + row * cols;
  const float* bias = key_bias + (row / rows_per_item) * cols;
  float m = -INFINITY;
  for (int j = lane; j < cols; j += 32) m = fmaxf(m, load(x, j) * scale + bias[j]);
  m = warp_max(m);
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += expf(load(x, j) * scale + bias[j] - m);
  const float inv = 1.f / warp_sum(s);
  const unsigned long long first = (unsigned long long)row * cols;
  for (int j = lane; j < cols; j += 32) {
    const float p = expf(load(x, j) * scale + bias[j] - m) * inv;
    store(out + row * cols, j, p * dropout_factor(seed, first + j, threshold, keep_scale));
  }
}

// Backward of attention_probs_train: with p = softmax (recomputed from the scores) and f the
// dropout factors, grad_scores[j] = scale · p_j · (dy_j f_j − Σ_k dy_k f_k p_k).
template <typename T>
__device__ void attention_probs_train_grad(const T* scores, const float* key_bias, const T* dy, T* dx, long rows,
                                           long rows_per_item, int cols, float scale, unsigned long long seed,
                                           unsigned int threshold, float keep_scale) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* x = scores + row * cols;
  const T* g = dy + row * cols;
  const float* bias = key_bias + (row / rows_per_item) * cols;
  float m = -INFINITY;
  for (int j = lane; j < cols; j += 32) m = fmaxf(m, load(x, j) * scale + bias[j]);
  m = warp_max(m);
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += expf(load(x, j) * scale + bias[j] - m);
  const float inv = 1.f / warp_sum(s);
  const unsigned long long first = (unsigned long long)row * cols;
  float dot = 0.f;
  for (int j = lane; j < cols; j += 32) {
    const float p = expf(load(x, j) * scale + bias[j] - m) * inv;
    dot += load(g, j) * dropout_factor(seed, first + j, threshold, keep_scale) * p;
  }
  dot = warp_sum(dot);
  for (int j = lane; j < cols; j += 32) {
    const float p = expf(load(x, j) * scale + bias[j] - m) * inv;
    const float dp = load(g, j) * dropout_factor(seed, first + j, threshold, keep_scale);
    store(dx + row * cols, j, scale * p * (dp - dot));
  }
}

// The same two kernels with the row held in registers (as attention_softmax_regs): lane l
// loads 16-byte vectors l, l + 32, ... of VEC elements, NV of them, so scores (and gradients)
// are read once and the output written once. cols = NV · 32 · VEC; the same arithmetic.
template <typename T, int NV>
__device__ void attention_probs_train_regs(const T* scores, const float* key_bias, const T* dy, T* out, long rows,
                                           long rows_per_item, float scale, unsigned long long seed,
                                           unsigned int threshold, float keep_scale) {
  constexpr int VEC = Vec16<T>::N;
  constexpr int COLS = NV * 32 * VEC;
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* x = scores + row * COLS;
  const float* bias = key_bias + (row / rows_per_item) * COLS;
  const unsigned long long first = (unsigned long long)row * COLS;
  float v[NV * VEC];
  const float inv = softmax_row_regs<T, NV>(x, bias, lane, scale, v);
  if (dy == nullptr) {
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int base = (n * 32 + lane) * VEC;
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        store(e, i, v[n * VEC + i] * inv * dropout_factor(seed, first + base + i, threshold, keep_scale));
      *reinterpret_cast<uint4*>(out + row * COLS + base) = raw;
    }
    return;
  }
  // Backward: g = dy · dropout factor, grad = scale · p · (g − Σ g·p).
  float g[NV * VEC];
  float dot = 0.f;
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int base = (n * 32 + lane) * VEC;
    uint4 raw = *reinterpret_cast<const uint4*>(dy + row * COLS + base);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      v[n * VEC + i] *= inv;
      g[n * VEC + i] = load(e, i) * dropout_factor(seed, first + base + i, threshold, keep_scale);
      dot += g[n * VEC + i] * v[n * VEC + i];
    }
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int base = (n * 32 + lane) * VEC;
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) store(e, i, scale * v[n * VEC + i] * (g[n * VEC + i] - dot));
    *reinterpret_cast<uint4*>(out + row * COLS + base) = raw;
  }
}

#define PROBS_TRAIN_REGS_CASES(T, DY)                                                                          \
  switch (cols / (32 * Vec16<T>::N)) {                                                                         \
    case 1: attention_probs_train_regs<T, 1>(scores, key_bias, DY, out, rows, rows_per_item, scale, seed,      \
                                             threshold, keep_scale); break;                                    \
    case 2: attention_probs_train_regs<T, 2>(scores, key_bias, DY, out, rows, rows_per_item, scale, seed,      \
                                             threshold, keep_scale); break;                                    \
    case 3: attention_probs_train_regs<T, 3>(scores, key_bias, DY, out, rows, rows_per_item, scale, seed,      \
                                             threshold, keep_scale); break;                                    \
    case 4: attention_probs_train_regs<T, 4>(scores, key_bias, DY, out, rows, rows_per_item, scale, seed,      \
                                             threshold, keep_scale); break;                                    \
  }

#define ATTENTION_PROBS_TRAIN_REGS(SUFFIX, T)                                                                   \
  extern "C" __global__ void attention_probs_train_regs_##SUFFIX(                                               \
      const T* scores, const float* key_bias, T* out, long rows, long rows_per_item, int cols, float scale,     \
      unsigned long long seed, unsigned int threshold, float keep_scale) {                                      \
    PROBS_TRAIN_REGS_CASES(T, (const T*)nullptr)                                                                \
  }                                                                                                             \
  extern "C" __global__ void attention_probs_train_grad_regs_##SUFFIX(                                          \
      const T* scores, const float* key_bias, const T* dy, T* out, long rows, long rows_per_item, int cols,     \
      float scale, unsigned long long seed, unsigned int threshold, float keep_scale) {                         \
    PROBS_TRAIN_REGS_CASES(T, dy)                                                                               \
  }
ATTENTION_PROBS_TRAIN_REGS(f32, float)
ATTENTION_PROBS_TRAIN_REGS(bf16, __nv_bfloat16)

#define ATTENTION_PROBS_TRAIN(SUFFIX, T)                                                                         \
  extern "C" __global__ void attention_probs_train_##SUFFIX(const T* scores, const float* key_bias, T* out,     \
                                                            long rows, long rows_per_item, int cols, float scale, \
                                                            unsigned long long seed, unsigned int threshold,     \
                                                            float keep_scale) {                                  \
    attention_probs_train(scores, key_bias, out, rows, rows_per_item, cols, scale, seed, threshold, keep_scale); \
  }                                                                                                              \
  extern "C" __global__ void attention_probs_train_grad_##SUFFIX(                                                \
      const T* scores, const float* key_bias, const T* dy, T* dx, long rows, long rows_per_item, int cols,      \
      float scale, unsigned long long seed, unsigned int threshold, float keep_scale) {                          \
    attention_probs_train_grad(scores, key_bias, dy, dx, rows, rows_per_item, cols, scale, seed, threshold,     \
                               keep_scale);                                                                      \
  }
ATTENTION_PROBS_TRAIN(f32, float)
ATTENTION_PROBS_TRAIN(bf16, __nv_bfloat16)

// LayerNorm in training (f32), forward: y = (x − mean) / sqrt(var + eps) · gamma + beta per row
// (biased variance, two passes over the row, as torch.nn.LayerNorm). One warp per row.
extern "C" __global__ void layer_norm_train_f32(const float* x, const float* gamma, const float* beta, float* y,
                                                long rows, int cols, float eps) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + row * cols;
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += xr[j];
  const float mean = warp_sum(s) / cols;
  float v = 0.f;
  for (int j = lane; j < cols; j += 32) v += (xr[j] - mean) * (xr[j] - mean);
  const float rstd = rsqrtf(warp_sum(v) / cols + eps);
  for (int j = lane; j < cols; j += 32) y[row * cols + j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
}

// Its backward: with x̂ = (x − mean)·rstd and g = dy·gamma, dx = rstd · (g − mean(g) − x̂ · mean(g·x̂)).
// out: [2, rows, cols]: dx, then x̂ (for gamma's gradient Σ_rows dy·x̂, summed by the caller).
extern "C" __global__ void layer_norm_train_grad_f32(const float* x, const float* gamma, const float* dy, float* out,
                                                     long rows, int cols, float eps) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + row * cols;
  const float* gr = dy + row * cols;
  float s = 0.f;
  for (int j = lane; j < cols; j += 32) s += xr[j];
  const float mean = warp_sum(s) / cols;
  float v = 0.f;
  for (int j = lane; j < cols; j += 32) v += (xr[j] - mean) * (xr[j] - mean);
  const float rstd = rsqrtf(warp_sum(v) / cols + eps);
  float a = 0.f, b = 0.f;
  for (int j = lane; j < cols; j += 32) {
    const float xh = (xr[j] - mean) * rstd;
    const float g = gr[j] * gamma[j];
    a += g;
    b += g * xh;
  }
  a = warp_sum(a) / cols;
  b = warp_sum(b) / cols;
  float* dx = out + row * cols;
  float* xhat = out + rows * cols + row * cols;
  for (int j = lane; j < cols; j += 32) {
    const float xh = (xr[j] - mean) * rstd;
    dx[j] = rstd * (gr[j] * gamma[j] - a - xh * b);
    xhat[j] = xh;
  }
}

// The end of a transformer block in training, out of place: out[row, :] = LayerNorm(s) · gamma +
// beta with s = (x[row, :] + bias) · dropout factor + residual[row, :] (the factor of element
// row · cols + j: the CPU's mask; threshold 0 and keep_scale 1: no dropout), params = [bias,
// gamma, beta] ([3, cols], f32); f32 arithmetic, biased variance. One warp per row. The backward
// pass recomputes s and runs layer_norm_train_grad_f32 on it.
template <typename T>
__device__ void residual_norm_train(const T* x, const T* residual, const float* params, T* out, long rows, int cols,
                                    float eps, unsigned long long seed, unsigned int threshold, float keep_scale) {
  const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* xr = x + row * cols;
  const T* rr = residual + row * cols;
  const float* bias = params;
  const float* gamma = params + cols;
  const float* beta = params + 2 * cols;
  const unsigned long long first = (unsigned long long)row * cols;
  float s = 0.f;
  for (int j = lane; j < cols; j += 32)
    s += (load(xr, j) + bias[j]) * dropout_factor(seed, first + j, threshold, keep_scale) + load(rr, j);
  const float mean = warp_sum(s) / cols;
  float q = 0.f;
  for (int j = lane; j < cols; j += 32) {
    const float d = (load(xr, j) + bias[j]) * dropout_factor(seed, first + j, threshold, keep_scale) + load(rr, j) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(warp_sum(q) / cols + eps);
  for (int j = lane; j < cols; j += 32) {
    const float v = (load(xr, j) + bias[j]) * dropout_factor(seed, first + j, threshold, keep_scale) + load(rr, j);
    store(out + row * cols, j, (v - mean) * rstd * gamma[j] + beta[j]);
  }
}

extern "C" __global__ void residual_norm_train_f32(const float* x, const float* residual, const float* params,
                                                   float* out, long rows, int cols, float eps,
                                                   unsigned long long seed, unsigned int threshold, float keep_scale) {
  residual_norm_train(x, residual, params, out, rows, cols, eps, seed, threshold, keep_scale);
}
extern "C" __global__ void residual_norm_train_bf16(const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                                    const float* params, __nv_bfloat16* out, long rows, int cols,
                                                    float eps, unsigned long long seed, unsigned int threshold,
                                                    float keep_scale) {
  residual_norm_train(x, residual, params, out, rows, cols, eps, seed, threshold, keep_scale);
}

// The backward pass of residual_norm_train as one kernel (the composition before: casts to f32,
// the sum recomputed, LayerNorm's gradient kernel, products and three column sums, masks: about
// 15 kernels). Per row, with s = (x + bias)·f + residual recomputed (f: the dropout factors),
// x̂ = (s − mean)·rstd and g = dy·γ:
//   d_residual = d_s = rstd · (g − mean(g) − x̂ · mean(g·x̂)),   d_x = d_s · f;
// and the parameters' gradients over the rows: [Σ d_x, Σ dy·x̂, Σ dy] ([3, cols]), each warp
// summing its rows (row warp, warp + warps, ...) in registers, the block's warps added in order
// in shared memory into partial[block] ([blocks, 3 · cols]; column_sum_finish adds the blocks
// in order: deterministic). Row in registers, cols = NV · 128.
// SHARED_SUMS: each lane's running sums of its columns live in a region of shared memory per
// warp (blocks of 4 warps, launch.rs), which only the owning lane reads and writes until the end,
// instead of in registers (72 floats a lane at 768 features: ~200 registers a thread, 2 blocks
// per multiprocessor); the same additions in the same order, so the same bits, in fewer
// registers.
template <typename T, int NV, bool SHARED_SUMS>
__device__ void residual_norm_train_grad_regs(const T* x, const T* residual, const float* params, const T* dy, T* dx,
                                              T* d_residual, float* partial, long rows, float eps,
                                              unsigned long long seed, unsigned int threshold, float keep_scale) {
  constexpr int COLS = NV * 128, SUMS = NV * 4;
  __align__(16) __shared__ float block_sums[(SHARED_SUMS ? 4 : 1) * 3 * COLS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, block_warps = blockDim.x / 32;
  const long warps = (long)gridDim.x * block_warps;
  // Running sums [Σ d_x, Σ dy·x̂, Σ dy] of the lane's columns — vector n holds columns
  // (n · 32 + lane) · 4 … + 3 — in registers, or in its warp's region (16-byte accesses: no bank
  // conflicts).
  float regs[SHARED_SUMS ? 1 : 3 * SUMS];
  float* own = block_sums + (SHARED_SUMS ? warp * 3 * COLS : 0);
  const auto add4 = [&](int which, int n, const float (&v)[4]) {
    if constexpr (SHARED_SUMS) {
      float4* at = reinterpret_cast<float4*>(own + which * COLS + (n * 32 + lane) * 4);
      float4 t = *at;
      t.x += v[0];
      t.y += v[1];
      t.z += v[2];
      t.w += v[3];
      *at = t;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) regs[which * SUMS + n * 4 + i] += v[i];
    }
  };
#pragma unroll
  for (int n = 0; n < NV; ++n) {
#pragma unroll
    for (int which = 0; which < 3; ++which) {
      if constexpr (SHARED_SUMS) {
        *reinterpret_cast<float4*>(own + which * COLS + (n * 32 + lane) * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) regs[which * SUMS + n * 4 + i] = 0.f;
      }
    }
  }
  for (long row = (long)blockIdx.x * block_warps + warp; row < rows; row += warps) {
    const long first = row * COLS;
    float xh[NV * 4], g[NV * 4];
    const float s = residual_sum_regs<true, T, T, NV>(x + first, residual + first, params, lane, first, seed,
                                                      threshold, keep_scale, xh);
    const float2 stats = row_stats_regs<NV>(xh, s, eps);
    const float mean = stats.x, rstd = stats.y;
    float g_mean = 0.f, gx_mean = 0.f;
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int c = (n * 32 + lane) * 4;
      const float4 d = load4(dy + first + c), gm = load4(params + COLS + c);
      const float dv[4] = {d.x, d.y, d.z, d.w}, gv[4] = {gm.x, gm.y, gm.z, gm.w};
      float dg[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = n * 4 + i;
        xh[k] = (xh[k] - mean) * rstd;
        g[k] = dv[i] * gv[i];
        g_mean += g[k];
        gx_mean += g[k] * xh[k];
        dg[i] = dv[i] * xh[k];
      }
      add4(1, n, dg);
      add4(2, n, dv);
    }
    g_mean = warp_sum(g_mean) / COLS;
    gx_mean = warp_sum(gx_mean) / COLS;
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int c = (n * 32 + lane) * 4;
      float ds[4], dxv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = n * 4 + i;
        ds[i] = rstd * (g[k] - g_mean - xh[k] * gx_mean);
        dxv[i] = ds[i] * dropout_factor(seed, first + c + i, threshold, keep_scale);
      }
      add4(0, n, dxv);
      store4(d_residual + first + c, make_float4(ds[0], ds[1], ds[2], ds[3]));
      store4(dx + first + c, make_float4(dxv[0], dxv[1], dxv[2], dxv[3]));
    }
  }
  if constexpr (SHARED_SUMS) {
    // Every warp's region complete: the warps added in order, from 0 (as below).
    __syncthreads();
    for (int j = threadIdx.x; j < 3 * COLS; j += blockDim.x) {
      float total = 0.f;
      for (int w = 0; w < block_warps; ++w) total = total + block_sums[w * 3 * COLS + j];
      partial[(long)blockIdx.x * 3 * COLS + j] = total;
    }
  } else {
    // The block's warps in order: warp 0 stores its sums, each next one adds its own.
    for (int w = 0; w < block_warps; ++w) {
      if (warp == w) {
#pragma unroll
        for (int k = 0; k < SUMS; ++k) {
#pragma unroll
          for (int which = 0; which < 3; ++which) {
            const int c = which * COLS + ((k / 4) * 32 + lane) * 4 + k % 4;
            block_sums[c] = (w == 0 ? 0.f : block_sums[c]) + regs[which * SUMS + k];
          }
        }
      }
      __syncthreads();
    }
    for (int j = threadIdx.x; j < 3 * COLS; j += blockDim.x) partial[(long)blockIdx.x * 3 * COLS + j] = block_sums[j];
  }
}

// residual_norm_train with the row in registers (residual_layer_norm_regs with dropout: inputs
// read once, the dropout factors computed once per element), and its backward pass: an entry
// point per row length (cols = NV · 128, NV = 1 to 8: up to 1,024 features), so that each has the
// registers and shared memory its length needs: residual_norm_train_regs<NV>_<dtype> and
// residual_norm_train_grad_regs<NV>_<dtype> (e.g. ..._regs6_bf16 for 768 features).
// The backward pass's entry point residual_norm_train_grad_<SUMS><NV>_<dtype>, SUMS regs or shared.
#define NORM_TRAIN_GRAD(SUMS, SHARED, SUFFIX, T, NV)                                                          \
  extern "C" __global__ void residual_norm_train_grad_##SUMS##NV##_##SUFFIX(                                  \
      const T* x, const T* residual, const float* params, const T* dy, T* dx, T* d_residual, float* partial,     \
      long rows, float eps, unsigned long long seed, unsigned int threshold, float keep_scale) {                \
    residual_norm_train_grad_regs<T, NV, SHARED>(x, residual, params, dy, dx, d_residual, partial, rows, eps,   \
                                                 seed, threshold, keep_scale);                                 \
  }
#define NORM_TRAIN_REGS(SUFFIX, T, NV)                                                                        \
  extern "C" __global__ void residual_norm_train_regs##NV##_##SUFFIX(                                          \
      const T* x, const T* residual, const float* params, T* out, long rows, float eps, unsigned long long seed, \
      unsigned int threshold, float keep_scale) {                                                              \
    residual_layer_norm_regs<T, T, T, NV, true>(x, residual, params, out, rows, eps, nullptr, seed, threshold,   \
                                                keep_scale);                                                   \
  }                                                                                                            \
  NORM_TRAIN_GRAD(regs, false, SUFFIX, T, NV)                                                                  \
  NORM_TRAIN_GRAD(shared, true, SUFFIX, T, NV)
#define NORM_TRAIN_REGS_ALL(NV) NORM_TRAIN_REGS(f32, float, NV) NORM_TRAIN_REGS(bf16, __nv_bfloat16, NV)
NORM_TRAIN_REGS_ALL(1)
NORM_TRAIN_REGS_ALL(2)
NORM_TRAIN_REGS_ALL(3)
NORM_TRAIN_REGS_ALL(4)
NORM_TRAIN_REGS_ALL(5)
NORM_TRAIN_REGS_ALL(6)
NORM_TRAIN_REGS_ALL(7)
NORM_TRAIN_REGS_ALL(8)

// The GELU's backward: dz = dy · gelu'(x + bias), gelu'(z) = Φ(z) + z·φ(z).
template <typename T>
__device__ void bias_gelu_train_grad(const T* x, const float* bias, const T* dy, T* dz, long n, int cols) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    store(dz, i, load(dy, i) * gelu_erf_grad(load(x, i) + bias[i % cols]));
  }
}

// One 16-byte vector of the GELU's backward: dy · gelu'(x + bias), x and dy at a vector's start
// (16-byte aligned), bias the vector's columns' biases.
template <typename T>
__device__ __forceinline__ uint4 gelu_grad_vec16(const T* x, const float* bias, const T* dy) {
  constexpr int VEC = Vec16<T>::N;
  const uint4 raw_x = *reinterpret_cast<const uint4*>(x);
  const uint4 raw_g = *reinterpret_cast<const uint4*>(dy);
  const T* ex = reinterpret_cast<const T*>(&raw_x);
  const T* eg = reinterpret_cast<const T*>(&raw_g);
  uint4 res;
  T* r = reinterpret_cast<T*>(&res);
#pragma unroll
  for (int j = 0; j < VEC; ++j) store(r, j, load(eg, j) * gelu_erf_grad(load(ex, j) + bias[j]));
  return res;
}

// The GELU's backward over 16-byte vectors (as bias_activation_vec; every tensor 16-byte aligned).
template <typename T>
__device__ void bias_gelu_train_grad_vec(const T* x, const float* bias, const T* dy, T* dz, long n, int cols) {
  constexpr int VEC = Vec16<T>::N;
  for (long v = (long)blockIdx.x * blockDim.x + threadIdx.x; v < n / VEC; v += (long)gridDim.x * blockDim.x) {
    const int col = (int)((v * VEC) % cols);
    *reinterpret_cast<uint4*>(dz + v * VEC) = gelu_grad_vec16(x + v * VEC, bias + col, dy + v * VEC);
  }
}

// The GELU's backward and its bias's gradient in one pass: dz = dy · gelu'(x + bias) (as
// bias_gelu_train_grad_vec) and each column's sum of dz, as stored, over a split of the rows
// into partial[split] ([splits, cols]; column_sum_finish adds the splits in order:
// deterministic), where column_sum_partial read dz back. A thread owns one 16-byte vector of
// columns (cols a multiple of the vector, every tensor 16-byte aligned) and walks the rows of
// its split (blockIdx.y), consecutive threads on consecutive vectors of a row (coalesced).
template <typename T>
__device__ void bias_gelu_train_grad_sum(const T* x, const float* bias, const T* dy, T* dz, float* partial, long rows,
                                         int cols, long rows_per_split) {
  constexpr int VEC = Vec16<T>::N;
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (col >= cols) return;
  const long start = (long)blockIdx.y * rows_per_split;
  const long stop = min(rows, start + rows_per_split);
  float b[VEC], acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    b[j] = bias[col + j];
    acc[j] = 0.f;
  }
  for (long r = start; r < stop; ++r) {
    const long at = r * cols + col;
    const uint4 res = gelu_grad_vec16(x + at, b, dy + at);
    const T* out = reinterpret_cast<const T*>(&res);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] += load(out, j);
    *reinterpret_cast<uint4*>(dz + at) = res;
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) partial[(long)blockIdx.y * cols + col + j] = acc[j];
}

extern "C" __global__ void bias_gelu_train_grad_sum_f32(const float* x, const float* bias, const float* dy, float* dz,
                                                        float* partial, long rows, int cols, long rows_per_split) {
  bias_gelu_train_grad_sum(x, bias, dy, dz, partial, rows, cols, rows_per_split);
}
extern "C" __global__ void bias_gelu_train_grad_sum_bf16(const __nv_bfloat16* x, const float* bias,
                                                         const __nv_bfloat16* dy, __nv_bfloat16* dz, float* partial,
                                                         long rows, int cols, long rows_per_split) {
  bias_gelu_train_grad_sum(x, bias, dy, dz, partial, rows, cols, rows_per_split);
}

#define BIAS_TRAIN_VEC(SUFFIX, T)                                                                               \
  extern "C" __global__ void bias_activation_train_vec_##SUFFIX(const T* x, const float* bias, T* out, long n, \
                                                                int cols, int gelu) {                          \
    bias_activation_vec(x, bias, out, n, cols, gelu);                                                          \
  }                                                                                                             \
  extern "C" __global__ void bias_gelu_train_grad_vec_##SUFFIX(const T* x, const float* bias, const T* dy,     \
                                                               T* dz, long n, int cols) {                      \
    bias_gelu_train_grad_vec(x, bias, dy, dz, n, cols);                                                        \
  }
BIAS_TRAIN_VEC(f32, float)
BIAS_TRAIN_VEC(bf16, __nv_bfloat16)

#define BIAS_TRAIN(SUFFIX, T)                                                                                   \
  extern "C" __global__ void bias_activation_train_##SUFFIX(const T* x, const float* bias, T* out, long n,     \
                                                            int cols, int gelu) {                              \
    bias_activation(x, bias, out, n, cols, gelu);                                                              \
  }                                                                                                             \
  extern "C" __global__ void bias_gelu_train_grad_##SUFFIX(const T* x, const float* bias, const T* dy, T* dz,  \
                                                           long n, int cols) {                                 \
    bias_gelu_train_grad(x, bias, dy, dz, n, cols);                                                            \
  }
BIAS_TRAIN(f32, float)
BIAS_TRAIN(bf16, __nv_bfloat16)

// Column sums of a contiguous [rows, cols] matrix into f32 [cols] (the gradients of biases,
// LayerNorm's γ and β): candle's sum over dim 0 gives each column a block whose threads read
// `cols` elements apart, with a 64-bit strided-index computation per element. Here a thread
// owns a column and consecutive threads read consecutive columns of a row (coalesced), over a
// split of the rows; a second kernel adds the splits in order (deterministic: no atomics).
// partial: [splits, cols].
template <typename T>
__device__ void column_sum_partial(const T* x, float* partial, long rows, int cols, long rows_per_split) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const long start = (long)blockIdx.y * rows_per_split;
  const long stop = min(rows, start + rows_per_split);
  float acc = 0.f;
  for (long r = start; r < stop; r++) acc += load(x, r * cols + col);
  partial[(long)blockIdx.y * cols + col] = acc;
}

extern "C" __global__ void column_sum_partial_f32(const float* x, float* partial, long rows, int cols,
                                                  long rows_per_split) {
  column_sum_partial(x, partial, rows, cols, rows_per_split);
}
extern "C" __global__ void column_sum_partial_bf16(const __nv_bfloat16* x, float* partial, long rows, int cols,
                                                   long rows_per_split) {
  column_sum_partial(x, partial, rows, cols, rows_per_split);
}

// out[c] = Σ_s partial[s, c]: a block per 32 columns (lane = column: coalesced), its warps (up
// to 8) each summing every warps-th split in order, then warp 0 adding the warps' sums in order:
// deterministic, with a load in flight per warp and column where one thread walked all the
// splits (528 of them after the block end's backward on an H200, 9 blocks: tens of µs).
extern "C" __global__ void column_sum_finish(const float* partial, float* out, int splits, int cols) {
  __shared__ float warp_sums[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = min((int)(blockDim.x / 32), 8);
  const int col = blockIdx.x * 32 + lane;
  if (warp < warps) {
    float acc = 0.f;
    if (col < cols)
      for (int s = warp; s < splits; s += warps) acc += partial[(long)s * cols + col];
    warp_sums[warp][lane] = acc;
  }
  __syncthreads();
  if (warp == 0 && col < cols) {
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += warp_sums[w][lane];
    out[col] = total;
  }
}

// total[i] += grad[i] in f32, in place: a cast weight's bf16 gradient added into the f32 total of
// its master weight (the backward pass of the cast in a training step's second and later parts),
// the one rounding of the cast-then-add it replaces. One thread per element, grid-strided.
extern "C" __global__ void add_into_f32_bf16(float* total, const __nv_bfloat16* grad, long n) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    total[i] += __bfloat162float(grad[i]);
}

// The key rows of a q/k/v gradient past each sequence's real keys zeroed: columns
// [col_start, col_start + cols) of every row r (rows of row_stride elements; sequence r / seq)
// with r % seq >= used[r / seq]. FlashAttention-2's backward kernel writes no gradient for those
// keys; zeroing them alone spares clearing the whole gradient first. A block per row, grid-strided.
extern "C" __global__ void zero_padded_keys_bf16(__nv_bfloat16* grad, const unsigned int* used, long rows, int seq,
                                                 long row_stride, long col_start, int cols) {
  for (long r = blockIdx.x; r < rows; r += gridDim.x) {
    if ((unsigned int)(r % seq) < used[r / seq]) continue;
    __nv_bfloat16* row = grad + r * row_stride + col_start;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] = __float2bfloat16(0.f);
  }
}

// An embedding table's rows looked up: out[j, :] = table[ids[j], :] (f32; one thread per
// element, consecutive threads along a row).
extern "C" __global__ void embedding_gather_f32(const float* table, const unsigned int* ids, float* out, long n,
                                                int cols) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n * cols; i += (long)gridDim.x * blockDim.x) {
    const long j = i / cols;
    out[i] = table[(long)ids[j] * cols + (i - j * cols)];
  }
}

// The table's gradient: row uniq[s] = Σ grad[order[k], :] over k in seg[s] .. seg[s + 1] (the
// positions holding that id, in order: deterministic, no atomics); rows of ids not looked up
// stay as the caller zeroed them. Grid: (segments, column blocks); a thread per column.
template <typename T>
__device__ void embedding_grad(const T* grad, const unsigned int* order, const unsigned int* seg,
                               const unsigned int* uniq, float* out, int cols) {
  const int col = blockIdx.y * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int s = blockIdx.x;
  float acc = 0.f;
  for (unsigned int k = seg[s]; k < seg[s + 1]; k++) acc += load(grad, (long)order[k] * cols + col);
  out[(long)uniq[s] * cols + col] = acc;
}

extern "C" __global__ void embedding_grad_f32(const float* grad, const unsigned int* order, const unsigned int* seg,
                                              const unsigned int* uniq, float* out, int cols) {
  embedding_grad(grad, order, seg, uniq, out, cols);
}
extern "C" __global__ void embedding_grad_bf16(const __nv_bfloat16* grad, const unsigned int* order,
                                               const unsigned int* seg, const unsigned int* uniq, float* out,
                                               int cols) {
  embedding_grad(grad, order, seg, uniq, out, cols);
}

// Sums of squares of f32 spans for the global gradient norm, one span per block: tiles[2t] is
// span t's device address, tiles[2t + 1] its length; out[t] = Σ x² over it. Each thread adds
// its strided terms in order, then the warps' sums are added by a fixed tree: the same spans
// give the same bits (the norm of a resumed run's step is the uninterrupted one's).
extern "C" __global__ void sum_squares_tiles_f32(const unsigned long long* tiles, float* out) {
  const float* x = reinterpret_cast<const float*>(tiles[2 * blockIdx.x]);
  const long n = (long)tiles[2 * blockIdx.x + 1];
  float s = 0.f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i];
    s = __fadd_rn(s, __fmul_rn(v, v));
  }
  for (int offset = 16; offset > 0; offset >>= 1) s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, offset));
  __shared__ float warps[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < (int)(blockDim.x >> 5) ? warps[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, offset));
    if (lane == 0) out[blockIdx.x] = s;
  }
}
