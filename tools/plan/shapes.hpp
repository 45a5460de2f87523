#pragma once
// The models hsdp-plan knows: GPT-2 shapes (exact: hsdp's ModelLayout) and Llama shapes (a synthetic layout of
// units with Llama's parameter counts), and the activation memory hsdp's Gpt<float> allocates for them.
//
// A model is, for planning, its units in hsdp's order: unit 0 the embedding, then L equal blocks, then the final
// unit. GPT-2's LM head is tied to the embedding (the embedding unit is gathered again for the head); a Llama's
// head is its own matrix, planned as part of the final unit (final norm + lm_head: gathered once, kept from the
// head's forward to its backward, like hsdp's final norm).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hsdp/model/config.hpp"

namespace hsdp::plan {

using model::ActivationShape;

struct PlanModel {
  std::string name;                     // "gpt2-124m", "llama-70b", "deck" (the --config deck's [model])
  std::optional<model::GptConfig> gpt;  // set for GPT-2 shapes: plan with ModelLayout and the library formulas
  std::vector<std::size_t> unit_numel;  // embedding, blocks..., final unit
  bool tied_head = true;                // the embedding unit is gathered a second time for the LM head
  ActivationShape activation;

  std::size_t params() const;  // sum of the units (as stored: GPT-2's padded vocabulary rows included)
  int blocks() const { return static_cast<int>(unit_numel.size()) - 2; }
};

// "gpt2-124m", "gpt2-350m", "gpt2-1.5b", "llama-7b", "llama-13b", "llama-70b"; config Error otherwise.
PlanModel named_model(const std::string& name);
const char* kModelChoices();
PlanModel gpt_model(const model::GptConfig& config, std::string name);

// A Llama shape: L blocks of attention (q, o: C x C; k, v: C x kv_width), SwiGLU MLP (3 C F) and two RMSNorms (2 C);
// embedding V C; final unit: norm C + untied lm_head V C.
struct LlamaShape {
  int n_layer, n_embd, n_head, kv_width, ffn, vocab;
};
PlanModel llama_model(const LlamaShape& shape, std::string name);
// The shape of "llama-7b", "llama-13b", "llama-70b"; config Error otherwise.
LlamaShape llama_shape(const std::string& name);

using model::activation_bytes;
using model::activation_bytes_per_token;

}  // namespace hsdp::plan
