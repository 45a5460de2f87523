#include "hsdp/optim/adamw.hpp"

#include <cmath>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {

void validate(const AdamWConfig& config) {
  if (!(config.beta1 >= 0.0f && config.beta1 < 1.0f)) {
    throw_config("train.beta1 must be in [0, 1), got " + std::to_string(config.beta1));
  }
  if (!(config.beta2 >= 0.0f && config.beta2 < 1.0f)) {
    throw_config("train.beta2 must be in [0, 1), got " + std::to_string(config.beta2));
  }
  // Finite after the conversion to fp32 (the optimizer's precision): 1e39 would be inf there.
  if (!(config.eps >= 0.0f && std::isfinite(config.eps))) {
    throw_config("train.eps must be >= 0 and finite in fp32 (< 3.4e38), got " + std::to_string(config.eps));
  }
  if (!(config.weight_decay >= 0.0f && std::isfinite(config.weight_decay))) {
    throw_config("train.weight_decay must be >= 0 and finite in fp32 (< 3.4e38), got " +
                 std::to_string(config.weight_decay));
  }
}

void validate(const AdamWConfig& config, double peak_lr) {
  validate(config);
  // Decoupled decay multiplies a weight by 1 - lr * weight_decay each step: at lr * weight_decay >= 1 it zeroes or
  // flips the weights instead of decaying them.
  if (!(peak_lr * config.weight_decay < 1.0)) {
    throw_config("train.lr x train.weight_decay must be < 1 (decoupled weight decay multiplies every weight by "
                 "1 - lr x weight_decay each step), got " + std::to_string(peak_lr) + " x " +
                 std::to_string(config.weight_decay) + " = " + std::to_string(peak_lr * config.weight_decay));
  }
}

namespace {

void check_layout(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                  std::span<const DecaySegment> segments) {
  const std::size_t n = params.size();
  if (grads.size() != n || m.size() != n || v.size() != n) {
    throw_internal("adamw: params/grads/m/v sizes differ: " + std::to_string(n) + "/" + std::to_string(grads.size()) +
                   "/" + std::to_string(m.size()) + "/" + std::to_string(v.size()));
  }
  std::size_t next = 0;
  for (const DecaySegment& segment : segments) {
    if (segment.offset != next) {
      throw_internal("adamw: decay segment at offset " + std::to_string(segment.offset) + " should start at " +
                     std::to_string(next) + " (segments must tile the span in order)");
    }
    next += segment.count;
  }
  if (next != n) {
    throw_internal("adamw: decay segments cover " + std::to_string(next) + " of " + std::to_string(n) + " elements");
  }
}

}  // namespace

namespace {

template <bool kZeroGrads>
void update(const AdamWConfig& config, const AdamWStep& step, std::span<float> params, const float* g, float* g_out,
            std::span<float> m, std::span<float> v, std::span<const DecaySegment> segments) {
  if (step.t < 1) throw_internal("adamw: step t must be >= 1, got " + std::to_string(step.t));
  const auto t = static_cast<double>(step.t);
  const auto bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), t));
  const auto bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2), t));
  const float beta1 = config.beta1;
  const float beta2 = config.beta2;
  const float eps = config.eps;
  const float lr = step.lr;
  const float grad_scale = step.grad_scale;
  float* p = params.data();
  float* m1 = m.data();
  float* m2 = v.data();

  // One pass, vectorised: `omp for simd` and -fno-math-errno (CMakeLists.txt) let sqrt and the divisions become packed
  // instructions, correctly rounded as the scalar ones (no -ffast-math).
#pragma omp parallel
  for (const DecaySegment& segment : segments) {
    const float decay = segment.decay ? config.weight_decay : 0.0f;
    const auto begin = static_cast<std::ptrdiff_t>(segment.offset);
    const auto end = static_cast<std::ptrdiff_t>(segment.offset + segment.count);
#pragma omp for simd schedule(simd : static) nowait
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const float grad = grad_scale * g[i];
      if constexpr (kZeroGrads) g_out[i] = 0.0f;
      const float mi = beta1 * m1[i] + (1.0f - beta1) * grad;
      const float vi = beta2 * m2[i] + (1.0f - beta2) * grad * grad;
      m1[i] = mi;
      m2[i] = vi;
      const float m_hat = mi / bias1;
      const float v_hat = vi / bias2;
      p[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + decay * p[i]);
    }
  }
}

}  // namespace

void adamw_update(const AdamWConfig& config, const AdamWStep& step, std::span<float> params,
                  std::span<const float> grads, std::span<float> m, std::span<float> v,
                  std::span<const DecaySegment> segments) {
  check_layout(params, grads, m, v, segments);
  update<false>(config, step, params, grads.data(), nullptr, m, v, segments);
}

void adamw_update_zeroing_grads(const AdamWConfig& config, const AdamWStep& step, std::span<float> params,
                                std::span<float> grads, std::span<float> m, std::span<float> v,
                                std::span<const DecaySegment> segments) {
  check_layout(params, grads, m, v, segments);
  update<true>(config, step, params, grads.data(), grads.data(), m, v, segments);
}

}  // namespace hsdp::optim
