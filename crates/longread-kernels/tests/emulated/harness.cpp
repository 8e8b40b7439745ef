// Tests of kernels.cu's kernels on the CPU (emulation.hpp): each kernel on random inputs against
// a plain double-precision loop. Prints one line per case; exits 1 if any case is off.
// Built and run by tests/kernels_emulated.rs. This file: the LayerNorm family, the training
// bias kernels and the embeddings; others.hpp (included here: kernels.cu is one translation
// unit): attention's layout and softmax kernels, training's other kernels.
#include "emulation.hpp"

#include "../../src/layers/cuda/kernels.cu"

#include "check.hpp"
#include "others.hpp"

namespace {

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

void residual_norms(int cols, std::mt19937& rng) {
  const long rows = 37;  // not a multiple of the 8 rows of a block
  const float eps = 1e-5f;
  const size_t n = size_t(rows) * cols;
  auto x = random_values(n, rng, 2.f);
  const auto residual = random_values(n, rng, 3.f);
  auto params = random_values(3 * size_t(cols), rng);
  for (int c = 0; c < cols; ++c) params[cols + c] += 1.f;  // gamma around 1

  // bf16 product + f32 residual into f32: the row-strided kernel, then the register kernel, which
  // writes a bf16 twin of the output too.
  const auto xb = to_bf16(x);
  const auto want = residual_norm_reference(to_f32(xb), residual, params, rows, cols, eps);
  {
    std::vector<float> out(n, NAN);
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      residual_layer_norm_bf16_f32(xb.data(), residual.data(), params.data(), out.data(), rows, cols, eps);
    });
    check("residual_layer_norm_bf16_f32", cols, out, want, 2e-5f);
  }
  {
    std::vector<float> out(n, NAN);
    std::vector<__nv_bfloat16> twin(n, __float2bfloat16(NAN));
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      residual_layer_norm_regs_bf16_f32_twin(xb.data(), residual.data(), params.data(), out.data(), twin.data(), rows,
                                             cols, eps);
    });
    check("residual_layer_norm_regs_bf16_f32_twin: f32", cols, out, want, 2e-5f);
    check("residual_layer_norm_regs_bf16_f32_twin: bf16 twin", cols, to_f32(twin), want, 1e-5f, 1.f / 256);
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

