#pragma once
// Monotonic timing: steady_clock only, never the wall clock.
#include <chrono>

namespace hsdp {

inline double monotonic_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(monotonic_seconds()) {}
  void restart() { start_ = monotonic_seconds(); }
  double seconds() const { return monotonic_seconds() - start_; }
  double milliseconds() const { return 1e3 * seconds(); }

 private:
  double start_;
};

// Adds the time of a scope to an accumulator (e.g. compute ms or comm ms of a step).
class ScopedTimer {
 public:
  explicit ScopedTimer(double& accumulator_ms) : accumulator_ms_(accumulator_ms) {}
  ~ScopedTimer() { accumulator_ms_ += watch_.milliseconds(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& accumulator_ms_;
  Stopwatch watch_;
};

}  // namespace hsdp
