#pragma once
// The models hsdp-plan knows: GPT-2 and Llama shapes, each exactly as hsdp-train builds it (model::ModelLayout of a
// GptConfig), and the activation memory hsdp's Gpt<float> allocates for them.
//
// A model is, for planning, its units in hsdp's order: unit 0 the embedding, then L equal blocks, then the final
// unit. GPT-2's LM head is tied to the embedding (the embedding unit is gathered again for the head); a Llama's
// head is its own matrix in the final unit (final norm + lm_head: gathered once, kept from the head's forward to
// its backward), unless model.tie_embeddings.
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
  model::GptConfig config;              // the shape (ModelLayout's units; the library formulas)
  std::vector<std::size_t> unit_numel;  // embedding, blocks..., final unit
  bool tied_head = true;                // the embedding unit is gathered a second time for the LM head
  ActivationShape activation;

  std::size_t params() const;  // sum of the units (as stored: padded vocabulary rows included)
  int blocks() const { return static_cast<int>(unit_numel.size()) - 2; }
};

// "gpt2-124m", "gpt2-350m", "gpt2-1.5b", "llama-7b", "llama-13b", "llama-70b"; config Error otherwise.
model::GptConfig named_config(const std::string& name);
PlanModel named_model(const std::string& name);
const char* kModelChoices();
PlanModel gpt_model(const model::GptConfig& config, std::string name);

using model::activation_bytes;
using model::activation_bytes_per_token;

}  // namespace hsdp::plan
