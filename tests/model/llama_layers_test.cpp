// The Llama layers (llama_layers.hpp): each backward against central finite differences of its forward in double
// (gradcheck.hpp: 1e-6 norm-wise), and each forward against what theory or an independent computation says: RoPE is a
// rotation that depends only on relative positions; GQA with as many key/value heads as query heads is GPT-2's
// attention (layers.hpp, fused qkv), and with fewer it is that attention over the key/value heads repeated.
#include "hsdp/model/llama_layers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"
#include "hsdp/model/layers.hpp"

namespace hsdp::model {
namespace {

using testing::kGradientTolerance;
using testing::numeric_gradient;
using testing::random_values;
using testing::relative_error;
using testing::weighted_sum;
using Vec = std::vector<double>;

TEST(RmsnormBackward, MatchesFiniteDifferences) {
  const int N = 3, C = 8;
  Vec inp = random_values(N * C, 11, 1.0, 0.3), weight = random_values(C, 12, 0.3, 1.0), w = random_values(N * C, 13);
  Vec out(N * C), rstd(N);
  auto objective = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5);
    return weighted_sum(w, out.data());
  };
  objective();
  Vec dinp(inp.size()), dweight(C);
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N, C);
  EXPECT_LT(relative_error(dinp, numeric_gradient(inp, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dweight, numeric_gradient(weight, objective)), kGradientTolerance);
  // out's rows have root mean square |weight| when weight is constant: x * rstd has mean square 1 (up to eps).
  Vec ones(C, 2.0);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), ones.data(), N, C, 0.0);
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += out[n * C + c] * out[n * C + c] / C;
    EXPECT_NEAR(ms, 4.0, 1e-12);
  }
}

TEST(RopeBackward, MatchesFiniteDifferences_AndIsTheInverseRotation) {
  const int B = 2, T = 3, H = 2, hs = 6;
  Vec x = random_values(B * T * H * hs, 14), w = random_values(x.size(), 15), y(x.size());
  auto objective = [&] {
    y = x;
    rope_forward(y.data(), B, T, H, hs, 10000.0, 2);
    return weighted_sum(w, y.data());
  };
  Vec dx = w;
  rope_backward(dx.data(), B, T, H, hs, 10000.0, 2);
  EXPECT_LT(relative_error(dx, numeric_gradient(x, objective)), kGradientTolerance);
  y = x;  // forward then backward: the identity (a rotation's transpose is its inverse)
  rope_forward(y.data(), B, T, H, hs, 10000.0, 2);
  rope_backward(y.data(), B, T, H, hs, 10000.0, 2);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-12);
}

// q . k after RoPE depends only on the positions' difference: <R(m) q, R(n) k> = <R(m + s) q, R(n + s) k>; position 0
// is the identity; the pairs are channel i and i + hs/2 (Hugging Face's rotate_half).
TEST(RopeForward, ScoresDependOnlyOnRelativePosition_InTheRotateHalfLayout) {
  const int hs = 8;
  const Vec q = random_values(hs, 16), k = random_values(hs, 17);
  const auto score = [&](int m, int n) {
    Vec a = q, b = k;
    rope_forward(a.data(), 1, 1, 1, hs, 500.0, m);
    rope_forward(b.data(), 1, 1, 1, hs, 500.0, n);
    double dot = 0;
    for (int i = 0; i < hs; ++i) dot += a[i] * b[i];
    return dot;
  };
  EXPECT_NEAR(score(3, 1), score(10, 8), 1e-12);
  EXPECT_NEAR(score(0, 5), score(7, 12), 1e-12);
  EXPECT_GT(std::abs(score(3, 1) - score(1, 3)), 1e-6);  // the order matters
  Vec a = q;
  rope_forward(a.data(), 1, 1, 1, hs, 500.0, 0);
  for (int i = 0; i < hs; ++i) EXPECT_DOUBLE_EQ(a[i], q[i]);
  a = Vec(hs, 0.0);
  a[0] = 1.0;  // channel 0 turns towards channel hs/2 by pos * theta^0 = 1 radian at position 1
  rope_forward(a.data(), 1, 1, 1, hs, 500.0, 1);
  EXPECT_NEAR(a[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(a[hs / 2], std::sin(1.0), 1e-15);
}

TEST(SwigluBackward, MatchesFiniteDifferences) {
  const std::size_t n = 12;
  Vec gate = random_values(n, 18, 2.0), up = random_values(n, 19), w = random_values(n, 20), out(n);
  auto objective = [&] {
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    return weighted_sum(w, out.data());
  };
  Vec dgate(n), dup(n);
  swiglu_backward(dgate.data(), dup.data(), w.data(), gate.data(), up.data(), n);
  EXPECT_LT(relative_error(dgate, numeric_gradient(gate, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dup, numeric_gradient(up, objective)), kGradientTolerance);
}

TEST(GqaAttentionBackward, MatchesFiniteDifferences_ForGroupsOfOneTwoAndFour) {
  const int B = 2, T = 4, NH = 4, hs = 3;
  for (const int NKV : {4, 2, 1}) {
    Vec q = random_values(B * T * NH * hs, 21), k = random_values(B * T * NKV * hs, 22),
        v = random_values(B * T * NKV * hs, 23), w = random_values(B * T * NH * hs, 24);
    Vec out(q.size()), att(static_cast<std::size_t>(B) * NH * T * T);
    auto objective = [&] {
      gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, hs);
      return weighted_sum(w, out.data());
    };
    objective();
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    gqa_attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), att.data(), B, T,
                           NH, NKV, hs);
    EXPECT_LT(relative_error(dq, numeric_gradient(q, objective)), kGradientTolerance) << NKV;
    EXPECT_LT(relative_error(dk, numeric_gradient(k, objective)), kGradientTolerance) << NKV;
    EXPECT_LT(relative_error(dv, numeric_gradient(v, objective)), kGradientTolerance) << NKV;
  }
}

// GQA over NKV heads = GPT-2's causal attention (attention_forward, an independent implementation over a fused
// [q | k | v] layout) over the key/value heads each repeated NH / NKV times.
TEST(GqaAttentionForward, IsMultiHeadAttentionOverRepeatedKeyValueHeads) {
  const int B = 2, T = 5, NH = 6, hs = 4, C = NH * hs;
  for (const int NKV : {6, 3, 2, 1}) {
    const Vec q = random_values(B * T * C, 25), k = random_values(B * T * NKV * hs, 26),
              v = random_values(B * T * NKV * hs, 27);
    Vec out(B * T * C), att(static_cast<std::size_t>(B) * NH * T * T);
    gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, hs);
    Vec qkv(static_cast<std::size_t>(B) * T * 3 * C);
    for (int row = 0; row < B * T; ++row) {
      for (int h = 0; h < NH; ++h) {
        const int kvh = h / (NH / NKV);
        for (int i = 0; i < hs; ++i) {
          qkv[row * 3 * C + h * hs + i] = q[row * C + h * hs + i];
          qkv[row * 3 * C + C + h * hs + i] = k[(row * NKV + kvh) * hs + i];
          qkv[row * 3 * C + 2 * C + h * hs + i] = v[(row * NKV + kvh) * hs + i];
        }
      }
    }
    Vec mha(B * T * C), mha_att(att.size());
    attention_forward(mha.data(), mha_att.data(), qkv.data(), B, T, C, NH);
    EXPECT_LT(relative_error(out, mha), 1e-14) << NKV;
    EXPECT_LT(relative_error(att, mha_att), 1e-14) << NKV;
  }
}

}  // namespace
}  // namespace hsdp::model
