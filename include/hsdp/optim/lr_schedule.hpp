#pragma once
// Learning rate per step (0-based), as in llm.c:
//   step < warmup_steps:                lr * (step + 1) / warmup_steps          (linear warmup; reaches lr at
//                                                                                step warmup_steps - 1)
//   warmup_steps <= step < max_steps:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * r)),
//                                       r = (step - warmup_steps) / (max_steps - warmup_steps)
//   step >= max_steps:                  min_lr
// So step warmup_steps gives lr, the midpoint (warmup_steps + max_steps) / 2 gives (lr + min_lr) / 2, and
// step max_steps gives min_lr.
#include <cstdint>

namespace hsdp::optim {

struct CosineSchedule {
  double lr = 6e-4;
  double min_lr = 6e-5;
  std::int64_t warmup_steps = 0;
  std::int64_t max_steps = 1;
};

// Throws a config Error naming the key (train.lr, train.min_lr, train.warmup_steps, train.steps).
void validate(const CosineSchedule& schedule);

double learning_rate(const CosineSchedule& schedule, std::int64_t step);

}  // namespace hsdp::optim
