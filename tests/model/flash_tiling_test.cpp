// The tensor-core fused attention's algorithm (src/model/cuda/flash_attention.cu, namespace tc) as a CPU twin, against
// the CPU's attention (model::gqa_attention_*): the same tiles (64 query rows of 4 warps x 16 against 64 keys), the
// same skips (a warp whose rows all precede a key tile), the same causal predicates at the tiles' edges, the online
// softmax's lanes (two a row, each half the tile's columns in its own order of pairs), running max, sum and rescaling,
// the same bf16 roundings (P before P V; dS before dS K and dS^T Q; P^T before P^T dO), dQ owned per query row, dK and
// dV per key row from S^T = K Q^T over the G query heads in order. What this proves without a GPU: the algebra and the
// index logic of the kernels; what it cannot: WMMA's fragments and shared memory (the GPU test FusedAttention_* checks
// those on a lent GPU).
//
// Bound: the twin rounds P and dS to bf16 (relative error at most 2^-9 each) and sums in fp32; the reference has
// no rounding. Each output is a sum of at most T terms each off by 2^-9 of its size, so the error is below
// 2^-9 sum |term| <= 2^-9 T max|term|; with T <= 150 and terms of the outputs' order, {rel 1e-2, 1e-2 of the
// largest value} holds with room (the GPU test's bf16 tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hsdp/core/dtype.hpp"
#include "hsdp/model/llama_layers.hpp"

