#include "hsdp/optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {

LossScaler::LossScaler(const LossScalerConfig& config) : config_(config) {
  if (!(config.min_scale > 0.0f)) throw_config("fp16.min_scale must be > 0, got " + std::to_string(config.min_scale));
  if (!(config.init_scale >= config.min_scale && std::isfinite(config.init_scale))) {
    throw_config("fp16.init_scale must be finite and >= fp16.min_scale, got " + std::to_string(config.init_scale));
  }
  if (!(config.growth_factor >= 1.0f)) {
    throw_config("fp16.growth_factor must be >= 1, got " + std::to_string(config.growth_factor));
  }
  if (!(config.backoff_factor > 0.0f && config.backoff_factor < 1.0f)) {
    throw_config("fp16.backoff_factor must be in (0, 1), got " + std::to_string(config.backoff_factor));
  }
  if (config.growth_interval < 1) {
    throw_config("fp16.growth_interval must be >= 1, got " + std::to_string(config.growth_interval));
  }
  state_.scale = config.init_scale;
}

bool LossScaler::update(bool found_inf) {
  if (found_inf) {
    state_.scale = std::max(config_.min_scale, state_.scale * config_.backoff_factor);
    state_.good_steps = 0;
    ++state_.skipped_steps;
    return true;
  }
  if (++state_.good_steps >= config_.growth_interval) {
    const float grown = state_.scale * config_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;
    state_.good_steps = 0;
  }
  return false;
}

void LossScaler::restore(const LossScalerState& state) {
  if (!(state.scale >= config_.min_scale && std::isfinite(state.scale)) || state.good_steps < 0 ||
      state.skipped_steps < 0) {
    throw Error(ErrorKind::checkpoint, "loss scaler state: scale " + std::to_string(state.scale) + ", good steps " +
                                           std::to_string(state.good_steps) + " is not valid for fp16.min_scale " +
                                           std::to_string(config_.min_scale));
  }
  state_ = state;
}

bool has_inf_or_nan(std::span<const float> values) {
  const float* x = values.data();
  const auto n = static_cast<std::ptrdiff_t>(values.size());
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found)
  for (std::ptrdiff_t i = 0; i < n; ++i) found |= std::isfinite(x[i]) ? 0 : 1;
  return found != 0;
}

}  // namespace hsdp::optim
