// Tests of kernels.cu's kernels on the CPU (emulation.hpp): each kernel on random inputs against
// a plain double-precision loop. Prints one line per case; exits 1 if any case is off.
// Built and run by tests/kernels_emulated.rs.
#include "emulation.hpp"

#include "../../src/layers/cuda/kernels.cu"

#include <cstdio>
#include <random>

namespace {

int failures = 0;

std::vector<float> random_values(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// LayerNorm(x + bias + residual) · gamma + beta of each row, in double; params = [bias, gamma, beta].
std::vector<float> residual_norm_reference(const std::vector<float>& x, const std::vector<float>& residual,
                                           const std::vector<float>& params, long rows, int cols, float eps) {
  std::vector<float> out(x.size());
  for (long r = 0; r < rows; ++r) {
    std::vector<double> v(cols);
    double mean = 0;
    for (int c = 0; c < cols; ++c) {
      v[c] = double(x[r * cols + c]) + params[c] + residual[r * cols + c];
      mean += v[c];
    }
    mean /= cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (v[c] - mean) * (v[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) out[r * cols + c] = float((v[c] - mean) * rstd * params[cols + c] + params[2 * cols + c]);
  }
  return out;
}

// Every |got − want| within limit + relative · |want|; prints the largest absolute difference.
void check(const char* name, int cols, const std::vector<float>& got, const std::vector<float>& want, float limit,
           float relative = 0.f) {
  float worst = 0.f;
  bool ok = got.size() == want.size();
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= limit + relative * std::fabs(want[i]))) ok = false;  // NaN fails too
    if (!(d <= worst)) worst = d;
  }
  std::printf("%-44s cols %4d: largest difference %.3g (limit %.3g + %.3g relative) %s\n", name, cols, worst, limit,
              relative, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

constexpr unsigned ROW_THREADS = 256;  // launch.rs: 8 warps, one row each
unsigned row_blocks(long rows) { return unsigned((rows + 7) / 8); }

void residual_norms(int cols, std::mt19937& rng) {
  const long rows = 37;  // not a multiple of the 8 rows of a block
  const float eps = 1e-5f;
  const size_t n = size_t(rows) * cols;
  auto x = random_values(n, rng, 2.f);
  const auto residual = random_values(n, rng, 3.f);
  auto params = random_values(3 * size_t(cols), rng);
  for (int c = 0; c < cols; ++c) params[cols + c] += 1.f;  // gamma around 1

  // bf16 product + f32 residual into f32: the register kernel and the row-strided one.
  const auto xb = to_bf16(x);
  const auto want = residual_norm_reference(to_f32(xb), residual, params, rows, cols, eps);
  for (bool regs : {true, false}) {
    std::vector<float> out(n, NAN);
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if (regs)
        residual_layer_norm_regs_bf16_f32(xb.data(), residual.data(), params.data(), out.data(), rows, cols, eps);
      else
        residual_layer_norm_bf16_f32(xb.data(), residual.data(), params.data(), out.data(), rows, cols, eps);
    });
    check(regs ? "residual_layer_norm_regs_bf16_f32" : "residual_layer_norm_bf16_f32", cols, out, want, 2e-5f);
  }

  // f32 in place.
  const auto want32 = residual_norm_reference(x, residual, params, rows, cols, eps);
  for (bool regs : {true, false}) {
    auto inplace = x;
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if (regs)
        residual_layer_norm_regs_f32(inplace.data(), residual.data(), params.data(), rows, cols, eps);
      else
        residual_layer_norm_f32(inplace.data(), residual.data(), params.data(), rows, cols, eps);
    });
    check(regs ? "residual_layer_norm_regs_f32 (in place)" : "residual_layer_norm_f32 (in place)", cols, inplace,
          want32, 2e-5f);
  }

  // bf16 in place: the result rounded to bf16 (at most 2^-8 of the value).
  const auto rb = to_bf16(residual);
  const auto want16 = residual_norm_reference(to_f32(xb), to_f32(rb), params, rows, cols, eps);
  for (bool regs : {true, false}) {
    auto inplace = xb;
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if (regs)
        residual_layer_norm_regs_bf16(inplace.data(), rb.data(), params.data(), rows, cols, eps);
      else
        residual_layer_norm_bf16(inplace.data(), rb.data(), params.data(), rows, cols, eps);
    });
    check(regs ? "residual_layer_norm_regs_bf16 (in place)" : "residual_layer_norm_bf16 (in place)", cols,
          to_f32(inplace), want16, 1e-5f, 1.f / 256);
  }
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  for (int cols : {128, 384, 768, 1024}) residual_norms(cols, rng);
  if (failures) std::printf("%d case(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
