#include "hsdp/comm/watchdog.hpp"

#include <sched.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::comm {

namespace {
void pause_briefly(double waited_s) {
  // 4 ranks share 2 cores in tests, and a real job may oversubscribe too: never spin hot.
  if (waited_s < 1e-3) {
    sched_yield();
  } else {
    const timespec pause{0, 50'000};
    nanosleep(&pause, nullptr);
  }
}
}  // namespace

void WatchedOp::wait() {
  const Stopwatch watch;
  while (!test()) {
    const double waited = watch.seconds();
    if (waited > id_.timeout_s) fire_watchdog();
    pause_briefly(waited);
  }
}

bool WatchedOp::test() {
  if (!done_ && poll()) done_ = true;
  return done_;
}

std::string WatchedOp::describe() const {
  return Logger::concat(to_string(id_.collective), " #", id_.sequence, " on group '", id_.group, "' (",
                        id_.backend.empty() ? "" : id_.backend + ", ", id_.size, " ranks, this is rank ", id_.rank,
                        ")");
}

void WatchedOp::fire_watchdog() const {
  id_.logger->any_rank("comm watchdog: ", describe(), " did not complete within ", id_.timeout_s,
                       " s; aborting the job (exit ", kExitComm, ")");
  // Give the other ranks' watchdogs a moment to print their own line before the job goes down.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  before_abort();
  MpiEnvironment::abort_job(kExitComm);
}

void WatchedOp::fail(const std::string& reason) const {
  id_.logger->any_rank("comm error: ", describe(), " failed: ", reason, "; aborting the job (exit ", kExitComm, ")");
  before_abort();
  MpiEnvironment::abort_job(kExitComm);
}

}  // namespace hsdp::comm
