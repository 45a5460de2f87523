#include "hsdp/quant/fused.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
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

// m quantized inputs of n elements: input k mixes every kind of block (shifted so blocks of different
// kinds meet) or is plain random data with a magnitude of its own.
std::vector<QuantizedBuffer> make_inputs(std::size_t m, std::size_t block, std::size_t tail, Bits bits) {
  const std::vector<float> mixed = mixed_blocks(block, tail, bits, 99);
  std::vector<QuantizedBuffer> inputs;
  for (std::size_t k = 0; k < m; ++k) {
    std::vector<float> x = random_values(mixed.size(), 0.5f + static_cast<float>(k), static_cast<std::uint32_t>(k));
    // Huge blocks only in input 0, so that the sums stay finite.
    if (k == 0) x = mixed;
    if (k == 2) std::rotate(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(block / 2), x.end());
    inputs.emplace_back(x.size(), QuantSpec{bits, block});
    quantize(std::span<const float>(x), inputs.back());
  }
  return inputs;
}

std::vector<QuantizedView> views(const std::vector<QuantizedBuffer>& inputs) {
  std::vector<QuantizedView> v;
  for (const auto& q : inputs) v.push_back(q.view());
  return v;
}

// The unfused reference: dequantize each input to fp32, add them left to right in fp32.
std::vector<float> unfused_sum(const std::vector<QuantizedBuffer>& inputs) {
  const std::size_t n = inputs.front().count();
  std::vector<float> sum(n), term(n);
  dequantize(inputs[0].view(), std::span<float>(sum));
  for (std::size_t k = 1; k < inputs.size(); ++k) {
    dequantize(inputs[k].view(), std::span<float>(term));
    for (std::size_t i = 0; i < n; ++i) sum[i] += term[i];
  }
  return sum;
}

struct FusedCase {
  Bits in;
  Bits out;
  std::size_t inputs;
};
void PrintTo(const FusedCase& c, std::ostream* out) {
  *out << to_string(c.in) << "_to_" << to_string(c.out) << "_" << c.inputs << "_inputs";
}

class FusedReduce : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedReduce, RequantizedSum_EqualsTheUnfusedSequence_BitForBit) {
  const FusedCase c = GetParam();
  for (const std::size_t block : {std::size_t{256}, kDefaultBlock}) {
    for (const std::size_t tail : {std::size_t{0}, std::size_t{13}}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", tail " + std::to_string(tail));
      const auto inputs = make_inputs(c.inputs, block, tail, c.in);
      const std::size_t n = inputs.front().count();
      QuantizedBuffer fused(n, {c.out, block}), unfused(n, {c.out, block});
      reduce_requantize(views(inputs), fused);
      const std::vector<float> sum = unfused_sum(inputs);
      quantize(std::span<const float>(sum), unfused);
      EXPECT_TRUE(same_quantized(fused, unfused));
    }
  }
}

TEST_P(FusedReduce, Fp32Sum_EqualsTheUnfusedSequence_BitForBit) {
  const FusedCase c = GetParam();
  const auto inputs = make_inputs(c.inputs, 512, 21, c.in);
  std::vector<float> fused(inputs.front().count());
  reduce_dequantize(views(inputs), std::span<float>(fused));
  const std::vector<float> unfused = unfused_sum(inputs);
  EXPECT_TRUE(same_bytes(std::span<const float>(fused), std::span<const float>(unfused)));
}

TEST_P(FusedReduce, ResultDoesNotDependOnTheNumberOfThreads) {
  const FusedCase c = GetParam();
  std::vector<QuantizedBuffer> inputs;
  for (std::size_t k = 0; k < c.inputs; ++k) {
    const std::vector<float> x = random_values(kDefaultBlock * 33 + 1, 1.0f, static_cast<std::uint32_t>(10 + k));
    inputs.emplace_back(x.size(), QuantSpec{c.in, kDefaultBlock});
    quantize(std::span<const float>(x), inputs.back());
  }
  const std::size_t n = inputs.front().count();
  QuantizedBuffer one(n, {c.out, kDefaultBlock}), two(n, {c.out, kDefaultBlock});
  std::vector<float> sum_one(n), sum_two(n);
  {
    OmpThreads threads(1);
    reduce_requantize(views(inputs), one);
    reduce_dequantize(views(inputs), std::span<float>(sum_one));
  }
  {
    OmpThreads threads(2);
    reduce_requantize(views(inputs), two);
    reduce_dequantize(views(inputs), std::span<float>(sum_two));
  }
  EXPECT_TRUE(same_quantized(one, two));
  EXPECT_TRUE(same_bytes(std::span<const float>(sum_one), std::span<const float>(sum_two)));
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedReduce,
                         ::testing::Values(FusedCase{Bits::int8, Bits::int8, 2}, FusedCase{Bits::int8, Bits::int8, 3},
                                           FusedCase{Bits::int4, Bits::int4, 2}, FusedCase{Bits::int4, Bits::int4, 3},
                                           FusedCase{Bits::int8, Bits::int4, 2}, FusedCase{Bits::int4, Bits::int8, 3}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.in)) + "_to_" +
                                  std::string(to_string(info.param.out)) + "_" + std::to_string(info.param.inputs) +
                                  "_inputs";
                         });

TEST(FusedReduceErrors, ASumThatOverflows_RaisesTheSameErrorAsQuantizingIt) {
  std::vector<float> x(3000, 1.0f);
  x[2100] = FLT_MAX;
  QuantizedBuffer a(x.size(), {Bits::int8, 1024}), b(x.size(), {Bits::int8, 1024});
  quantize(std::span<const float>(x), a);
  quantize(std::span<const float>(x), b);
  const std::vector<QuantizedView> inputs = {a.view(), b.view()};
  QuantizedBuffer out(x.size(), {Bits::int8, 1024});
  try {
    reduce_requantize(inputs, out);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
    EXPECT_NE(std::string(e.what()).find("non-finite value at element 2100"), std::string::npos) << e.what();
  }
}

TEST(FusedReduceErrors, InputsOfDifferentBlocksOrBits_AreAnInternalError) {
  const std::vector<float> x = random_values(1000, 1.0f, 1);
  QuantizedBuffer a(x.size(), {Bits::int8, 256}), b(x.size(), {Bits::int4, 256}), c(x.size(), {Bits::int8, 128});
  quantize(std::span<const float>(x), a);
  quantize(std::span<const float>(x), b);
  quantize(std::span<const float>(x), c);
  QuantizedBuffer out(x.size(), {Bits::int8, 256});
  EXPECT_THROW(reduce_requantize(std::vector<QuantizedView>{a.view(), b.view()}, out), Error);
  EXPECT_THROW(reduce_requantize(std::vector<QuantizedView>{a.view(), c.view()}, out), Error);
  EXPECT_THROW(reduce_requantize(std::vector<QuantizedView>{}, out), Error);
  QuantizedBuffer other_block(x.size(), {Bits::int8, 128});
  EXPECT_THROW(reduce_requantize(std::vector<QuantizedView>{a.view(), a.view()}, other_block), Error);
}

}  // namespace
}  // namespace hsdp::quant
