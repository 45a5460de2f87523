#include "hsdp/model/gpt.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gradcheck.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/threads.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::model {
namespace {

using testing::relative_error;

// The tiny config of the whole-model gradient check: L=2, C=8, H=2, V=11 padded to 16.
GptConfig tiny_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 8;
  c.vocab_size = 11;
  c.padded_vocab_size = 16;
  return c;
}

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 64;
  c.vocab_size = 256;
  c.padded_vocab_size = 320;
  return c;
}

std::vector<std::int32_t> token_ids(std::size_t n, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(vocab));
  return ids;
}

template <typename T>
bool bitwise_equal(const UnitBuffers<T>& a, const UnitBuffers<T>& b) {
  for (int u = 0; u < a.num_units(); ++u) {
    if (std::memcmp(a.unit(u).data(), b.unit(u).data(), a.unit(u).size_bytes()) != 0) return false;
  }
  return true;
}

// Every parameter's gradient against central differences of the mean loss, in double. The parameters
// are O(0.3) random values (LayerNorm weights around 1) rather than the 0.02 init, so that every path
// (attention scores included) carries a gradient well above the finite-difference noise.
TEST(Gpt, FullModelBackward_MatchesFiniteDifferences_ForEveryParameter) {
  const ModelLayout layout(tiny_config());
  const int B = 2, T = 5;
  MemoryAccountant accountant;
  Gpt<double> model(layout, B, T, accountant);
  UnitBuffers<double> params(layout), grads(layout);
  for (const ParamInfo& p : layout.params()) {
    const bool is_ln_weight = p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight");
    const auto values = testing::random_values(p.logical_numel(), stream_seed(77, p.name), 0.3, is_ln_weight ? 1.0 : 0.0);
    std::copy(values.begin(), values.end(), params.param(p).begin());  // padded wte rows stay 0
  }
  const auto tokens = token_ids(B * T, 11, 1), targets = token_ids(B * T, 11, 2);
  testing::expect_every_parameter_matches_finite_differences(layout, model, params, grads, tokens, targets);
}

// At init the logits are ~N(0, 0.02^2 * C) ~ 0.16 std, so the loss is ln(V) + O(0.02): within 0.05.
TEST(Gpt, LossAtInit_IsLogVocab) {
  const ModelLayout layout(small_config());
  const int B = 4, T = 32;
  MemoryAccountant accountant;
  Gpt<float> model(layout, B, T, accountant);
  UnitBuffers<float> params(layout);
  params.init(layout, 1337);
  const float loss = model.forward(token_ids(B * T, 256, 3), token_ids(B * T, 256, 4), params.const_pointers());
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

template <typename T>
struct StepResult {
  T loss;
  UnitBuffers<T> grads;
  std::int64_t activations_peak;
};

template <typename T>
StepResult<T> train_step(const ModelLayout& layout, const UnitBuffers<T>& params, bool checkpointing, int B, int Tq) {
  MemoryAccountant accountant;
  StepResult<T> r{T(0), UnitBuffers<T>(layout), 0};
  {
    Gpt<T> model(layout, B, Tq, accountant, checkpointing);
    r.loss = model.forward(token_ids(B * Tq, layout.config().vocab_size, 5),
                           token_ids(B * Tq, layout.config().vocab_size, 6), params.const_pointers());
    model.backward(params.const_pointers(), r.grads.pointers(), T(1));
  }
  r.activations_peak = accountant.peak(MemCategory::activations);
  EXPECT_EQ(accountant.current(MemCategory::activations), 0);  // everything is given back
  return r;
}

TEST(Gpt, ActivationCheckpointing_GivesBitIdenticalLossAndGrads_WithALowerActivationPeak) {
  GptConfig c = small_config();
  c.n_layer = 4;
  const ModelLayout layout(c);
  UnitBuffers<float> params(layout);
  params.init(layout, 11);
  const auto plain = train_step<float>(layout, params, false, 2, 48);
  const auto ckpt = train_step<float>(layout, params, true, 2, 48);
  EXPECT_EQ(std::memcmp(&plain.loss, &ckpt.loss, sizeof(float)), 0);
  EXPECT_TRUE(bitwise_equal(plain.grads, ckpt.grads));
  EXPECT_LT(ckpt.activations_peak, plain.activations_peak);
}

TEST(Gpt, PaddedWteRows_GetExactlyZeroGradient_AndPaddedLogitsNeverChangeTheLoss) {
  const ModelLayout layout(small_config());
  const ParamInfo& wte = layout.param("transformer.wte.weight");
  UnitBuffers<float> params(layout);
  params.init(layout, 21);
  const auto clean = train_step<float>(layout, params, false, 2, 16);
  const auto wte_grad = clean.grads.param(wte);
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i) ASSERT_EQ(wte_grad[i], 0.0f);
  // Garbage in the padded rows (huge values, NaN) reaches neither the loss nor any gradient.
  auto wte_values = params.param(wte);
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i) {
    wte_values[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN() : 1e30f;
  }
  const auto dirty = train_step<float>(layout, params, false, 2, 16);
  EXPECT_EQ(std::memcmp(&clean.loss, &dirty.loss, sizeof(float)), 0);
  EXPECT_TRUE(bitwise_equal(clean.grads, dirty.grads));
}

