#pragma once
// The engine tests' model and data: a tiny GPT whose units pad on every mesh, and deterministic token rows.
#include <cstdint>
#include <vector>

#include "hsdp/model/gpt.hpp"

namespace hsdp::shard::testing {

// vocab 61 and odd widths: no unit divides by 2 or 4, so every strategy pads.
inline model::GptConfig tiny_config() {
  return {.n_layer = 2, .n_head = 2, .n_embd = 18, .block_size = 16, .vocab_size = 61, .padded_vocab_size = 64};
}
constexpr int kSeq = 16;

// Rows [first_row, first_row + count) of the global batch of step `step`: deterministic tokens with a learnable
// pattern (targets: the same rows shifted by one position).
inline std::vector<std::int32_t> rows(int step, int first_row, int count, bool targets) {
  std::vector<std::int32_t> out;
  for (int r = first_row; r < first_row + count; ++r) {
    for (int t = 0; t < kSeq; ++t) {
      const int pos = t + (targets ? 1 : 0);
      const unsigned h = static_cast<unsigned>(step * 7919 + r * 104729 + pos * 31 + (pos % 5) * 1000003);
      out.push_back(static_cast<std::int32_t>((h ^ (h >> 7)) % 61));
    }
  }
  return out;
}

}  // namespace hsdp::shard::testing
