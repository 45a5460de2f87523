// model.arch=llama through Gpt<T>: every parameter's gradient against finite differences (GQA and MHA, tied and
// untied heads), the forward against an independent re-computation written from Hugging Face's LlamaForCausalLM
// conventions, activation checkpointing, the activation formula, the layout's names and the config's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/flops.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_buffers.hpp"

namespace hsdp::model {
namespace {

// L=2, C=16, 4 query heads of 4 channels over `kv_heads` key/value heads, SwiGLU width 12, V=11 padded to 16.
GptConfig tiny_llama(int kv_heads, bool tied) {
  GptConfig c;
  c.arch = Arch::llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = kv_heads;
  c.n_embd = 16;
  c.ffn_dim = 12;
  c.block_size = 8;
  c.vocab_size = 11;
  c.padded_vocab_size = 16;
  c.rope_theta = 100.0;  // angles that turn visibly within 5 positions
  c.tie_embeddings = tied;
  return c;
}

std::vector<std::int32_t> token_ids(std::size_t n, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(vocab));
  return ids;
}

bool is_norm(const ParamInfo& p) {
  return p.name.find("norm") != std::string::npos;
}

// O(0.3) values (norm weights around 1), so that every path carries a gradient well above the differences' noise.
void random_params(const ModelLayout& layout, UnitBuffers<double>& params) {
  for (const ParamInfo& p : layout.params()) {
    const auto values = testing::random_values(p.logical_numel(), stream_seed(91, p.name), 0.3, is_norm(p) ? 1.0 : 0.0);
    std::copy(values.begin(), values.end(), params.param(p).begin());  // padded rows stay 0
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The forward, written again from Hugging Face's modeling_llama conventions with plain loops over [t][c] arrays:
// RMSNorm x * rsqrt(mean(x^2) + eps) * w; q, k rotated by rotate_half (channel i with i + hs/2, angle
// t * theta^(-2i/hs)); query head h reads key/value head h / (n_head / n_kv_head) (repeat_kv); scores / sqrt(hs),
// causal softmax; o_proj; down(silu(gate) * up); the head reads lm_head (or embed_tokens when tied).
using Rows = std::vector<std::vector<double>>;

Rows linear(const Rows& x, const double* w, int out, int in) {
  Rows y(x.size(), std::vector<double>(static_cast<std::size_t>(out)));
  for (std::size_t t = 0; t < x.size(); ++t) {
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += w[static_cast<std::size_t>(o) * in + i] * x[t][static_cast<std::size_t>(i)];
      y[t][static_cast<std::size_t>(o)] = s;
    }
  }
  return y;
}

Rows rms_norm(const Rows& x, const double* w, double eps) {
  Rows y = x;
  for (auto& row : y) {
    double ms = 0;
    for (const double v : row) ms += v * v;
    const double r = 1.0 / std::sqrt(ms / static_cast<double>(row.size()) + eps);
    for (std::size_t c = 0; c < row.size(); ++c) row[c] = row[c] * r * w[c];
  }
  return y;
}

void rotate_half(Rows& x, int heads, int hs, double theta) {
  for (std::size_t t = 0; t < x.size(); ++t) {
    for (int h = 0; h < heads; ++h) {
      double* head = x[t].data() + static_cast<std::size_t>(h) * hs;
      for (int i = 0; i < hs / 2; ++i) {
        const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * i / hs);
        const double a = head[i], b = head[i + hs / 2];
        head[i] = a * std::cos(angle) - b * std::sin(angle);
        head[i + hs / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

double reference_loss(const ModelLayout& layout, const UnitBuffers<double>& params,
                      const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets, int B, int T) {
  const GptConfig& c = layout.config();
  const int C = c.n_embd, H = c.n_head, KV = c.kv_heads(), hs = c.head_size(), F = c.ffn(), V = c.vocab_size;
  const auto p = [&](const std::string& name) { return params.param(layout.param(name)).data(); };
  double total = 0;
  for (int b = 0; b < B; ++b) {
    Rows x(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) {
      const double* e = p("model.embed_tokens.weight") + static_cast<std::size_t>(tokens[b * T + t]) * C;
      x[static_cast<std::size_t>(t)].assign(e, e + C);
    }
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      const Rows h = rms_norm(x, p(pre + "input_layernorm.weight"), c.norm_eps);
      Rows q = linear(h, p(pre + "self_attn.q_proj.weight"), C, C);
      Rows k = linear(h, p(pre + "self_attn.k_proj.weight"), KV * hs, C);
      const Rows v = linear(h, p(pre + "self_attn.v_proj.weight"), KV * hs, C);
      rotate_half(q, H, hs, c.rope_theta);
      rotate_half(k, KV, hs, c.rope_theta);
      Rows y(static_cast<std::size_t>(T), std::vector<double>(static_cast<std::size_t>(C), 0.0));
      for (int head = 0; head < H; ++head) {
        const int kvh = head / (H / KV);
        for (int t = 0; t < T; ++t) {
          std::vector<double> score(static_cast<std::size_t>(t) + 1);
          double most = -1e300, sum = 0;
          for (int j = 0; j <= t; ++j) {
            double s = 0;
            for (int i = 0; i < hs; ++i) s += q[t][head * hs + i] * k[j][kvh * hs + i];
            score[j] = s / std::sqrt(static_cast<double>(hs));
            most = std::max(most, score[j]);
          }
          for (double& s : score) sum += (s = std::exp(s - most));
          for (int j = 0; j <= t; ++j) {
            for (int i = 0; i < hs; ++i) y[t][head * hs + i] += score[j] / sum * v[j][kvh * hs + i];
          }
        }
      }
      const Rows o = linear(y, p(pre + "self_attn.o_proj.weight"), C, C);
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < C; ++i) x[t][i] += o[t][i];
      }
      const Rows h2 = rms_norm(x, p(pre + "post_attention_layernorm.weight"), c.norm_eps);
      const Rows gate = linear(h2, p(pre + "mlp.gate_proj.weight"), F, C);
      Rows act = linear(h2, p(pre + "mlp.up_proj.weight"), F, C);
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < F; ++i) act[t][i] *= gate[t][i] / (1.0 + std::exp(-gate[t][i]));
      }
      const Rows down = linear(act, p(pre + "mlp.down_proj.weight"), C, F);
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < C; ++i) x[t][i] += down[t][i];
      }
    }
    const Rows h = rms_norm(x, p("model.norm.weight"), c.norm_eps);
    const Rows logits =
        linear(h, c.tie_embeddings ? p("model.embed_tokens.weight") : p("lm_head.weight"), V, C);  // real rows only
    for (int t = 0; t < T; ++t) {
      double most = -1e300, sum = 0;
      for (const double z : logits[t]) most = std::max(most, z);
      for (const double z : logits[t]) sum += std::exp(z - most);
      total += std::log(sum) + most - logits[t][targets[b * T + t]];
    }
  }
  return total / (B * T);
}

