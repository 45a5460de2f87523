#pragma once
// AdamW on flat fp32 spans (a rank's shard of params, grads and the two moments), as in llm.c and
// PyTorch's AdamW with decoupled weight decay:
//   g  = grad_scale * grad
//   m  = beta1 m + (1 - beta1) g            v = beta2 v + (1 - beta2) g^2
//   m^ = m / (1 - beta1^t)                  v^ = v / (1 - beta2^t)
//   p  = p - lr (m^ / (sqrt(v^) + eps) + wd p)     with wd = weight_decay on decay segments, 0 elsewhere.
// Elementwise, so the result does not depend on the thread count.
#include <cstddef>
#include <cstdint>
#include <span>

namespace hsdp::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// A run of elements of the flat span that belongs to parameters which do (matrices) or do not (biases,
// layer-norm gains, ...) decay. Segments must cover the span in order without gaps or overlaps; a shard
// of a flat buffer usually covers parts of several parameters.
struct DecaySegment {
  std::size_t offset = 0;
  std::size_t count = 0;
  bool decay = true;
};

struct AdamWStep {
  float lr = 0.0f;
  // 1-based count of updates applied so far including this one (skipped fp16 steps do not count).
  std::int64_t t = 1;
  // Multiplies the gradients on the fly: the clip coefficient times 1/loss_scale, for example.
  float grad_scale = 1.0f;
};

// Throws a config Error for betas outside [0, 1), eps or weight decay negative or not finite in fp32 (naming the
// train.* keys).
void validate(const AdamWConfig& config);
// And, with the schedule's peak learning rate: lr x weight_decay < 1 (decay, not a sign flip).
void validate(const AdamWConfig& config, double peak_lr);

// Updates params, m and v in place. All four spans have the same size; throws an internal Error when
// sizes or segments do not match.
void adamw_update(const AdamWConfig& config, const AdamWStep& step, std::span<float> params,
                  std::span<const float> grads, std::span<float> m, std::span<float> v,
                  std::span<const DecaySegment> segments);
// The same update, and grads set to zero in the same pass (the next step's backward accumulates into them, so the
// step needs no separate pass to clear them).
void adamw_update_zeroing_grads(const AdamWConfig& config, const AdamWStep& step, std::span<float> params,
                                std::span<float> grads, std::span<float> m, std::span<float> v,
                                std::span<const DecaySegment> segments);

}  // namespace hsdp::optim
