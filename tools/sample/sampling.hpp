#pragma once
// TokenSampler: the next token from a row of logits, reproducibly. Temperature 0 is greedy (the first largest
// logit); otherwise softmax(logits / temperature) over the top_k largest logits (0: the whole vocabulary), drawn
// with data::SplitMix64 from `seed`, so the same seed and logits give the same tokens on every platform.
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/data/random.hpp"

namespace hsdp::sample_tool {

class TokenSampler {
 public:
  // A config Error naming --temperature or --top-k when temperature is negative or not finite, or top_k < 0.
  TokenSampler(double temperature, int top_k, std::uint64_t seed);

  bool greedy() const { return temperature_ == 0.0; }
  // A data Error if a logit is not finite (damaged weights).
  std::int32_t choose(std::span<const float> logits);

 private:
  double temperature_;
  int top_k_;
  data::SplitMix64 rng_;
  std::vector<std::int32_t> order_;
  std::vector<double> weights_;
};

}  // namespace hsdp::sample_tool
