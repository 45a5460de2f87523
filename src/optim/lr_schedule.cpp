#include "hsdp/optim/lr_schedule.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::optim {

void validate(const CosineSchedule& schedule) {
  if (!(schedule.lr > 0.0 && std::isfinite(schedule.lr))) {
    throw_config("train.lr must be > 0 and finite, got " + std::to_string(schedule.lr));
  }
  if (!(schedule.min_lr >= 0.0 && schedule.min_lr <= schedule.lr)) {
    throw_config("train.min_lr must be in [0, train.lr = " + std::to_string(schedule.lr) + "], got " +
                 std::to_string(schedule.min_lr));
  }
  if (schedule.warmup_steps < 0) {
    throw_config("train.warmup_steps must be >= 0, got " + std::to_string(schedule.warmup_steps));
  }
  // max_steps <= warmup_steps is allowed (a short smoke run of a long deck): the run ends inside the warmup.
  if (schedule.max_steps < 1) throw_config("train.steps must be >= 1, got " + std::to_string(schedule.max_steps));
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
