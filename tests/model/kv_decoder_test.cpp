#include "hsdp/model/kv_decoder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <vector>

#include "gradcheck.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/rng.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::model {
namespace {

// Two blocks, four heads, a padded vocabulary; the whole block_size is decoded, so the cache fills.
GptConfig decoder_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 24;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  return c;
}

// O(0.3) random parameters (LayerNorm weights around 1) rather than the 0.02 init, so attention weights are far
// from uniform and every position's logits depend on the cached keys and values.
template <typename T>
void random_params(const ModelLayout& layout, UnitBuffers<T>& params) {
  for (const ParamInfo& p : layout.params()) {
    const bool is_ln_weight = (p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight")) ||
                              p.name.find("norm") != std::string::npos;  // a Llama's RMSNorm weights
    const auto values =
        testing::random_values(p.logical_numel(), stream_seed(5, p.name), 0.3, is_ln_weight ? 1.0 : 0.0);
    std::transform(values.begin(), values.end(), params.param(p).begin(), [](double v) { return static_cast<T>(v); });
  }
}

std::vector<std::int32_t> random_tokens(int n, int vocab) {
  Rng rng(11);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(vocab));
  return ids;
}

// max over positions and vocabulary of |decoded - full| / max |full|: logits of the cached decode against the
// rows of one full forward (Gpt::evaluate) of the same tokens.
// The same shape as a Llama: 4 query heads over 2 key/value heads (or tied, multi-head), SwiGLU width 96.
GptConfig llama_decoder_config(bool tied) {
  GptConfig c = decoder_config();
  c.arch = Arch::llama;
  c.n_kv_head = tied ? 0 : 2;
  c.ffn_dim = 96;
  c.tie_embeddings = tied;
  return c;
}

template <typename T>
double decode_vs_full_forward(const GptConfig& config = decoder_config()) {
  const ModelLayout layout(config);
  const GptConfig& c = layout.config();
  UnitBuffers<T> params(layout);
  random_params(layout, params);
  const int n = c.block_size;
  const std::vector<std::int32_t> tokens = random_tokens(n, c.vocab_size);
  MemoryAccountant accountant;
  Gpt<T> full(layout, 1, n, accountant);
  full.evaluate(tokens, tokens, params.const_pointers());
  KvDecoder<T> decoder(layout, accountant);
  double max_diff = 0, max_full = 0;
  for (int t = 0; t < n; ++t) {
    const std::span<const T> logits = decoder.step(tokens[static_cast<std::size_t>(t)], params.const_pointers());
    EXPECT_EQ(logits.size(), static_cast<std::size_t>(c.vocab_size));
    for (int v = 0; v < c.vocab_size; ++v) {
      const double reference = full.logits()[static_cast<std::size_t>(t) * c.padded_vocab_size + v];
      max_diff = std::max(max_diff, std::abs(static_cast<double>(logits[static_cast<std::size_t>(v)]) - reference));
      max_full = std::max(max_full, std::abs(reference));
    }
  }
  EXPECT_EQ(decoder.position(), n);
  return max_diff / max_full;
}

// Attention runs the forward's own row code; only the GEMMs (one row against many) may sum in another order.
// A dot product of K terms reordered moves by at most ~K eps of its absolute sum, K <= 4C = 128 here, through two
// blocks and the LayerNorms: 1e-12 in double (eps 1.1e-16, K eps = 1.4e-14, 70x margin) and 1e-5 in float
// (eps 6e-8, K eps = 7.6e-6).
TEST(KvDecoder, CachedDecodeLogits_EqualFullForwardLogits_AtEveryPosition_Double) {
  const double difference = decode_vs_full_forward<double>();
  std::cout << "double: max |cached - full| / max |full| = " << difference << "\n";
  EXPECT_LE(difference, 1e-12);
}

TEST(KvDecoder, CachedDecodeLogits_EqualFullForwardLogits_AtEveryPosition_Float) {
  const double difference = decode_vs_full_forward<float>();
  std::cout << "float: max |cached - full| / max |full| = " << difference << "\n";
  EXPECT_LE(difference, 1e-5);
}

// A Llama: the cache holds keys rotated at their positions and the query turns by the new position's angle (the
// same angle code as the full forward), attention is gqa_attention_forward's row code; the GEMMs' K <= 96 here, so
// the same bounds hold.
TEST(KvDecoder, Llama_CachedDecodeLogits_EqualFullForwardLogits_AtEveryPosition) {
  for (const bool tied : {false, true}) {
    const double d = decode_vs_full_forward<double>(llama_decoder_config(tied));
    const double f = decode_vs_full_forward<float>(llama_decoder_config(tied));
    std::cout << (tied ? "llama tied" : "llama GQA") << ": double " << d << ", float " << f << "\n";
    EXPECT_LE(d, 1e-12);
    EXPECT_LE(f, 1e-5);
  }
}

TEST(KvDecoder, Reset_DecodesTheSameLogitsAgain_BitForBit) {
  const ModelLayout layout(decoder_config());
  UnitBuffers<float> params(layout);
  random_params(layout, params);
  MemoryAccountant accountant;
  KvDecoder<float> decoder(layout, accountant);
  const std::vector<std::int32_t> tokens = random_tokens(6, layout.config().vocab_size);
  std::vector<float> first;
  for (std::int32_t token : tokens) {
    const auto logits = decoder.step(token, params.const_pointers());
    first.assign(logits.begin(), logits.end());
  }
  decoder.reset();
  std::vector<float> again;
  for (std::int32_t token : tokens) {
    const auto logits = decoder.step(token, params.const_pointers());
    again.assign(logits.begin(), logits.end());
  }
  ASSERT_EQ(first.size(), again.size());
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
}

TEST(KvDecoder, TokenOutsideVocabulary_ThrowsDataError_AndAFullCache_ThrowsConfigError) {
  const ModelLayout layout(decoder_config());
  UnitBuffers<float> params(layout);
  params.init(layout, 1);
  MemoryAccountant accountant;
  KvDecoder<float> decoder(layout, accountant);
  try {
    decoder.step(layout.config().vocab_size, params.const_pointers());
    FAIL() << "no error for a token outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
  }
  EXPECT_EQ(decoder.position(), 0);
  for (int t = 0; t < decoder.capacity(); ++t) decoder.step(1, params.const_pointers());
  try {
    decoder.step(1, params.const_pointers());
    FAIL() << "no error for a full cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
  }
}

TEST(KvDecoder, Buffers_AreChargedToActivations_AndReleased) {
  const ModelLayout layout(decoder_config());
  MemoryAccountant accountant;
  {
    KvDecoder<float> decoder(layout, accountant);
    const GptConfig& c = layout.config();
    const auto cache = static_cast<std::int64_t>(sizeof(float)) * c.n_layer * c.block_size * 2 * c.n_embd;
    EXPECT_GE(accountant.current(MemCategory::activations), cache);
  }
  EXPECT_EQ(accountant.current(MemCategory::activations), 0);
}

}  // namespace
}  // namespace hsdp::model