TEST(Gpt, PerUnitCalls_EqualWholeModelCalls_BitForBit) {
  const ModelLayout layout(small_config());
  const int B = 2, T = 16;
  UnitBuffers<float> params(layout), whole_grads(layout), unit_grads(layout);
  params.init(layout, 31);
  const auto tokens = token_ids(B * T, 256, 7), targets = token_ids(B * T, 256, 8);
  MemoryAccountant accountant;
  Gpt<float> model(layout, B, T, accountant);
  const float whole_loss = model.forward(tokens, targets, params.const_pointers());
  model.backward(params.const_pointers(), whole_grads.pointers(), 0.5f);

  const auto p = params.const_pointers();
  const auto g = unit_grads.pointers();
  const int L = layout.config().n_layer, emb = 0, fin = layout.final_norm_unit();
  model.forward_embedding(tokens, p[emb]);
  for (int i = 0; i < L; ++i) model.forward_block(i, p[ModelLayout::block_unit(i)]);
  const float unit_loss = model.forward_head(targets, p[fin], p[emb]);
  model.backward_head(p[fin], p[emb], g[fin], g[emb], 0.5f);
  for (int i = L - 1; i >= 0; --i) model.backward_block(i, p[ModelLayout::block_unit(i)], g[ModelLayout::block_unit(i)]);
  model.backward_embedding(g[emb]);

  EXPECT_EQ(std::memcmp(&whole_loss, &unit_loss, sizeof(float)), 0);
  EXPECT_TRUE(bitwise_equal(whole_grads, unit_grads));
}

// Two backward passes into the same buffers give twice one pass. In double, to 1e-12 relative: the sums
// differ from 2g only by the rounding of the extra additions (GEMMs add onto C in k-blocks).
TEST(Gpt, Backward_AccumulatesIntoGradients) {
  const ModelLayout layout(small_config());
  const int B = 2, T = 8;
  UnitBuffers<double> params(layout), once(layout), twice(layout);
  params.init(layout, 41);
  const auto tokens = token_ids(B * T, 256, 9), targets = token_ids(B * T, 256, 10);
  MemoryAccountant accountant;
  Gpt<double> model(layout, B, T, accountant);
  model.forward(tokens, targets, params.const_pointers());
  model.backward(params.const_pointers(), once.pointers(), 1.0);
  for (int k = 0; k < 2; ++k) {
    model.forward(tokens, targets, params.const_pointers());
    model.backward(params.const_pointers(), twice.pointers(), 1.0);
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<double> doubled, accumulated(twice.unit(u).begin(), twice.unit(u).end());
    for (const double v : once.unit(u)) doubled.push_back(2 * v);
    EXPECT_LT(relative_error(accumulated, doubled), 1e-12) << layout.unit(u).name;
  }
}

