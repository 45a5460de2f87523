#include "hsdp/quant/blockwise.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "quant_test_util.hpp"

namespace hsdp::quant {
namespace {

using test::mixed_blocks;
using test::OmpThreads;
using test::random_values;
using test::same_bytes;
using test::same_quantized;
using test::unpacked;

// Checks every element of a round trip, with no tolerance beyond the definition: q * scale is exact in
// fp32 and the difference of two nearby floats is exact in double, so |x' - x| <= scale / 2 is tested
// exactly; q must equal round-to-nearest-even of the exact quotient x / scale (long double is exact
// enough: x / scale is either a half integer or >= 2^-25 away from one).
void expect_round_trip_exact(std::span<const float> x, const QuantizedBuffer& q, std::span<const float> back) {
  const QuantSpec spec = q.spec();
  const int qm = qmax(spec.bits);
  std::size_t failures = 0;
  for (std::size_t b = 0; b < q.scales().size(); ++b) {
    const std::size_t begin = b * spec.block;
    const std::size_t end = std::min(x.size(), begin + spec.block);
    const float scale = q.scales()[b];
    float amax = 0.0f;
    for (std::size_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    if (amax == 0.0f) {
      EXPECT_EQ(scale, 0.0f) << "block " << b;
    } else {
      EXPECT_GT(scale, 0.0f) << "block " << b;
      // Within 2^-16 of max|x| / qmax (the 17- or 21-bit rounding), and at or above it unless near FLT_MAX.
      const double ideal = static_cast<double>(amax) / qm;
      if (scale >= FLT_MIN) {
        EXPECT_LE(std::fabs(scale / ideal - 1.0), 0x1p-16) << "block " << b;
      }
      if (amax < 0.99f * FLT_MAX) {
        EXPECT_GE(static_cast<double>(scale) * qm, static_cast<double>(amax)) << "block " << b;
      }
    }
    for (std::size_t i = begin; i < end; ++i) {
      const int value = unpacked(q.packed(), spec.bits, i);
      long double expected = 0.0L;
      if (scale > 0.0f) {
        expected = std::nearbyintl(static_cast<long double>(x[i]) / static_cast<long double>(scale));
        expected = std::clamp<long double>(expected, -qm, qm);
      }
      const double error = std::fabs(static_cast<double>(back[i]) - static_cast<double>(x[i]));
      const bool ok = std::isfinite(back[i]) && static_cast<long double>(value) == expected &&
                      static_cast<double>(back[i]) == static_cast<double>(value) * static_cast<double>(scale) &&
                      error <= 0.5 * static_cast<double>(scale);
      if (!ok && ++failures <= 5) {
        ADD_FAILURE() << "element " << i << " (block " << b << "): x = " << x[i] << " scale = " << scale
                      << " q = " << value << " (expected " << static_cast<double>(expected) << ") x' = " << back[i]
                      << " |x' - x| = " << error;
      }
    }
  }
  EXPECT_EQ(failures, 0u);
}

std::vector<float> round_trip(std::span<const float> x, const QuantizedBuffer& q) {
  std::vector<float> back(x.size());
  dequantize(q.view(), std::span<float>(back));
  return back;
}

class BlockwiseRoundTrip : public ::testing::TestWithParam<Bits> {};

TEST_P(BlockwiseRoundTrip, EveryKindOfBlock_IsWithinHalfAScale_AndRoundsToNearestEven) {
  const Bits bits = GetParam();
  for (const std::size_t block : {std::size_t{256}, std::size_t{2}, kDefaultBlock}) {
    for (const std::size_t tail : {std::size_t{0}, std::size_t{1}, std::size_t{77}}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", tail " + std::to_string(tail));
      const std::vector<float> x = mixed_blocks(block, tail, bits, 42);
      QuantizedBuffer q(x.size(), {bits, block});
      quantize(std::span<const float>(x), q);
      expect_round_trip_exact(x, q, round_trip(x, q));
    }
  }
}

TEST_P(BlockwiseRoundTrip, NearTiesUnderManyScales_RoundToNearestEven_FromDenormalToHuge) {
  // 2000 blocks, each with a random scale (17-bit significand, exponent from denormal to 1e30) and values
  // at, or within 2^-17..2^-24 relative of, half-integer multiples of it: where a multiply by an fp32
  // inverse, or a double one without the snap, rounds the wrong way.
  const Bits bits = GetParam();
  const int qm = qmax(bits);
  constexpr std::size_t kBlock = 64;
  std::mt19937 rng(2024);
  std::vector<float> x;
  for (int b = 0; b < 2000; ++b) {
    const std::uint32_t exponent = 1 + rng() % 225;  // biased: 2^-126 .. 2^98
    std::uint32_t pattern = (exponent << 23) | (static_cast<std::uint32_t>(rng()) & 0x7fff80u);
    if (b % 10 == 0) pattern = static_cast<std::uint32_t>(rng()) & 0x3fff80u;  // a denormal scale
    const float s = std::bit_cast<float>(pattern);
    x.push_back(static_cast<float>(qm) * s);
    for (std::size_t i = 1; i < kBlock; ++i) {
      const double k = static_cast<double>(static_cast<int>(rng() % static_cast<std::uint32_t>(2 * qm)) - qm) + 0.5;
      const double offsets[] = {0.0, 0x1p-17, -0x1p-17, 0x1p-20, -0x1p-20, 0x1p-24, -0x1p-24};
      const float v = static_cast<float>((k + offsets[rng() % 7]) * static_cast<double>(s));
      x.push_back(rng() % 3 == 0 ? std::nextafter(v, rng() % 2 ? 1.0f : -1.0f) : v);
    }
  }
  QuantizedBuffer q(x.size(), {bits, kBlock});
  quantize(std::span<const float>(x), q);
  expect_round_trip_exact(x, q, round_trip(x, q));
}

TEST_P(BlockwiseRoundTrip, CountsThatAreNotMultiplesOfEightOrTwo_Work) {
  const Bits bits = GetParam();
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{9}, std::size_t{2049},
                              std::size_t{4095}, std::size_t{70001}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> x = random_values(n, 2.0f, static_cast<std::uint32_t>(n));
    QuantizedBuffer q(n, {bits, kDefaultBlock});
    quantize(std::span<const float>(x), q);
    expect_round_trip_exact(x, q, round_trip(x, q));
    if (bits == Bits::int4 && n % 2 != 0) {
      EXPECT_EQ(q.packed().back() >> 4, 0) << "the unused high nibble is 0";
    }
  }
}

TEST_P(BlockwiseRoundTrip, Bf16AndFp16Inputs_QuantizeLikeTheirFp32Values) {
  const Bits bits = GetParam();
  const std::vector<float> source = mixed_blocks(512, 33, bits, 7);
  std::vector<bf16_t> xb(source.size());
  std::vector<f16_t> xh(source.size());
  std::vector<float> xb_f(source.size()), xh_f(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    // FLT_MAX rounds to Inf in bf16: keep the near-FLT_MAX block below it.
    xb[i] = float_to_bf16(std::clamp(source[i], -3.0e38f, 3.0e38f));
    xb_f[i] = bf16_to_float(xb[i]);
    // fp16 overflows beyond 65504: scale the huge blocks down into its range.
    const float h = std::fabs(source[i]) > 6.0e4f ? source[i] * 1.0e-34f : source[i];
    xh[i] = float_to_f16(h);
    xh_f[i] = f16_to_float(xh[i]);
  }
  ASSERT_TRUE(all_finite(std::span<const bf16_t>(xb)));
  ASSERT_TRUE(all_finite(std::span<const f16_t>(xh)));
  const QuantSpec spec{bits, 512};
  QuantizedBuffer qb(source.size(), spec), qb_f(source.size(), spec), qh(source.size(), spec),
      qh_f(source.size(), spec);
  quantize(std::span<const bf16_t>(xb), qb);
  quantize(std::span<const float>(xb_f), qb_f);
  quantize(std::span<const f16_t>(xh), qh);
  quantize(std::span<const float>(xh_f), qh_f);
  EXPECT_TRUE(same_quantized(qb, qb_f));
  EXPECT_TRUE(same_quantized(qh, qh_f));
  expect_round_trip_exact(xb_f, qb, round_trip(xb_f, qb));
  expect_round_trip_exact(xh_f, qh, round_trip(xh_f, qh));
}

TEST_P(BlockwiseRoundTrip, Bf16AndFp16Outputs_AreTheFp32DequantizationRoundedToNearestEven) {
  const Bits bits = GetParam();
  const std::vector<float> x = random_values(5000, 3.0f, 11);
  QuantizedBuffer q(x.size(), {bits, 1024});
  quantize(std::span<const float>(x), q);
  const std::vector<float> back = round_trip(x, q);
  std::vector<bf16_t> back_b(x.size());
  std::vector<f16_t> back_h(x.size());
  dequantize(q.view(), std::span<bf16_t>(back_b));
  dequantize(q.view(), std::span<f16_t>(back_h));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(back_b[i].bits, float_to_bf16(back[i]).bits) << i;
    ASSERT_EQ(back_h[i].bits, float_to_f16(back[i]).bits) << i;
  }
}

