#include "hsdp/model/layout.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/model/config.hpp"

namespace hsdp::model {
namespace {

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 16;
  c.vocab_size = 11;
  c.padded_vocab_size = 16;
  return c;
}

// The config error's message, or "" if none was thrown.
std::string config_error(const GptConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    return e.what();
  }
  return "";
}

TEST(GptConfig, Gpt2Default_IsValid) { EXPECT_EQ(config_error(GptConfig::gpt2_124m()), ""); }

TEST(GptConfig, EmbdNotDivisibleByHeads_NamesBothKeys) {
  GptConfig c = small_config();
  c.n_head = 3;
  EXPECT_EQ(config_error(c), "model.n_embd (8) must be divisible by model.n_head (3)");
}

TEST(GptConfig, PaddedVocabBelowVocab_NamesBothKeys) {
  GptConfig c = small_config();
  c.padded_vocab_size = 10;
  EXPECT_EQ(config_error(c), "model.padded_vocab_size (10) must be >= model.vocab_size (11)");
}

TEST(GptConfig, NonPositiveValues_NameTheirKey) {
  const std::vector<std::pair<int GptConfig::*, std::string>> keys = {
      {&GptConfig::n_layer, "model.n_layer"},       {&GptConfig::n_head, "model.n_head"},
      {&GptConfig::n_embd, "model.n_embd"},         {&GptConfig::block_size, "model.block_size"},
      {&GptConfig::vocab_size, "model.vocab_size"}, {&GptConfig::padded_vocab_size, "model.padded_vocab_size"}};
  for (const auto& [member, key] : keys) {
    GptConfig c = small_config();
    c.*member = 0;
    EXPECT_EQ(config_error(c), key + " (0) must be positive");
  }
}

TEST(ModelLayout, InvalidConfig_Throws) {
  GptConfig c = small_config();
  c.n_embd = -8;
  EXPECT_THROW(ModelLayout{c}, Error);
}

TEST(ModelLayout, NamesAndShapes_MatchNanoGptStateDict_ForTwoLayers) {
  const ModelLayout layout(small_config());
  struct Expected {
    std::string name;
    std::vector<std::int64_t> shape;
  };
  std::vector<Expected> expected = {{"transformer.wte.weight", {16, 8}}, {"transformer.wpe.weight", {16, 8}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const Expected& e : std::vector<Expected>{{"ln_1.weight", {8}},
                                                   {"ln_1.bias", {8}},
                                                   {"attn.c_attn.weight", {24, 8}},
                                                   {"attn.c_attn.bias", {24}},
                                                   {"attn.c_proj.weight", {8, 8}},
                                                   {"attn.c_proj.bias", {8}},
                                                   {"ln_2.weight", {8}},
                                                   {"ln_2.bias", {8}},
                                                   {"mlp.c_fc.weight", {32, 8}},
                                                   {"mlp.c_fc.bias", {32}},
                                                   {"mlp.c_proj.weight", {8, 32}},
                                                   {"mlp.c_proj.bias", {8}}}) {
      expected.push_back({p + e.name, e.shape});
    }
  }
  expected.push_back({"transformer.ln_f.weight", {8}});
  expected.push_back({"transformer.ln_f.bias", {8}});

  ASSERT_EQ(layout.params().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    EXPECT_EQ(p.name, expected[i].name);
    EXPECT_EQ(p.shape, expected[i].shape) << p.name;
    if (p.name == "transformer.wte.weight") {
      EXPECT_EQ(p.logical_shape, (std::vector<std::int64_t>{11, 8}));
    } else {
      EXPECT_EQ(p.logical_shape, p.shape) << p.name;
    }
    // nanoGPT's configure_optimizers: decay every parameter with >= 2 dims (embeddings included).
    EXPECT_EQ(p.weight_decay, p.shape.size() >= 2) << p.name;
  }
}

TEST(ModelLayout, Units_AreEmbeddingBlocksFinalNorm_PackedWithoutGaps) {
  const ModelLayout layout(small_config());
  ASSERT_EQ(layout.num_units(), 4);
  EXPECT_EQ(layout.unit(0).name, "embedding");
  EXPECT_EQ(layout.unit(1).name, "block.0");
  EXPECT_EQ(layout.unit(2).name, "block.1");
  EXPECT_EQ(layout.unit(3).name, "final_norm");
  EXPECT_EQ(layout.final_norm_unit(), 3);
  EXPECT_EQ(layout.unit(0).numel, 16u * 8 + 16u * 8);
  const std::size_t block = 2 * 8 + 24 * 8 + 24 + 8 * 8 + 8 + 2 * 8 + 32 * 8 + 32 + 8 * 32 + 8;
  EXPECT_EQ(layout.unit(1).numel, block);
  EXPECT_EQ(layout.unit(3).numel, 16u);
  for (int u = 0; u < layout.num_units(); ++u) {
    std::size_t next = 0;
    for (const ParamInfo* p : layout.unit_params(u)) {
      EXPECT_EQ(p->unit, u);
      EXPECT_EQ(p->offset, next) << p->name;
      next += p->numel;
    }
    EXPECT_EQ(next, layout.unit(u).numel);
  }
  EXPECT_EQ(layout.total_numel(), 256u + 2 * block + 16);
  EXPECT_EQ(layout.logical_numel(), layout.total_numel() - 5u * 8);
  EXPECT_THROW(layout.param("lm_head.weight"), Error);
  EXPECT_EQ(layout.block_offsets().mlp_proj_bias, layout.param("transformer.h.1.mlp.c_proj.bias").offset);
}

// llm.c prints 124475904 parameters for GPT-2 124M with the vocabulary padded to 50304.
TEST(ModelLayout, Gpt2Small_Has124475904StoredParameters) {
  const ModelLayout layout(GptConfig::gpt2_124m());
  EXPECT_EQ(layout.total_numel(), 124475904u);
  EXPECT_EQ(layout.logical_numel(), 124475904u - 47u * 768u);
}

}  // namespace
}  // namespace hsdp::model