TEST(Llama, Forward_EqualsAnIndependentRecomputationOfHuggingFacesLlama) {
  for (const auto& [kv, tied] : {std::pair{2, false}, std::pair{4, true}, std::pair{1, false}}) {
    const ModelLayout layout(tiny_llama(kv, tied));
    const int B = 2, T = 5;
    MemoryAccountant accountant;
    Gpt<double> model(layout, B, T, accountant);
    UnitBuffers<double> params(layout);
    random_params(layout, params);
    const auto tokens = token_ids(B * T, 11, 3), targets = token_ids(B * T, 11, 4);
    const double loss = model.evaluate(tokens, targets, params.const_pointers());
    const double want = reference_loss(layout, params, tokens, targets, B, T);
    // The same sums in another order: a few ulps of the O(1) terms summed over ~100 operations, far below 1e-12.
    EXPECT_NEAR(loss, want, 1e-12 * std::abs(want)) << "n_kv_head " << kv << (tied ? " tied" : " untied");
  }
}

// Every parameter's gradient against central differences of the mean loss, in double (gradcheck.hpp's bound):
// grouped-query (2 key/value heads for 4 query heads) with an untied head, multi-query (1), and multi-head tied.
TEST(Llama, Backward_MatchesFiniteDifferences_ForEveryParameter) {
  for (const auto& [kv, tied] : {std::pair{2, false}, std::pair{1, false}, std::pair{0, true}}) {
    const ModelLayout layout(tiny_llama(kv, tied));
    const int B = 2, T = 5;
    MemoryAccountant accountant;
    Gpt<double> model(layout, B, T, accountant);
    UnitBuffers<double> params(layout), grads(layout);
    random_params(layout, params);
    const auto tokens = token_ids(B * T, 11, 1), targets = token_ids(B * T, 11, 2);
    testing::expect_every_parameter_matches_finite_differences(
        layout, model, params, grads, tokens, targets,
        " (n_kv_head " + std::to_string(kv) + (tied ? ", tied)" : ", untied)"));
  }
}

