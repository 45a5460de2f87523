// Each layer's backward against central finite differences of its forward, in double (see gradcheck.hpp
// for the error measure and the 1e-6 bound), plus the kernels' determinism across thread counts.
#include "hsdp/model/layers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "gradcheck.hpp"
#include "hsdp/device/threads.hpp"

namespace hsdp::model {
namespace {

using testing::kGradientTolerance;
using testing::numeric_gradient;
using testing::random_values;
using testing::relative_error;
using testing::weighted_sum;
using Vec = std::vector<double>;

TEST(EncoderBackward, MatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<std::int32_t> tokens = {0, 3, 3, 1, 4, 0};  // repeats: rows must add up
  Vec wte = random_values(V * C, 1), wpe = random_values(T * C, 2), w = random_values(B * T * C, 3);
  Vec out(B * T * C);
  auto objective = [&] {
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(w, out.data());
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  encoder_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  EXPECT_LT(relative_error(dwte, numeric_gradient(wte, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dwpe, numeric_gradient(wpe, objective)), kGradientTolerance);
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwte[2 * C + c], 0.0);  // token 2 never appears
}

TEST(LayernormBackward, MatchesFiniteDifferences) {
  const int N = 3, C = 8;
  Vec inp = random_values(N * C, 4, 1.0, 0.5), weight = random_values(C, 5, 0.3, 1.0), bias = random_values(C, 6);
  Vec w = random_values(N * C, 7), out(N * C), mean(N), rstd(N);
  auto objective = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return weighted_sum(w, out.data());
  };
  objective();
  Vec dinp(inp.size()), dweight(C), dbias(C);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_LT(relative_error(dinp, numeric_gradient(inp, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dweight, numeric_gradient(weight, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dbias, numeric_gradient(bias, objective)), kGradientTolerance);
}

TEST(MatmulBackward, MatchesFiniteDifferences) {
  const int N = 3, IC = 5, OC = 4;
  Vec inp = random_values(N * IC, 8), weight = random_values(OC * IC, 9), bias = random_values(OC, 10);
  Vec w = random_values(N * OC, 11), out(N * OC);
  auto objective = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
    return weighted_sum(w, out.data());
  };
  Vec dinp(inp.size()), dweight(weight.size()), dbias(OC);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), N, IC, OC);
  EXPECT_LT(relative_error(dinp, numeric_gradient(inp, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dweight, numeric_gradient(weight, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dbias, numeric_gradient(bias, objective)), kGradientTolerance);
}

TEST(LmHeadBackward, MatchesFiniteDifferences_AndLeavesPaddedRowsAlone) {
  const int N = 3, C = 4, V = 5, Vp = 8;
  Vec inp = random_values(N * C, 12), wte = random_values(Vp * C, 13);
  Vec w = random_values(N * Vp, 14), logits(N * Vp);
  for (int n = 0; n < N; ++n) {
    for (int j = V; j < Vp; ++j) w[n * Vp + j] = 0.0;  // d-logits of padded columns are never read
  }
  auto objective = [&] {
    lm_head_forward(logits.data(), inp.data(), wte.data(), N, C, V, Vp);
    return weighted_sum(w, logits.data());
  };
  Vec dinp(inp.size()), dwte(wte.size());
  lm_head_backward(dinp.data(), dwte.data(), w.data(), inp.data(), wte.data(), N, C, V, Vp);
  EXPECT_LT(relative_error(dinp, numeric_gradient(inp, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(dwte, numeric_gradient(wte, objective)), kGradientTolerance);
  for (std::size_t i = static_cast<std::size_t>(V) * C; i < dwte.size(); ++i) EXPECT_EQ(dwte[i], 0.0);
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  const int B = 2, T = 4, C = 8, NH = 2;
  Vec qkv = random_values(B * T * 3 * C, 15), w = random_values(B * T * C, 16);
  Vec out(B * T * C), att(B * NH * T * T);
  auto objective = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(w, out.data());
  };
  objective();
  Vec dqkv(qkv.size()), scratch(B * NH * T);
  attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_LT(relative_error(dqkv, numeric_gradient(qkv, objective)), kGradientTolerance);
}

TEST(AttentionForward, IsCausal_RowsSumToOne_ZerosAboveTheDiagonal) {
  const int B = 1, T = 5, C = 4, NH = 2;
  Vec qkv = random_values(B * T * 3 * C, 17), out(B * T * C), att(B * NH * T * T, 9.0);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int r = 0; r < NH * T; ++r) {
    const int t = r % T;
    double sum = 0;
    for (int j = 0; j < T; ++j) {
      if (j > t) {
        EXPECT_EQ(att[r * T + j], 0.0);
      }
      sum += att[r * T + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);  // a handful of double additions
  }
  // The first position attends only to itself: its output is its own v.
  for (int c = 0; c < C; ++c) EXPECT_NEAR(out[c], qkv[2 * C + c], 1e-15);
}

TEST(GeluBackward, MatchesFiniteDifferences) {
  Vec inp = random_values(40, 18, 2.0), w = random_values(40, 19), out(40);
  auto objective = [&] {
    gelu_forward(out.data(), inp.data(), inp.size());
    return weighted_sum(w, out.data());
  };
  Vec dinp(inp.size());
  gelu_backward(dinp.data(), inp.data(), w.data(), inp.size());
  EXPECT_LT(relative_error(dinp, numeric_gradient(inp, objective)), kGradientTolerance);
}

// 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) written out, against the x * sigmoid(2u) form used.
TEST(GeluForward, EqualsTheTanhFormula) {
  Vec inp = random_values(100, 20, 3.0), out(100);
  gelu_forward(out.data(), inp.data(), inp.size());
  for (std::size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const double ref = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out[i], ref, 1e-14 * (1 + std::abs(x)));  // two algebraically equal forms, a few ulps apart
  }
  std::vector<float> inf(100), outf(100);
  for (std::size_t i = 0; i < inp.size(); ++i) inf[i] = static_cast<float>(inp[i]);
  gelu_forward(outf.data(), inf.data(), inf.size());
  for (std::size_t i = 0; i < inp.size(); ++i) {
    const double x = inf[i];
    const double ref = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(outf[i], ref, 1e-6 * (1 + std::abs(x)));  // float rounding of a handful of operations
  }
}

TEST(ResidualBackward, MatchesFiniteDifferences) {
  Vec a = random_values(10, 21), b = random_values(10, 22), w = random_values(10, 23), out(10);
  auto objective = [&] {
    residual_forward(out.data(), a.data(), b.data(), a.size());
    return weighted_sum(w, out.data());
  };
  Vec da(10), db(10);
  residual_backward(da.data(), db.data(), w.data(), a.size());
  EXPECT_LT(relative_error(da, numeric_gradient(a, objective)), kGradientTolerance);
  EXPECT_LT(relative_error(db, numeric_gradient(b, objective)), kGradientTolerance);
}

TEST(SoftmaxCrossEntropyBackward, MatchesFiniteDifferences_AndNeverTouchesPaddedColumns) {
  const int N = 3, V = 7, Vp = 8;
  const std::vector<std::int32_t> targets = {0, 6, 3};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Vec logits = random_values(N * Vp, 24, 2.0), probs(N * Vp, nan), losses(N);
  for (int n = 0; n < N; ++n) logits[n * Vp + V] = nan;  // a padded column that entered the loss would show
  const double scale = 0.7;                                // objective = scale * sum_n loss_n
  auto objective = [&] {
    softmax_xent_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp);
    return scale * (losses[0] + losses[1] + losses[2]);
  };
  const double loss = objective();
  EXPECT_TRUE(std::isfinite(loss));
  Vec dlogits(N * Vp, nan);
  softmax_xent_backward(dlogits.data(), probs.data(), targets.data(), scale, N, V, Vp);
  for (int n = 0; n < N; ++n) EXPECT_TRUE(std::isnan(dlogits[n * Vp + V]));  // never written

  // Numeric gradient over the real columns only.
  Vec real_analytic, real_numeric;
  Vec all_numeric(N * Vp, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < V; ++j) {
      const std::size_t i = static_cast<std::size_t>(n) * Vp + j;
      const double saved = logits[i];
      logits[i] = saved + testing::kFiniteDifferenceStep;
      const double up = objective();
      logits[i] = saved - testing::kFiniteDifferenceStep;
      const double down = objective();
      logits[i] = saved;
      real_numeric.push_back((up - down) / (2 * testing::kFiniteDifferenceStep));
      real_analytic.push_back(dlogits[i]);
    }
  }
  EXPECT_LT(relative_error(real_analytic, real_numeric), kGradientTolerance);

