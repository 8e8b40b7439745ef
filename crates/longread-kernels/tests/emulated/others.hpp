// Emulated tests of kernels.cu's attention layout and softmax kernels and of training's other
// kernels (included by harness.cpp after kernels.cu and check.hpp; run from its main).
#pragma once

namespace others {

template <typename T>
std::vector<T> as(const std::vector<float>& v) {
  if constexpr (sizeof(T) == 2) return to_bf16(v);
  else return v;
}
template <typename T>
std::vector<float> back(const std::vector<T>& v) {
  if constexpr (sizeof(T) == 2) return to_f32(v);
  else return v;
}
template <typename T>
float rounding() {
  return sizeof(T) == 2 ? 1.f / 256 : 1e-6f;
}
template <typename T>
const char* dtype() {
  return sizeof(T) == 2 ? "bf16" : "f32";
}

// softmax(x · scale + key_bias[item]) of each row, in double; with dy, the training backward
// (dropout factors f): dx = scale · p · (dy·f − Σ dy·f·p). rows = items · per_item.
struct Softmax {
  std::vector<float> probs, dropped, grad;
};
Softmax softmax_reference(const std::vector<float>& x, const std::vector<float>& key_bias, const std::vector<float>& dy,
                          long rows, long per_item, int cols, float scale, unsigned long long seed, unsigned threshold,
                          float keep) {
  Softmax out{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(x.size())};
  for (long r = 0; r < rows; ++r) {
    const float* bias = key_bias.data() + (r / per_item) * cols;
    std::vector<double> e(cols);
    double m = -INFINITY, s = 0, dot = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, double(x[r * cols + c]) * scale + bias[c]);
    for (int c = 0; c < cols; ++c) s += e[c] = std::exp(double(x[r * cols + c]) * scale + bias[c] - m);
    for (int c = 0; c < cols; ++c) {
      const long i = r * cols + c;
      const double p = e[c] / s, f = dropout_factor(seed, (unsigned long long)i, threshold, keep);
      out.probs[i] = float(p);
      out.dropped[i] = float(p * f);
      dot += dy[i] * f * p;
    }
    for (int c = 0; c < cols; ++c) {
      const long i = r * cols + c;
      const double f = dropout_factor(seed, (unsigned long long)i, threshold, keep);
      out.grad[i] = float(scale * (e[c] / s) * (dy[i] * f - dot));
    }
  }
  return out;
}

