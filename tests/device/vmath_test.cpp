#include "hsdp/device/vmath.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace hsdp::device {
namespace {

// Relative error against std::exp in double, over the range softmax and GELU use. 4 float ulps
// (4 * 2^-23 ~ 4.8e-7) bounds the Cephes polynomial plus the final scaling.
TEST(ExpApprox, IsWithinFourUlpsOfStdExp_OverTheUsedRange) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double exact = std::exp(static_cast<double>(xf));
    const double rel = std::abs(static_cast<double>(exp_approx(xf)) - exact) / exact;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 4.0 * 0x1.0p-23);
}

TEST(ExpApprox, ClampsExtremesToFiniteValues) {
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));
  EXPECT_GE(exp_approx(-1000.0f), 0.0f);
  EXPECT_LT(exp_approx(-1000.0f), 1e-37f);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
}

TEST(Vexp, DoubleIsStdExp) { EXPECT_EQ(vexp<double>(0.3), std::exp(0.3)); }

}  // namespace
}  // namespace hsdp::device