TEST_P(BlockwiseRoundTrip, ResultDoesNotDependOnTheNumberOfThreads) {
  const Bits bits = GetParam();
  const std::vector<float> x = random_values(kDefaultBlock * 40 + 3, 1.0f, 5);
  std::vector<bf16_t> xb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
  const QuantSpec spec{bits, kDefaultBlock};
  QuantizedBuffer one(x.size(), spec), two(x.size(), spec), one_b(x.size(), spec), two_b(x.size(), spec);
  std::vector<float> back_one(x.size()), back_two(x.size());
  {
    OmpThreads threads(1);
    quantize(std::span<const float>(x), one);
    quantize(std::span<const bf16_t>(xb), one_b);
    dequantize(one.view(), std::span<float>(back_one));
  }
  {
    OmpThreads threads(2);
    quantize(std::span<const float>(x), two);
    quantize(std::span<const bf16_t>(xb), two_b);
    dequantize(two.view(), std::span<float>(back_two));
  }
  EXPECT_TRUE(same_quantized(one, two));
  EXPECT_TRUE(same_quantized(one_b, two_b));
  EXPECT_TRUE(same_bytes(std::span<const float>(back_one), std::span<const float>(back_two)));
}

INSTANTIATE_TEST_SUITE_P(Bits, BlockwiseRoundTrip, ::testing::Values(Bits::int8, Bits::int4),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(BlockwiseDType, RunTimeElementTypes_GiveTheSameBytesAsTheTypedCalls) {
  const std::vector<float> x = random_values(3001, 1.0f, 8);
  std::vector<bf16_t> xb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
  const QuantSpec spec{Bits::int4, 512};
  QuantizedBuffer typed(x.size(), spec), erased(x.size(), spec);
  quantize(std::span<const bf16_t>(xb), typed);
  quantize(static_cast<const void*>(xb.data()), DType::bf16, erased);
  EXPECT_TRUE(same_quantized(typed, erased));
  quantize(std::span<const float>(x), typed);
  quantize(static_cast<const void*>(x.data()), DType::f32, erased);
  EXPECT_TRUE(same_quantized(typed, erased));
  std::vector<f16_t> back_typed(x.size()), back_erased(x.size());
  dequantize(typed.view(), std::span<f16_t>(back_typed));
  dequantize(typed.view(), static_cast<void*>(back_erased.data()), DType::f16);
  EXPECT_TRUE(same_bytes(std::span<const f16_t>(back_typed), std::span<const f16_t>(back_erased)));
  EXPECT_THROW(quantize(static_cast<const void*>(x.data()), DType::i8, erased), Error);
}

TEST(BlockwiseLayout, PackedSizes_AreNBytesForInt8_HalfRoundedUpForInt4_AndOneScalePerBlock) {
  EXPECT_EQ(packed_bytes(0, Bits::int8), 0u);
  EXPECT_EQ(packed_bytes(4097, Bits::int8), 4097u);
  EXPECT_EQ(packed_bytes(4097, Bits::int4), 2049u);
  EXPECT_EQ(packed_bytes(4096, Bits::int4), 2048u);
  EXPECT_EQ(packed_bytes(1, Bits::int4), 1u);
  EXPECT_EQ(scale_count(4097, 2048), 3u);
  EXPECT_EQ(scale_count(4096, 2048), 2u);
  EXPECT_EQ(scale_count(1, 2048), 1u);
  EXPECT_EQ(scale_count(0, 2048), 0u);
  EXPECT_EQ(quantized_bytes(4097, {Bits::int4, 2048}), 2049u + 3u * 4u);
  const QuantizedBuffer q(4097, {Bits::int4, 2048});
  EXPECT_EQ(q.packed().size(), 2049u);
  EXPECT_EQ(q.scales().size(), 3u);
  EXPECT_EQ(q.size_bytes(), quantized_bytes(4097, {Bits::int4, 2048}));
}

TEST(BlockwiseLayout, Int4PacksTheLowNibbleFirstInTwosComplement_AndInt8IsTwosComplement) {
  // max|x| = 7 gives scale 1 for int4 (7 / 7), so q = x.
  const std::vector<float> x = {7.0f, -7.0f, 1.0f, -1.0f, 3.0f};
  QuantizedBuffer q4(x.size(), {Bits::int4, 2048});
  quantize(std::span<const float>(x), q4);
  ASSERT_EQ(q4.scales()[0], 1.0f);
  EXPECT_EQ(q4.packed()[0], 0x97);  // 7 low, -7 = 0x9 high
  EXPECT_EQ(q4.packed()[1], 0xf1);  // 1 low, -1 = 0xf high
  EXPECT_EQ(q4.packed()[2], 0x03);  // 3 low, unused high nibble 0
  const std::vector<float> y = {127.0f, -127.0f, -1.0f, 0.0f};
  QuantizedBuffer q8(y.size(), {Bits::int8, 2048});
  quantize(std::span<const float>(y), q8);
  ASSERT_EQ(q8.scales()[0], 1.0f);
  EXPECT_EQ(q8.packed()[0], 0x7f);
  EXPECT_EQ(q8.packed()[1], 0x81);
  EXPECT_EQ(q8.packed()[2], 0xff);
  EXPECT_EQ(q8.packed()[3], 0x00);
}

TEST(BlockScale, KeepsQTimesScaleExactAndFinite_FromTheSmallestDenormalToFltMax) {
  const float denorm_min = std::numeric_limits<float>::denorm_min();
  for (const Bits bits : {Bits::int8, Bits::int4}) {
    const int qm = qmax(bits);
    for (const float amax : {denorm_min, 3 * denorm_min, 1.0e-40f, FLT_MIN, 1.0e-30f, 1.0f, 0.1f, 1.0e30f,
                             std::nextafter(FLT_MAX, 0.0f), FLT_MAX}) {
      const float s = block_scale(amax, bits);
      ASSERT_GT(s, 0.0f) << amax;
      ASSERT_TRUE(std::isfinite(static_cast<float>(qm) * s)) << amax;
      // |x| / scale <= qmax + 1/2, so the clamp never moves a value by more than half a scale.
      EXPECT_LE(static_cast<double>(amax), (qm + 0.5) * static_cast<double>(s)) << amax;
      for (int k = 1; k <= qm; ++k) {
        EXPECT_EQ(static_cast<double>(static_cast<float>(k) * s), static_cast<double>(k) * static_cast<double>(s))
            << "q * scale rounds for amax " << amax << ", q " << k;
      }
    }
    EXPECT_EQ(block_scale(0.0f, bits), 0.0f);
  }
}

TEST(BlockwiseNonFinite, NanAndInfInputs_RaiseAnInternalErrorNamingTheFirstElement) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Bits bits : {Bits::int8, Bits::int4}) {
    for (const float bad : {nan, inf, -inf}) {
      std::vector<float> x = random_values(kDefaultBlock * 20 + 5, 1.0f, 3);
      x[kDefaultBlock * 7 + 11] = bad;
      x[kDefaultBlock * 12] = nan;  // a later one in another block: the first is named
      EXPECT_FALSE(all_finite(std::span<const float>(x)));
      std::vector<bf16_t> xb(x.size());
      std::vector<f16_t> xh(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        xb[i] = float_to_bf16(x[i]);
        xh[i] = float_to_f16(x[i]);
      }
      EXPECT_FALSE(all_finite(std::span<const bf16_t>(xb)));
      EXPECT_FALSE(all_finite(std::span<const f16_t>(xh)));
      const std::string expected = "non-finite value at element " + std::to_string(kDefaultBlock * 7 + 11);
      QuantizedBuffer q(x.size(), {bits, kDefaultBlock});
      auto expect_error = [&](auto&& call) {
        for (const int threads : {1, 2}) {
          OmpThreads scope(threads);
          try {
            call();
            ADD_FAILURE() << "expected an Error";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::internal);
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
          }
        }
      };
      expect_error([&] { quantize(std::span<const float>(x), q); });
      expect_error([&] { quantize(std::span<const bf16_t>(xb), q); });
      expect_error([&] { quantize(std::span<const f16_t>(xh), q); });
    }
  }
}