// The end of a transformer block in training, forward and backward, in double: s = (x + bias)·f +
// residual, y = LayerNorm(s)·γ + β; given dy: d_residual = d_s, d_x = d_s·f and, over the rows,
// [Σ d_x, Σ dy·x̂, Σ dy]. f: the kernels' own dropout factors.
struct NormTrainReference {
  std::vector<float> y, dx, d_residual, d_params;
};
NormTrainReference norm_train_reference(const std::vector<float>& x, const std::vector<float>& residual,
                                        const std::vector<float>& params, const std::vector<float>& dy, long rows,
                                        int cols, float eps, unsigned long long seed, unsigned threshold,
                                        float keep) {
  NormTrainReference out{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(x.size()),
                         std::vector<float>(3 * size_t(cols))};
  std::vector<double> sums(3 * size_t(cols), 0.0);
  for (long r = 0; r < rows; ++r) {
    std::vector<double> s(cols), f(cols);
    double mean = 0;
    for (int c = 0; c < cols; ++c) {
      const long i = r * cols + c;
      f[c] = dropout_factor(seed, (unsigned long long)i, threshold, keep);
      s[c] = (double(x[i]) + params[c]) * f[c] + residual[i];
      mean += s[c];
    }
    mean /= cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (s[c] - mean) * (s[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + eps);
    double g_mean = 0, gx_mean = 0;
    for (int c = 0; c < cols; ++c) {
      const long i = r * cols + c;
      const double xh = (s[c] - mean) * rstd, g = double(dy[i]) * params[cols + c];
      out.y[i] = float(xh * params[cols + c] + params[2 * cols + c]);
      g_mean += g;
      gx_mean += g * xh;
    }
    g_mean /= cols;
    gx_mean /= cols;
    for (int c = 0; c < cols; ++c) {
      const long i = r * cols + c;
      const double xh = (s[c] - mean) * rstd, g = double(dy[i]) * params[cols + c];
      const double ds = rstd * (g - g_mean - xh * gx_mean);
      out.d_residual[i] = float(ds);
      out.dx[i] = float(ds * f[c]);
      sums[c] += ds * f[c];
      sums[cols + c] += double(dy[i]) * xh;
      sums[2 * cols + c] += dy[i];
    }
  }
  for (size_t c = 0; c < sums.size(); ++c) out.d_params[c] = float(sums[c]);
  return out;
}

// The training kernels' entry points for a row length (one per cols / 128, as launch.rs picks).
template <typename T>
struct NormTrainKernels {
  void (*forward)(const T*, const T*, const float*, T*, long, float, unsigned long long, unsigned, float);
  void (*backward)(const T*, const T*, const float*, const T*, T*, T*, float*, long, float, unsigned long long,
                   unsigned, float);
  // The backward pass with its running sums in shared memory (the same bits as `backward`).
  void (*backward_shared)(const T*, const T*, const float*, const T*, T*, T*, float*, long, float,
                          unsigned long long, unsigned, float);
};
template <typename T>
NormTrainKernels<T> norm_train_kernels(int cols);
template <>
NormTrainKernels<float> norm_train_kernels(int cols) {
  switch (cols) {
    case 128: return {residual_norm_train_regs1_f32, residual_norm_train_grad_regs1_f32,
                         residual_norm_train_grad_shared1_f32};
    case 768: return {residual_norm_train_regs6_f32, residual_norm_train_grad_regs6_f32,
                         residual_norm_train_grad_shared6_f32};
    default: return {residual_norm_train_regs8_f32, residual_norm_train_grad_regs8_f32,
                         residual_norm_train_grad_shared8_f32};
  }
}
template <>
NormTrainKernels<__nv_bfloat16> norm_train_kernels(int cols) {
  switch (cols) {
    case 128: return {residual_norm_train_regs1_bf16, residual_norm_train_grad_regs1_bf16,
                         residual_norm_train_grad_shared1_bf16};
    case 768: return {residual_norm_train_regs6_bf16, residual_norm_train_grad_regs6_bf16,
                         residual_norm_train_grad_shared6_bf16};
    default: return {residual_norm_train_regs8_bf16, residual_norm_train_grad_regs8_bf16,
                         residual_norm_train_grad_shared8_bf16};
  }
}

// cols: 128, 768 or 1,024 (norm_train_kernels).
void residual_norms_train(int cols, float p, std::mt19937& rng) {
  const long rows = 37;
  const float eps = 1e-5f;
  const size_t n = size_t(rows) * cols;
  const unsigned long long seed = 1234567;
  const unsigned threshold = unsigned(p * 16777216.f);
  const float keep = 1.f / (1.f - p);
  const auto x = random_values(n, rng, 2.f), residual = random_values(n, rng, 3.f), dy = random_values(n, rng);
  auto params = random_values(3 * size_t(cols), rng);
  for (int c = 0; c < cols; ++c) params[cols + c] += 1.f;
  const auto want = norm_train_reference(x, residual, params, dy, rows, cols, eps, seed, threshold, keep);
  char name[96];

  // Forward: the register kernel and the row-strided one.
  for (bool regs : {true, false}) {
    std::vector<float> y(n, NAN);
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if (regs)
        norm_train_kernels<float>(cols).forward(x.data(), residual.data(), params.data(), y.data(), rows, eps, seed,
                                                threshold, keep);
      else
        residual_norm_train_f32(x.data(), residual.data(), params.data(), y.data(), rows, cols, eps, seed, threshold,
                                keep);
    });
    std::snprintf(name, sizeof name, "%s (p %.2f)", regs ? "residual_norm_train_regs<NV>_f32" : "residual_norm_train_f32",
                  p);
    check(name, cols, y, want.y, 2e-5f);
  }

  // Backward: 3 blocks of 4 warps over 37 rows (each warp several rows), then the blocks' sums
  // added by column_sum_finish.
  const unsigned blocks = 3, threads = 128;
  std::vector<float> dx(n, NAN), d_residual(n, NAN), partial(blocks * 3 * size_t(cols), NAN), d_params(3 * cols, NAN);
  emu::launch(blocks, threads, [&] {
    norm_train_kernels<float>(cols).backward(x.data(), residual.data(), params.data(), dy.data(), dx.data(),
                                             d_residual.data(), partial.data(), rows, eps, seed, threshold, keep);
  });
  emu::launch(finish_blocks(3 * cols), 256,
              [&] { column_sum_finish(partial.data(), d_params.data(), int(blocks), 3 * cols); });
  std::snprintf(name, sizeof name, "residual_norm_train_grad_regs<NV>_f32 (p %.2f)", p);
  check((std::string(name) + ": d x").c_str(), cols, dx, want.dx, 2e-5f);
  check((std::string(name) + ": d residual").c_str(), cols, d_residual, want.d_residual, 2e-5f);
  check((std::string(name) + ": d params").c_str(), cols, d_params, want.d_params, 1e-4f, 1e-5f);
  // The running sums in shared memory: the same bits.
  {
    std::vector<float> dx2(n, NAN), d_residual2(n, NAN), partial2(partial.size(), NAN);
    emu::launch(blocks, threads, [&] {
      norm_train_kernels<float>(cols).backward_shared(x.data(), residual.data(), params.data(), dy.data(), dx2.data(),
                                                      d_residual2.data(), partial2.data(), rows, eps, seed, threshold,
                                                      keep);
    });
    std::snprintf(name, sizeof name, "residual_norm_train_grad_shared<NV>_f32 (p %.2f)", p);
    check((std::string(name) + ": d x as regs'").c_str(), cols, dx2, dx, 0.f);
    check((std::string(name) + ": d residual as regs'").c_str(), cols, d_residual2, d_residual, 0.f);
    check((std::string(name) + ": block sums as regs'").c_str(), cols, partial2, partial, 0.f);
  }

  // bf16 storage: the same arithmetic on bf16-rounded inputs, outputs rounded to bf16.
  const auto xb = to_bf16(x), rb = to_bf16(residual), gb = to_bf16(dy);
  const auto want16 = norm_train_reference(to_f32(xb), to_f32(rb), params, to_f32(gb), rows, cols, eps, seed,
                                           threshold, keep);
  std::vector<__nv_bfloat16> yb(n), dxb(n), drb(n);
  emu::launch(row_blocks(rows), ROW_THREADS, [&] {
    norm_train_kernels<__nv_bfloat16>(cols).forward(xb.data(), rb.data(), params.data(), yb.data(), rows, eps, seed,
                                                    threshold, keep);
  });
  emu::launch(blocks, threads, [&] {
    norm_train_kernels<__nv_bfloat16>(cols).backward(xb.data(), rb.data(), params.data(), gb.data(), dxb.data(),
                                                     drb.data(), partial.data(), rows, eps, seed, threshold, keep);
  });
  {
    // The running sums in shared memory: the same bits.
    std::vector<__nv_bfloat16> dxb2(n), drb2(n);
    std::vector<float> partial2(partial.size(), NAN);
    emu::launch(blocks, threads, [&] {
      norm_train_kernels<__nv_bfloat16>(cols).backward_shared(xb.data(), rb.data(), params.data(), gb.data(),
                                                              dxb2.data(), drb2.data(), partial2.data(), rows, eps,
                                                              seed, threshold, keep);
    });
    std::snprintf(name, sizeof name, "residual_norm_train_grad_shared<NV>_bf16 (p %.2f)", p);
    check((std::string(name) + ": d x as regs'").c_str(), cols, to_f32(dxb2), to_f32(dxb), 0.f);
    check((std::string(name) + ": d residual as regs'").c_str(), cols, to_f32(drb2), to_f32(drb), 0.f);
    check((std::string(name) + ": block sums as regs'").c_str(), cols, partial2, partial, 0.f);
  }
  emu::launch(finish_blocks(3 * cols), 256,
              [&] { column_sum_finish(partial.data(), d_params.data(), int(blocks), 3 * cols); });
  std::snprintf(name, sizeof name, "residual_norm_train_*_regs<NV>_bf16 (p %.2f)", p);
  check((std::string(name) + ": y").c_str(), cols, to_f32(yb), want16.y, 1e-5f, 1.f / 256);
  check((std::string(name) + ": d x").c_str(), cols, to_f32(dxb), want16.dx, 1e-5f, 1.f / 256);
  check((std::string(name) + ": d residual").c_str(), cols, to_f32(drb), want16.d_residual, 1e-5f, 1.f / 256);
  check((std::string(name) + ": d params").c_str(), cols, d_params, want16.d_params, 1e-4f, 1e-5f);
}

