#pragma once
// Gradient clipping by global norm. optim does not communicate: each rank computes the squared sum of its
// shard with local_squared_sum, the caller reduces it over shards/ranks, then clip_coefficient turns the
// global squared norm into the factor to apply (e.g. as AdamWStep::grad_scale).
#include <span>

namespace hsdp::optim {

// Sum of x^2 in double. Deterministic: fixed-size chunks (independent of the thread count) are summed in
// parallel, then the chunk sums are added in order.
double local_squared_sum(std::span<const float> values);

struct ClipResult {
  double norm = 0.0;         // sqrt of the global squared norm (inf or nan when the gradients are)
  float coefficient = 1.0f;  // min(1, max_norm / (norm + 1e-6)); 1 when clipping is off or norm is not finite
  bool finite = true;
};

// max_norm <= 0 turns clipping off.
ClipResult clip_coefficient(double global_squared_norm, double max_norm);

}  // namespace hsdp::optim
