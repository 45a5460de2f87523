#include "hsdp/optim/loss_scaler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {
namespace {

// Scales are powers of two, so every comparison below is exact.
TEST(LossScaler, StartsAt65536_HalvesAndSkipsOnInf_DoublesAfter2000GoodSteps) {
  LossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) ASSERT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.state(), (LossScalerState{65536.0f, 0, 1}));
}

TEST(LossScaler, InfResetsTheGoodStepCount) {
  LossScaler scaler;
  for (int i = 0; i < 1500; ++i) scaler.update(false);
  scaler.update(true);
  for (int i = 0; i < 1999; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 65536.0f);
}

TEST(LossScaler, NeverGoesBelowMinScale) {
  LossScaler scaler;
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1.0f);
  EXPECT_EQ(scaler.state().skipped_steps, 40);
}

TEST(LossScaler, RestoredStateContinuesIdentically_AndInvalidStateIsCheckpointError) {
  LossScaler a;
  for (int i = 0; i < 1234; ++i) a.update(i % 500 == 7);
  LossScaler b;
  b.restore(a.state());
  for (int i = 0; i < 5000; ++i) {
    const bool inf = i % 1777 == 3;
    ASSERT_EQ(a.update(inf), b.update(inf));
    ASSERT_EQ(a.state(), b.state());
  }
  try {
    b.restore(LossScalerState{0.5f, 0, 0});
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::checkpoint);
  }
  EXPECT_THROW(LossScaler(LossScalerConfig{.backoff_factor = 1.5f}), Error);
}

TEST(HasInfOrNan, FindsInfAndNanAnywhere) {
  std::vector<float> x(10'000, 1.0f);
  EXPECT_FALSE(has_inf_or_nan(x));
  x[9'999] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_inf_or_nan(x));
  x[9'999] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_inf_or_nan(x));
  x[9'999] = 1.0f;
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(has_inf_or_nan(x));
  x[3] = std::numeric_limits<float>::max();
  EXPECT_FALSE(has_inf_or_nan(x));
}

}  // namespace
}  // namespace hsdp::optim
