#include "hsdp/model/init.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hsdp/model/rng.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::model {
namespace {

GptConfig config(int n_layer) {
  GptConfig c;
  c.n_layer = n_layer;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 250;
  c.padded_vocab_size = 256;
  return c;
}

TEST(Rng, SameSeed_GivesSameStream_DifferentNames_DifferentStreams) {
  Rng a(stream_seed(7, "x")), b(stream_seed(7, "x")), c(stream_seed(7, "y"));
  for (int i = 0; i < 100; ++i) {
    const double va = a.normal();
    EXPECT_EQ(va, b.normal());
    EXPECT_NE(va, c.normal());
  }
}

// 200000 samples: the standard error of the mean is 0.0022 and of the variance 0.0032; 0.01 is > 3 sigma.
TEST(Rng, NormalHasZeroMeanUnitVariance) {
  Rng r(42);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = r.normal();
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
}

double std_of(std::span<const float> v) {
  double sq = 0;
  for (const float x : v) sq += static_cast<double>(x) * x;
  return std::sqrt(sq / static_cast<double>(v.size()));
}

TEST(Init, FollowsNanoGpt_StdsOnesZerosAndZeroPaddedRows) {
  const ModelLayout layout(config(2));
  UnitBuffers<float> params(layout);
  params.init(layout, 1234);
  const ParamInfo& wte = layout.param("transformer.wte.weight");
  const auto wte_values = params.param(wte);
  // 250 * 64 = 16000 samples: the sample std is within ~1% of 0.02; 5% is safe.
  EXPECT_NEAR(std_of(wte_values.first(wte.logical_numel())), 0.02, 0.001);
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i) ASSERT_EQ(wte_values[i], 0.0f);
  const double residual_std = 0.02 / std::sqrt(4.0);
  EXPECT_NEAR(std_of(params.param(layout.param("transformer.h.1.mlp.c_proj.weight"))), residual_std,
              0.05 * residual_std);
  EXPECT_NEAR(std_of(params.param(layout.param("transformer.h.0.attn.c_proj.weight"))), residual_std,
              0.05 * residual_std);
  EXPECT_NEAR(std_of(params.param(layout.param("transformer.h.0.mlp.c_fc.weight"))), 0.02, 0.001);
  for (const float v : params.param(layout.param("transformer.h.0.ln_1.weight"))) ASSERT_EQ(v, 1.0f);
  for (const float v : params.param(layout.param("transformer.h.0.attn.c_attn.bias"))) ASSERT_EQ(v, 0.0f);
  for (const float v : params.param(layout.param("transformer.ln_f.bias"))) ASSERT_EQ(v, 0.0f);
}

TEST(Init, ParamValues_DoNotDependOnTheUnitLayout) {
  const ModelLayout two(config(2)), three(config(3));
  UnitBuffers<float> a(two), b(three);
  a.init(two, 99);
  b.init(three, 99);
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.1.attn.c_attn.weight",
                           "transformer.h.1.mlp.c_fc.weight"}) {
    const auto va = a.param(two.param(name));
    const auto vb = b.param(three.param(name));
    ASSERT_EQ(va.size(), vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << name;
  }
}

TEST(Init, FloatValues_AreTheDoubleValuesRounded_AndSeedsDiffer) {
  const ModelLayout layout(config(2));
  UnitBuffers<float> f(layout), g(layout);
  UnitBuffers<double> d(layout);
  f.init(layout, 5);
  d.init(layout, 5);
  g.init(layout, 6);
  const int unit = ModelLayout::block_unit(1);
  bool any_differs = false;
  for (std::size_t i = 0; i < f.unit(unit).size(); ++i) {
    ASSERT_EQ(f.unit(unit)[i], static_cast<float>(d.unit(unit)[i]));
    any_differs = any_differs || f.unit(unit)[i] != g.unit(unit)[i];
  }
  EXPECT_TRUE(any_differs);
}

}  // namespace
}  // namespace hsdp::model
