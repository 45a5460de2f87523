#include "hsdp/core/stall.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp {

namespace {

using Clock = std::chrono::steady_clock;

void default_handler(const StallReport& r) {
  std::cerr << "hsdp: stall watch: " << r.phase << ": " << r.operation << " did not finish within " << r.limit_s
            << " s (" << r.limit_key << "); exiting (exit " << kExitComm << ")" << std::endl;
  std::_Exit(kExitComm);
}

// The phases and the open operation, and the thread that watches the operation's deadline.
class Monitor {
 public:
  void push_phase(std::string name, double limit_s, std::string limit_key, bool notices) {
    const std::lock_guard lock(mutex_);
    phases_.push_back({std::move(name), limit_s, std::move(limit_key), notices});
  }
  void pop_phase() {
    const std::lock_guard lock(mutex_);
    phases_.pop_back();
  }
  void push_operation(std::string operation) {
    std::unique_lock lock(mutex_);
    Operation op{std::move(operation), phases_.empty() ? 0.0 : phases_.back().limit_s, std::nullopt,
                 std::nullopt,         !phases_.empty() && phases_.back().notices,     {}};
    restart(op);
    operations_.push_back(std::move(op));
    if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token stop) { watch(stop); });
    lock.unlock();
    wake_.notify_all();
  }
  // An enclosing operation's clock restarts: the inner one finishing was progress.
  void pop_operation() {
    {
      const std::lock_guard lock(mutex_);
      operations_.pop_back();
      if (!operations_.empty()) restart(operations_.back());
    }
    wake_.notify_all();
  }
  void set_handler(StallHandler handler) {
    const std::lock_guard lock(mutex_);
    handler_ = std::move(handler);
  }
  std::string context() {
    const std::lock_guard lock(mutex_);
    if (phases_.empty()) return "";
    std::string text = phases_.back().name;
    if (!operations_.empty()) text += " (" + operations_.back().name + ")";
    return text;
  }

 private:
  struct Phase {
    std::string name;
    double limit_s;
    std::string limit_key;
    bool notices;
  };
  struct Operation {
    std::string name;
    double limit_s;
    std::optional<Clock::time_point> deadline;     // none: unwatched
    std::optional<Clock::time_point> next_notice;  // none: no notices
    bool notices;
    Clock::time_point started;
  };

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  static double notice_every(const Operation& op) { return std::clamp(op.limit_s / 4, 1.0, 30.0); }

  static void restart(Operation& op) {
    if (op.limit_s <= 0) return;
    op.started = Clock::now();
    op.deadline = op.started + seconds(op.limit_s);
    if (op.notices) op.next_notice = op.started + seconds(notice_every(op));
  }

  void watch(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
      std::optional<Clock::time_point> deadline;
      if (!operations_.empty()) deadline = operations_.back().deadline;
      if (!deadline) {
        wake_.wait(lock, stop, [&] { return !operations_.empty() && operations_.back().deadline.has_value(); });
        continue;
      }
      const std::size_t depth = operations_.size();
      const std::optional<Clock::time_point> notice = operations_.back().next_notice;
      const Clock::time_point wake = notice ? std::min(*notice, *deadline) : *deadline;
      const bool changed = wake_.wait_until(
          lock, stop, wake, [&] { return operations_.size() != depth || operations_.back().deadline != deadline; });
      if (changed) continue;
      if (stop.stop_requested()) return;
      if (Operation& op = operations_.back(); op.next_notice && Clock::now() < *deadline) {
        const double waited = std::chrono::duration<double>(Clock::now() - op.started).count();
        const Phase* phase = phases_.empty() ? nullptr : &phases_.back();
        std::cerr << "hsdp: " << (phase ? phase->name : "") << ": still " << op.name << " after "
                  << static_cast<long long>(waited + 0.5) << " s (a rank that has not arrived, or slow work; the job "
                  << "ends at " << op.limit_s << " s: " << (phase ? phase->limit_key : "") << ")" << std::endl;
        op.next_notice = *op.next_notice + seconds(notice_every(op));
        continue;
      }
      const StallReport report{phases_.empty() ? "" : phases_.back().name, operations_.back().name,
                               operations_.back().limit_s, phases_.empty() ? "" : phases_.back().limit_key};
      const StallHandler handler = handler_ ? handler_ : StallHandler(default_handler);
      lock.unlock();
      handler(report);  // does not return
      std::_Exit(kExitComm);
    }
  }

  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::vector<Phase> phases_;
  std::vector<Operation> operations_;
  StallHandler handler_;
  std::jthread thread_;  // last: stopped and joined before the rest is destroyed
};

Monitor& monitor() {
  static Monitor instance;
  return instance;
}

}  // namespace

void set_stall_handler(StallHandler handler) { monitor().set_handler(handler); }

StallPhase::StallPhase(std::string name, double limit_s, std::string limit_key, bool notices) {
  monitor().push_phase(std::move(name), limit_s, std::move(limit_key), notices);
}
StallPhase::~StallPhase() { monitor().pop_phase(); }

StallGuard::StallGuard(std::string operation) { monitor().push_operation(std::move(operation)); }
StallGuard::~StallGuard() { monitor().pop_operation(); }

std::string stall_context() { return monitor().context(); }

}  // namespace hsdp