// Inference's softmax in place and training's probabilities (forward and backward), each with
// the register kernels and the row-strided ones: 3 items × 5 rows of `cols` keys, the last keys
// of each item masked.
template <typename T>
void softmaxes(int cols, std::mt19937& rng) {
  const long items = 3, per_item = 5, rows = items * per_item;
  const float scale = 0.125f, p = 0.2f, keep = 1.f / (1.f - p);
  const unsigned threshold = unsigned(p * 16777216.f);
  const unsigned long long seed = 99;
  const auto x = as<T>(random_values(size_t(rows) * cols, rng, 4.f));
  const auto dy = as<T>(random_values(size_t(rows) * cols, rng));
  std::vector<float> key_bias(size_t(items) * cols, 0.f);
  for (long i = 0; i < items; ++i)
    for (int c = cols - 3 * int(i) - 1; c < cols; ++c) key_bias[i * cols + c] = -1e9f;
  const auto want = softmax_reference(back(x), key_bias, back(dy), rows, per_item, cols, scale, seed, threshold, keep);
  const bool fits = cols % (32 * Vec16<T>::N) == 0;
  for (bool regs : {true, false}) {
    if (regs && !fits) continue;
    const std::string kind = std::string(regs ? "_regs_" : "_") + dtype<T>();
    auto scores = x;
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if constexpr (sizeof(T) == 2) {
        if (regs) attention_softmax_regs_bf16(scores.data(), key_bias.data(), rows, per_item, cols, scale);
        else attention_softmax_bf16(scores.data(), key_bias.data(), rows, per_item, cols, scale);
      } else {
        if (regs) attention_softmax_regs_f32(scores.data(), key_bias.data(), rows, per_item, cols, scale);
        else attention_softmax_f32(scores.data(), key_bias.data(), rows, per_item, cols, scale);
      }
    });
    check(("attention_softmax" + kind).c_str(), cols, back(scores), want.probs, 1e-6f, rounding<T>());
    std::vector<T> out(x.size()), grad(x.size());
    emu::launch(row_blocks(rows), ROW_THREADS, [&] {
      if constexpr (sizeof(T) == 2) {
        if (regs) {
          attention_probs_train_regs_bf16(x.data(), key_bias.data(), out.data(), rows, per_item, cols, scale, seed,
                                          threshold, keep);
          attention_probs_train_grad_regs_bf16(x.data(), key_bias.data(), dy.data(), grad.data(), rows, per_item, cols,
                                               scale, seed, threshold, keep);
        } else {
          attention_probs_train_bf16(x.data(), key_bias.data(), out.data(), rows, per_item, cols, scale, seed,
                                     threshold, keep);
          attention_probs_train_grad_bf16(x.data(), key_bias.data(), dy.data(), grad.data(), rows, per_item, cols,
                                          scale, seed, threshold, keep);
        }
      } else {
        if (regs) {
          attention_probs_train_regs_f32(x.data(), key_bias.data(), out.data(), rows, per_item, cols, scale, seed,
                                         threshold, keep);
          attention_probs_train_grad_regs_f32(x.data(), key_bias.data(), dy.data(), grad.data(), rows, per_item, cols,
                                              scale, seed, threshold, keep);
        } else {
          attention_probs_train_f32(x.data(), key_bias.data(), out.data(), rows, per_item, cols, scale, seed, threshold,
                                    keep);
          attention_probs_train_grad_f32(x.data(), key_bias.data(), dy.data(), grad.data(), rows, per_item, cols, scale,
                                         seed, threshold, keep);
        }
      }
    });
    check(("attention_probs_train" + kind).c_str(), cols, back(out), want.dropped, 1e-6f, rounding<T>());
    check(("attention_probs_train_grad" + kind).c_str(), cols, back(grad), want.grad, 1e-5f, rounding<T>());
  }
}

// The heads' layout: split_qkv (with the bias) puts element (b, s, which, h, d) of the fused
// product at [which, b, h, s, d]; merge_heads puts context (b, h, s, d) at [b, s, h · hs + d].
template <typename T>
void layouts(std::mt19937& rng) {
  const long batch = 2;
  const int seq = 5, heads = 3, head_size = 16, hidden = heads * head_size;
  const auto x = as<T>(random_values(size_t(batch) * seq * 3 * hidden, rng));
  const auto bias = random_values(3 * size_t(hidden), rng);
  std::vector<float> want_split(x.size()), want_merge(size_t(batch) * seq * hidden);
  const auto xf = back(x);
  for (long b = 0; b < batch; ++b)
    for (int s = 0; s < seq; ++s)
      for (int w = 0; w < 3; ++w)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < head_size; ++d) {
            const int col = w * hidden + h * head_size + d;
            want_split[(((w * batch + b) * heads + h) * seq + s) * head_size + d] = xf[(b * seq + s) * 3 * hidden + col] + bias[col];
          }
  // merge the q part of the split output.
  for (long b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < seq; ++s)
        for (int d = 0; d < head_size; ++d)
          want_merge[(b * seq + s) * hidden + h * head_size + d] = want_split[((b * heads + h) * seq + s) * head_size + d];
  std::vector<T> split(x.size()), merged(want_merge.size());
  emu::launch(2, 32, [&] {
    if constexpr (sizeof(T) == 2) split_qkv_bf16(x.data(), bias.data(), split.data(), batch, seq, heads, head_size);
    else split_qkv_f32(x.data(), bias.data(), split.data(), batch, seq, heads, head_size);
  });
  const std::vector<T> q(split.begin(), split.begin() + long(want_merge.size()));
  emu::launch(2, 32, [&] {
    if constexpr (sizeof(T) == 2) merge_heads_bf16(q.data(), merged.data(), batch, seq, heads, head_size);
    else merge_heads_f32(q.data(), merged.data(), batch, seq, heads, head_size);
  });
  check((std::string("split_qkv_") + dtype<T>()).c_str(), hidden, back(split), want_split, 1e-6f, rounding<T>());
  check((std::string("merge_heads_") + dtype<T>()).c_str(), hidden, back(merged), want_merge, 1e-6f, rounding<T>());
}

