#include "hsdp/optim/adamw.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {
namespace {

struct Reference {
  std::vector<double> p, m, v;
};

// The AdamW formulas of adamw.hpp, in double, one element at a time.
void reference_step(const AdamWConfig& c, double lr, int t, double grad_scale, const std::vector<float>& grads,
                    const std::vector<DecaySegment>& segments, Reference& r) {
  for (const auto& s : segments) {
    for (std::size_t i = s.offset; i < s.offset + s.count; ++i) {
      const double g = grad_scale * grads[i];
      r.m[i] = c.beta1 * r.m[i] + (1 - static_cast<double>(c.beta1)) * g;
      r.v[i] = c.beta2 * r.v[i] + (1 - static_cast<double>(c.beta2)) * g * g;
      const double m_hat = r.m[i] / (1 - std::pow(static_cast<double>(c.beta1), t));
      const double v_hat = r.v[i] / (1 - std::pow(static_cast<double>(c.beta2), t));
      const double wd = s.decay ? c.weight_decay : 0.0;
      r.p[i] -= lr * (m_hat / (std::sqrt(v_hat) + c.eps) + wd * r.p[i]);
    }
  }
}

const std::vector<DecaySegment> kSegments = {{0, 4, true}, {4, 3, false}, {7, 3, true}};

std::vector<float> gradients(int step) {
  std::vector<float> g(10);
  for (int i = 0; i < 10; ++i)
    g[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(1.3 * i + step) * (i % 3 + 1));
  return g;
}

TEST(AdamW, FourSteps_MatchDoublePrecisionReference) {
  const AdamWConfig config;  // nanoGPT / llm.c defaults
  EXPECT_FLOAT_EQ(config.beta1, 0.9f);
  EXPECT_FLOAT_EQ(config.beta2, 0.95f);
  EXPECT_FLOAT_EQ(config.eps, 1e-8f);
  EXPECT_FLOAT_EQ(config.weight_decay, 0.1f);
  std::vector<float> p(10), m(10, 0.0f), v(10, 0.0f);
  Reference ref{std::vector<double>(10), std::vector<double>(10, 0.0), std::vector<double>(10, 0.0)};
  for (int i = 0; i < 10; ++i)
    ref.p[static_cast<std::size_t>(i)] = p[static_cast<std::size_t>(i)] = 0.5f - 0.1f * static_cast<float>(i);

  const float lrs[] = {1e-3f, 3e-3f, 2e-3f, 5e-4f};
  const float scales[] = {1.0f, 0.5f, 1.0f, 0.25f};
  for (int t = 1; t <= 4; ++t) {
    const auto g = gradients(t);
    adamw_update(config, AdamWStep{lrs[t - 1], t, scales[t - 1]}, p, g, m, v, kSegments);
    reference_step(config, lrs[t - 1], t, scales[t - 1], g, kSegments, ref);
  }
  // Float arithmetic over 4 steps: a few ulps of O(1) moments and of params moved by ~lr per step.
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(p[i], ref.p[i], 1e-6) << i;
    EXPECT_NEAR(m[i], ref.m[i], 1e-6 * (1 + std::abs(ref.m[i]))) << i;
    EXPECT_NEAR(v[i], ref.v[i], 1e-6 * (1 + std::abs(ref.v[i]))) << i;
  }
}

TEST(AdamW, ZeroGradients_DecayOnlyTheDecaySegments) {
  const AdamWConfig config;
  std::vector<float> p(10, 2.0f), g(10, 0.0f), m(10, 0.0f), v(10, 0.0f);
  adamw_update(config, AdamWStep{0.01f, 1, 1.0f}, p, g, m, v, kSegments);
  for (std::size_t i = 0; i < 10; ++i) {
    const bool decays = i < 4 || i >= 7;
    // Decay: p - lr * wd * p = 2 * (1 - 1e-3) in float; no decay: exactly unchanged.
    EXPECT_FLOAT_EQ(p[i], decays ? 2.0f * (1.0f - 0.01f * 0.1f) : 2.0f) << i;
  }
}

TEST(AdamW, ResultDoesNotDependOnThreadCount) {
  const std::size_t n = 100'003;
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::cos(0.001 * static_cast<double>(i)));
  const std::vector<DecaySegment> segments = {{0, 40'000, true}, {40'000, 3, false}, {40'003, 60'000, true}};
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f);
    for (int t = 1; t <= 3; ++t) adamw_update(AdamWConfig{}, AdamWStep{1e-3f, t, 1.0f}, p, g, m, v, segments);
    return p;
  };
  const auto one = run(1);
  const auto two = run(2);
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(one, two);
}

TEST(AdamW, SegmentsThatDoNotTileTheSpan_AreInternalErrors) {
  std::vector<float> p(10), g(10), m(10), v(10);
  const std::vector<DecaySegment> gap = {{0, 4, true}, {5, 5, false}};
  const std::vector<DecaySegment> short_cover = {{0, 9, true}};
  EXPECT_THROW(adamw_update(AdamWConfig{}, AdamWStep{}, p, g, m, v, gap), Error);
  EXPECT_THROW(adamw_update(AdamWConfig{}, AdamWStep{}, p, g, m, v, short_cover), Error);
  EXPECT_THROW(validate(AdamWConfig{.beta1 = 1.0f}), Error);
}

}  // namespace
}  // namespace hsdp::optim