// Training's bias (+ exact GELU) and the GELU's backward, element-wise and over 16-byte
// vectors, against double loops; rows × cols with cols a multiple of both vector widths.
template <typename T>
void bias_kernels_train(int rows, int cols, std::mt19937& rng, const char* dtype) {
  const long n = long(rows) * cols;
  const auto x32 = random_values(size_t(n), rng, 2.f), dy32 = random_values(size_t(n), rng);
  const auto bias = random_values(size_t(cols), rng);
  std::vector<T> x(n), dy(n);
  for (long i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 2) {
      x[i] = __float2bfloat16(x32[i]);
      dy[i] = __float2bfloat16(dy32[i]);
    } else {
      x[i] = x32[i];
      dy[i] = dy32[i];
    }
  }
  auto value = [](T v) {
    if constexpr (sizeof(T) == 2) return __bfloat162float(v);
    else return float(v);
  };
  std::vector<float> biased(n), gelu(n), grad(n);
  for (long i = 0; i < n; ++i) {
    const double z = double(value(x[i])) + bias[i % cols];
    const double cdf = 0.5 * (1 + std::erf(z / std::sqrt(2.0)));
    biased[i] = float(z);
    gelu[i] = float(z * cdf);
    grad[i] = float(value(dy[i]) * (cdf + z * std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI)));
  }
  const float relative = sizeof(T) == 2 ? 1.f / 256 : 1e-6f;
  for (bool vec : {true, false}) {
    for (int g = 0; g < 2; ++g) {
      std::vector<T> out(n);
      emu::launch(1, 32, [&] {
        if constexpr (sizeof(T) == 2) {
          if (vec) bias_activation_train_vec_bf16(x.data(), bias.data(), out.data(), n, cols, g);
          else bias_activation_train_bf16(x.data(), bias.data(), out.data(), n, cols, g);
        } else {
          if (vec) bias_activation_train_vec_f32(x.data(), bias.data(), out.data(), n, cols, g);
          else bias_activation_train_f32(x.data(), bias.data(), out.data(), n, cols, g);
        }
      });
      std::vector<float> got(n);
      for (long i = 0; i < n; ++i) got[i] = value(out[i]);
      const std::string name = std::string(vec ? "bias_activation_train_vec_" : "bias_activation_train_") + dtype +
                               (g ? " (GELU)" : "");
      check(name.c_str(), cols, got, g ? gelu : biased, 1e-5f, relative);
    }
    std::vector<T> dz(n);
    emu::launch(1, 32, [&] {
      if constexpr (sizeof(T) == 2) {
        if (vec) bias_gelu_train_grad_vec_bf16(x.data(), bias.data(), dy.data(), dz.data(), n, cols);
        else bias_gelu_train_grad_bf16(x.data(), bias.data(), dy.data(), dz.data(), n, cols);
      } else {
        if (vec) bias_gelu_train_grad_vec_f32(x.data(), bias.data(), dy.data(), dz.data(), n, cols);
        else bias_gelu_train_grad_f32(x.data(), bias.data(), dy.data(), dz.data(), n, cols);
      }
    });
    std::vector<float> got(n);
    for (long i = 0; i < n; ++i) got[i] = value(dz[i]);
    const std::string name = std::string(vec ? "bias_gelu_train_grad_vec_" : "bias_gelu_train_grad_") + dtype;
    check(name.c_str(), cols, got, grad, 1e-5f, relative);
  }
  // The GELU's backward with its bias's gradient (bias_gelu_train_grad_sum, then
  // column_sum_finish), in splits of 4 rows (the last one short): dz as the vector kernel
  // writes it, the bias's gradient the column sums of that dz.
  const long per_split = 4, splits = (rows + per_split - 1) / per_split;
  std::vector<T> dz(n), dz_vec(n);
  std::vector<float> partial(size_t(splits) * cols, NAN), d_bias(cols, NAN);
  emu::launch(1, 32, [&] {
    if constexpr (sizeof(T) == 2) {
      bias_gelu_train_grad_sum_bf16(x.data(), bias.data(), dy.data(), dz.data(), partial.data(), rows, cols, per_split);
      bias_gelu_train_grad_vec_bf16(x.data(), bias.data(), dy.data(), dz_vec.data(), n, cols);
    } else {
      bias_gelu_train_grad_sum_f32(x.data(), bias.data(), dy.data(), dz.data(), partial.data(), rows, cols, per_split);
      bias_gelu_train_grad_vec_f32(x.data(), bias.data(), dy.data(), dz_vec.data(), n, cols);
    }
  }, unsigned(splits));
  emu::launch(finish_blocks(cols), 64, [&] { column_sum_finish(partial.data(), d_bias.data(), int(splits), cols); });
  std::vector<float> got(n), same(n), want_bias(cols, 0.f);
  for (long i = 0; i < n; ++i) {
    got[i] = value(dz[i]);
    same[i] = value(dz_vec[i]);
    want_bias[i % cols] += value(dz_vec[i]);
  }
  const std::string name = std::string("bias_gelu_train_grad_sum_") + dtype;
  check((name + ": dz").c_str(), cols, got, grad, 1e-5f, relative);
  check((name + ": dz as the vector kernel's").c_str(), cols, got, same, 0.f);
  check((name + ": d bias").c_str(), cols, d_bias, want_bias, 1e-5f, 1e-6f);
}