namespace hsdp::model {
namespace {

constexpr int kRows = 64, kCols = 64, kWarpRows = 16;

float bf16(float x) {
  return bf16_to_float(float_to_bf16(x));
}

struct Shape {
  int B, T, NH, NKV, hs;
  int G() const { return NH / NKV; }
};

// Separate q [B, T, NH hs], k and v [B, T, NKV hs] (the CPU layers' layout), row-major.
struct Qkv {
  std::vector<float> q, k, v;
};

std::size_t at(const Shape& s, int b, int t, int head, int heads, int d) {
  return ((static_cast<std::size_t>(b) * s.T + t) * heads + head) * s.hs + d;
}

float dot(const std::vector<float>& x, std::size_t xi, const std::vector<float>& y, std::size_t yi, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; ++d) acc += x[xi + d] * y[yi + d];
  return acc;
}

// forward_kernel: out [B, T, NH hs], lse [B, NH, T].
void twin_forward(const Shape& s, const Qkv& x, std::vector<float>& out, std::vector<float>& lse) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  out.assign(static_cast<std::size_t>(s.B) * s.T * s.NH * s.hs, 0.0f);
  lse.assign(static_cast<std::size_t>(s.B) * s.NH * s.T, 0.0f);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int kvh = h / s.G();
      for (int q0 = 0; q0 < s.T; q0 += kRows) {
        std::vector<float> o(static_cast<std::size_t>(kRows) * s.hs, 0.0f), m(kRows, -INFINITY), l(kRows, 0.0f);
        const int last_key = std::min(q0 + kRows, s.T) - 1;
        for (int j0 = 0; j0 <= last_key; j0 += kCols) {
          for (int r0 = 0; r0 < kRows; r0 += kWarpRows) {
            if (j0 > q0 + r0 + kWarpRows - 1) continue;
            for (int r = r0; r < r0 + kWarpRows; ++r) {
              const int t = q0 + r;
              // The kernel's lanes: lane (r % 16, half) takes the half's column pairs 2 ((i + lane) % 16), +1, its
              // keys from j0 + 32 half; the halves' maxima and sums combine.
              std::vector<float> xs(kCols, -INFINITY);
              float half_max[2] = {-INFINITY, -INFINITY}, half_sum[2] = {0.0f, 0.0f};
              const auto pair_of = [r](int half, int i) { return 2 * ((i + r % kWarpRows + 16 * half) % 16); };
              for (int half = 0; half < 2; ++half) {
                const int first = j0 + 32 * half;
                for (int i = 0; i < 16; ++i) {
                  for (int e = 0; e < 2; ++e) {
                    const int c = pair_of(half, i) + e, j = first + c;
                    float& xv = xs[32 * half + c];
                    if (t < s.T && j <= t) {
                      xv = dot(x.q, at(s, b, t, h, s.NH, 0), x.k, at(s, b, j, kvh, s.NKV, 0), s.hs) * scale;
                    }
                    half_max[half] = std::max(half_max[half], xv);
                  }
                }
              }
              const float m_new = std::max(m[r], std::max(half_max[0], half_max[1]));
              const bool keeps = m_new != -INFINITY;
              const float alpha = keeps ? std::exp(m[r] - m_new) : 1.0f;
              std::vector<float> p(kCols, 0.0f);
              for (int half = 0; half < 2; ++half) {
                for (int i = 0; i < 16; ++i) {
                  const int c = 32 * half + pair_of(half, i);
                  if (keeps) {
                    p[c] = std::exp(xs[c] - m_new);
                    p[c + 1] = std::exp(xs[c + 1] - m_new);
                  }
                  half_sum[half] += p[c] + p[c + 1];
                }
              }
              m[r] = m_new;
              l[r] = l[r] * alpha + (half_sum[0] + half_sum[1]);
              for (int d = 0; d < s.hs; ++d) {
                float acc = o[r * s.hs + d] * alpha;
                for (int c = 0; c < kCols && j0 + c < s.T; ++c) {
                  acc += bf16(p[c]) * x.v[at(s, b, j0 + c, kvh, s.NKV, d)];
                }
                o[r * s.hs + d] = acc;
              }
            }
          }
        }
        for (int r = 0; r < kRows && q0 + r < s.T; ++r) {
          for (int d = 0; d < s.hs; ++d) out[at(s, b, q0 + r, h, s.NH, d)] = o[r * s.hs + d] / l[r];
          lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + q0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

// flash_dot_kernel, dq_kernel and dkv_kernel: dq, dk, dv written.
void twin_backward(const Shape& s, const Qkv& x, const std::vector<float>& out, const std::vector<float>& lse,
                   const std::vector<float>& dout, Qkv& grad) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  grad.q.assign(x.q.size(), 0.0f);
  grad.k.assign(x.k.size(), 0.0f);
  grad.v.assign(x.v.size(), 0.0f);
  std::vector<float> D(lse.size());
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      for (int t = 0; t < s.T; ++t) {
        D[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] =
            dot(dout, at(s, b, t, h, s.NH, 0), out, at(s, b, t, h, s.NH, 0), s.hs);
      }
    }
  }
  const auto row = [&](int b, int h, int t) { return (static_cast<std::size_t>(b) * s.NH + h) * s.T + t; };
  // dQ: per query tile and warp, key tiles j0 <= the tile's last row, skipped when past the warp's rows.
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int kvh = h / s.G();
      for (int q0 = 0; q0 < s.T; q0 += kRows) {
        const int last_key = std::min(q0 + kRows, s.T) - 1;
        for (int r0 = 0; r0 < kRows; r0 += kWarpRows) {
          for (int r = r0; r < r0 + kWarpRows; ++r) {
            const int t = q0 + r;
            if (t >= s.T) continue;
            std::vector<float> dq(s.hs, 0.0f);
            for (int j0 = 0; j0 <= last_key; j0 += kCols) {
              if (j0 > q0 + r0 + kWarpRows - 1) continue;
              for (int c = 0; c < kCols; ++c) {
                const int j = j0 + c;
                if (!(j <= t)) continue;  // j >= T only with t >= T
                const float sc = dot(x.q, at(s, b, t, h, s.NH, 0), x.k, at(s, b, j, kvh, s.NKV, 0), s.hs);
                const float dp = dot(dout, at(s, b, t, h, s.NH, 0), x.v, at(s, b, j, kvh, s.NKV, 0), s.hs);
                const float p = std::exp(sc * scale - lse[row(b, h, t)]);
                const float ds = bf16(p * (dp - D[row(b, h, t)]));
                for (int d = 0; d < s.hs; ++d) dq[d] += ds * x.k[at(s, b, j, kvh, s.NKV, d)];
              }
            }
            for (int d = 0; d < s.hs; ++d) grad.q[at(s, b, t, h, s.NH, d)] = dq[d] * scale;
          }
        }
      }
    }
  }
  // dK, dV: per key tile, the G query heads in order, query tiles from the key tile's first row.
  for (int b = 0; b < s.B; ++b) {
    for (int kvh = 0; kvh < s.NKV; ++kvh) {
      for (int k0 = 0; k0 < s.T; k0 += kRows) {
        for (int r = 0; r < kRows && k0 + r < s.T; ++r) {
          const int j = k0 + r;
          std::vector<float> dk(s.hs, 0.0f), dv(s.hs, 0.0f);
          for (int g = 0; g < s.G(); ++g) {
            const int h = kvh * s.G() + g;
            for (int t0 = k0; t0 < s.T; t0 += kCols) {
              for (int c = 0; c < kCols; ++c) {
                const int t = t0 + c;
                if (!(t < s.T && t >= j)) continue;
                const float sc = dot(x.k, at(s, b, j, kvh, s.NKV, 0), x.q, at(s, b, t, h, s.NH, 0), s.hs);
                const float dp = dot(x.v, at(s, b, j, kvh, s.NKV, 0), dout, at(s, b, t, h, s.NH, 0), s.hs);
                const float p = std::exp(sc * scale - lse[row(b, h, t)]);
                const float pt = bf16(p), dst = bf16(p * (dp - D[row(b, h, t)]));
                for (int d = 0; d < s.hs; ++d) {
                  dv[d] += pt * dout[at(s, b, t, h, s.NH, d)];
                  dk[d] += dst * x.q[at(s, b, t, h, s.NH, d)];
                }
              }
            }
          }
          for (int d = 0; d < s.hs; ++d) {
            grad.k[at(s, b, j, kvh, s.NKV, d)] = dk[d] * scale;
            grad.v[at(s, b, j, kvh, s.NKV, d)] = dv[d];
          }
        }
      }
    }
  }
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                 double scale_rel) {
  double top = 0.0;
  for (const float w : want) top = std::max(top, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= rel * std::fabs(want[i]) + scale_rel * top)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " vs " << want[i] << " (max " << top << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// T = 67 crosses one 64-row tile edge, 150 two (with warps that skip a key tile), 300 four (five key tiles per row of
// the last); grouped-query 4 over 2, 2 over 1, 8 over 2 and multi-head; head sizes 16 and 32 (the algorithm does not
// depend on it).
TEST(FlashTiling, TheTensorCoreKernelsAlgorithm_MatchesTheCpuAttention_ForwardAndEveryGradient) {
  for (const Shape s :
       {Shape{2, 67, 2, 2, 16}, Shape{1, 150, 4, 2, 32}, Shape{1, 130, 2, 1, 16}, Shape{1, 300, 8, 2, 16}}) {
    const std::size_t nq = static_cast<std::size_t>(s.B) * s.T * s.NH * s.hs;
    const std::size_t nk = static_cast<std::size_t>(s.B) * s.T * s.NKV * s.hs;
    const Qkv x{random_values(nq, 1, -2.0f, 2.0f), random_values(nk, 2, -2.0f, 2.0f),
                random_values(nk, 3, -1.0f, 1.0f)};
    const auto dout = random_values(nq, 4, -1.0f, 1.0f);
    std::vector<float> out(nq), att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T);
    gqa_attention_forward(out.data(), att.data(), x.q.data(), x.k.data(), x.v.data(), s.B, s.T, s.NH, s.NKV, s.hs);
    Qkv want{std::vector<float>(nq, 0.0f), std::vector<float>(nk, 0.0f), std::vector<float>(nk, 0.0f)};
    gqa_attention_backward(want.q.data(), want.k.data(), want.v.data(), dout.data(), x.q.data(), x.k.data(), x.v.data(),
                           att.data(), s.B, s.T, s.NH, s.NKV, s.hs);

    std::vector<float> got_out, lse;
    twin_forward(s, x, got_out, lse);
    EXPECT_TRUE(close(got_out, out, 1e-2, 1e-2)) << "out, T=" << s.T;
    // lse against log sum_j exp(s_tj) from the reference's probabilities: att_tj = exp(s_tj - lse_t), so for j = 0,
    // lse_t = s_t0 - log att_t0.
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        for (int t = 0; t < s.T; ++t) {
          const float s0 = [&] {
            float acc = 0.0f;
            for (int d = 0; d < s.hs; ++d) acc += x.q[at(s, b, t, h, s.NH, d)] * x.k[at(s, b, 0, h / s.G(), s.NKV, d)];
            return acc / std::sqrt(static_cast<float>(s.hs));
          }();
          const float want_lse = s0 - std::log(att[((static_cast<std::size_t>(b) * s.NH + h) * s.T + t) * s.T]);
          ASSERT_NEAR(lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t], want_lse,
                      1e-4 * (1 + std::fabs(want_lse)))
              << "lse b=" << b << " h=" << h << " t=" << t;
        }
      }
    }
    Qkv got;
    twin_backward(s, x, got_out, lse, dout, got);
    EXPECT_TRUE(close(got.q, want.q, 1e-2, 1e-2)) << "dq, T=" << s.T;
    EXPECT_TRUE(close(got.k, want.k, 1e-2, 1e-2)) << "dk, T=" << s.T;
    EXPECT_TRUE(close(got.v, want.v, 1e-2, 1e-2)) << "dv, T=" << s.T;
  }
}