TEST(Gpt, DlossScalesTheGradients) {
  const ModelLayout layout(tiny_config());
  UnitBuffers<double> params(layout), g1(layout), g4(layout);
  params.init(layout, 51);
  const auto tokens = token_ids(10, 11, 11), targets = token_ids(10, 11, 12);
  MemoryAccountant accountant;
  Gpt<double> model(layout, 2, 5, accountant);
  model.forward(tokens, targets, params.const_pointers());
  model.backward(params.const_pointers(), g1.pointers(), 1.0);
  model.forward(tokens, targets, params.const_pointers());
  model.backward(params.const_pointers(), g4.pointers(), 0.25);
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<double> a(g4.unit(u).begin(), g4.unit(u).end()), b;
    for (const double v : g1.unit(u)) b.push_back(0.25 * v);
    EXPECT_LT(relative_error(a, b), 1e-12);  // scaling by a power of two: only rounding of sums differs
  }
}

TEST(Gpt, SameInputs_GiveBitIdenticalResults_RunToRun_AndEvaluateEqualsForward) {
  const ModelLayout layout(small_config());
  UnitBuffers<float> params(layout);
  params.init(layout, 61);
  const auto a = train_step<float>(layout, params, false, 2, 32);
  const auto b = train_step<float>(layout, params, false, 2, 32);
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0);
  EXPECT_TRUE(bitwise_equal(a.grads, b.grads));

  MemoryAccountant accountant;
  Gpt<float> model(layout, 2, 32, accountant);
  const auto tokens = token_ids(64, 256, 5), targets = token_ids(64, 256, 6);
  const float evaluated = model.evaluate(tokens, targets, params.const_pointers());
  EXPECT_EQ(std::memcmp(&evaluated, &a.loss, sizeof(float)), 0);
}

// Kernels and GEMM splits depend on shapes only, never on the thread count.
TEST(Gpt, LossAndGrads_AreBitIdentical_WithOneAndTwoThreads) {
  const ModelLayout layout(small_config());
  UnitBuffers<float> params(layout);
  params.init(layout, 71);
  const auto one = [&] {
    device::ThreadCountScope scope(1);
    return train_step<float>(layout, params, false, 4, 64);
  }();
  const auto two = [&] {
    device::ThreadCountScope scope(2);
    return train_step<float>(layout, params, false, 4, 64);
  }();
  EXPECT_EQ(std::memcmp(&one.loss, &two.loss, sizeof(float)), 0);
  EXPECT_TRUE(bitwise_equal(one.grads, two.grads));
}

TEST(Gpt, TokenOutsideVocabulary_ThrowsDataError) {
  const ModelLayout layout(tiny_config());
  MemoryAccountant accountant;
  Gpt<float> model(layout, 1, 4, accountant);
  UnitBuffers<float> params(layout);
  params.init(layout, 1);
  const std::vector<std::int32_t> good = {1, 2, 3, 4};
  for (const std::int32_t bad : {11, 15, -1}) {
    const std::vector<std::int32_t> ids = {1, 2, bad, 4};
    for (const bool bad_is_target : {false, true}) {
      try {
        model.forward(bad_is_target ? good : ids, bad_is_target ? ids : good, params.const_pointers());
        FAIL() << "expected a data Error for id " << bad;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::data);
        EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Gpt, SeqLenBeyondBlockSize_ThrowsConfigErrorNamingBothKeys) {
  const ModelLayout layout(tiny_config());
  MemoryAccountant accountant;
  try {
    Gpt<float> model(layout, 1, 9, accountant);
    FAIL() << "expected a config Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_EQ(std::string(e.what()), "train.seq_len (9) exceeds model.block_size (8)");
  }
  EXPECT_THROW(Gpt<float>(layout, 0, 4, accountant), Error);
}

TEST(Gpt, Activations_AreChargedToTheActivationsCategory_AndReleased) {
  const ModelLayout layout(small_config());
  MemoryAccountant accountant;
  {
    Gpt<float> model(layout, 2, 16, accountant);
    EXPECT_EQ(accountant.current(MemCategory::activations), static_cast<std::int64_t>(model.activation_bytes()));
    EXPECT_EQ(accountant.current(MemCategory::params), 0);
  }
  EXPECT_EQ(accountant.current(MemCategory::activations), 0);
}

}  // namespace
}  // namespace hsdp::model