// Inference's embeddings: three tables' rows summed, LayerNorm, and the bf16 copy.
void embeddings(int cols, bool has_types, std::mt19937& rng) {
  const long rows = 37;
  const int vocab = 50, max_positions = 40, n_types = 2;
  const float eps = 1e-5f;
  const auto word = random_values(size_t(vocab) * cols, rng), position = random_values(size_t(max_positions) * cols, rng);
  const auto types = random_values(size_t(n_types) * cols, rng), gamma = random_values(cols, rng, 0.5f),
             beta = random_values(cols, rng, 0.5f);
  std::vector<unsigned> ids(rows), positions(rows), type_ids(rows);
  for (long r = 0; r < rows; ++r) {
    ids[r] = unsigned(rng() % vocab);
    positions[r] = unsigned(rng() % max_positions);
    type_ids[r] = unsigned(rng() % n_types);
  }
  std::vector<float> want(size_t(rows) * cols);
  for (long r = 0; r < rows; ++r) {
    std::vector<double> v(cols);
    double mean = 0;
    for (int c = 0; c < cols; ++c) {
      float e = word[ids[r] * cols + c] + position[positions[r] * cols + c];
      if (has_types) e += types[type_ids[r] * cols + c];
      v[c] = e;
      mean += e;
    }
    mean /= cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (v[c] - mean) * (v[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) want[r * cols + c] = float((v[c] - mean) * rstd * gamma[c] + beta[c]);
  }
  std::vector<float> out(want.size(), NAN), out2(want.size(), NAN);
  std::vector<__nv_bfloat16> twin(want.size(), __float2bfloat16(NAN));
  emu::launch(row_blocks(rows), ROW_THREADS, [&] {
    embedding_layer_norm_regs_f32(word.data(), position.data(), types.data(), ids.data(), positions.data(),
                                  type_ids.data(), has_types, gamma.data(), beta.data(), out.data(), rows, cols, eps);
  });
  emu::launch(row_blocks(rows), ROW_THREADS, [&] {
    embedding_layer_norm_regs_twin_f32(word.data(), position.data(), types.data(), ids.data(), positions.data(),
                                       type_ids.data(), has_types, gamma.data(), beta.data(), out2.data(), twin.data(),
                                       rows, cols, eps);
  });
  const std::string name = std::string("embedding_layer_norm_regs") + (has_types ? " (with types)" : "");
  check(name.c_str(), cols, out, want, 2e-5f);
  check((name + " twin: f32").c_str(), cols, out2, want, 2e-5f);
  check((name + " twin: bf16").c_str(), cols, to_f32(twin), want, 1e-5f, 1.f / 256);
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  for (int cols : {128, 384, 768, 1024}) residual_norms(cols, rng);
  for (int cols : {128, 768, 1024})
    for (float p : {0.f, 0.25f}) residual_norms_train(cols, p, rng);
  // 9 rows of 40 columns: several vectors per row, on one warp (each thread strides over
  // several elements or vectors).
  bias_kernels_train<float>(9, 40, rng, "f32");
  bias_kernels_train<__nv_bfloat16>(9, 40, rng, "bf16");
  for (int cols : {384, 768})
    for (bool has_types : {false, true}) embeddings(cols, has_types, rng);
  others::run(rng);
  if (failures) std::printf("%d case(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