// Training's LayerNorm forward and backward (f32): y, and [dx, x̂] with
// dx = rstd · (g − mean(g) − x̂ · mean(g·x̂)), g = dy·γ.
void layer_norm_train(int cols, std::mt19937& rng) {
  const long rows = 21;
  const float eps = 1e-5f;
  const auto x = random_values(size_t(rows) * cols, rng, 3.f), dy = random_values(size_t(rows) * cols, rng);
  const auto gamma = random_values(cols, rng), beta = random_values(cols, rng);
  std::vector<float> y_want(x.size()), out_want(2 * x.size());
  for (long r = 0; r < rows; ++r) {
    double mean = 0, var = 0, gm = 0, gxm = 0;
    for (int c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    for (int c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    const double rstd = 1 / std::sqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) {
      const double xh = (x[r * cols + c] - mean) * rstd, g = double(dy[r * cols + c]) * gamma[c];
      y_want[r * cols + c] = float(xh * gamma[c] + beta[c]);
      out_want[rows * cols + r * cols + c] = float(xh);
      gm += g;
      gxm += g * xh;
    }
    gm /= cols;
    gxm /= cols;
    for (int c = 0; c < cols; ++c) {
      const double xh = (x[r * cols + c] - mean) * rstd, g = double(dy[r * cols + c]) * gamma[c];
      out_want[r * cols + c] = float(rstd * (g - gm - xh * gxm));
    }
  }
  std::vector<float> y(x.size()), out(2 * x.size());
  emu::launch(row_blocks(rows), ROW_THREADS, [&] {
    layer_norm_train_f32(x.data(), gamma.data(), beta.data(), y.data(), rows, cols, eps);
    layer_norm_train_grad_f32(x.data(), gamma.data(), dy.data(), out.data(), rows, cols, eps);
  });
  check("layer_norm_train_f32", cols, y, y_want, 1e-5f);
  check("layer_norm_train_grad_f32 (dx, x̂)", cols, out, out_want, 1e-5f);
}

// Column sums in splits then in order; embedding rows gathered and their gradient summed per id.
template <typename T>
void sums(std::mt19937& rng) {
  const long rows = 70;
  const int cols = 300, splits = 19;  // more splits than column_sum_finish has warps
  const long per_split = (rows + splits - 1) / splits;
  const auto x = as<T>(random_values(size_t(rows) * cols, rng));
  const auto xf = back(x);
  std::vector<float> want(cols, 0.f), partial(size_t(splits) * cols), out(cols);
  for (long r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want[c] += xf[r * cols + c];
  emu::launch(2, 256, [&] {
    if constexpr (sizeof(T) == 2) column_sum_partial_bf16(x.data(), partial.data(), rows, cols, per_split);
    else column_sum_partial_f32(x.data(), partial.data(), rows, cols, per_split);
  }, splits);
  emu::launch(finish_blocks(cols), 256, [&] { column_sum_finish(partial.data(), out.data(), splits, cols); });
  check((std::string("column_sum_partial + finish ") + dtype<T>()).c_str(), cols, out, want, 1e-4f);

  // Embedding gradient: ids 4, 1, 4, 0, 4 → segments of id 0 {3}, 1 {1}, 4 {0, 2, 4}.
  const int width = 40, vocab = 6;
  const auto grad = as<T>(random_values(5 * size_t(width), rng));
  const auto gf = back(grad);
  const std::vector<unsigned> order = {3, 1, 0, 2, 4}, seg = {0, 1, 2, 5}, uniq = {0, 1, 4};
  std::vector<float> table_grad(size_t(vocab) * width, 0.f), want_grad(table_grad.size(), 0.f);
  const unsigned ids[5] = {4, 1, 4, 0, 4};
  for (int k = 0; k < 5; ++k)
    for (int c = 0; c < width; ++c) want_grad[ids[k] * width + c] += gf[k * width + c];
  emu::launch(3, 32, [&] {
    if constexpr (sizeof(T) == 2) embedding_grad_bf16(grad.data(), order.data(), seg.data(), uniq.data(), table_grad.data(), width);
    else embedding_grad_f32(grad.data(), order.data(), seg.data(), uniq.data(), table_grad.data(), width);
  }, 2);
  check((std::string("embedding_grad_") + dtype<T>()).c_str(), width, table_grad, want_grad, 1e-6f);
  if constexpr (sizeof(T) == 4) {
    const auto table = random_values(size_t(vocab) * width, rng);
    std::vector<float> rows_out(5 * size_t(width)), rows_want(rows_out.size());
    for (int k = 0; k < 5; ++k)
      for (int c = 0; c < width; ++c) rows_want[k * width + c] = table[ids[k] * width + c];
    emu::launch(1, 64, [&] { embedding_gather_f32(table.data(), ids, rows_out.data(), 5, width); });
    check("embedding_gather_f32", width, rows_out, rows_want, 0.f);
  }
}

// One AdamW update against torch's formula in double.
void adamw(std::mt19937& rng) {
  const long n = 100;
  auto p = random_values(n, rng);
  const auto grad = random_values(n, rng);
  std::vector<float> moments(2 * n, 0.f);
  for (long i = 0; i < n; ++i) moments[n + i] = std::fabs(grad[i]) * 0.01f;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, step = 3;
  const float bias1 = 1 - std::pow(b1, step), bias2 = 1 - std::pow(b2, step);
  std::vector<float> want(n);
  for (long i = 0; i < n; ++i) {
    const double pi = double(p[i]) * (1 - lr * wd);
    const double m = b1 * 0.0 + (1 - b1) * grad[i];
    const double v = b2 * moments[n + i] + (1 - b2) * double(grad[i]) * grad[i];
    want[i] = float(pi - (lr / bias1) * m / (std::sqrt(v) / std::sqrt(bias2) + eps));
  }
  emu::launch(1, 64, [&] {
    adamw_step_f32(p.data(), grad.data(), moments.data(), n, 1.f, 1 - lr * wd, 1 - b1, b2, 1 - b2, std::sqrt(bias2),
                   eps, lr / bias1);
  });
  check("adamw_step_f32", int(n), p, want, 1e-6f, 1e-5f);

  // Many parameters in one launch (adamw_tiles_f32): two parameters with their own constants,
  // the second in two spans, give the bits of a launch per parameter.
  const long n2 = 300;
  auto p1 = random_values(n, rng), p2 = random_values(n2, rng);
  const auto g1 = random_values(n, rng), g2 = random_values(n2, rng);
  std::vector<float> m1(2 * n, 0.01f), m2(2 * n2, 0.02f);
  auto q1 = p1, q2 = p2;
  auto r1 = m1, r2 = m2;
  const float c1[8] = {0.5f, 1 - lr * wd, 1 - b1, b2, 1 - b2, std::sqrt(bias2), eps, lr / bias1};
  const float c2[8] = {1.f, 1.f, 1 - b1, b2, 1 - b2, 0.5f, eps, 2e-3f};
  auto one = [](const float* c) { return std::vector<float>(c, c + 8); };
  emu::launch(1, 64, [&] { adamw_step_f32(q1.data(), g1.data(), r1.data(), n, c1[0], c1[1], c1[2], c1[3], c1[4], c1[5], c1[6], c1[7]); });
  emu::launch(1, 64, [&] { adamw_step_f32(q2.data(), g2.data(), r2.data(), n2, c2[0], c2[1], c2[2], c2[3], c2[4], c2[5], c2[6], c2[7]); });
  auto addr = [](const float* x) { return reinterpret_cast<unsigned long long>(x); };
  const std::vector<unsigned long long> spans = {
      addr(p1.data()), addr(g1.data()), addr(m1.data()), (unsigned long long)n, 0, (unsigned long long)n, 0,
      addr(p2.data()), addr(g2.data()), addr(m2.data()), (unsigned long long)n2, 0, 256, 1,
      addr(p2.data()), addr(g2.data()), addr(m2.data()), (unsigned long long)n2, 256, (unsigned long long)(n2 - 256), 1};
  auto coefs = one(c1);
  const auto second = one(c2);
  coefs.insert(coefs.end(), second.begin(), second.end());
  emu::launch(3, 64, [&] { adamw_tiles_f32(spans.data(), coefs.data()); });
  check("adamw_tiles_f32: parameter 1", int(n), p1, q1, 0.f);
  check("adamw_tiles_f32: parameter 2 (two spans)", int(n2), p2, q2, 0.f);
  check("adamw_tiles_f32: moments 1", int(n), m1, r1, 0.f);
  check("adamw_tiles_f32: moments 2", int(n2), m2, r2, 0.f);
}

// The gradient norm's sums of squares over spans of several tensors (one block per span, as
// launch.rs's table: address, length), against double loops; a span of one element, one
// shorter than a block, one longer than the block's threads; a NaN reaches its span's sum.
void sum_squares(std::mt19937& rng) {
  const auto a = random_values(1, rng), b = random_values(200, rng), c = random_values(1000, rng);
  std::vector<unsigned long long> table;
  std::vector<float> want;
  auto span = [&](const float* x, long n) {
    table.push_back(reinterpret_cast<unsigned long long>(x));
    table.push_back((unsigned long long)n);
    double s = 0;
    for (long i = 0; i < n; ++i) s += double(x[i]) * x[i];
    want.push_back(float(s));
  };
  span(a.data(), 1);
  span(b.data(), 200);
  span(c.data(), 600);  // c in two spans, as a tensor longer than a span
  span(c.data() + 600, 400);
  std::vector<float> out(want.size(), NAN);
  emu::launch(unsigned(want.size()), 256, [&] { sum_squares_tiles_f32(table.data(), out.data()); });
  check("sum_squares_tiles_f32", 0, out, want, 1e-6f, 1e-6f);
  auto with_nan = b;
  with_nan[137] = NAN;
  table = {reinterpret_cast<unsigned long long>(with_nan.data()), 200};
  float nan_out = 0.f;
  emu::launch(1, 256, [&] { sum_squares_tiles_f32(table.data(), &nan_out); });
  const bool ok = std::isnan(nan_out);
  std::printf("%-62s %s\n", "sum_squares_tiles_f32: a NaN reaches the sum", ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// Inference's bias (+ GELU) in place, element-wise and over vectors; dropout masks.
template <typename T>
void in_place_and_masks(std::mt19937& rng) {
  const int rows = 9, cols = 40;
  const long n = long(rows) * cols;
  const auto x = as<T>(random_values(size_t(n), rng, 2.f));
  const auto bias = random_values(cols, rng);
  const auto xf = back(x);
  for (int gelu = 0; gelu < 2; ++gelu) {
    std::vector<float> want(n);
    for (long i = 0; i < n; ++i) {
      const double z = double(xf[i]) + bias[i % cols];
      want[i] = float(gelu ? 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))) : z);
    }
    for (bool vec : {true, false}) {
      auto y = x;
      emu::launch(1, 32, [&] {
        if constexpr (sizeof(T) == 2) {
          if (vec) bias_activation_vec_bf16(y.data(), bias.data(), n, cols, gelu);
          else bias_activation_bf16(y.data(), bias.data(), n, cols, gelu);
        } else {
          if (vec) bias_activation_vec_f32(y.data(), bias.data(), n, cols, gelu);
          else bias_activation_f32(y.data(), bias.data(), n, cols, gelu);
        }
      });
      const std::string name = std::string(vec ? "bias_activation_vec_" : "bias_activation_") + dtype<T>() +
                               (gelu ? " (GELU)" : "");
      check(name.c_str(), cols, back(y), want, 1e-5f, rounding<T>());
    }
  }
  const float p = 0.3f, keep = 1.f / (1.f - p);
  const unsigned threshold = unsigned(p * 16777216.f);
  std::vector<T> mask(n);
  std::vector<float> want(n);
  long kept = 0;
  for (long i = 0; i < n; ++i) {
    want[i] = dropout_factor(7, (unsigned long long)i, threshold, keep);
    kept += want[i] > 0;
  }
  emu::launch(1, 32, [&] {
    if constexpr (sizeof(T) == 2) dropout_mask_bf16(mask.data(), n, 7, threshold, keep);
    else dropout_mask_f32(mask.data(), n, 7, threshold, keep);
  });
  check((std::string("dropout_mask_") + dtype<T>()).c_str(), cols, back(mask), want, 0.f, rounding<T>());
  // The factors themselves: about 1 − p of the elements kept.
  const double share = double(kept) / n;
  const bool ok = std::fabs(share - (1 - p)) < 0.08;
  std::printf("%-62s share kept %.3f of %ld (1 − p = %.2f) %s\n", "dropout_factor", share, n, 1 - p, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// A bf16 gradient added into an f32 total in place: the cast-then-add's bits (one rounding).
void add_into(std::mt19937& rng) {
  const long n = 1000;
  auto total = random_values(size_t(n), rng, 3.f);
  const auto grad = as<__nv_bfloat16>(random_values(size_t(n), rng));
  const auto gf = back(grad);
  std::vector<float> want(n);
  for (long i = 0; i < n; ++i) want[i] = total[i] + gf[i];
  emu::launch(2, 64, [&] { add_into_f32_bf16(total.data(), grad.data(), n); });
  check("add_into_f32_bf16", 100, total, want, 0.f);
}

// The key rows past each sequence's real keys zeroed in the k and v column blocks, and nothing
// else touched: sequences of 5 rows with 5, 2 and 0 real keys.
void zero_padded_keys(std::mt19937& rng) {
  const int seq = 5, hidden = 8;
  const long rows = 3 * seq, row_stride = 3 * hidden;
  const std::vector<unsigned int> used = {5, 2, 0};
  auto grad = as<__nv_bfloat16>(random_values(size_t(rows * row_stride), rng));
  auto want = back(grad);
  for (long r = 0; r < rows; ++r)
    if ((unsigned int)(r % seq) >= used[r / seq])
      for (long c = hidden; c < 3 * hidden; ++c) want[r * row_stride + c] = 0.f;
  emu::launch(4, 32, [&] { zero_padded_keys_bf16(grad.data(), used.data(), rows, seq, row_stride, hidden, 2 * hidden); });
  check("zero_padded_keys_bf16", 100, back(grad), want, 0.f);
}

inline void run(std::mt19937& rng) {
  add_into(rng);
  zero_padded_keys(rng);
  in_place_and_masks<float>(rng);
  in_place_and_masks<__nv_bfloat16>(rng);
  for (int cols : {256, 512, 200}) {
    softmaxes<float>(cols, rng);
    softmaxes<__nv_bfloat16>(cols, rng);
  }
  layouts<float>(rng);
  layouts<__nv_bfloat16>(rng);
  for (int cols : {64, 300}) layer_norm_train(cols, rng);
  sums<float>(rng);
  sums<__nv_bfloat16>(rng);
  adamw(rng);
  sum_squares(rng);
}

}  // namespace others
