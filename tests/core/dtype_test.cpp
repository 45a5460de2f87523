#include "hsdp/core/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hsdp/core/error.hpp"

namespace hsdp {

TEST(DType, SizesAreTheStorageSizes) {
  EXPECT_EQ(size_of(DType::f64), 8u);
  EXPECT_EQ(size_of(DType::f32), 4u);
  EXPECT_EQ(size_of(DType::bf16), 2u);
  EXPECT_EQ(size_of(DType::f16), 2u);
  EXPECT_EQ(size_of(DType::i8), 1u);
  EXPECT_EQ(size_of(DType::u8), 1u);
}

TEST(DType, ParseAcceptsBothSpellingsAndNamesTheKeyOnError) {
  EXPECT_EQ(parse_dtype("fp32", "precision.param"), DType::f32);
  EXPECT_EQ(parse_dtype("bf16", "precision.param"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16", "precision.param"), DType::f16);
  try {
    parse_dtype("fp8", "precision.param");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("precision.param"), std::string::npos);
  }
}

TEST(Bf16, RepresentableValuesRoundTripExactly) {
  for (const float x : {0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 65280.0f, -1.0e-3f * 0.0f}) {
    EXPECT_EQ(bf16_to_float(float_to_bf16(x)), x);
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7 (bf16 has 7 mantissa bits): ties go to the even (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3*2^-8 lies between 1+2^-7 (odd) and 1+2^-6 (even): goes up to the even one.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Relative error of rounding is at most 2^-8.
  for (float x = 0.001f; x < 1000.0f; x *= 1.37f) {
    EXPECT_LE(std::fabs(bf16_to_float(float_to_bf16(x)) - x), x * 0x1p-8f);
  }
}

TEST(Bf16, NanStaysNanAndInfStaysInf) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(F16, RoundTripsAndOverflowsToInfinity) {
  EXPECT_EQ(f16_to_float(float_to_f16(1.5f)), 1.5f);
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);  // largest finite half
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(1.0e6f))));
  // f16 has 10 mantissa bits: relative rounding error at most 2^-11 for normal values.
  for (float x = 0.01f; x < 60000.0f; x *= 1.37f) {
    EXPECT_LE(std::fabs(f16_to_float(float_to_f16(x)) - x), x * 0x1p-11f);
  }
}

}  // namespace hsdp
