#pragma once
// Dynamic loss scaling for fp16 training (as PyTorch's GradScaler): the loss is multiplied by scale()
// before backward; the gradients are divided by it before the update. On inf/nan gradients the step is
// skipped and the scale halves (never below min_scale); after growth_interval good steps in a row it doubles.
#include <cstdint>
#include <span>

namespace hsdp::optim {

struct LossScalerConfig {
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
  float min_scale = 1.0f;
};

struct LossScalerState {
  float scale = 65536.0f;
  std::int64_t good_steps = 0;     // finite steps since the last change of scale
  std::int64_t skipped_steps = 0;  // total steps skipped for inf/nan
  bool operator==(const LossScalerState&) const = default;
};

class LossScaler {
 public:
  // Throws a config Error naming the fp16.* key of an invalid setting.
  explicit LossScaler(const LossScalerConfig& config = {});

  float scale() const { return state_.scale; }
  float inverse_scale() const { return 1.0f / state_.scale; }

  // Call once per optimizer step with whether any rank found inf/nan in its gradients (the caller reduces
  // the flag). Returns true when the step must be skipped.
  bool update(bool found_inf);

  LossScalerState state() const { return state_; }
  // Throws a checkpoint Error for a state no scaler could have reached (scale below min_scale, negative counts).
  void restore(const LossScalerState& state);

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

// True when any value is +-inf or nan.
bool has_inf_or_nan(std::span<const float> values);

}  // namespace hsdp::optim