TEST(BlockwiseNonFinite, AllFiniteIsTrueForFiniteExtremes) {
  const std::vector<float> x = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, std::numeric_limits<float>::denorm_min()};
  EXPECT_TRUE(all_finite(std::span<const float>(x)));
  const std::vector<bf16_t> xb = {float_to_bf16(3.0e38f), float_to_bf16(-1.0f)};
  EXPECT_TRUE(all_finite(std::span<const bf16_t>(xb)));
  const std::vector<f16_t> xh = {float_to_f16(65504.0f), float_to_f16(-65504.0f)};
  EXPECT_TRUE(all_finite(std::span<const f16_t>(xh)));
  EXPECT_TRUE(all_finite(std::span<const float>()));
}

TEST(BlockwiseErrors, ABlockThatIsZeroOrOdd_IsAConfigError) {
  for (const std::size_t block : {std::size_t{0}, std::size_t{3}, std::size_t{2047}}) {
    try {
      QuantizedBuffer q(10, {Bits::int8, block});
      FAIL() << "expected an Error for block " << block;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_NE(std::string(e.what()).find(std::to_string(block)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_bits("int4", "quant.grad_bits"), Bits::int4);
  EXPECT_THROW(parse_bits("int3", "quant.grad_bits"), Error);
}

TEST(BlockwiseErrors, BuffersOfTheWrongSize_AreAnInternalError) {
  const std::vector<float> x(100, 1.0f);
  QuantizedBuffer q(99, {Bits::int8, 64});
  EXPECT_THROW(quantize(std::span<const float>(x), q), Error);
  std::vector<float> back(101);
  EXPECT_THROW(dequantize(q.view(), std::span<float>(back)), Error);
}

}  // namespace
}  // namespace hsdp::quant
