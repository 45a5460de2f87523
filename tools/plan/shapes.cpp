#include "plan/shapes.hpp"

#include <numeric>

#include "hsdp/core/error.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::plan {

std::size_t PlanModel::params() const {
  return std::accumulate(unit_numel.begin(), unit_numel.end(), std::size_t{0});
}

const char* kModelChoices() {
  return "gpt2-124m|gpt2-350m|gpt2-1.5b|llama-7b|llama-13b|llama-70b";
}

PlanModel gpt_model(const model::GptConfig& config, std::string name) {
  const model::ModelLayout layout(config);  // validates
  PlanModel m;
  m.name = std::move(name);
  m.config = config;
  for (const auto& u : layout.units()) m.unit_numel.push_back(u.numel);
  m.tied_head = config.tied_head();
  m.activation = model::activation_shape(config);
  return m;
}

// GPT-2: block 1024, vocabulary 50257 padded to 50304 (llm.c). Llama 2 (Hugging Face's configs): vocabulary 32000,
// 4096 positions; 70B with 8 key/value heads.
model::GptConfig named_config(const std::string& name) {
  const auto gpt2 = [&](int layers, int heads, int width) {
    model::GptConfig c;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = width;
    return c;
  };
  const auto llama = [&](int layers, int heads, int width, int kv_heads, int ffn) {
    model::GptConfig c;
    c.arch = model::Arch::llama;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = width;
    c.n_kv_head = kv_heads;
    c.ffn_dim = ffn;
    c.block_size = 4096;
    c.vocab_size = c.padded_vocab_size = 32000;
    return c;
  };
  if (name == "gpt2-124m") return gpt2(12, 12, 768);
  if (name == "gpt2-350m") return gpt2(24, 16, 1024);
  if (name == "gpt2-1.5b") return gpt2(48, 25, 1600);
  if (name == "llama-7b") return llama(32, 32, 4096, 32, 11008);
  if (name == "llama-13b") return llama(40, 40, 5120, 40, 13824);
  if (name == "llama-70b") return llama(80, 64, 8192, 8, 28672);
  throw_config("--model: unknown model '" + name + "' (allowed: " + kModelChoices() + ")");
}

PlanModel named_model(const std::string& name) { return gpt_model(named_config(name), name); }

}  // namespace hsdp::plan
