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
  m.gpt = config;
  for (const auto& u : layout.units()) m.unit_numel.push_back(u.numel);
  m.tied_head = true;
  m.activation = model::activation_shape(config);
  return m;
}

PlanModel llama_model(const LlamaShape& s, std::string name) {
  const std::size_t c = static_cast<std::size_t>(s.n_embd);
  const std::size_t f = static_cast<std::size_t>(s.ffn);
  const std::size_t v = static_cast<std::size_t>(s.vocab);
  const std::size_t kv = static_cast<std::size_t>(s.kv_width);
  const std::size_t attention = 2 * c * c + 2 * c * kv;  // q and o; k and v (grouped-query heads: kv < C)
  const std::size_t block = attention + 3 * c * f + 2 * c;
  PlanModel m;
  m.name = std::move(name);
  m.unit_numel.push_back(v * c);
  for (int i = 0; i < s.n_layer; ++i) m.unit_numel.push_back(block);
  m.unit_numel.push_back(c + v * c);
  m.tied_head = false;
  m.activation = {s.n_layer, s.n_embd, s.n_head, s.ffn, s.vocab};
  return m;
}

PlanModel named_model(const std::string& name) {
  const auto gpt2 = [&](int layers, int heads, int width) {
    model::GptConfig c;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = width;
    return gpt_model(c, name);  // block 1024, vocab 50257 padded to 50304 (llm.c)
  };
  if (name == "gpt2-124m") return gpt2(12, 12, 768);
  if (name == "gpt2-350m") return gpt2(24, 16, 1024);
  if (name == "gpt2-1.5b") return gpt2(48, 25, 1600);
  return llama_model(llama_shape(name), name);
}

LlamaShape llama_shape(const std::string& name) {
  if (name == "llama-7b") return {32, 4096, 32, 4096, 11008, 32000};
  if (name == "llama-13b") return {40, 5120, 40, 5120, 13824, 32000};
  if (name == "llama-70b") return {80, 8192, 64, 1024, 28672, 32000};
  throw_config("--model: unknown model '" + name + "' (allowed: " + kModelChoices() + ")");
}

}  // namespace hsdp::plan