TEST(Llama, ActivationCheckpointing_GivesBitIdenticalLossAndGrads_AndBothPeaksEqualTheFormula) {
  GptConfig c = tiny_llama(2, false);
  c.n_layer = 3;
  c.n_embd = 32;
  c.ffn_dim = 0;  // the default rule: 8 * 32 / 3 = 85 -> 256
  c.block_size = 32;
  const ModelLayout layout(c);
  UnitBuffers<float> params(layout);
  params.init(layout, 5);
  const int B = 2, T = 24;
  float losses[2];
  UnitBuffers<float> grads[2] = {UnitBuffers<float>(layout), UnitBuffers<float>(layout)};
  std::int64_t peaks[2];
  for (const bool ckpt : {false, true}) {
    MemoryAccountant accountant;
    {
      Gpt<float> model(layout, B, T, accountant, ckpt);
      losses[ckpt] =
          model.forward(token_ids(B * T, c.vocab_size, 5), token_ids(B * T, c.vocab_size, 6), params.const_pointers());
      model.backward(params.const_pointers(), grads[ckpt].pointers(), 1.0f);
      EXPECT_EQ(static_cast<std::int64_t>(model.activation_bytes()), activation_bytes(activation_shape(c), B, T, ckpt));
    }
    peaks[ckpt] = accountant.peak(MemCategory::activations);
    EXPECT_EQ(peaks[ckpt], activation_bytes(activation_shape(c), B, T, ckpt));
  }
  EXPECT_EQ(std::memcmp(&losses[0], &losses[1], sizeof(float)), 0);
  for (int u = 0; u < layout.num_units(); ++u) {
    EXPECT_EQ(std::memcmp(grads[0].unit(u).data(), grads[1].unit(u).data(), grads[0].unit(u).size_bytes()), 0) << u;
  }
  EXPECT_LT(peaks[1], peaks[0]);
}

