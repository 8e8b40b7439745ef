// Helpers of the emulated kernel tests: random inputs, bf16 conversions, and the comparison
// every case prints a line of (harness.cpp counts the failures).
#pragma once
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emulation.hpp"

inline int failures = 0;

inline std::vector<float> random_values(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

inline std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// Every |got − want| within limit + relative · |want|; prints the largest absolute difference.
inline void check(const char* name, int cols, const std::vector<float>& got, const std::vector<float>& want, float limit,
           float relative = 0.f) {
  float worst = 0.f;
  bool ok = got.size() == want.size();
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= limit + relative * std::fabs(want[i]))) ok = false;  // NaN fails too
    if (!(d <= worst)) worst = d;
  }
  std::printf("%-62s cols %4d: largest difference %.3g (limit %.3g + %.3g relative) %s\n", name, cols, worst, limit,
              relative, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

constexpr unsigned ROW_THREADS = 256;  // launch.rs: 8 warps, one row each
inline unsigned row_blocks(long rows) { return unsigned((rows + 7) / 8); }
// column_sum_finish: a block per 32 columns (launch.rs).
inline unsigned finish_blocks(int cols) { return unsigned((cols + 31) / 32); }

