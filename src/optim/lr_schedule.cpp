#include "hsdp/optim/lr_schedule.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {

void validate(const CosineSchedule& schedule) {
  if (!(schedule.lr > 0.0)) throw_config("optim.lr must be > 0, got " + std::to_string(schedule.lr));
  if (!(schedule.min_lr >= 0.0 && schedule.min_lr <= schedule.lr)) {
    throw_config("optim.min_lr must be in [0, optim.lr = " + std::to_string(schedule.lr) + "], got " +
                 std::to_string(schedule.min_lr));
  }
  if (schedule.warmup_steps < 0) {
    throw_config("optim.warmup_steps must be >= 0, got " + std::to_string(schedule.warmup_steps));
  }
  if (schedule.max_steps <= schedule.warmup_steps) {
    throw_config("optim.max_steps (" + std::to_string(schedule.max_steps) + ") must be > optim.warmup_steps (" +
                 std::to_string(schedule.warmup_steps) + ")");
  }
}

double learning_rate(const CosineSchedule& schedule, std::int64_t step) {
  if (step < schedule.warmup_steps) {
    return schedule.lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (step >= schedule.max_steps) return schedule.min_lr;
  const double ratio = static_cast<double>(step - schedule.warmup_steps) /
                       static_cast<double>(schedule.max_steps - schedule.warmup_steps);
  const double coefficient = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return schedule.min_lr + coefficient * (schedule.lr - schedule.min_lr);
}

}  // namespace hsdp::optim
