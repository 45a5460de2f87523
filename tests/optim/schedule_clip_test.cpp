#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/lr_schedule.hpp"

namespace hsdp::optim {
namespace {

// Closed-form values: 1e-18 absolute (~2e-15 relative to lr = 6e-4), the rounding of a cos and a few products.
constexpr double kTol = 1e-18;

TEST(CosineSchedule, ValuesAtStartWarmupEndMidpointAndMaxSteps) {
  const CosineSchedule s{.lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 100, .max_steps = 1100};
  EXPECT_NO_THROW(validate(s));
  EXPECT_NEAR(learning_rate(s, 0), 6e-4 / 100, kTol);
  EXPECT_NEAR(learning_rate(s, 49), 6e-4 * 50 / 100, kTol);
  EXPECT_NEAR(learning_rate(s, 99), 6e-4, kTol);   // last warmup step reaches lr
  EXPECT_NEAR(learning_rate(s, 100), 6e-4, kTol);  // decay starts at lr
  EXPECT_NEAR(learning_rate(s, 600), (6e-4 + 6e-5) / 2, kTol);
  EXPECT_NEAR(learning_rate(s, 350), 6e-5 + (6e-4 - 6e-5) * 0.5 * (1 + std::cos(std::numbers::pi / 4)), kTol);
  EXPECT_NEAR(learning_rate(s, 1100), 6e-5, kTol);
  EXPECT_NEAR(learning_rate(s, 5000), 6e-5, kTol);
}

TEST(CosineSchedule, NoWarmupStartsAtLr_AndBadSettingsNameTheirKey) {
  const CosineSchedule s{.lr = 1e-3, .min_lr = 0.0, .warmup_steps = 0, .max_steps = 10};
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-3);
  EXPECT_NEAR(learning_rate(s, 5), 5e-4, kTol);
  try {
    validate(CosineSchedule{.lr = 1e-3, .min_lr = 0.0, .warmup_steps = 10, .max_steps = 0});
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("train.steps"), std::string::npos) << e.what();
  }
  // A run shorter than its warmup stays on the warmup line.
  const CosineSchedule short_run{.lr = 1e-3, .min_lr = 0.0, .warmup_steps = 10, .max_steps = 5};
  EXPECT_NO_THROW(validate(short_run));
  EXPECT_NEAR(learning_rate(short_run, 4), 5e-4, kTol);
  EXPECT_THROW(validate(CosineSchedule{.lr = 1e-3, .min_lr = 2e-3, .warmup_steps = 0, .max_steps = 10}), Error);
}

TEST(GradClip, CoefficientIsMaxNormOverNormOnlyAboveMaxNorm) {
  const ClipResult big = clip_coefficient(16.0, 1.0);  // norm 4
  EXPECT_DOUBLE_EQ(big.norm, 4.0);
  EXPECT_FLOAT_EQ(big.coefficient, static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_TRUE(big.finite);
  EXPECT_FLOAT_EQ(clip_coefficient(0.25, 1.0).coefficient, 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(16.0, 0.0).coefficient, 1.0f);  // clipping off
  const ClipResult bad = clip_coefficient(std::numeric_limits<double>::infinity(), 1.0);
  EXPECT_FALSE(bad.finite);
  EXPECT_FLOAT_EQ(bad.coefficient, 1.0f);
}

TEST(GradClip, LocalSquaredSumIsExactForSmallIntegers_AndIndependentOfThreads) {
  std::vector<float> x(100'001);
  double expected = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    expected += x[i] * x[i];
  }
  EXPECT_EQ(local_squared_sum(x), expected);  // integer sums < 2^53 are exact in double
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  omp_set_num_threads(1);
  const double one = local_squared_sum(y);
  omp_set_num_threads(2);
  const double two = local_squared_sum(y);
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(one, two);
  EXPECT_EQ(local_squared_sum(std::span<const float>()), 0.0);
}

}  // namespace
}  // namespace hsdp::optim