  // The loss-only path gives the same losses, bit for bit.
  objective();
  Vec eval_losses(N);
  softmax_xent_loss(eval_losses.data(), logits.data(), targets.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) EXPECT_EQ(eval_losses[n], losses[n]);
}

// The non-GEMM kernels split work so that no output depends on the thread count: 1 and 2 threads must
// agree bit for bit (float, sizes large enough to run in parallel).
TEST(Kernels, AreBitIdentical_WithOneAndTwoThreads) {
  const int B = 4, T = 32, C = 256, NH = 4, N = B * T, V = 300, Vp = 320;
  auto to_float = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto x = to_float(random_values(N * C, 30)), w = to_float(random_values(C, 31, 0.2, 1.0));
  const auto bias = to_float(random_values(C, 32)), dout = to_float(random_values(N * C, 33));
  const auto qkv = to_float(random_values(N * 3 * C, 34)), logits = to_float(random_values(N * Vp, 35));
  std::vector<std::int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[i] = (i * 7) % 11;  // many repeats
    targets[i] = (i * 13) % V;
  }
  auto run = [&](int threads) {
    device::ThreadCountScope scope(threads);
    std::vector<float> result;
    auto keep = [&](const std::vector<float>& v) { result.insert(result.end(), v.begin(), v.end()); };
    std::vector<float> ln(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                       N, C);
    keep(ln), keep(dx), keep(dw), keep(db);
    std::vector<float> dwte(11 * C), dwpe(T * C);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    keep(dwte), keep(dwpe);
    std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C), scratch(B * NH * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    keep(out), keep(att), keep(dqkv);
    std::vector<float> g(N * C), dg(N * C);
    gelu_forward(g.data(), x.data(), g.size());
    gelu_backward(dg.data(), x.data(), dout.data(), g.size());
    keep(g), keep(dg);
    std::vector<float> probs(N * Vp), losses(N);
    softmax_xent_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp);
    softmax_xent_backward(probs.data(), probs.data(), targets.data(), 0.01f, N, V, Vp);
    keep(probs), keep(losses);
    return result;
  };
  const std::vector<float> one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace hsdp::model