// The twin is sharp enough to see a wrong tile edge: the causal predicate shifted by one key (j < t instead of
// j <= t, the diagonal dropped) moves the output beyond the bound. Mutation check of the test itself.
TEST(FlashTiling, ACausalMaskOffByOne_IsSeen) {
  const Shape s{1, 67, 2, 2, 16};
  const std::size_t n = static_cast<std::size_t>(s.B) * s.T * s.NH * s.hs;
  const Qkv x{random_values(n, 5, -2.0f, 2.0f), random_values(n, 6, -2.0f, 2.0f), random_values(n, 7, -1.0f, 1.0f)};
  std::vector<float> out(n), att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T);
  gqa_attention_forward(out.data(), att.data(), x.q.data(), x.k.data(), x.v.data(), s.B, s.T, s.NH, s.NKV, s.hs);
  // The attention with the diagonal masked too (row 0 keeps its only key): what an off-by-one kernel would compute.
  std::vector<float> shifted(n, 0.0f);
  for (int h = 0; h < s.NH; ++h) {
    for (int t = 0; t < s.T; ++t) {
      const int last = t == 0 ? 0 : t - 1;
      std::vector<double> w(last + 1);
      double top = -INFINITY, sum = 0.0;
      for (int j = 0; j <= last; ++j) {
        w[j] = dot(x.q, at(s, 0, t, h, s.NH, 0), x.k, at(s, 0, j, h, s.NKV, 0), s.hs) / std::sqrt(16.0);
        top = std::max(top, w[j]);
      }
      for (double& v : w) sum += (v = std::exp(v - top));
      for (int d = 0; d < s.hs; ++d) {
        double acc = 0.0;
        for (int j = 0; j <= last; ++j) acc += w[j] / sum * x.v[at(s, 0, j, h, s.NKV, d)];
        shifted[at(s, 0, t, h, s.NH, d)] = static_cast<float>(acc);
      }
    }
  }
  EXPECT_FALSE(close(shifted, out, 1e-2, 1e-2)) << "the bound does not see a diagonal dropped from the mask";
}

}  // namespace
}  // namespace hsdp::model
