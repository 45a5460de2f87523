#include "sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::sample_tool {

TokenSampler::TokenSampler(double temperature, int top_k, std::uint64_t seed)
    : temperature_(temperature), top_k_(top_k), rng_(data::mix64(seed)) {
  if (!std::isfinite(temperature) || temperature < 0) {
    throw_config("--temperature must be a finite number >= 0 (0: greedy), got " + std::to_string(temperature));
  }
  if (top_k < 0) throw_config("--top-k must be >= 0 (0: the whole vocabulary), got " + std::to_string(top_k));
}

std::int32_t TokenSampler::choose(std::span<const float> logits) {
  const auto vocab = static_cast<std::int32_t>(logits.size());
  for (std::int32_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(logits[static_cast<std::size_t>(i)])) {
      throw_data("the model's logit for token " + std::to_string(i) + " is not finite (damaged weights?)");
    }
  }
  if (greedy()) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // The k largest logits, larger first, the lower id first among equals: a fixed order for the draw below.
  const std::int32_t k = top_k_ > 0 && top_k_ < vocab ? top_k_ : vocab;
  order_.resize(static_cast<std::size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  const double top = logits[static_cast<std::size_t>(order_[0])];
  weights_.resize(static_cast<std::size_t>(k));
  double total = 0;
  for (std::int32_t i = 0; i < k; ++i) {
    const double logit = logits[static_cast<std::size_t>(order_[static_cast<std::size_t>(i)])];
    weights_[static_cast<std::size_t>(i)] = std::exp((logit - top) / temperature_);
    total += weights_[static_cast<std::size_t>(i)];
  }
  const double u = rng_.uniform() * total;
  double cumulative = 0;
  for (std::int32_t i = 0; i < k; ++i) {
    cumulative += weights_[static_cast<std::size_t>(i)];
    if (u < cumulative) return order_[static_cast<std::size_t>(i)];
  }
  return order_[static_cast<std::size_t>(k - 1)];  // u within rounding of the total
}

}  // namespace hsdp::sample_tool
