#pragma once
// Autoregressive generation with hsdp's CPU model (fp32).
//
// Context window: the model sees at most block_size tokens. When the context would grow past block_size, its oldest
// tokens are dropped so that the newest ceil(block_size / 2) remain; with the key/value cache those are then run
// again (positions restart at 0), so generating n tokens costs O(n) cached steps whatever n is. The full-forward mode
// (no cache) uses the same window, so both modes see the same contexts and choose the same tokens.
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/model/layout.hpp"
#include "sampling.hpp"

namespace hsdp::sample_tool {

struct GenerateOptions {
  int max_new_tokens = 0;
  bool kv_cache = true;  // false: one full forward of the whole context per new token (for comparison)
};

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // the new tokens only
  std::int64_t positions_run = 0;    // positions evaluated by the model (cached steps, or full-forward rows)
  double seconds = 0;                // generation wall time, prompt included
};

// `params`: one pointer per unit of `layout` (fp32). `prompt` holds 1..block_size ids inside the vocabulary.
GenerateResult generate(const model::ModelLayout& layout, std::span<const float* const> params,
                        std::span<const std::int32_t> prompt, const GenerateOptions& options, TokenSampler& sampler);

// The logits [prompt.size()][vocab_size] of one full forward (model::Gpt<float>::evaluate) over the prompt.
std::vector<std::vector<float>> forward_logits(const model::ModelLayout& layout, std::span<const float* const> params,
                                               std::span<const std::int32_t> prompt);

}  // namespace hsdp::sample_tool