// At init the logits are ~N(0, 0.02^2 C) (RMSNorm's output has unit scale), so the loss is ln(V) within 0.05.
TEST(Llama, LossAtInit_IsLogVocab) {
  GptConfig c = tiny_llama(2, false);
  c.n_embd = 64;
  c.vocab_size = 256;
  c.padded_vocab_size = 256;
  c.block_size = 32;
  const ModelLayout layout(c);
  MemoryAccountant accountant;
  Gpt<float> model(layout, 4, 32, accountant);
  UnitBuffers<float> params(layout);
  params.init(layout, 1337);
  const float loss = model.forward(token_ids(128, 256, 3), token_ids(128, 256, 4), params.const_pointers());
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

TEST(Llama, Layout_HasHuggingFacesNames_AndTheHeadInTheFinalUnitUnlessTied) {
  const ModelLayout untied(tiny_llama(2, false));
  EXPECT_EQ(untied.num_units(), 4);
  const std::vector<std::string> block = {
      "model.layers.1.input_layernorm.weight",  "model.layers.1.self_attn.q_proj.weight",
      "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
      "model.layers.1.self_attn.o_proj.weight", "model.layers.1.post_attention_layernorm.weight",
      "model.layers.1.mlp.gate_proj.weight",    "model.layers.1.mlp.up_proj.weight",
      "model.layers.1.mlp.down_proj.weight"};
  const auto names = [](const std::vector<const ParamInfo*>& ps) {
    std::vector<std::string> out;
    for (const ParamInfo* p : ps) out.push_back(p->name);
    return out;
  };
  EXPECT_EQ(names(untied.unit_params(ModelLayout::block_unit(1))), block);
  EXPECT_EQ(untied.param("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(untied.param("model.layers.0.mlp.down_proj.weight").shape, (std::vector<std::int64_t>{16, 12}));
  EXPECT_EQ(names(untied.unit_params(untied.final_norm_unit())),
            (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  EXPECT_EQ(untied.param("lm_head.weight").logical_shape, (std::vector<std::int64_t>{11, 16}));
  EXPECT_FALSE(untied.param("model.norm.weight").weight_decay);
  EXPECT_TRUE(untied.param("lm_head.weight").weight_decay);
  const ModelLayout tied(tiny_llama(2, true));
  EXPECT_EQ(names(tied.unit_params(tied.final_norm_unit())), (std::vector<std::string>{"model.norm.weight"}));
  EXPECT_EQ(untied.total_numel() - tied.total_numel(), 16u * 16u);
  // Llama 2 7B's shape: 6 738 415 616 parameters, as Hugging Face counts them.
  GptConfig seven;
  seven.arch = Arch::llama;
  seven.n_layer = 32;
  seven.n_head = 32;
  seven.n_embd = 4096;
  seven.block_size = 4096;
  seven.vocab_size = seven.padded_vocab_size = 32000;
  EXPECT_EQ(seven.ffn(), 11008);
  EXPECT_EQ(ModelLayout(seven).logical_numel(), 6738415616u);
}

// The FLOP count's P_matmul is what the GEMMs read per token: every block matrix of the layout and the head's V x C
// (the vocabulary's real rows), for both architectures; 6 per parameter and token plus 6 L T C.
TEST(Flops, MatmulParams_AreTheLayoutsMatrices_ForGpt2AndLlama) {
  for (const GptConfig& c : {GptConfig::gpt2_124m(), tiny_llama(2, false), tiny_llama(4, true)}) {
    const ModelLayout layout(c);
    double matrices = 0;
    for (const ParamInfo& p : layout.params()) {
      if (p.unit >= ModelLayout::block_unit(0) && p.unit < layout.final_norm_unit() && p.shape.size() == 2) {
        matrices += static_cast<double>(p.numel);
      }
    }
    EXPECT_EQ(matmul_params(c), matrices + static_cast<double>(c.vocab_size) * c.n_embd) << arch_name(c.arch);
    EXPECT_EQ(train_flops(c, 10, 8), 10.0 * (6.0 * matmul_params(c) + 6.0 * c.n_layer * 8 * c.n_embd));
  }
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H200"), 989.0);
  EXPECT_EQ(dense_bf16_peak_tflops("Tesla V100"), 0.0);
}

TEST(Llama, ImpossibleShapes_AreConfigErrorsNamingTheKey) {
  const auto message = [](const GptConfig& c) {
    try {
      c.validate();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GptConfig c = tiny_llama(3, false);
  EXPECT_NE(message(c).find("model.n_kv_head (3) must divide model.n_head (4)"), std::string::npos) << message(c);
  c = tiny_llama(2, false);
  c.n_head = 16;  // head size 1: RoPE needs pairs
  c.n_kv_head = 0;
  EXPECT_NE(message(c).find("must be even"), std::string::npos) << message(c);
  GptConfig gpt2;
  gpt2.n_kv_head = 4;
  EXPECT_NE(message(gpt2).find("apply to model.arch=llama only"), std::string::npos) << message(gpt2);
  EXPECT_THROW(parse_arch("mistral"), Error);
}

}  // namespace
}  // namespace hsdp::model
